// The exit codes of every command (SPEC 6), defined once.
#pragma once

namespace kvreplay {

inline constexpr int kExitOk = 0;
// An invariant check, --verify or a compare gate failed.
inline constexpr int kExitCheckFailed = 1;
// A usage error, bad input, or an output that cannot be written.
inline constexpr int kExitInput = 2;
// The pool ran out (replay --on-oom fail).
inline constexpr int kExitOom = 3;

}  // namespace kvreplay
