#include "sim/request_reader.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "sim/json_text.h"
#include "trace/byte_source.h"
#include "trace/field_set.h"
#include "trace/json_cursor.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kMaxCount = 0xFFFFFFFFull;
constexpr std::uint64_t kMaxTimestampMs = std::uint64_t{1} << 53;  // exact as a double
constexpr std::uint32_t kMooncakeBlockTokens = 512;

using Problem = Unexpected<std::string>;

// ---------------------------------------------------------------------------
// JSON keys of both JSON Lines formats.

enum Field : std::uint32_t {
  kArrival = 1u << 0,
  kId = 1u << 1,
  kPrompt = 1u << 2,
  kOutput = 1u << 3,
  kN = 1u << 4,
  kPrefix = 1u << 5,
  kPrefixTokens = 1u << 6,
  kHashBlockTokens = 1u << 7,
  kTimestamp = 1u << 8,
  kInputLength = 1u << 9,
  kOutputLength = 1u << 10,
  kHashIds = 1u << 11,
};

constexpr std::uint32_t kNativeFields =
    kArrival | kId | kPrompt | kOutput | kN | kPrefix | kPrefixTokens | kHashBlockTokens | kHashIds;
constexpr std::uint32_t kMooncakeFields = kTimestamp | kInputLength | kOutputLength | kHashIds;

// In bit order, which is also the order messages list them in.
constexpr std::array<std::string_view, 12> kFieldNames{
    "arrival",   "id",           "prompt",        "output",
    "n",         "prefix",       "prefix_tokens", "hash_block_tokens",
    "timestamp", "input_length", "output_length", "hash_ids"};

std::uint32_t field_bit(std::string_view key) {
  return kvreplay::field_bit(kFieldNames, key);
}
std::string fields_of(std::uint32_t mask) {
  return field_list(kFieldNames, mask);
}
std::string_view first_field(std::uint32_t mask) {
  return kvreplay::first_field(kFieldNames, mask);
}

// Names the next value for "expected X, got Y" messages.
std::string describe_value(JsonCursor& cursor) {
  int c = cursor.peek();
  switch (c) {
    case '"': return "a string";
    case '[': return "an array";
    case '{': return "an object";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return "a number";
      return cursor.describe_next();
  }
}

// ---------------------------------------------------------------------------
// Text helpers for CSV values.

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A value quoted for a message, shortened when long.
std::string quoted(std::string_view text) {
  constexpr std::size_t kShown = 40;
  std::string out;
  if (text.size() > kShown) {
    out = fmt::format("'{}...'", text.substr(0, kShown));
  } else {
    out = fmt::format("'{}'", text);
  }
  return out;
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

unsigned days_in_month(std::int64_t y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

struct Instant {
  std::int64_t seconds = 0;  // since 1970-01-01T00:00:00Z
  std::int64_t nanos = 0;    // 0..999'999'999
  bool operator<(const Instant& other) const {
    return seconds != other.seconds ? seconds < other.seconds : nanos < other.nanos;
  }
};

// Parses "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" exactly.
Result<Instant, std::string> parse_datetime(std::string_view text) {
  const std::string expected = fmt::format(
      "expected a date and time like 2023-11-16 18:15:46.6805900, got {}", quoted(text));
  std::size_t at = 0;
  auto number = [&](std::size_t width, unsigned& value) {
    if (at + width > text.size()) return false;
    value = 0;
    for (std::size_t i = 0; i < width; ++i) {
      char c = text[at + i];
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    at += width;
    return true;
  };
  auto literal = [&](char c) {
    if (at >= text.size() || text[at] != c) return false;
    ++at;
    return true;
  };
  unsigned year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!number(4, year) || !literal('-') || !number(2, month) || !literal('-') || !number(2, day)) {
    return Problem{expected};
  }
  if (!literal(' ') && !literal('T')) return Problem{expected};
  if (!number(2, hour) || !literal(':') || !number(2, minute) || !literal(':') ||
      !number(2, second)) {
    return Problem{expected};
  }
  std::int64_t nanos = 0;
  if (literal('.')) {
    std::size_t digits = 0;
    std::int64_t scale = 100'000'000;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (++digits > 9)
        return Problem{fmt::format("{}: more than 9 fraction digits", quoted(text))};
      nanos += (text[at] - '0') * scale;
      scale /= 10;
      ++at;
    }
    if (digits == 0) return Problem{expected};
  }
  std::int64_t offset = 0;  // seconds east of UTC
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    bool east = text[at] == '+';
    ++at;
    unsigned oh = 0, om = 0;
    if (!number(2, oh) || !literal(':') || !number(2, om) || oh > 23 || om > 59) {
      return Problem{expected};
    }
    offset = (east ? 1 : -1) * static_cast<std::int64_t>(oh * 3600 + om * 60);
  } else {
    (void)literal('Z');
  }
  if (at != text.size()) return Problem{expected};
  if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
      minute > 59 || second > 59) {
    return Problem{fmt::format("{} is not a valid date and time", quoted(text))};
  }
  Instant instant;
  instant.seconds = days_from_civil(year, month, day) * 86400 +
                    static_cast<std::int64_t>(hour * 3600 + minute * 60 + second) - offset;
  instant.nanos = nanos;
  return instant;
}

// Seconds from `origin` to `t` (t >= origin), as exactly as a double allows.
double seconds_between(const Instant& origin, const Instant& t) {
  std::int64_t ds = t.seconds - origin.seconds;
  std::int64_t dns = t.nanos - origin.nanos;
  if (ds < (std::int64_t{1} << 33)) {
    return static_cast<double>(ds * 1'000'000'000 + dns) / 1e9;
  }
  return static_cast<double>(ds) + static_cast<double>(dns) / 1e9;
}

}  // namespace

// ---------------------------------------------------------------------------

namespace {

constexpr EnumName<RequestFormat> kRequestFormatNames[] = {
    {RequestFormat::kNative, "native"},
    {RequestFormat::kMooncake, "mooncake"},
    {RequestFormat::kAzure, "azure"},
    {RequestFormat::kBurstGpt, "burstgpt"},
};
static_assert(enum_names_unique(kRequestFormatNames));

}  // namespace

std::string_view to_string(RequestFormat format) {
  return enum_name(kRequestFormatNames, format);
}

std::optional<RequestFormat> parse_request_format(std::string_view name) {
  return enum_parse(kRequestFormatNames, name);
}

std::vector<std::string> request_format_names() {
  return enum_names(kRequestFormatNames);
}

struct RequestReader::Impl {
  Impl(std::unique_ptr<ByteSource> byte_source, std::string file_name)
      : source(std::move(byte_source)), name(std::move(file_name)) {
    pos = source->begin();
    end = source->end();
  }

  std::unique_ptr<ByteSource> source;
  std::string name;
  RequestFormat format = RequestFormat::kNative;
  bool format_known = false;
  bool done = false;
  std::uint64_t skipped = 0;

  // Raw bytes (detection and CSV). `line` is the line of `pos`.
  const char* pos = nullptr;
  const char* end = nullptr;
  std::uint64_t line = 1;

  // JSON Lines: the cursor starts at the first record, on line `base_line`.
  std::optional<JsonCursor> cursor;
  std::uint64_t base_line = 1;
  bool has_pending = false;
  Request pending;
  std::string key;
  std::string scalar;

  // Arrival order.
  bool has_last = false;
  double last_arrival = 0.0;
  std::uint64_t last_timestamp_ms = 0;
  Instant origin;
  Instant last_instant;
  std::string last_time_text;

  // CSV: the current row's bytes and field spans, and the header's mapping.
  std::string row;
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::uint64_t row_line = 0;
  std::size_t columns = 0;
  std::size_t col_time = 0, col_prompt = 0, col_output = 0;

  // ---- errors -------------------------------------------------------------

  InputError error_at(std::uint64_t at, std::string_view field, std::string problem) const {
    return InputError{name, at, std::string(field), std::move(problem)};
  }
  std::uint64_t json_line() const { return cursor->line() + base_line - 1; }
  InputError json_error(std::string_view field, std::string problem) const {
    return error_at(json_line(), field, std::move(problem));
  }
  // Wraps a cursor problem, preferring the source's own error (e.g. truncated gzip).
  InputError cursor_error(std::string_view field, const std::string& problem) const {
    if (!source->error().empty()) return json_error("file", source->error());
    return json_error(field, problem);
  }

  // ---- raw bytes ----------------------------------------------------------

  bool refill_raw() {
    source->advance_to(pos);
    bool more = source->refill();
    pos = source->begin();
    end = source->end();
    return more && pos != end;
  }
  int peek_raw() {
    if (pos == end && !refill_raw()) return -1;
    return static_cast<unsigned char>(*pos);
  }

  // ---- detection ----------------------------------------------------------

  InputStatus init(std::optional<RequestFormat> forced) {
    // A UTF-8 byte-order mark.
    while (end - pos < 3 && refill_raw()) {
    }
    if (end - pos >= 3 && static_cast<unsigned char>(pos[0]) == 0xEF &&
        static_cast<unsigned char>(pos[1]) == 0xBB && static_cast<unsigned char>(pos[2]) == 0xBF) {
      pos += 3;
    }
    // Blank lines before the first record.
    int c = peek_raw();
    std::uint64_t blank_lines = 0;
    while (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (c == '\n') ++blank_lines;
      ++pos;
      c = peek_raw();
    }
    if (c < 0) {
      if (!source->error().empty()) return Unexpected{error_at(1, "file", source->error())};
      return Unexpected{error_at(1, "file", "empty input (no requests)")};
    }
    line = 1 + blank_lines;
    bool json = c == '{';
    if (forced) {
      format = *forced;
      format_known = true;
      json = format == RequestFormat::kNative || format == RequestFormat::kMooncake;
    }
    if (json) {
      source->advance_to(pos);
      cursor.emplace(*source);
      base_line = line;
      if (format_known) return {};
      // Native and Mooncake records are told apart by the first record's keys.
      if (auto status = read_json_line(pending); !status) return status;
      has_pending = true;
      return {};
    }
    return read_csv_header(forced.has_value());
  }

  // ---- JSON ---------------------------------------------------------------

  InputResult<std::uint64_t> read_uint(std::string_view field, std::uint64_t min,
                                       std::uint64_t max) {
    JsonCursor& in = *cursor;
    int c = in.peek();
    if (c != '-' && (c < '0' || c > '9')) {
      return Unexpected{
          json_error(field, fmt::format("expected an integer, got {}", describe_value(in)))};
    }
    if (auto r = in.read_number(scalar); !r) return Unexpected{cursor_error(field, r.error())};
    if (scalar.find_first_of(".eE") != std::string::npos) {
      return Unexpected{json_error(field, fmt::format("expected an integer, got {}", scalar))};
    }
    if (scalar[0] == '-') {
      if (scalar == "-0") return Unexpected{json_error(field, "expected an integer, got -0")};
      return Unexpected{
          json_error(field, fmt::format("{} is negative (must be >= {})", scalar, min))};
    }
    std::uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(scalar.data(), scalar.data() + scalar.size(), value);
    if (ec != std::errc{} || ptr != scalar.data() + scalar.size() || value > max) {
      return Unexpected{
          json_error(field, fmt::format("{} is too large (at most {})", scalar, max))};
    }
    if (value < min)
      return Unexpected{json_error(field, fmt::format("{} (must be >= {})", scalar, min))};
    return value;
  }

  InputResult<double> read_seconds(std::string_view field) {
    JsonCursor& in = *cursor;
    int c = in.peek();
    if (c != '-' && (c < '0' || c > '9')) {
      return Unexpected{
          json_error(field, fmt::format("expected a number, got {}", describe_value(in)))};
    }
    if (auto r = in.read_number(scalar); !r) return Unexpected{cursor_error(field, r.error())};
    double value = 0.0;
    auto [ptr, ec] = std::from_chars(scalar.data(), scalar.data() + scalar.size(), value);
    if (ec != std::errc{} || ptr != scalar.data() + scalar.size() || !std::isfinite(value)) {
      return Unexpected{json_error(field, fmt::format("{} is out of range", scalar))};
    }
    if (value < 0) {
      return Unexpected{json_error(field, fmt::format("{} is negative (must be >= 0)", scalar))};
    }
    return value + 0.0;  // -0 -> 0
  }

  // Copies any JSON value as compact text into `out` (nullptr: skips it), with
  // memory bounded by the cursor's caps and, when copying, kMaxField bytes.
  Result<void, std::string> copy_value(std::string* out, int depth) {
    JsonCursor& in = *cursor;
    if (depth >= JsonCursor::kMaxDepth) {
      return Problem{fmt::format("nested deeper than {} levels", JsonCursor::kMaxDepth)};
    }
    auto put = [&](std::string_view text) -> bool {
      if (out == nullptr) return true;
      out->append(text);
      return out->size() <= kMaxField;
    };
    auto put_string = [&]() -> bool {
      if (out == nullptr) return true;
      append_json_string(*out, scalar);
      return out->size() <= kMaxField;
    };
    const std::string too_long = fmt::format("longer than {} bytes as compact JSON", kMaxField);
    int c = in.peek();
    if (c == '{' || c == '[') {
      const bool object = c == '{';
      const char close = object ? '}' : ']';
      in.skip();
      if (!put(object ? "{" : "[")) return Problem{too_long};
      if (in.peek() == close) {
        in.skip();
        if (!put(object ? "}" : "]")) return Problem{too_long};
        return {};
      }
      for (;;) {
        if (object) {
          if (in.peek() != '"')
            return Problem{fmt::format("expected a key, got {}", in.describe_next())};
          if (auto r = in.read_string(scalar); !r) return r;
          if (!put_string()) return Problem{too_long};
          if (in.peek() != ':')
            return Problem{fmt::format("expected ':', got {}", in.describe_next())};
          in.skip();
          if (!put(":")) return Problem{too_long};
        }
        if (auto r = copy_value(out, depth + 1); !r) return r;
        int next = in.peek();
        if (next < 0) return Problem{"unexpected end of input"};
        if (next != ',' && next != close) {
          return Problem{fmt::format("expected ',' or '{}' in {}, got {}", close,
                                     object ? "object" : "array", in.describe_next())};
        }
        in.skip();
        if (!put(next == ',' ? "," : (object ? "}" : "]"))) return Problem{too_long};
        if (next == close) return {};
      }
    }
    if (c == '"') {
      if (auto r = in.read_string(scalar); !r) return r;
      if (!put_string()) return Problem{too_long};
      return {};
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      if (auto r = in.read_number(scalar); !r) return r;
      if (!put(scalar)) return Problem{too_long};
      return {};
    }
    if (c == 't' || c == 'f' || c == 'n') {
      nlohmann::json literal;
      if (auto r = in.read_value(literal, depth); !r) return r;
      if (!put(literal.dump())) return Problem{too_long};
      return {};
    }
    if (c < 0) return Problem{"unexpected end of input"};
    return Problem{fmt::format("unexpected {}", in.describe_next())};
  }

  InputStatus read_hash_ids(std::vector<std::uint64_t>& ids) {
    JsonCursor& in = *cursor;
    ids.clear();
    if (in.peek() != '[') {
      return Unexpected{
          json_error("hash_ids", fmt::format("expected an array, got {}", describe_value(in)))};
    }
    in.skip();
    if (in.peek() == ']') {
      in.skip();
      return {};
    }
    for (;;) {
      auto value = read_uint("hash_ids", 0, std::numeric_limits<std::uint64_t>::max());
      if (!value) return Unexpected{value.error()};
      if (ids.size() >= kMaxHashIds) {
        return Unexpected{json_error("hash_ids", fmt::format("more than {} entries", kMaxHashIds))};
      }
      ids.push_back(value.value());
      int sep = in.peek();
      if (sep < 0) return Unexpected{cursor_error("hash_ids", "unexpected end of input")};
      if (sep != ',' && sep != ']') {
        return Unexpected{
            json_error("hash_ids", fmt::format("expected ',' or ']', got {}", in.describe_next()))};
      }
      in.skip();
      if (sep == ']') return {};
    }
  }

  // Reads one record and checks that nothing follows it on its line.
  InputStatus read_json_line(Request& out) {
    if (auto status = read_json_record(out); !status) return status;
    int after = cursor->peek_in_line();
    if (after >= 0 && after != '\n') {
      return Unexpected{json_error(
          "json",
          fmt::format("expected end of line after the record, got {}", cursor->describe_next()))};
    }
    return {};
  }

  InputStatus read_json_record(Request& out) {
    JsonCursor& in = *cursor;
    int c = in.peek();
    const std::uint64_t record_line = json_line();
    if (c != '{') {
      return Unexpected{cursor_error(
          "json", fmt::format("expected a request object, got {}", in.describe_next()))};
    }
    in.skip();
    out.line = record_line;
    out.arrival = 0.0;
    out.id.clear();
    out.prompt = 0;
    out.output = 0;
    out.n = 1;
    out.prefix.clear();
    out.prefix_tokens = 0;
    out.hash_ids.clear();
    out.hash_block_tokens = 512;
    std::uint64_t timestamp = 0;
    std::uint32_t seen = 0;
    std::string first_unknown;
    std::uint64_t first_unknown_line = 0;
    // Keys this record may carry: before the format is known, those of both.
    const std::uint32_t accepted = !format_known ? kNativeFields | kMooncakeFields
                                   : format == RequestFormat::kNative ? kNativeFields
                                                                      : kMooncakeFields;
    const bool strict = format_known && format == RequestFormat::kNative;
    if (in.peek() == '}') {
      in.skip();
    } else {
      for (;;) {
        if (in.peek() != '"') {
          return Unexpected{
              cursor_error("json", fmt::format("expected a key, got {}", in.describe_next()))};
        }
        if (auto r = in.read_string(key); !r) return Unexpected{cursor_error("json", r.error())};
        if (in.peek() != ':') {
          return Unexpected{
              cursor_error(key, fmt::format("expected ':', got {}", in.describe_next()))};
        }
        in.skip();
        std::uint32_t bit = field_bit(key) & accepted;
        if (bit == 0) {
          if (strict) {
            return Unexpected{json_error(
                key,
                fmt::format("unknown field (a native record takes {})", fields_of(kNativeFields)))};
          }
          if (first_unknown.empty()) {
            first_unknown = key;
            first_unknown_line = json_line();
          }
          if (auto r = copy_value(nullptr, 1); !r) return Unexpected{cursor_error(key, r.error())};
        } else {
          if (seen & bit) return Unexpected{json_error(key, "duplicate field")};
          seen |= bit;
          if (auto status = read_field(static_cast<Field>(bit), out, timestamp); !status) {
            return status;
          }
        }
        int sep = in.peek();
        if (sep < 0) {
          return Unexpected{cursor_error("json", "unexpected end of input inside a record")};
        }
        if (sep != ',' && sep != '}') {
          return Unexpected{json_error(
              "json",
              fmt::format("expected ',' or '}}' in the record, got {}", in.describe_next()))};
        }
        in.skip();
        if (sep == '}') break;
      }
    }
    if (!format_known) {
      if (auto status = decide_json_format(record_line, seen, first_unknown, first_unknown_line);
          !status) {
        return status;
      }
    }
    if (format == RequestFormat::kNative) return finish_native(record_line, seen, out);
    return finish_mooncake(record_line, seen, timestamp, out);
  }

  InputStatus read_field(Field field, Request& out, std::uint64_t& timestamp) {
    const std::string_view name_of = first_field(field);
    switch (field) {
      case kArrival: {
        auto value = read_seconds(name_of);
        if (!value) return Unexpected{value.error()};
        out.arrival = value.value();
        return {};
      }
      case kId:
        if (auto r = copy_value(&out.id, 1); !r) return Unexpected{cursor_error("id", r.error())};
        return {};
      case kPrompt:
      case kOutput:
      case kN:
      case kPrefixTokens:
      case kHashBlockTokens:
      case kInputLength:
      case kOutputLength: {
        auto value = read_uint(name_of, 1, kMaxCount);
        if (!value) return Unexpected{value.error()};
        auto v = static_cast<std::uint32_t>(value.value());
        switch (field) {
          case kPrompt:
          case kInputLength: out.prompt = v; break;
          case kOutput:
          case kOutputLength: out.output = v; break;
          case kN: out.n = v; break;
          case kPrefixTokens: out.prefix_tokens = v; break;
          default: out.hash_block_tokens = v; break;
        }
        return {};
      }
      case kPrefix: {
        JsonCursor& in = *cursor;
        if (in.peek() != '"') {
          return Unexpected{
              json_error("prefix", fmt::format("expected a string, got {}", describe_value(in)))};
        }
        if (auto r = in.read_string(out.prefix); !r)
          return Unexpected{cursor_error("prefix", r.error())};
        if (out.prefix.empty()) return Unexpected{json_error("prefix", "must not be empty")};
        return {};
      }
      case kHashIds: return read_hash_ids(out.hash_ids);
      case kTimestamp: {
        auto value = read_uint("timestamp", 0, kMaxTimestampMs);
        if (!value) return Unexpected{value.error()};
        timestamp = value.value();
        return {};
      }
    }
    return {};
  }

  InputStatus decide_json_format(std::uint64_t record_line, std::uint32_t seen,
                                 const std::string& first_unknown,
                                 std::uint64_t first_unknown_line) {
    // "id" and "hash_ids" alone do not decide: Mooncake-like files may carry an id.
    const std::uint32_t native_only = seen & kNativeFields & ~(kId | kHashIds);
    const std::uint32_t mooncake_only = seen & kMooncakeFields & ~kHashIds;
    if (native_only != 0 && mooncake_only != 0) {
      return Unexpected{
          error_at(record_line, "format",
                   fmt::format("the first record has both native ({}) and Mooncake ({}) fields; "
                               "use --format to say which it is",
                               fields_of(native_only), fields_of(mooncake_only)))};
    }
    if (mooncake_only != 0) {
      format = RequestFormat::kMooncake;
    } else if (native_only != 0 || (seen & kId) != 0) {
      format = RequestFormat::kNative;
      if (!first_unknown.empty()) {
        return Unexpected{error_at(
            first_unknown_line, first_unknown,
            fmt::format("unknown field (a native record takes {})", fields_of(kNativeFields)))};
      }
    } else if (first_unknown == "kvtrace" || first_unknown == "op") {
      return Unexpected{error_at(record_line, "format",
                                 "this is a kvtrace event trace, not a request trace "
                                 "(replay it with kvreplay replay)")};
    } else {
      return Unexpected{error_at(
          record_line, "format",
          "cannot tell native from Mooncake JSON Lines: the first record has none of arrival, "
          "prompt, output, timestamp, input_length, output_length (use --format)")};
    }
    format_known = true;
    return {};
  }

  InputStatus check_hash_count(std::uint64_t record_line, const Request& out,
                               std::string_view length_field) const {
    const std::uint64_t expected =
        (std::uint64_t{out.prompt} + out.hash_block_tokens - 1) / out.hash_block_tokens;
    if (out.hash_ids.size() != expected) {
      std::string why = fmt::format("{} entries, expected {} for {} {}", out.hash_ids.size(),
                                    expected, length_field, out.prompt);
      if (format == RequestFormat::kNative) {
        why += fmt::format(" (hash_block_tokens {})", out.hash_block_tokens);
      }
      return Unexpected{error_at(record_line, "hash_ids", std::move(why))};
    }
    return {};
  }

  InputStatus finish_native(std::uint64_t record_line, std::uint32_t seen, Request& out) {
    constexpr std::uint32_t kRequired = kArrival | kPrompt | kOutput;
    if (std::uint32_t missing = kRequired & ~seen) {
      return Unexpected{
          error_at(record_line, first_field(missing),
                   fmt::format("missing (a native record needs {})", fields_of(kRequired)))};
    }
    if ((seen & kPrefixTokens) && !(seen & kPrefix)) {
      return Unexpected{error_at(record_line, "prefix_tokens", "given without prefix")};
    }
    if ((seen & kPrefix) && !(seen & kPrefixTokens)) {
      return Unexpected{error_at(record_line, "prefix_tokens", "missing (required with prefix)")};
    }
    if (out.prefix_tokens > out.prompt) {
      return Unexpected{
          error_at(record_line, "prefix_tokens",
                   fmt::format("{} is more than prompt {}", out.prefix_tokens, out.prompt))};
    }
    if ((seen & kHashBlockTokens) && !(seen & kHashIds)) {
      return Unexpected{error_at(record_line, "hash_block_tokens", "given without hash_ids")};
    }
    if (seen & kHashIds) {
      if (auto status = check_hash_count(record_line, out, "prompt"); !status) return status;
    }
    if (!(seen & kId)) out.id = std::to_string(record_line);
    if (has_last && out.arrival < last_arrival) {
      return Unexpected{error_at(
          record_line, "arrival",
          fmt::format("{} goes backwards (previous arrival was {})", out.arrival, last_arrival))};
    }
    has_last = true;
    last_arrival = out.arrival;
    return {};
  }

  InputStatus finish_mooncake(std::uint64_t record_line, std::uint32_t seen,
                              std::uint64_t timestamp, Request& out) {
    constexpr std::uint32_t kRequired = kTimestamp | kInputLength | kOutputLength | kHashIds;
    if (std::uint32_t missing = kRequired & ~seen) {
      return Unexpected{
          error_at(record_line, first_field(missing),
                   fmt::format("missing (a Mooncake record needs {})", fields_of(kRequired)))};
    }
    out.hash_block_tokens = kMooncakeBlockTokens;
    if (auto status = check_hash_count(record_line, out, "input_length"); !status) return status;
    out.id = std::to_string(record_line);
    out.arrival = static_cast<double>(timestamp) / 1000.0;
    if (has_last && timestamp < last_timestamp_ms) {
      return Unexpected{error_at(record_line, "timestamp",
                                 fmt::format("{} goes backwards (previous timestamp was {})",
                                             timestamp, last_timestamp_ms))};
    }
    has_last = true;
    last_timestamp_ms = timestamp;
    return {};
  }

  InputResult<bool> next_json(Request& out) {
    if (has_pending) {
      out = std::move(pending);
      has_pending = false;
      return true;
    }
    if (done) return false;
    if (cursor->peek() < 0) {
      if (!source->error().empty()) return Unexpected{json_error("file", source->error())};
      done = true;
      return false;
    }
    if (auto status = read_json_line(out); !status) return Unexpected{status.error()};
    return true;
  }

  // ---- CSV ----------------------------------------------------------------

  InputError csv_source_error() const { return error_at(line, "file", source->error()); }

  // Reads the next non-blank row into row/spans. Returns false at the end.
  InputResult<bool> read_csv_row() {
    int c = peek_raw();
    while (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (c == '\n') ++line;
      ++pos;
      c = peek_raw();
    }
    if (c < 0) {
      if (!source->error().empty()) return Unexpected{csv_source_error()};
      return false;
    }
    row_line = line;
    row.clear();
    spans.clear();
    const std::string too_long = fmt::format("field longer than {} bytes", kMaxField);
    for (;;) {
      if (spans.size() >= kMaxColumns) {
        return Unexpected{
            error_at(row_line, "csv", fmt::format("more than {} fields", kMaxColumns))};
      }
      const std::size_t start = row.size();
      c = peek_raw();
      if (c == '"') {
        ++pos;
        for (;;) {
          c = peek_raw();
          if (c < 0) {
            if (!source->error().empty()) return Unexpected{csv_source_error()};
            return Unexpected{error_at(row_line, "csv", "unterminated quoted field")};
          }
          ++pos;
          if (c == '"') {
            if (peek_raw() != '"') break;
            ++pos;
          } else if (c == '\n') {
            ++line;
          }
          row.push_back(static_cast<char>(c));
          if (row.size() - start > kMaxField)
            return Unexpected{error_at(row_line, "csv", too_long)};
        }
        for (c = peek_raw(); c == ' ' || c == '\t'; c = peek_raw()) ++pos;
        if (c >= 0 && c != ',' && c != '\n' && c != '\r') {
          return Unexpected{
              error_at(line, "csv",
                       fmt::format("expected ',' or end of line after a quoted field, got {}",
                                   c >= 0x20 && c < 0x7F ? fmt::format("'{}'", static_cast<char>(c))
                                                         : fmt::format("byte 0x{:02x}", c)))};
        }
      } else {
        for (;;) {
          if (pos == end && !refill_raw()) break;
          const char* run = pos;
          while (pos != end && *pos != ',' && *pos != '\n' && *pos != '\r' && *pos != '"') ++pos;
          row.append(run, static_cast<std::size_t>(pos - run));
          if (row.size() - start > kMaxField)
            return Unexpected{error_at(row_line, "csv", too_long)};
          if (pos != end) break;
        }
        c = peek_raw();
        if (c == '"') {
          return Unexpected{
              error_at(line, "csv", "'\"' inside an unquoted field (quote the whole field)")};
        }
      }
      spans.emplace_back(start, row.size() - start);
      c = peek_raw();
      if (c == ',') {
        ++pos;
        continue;
      }
      if (c == '\r') {
        ++pos;
        c = peek_raw();
        if (c >= 0 && c != '\n') {
          return Unexpected{error_at(line, "csv", "carriage return inside an unquoted field")};
        }
      }
      if (c == '\n') {
        ++pos;
        ++line;
      } else if (c < 0 && !source->error().empty()) {
        return Unexpected{csv_source_error()};
      }
      return true;
    }
  }

  std::string_view field(std::size_t index) const {
    return std::string_view(row).substr(spans[index].first, spans[index].second);
  }

  InputStatus read_csv_header(bool forced) {
    const std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
    const std::string_view kBurstHeader =
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type";
    const std::string unknown = fmt::format(
        "unknown request trace format: expected JSON Lines records, or a CSV header "
        "{} (Azure) or {} (BurstGPT); use --format to name it",
        kAzureHeader, kBurstHeader);
    auto header = read_csv_row();
    if (!header) {
      if (forced) return Unexpected{header.error()};
      return Unexpected{error_at(line, "format", unknown)};
    }
    if (!header.value()) return Unexpected{error_at(1, "file", "empty input (no requests)")};
    const std::uint64_t header_line = row_line;
    columns = spans.size();
    std::vector<std::string> names;
    names.reserve(columns);
    for (std::size_t i = 0; i < columns; ++i) names.push_back(lower(trim(field(i))));
    auto has = [&](std::string_view wanted) {
      for (const auto& n : names) {
        if (n == wanted) return true;
      }
      return false;
    };
    if (!forced) {
      if (has("contexttokens") || has("generatedtokens")) {
        format = RequestFormat::kAzure;
      } else if (has("request tokens") || has("response tokens")) {
        format = RequestFormat::kBurstGpt;
      } else {
        return Unexpected{error_at(header_line, "format", unknown)};
      }
      format_known = true;
    }
    struct Column {
      std::string_view name;
      std::size_t* index;
    };
    const bool azure = format == RequestFormat::kAzure;
    const std::array<Column, 3> wanted =
        azure ? std::array<Column, 3>{{{"TIMESTAMP", &col_time},
                                       {"ContextTokens", &col_prompt},
                                       {"GeneratedTokens", &col_output}}}
              : std::array<Column, 3>{{{"Timestamp", &col_time},
                                       {"Request tokens", &col_prompt},
                                       {"Response tokens", &col_output}}};
    for (const Column& column : wanted) {
      const std::string key_name = lower(column.name);
      std::size_t found = columns;
      for (std::size_t i = 0; i < columns; ++i) {
        if (names[i] != key_name) continue;
        if (found != columns) {
          return Unexpected{error_at(header_line, "header",
                                     fmt::format("column '{}' appears twice", column.name))};
        }
        found = i;
      }
      if (found == columns) {
        return Unexpected{error_at(
            header_line, "header",
            fmt::format("no column '{}' (an {} trace's header is {})", column.name,
                        azure ? "Azure" : "BurstGPT", azure ? kAzureHeader : kBurstHeader))};
      }
      *column.index = found;
    }
    return {};
  }

  InputResult<std::uint32_t> csv_uint(std::size_t column, std::string_view field_name,
                                      std::uint64_t min) const {
    std::string_view text = trim(field(column));
    if (text.empty()) {
      return Unexpected{error_at(row_line, field_name, "empty (expected an integer)")};
    }
    if (text[0] == '-' && all_digits(text.substr(1))) {
      return Unexpected{
          error_at(row_line, field_name, fmt::format("{} is negative (must be >= {})", text, min))};
    }
    if (!all_digits(text)) {
      return Unexpected{
          error_at(row_line, field_name, fmt::format("expected an integer, got {}", quoted(text)))};
    }
    std::uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || ptr != text.data() + text.size() || value > kMaxCount) {
      return Unexpected{error_at(row_line, field_name,
                                 fmt::format("{} is too large (at most {})", text, kMaxCount))};
    }
    if (value < min) {
      return Unexpected{
          error_at(row_line, field_name, fmt::format("{} (must be >= {})", text, min))};
    }
    return static_cast<std::uint32_t>(value);
  }

  InputResult<double> csv_seconds(std::size_t column, std::string_view field_name) const {
    std::string_view text = trim(field(column));
    if (text.empty())
      return Unexpected{error_at(row_line, field_name, "empty (expected a number)")};
    const char first = text[0] == '-' ? (text.size() > 1 ? text[1] : '\0') : text[0];
    double value = 0.0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if ((first < '0' || first > '9') && first != '.') ec = std::errc::invalid_argument;
    if (ec == std::errc::result_out_of_range || (ec == std::errc{} && !std::isfinite(value))) {
      return Unexpected{error_at(row_line, field_name, fmt::format("{} is out of range", text))};
    }
    if (ec != std::errc{} || ptr != text.data() + text.size()) {
      return Unexpected{
          error_at(row_line, field_name, fmt::format("expected a number, got {}", quoted(text)))};
    }
    if (value < 0) {
      return Unexpected{
          error_at(row_line, field_name, fmt::format("{} is negative (must be >= 0)", text))};
    }
    return value + 0.0;
  }

  InputResult<bool> next_csv(Request& out) {
    const bool azure = format == RequestFormat::kAzure;
    const std::string_view time_name = azure ? "TIMESTAMP" : "Timestamp";
    const std::string_view prompt_name = azure ? "ContextTokens" : "Request tokens";
    const std::string_view output_name = azure ? "GeneratedTokens" : "Response tokens";
    for (;;) {
      if (done) return false;
      auto more = read_csv_row();
      if (!more) return Unexpected{more.error()};
      if (!more.value()) {
        done = true;
        return false;
      }
      if (spans.size() != columns) {
        return Unexpected{error_at(
            row_line, "csv",
            fmt::format("{} fields, expected {} as in the header", spans.size(), columns))};
      }
      double arrival = 0.0;
      if (azure) {
        std::string_view text = trim(field(col_time));
        auto instant = parse_datetime(text);
        if (!instant) return Unexpected{error_at(row_line, time_name, instant.error())};
        if (!has_last) {
          origin = instant.value();
        } else if (instant.value() < last_instant) {
          return Unexpected{error_at(
              row_line, time_name,
              fmt::format("{} goes backwards (previous TIMESTAMP was {})", text, last_time_text))};
        }
        has_last = true;
        last_instant = instant.value();
        last_time_text.assign(text);
        arrival = seconds_between(origin, last_instant);
      } else {
        auto seconds = csv_seconds(col_time, time_name);
        if (!seconds) return Unexpected{seconds.error()};
        if (has_last && seconds.value() < last_arrival) {
          return Unexpected{error_at(row_line, time_name,
                                     fmt::format("{} goes backwards (previous Timestamp was {})",
                                                 trim(field(col_time)), last_arrival))};
        }
        has_last = true;
        last_arrival = seconds.value();
        arrival = seconds.value();
      }
      auto prompt = csv_uint(col_prompt, prompt_name, 1);
      if (!prompt) return Unexpected{prompt.error()};
      auto output = csv_uint(col_output, output_name, azure ? 1 : 0);
      if (!output) return Unexpected{output.error()};
      if (output.value() == 0) {  // BurstGPT: a failed request
        ++skipped;
        continue;
      }
      out.line = row_line;
      out.arrival = arrival;
      out.id = std::to_string(row_line);
      out.prompt = prompt.value();
      out.output = output.value();
      out.n = 1;
      out.prefix.clear();
      out.prefix_tokens = 0;
      out.hash_ids.clear();
      out.hash_block_tokens = 512;
      return true;
    }
  }
};

// ---------------------------------------------------------------------------

RequestReader::RequestReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RequestReader::~RequestReader() = default;

InputResult<std::unique_ptr<RequestReader>> RequestReader::open(
    const std::string& path, std::optional<RequestFormat> forced) {
  std::string name = path == "-" ? "<stdin>" : path;
  auto source = ByteSource::open(path);
  if (!source) return Unexpected{InputError{name, 0, "file", "cannot open: " + source.error()}};
  auto impl = std::make_unique<Impl>(std::move(source).value(), name);
  if (auto status = impl->init(forced); !status) return Unexpected{status.error()};
  return std::unique_ptr<RequestReader>(new RequestReader(std::move(impl)));
}

InputResult<std::unique_ptr<RequestReader>> RequestReader::from_string(
    std::string data, const std::string& name, std::optional<RequestFormat> forced) {
  auto impl = std::make_unique<Impl>(ByteSource::from_string(std::move(data)), name);
  if (auto status = impl->init(forced); !status) return Unexpected{status.error()};
  return std::unique_ptr<RequestReader>(new RequestReader(std::move(impl)));
}

RequestFormat RequestReader::format() const {
  return impl_->format;
}
const std::string& RequestReader::name() const {
  return impl_->name;
}
std::uint64_t RequestReader::skipped() const {
  return impl_->skipped;
}

InputResult<std::string> RequestReader::content_sha256() {
  auto digest = impl_->source->content_sha256();
  if (!digest) return Unexpected{InputError{impl_->name, 0, "file", digest.error()}};
  return std::move(digest).value();
}

InputResult<bool> RequestReader::next(Request& out) {
  if (impl_->cursor) return impl_->next_json(out);
  return impl_->next_csv(out);
}

}  // namespace kvreplay
