// Calendar date-times read exactly, with no locale or time-zone lookup, for
// the Azure traces' TIMESTAMP column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvreplay::requests {

struct Instant {
  std::int64_t seconds = 0;  // since 1970-01-01T00:00:00Z
  std::int64_t nanos = 0;    // 0..999'999'999
  bool operator<(const Instant& other) const {
    return seconds != other.seconds ? seconds < other.seconds : nanos < other.nanos;
  }
};

// Parses "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" (a 'T' may stand
// for the space; up to 9 fraction digits). Error: the problem, quoting `text`.
Result<Instant, std::string> parse_datetime(std::string_view text);

// Seconds from `origin` to `t` (t >= origin), as exactly as a double allows.
double seconds_between(const Instant& origin, const Instant& t);

}  // namespace kvreplay::requests
