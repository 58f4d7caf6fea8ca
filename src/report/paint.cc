#include "report/paint.h"

namespace kvreplay {

std::string Paint::wrap(std::string_view code, std::string_view text) const {
  if (!on) return std::string(text);
  std::string out = "\033[";
  out += code;
  out += 'm';
  out += text;
  out += "\033[0m";
  return out;
}

std::string grouped(std::uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace kvreplay
