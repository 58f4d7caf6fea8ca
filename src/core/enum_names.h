// Names for enums: each enum states its names once, in a constexpr table of
// {value, name} pairs, and both directions (to_string and parse_*) read it.
//
//   constexpr EnumName<Dtype> kDtypeNames[] = {{Dtype::kFp32, "fp32"}, ...};
//   std::string_view to_string(Dtype d) { return enum_name(kDtypeNames, d); }
//   std::optional<Dtype> parse_dtype(std::string_view s) { return enum_parse(kDtypeNames, s); }
//
// Contract: a table lists each value at most once and each name at most once
// (enum_names_unique checks it at compile time); names are the exact spellings
// reports and the command line use. A value missing from the table names as
// `unknown` ("?" unless given); a name missing from it parses to nullopt.
// Lookup is a linear scan: the tables are a handful of entries.
// A names() function per enum (enum_names) lets the command line accept exactly
// the spellings that parse.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

template <typename Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

template <typename Enum, std::size_t N>
constexpr std::string_view enum_name(const EnumName<Enum> (&table)[N], Enum value,
                                     std::string_view unknown = "?") {
  for (const EnumName<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> enum_parse(const EnumName<Enum> (&table)[N], std::string_view name) {
  for (const EnumName<Enum>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// The names in table order: the choices a command-line option accepts.
template <typename Enum, std::size_t N>
std::vector<std::string> enum_names(const EnumName<Enum> (&table)[N]) {
  std::vector<std::string> names;
  names.reserve(N);
  for (const EnumName<Enum>& entry : table) names.emplace_back(entry.name);
  return names;
}

// True when no value and no name appears twice: static_assert it beside a table.
template <typename Enum, std::size_t N>
constexpr bool enum_names_unique(const EnumName<Enum> (&table)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = i + 1; j < N; ++j) {
      if (table[i].value == table[j].value || table[i].name == table[j].name) return false;
    }
  }
  return true;
}

}  // namespace kvreplay
