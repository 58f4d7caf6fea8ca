// Fuzz target: the kvtrace reader, and every event it accepts applied to a
// Replayer over a small pool with the invariant checker on after every event.
//
// Input: any bytes. Gzip (by its magic bytes) goes through a memory file and
// ByteSource::open, everything else through KvTraceReader::from_string.
// The header's pool is shrunk to at most kPoolBlocks blocks so that pool
// exhaustion and --on-oom skip are reached, and the run stays fast.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/replay/replayer.h"
#include "formats/kvtrace_reader.h"
#include "fuzz_support.h"
#include "model/run_config.h"
#include "report/report.h"

namespace {

using namespace kvreplay;

constexpr std::uint32_t kPoolBlocks = 64;

void replay(std::string_view data) {
  std::optional<fuzz::MemoryFile> file;
  InputResult<std::unique_ptr<KvTraceReader>> opened = Unexpected{InputError{}};
  if (fuzz::is_gzip(data)) {
    file.emplace(data);
    opened = KvTraceReader::open(file->path());
  } else {
    opened = KvTraceReader::from_string(std::string(data), fuzz::kName);
  }
  if (!opened) {
    fuzz::check_error(opened.error(), data);
    return;
  }
  KvTraceReader& reader = *opened.value();
  auto resolved = resolve_run_config(reader.header().config, ConfigOverrides{}, reader.name(),
                                     reader.header().config_line);
  if (!resolved) {
    fuzz::check_error(resolved.error(), data);
    return;
  }
  RunConfig config = resolved.value();
  if (config.kv.pool_blocks > kPoolBlocks) {
    config.kv.pool_blocks = kPoolBlocks;
    config.kv_memory.reset();
  }
  Replayer replayer(config, CheckPolicy{CheckPolicy::Mode::kEvery, 1}, OomPolicy::kSkip);
  Event event;
  for (;;) {
    auto more = reader.next(event);
    if (!more) {
      fuzz::check_error(more.error(), data);
      return;
    }
    if (!more.value()) break;
    auto outcome = replayer.apply(event, reader.name());
    if (!outcome) {
      fuzz::check_error(outcome.error(), data);
      return;
    }
    if (outcome.value() == Replayer::Outcome::kViolation) {
      fuzz::fail("invariant violated", replayer.violation()->message);
    }
  }
  if (replayer.finish() == Replayer::Outcome::kViolation) {
    fuzz::fail("invariant violated at the end", replayer.violation()->message);
  }
  ReplayReportInput input;
  input.trace.path = reader.name();
  input.trace.format = std::string(reader.format_name());
  input.trace.events = replayer.totals().events;
  input.replayer = &replayer;
  std::string text = replay_report(input).dump() + replay_summary(input);
  if (text.empty()) fuzz::fail("empty report", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  replay(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
