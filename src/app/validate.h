// The `validate` command: is a kvtrace well formed and consistent?
#pragma once

#include <string>

#include "model/run_config.h"

namespace kvreplay {

// Reads and applies a whole trace (pool exhaustion skipped, checks at the end)
// and prints one line saying whether it is valid. Returns the exit code.
int run_validate(const std::string& trace_path, const ConfigOverrides& overrides);

}  // namespace kvreplay
