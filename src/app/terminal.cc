#include "app/terminal.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>

#include "report/duration_text.h"

namespace kvreplay {

namespace {

// The file a run reads, found among the process's open descriptors by device
// and inode; its read offset over its size is the fraction read.
class InputWatch {
 public:
  explicit InputWatch(std::string path) : path_(std::move(path)) {}

  std::optional<double> fraction() {
    if (!located() && !locate()) return std::nullopt;
    const off_t offset = ::lseek(fd_, 0, SEEK_CUR);
    if (offset < 0) return std::nullopt;
    return std::min(1.0, static_cast<double>(offset) / size_);
  }

 private:
  // Whether fd_ is still the file (a descriptor number can be reused).
  bool located() const {
    struct stat now {};
    return fd_ >= 0 && ::fstat(fd_, &now) == 0 && now.st_dev == dev_ && now.st_ino == ino_;
  }

  bool locate() {
    fd_ = -1;
    struct stat target {};
    if (path_ == "-") {
      if (::fstat(STDIN_FILENO, &target) != 0) return false;
    } else if (::stat(path_.c_str(), &target) != 0) {
      return false;
    }
    if (!S_ISREG(target.st_mode) || target.st_size <= 0) return false;
    dev_ = target.st_dev;
    ino_ = target.st_ino;
    size_ = static_cast<double>(target.st_size);
    if (path_ == "-") {
      fd_ = STDIN_FILENO;
      return true;
    }
    DIR* dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return false;
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || fd == own) continue;
      struct stat open {};
      if (::fstat(static_cast<int>(fd), &open) != 0) continue;
      if (open.st_dev == dev_ && open.st_ino == ino_ && (fd_ < 0 || fd < fd_)) {
        fd_ = static_cast<int>(fd);
      }
    }
    ::closedir(dir);
    return fd_ >= 0;
  }

  std::string path_;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  double size_ = 1.0;
};

}  // namespace

bool color_enabled(std::FILE* stream) {
  if (::isatty(::fileno(stream)) == 0) return false;
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && no_color[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

std::string eta_text(double seconds) {
  if (seconds < 59.5) return fmt::format("{:.0f} s", std::max(seconds, 0.0));
  return ms_text(std::max(seconds, 60.0) * 1e3);  // 59.5 s rounds to a minute
}

std::unique_ptr<ProgressLine> ProgressLine::for_stderr(bool wanted, unsigned check_every,
                                                       const std::string& input) {
  const char* env = std::getenv("KVREPLAY_PROGRESS");
  const std::string_view mode = env == nullptr ? "" : env;
  if (!wanted || mode == "off") return nullptr;
  Style style = Style::kTerminal;
  if (mode == "log") {
    style = Style::kLogNow;
  } else if (::isatty(STDERR_FILENO) == 0) {
    style = Style::kLog;
  }
  if (style != Style::kTerminal) {
    // Plain lines need the fraction: none for a run reading a pipe.
    struct stat in {};
    if (input.empty() ||
        (input == "-" && (::fstat(STDIN_FILENO, &in) != 0 || !S_ISREG(in.st_mode)))) {
      return nullptr;
    }
  }
  auto progress = std::make_unique<ProgressLine>(stderr, check_every, style);
  if (!input.empty()) progress->watch_input(input);
  return progress;
}

ProgressLine::ProgressLine(std::FILE* stream, unsigned check_every, Style style)
    : stream_(stream), style_(style), mask_(check_every - 1) {
  assert(check_every > 0 && (check_every & (check_every - 1)) == 0);
  set_clock([] { return Clock::now(); });
}

ProgressLine::~ProgressLine() {
  clear();
}

void ProgressLine::watch_input(const std::string& path) {
  auto watch = std::make_shared<InputWatch>(path);
  fraction_ = [watch] { return watch->fraction(); };
}

void ProgressLine::set_clock(std::function<Clock::time_point()> now) {
  now_ = std::move(now);
  start_ = now_();
  next_draw_ = start_ + (style_ == Style::kTerminal ? Clock::duration(kProgressDelay)
                         : style_ == Style::kLog    ? Clock::duration(kLogDelay)
                                                    : Clock::duration::zero());
}

bool ProgressLine::due_now() {
  if (style_ == Style::kLogNow) return true;  // every check_every calls
  auto now = now_();
  if (now < next_draw_) return false;
  next_draw_ = now + kProgressInterval;
  return true;
}

void ProgressLine::draw(std::string_view text) {
  std::string line(text);
  const std::optional<double> done = fraction();
  int percent = 0;
  if (done) {
    // Never 100% while the run goes on (a simulation drains after the last read).
    percent = std::min(99, static_cast<int>(*done * 100.0));
    line += fmt::format(", {}%", percent);
    if (*done >= 0.01 && *done < 1.0) {
      line += ", ETA " + eta_text(elapsed_seconds() * (1.0 - *done) / *done);
    }
  }
  if (style_ != Style::kTerminal) {
    const int step = percent / kLogStepPercent * kLogStepPercent;
    if (!done || step == 0 || step <= logged_step_) return;
    logged_step_ = step;
    line = "kvreplay " + line + "\n";
    std::fwrite(line.data(), 1, line.size(), stream_);
    std::fflush(stream_);
    return;
  }
  const std::size_t width = line.size();
  line.insert(0, 1, '\r');
  // Blank out what a longer previous line left behind.
  if (width < drawn_width_) line.append(drawn_width_ - width, ' ');
  drawn_width_ = width;
  std::fwrite(line.data(), 1, line.size(), stream_);
  std::fflush(stream_);
}

void ProgressLine::clear() {
  if (drawn_width_ == 0) return;
  std::string line = "\r";
  line.append(drawn_width_, ' ');
  line += '\r';
  std::fwrite(line.data(), 1, line.size(), stream_);
  std::fflush(stream_);
  drawn_width_ = 0;
}

double ProgressLine::elapsed_seconds() const {
  return std::chrono::duration<double>(now_() - start_).count();
}

}  // namespace kvreplay
