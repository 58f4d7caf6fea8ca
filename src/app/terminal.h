// Terminal manners: colour only for a terminal that wants it, and progress on
// stderr: a line redrawn in place on a terminal, plain lines in a pipe or file.
//
// Contract:
//   - Colour: `stream` is a terminal, NO_COLOR is unset or empty
//     (https://no-color.org), and TERM is not "dumb". Never in a pipe or file.
//   - Progress: only when the caller wants it (not --quiet) and KVREPLAY_PROGRESS
//     is not "off". The fraction done is the read offset of the run's input file
//     over its size (a regular file, gzip too, or standard input redirected from
//     one; found through /proc/self/fd, so Linux only); when it is known, each
//     line ends with " · 42%, ETA 1.2 min" (the ETA from the elapsed time).
//       - stderr a terminal: one line drawn with a carriage return, no escape
//         codes; the first draw waits kProgressDelay (a short run shows
//         nothing), then at most one redraw per kProgressInterval; clear() (or
//         the destructor) erases it, so nothing of it stays on the screen.
//       - otherwise (a pipe, a file: CI logs): a plain line each time the
//         percentage passes a multiple of kLogStepPercent, only once the run has
//         taken kLogDelay (short runs print nothing), and only when the fraction
//         is known (a run reading a pipe prints nothing).
//       - KVREPLAY_PROGRESS=log: plain lines whatever stderr is, from the start
//         of the run, every kLogStepPercent (for CI logs and tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "report/paint.h"  // Paint and grouped(), for the callers that colour what they print

namespace kvreplay {

bool color_enabled(std::FILE* stream);

class ProgressLine {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Style : std::uint8_t {
    kTerminal,  // one line, redrawn in place
    kLog,       // a plain line every kLogStepPercent, after kLogDelay
    kLogNow,    // a plain line every kLogStepPercent from the start (KVREPLAY_PROGRESS=log)
  };
  static constexpr std::chrono::milliseconds kProgressDelay{500};
  static constexpr std::chrono::milliseconds kProgressInterval{200};
  static constexpr std::chrono::seconds kLogDelay{10};
  static constexpr int kLogStepPercent = 10;

  // Progress on stderr, or nullptr when none is shown (not `wanted`, or
  // KVREPLAY_PROGRESS=off). `input`: the file the run reads ("-": standard
  // input), whose read offset gives the fraction done. `check_every`: due()
  // reads the clock once per this many calls (a power of two), so it can be
  // called per event.
  static std::unique_ptr<ProgressLine> for_stderr(bool wanted, unsigned check_every = 256,
                                                  const std::string& input = {});
  // For tests: draws on `stream` whatever it is.
  ProgressLine(std::FILE* stream, unsigned check_every, Style style = Style::kTerminal);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // The fraction done comes from the read offset of `path` ("-": standard input).
  void watch_input(const std::string& path);
  // Or from `fraction` (tests); nullopt when not known.
  void set_fraction(std::function<std::optional<double>()> fraction) {
    fraction_ = std::move(fraction);
  }
  // The clock (tests). Call before the first due().
  void set_clock(std::function<Clock::time_point()> now);

  // True when a redraw is due; then call draw().
  bool due() {
    if ((++calls_ & mask_) != 0) return false;
    return due_now();
  }
  // Shows `text` (kept short: it must not wrap), with the percentage and ETA
  // when the fraction is known. In a log, a line only when one is due (above).
  void draw(std::string_view text);
  // Erases the line, if one is drawn. Call before printing anything else.
  void clear();
  double elapsed_seconds() const;

 private:
  bool due_now();
  std::optional<double> fraction() const { return fraction_ ? fraction_() : std::nullopt; }

  std::FILE* stream_;
  Style style_;
  unsigned mask_;
  unsigned calls_ = 0;
  std::function<Clock::time_point()> now_;
  std::function<std::optional<double>()> fraction_;
  Clock::time_point start_;
  Clock::time_point next_draw_;
  std::size_t drawn_width_ = 0;
  int logged_step_ = -1;  // the last multiple of kLogStepPercent logged
};

// "12 s", "3.2 min": a time left, whole seconds below a minute (ms_text above).
std::string eta_text(double seconds);

}  // namespace kvreplay
