// A request trace format as data (SPEC 2.2): each reader declares its entry
// (its name, how its records are told apart, its factory) beside its class,
// and the table of format_table.cc lists the entries in detection order.
// Detection (detect.cc) and --format's names and help read the table only.
//
// How a format is told apart, by content:
//   JSON Lines (first non-blank byte '{'): the first record's keys. A format
//     whose `decisive` keys the record has is it (two such formats: an
//     error); else the first whose `weak` keys it has; a `strict` format then
//     refuses a key outside its `fields`.
//   CSV (anything else): the header names; the first format with one of its
//     `columns` (lower-case) is it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/requests/csv.h"
#include "formats/requests/json_lines.h"
#include "formats/requests/request.h"

namespace kvreplay::requests {

enum class Layout : std::uint8_t { kJsonLines, kCsv };

struct JsonSniff {
  std::uint32_t fields = 0;    // JsonField bits: the keys the format reads
  std::uint32_t decisive = 0;  // any of these says it is this format
  std::uint32_t weak = 0;      // these say so when no format's decisive keys are there
  std::uint32_t required = 0;  // named when no format is told
  bool strict = false;         // a key outside `fields` is an error
  std::unique_ptr<JsonRequestReader> (*make)(std::unique_ptr<JsonLines> lines) = nullptr;
};

struct CsvSniff {
  std::span<const std::string_view> columns;  // lower-case; any of them says it is this format
  std::string_view header;                    // the header as messages show it
  InputResult<std::unique_ptr<FormatReader>> (*make)(
      CsvRows rows, const std::vector<std::string>& names) = nullptr;
};

struct RequestFormatEntry {
  RequestFormat format;
  std::string_view name;   // --format's, the reports'
  std::string_view title;  // as messages name it ("Mooncake")
  std::string_view help;   // one line, for --format's help
  Layout layout;
  JsonSniff json;  // Layout::kJsonLines
  CsvSniff csv;    // Layout::kCsv
};

// The formats in detection order (format_table.cc).
std::span<const RequestFormatEntry* const> request_format_table();
const RequestFormatEntry& format_entry(RequestFormat format);

// What a request trace given where a kvtrace is expected looks like, for the
// kvtrace reader's hint: the JSON Lines format whose decisive key `key` is
// ("" for another format's key that decides nothing, such as id or hash_ids;
// nullopt for no format's key), and the CSV format one of whose columns the
// header line `first_line` names (case-insensitive).
std::optional<std::string_view> json_format_of_key(std::string_view key);
std::optional<std::string_view> csv_format_of_header(std::string_view first_line);

}  // namespace kvreplay::requests
