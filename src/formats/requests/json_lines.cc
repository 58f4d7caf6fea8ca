#include "formats/requests/json_lines.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "formats/requests/date_time.h"
#include "formats/requests/request_reader.h"
#include "io/field_set.h"
#include "io/json_object.h"
#include "io/json_text.h"

namespace kvreplay::requests {

namespace {

constexpr std::uint64_t kMaxCount = 0xFFFFFFFFull;
// The arrival bound (request.h) in Mooncake's ms.
constexpr auto kMaxTimestampMs = static_cast<std::uint64_t>(kMaxArrivalSeconds) * 1000;
constexpr std::size_t kMaxField = RequestReader::kMaxField;
constexpr std::size_t kMaxHashIds = RequestReader::kMaxHashIds;

using Problem = Unexpected<std::string>;

// In bit order, which is also the order messages list them in.
constexpr std::array<std::string_view, 14> kFieldNames{
    "arrival",   "id",           "prompt",        "output",
    "n",         "prefix",       "prefix_tokens", "hash_block_tokens",
    "timestamp", "input_length", "output_length", "hash_ids",
    "start",     "session"};

}  // namespace

std::string fields_of(std::uint32_t mask) {
  return field_list(kFieldNames, mask);
}
std::string_view first_field(std::uint32_t mask) {
  return kvreplay::first_field(kFieldNames, mask);
}
std::uint32_t json_field_bit(std::string_view key) {
  return field_bit(kFieldNames, key);
}

JsonLines::JsonLines(ByteSource& source, const std::string& name, std::uint64_t first_line)
    : cursor_(source), name_(&name), base_line_(first_line) {}

InputError JsonLines::cursor_error(std::string_view field, const std::string& problem) const {
  if (!cursor_.source_error().empty()) return error("file", cursor_.source_error());
  return error(field, problem);
}

InputResult<bool> JsonLines::more() {
  if (cursor_.peek() >= 0) return true;
  if (!cursor_.source_error().empty()) return Unexpected{error("file", cursor_.source_error())};
  return false;
}

InputStatus JsonLines::read_record(Request& out, JsonRecord& record, std::uint32_t accepted,
                                   bool strict) {
  JsonCursor& in = cursor_;
  int c = in.peek();
  record.line = line();
  if (c != '{') {
    return Unexpected{
        cursor_error("json", fmt::format("expected a request object, got {}", in.describe_next()))};
  }
  in.skip();
  out.line = record.line;
  out.arrival = 0.0;
  out.id.clear();
  out.prompt = 0;
  out.output = 0;
  out.n = 1;
  out.prefix.clear();
  out.prefix_tokens = 0;
  out.session.clear();
  out.hash_ids.clear();
  out.hash_block_tokens = 512;
  record.timestamp = 0;
  record.start.clear();
  record.seen = 0;
  record.first_unknown.clear();
  record.first_unknown_line = 0;
  JsonMembers members(in, key_, "a record", "the record");
  while (members.next()) {
    std::uint32_t bit = field_bit(kFieldNames, key_) & accepted;
    if (bit == 0) {
      if (strict) {
        return Unexpected{error(key_, fmt::format("unknown field (a native record takes {})",
                                                  fields_of(kNativeFields)))};
      }
      if (record.first_unknown.empty()) {
        record.first_unknown = key_;
        record.first_unknown_line = line();
      }
      if (auto r = copy_value(nullptr, 1); !r) return Unexpected{cursor_error(key_, r.error())};
      continue;
    }
    if (record.seen & bit) return Unexpected{error(key_, "duplicate field")};
    record.seen |= bit;
    if (auto status = read_field(static_cast<JsonField>(bit), out, record); !status) return status;
  }
  if (members.failed()) {
    const JsonMembers::Problem& problem = members.problem();
    return Unexpected{problem.at_cursor ? cursor_error(problem.field, problem.message)
                                        : error(problem.field, problem.message)};
  }
  return {};
}

InputStatus JsonLines::end_line() {
  int after = cursor_.peek_in_line();
  if (after >= 0 && after != '\n') {
    return Unexpected{error("json", fmt::format("expected end of line after the record, got {}",
                                                cursor_.describe_next()))};
  }
  return {};
}

InputResult<std::uint64_t> JsonLines::read_uint(std::string_view field, std::uint64_t min,
                                                std::uint64_t max) {
  auto value = read_json_uint(cursor_, scalar_, min, max, BelowMin::kParenthesised);
  if (value) return value.value();
  const JsonMembers::Problem& problem = value.error();
  return Unexpected{problem.at_cursor ? cursor_error(field, problem.message)
                                      : error(field, problem.message)};
}

InputResult<double> JsonLines::read_seconds(std::string_view field) {
  JsonCursor& in = cursor_;
  int c = in.peek();
  if (c != '-' && (c < '0' || c > '9')) {
    return Unexpected{error(field, fmt::format("expected a number, got {}", describe_value(in)))};
  }
  if (auto r = in.read_number(scalar_); !r) return Unexpected{cursor_error(field, r.error())};
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(scalar_.data(), scalar_.data() + scalar_.size(), value);
  if (ec != std::errc{} || ptr != scalar_.data() + scalar_.size() || !std::isfinite(value)) {
    return Unexpected{error(field, fmt::format("{} is out of range", scalar_))};
  }
  if (value < 0) {
    return Unexpected{error(field, fmt::format("{} is negative (must be >= 0)", scalar_))};
  }
  if (value > kMaxArrivalSeconds) return Unexpected{error(field, past_arrival_bound(scalar_))};
  return value + 0.0;  // -0 -> 0
}

// Copies any JSON value as compact text into `out` (nullptr: skips it), with
// memory bounded by the cursor's caps and, when copying, kMaxField bytes.
Result<void, std::string> JsonLines::copy_value(std::string* out, int depth) {
  JsonCursor& in = cursor_;
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
    append_json_string(*out, scalar_);
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
        if (auto r = in.read_string(scalar_); !r) return r;
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
    if (auto r = in.read_string(scalar_); !r) return r;
    if (!put_string()) return Problem{too_long};
    return {};
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    if (auto r = in.read_number(scalar_); !r) return r;
    if (!put(scalar_)) return Problem{too_long};
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

InputStatus JsonLines::read_hash_ids(std::vector<std::uint64_t>& ids) {
  JsonCursor& in = cursor_;
  ids.clear();
  if (in.peek() != '[') {
    return Unexpected{
        error("hash_ids", fmt::format("expected an array, got {}", describe_value(in)))};
  }
  in.skip();
  if (in.peek() == ']') {
    in.skip();
    return {};
  }
  for (;;) {
    auto value = read_uint("hash_ids", 0, std::numeric_limits<std::uint64_t>::max());
    if (!value) return Unexpected{value.error()};
    if (value.value() > kMaxTraceHashId) {
      return Unexpected{error("hash_ids", reserved_hash_id(value.value()))};
    }
    if (ids.size() >= kMaxHashIds) {
      return Unexpected{error("hash_ids", fmt::format("more than {} entries", kMaxHashIds))};
    }
    ids.push_back(value.value());
    int sep = in.peek();
    if (sep < 0) return Unexpected{cursor_error("hash_ids", "unexpected end of input")};
    if (sep != ',' && sep != ']') {
      return Unexpected{
          error("hash_ids", fmt::format("expected ',' or ']', got {}", in.describe_next()))};
    }
    in.skip();
    if (sep == ']') return {};
  }
}

InputStatus JsonLines::read_field(JsonField field, Request& out, JsonRecord& record) {
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
      JsonCursor& in = cursor_;
      if (in.peek() != '"') {
        return Unexpected{
            error("prefix", fmt::format("expected a string, got {}", describe_value(in)))};
      }
      if (auto r = in.read_string(out.prefix); !r)
        return Unexpected{cursor_error("prefix", r.error())};
      if (out.prefix.empty()) return Unexpected{error("prefix", "must not be empty")};
      return {};
    }
    case kSession: {
      JsonCursor& in = cursor_;
      if (in.peek() != '"') {
        return Unexpected{
            error("session", fmt::format("expected a string, got {}", describe_value(in)))};
      }
      if (auto r = in.read_string(out.session); !r)
        return Unexpected{cursor_error("session", r.error())};
      if (out.session.empty()) return Unexpected{error("session", "must not be empty")};
      return {};
    }
    case kHashIds: return read_hash_ids(out.hash_ids);
    case kTimestamp: {
      auto value = read_uint("timestamp", 0, std::numeric_limits<std::uint64_t>::max());
      if (!value) return Unexpected{value.error()};
      if (value.value() > kMaxTimestampMs) {
        return Unexpected{
            error("timestamp", past_arrival_bound(fmt::format("{} ms", value.value())))};
      }
      record.timestamp = value.value();
      return {};
    }
    case kStart: {
      JsonCursor& in = cursor_;
      if (in.peek() != '"') {
        return Unexpected{error("start", fmt::format("expected a date and time as a string, got {}",
                                                     describe_value(in)))};
      }
      if (auto r = in.read_string(record.start); !r)
        return Unexpected{cursor_error("start", r.error())};
      if (auto instant = parse_datetime(record.start); !instant)
        return Unexpected{error("start", instant.error())};
      return {};
    }
  }
  return {};
}

InputStatus check_hash_count(const JsonLines& lines, std::uint64_t line, const Request& out,
                             std::string_view length_field, bool name_block_tokens) {
  const std::uint64_t expected =
      (std::uint64_t{out.prompt} + out.hash_block_tokens - 1) / out.hash_block_tokens;
  if (out.hash_ids.size() != expected) {
    std::string why = fmt::format("{} entries, expected {} for {} {}", out.hash_ids.size(),
                                  expected, length_field, out.prompt);
    if (name_block_tokens) why += fmt::format(" (hash_block_tokens {})", out.hash_block_tokens);
    return Unexpected{lines.error_at(line, "hash_ids", std::move(why))};
  }
  return {};
}

InputResult<bool> JsonRequestReader::next(Request& out) {
  if (pending_) {
    out = std::move(*pending_);
    pending_.reset();
    return true;
  }
  if (done_) return false;
  auto more = lines_->more();
  if (!more) return Unexpected{more.error()};
  if (!more.value()) {
    done_ = true;
    return false;
  }
  if (auto status = lines_->read_record(out, record_, accepted_, strict_); !status)
    return Unexpected{status.error()};
  if (auto status = finish(record_, out); !status) return Unexpected{status.error()};
  if (auto status = lines_->end_line(); !status) return Unexpected{status.error()};
  return true;
}

}  // namespace kvreplay::requests
