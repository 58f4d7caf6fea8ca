#include "io/standard_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/temporaries.h"

namespace kvreplay {

namespace {

// The first errno of a failed write to stdout; kUnknown when only the
// stream's error flag tells (a failed fflush elsewhere whose errno is gone).
constexpr int kUnknown = -1;
std::atomic<int> g_stdout_error{0};
std::atomic<int> g_write_error_exit{1};  // set by install_output_guards
std::atomic<bool> g_stderr_failed{false};

void remember_stdout_error(int error) {
  int none = 0;
  g_stdout_error.compare_exchange_strong(none, error != 0 ? error : kUnknown);
}

void check_stdout_at_exit() {
  errno = 0;
  if (std::fflush(stdout) != 0) remember_stdout_error(errno);
  if (std::ferror(stdout)) remember_stdout_error(0);
  const int error = g_stdout_error.load();
  if (error == 0) {
    if (g_stderr_failed.load()) ::_exit(g_write_error_exit.load());
    return;
  }
  const std::string line = fmt::format("kvreplay: cannot write to standard output: {}\n",
                                       error == kUnknown ? "write error" : std::strerror(error));
  if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // Nowhere left to say it: the exit code still does.
  }
  ::_exit(g_write_error_exit.load());
}

}  // namespace

void put_text(std::FILE* stream, std::string_view text) {
  if (text.empty()) return;
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stream) != text.size()) {
    if (stream == stdout) remember_stdout_error(errno);
    if (stream == stderr) g_stderr_failed.store(true);
  }
}

void install_output_guards(int write_error_exit) {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  g_write_error_exit.store(write_error_exit);
  install_signal_cleanup();
  std::atexit(check_stdout_at_exit);
}

}  // namespace kvreplay
