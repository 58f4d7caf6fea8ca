#include "formats/requests/native_reader.h"

#include <fmt/format.h>

namespace kvreplay::requests {

namespace {

std::unique_ptr<JsonRequestReader> make_native(std::unique_ptr<JsonLines> lines) {
  return std::make_unique<NativeReader>(std::move(lines));
}

}  // namespace

// "id", "hash_ids" and "start" alone do not decide: Mooncake-like files may
// carry an id.
const RequestFormatEntry kNativeFormat = {
    RequestFormat::kNative,
    "native",
    "native",
    "kvreplay's JSON Lines",
    Layout::kJsonLines,
    {kNativeFields, kNativeFields & ~(kId | kHashIds | kStart), kId | kStart,
     kArrival | kPrompt | kOutput, true, make_native},
    {}};

InputStatus NativeReader::finish(const JsonRecord& record, Request& out) {
  const std::uint64_t line = record.line;
  const std::uint32_t seen = record.seen;
  constexpr std::uint32_t kRequired = kArrival | kPrompt | kOutput;
  if (std::uint32_t missing = kRequired & ~seen) {
    return Unexpected{
        lines().error_at(line, first_field(missing),
                         fmt::format("missing (a native record needs {})", fields_of(kRequired)))};
  }
  if ((seen & kPrefixTokens) && !(seen & kPrefix)) {
    return Unexpected{lines().error_at(line, "prefix_tokens", "given without prefix")};
  }
  if ((seen & kPrefix) && !(seen & kPrefixTokens)) {
    return Unexpected{lines().error_at(line, "prefix_tokens", "missing (required with prefix)")};
  }
  if (out.prefix_tokens > out.prompt) {
    return Unexpected{
        lines().error_at(line, "prefix_tokens",
                         fmt::format("{} is more than prompt {}", out.prefix_tokens, out.prompt))};
  }
  if ((seen & kHashBlockTokens) && !(seen & kHashIds)) {
    return Unexpected{lines().error_at(line, "hash_block_tokens", "given without hash_ids")};
  }
  if (seen & kHashIds) {
    if (auto status = check_hash_count(lines(), line, out, "prompt", true); !status) return status;
  }
  if (!(seen & kId)) out.id = std::to_string(line);
  if (seen & kStart) {
    if (has_last_) {
      return Unexpected{
          lines().error_at(line, "start", "only the first record may give the trace's start")};
    }
    start_ = record.start;
  }
  if (has_last_ && out.arrival < last_arrival_ && !unsorted_ok()) {
    return Unexpected{
        lines().error_at(line, "arrival",
                         fmt::format("{} goes backwards (previous arrival was {}){}", out.arrival,
                                     last_arrival_, sort_hint(lines().name())))};
  }
  has_last_ = true;
  last_arrival_ = out.arrival;
  return {};
}

}  // namespace kvreplay::requests
