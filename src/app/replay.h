// The `replay` command: a kvtrace through the Replayer (and the data plane),
// its summary, JSON report, timeline and HTML page.
#pragma once

#include <string>

#include "app/exit_codes.h"
#include "dataplane/backend.h"
#include "dataplane/data_plane.h"
#include "engine/replay/replayer.h"
#include "model/run_config.h"

namespace kvreplay {

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

}  // namespace kvreplay
