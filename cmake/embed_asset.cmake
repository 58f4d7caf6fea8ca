# Turns a file into a C++ source defining `std::string_view NAMESPACE::FUNCTION()`
# that returns the file's bytes exactly. The bytes are written as an unsigned char
# array, so any content embeds (no escaping, no string-literal length limit).
#   cmake -DINPUT=file -DOUTPUT=file.cc -DNAMESPACE=ns -DFUNCTION=name -P embed_asset.cmake
foreach(var INPUT OUTPUT NAMESPACE FUNCTION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_asset.cmake: -D${var}=... is required")
  endif()
endforeach()

file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
# 0xNN, per byte; a line break every 16 bytes keeps the file readable by tools.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REPEAT "0x[0-9a-f][0-9a-f]," 16 line)  # CMake's regex has no {16}
string(REGEX REPLACE "(${line})" "\\1\n    " bytes "${bytes}")
get_filename_component(input_name "${INPUT}" NAME)

file(WRITE "${OUTPUT}" "// Generated from ${input_name} by embed_asset.cmake: do not edit.
#include <cstddef>
#include <string_view>

namespace ${NAMESPACE} {

namespace {
// One extra zero byte so that an empty file still makes a valid array.
constexpr unsigned char kBytes[] = {
    ${bytes}0x00};
constexpr std::size_t kSize = ${size};
}  // namespace

std::string_view ${FUNCTION}() {
  return std::string_view(reinterpret_cast<const char*>(kBytes), kSize);
}

}  // namespace ${NAMESPACE}
")
