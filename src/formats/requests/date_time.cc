#include "formats/requests/date_time.h"

#include <fmt/format.h>

#include "formats/requests/csv.h"

namespace kvreplay::requests {

namespace {

using Problem = Unexpected<std::string>;

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

unsigned days_in_month(std::int64_t y, unsigned m) {
  static constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

}  // namespace

Result<Instant, std::string> parse_datetime(std::string_view text) {
  const std::string expected = fmt::format(
      "expected a date and time like 2023-11-16 18:15:46.6805900, got {}", quoted(text));
  std::size_t at = 0;
  auto number = [&](std::size_t width, unsigned& value) {
    if (at + width > text.size()) return false;
    value = 0;
    for (std::size_t i = 0; i < width; ++i) {
      char c = text[at + i];
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    at += width;
    return true;
  };
  auto literal = [&](char c) {
    if (at >= text.size() || text[at] != c) return false;
    ++at;
    return true;
  };
  unsigned year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!number(4, year) || !literal('-') || !number(2, month) || !literal('-') || !number(2, day)) {
    return Problem{expected};
  }
  if (!literal(' ') && !literal('T')) return Problem{expected};
  if (!number(2, hour) || !literal(':') || !number(2, minute) || !literal(':') ||
      !number(2, second)) {
    return Problem{expected};
  }
  std::int64_t nanos = 0;
  if (literal('.')) {
    std::size_t digits = 0;
    std::int64_t scale = 100'000'000;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (++digits > 9)
        return Problem{fmt::format("{}: more than 9 fraction digits", quoted(text))};
      nanos += (text[at] - '0') * scale;
      scale /= 10;
      ++at;
    }
    if (digits == 0) return Problem{expected};
  }
  std::int64_t offset = 0;  // seconds east of UTC
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    bool east = text[at] == '+';
    ++at;
    unsigned oh = 0, om = 0;
    if (!number(2, oh) || !literal(':') || !number(2, om) || oh > 23 || om > 59) {
      return Problem{expected};
    }
    offset = (east ? 1 : -1) * static_cast<std::int64_t>(oh * 3600 + om * 60);
  } else {
    (void)literal('Z');
  }
  if (at != text.size()) return Problem{expected};
  if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour > 23 ||
      minute > 59 || second > 59) {
    return Problem{fmt::format("{} is not a valid date and time", quoted(text))};
  }
  Instant instant;
  instant.seconds = days_from_civil(year, month, day) * 86400 +
                    static_cast<std::int64_t>(hour * 3600 + minute * 60 + second) - offset;
  instant.nanos = nanos;
  return instant;
}

// Seconds from `origin` to `t` (t >= origin), as exactly as a double allows.
double seconds_between(const Instant& origin, const Instant& t) {
  std::int64_t ds = t.seconds - origin.seconds;
  std::int64_t dns = t.nanos - origin.nanos;
  if (ds < (std::int64_t{1} << 33)) {
    return static_cast<double>(ds * 1'000'000'000 + dns) / 1e9;
  }
  return static_cast<double>(ds) + static_cast<double>(dns) / 1e9;
}

}  // namespace kvreplay::requests
