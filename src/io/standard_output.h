// Standard output for summaries and tables, and the guards main() installs.
#pragma once

#include <cstdio>
#include <string_view>

namespace kvreplay {

// Writes `text` to `stream` (stdout or stderr) and never throws (fmt::print
// throws when fwrite fails, which would abort the process). A failure on
// stdout is remembered and reported at exit (install_output_guards).
void put_text(std::FILE* stream, std::string_view text);

// Called once, first thing in main():
//   - install_signal_cleanup() (io/temporaries.h): SIGINT, SIGTERM, SIGHUP and
//     SIGPIPE remove every temporary file, then end the process as the signal
//     would (exit status 128 + signal; a closed pipe still gives 141);
//   - an exit hook that flushes standard output and, when anything written to
//     it failed (a full disk, /dev/full, EPIPE with SIGPIPE ignored), prints
//       kvreplay: cannot write to standard output: No space left on device
//     on stderr and ends the process with `write_error_exit` (kvreplay: 2, an
//     output that cannot be written, app/exit_codes.h), whatever the command
//     returned.
void install_output_guards(int write_error_exit);

}  // namespace kvreplay
