#include "io/json_object.h"

#include <charconv>
#include <string>
#include <system_error>

namespace kvreplay {

bool JsonMembers::fail(std::string_view field, std::string message, bool at_cursor) {
  failed_ = true;
  problem_ = Problem{std::string(field), std::move(message), at_cursor};
  return false;
}

bool JsonMembers::bad_separator(int sep) {
  if (sep < 0) return fail("json", fmt::format("unexpected end of input inside {}", a_noun_));
  return fail("json",
              fmt::format("expected ',' or '}}' in {}, got {}", the_noun_, in_.describe_next()),
              false);
}

bool JsonMembers::fail_expected(std::string_view field, std::string_view what) {
  return fail(field, fmt::format("expected {}, got {}", what, in_.describe_next()));
}

namespace {

Unexpected<JsonMembers::Problem> uint_problem(std::string message, bool at_cursor = false) {
  return Unexpected{JsonMembers::Problem{std::string(), std::move(message), at_cursor}};
}

std::string below_min_text(std::string_view value, std::uint64_t min, BelowMin wording) {
  return wording == BelowMin::kPlain ? fmt::format("{} must be >= {}", value, min)
                                     : fmt::format("{} (must be >= {})", value, min);
}

}  // namespace

Result<std::uint64_t, JsonMembers::Problem> json_uint_out_of_range(std::uint64_t value,
                                                                   std::uint64_t min,
                                                                   std::uint64_t max,
                                                                   BelowMin wording) {
  if (value > max) return uint_problem(fmt::format("{} is too large (at most {})", value, max));
  return uint_problem(below_min_text(std::to_string(value), min, wording));
}

Result<std::uint64_t, JsonMembers::Problem> read_json_uint_slow(
    JsonCursor& in, std::string& scratch, std::uint64_t min, std::uint64_t max, BelowMin wording) {
  int c = in.peek();
  if (c != '-' && (c < '0' || c > '9')) {
    return uint_problem(fmt::format("expected an integer, got {}", describe_value(in)));
  }
  if (auto r = in.read_number(scratch); !r) return uint_problem(r.error(), true);
  if (scratch.find_first_of(".eE") != std::string::npos) {
    return uint_problem(fmt::format("expected an integer, got {}", scratch));
  }
  if (scratch[0] == '-') {
    if (scratch == "-0") return uint_problem("expected an integer, got -0");
    return uint_problem(fmt::format("{} is negative (must be >= {})", scratch, min));
  }
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(scratch.data(), scratch.data() + scratch.size(), value);
  if (ec != std::errc{} || ptr != scratch.data() + scratch.size() || value > max) {
    return uint_problem(fmt::format("{} is too large (at most {})", scratch, max));
  }
  if (value < min) return uint_problem(below_min_text(scratch, min, wording));
  return value;
}

}  // namespace kvreplay
