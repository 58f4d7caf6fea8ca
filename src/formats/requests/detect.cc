#include "formats/requests/detect.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "formats/requests/azure_reader.h"
#include "formats/requests/burstgpt_reader.h"
#include "formats/requests/csv.h"
#include "formats/requests/mooncake_reader.h"
#include "formats/requests/native_reader.h"

namespace kvreplay::requests {

namespace {

// Decides native or Mooncake from the first record's keys.
Result<RequestFormat, InputError> decide_json_format(const JsonLines& lines,
                                                     const JsonRecord& record) {
  const std::uint32_t seen = record.seen;
  // "id", "hash_ids" and "start" alone do not decide: Mooncake-like files may
  // carry an id.
  const std::uint32_t native_only = seen & kNativeFields & ~(kId | kHashIds | kStart);
  const std::uint32_t mooncake_only = seen & kMooncakeFields & ~kHashIds;
  if (native_only != 0 && mooncake_only != 0) {
    return Unexpected{
        lines.error_at(record.line, "format",
                       fmt::format("the first record has both native ({}) and Mooncake ({}) "
                                   "fields; use --format to say which it is",
                                   fields_of(native_only), fields_of(mooncake_only)))};
  }
  if (mooncake_only != 0) return RequestFormat::kMooncake;
  if (native_only != 0 || (seen & (kId | kStart)) != 0) {
    if (!record.first_unknown.empty()) {
      return Unexpected{lines.error_at(
          record.first_unknown_line, record.first_unknown,
          fmt::format("unknown field (a native record takes {})", fields_of(kNativeFields)))};
    }
    return RequestFormat::kNative;
  }
  if (record.first_unknown == "kvtrace" || record.first_unknown == "op" ||
      record.first_unknown == "config" || record.first_unknown == "events") {
    return Unexpected{lines.error_at(record.line, "format",
                                     "this is a kvtrace event trace, not a request trace "
                                     "(replay it with kvreplay replay)")};
  }
  return Unexpected{lines.error_at(
      record.line, "format",
      "cannot tell native from Mooncake JSON Lines: the first record has none of arrival, "
      "prompt, output, timestamp, input_length, output_length (use --format)")};
}

std::unique_ptr<JsonRequestReader> json_reader(RequestFormat format,
                                               std::unique_ptr<JsonLines> lines) {
  if (format == RequestFormat::kNative) return std::make_unique<NativeReader>(std::move(lines));
  return std::make_unique<MooncakeReader>(std::move(lines));
}

InputResult<Detected> detect_json(std::unique_ptr<JsonLines> lines,
                                  std::optional<RequestFormat> forced) {
  Detected detected;
  if (forced) {
    detected.format = *forced;
    detected.reader = json_reader(*forced, std::move(lines));
    return detected;
  }
  Request first;
  JsonRecord record;
  if (auto status = lines->read_record(first, record, kNativeFields | kMooncakeFields, false);
      !status) {
    return Unexpected{status.error()};
  }
  auto format = decide_json_format(*lines, record);
  if (!format) return Unexpected{format.error()};
  detected.format = format.value();
  JsonLines& shared = *lines;
  auto reader = json_reader(format.value(), std::move(lines));
  if (auto status = reader->finish(record, first); !status) return Unexpected{status.error()};
  if (auto status = shared.end_line(); !status) return Unexpected{status.error()};
  reader->set_first(std::move(first));
  detected.reader = std::move(reader);
  return detected;
}

InputResult<Detected> detect_csv(CsvRows rows, bool forced, RequestFormat format) {
  const std::string unknown = fmt::format(
      "unknown request trace format: expected JSON Lines records, or a CSV header "
      "{} (Azure) or {} (BurstGPT); use --format to name it",
      kAzureHeader, kBurstGptHeader);
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
  if (!forced) {
    if (has("contexttokens") || has("generatedtokens")) {
      format = RequestFormat::kAzure;
    } else if (has("request tokens") || has("response tokens")) {
      format = RequestFormat::kBurstGpt;
    } else {
      return Unexpected{rows.error_at(rows.row_line(), "format", unknown)};
    }
  }
  auto reader = format == RequestFormat::kAzure ? AzureReader::create(std::move(rows), names)
                                                : BurstGptReader::create(std::move(rows), names);
  if (!reader) return Unexpected{reader.error()};
  return Detected{format, std::move(reader).value()};
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
  if (forced) json = *forced == RequestFormat::kNative || *forced == RequestFormat::kMooncake;
  if (json) {
    bytes.hand_back();
    return detect_json(std::make_unique<JsonLines>(source, name, bytes.line()), forced);
  }
  return detect_csv(std::move(bytes), forced.has_value(), forced.value_or(RequestFormat::kAzure));
}

}  // namespace kvreplay::requests
