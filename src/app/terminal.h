// Terminal manners: colour only for a terminal that wants it, and a progress
// line on stderr only when stderr is a terminal.
//
// Contract:
//   - Colour: `stream` is a terminal, NO_COLOR is unset or empty
//     (https://no-color.org), and TERM is not "dumb". Never in a pipe or file.
//   - Progress: only when stderr is a terminal and the caller wants it (not
//     --quiet); drawn with a carriage return, no escape codes; the first draw
//     waits kProgressDelay (a short run shows nothing), then at most one redraw
//     per kProgressInterval; clear() (or the destructor) erases it, so nothing
//     of it stays on the screen.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "report/paint.h"  // Paint and grouped(), for the callers that colour what they print

namespace kvreplay {

bool color_enabled(std::FILE* stream);

class ProgressLine {
 public:
  static constexpr std::chrono::milliseconds kProgressDelay{500};
  static constexpr std::chrono::milliseconds kProgressInterval{200};

  // A progress line on stderr, or nullptr when it must not be drawn (not
  // `wanted`, or stderr is not a terminal). `check_every`: due() reads the
  // clock once per this many calls (a power of two), so it can be called per event.
  static std::unique_ptr<ProgressLine> for_stderr(bool wanted, unsigned check_every = 256);
  // For tests: draws on `stream` whatever it is.
  ProgressLine(std::FILE* stream, unsigned check_every);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // True when a redraw is due; then call draw().
  bool due() {
    if ((++calls_ & mask_) != 0) return false;
    return due_now();
  }
  // Replaces the line with `text` (kept short: it must not wrap).
  void draw(std::string_view text);
  // Erases the line, if one is drawn. Call before printing anything else.
  void clear();
  double elapsed_seconds() const;

 private:
  bool due_now();

  std::FILE* stream_;
  unsigned mask_;
  unsigned calls_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point next_draw_;
  std::size_t drawn_width_ = 0;
};

}  // namespace kvreplay
