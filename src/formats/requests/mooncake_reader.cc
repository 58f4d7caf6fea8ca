#include "formats/requests/mooncake_reader.h"

#include <fmt/format.h>

namespace kvreplay::requests {

namespace {

std::unique_ptr<JsonRequestReader> make_mooncake(std::unique_ptr<JsonLines> lines) {
  return std::make_unique<MooncakeReader>(std::move(lines));
}

}  // namespace

const RequestFormatEntry kMooncakeFormat = {
    RequestFormat::kMooncake,
    "mooncake",
    "Mooncake",
    "Mooncake's JSON Lines, FAST'25",
    Layout::kJsonLines,
    {kMooncakeFields, kMooncakeFields & ~kHashIds, 0, kTimestamp | kInputLength | kOutputLength,
     false, make_mooncake},
    {}};

namespace {
constexpr std::uint32_t kMooncakeBlockTokens = 512;
}  // namespace

InputStatus MooncakeReader::finish(const JsonRecord& record, Request& out) {
  const std::uint64_t line = record.line;
  constexpr std::uint32_t kRequired = kTimestamp | kInputLength | kOutputLength | kHashIds;
  if (std::uint32_t missing = kRequired & ~record.seen) {
    return Unexpected{lines().error_at(
        line, first_field(missing),
        fmt::format("missing (a Mooncake record needs {})", fields_of(kRequired)))};
  }
  out.hash_block_tokens = kMooncakeBlockTokens;
  if (auto status = check_hash_count(lines(), line, out, "input_length", false); !status)
    return status;
  out.id = std::to_string(line);
  out.arrival = static_cast<double>(record.timestamp) / 1000.0;
  if (has_last_ && record.timestamp < last_timestamp_ms_ && !unsorted_ok()) {
    return Unexpected{lines().error_at(
        line, "timestamp",
        fmt::format("{} goes backwards (previous timestamp was {}){}", record.timestamp,
                    last_timestamp_ms_, sort_hint(lines().name())))};
  }
  has_last_ = true;
  last_timestamp_ms_ = record.timestamp;
  return {};
}

}  // namespace kvreplay::requests
