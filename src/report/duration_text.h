// Durations as people read them, for every text table and summary (simulate's
// latency lines, plan's table, the HTML cards, the progress line's ETA). JSON
// keeps plain numbers in ms; only text goes through here.
#pragma once

#include <string>

namespace kvreplay {

// A duration in ms, in the largest unit that keeps it readable, with three
// significant figures or one decimal:
//   below 10 s     ms   "0.25 ms", "12.3 ms", "812 ms", "9999 ms"
//   below 60 s     s    "10.0 s", "59.9 s"
//   below 60 min   min  "1.0 min", "59.9 min"
//   from 1 h       h    "1.0 h", "2.7 h", "277778 h"
// The unit is chosen on the rounded figure, so 59.96 s is "1.0 min", never
// "60.0 s". Negative values keep their sign; NaN and infinities are "-".
std::string ms_text(double ms);

}  // namespace kvreplay
