// CSV rows for the Azure and BurstGPT readers, and the raw-byte scanning that
// format detection does before it knows whether the input is CSV at all.
//
// Grammar (RFC 4180 as the published traces use it):
//   file   = [BOM] *blank-line header *(row / blank-line)
//   row    = field *("," field) ("\n" / "\r\n" / end of input)
//   field  = *(" " / "\t") (quoted / unquoted) *(" " / "\t")
//   quoted = '"' *(any byte but '"' / '""') '"'     (may span lines)
// Example:
//   TIMESTAMP,ContextTokens,GeneratedTokens
//   2023-11-16 18:15:46.6805900,4808,10
// Memory stays bounded: fields are capped at RequestReader::kMaxField bytes and
// rows at RequestReader::kMaxColumns fields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/requests/request.h"
#include "io/byte_source.h"
#include "io/input_error.h"

namespace kvreplay::requests {

// Text helpers for CSV values and their messages.
std::string_view trim(std::string_view text);  // spaces and tabs at both ends
std::string quoted(std::string_view text);     // 'text', shortened when long
std::string lower(std::string_view text);      // ASCII only

class CsvRows {
 public:
  // Reads `source` from where it stands; messages name the file `name`.
  CsvRows(ByteSource& source, const std::string& name);

  // Detection, at the start of the input: skips a UTF-8 byte-order mark, then
  // blank space (counting lines); returns the next byte, or -1 at the end.
  void skip_byte_order_mark();
  int skip_blank();
  // The line of the next byte.
  std::uint64_t line() const { return line_; }
  // Leaves the source at the next byte, for a reader that takes it from here.
  void hand_back() { source_->advance_to(pos_); }
  // Set when the source failed (I/O, corrupt or truncated gzip).
  const std::string& source_error() const { return source_->error(); }

  // Reads the next non-blank row. Returns false at the end of the input.
  InputResult<bool> read_row();
  // Reads the next row, which must have `columns` fields (those of the header).
  InputResult<bool> read_record(std::size_t columns);
  // The last row read: its line, its fields (unquoted, untrimmed).
  std::uint64_t row_line() const { return row_line_; }
  std::size_t size() const { return spans_.size(); }
  std::string_view field(std::size_t index) const {
    return std::string_view(row_).substr(spans_[index].first, spans_[index].second);
  }

  // A field of the last row as a count in [min, 2^32-1], or as seconds >= 0;
  // errors name `field_name`.
  InputResult<std::uint32_t> uint_field(std::size_t column, std::string_view field_name,
                                        std::uint64_t min) const;
  InputResult<double> seconds_field(std::size_t column, std::string_view field_name) const;

  InputError error_at(std::uint64_t at, std::string_view field, std::string problem) const {
    return InputError{*name_, at, std::string(field), std::move(problem)};
  }
  const std::string& name() const { return *name_; }

 private:
  bool refill();
  int peek() {
    if (pos_ == end_ && !refill()) return -1;
    return static_cast<unsigned char>(*pos_);
  }
  InputError source_failure() const { return error_at(line_, "file", source_->error()); }

  ByteSource* source_;
  const std::string* name_;
  const char* pos_ = nullptr;
  const char* end_ = nullptr;
  std::uint64_t line_ = 1;  // of pos_
  // The last row: its bytes and the spans of its fields in them.
  std::string row_;
  std::vector<std::pair<std::size_t, std::size_t>> spans_;
  std::uint64_t row_line_ = 0;
};

// A column a CSV format reads, and where its index goes.
struct CsvColumn {
  std::string_view name;  // as the format spells it; matched case-insensitively
  std::size_t* index;
};

// The header's (lowercased, trimmed) column names.
std::vector<std::string> header_names(const CsvRows& rows);

// Finds each wanted column in the header row `rows` holds (named `names`,
// from header_names), for the format `label` whose header is `header`.
InputStatus find_columns(const CsvRows& rows, const std::vector<std::string>& names,
                         std::span<const CsvColumn> wanted, std::string_view label,
                         std::string_view header);

// A request from a CSV row: its line is its id; no prefix, no hashes.
void set_csv_request(Request& out, std::uint64_t line, double arrival, std::uint32_t prompt,
                     std::uint32_t output);

}  // namespace kvreplay::requests
