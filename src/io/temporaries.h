// The temporary files of a run, and the signals that must not leave them behind.
//
// Every temporary an OutputFile creates is registered here until it is renamed
// into place or removed. The registry is a fixed array of fixed-size slots, so
// a signal handler can walk it and unlink every path without allocating:
// install_signal_cleanup() makes SIGINT, SIGTERM, SIGHUP and SIGPIPE do exactly
// that, then re-raise the signal with its default action, so the process still
// ends as killed by it (exit status 128 + signal in a shell).
//
// Contract:
//   - register_temporary / release_temporary are called with the catching
//     signals blocked in the calling thread (BlockedSignals), so a handler on
//     that thread never sees a slot half written. A handler running on another
//     thread at the same instant may miss a path being registered; kvreplay
//     creates and commits its outputs while no other thread runs.
//   - A signal ignored when install_signal_cleanup() runs (nohup's SIGHUP, a
//     background job's SIGINT, a parent's ignored SIGPIPE) stays ignored.
#pragma once

#include <signal.h>

#include <cstddef>

namespace kvreplay {

// The most temporaries alive at once (a run has at most four outputs).
inline constexpr std::size_t kMaxTemporaries = 32;
// The longest temporary path, terminating NUL included.
inline constexpr std::size_t kMaxTemporaryPath = 4096;

// Records `path` so the signal handlers unlink it. Returns the slot to release,
// or -1 when the registry is full or the path too long (the caller refuses to
// create the temporary).
int register_temporary(const char* path);
// Forgets a slot (the temporary was renamed or removed). -1 is ignored.
void release_temporary(int slot);
// Unlinks every registered temporary. Async-signal-safe; the slots stay
// registered (unlinking a path twice is harmless).
void remove_registered_temporaries() noexcept;

// Installs the handlers described above, once; later calls do nothing.
void install_signal_cleanup();

// Blocks SIGINT, SIGTERM, SIGHUP and SIGPIPE in the calling thread for its
// lifetime, so a temporary is never created without being registered, and a
// commit's renames are never cut in half.
class BlockedSignals {
 public:
  BlockedSignals();
  ~BlockedSignals();
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace kvreplay
