// Text styling for summaries and tables: ANSI colour that is a no-op when off,
// and digit grouping. Whether colour is on is the caller's decision
// (app/terminal.h: color_enabled).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvreplay {

// ANSI SGR styling that is a no-op when `on` is false.
struct Paint {
  bool on = false;
  std::string bold(std::string_view text) const { return wrap("1", text); }
  std::string dim(std::string_view text) const { return wrap("2", text); }
  std::string red(std::string_view text) const { return wrap("1;31", text); }
  std::string green(std::string_view text) const { return wrap("32", text); }
  std::string yellow(std::string_view text) const { return wrap("33", text); }

 private:
  std::string wrap(std::string_view code, std::string_view text) const;
};

// "1234567" -> "1,234,567".
std::string grouped(std::uint64_t value);

}  // namespace kvreplay
