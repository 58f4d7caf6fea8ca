// The JSON Lines side that the native and Mooncake readers share: one record
// object a line, read through the bounded JsonCursor; the fields of both
// formats; and the reader that checks each record with its format's rules.
//
// Grammar:
//   file   = [BOM] *blank-line record *(("\n" record) / blank-line)
//   record = a JSON object on one line; its members as native_reader.h or
//            mooncake_reader.h say
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/requests/format_reader.h"
#include "io/byte_source.h"
#include "io/json_cursor.h"

namespace kvreplay::requests {

// The keys of both JSON Lines formats.
enum JsonField : std::uint32_t {
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
  kStart = 1u << 12,
  kSession = 1u << 13,
};

inline constexpr std::uint32_t kNativeFields = kArrival | kId | kPrompt | kOutput | kN | kPrefix |
                                               kPrefixTokens | kHashBlockTokens | kHashIds |
                                               kStart | kSession;
inline constexpr std::uint32_t kMooncakeFields =
    kTimestamp | kInputLength | kOutputLength | kHashIds;

// The fields of `mask`, in bit order ("arrival, prompt, output").
std::string fields_of(std::uint32_t mask);
// The first field of `mask` in bit order.
std::string_view first_field(std::uint32_t mask);
// The JsonField bit of the key `key` (0: none).
std::uint32_t json_field_bit(std::string_view key);

// What a record held besides the Request's own fields.
struct JsonRecord {
  std::uint64_t line = 0;       // where the record starts
  std::uint32_t seen = 0;       // JsonField mask
  std::uint64_t timestamp = 0;  // Mooncake's, in ms
  std::string start;            // native's, a date and time (checked)
  // The first key outside the accepted fields, when they are skipped.
  std::string first_unknown;
  std::uint64_t first_unknown_line = 0;
};

class JsonLines {
 public:
  // Reads `source` from where it stands, which is line `first_line` of the
  // file `name`.
  JsonLines(ByteSource& source, const std::string& name, std::uint64_t first_line);

  // Whether a record follows (false at the end of the input; an error when the
  // source failed).
  InputResult<bool> more();
  // Reads one record's members into `out` (reset first) and `record`. Keys
  // outside `accepted` are errors when `strict` (the native rule, whose message
  // names the native fields) and skipped otherwise.
  InputStatus read_record(Request& out, JsonRecord& record, std::uint32_t accepted, bool strict);
  // After a record: nothing but blank space may follow it on its line.
  InputStatus end_line();

  InputError error_at(std::uint64_t at, std::string_view field, std::string problem) const {
    return InputError{*name_, at, std::string(field), std::move(problem)};
  }
  const std::string& name() const { return *name_; }

 private:
  std::uint64_t line() const { return cursor_.line() + base_line_ - 1; }
  InputError error(std::string_view field, std::string problem) const {
    return error_at(line(), field, std::move(problem));
  }
  // Wraps a cursor problem, preferring the source's own error (e.g. truncated gzip).
  InputError cursor_error(std::string_view field, const std::string& problem) const;

  InputStatus read_field(JsonField field, Request& out, JsonRecord& record);
  InputResult<std::uint64_t> read_uint(std::string_view field, std::uint64_t min,
                                       std::uint64_t max);
  InputResult<double> read_seconds(std::string_view field);
  Result<void, std::string> copy_value(std::string* out, int depth);
  InputStatus read_hash_ids(std::vector<std::uint64_t>& ids);

  JsonCursor cursor_;
  const std::string* name_;
  std::uint64_t base_line_;
  std::string key_;     // scratch
  std::string scalar_;  // scratch
};

// Checks that `out` has one hash id per block of its prompt; `length_field`
// names the prompt as the format does.
InputStatus check_hash_count(const JsonLines& lines, std::uint64_t line, const Request& out,
                             std::string_view length_field, bool name_block_tokens);

// A JSON Lines request format: reads each record with its format's fields,
// then checks and completes it (finish).
class JsonRequestReader : public FormatReader {
 public:
  InputResult<bool> next(Request& out) final;
  // Checks and completes a record read with this format's fields.
  virtual InputStatus finish(const JsonRecord& record, Request& out) = 0;
  // The first record, read and finished while the format was being detected:
  // next() returns it first.
  void set_first(Request first) { pending_ = std::move(first); }

 protected:
  JsonRequestReader(std::unique_ptr<JsonLines> lines, std::uint32_t accepted, bool strict)
      : lines_(std::move(lines)), accepted_(accepted), strict_(strict) {}
  const JsonLines& lines() const { return *lines_; }

 private:
  std::unique_ptr<JsonLines> lines_;
  std::uint32_t accepted_;
  bool strict_;
  bool done_ = false;
  std::optional<Request> pending_;
  JsonRecord record_;
};

}  // namespace kvreplay::requests
