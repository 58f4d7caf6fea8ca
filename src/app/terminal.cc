#include "app/terminal.h"

#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <cstring>

namespace kvreplay {

bool color_enabled(std::FILE* stream) {
  if (::isatty(::fileno(stream)) == 0) return false;
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && no_color[0] != '\0') return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

std::unique_ptr<ProgressLine> ProgressLine::for_stderr(bool wanted, unsigned check_every) {
  if (!wanted || ::isatty(STDERR_FILENO) == 0) return nullptr;
  return std::make_unique<ProgressLine>(stderr, check_every);
}

ProgressLine::ProgressLine(std::FILE* stream, unsigned check_every)
    : stream_(stream),
      mask_(check_every - 1),
      start_(std::chrono::steady_clock::now()),
      next_draw_(start_ + kProgressDelay) {
  assert(check_every > 0 && (check_every & (check_every - 1)) == 0);
}

ProgressLine::~ProgressLine() {
  clear();
}

bool ProgressLine::due_now() {
  auto now = std::chrono::steady_clock::now();
  if (now < next_draw_) return false;
  next_draw_ = now + kProgressInterval;
  return true;
}

void ProgressLine::draw(std::string_view text) {
  std::string line = "\r";
  line += text;
  // Blank out what a longer previous line left behind.
  if (text.size() < drawn_width_) line.append(drawn_width_ - text.size(), ' ');
  drawn_width_ = text.size();
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
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace kvreplay
