// Durations in text: ms below 10 s, then s, min and h, never an exponent.
#include "report/duration_text.h"

#include <catch2/catch.hpp>

#include <limits>
#include <string>

using kvreplay::ms_text;

TEST_CASE("duration text: each unit in its range, the unit chosen on the rounded figure") {
  CHECK(ms_text(0.0) == "0.00 ms");
  CHECK(ms_text(0.25) == "0.25 ms");
  CHECK(ms_text(8.4731) == "8.47 ms");
  CHECK(ms_text(9.996) == "10.0 ms");
  CHECK(ms_text(12.34) == "12.3 ms");
  CHECK(ms_text(99.96) == "100 ms");
  CHECK(ms_text(812.3) == "812 ms");
  CHECK(ms_text(9999.4) == "9999 ms");
  CHECK(ms_text(9999.6) == "10.0 s");
  CHECK(ms_text(12'400.0) == "12.4 s");
  CHECK(ms_text(59'940.0) == "59.9 s");
  CHECK(ms_text(59'960.0) == "1.0 min");  // never "60.0 s"
  CHECK(ms_text(192'000.0) == "3.2 min");
  CHECK(ms_text(3'597'000.0) == "1.0 h");  // 59.95 min
  CHECK(ms_text(9.84e6) == "2.7 h");       // the figure that once read 9.84e+06 ms
  CHECK(ms_text(3.6e9) == "1000 h");
  CHECK(ms_text(1e15) == "277777778 h");
  CHECK(ms_text(-812.3) == "-812 ms");
}

TEST_CASE("duration text: not a number is a dash, never nan or inf") {
  CHECK(ms_text(std::numeric_limits<double>::quiet_NaN()) == "-");
  CHECK(ms_text(std::numeric_limits<double>::infinity()) == "-");
  CHECK(ms_text(-std::numeric_limits<double>::infinity()) == "-");
  for (double ms = 1e-3; ms < 1e18; ms *= 1.37) {
    const std::string text = ms_text(ms);
    CAPTURE(ms, text);
    CHECK(text.find('e') == std::string::npos);
  }
}
