// Sets of a record's fields as bit masks over a table of field names (bit i is
// names[i]), for the readers' "missing", "unknown" and "not a field of" messages.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvreplay {

// The bit of `key` in `names`, or 0 when it is not a known field.
inline std::uint32_t field_bit(std::span<const std::string_view> names, std::string_view key) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == key) return 1u << i;
  }
  return 0;
}

// The fields of `mask` in bit order, comma-separated ("" for none).
inline std::string field_list(std::span<const std::string_view> names, std::uint32_t mask) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if ((mask & (1u << i)) == 0) continue;
    if (!out.empty()) out += ", ";
    out += names[i];
  }
  return out;
}

// The first field of `mask` in bit order ("?" for none).
inline std::string_view first_field(std::span<const std::string_view> names, std::uint32_t mask) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (mask & (1u << i)) return names[i];
  }
  return "?";
}

}  // namespace kvreplay
