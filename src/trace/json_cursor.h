// JsonCursor: a streaming JSON pull parser over a ByteSource.
//
// Reads one token at a time, so memory stays bounded however long the input
// or a line is: strings are capped (kMaxString), nesting is capped (kMaxDepth),
// strings must be valid UTF-8, and numbers are returned as their text.
// It counts lines as it goes, so callers can name the line of a problem.
// Errors are returned as a problem string; the caller adds file, line, field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "trace/byte_source.h"

namespace kvreplay {

class JsonCursor {
 public:
  static constexpr std::size_t kMaxString = 4096;
  static constexpr std::size_t kMaxNumber = 64;
  static constexpr int kMaxDepth = 64;

  explicit JsonCursor(ByteSource& source) : source_(source) {
    pos_ = source.begin();
    end_ = source.end();
  }

  // Skips whitespace (counting newlines) and returns the next byte without
  // consuming it, or -1 at end of input.
  int peek();
  // Like peek, but stops at a newline (returns '\n' without consuming it).
  int peek_in_line();
  // Consumes the byte peek() returned.
  void skip() { ++pos_; }
  std::uint64_t line() const { return line_; }
  // Set when the source failed (I/O, corrupt or truncated gzip).
  const std::string& source_error() const { return source_.error(); }

  // REQUIRES peek() == '"'. Reads a string into `out` (escapes decoded).
  Result<void, std::string> read_string(std::string& out);
  // Reads a number's text (JSON grammar checked) into `out`.
  Result<void, std::string> read_number(std::string& out);
  // Reads any value into a json document (for small objects such as config).
  Result<void, std::string> read_value(nlohmann::json& out, int depth = 0);
  // Skips any value.
  Result<void, std::string> skip_value(int depth = 0);
  // Describes the next token for messages: "'x'", "end of input".
  std::string describe_next();

 private:
  // Returns the next byte, refilling as needed; -1 at end of input.
  int get() {
    if (pos_ == end_ && !refill()) return -1;
    return static_cast<unsigned char>(*pos_++);
  }
  bool refill();
  Result<void, std::string> read_literal(std::string_view word);

  ByteSource& source_;
  const char* pos_ = nullptr;
  const char* end_ = nullptr;
  std::uint64_t line_ = 1;
};

}  // namespace kvreplay
