// Standard output for summaries and tables, and the guards main() installs.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string_view>
#include <utility>

namespace kvreplay {

// Writes `text` to `stream` (stdout or stderr) and never throws (fmt::print
// throws when fwrite fails, which would abort the process). A failure on
// stdout is remembered and reported at exit (install_output_guards).
// A failure on stderr (`2>/dev/full`) is remembered too: the process then
// ends with the write-error exit code, since a warning was lost.
void put_text(std::FILE* stream, std::string_view text);

// fmt::print(stderr, ...) that never throws: every message of kvreplay goes
// through it (a full stderr must not abort the process, SPEC §8).
template <class... Args>
void eprint(fmt::format_string<Args...> format, Args&&... args) {
  put_text(stderr, fmt::format(format, std::forward<Args>(args)...));
}

// Called once, first thing in main():
//   - install_signal_cleanup() (io/temporaries.h): SIGINT, SIGTERM, SIGHUP and
//     SIGPIPE remove every temporary file, then end the process as the signal
//     would (exit status 128 + signal; a closed pipe still gives 141);
//   - an exit hook that flushes standard output and, when anything written to
//     it failed (a full disk, /dev/full, EPIPE with SIGPIPE ignored), prints
//       kvreplay: cannot write to standard output: No space left on device
//     on stderr and ends the process with `write_error_exit` (kvreplay: 2, an
//     output that cannot be written, app/exit_codes.h), whatever the command
//     returned; so does a failed write to stderr (nothing can be said then).
void install_output_guards(int write_error_exit);

}  // namespace kvreplay
