// InputError: bad input, reported as "FILE:LINE: FIELD: problem" and exit code 2.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvreplay {

struct InputError {
  std::string file;
  std::uint64_t line = 0;  // 0 when the problem is not tied to a line
  std::string field;       // the field at fault, or "json" for syntax errors
  std::string problem;

  // One line: control characters the input put into a field or problem (a key
  // or id with an escaped newline, say) are written as escapes. A field named
  // by the empty key "" is written as "" (not as nothing between the colons).
  std::string to_string() const {
    std::string_view shown = field.empty() ? std::string_view("\"\"") : std::string_view(field);
    std::string text = line == 0 ? fmt::format("{}: {}: {}", file, shown, problem)
                                 : fmt::format("{}:{}: {}: {}", file, line, shown, problem);
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
      auto byte = static_cast<unsigned char>(c);
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (byte < 0x20 || byte == 0x7F) {
        out += fmt::format("\\x{:02x}", byte);
      } else {
        out.push_back(c);
      }
    }
    return out;
  }
};

template <class T>
using InputResult = Result<T, InputError>;
using InputStatus = Result<void, InputError>;

}  // namespace kvreplay
