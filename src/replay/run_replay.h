// The `replay` and `validate` subcommands: reader -> Replayer -> reports.
#pragma once

#include <string>

#include "dataplane/backend.h"
#include "dataplane/data_plane.h"
#include "replay/replayer.h"
#include "replay/run_config.h"

namespace kvreplay {

// Exit codes of every subcommand (SPEC 6).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitInput = 2;
inline constexpr int kExitOom = 3;

// The data plane of a replay (SPEC 5; README "Data plane").
struct DataPlaneRequest {
  BackendKind backend = BackendKind::kNone;  // --backend: none keeps metadata only
  DataPlaneOptions options;                  // --verify, --attention
  std::optional<std::uint64_t> arena_limit;  // --arena-limit (default: see make_backend)
  DataPlaneFaults faults;                    // planted faults: tests only, never the CLI
};

struct ReplayRequest {
  std::string trace_path;
  ConfigOverrides overrides;
  CheckPolicy check;
  OomPolicy on_oom = OomPolicy::kFail;
  std::string report_path;    // empty: none
  std::string timeline_path;  // empty: none
  std::string html_path;      // empty: none
  bool quiet = false;         // no summary on stdout, no progress line on stderr
  DataPlaneRequest dataplane;
};

// Replays a trace; prints the summary, writes the report and timeline.
// Returns the exit code. Bad input prints one "FILE:LINE: FIELD: problem"
// line on stderr and leaves no report or timeline behind.
int run_replay(const ReplayRequest& request);

// Reads and applies a whole trace (pool exhaustion skipped, checks at the end)
// and prints one line saying whether it is valid. Returns the exit code.
int run_validate(const std::string& trace_path, const ConfigOverrides& overrides);

}  // namespace kvreplay
