// Reports of a replay: the JSON report (SPEC 4, deterministic apart from
// "timing"), the text summary, and the per-event timeline CSV.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

#include "core/result.h"
#include "engine/replay/replayer.h"
#include "formats/kvtrace_reader.h"
#include "io/output.h"
#include "report/duration_text.h"  // ms_text, for the callers that print durations

namespace kvreplay {

enum class RunStatus : std::uint8_t { kOk, kOom, kViolation };
std::string_view to_string(RunStatus status);

struct TraceInfo {
  std::string path;
  std::string format;
  std::uint64_t events = 0;
  std::string sha256 = {};  // of the decompressed trace bytes (ByteSource::content_sha256)
};

struct ReplayReportInput {
  TraceInfo trace;
  RunStatus status = RunStatus::kOk;
  const Replayer* replayer = nullptr;
  double wall_seconds = 0.0;
};

// What the v1 report's common sections are made of, for replay and simulate.
struct ReportSource {
  TraceInfo trace;
  RunStatus status = RunStatus::kOk;
  const RunConfig* config = nullptr;
  const ReplayTotals* totals = nullptr;
  const ReplayState* state = nullptr;
  std::uint32_t pool_total = 0;
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::string check_mode;
  const std::optional<Violation>* violation = nullptr;
  double wall_seconds = 0.0;
  std::uint32_t null_blocks = 0;  // vLLM's null block, held: not a block of the pool's share
};

ReportSource report_source(const ReplayReportInput& input);

// The v1 report object. Keys are sorted, so dump() is byte-identical for the
// same inputs apart from timing.wall_seconds.
nlohmann::json base_report(const ReportSource& source);
nlohmann::json replay_report(const ReplayReportInput& input);

// The human summary printed on stdout (its common sections); `color`: ANSI
// styling, for a terminal only (color_enabled in app/terminal.h).
std::string base_summary(const ReportSource& source, bool color = false);
std::string replay_summary(const ReplayReportInput& input, bool color = false);

// "12.3 MiB", "512 B".
std::string bytes_text(std::uint64_t bytes);

// One CSV row per event, into a streamed output (io/output.h), so memory stays
// flat; the header row is written on construction.
class TimelineWriter {
 public:
  explicit TimelineWriter(OutputFile& out);
  void row(const Event& event, const Replayer& replayer);

 private:
  OutputFile& out_;
};

}  // namespace kvreplay
