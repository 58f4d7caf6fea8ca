// JsonCursor: a streaming JSON pull parser over a ByteSource.
//
// Reads one token at a time, so memory stays bounded however long the input
// or a line is: strings are capped (kMaxString), nesting is capped (kMaxDepth),
// values read whole are capped (kMaxValue; both caps can be raised with
// Limits), skipped values are not kept,
// strings must be valid UTF-8, and numbers are returned as their text.
// It counts lines as it goes, so callers can name the line of a problem.
// Errors are returned as a problem string; the caller adds file, line, field.
//
// Why not nlohmann::json's parser: it is slower here and does not bound memory.
// Reading every field of every event of a 1M-line, 32-wide kvtrace (Release
// build, 2-core machine; README's benchmark table), KvTraceReader over this
// cursor reads 2.68M lines/s against 1.15M for nlohmann's SAX interface and
// 0.75M for its DOM, and a SAX handler still receives each string whole, however
// long. Measure again with
//   build/kvtrace_gen --events 1000000 --batch 32 --seed 1 > trace.jsonl
//   cmake --build build --target bench_parse && build/bench_parse trace.jsonl
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "io/byte_source.h"

namespace kvreplay {

class JsonCursor {
 public:
  static constexpr std::size_t kMaxString = 4096;
  static constexpr std::size_t kMaxNumber = 64;
  static constexpr int kMaxDepth = 64;
  static constexpr std::size_t kMaxValue = 1 << 20;

  // Caps for whole documents read with read_value (compare's reports), larger
  // than a trace's per-event caps.
  struct Limits {
    std::size_t max_string = kMaxString;
    std::size_t max_value = kMaxValue;
  };

  explicit JsonCursor(ByteSource& source) : JsonCursor(source, Limits{}) {}
  JsonCursor(ByteSource& source, const Limits& limits) : source_(source), limits_(limits) {
    pos_ = source.begin();
    end_ = source.end();
  }

  // Skips whitespace (counting newlines) and returns the next byte without
  // consuming it, or -1 at end of input.
  int peek();
  // Like peek, but stops at a newline (returns '\n' without consuming it).
  int peek_in_line();
  // At the start of the input: skips a UTF-8 byte order mark, if there is one.
  void skip_byte_order_mark();
  // Consumes the byte peek() returned.
  void skip() { ++pos_; }
  // The line of the byte peek() returned (at the end of input: the last line
  // with content, as trailing newlines are not counted).
  std::uint64_t line() const { return line_; }
  // Set when the source failed (I/O, corrupt or truncated gzip).
  const std::string& source_error() const { return source_.error(); }

  // REQUIRES peek() == '"'. Reads a string into `out` (escapes decoded).
  Result<void, std::string> read_string(std::string& out);
  // Reads a number's text (JSON grammar checked) into `out`.
  Result<void, std::string> read_number(std::string& out);
  // Fast path for the common case, after peek(): a plain non-negative integer
  // of at most 19 digits, wholly inside the buffer and followed by a byte that
  // cannot continue a number. Consumes it and returns its value; otherwise
  // consumes nothing and returns false (read_number then decides).
  bool read_plain_uint(std::uint64_t& value) {
    const char* p = pos_;
    if (p == end_ || *p < '0' || *p > '9') return false;
    if (*p == '0' && p + 1 != end_ && p[1] >= '0' && p[1] <= '9') return false;
    std::uint64_t v = 0;
    const char* limit = p + 19 < end_ ? p + 19 : end_;
    while (p != limit && *p >= '0' && *p <= '9')
      v = v * 10 + static_cast<std::uint64_t>(*p++ - '0');
    if (p == end_ || (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E') return false;
    pos_ = p;
    value = v;
    return true;
  }
  // Reads any value into a json document (for small objects such as config;
  // at most Limits::max_value bytes of it, roughly as it is held in memory).
  // Duplicate keys and numbers out of a double's range are errors.
  Result<void, std::string> read_value(nlohmann::json& out, int depth = 0);
  // Skips any value (checking its grammar), keeping nothing, however large.
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
  // read_value (out set; `budget` bytes left) or skip_value (out null).
  Result<void, std::string> parse_value(nlohmann::json* out, int depth, std::size_t& budget);

  ByteSource& source_;
  Limits limits_;
  const char* pos_ = nullptr;
  const char* end_ = nullptr;
  std::uint64_t line_ = 1;
  std::uint64_t pending_lines_ = 0;  // newlines skipped since the last token
};

}  // namespace kvreplay
