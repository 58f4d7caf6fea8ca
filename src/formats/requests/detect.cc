#include "formats/requests/detect.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "formats/requests/csv.h"
#include "formats/requests/format_entry.h"

namespace kvreplay::requests {

namespace {

// "native from Mooncake": how the messages name the JSON Lines formats.
std::string json_titles() {
  std::string out;
  int k = 0;
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (entry->layout != Layout::kJsonLines) continue;
    out += k == 0 ? "" : k == 1 ? " from " : " or ";
    out += entry->title;
    ++k;
  }
  return out;
}

// Decides the JSON Lines format from the first record's keys (format_entry.h).
Result<const RequestFormatEntry*, InputError> decide_json_format(const JsonLines& lines,
                                                                 const JsonRecord& record) {
  const std::uint32_t seen = record.seen;
  const RequestFormatEntry* decided = nullptr;
  std::uint32_t decided_keys = 0;
  std::uint32_t required = 0;
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (entry->layout != Layout::kJsonLines) continue;
    required |= entry->json.required;
    const std::uint32_t keys = seen & entry->json.decisive;
    if (keys == 0) continue;
    if (decided != nullptr) {
      return Unexpected{lines.error_at(
          record.line, "format",
          fmt::format("the first record has both {} ({}) and {} ({}) fields; use --format to say "
                      "which it is",
                      decided->title, fields_of(decided_keys), entry->title, fields_of(keys)))};
    }
    decided = entry;
    decided_keys = keys;
  }
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (decided != nullptr) break;
    if (entry->layout == Layout::kJsonLines && (seen & entry->json.weak) != 0) decided = entry;
  }
  if (decided != nullptr) {
    if (decided->json.strict && !record.first_unknown.empty()) {
      return Unexpected{
          lines.error_at(record.first_unknown_line, record.first_unknown,
                         fmt::format("unknown field (a {} record takes {})", decided->title,
                                     fields_of(decided->json.fields)))};
    }
    return decided;
  }
  if (record.first_unknown == "kvtrace" || record.first_unknown == "op" ||
      record.first_unknown == "config" || record.first_unknown == "events") {
    return Unexpected{lines.error_at(record.line, "format",
                                     "this is a kvtrace event trace, not a request trace "
                                     "(replay it with kvreplay replay)")};
  }
  return Unexpected{lines.error_at(
      record.line, "format",
      fmt::format("cannot tell {} JSON Lines: the first record has none of {} (use --format)",
                  json_titles(), fields_of(required)))};
}

InputResult<Detected> detect_json(std::unique_ptr<JsonLines> lines,
                                  std::optional<RequestFormat> forced) {
  Detected detected;
  if (forced) {
    detected.format = *forced;
    detected.reader = format_entry(*forced).json.make(std::move(lines));
    return detected;
  }
  std::uint32_t fields = 0;  // every JSON Lines format's keys
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (entry->layout == Layout::kJsonLines) fields |= entry->json.fields;
  }
  Request first;
  JsonRecord record;
  if (auto status = lines->read_record(first, record, fields, false); !status) {
    return Unexpected{status.error()};
  }
  auto format = decide_json_format(*lines, record);
  if (!format) return Unexpected{format.error()};
  detected.format = format.value()->format;
  JsonLines& shared = *lines;
  auto reader = format.value()->json.make(std::move(lines));
  if (auto status = reader->finish(record, first); !status) return Unexpected{status.error()};
  if (auto status = shared.end_line(); !status) return Unexpected{status.error()};
  reader->set_first(std::move(first));
  detected.reader = std::move(reader);
  return detected;
}

InputResult<Detected> detect_csv(CsvRows rows, std::optional<RequestFormat> forced) {
  std::string headers;  // "H (Azure) or H (BurstGPT)"
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (entry->layout != Layout::kCsv) continue;
    headers +=
        fmt::format("{}{} ({})", headers.empty() ? "" : " or ", entry->csv.header, entry->title);
  }
  const std::string unknown = fmt::format(
      "unknown request trace format: expected JSON Lines records, or a CSV header {}; use "
      "--format to name it",
      headers);
  auto header = rows.read_row();
  if (!header) {
    if (forced) return Unexpected{header.error()};
    return Unexpected{rows.error_at(rows.line(), "format", unknown)};
  }
  if (!header.value()) return Unexpected{rows.error_at(1, "file", "empty input (no requests)")};
  const std::vector<std::string> names = header_names(rows);
  auto has = [&](std::string_view wanted) {
    return std::find(names.begin(), names.end(), wanted) != names.end();
  };
  const RequestFormatEntry* format = forced ? &format_entry(*forced) : nullptr;
  for (const RequestFormatEntry* entry : request_format_table()) {
    if (format != nullptr) break;
    if (entry->layout != Layout::kCsv) continue;
    if (std::any_of(entry->csv.columns.begin(), entry->csv.columns.end(), has)) format = entry;
  }
  if (format == nullptr) return Unexpected{rows.error_at(rows.row_line(), "format", unknown)};
  auto reader = format->csv.make(std::move(rows), names);
  if (!reader) return Unexpected{reader.error()};
  return Detected{format->format, std::move(reader).value()};
}

}  // namespace

InputResult<Detected> detect_format(ByteSource& source, const std::string& name,
                                    std::optional<RequestFormat> forced) {
  CsvRows bytes(source, name);
  bytes.skip_byte_order_mark();
  int c = bytes.skip_blank();
  if (c < 0) {
    if (!bytes.source_error().empty()) {
      return Unexpected{bytes.error_at(1, "file", bytes.source_error())};
    }
    return Unexpected{bytes.error_at(1, "file", "empty input (no requests)")};
  }
  bool json = c == '{';
  if (forced) json = format_entry(*forced).layout == Layout::kJsonLines;
  if (json) {
    bytes.hand_back();
    return detect_json(std::make_unique<JsonLines>(source, name, bytes.line()), forced);
  }
  return detect_csv(std::move(bytes), forced);
}

}  // namespace kvreplay::requests
