// The members of one JSON object, read the same way by every reader of JSON
// records (kvtrace events, request records), so that their messages agree:
// the key loop and the "expected X, got Y" wording of a value.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "trace/input_error.h"
#include "trace/json_cursor.h"

namespace kvreplay {

// Names the next value for "expected X, got Y" messages: its kind, or the
// offending byte when it cannot start a value.
inline std::string describe_value(JsonCursor& cursor) {
  int c = cursor.peek();
  switch (c) {
    case '"': return "a string";
    case '[': return "an array";
    case '{': return "an object";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return "a number";
      return cursor.describe_next();
  }
}

// Reads the members of the object whose '{' the caller consumed, up to and
// including its '}'. For each member, on_key(key) is called with the cursor
// before the value, and must read the whole value (or return why not). `a_noun`
// and `the_noun` name the object in messages ("a record", "the record").
//   on_key: (const std::string& key) -> InputStatus
//   fail:   (std::string_view field, std::string problem, bool at_cursor) -> InputError
// `at_cursor` is set for problems the cursor stopped on, where a failed source
// (a truncated gzip, say) is the real cause and names "file" instead. Messages:
//   FIELD  problem
//   json   expected a key, got X            (or the cursor's string problem)
//   KEY    expected ':', got X
//   json   unexpected end of input inside A_NOUN
//   json   expected ',' or '}' in THE_NOUN, got X
template <class OnKey, class Fail>
InputStatus read_members(JsonCursor& in, std::string& key, std::string_view a_noun,
                         std::string_view the_noun, OnKey&& on_key, Fail&& fail) {
  if (in.peek() == '}') {
    in.skip();
    return {};
  }
  for (;;) {
    if (in.peek() != '"') {
      return Unexpected{
          fail("json", fmt::format("expected a key, got {}", in.describe_next()), true)};
    }
    if (auto r = in.read_string(key); !r) return Unexpected{fail("json", r.error(), true)};
    if (in.peek() != ':') {
      return Unexpected{fail(key, fmt::format("expected ':', got {}", in.describe_next()), true)};
    }
    in.skip();
    if (auto status = on_key(key); !status) return status;
    int sep = in.peek();
    if (sep < 0) {
      return Unexpected{
          fail("json", fmt::format("unexpected end of input inside {}", a_noun), true)};
    }
    if (sep != ',' && sep != '}') {
      return Unexpected{fail(
          "json", fmt::format("expected ',' or '}}' in {}, got {}", the_noun, in.describe_next()),
          false)};
    }
    in.skip();
    if (sep == '}') return {};
  }
}

}  // namespace kvreplay
