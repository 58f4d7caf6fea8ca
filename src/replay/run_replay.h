// The `replay` and `validate` subcommands: reader -> Replayer -> reports.
#pragma once

#include <string>

#include "replay/replayer.h"
#include "replay/run_config.h"

namespace kvreplay {

// Exit codes of every subcommand (SPEC 6).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitInput = 2;
inline constexpr int kExitOom = 3;

struct ReplayRequest {
  std::string trace_path;
  ConfigOverrides overrides;
  CheckPolicy check;
  OomPolicy on_oom = OomPolicy::kFail;
  std::string report_path;    // empty: none
  std::string timeline_path;  // empty: none
  bool quiet = false;         // no summary on stdout
};

// Replays a trace; prints the summary, writes the report and timeline.
// Returns the exit code. Bad input prints one "FILE:LINE: FIELD: problem"
// line on stderr and leaves no report or timeline behind.
int run_replay(const ReplayRequest& request);

// Reads and applies a whole trace (pool exhaustion skipped, checks at the end)
// and prints one line saying whether it is valid. Returns the exit code.
int run_validate(const std::string& trace_path, const ConfigOverrides& overrides);

}  // namespace kvreplay
