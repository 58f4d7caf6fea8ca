// The table of request trace formats (SPEC 2.2), in detection order: --format's
// names and help, and what detect.cc tries. A new format is its reader's files
// (declaring its RequestFormatEntry) and one line here (and its value in
// RequestFormat).
#include <fmt/format.h>

#include <cctype>

#include "formats/requests/azure_reader.h"
#include "formats/requests/burstgpt_reader.h"
#include "formats/requests/format_entry.h"
#include "formats/requests/mooncake_reader.h"
#include "formats/requests/native_reader.h"

namespace kvreplay {

namespace requests {

namespace {

const RequestFormatEntry* const kFormats[] = {
    &kNativeFormat,
    &kMooncakeFormat,
    &kAzureFormat,
    &kBurstGptFormat,
};

}  // namespace

std::span<const RequestFormatEntry* const> request_format_table() {
  return kFormats;
}

const RequestFormatEntry& format_entry(RequestFormat format) {
  for (const RequestFormatEntry* entry : kFormats) {
    if (entry->format == format) return *entry;
  }
  return *kFormats[0];
}

std::optional<std::string_view> json_format_of_key(std::string_view key) {
  const std::uint32_t bit = json_field_bit(key);
  if (bit == 0) return std::nullopt;
  bool known = false;
  for (const RequestFormatEntry* entry : kFormats) {
    if (entry->layout != Layout::kJsonLines) continue;
    if ((entry->json.decisive & bit) != 0) return entry->name;
    known = known || (entry->json.fields & bit) != 0;
  }
  if (known) return std::string_view();
  return std::nullopt;
}

std::optional<std::string_view> csv_format_of_header(std::string_view first_line) {
  std::string lower(first_line);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const RequestFormatEntry* entry : kFormats) {
    if (entry->layout != Layout::kCsv) continue;
    for (std::string_view column : entry->csv.columns) {
      if (lower.find(column) != std::string::npos) return entry->name;
    }
  }
  return std::nullopt;
}

}  // namespace requests

std::string_view to_string(RequestFormat format) {
  for (const requests::RequestFormatEntry* entry : requests::kFormats) {
    if (entry->format == format) return entry->name;
  }
  return "?";
}

std::optional<RequestFormat> parse_request_format(std::string_view name) {
  for (const requests::RequestFormatEntry* entry : requests::kFormats) {
    if (entry->name == name) return entry->format;
  }
  return std::nullopt;
}

std::vector<std::string> request_format_names() {
  std::vector<std::string> names;
  for (const requests::RequestFormatEntry* entry : requests::kFormats) {
    names.emplace_back(entry->name);
  }
  return names;
}

std::string request_format_help() {
  std::string out;
  for (const requests::RequestFormatEntry* entry : requests::kFormats) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({})", entry->name, entry->help);
  }
  return out;
}

}  // namespace kvreplay
