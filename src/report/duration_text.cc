#include "report/duration_text.h"

#include <fmt/format.h>

#include <cmath>

namespace kvreplay {

std::string ms_text(double ms) {
  if (!std::isfinite(ms)) return "-";
  const char* sign = ms < 0 ? "-" : "";
  const double v = std::fabs(ms);
  // Each unit holds what rounds to below its ceiling at the precision it prints.
  if (v < 9.995) return fmt::format("{}{:.2f} ms", sign, v);
  if (v < 99.95) return fmt::format("{}{:.1f} ms", sign, v);
  if (v < 9999.5) return fmt::format("{}{:.0f} ms", sign, v);
  const double s = v / 1e3;
  if (s < 59.95) return fmt::format("{}{:.1f} s", sign, s);
  const double min = s / 60.0;
  if (min < 59.95) return fmt::format("{}{:.1f} min", sign, min);
  const double h = min / 60.0;
  if (h < 999.95) return fmt::format("{}{:.1f} h", sign, h);
  return fmt::format("{}{:.0f} h", sign, h);
}

}  // namespace kvreplay
