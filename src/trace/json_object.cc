#include "trace/json_object.h"

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

}  // namespace kvreplay
