// The members of one JSON object, read the same way by every reader of JSON
// records (kvtrace events, request records), so that their messages agree:
// the key loop and the "expected X, got Y" wording of a value.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"
#include "io/input_error.h"
#include "io/json_cursor.h"

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

// Steps through the members of the object whose '{' the caller consumed, up
// to and including its '}', keeping the caller's handling of each value in
// the caller's own loop (the hot path of every reader):
//   JsonMembers members(cursor, key, "a record", "the record");
//   while (members.next()) {
//     ... key holds the member's key; read its whole value ...
//   }
//   if (members.failed()) return Unexpected{... members.problem() ...};
// `a_noun` and `the_noun` name the object in messages. Problems (FIELD problem):
//   json   expected a key, got X            (or the cursor's string problem)
//   KEY    expected ':', got X
//   json   unexpected end of input inside A_NOUN
//   json   expected ',' or '}' in THE_NOUN, got X
// Which keys are known and whether one may repeat is the caller's business.
class JsonMembers {
 public:
  struct Problem {
    std::string field;
    std::string message;
    // The cursor stopped on it: a failed source (a truncated gzip, say) is then
    // the real cause, and the caller names "file" instead.
    bool at_cursor = false;
  };

  JsonMembers(JsonCursor& in, std::string& key, std::string_view a_noun, std::string_view the_noun)
      : in_(in), key_(key), a_noun_(a_noun), the_noun_(the_noun) {}

  // Moves to the next member: true with the key read and the cursor before its
  // value; false after the closing '}', or on a problem (failed()). Inlined
  // into each reader's loop, as the loop it replaces was.
  [[gnu::always_inline]] bool next() {
    int c = 0;
    if (started_) {
      int sep = in_.peek();
      if (sep != ',') {
        if (sep != '}') return bad_separator(sep);
        in_.skip();
        return false;
      }
      in_.skip();
      c = in_.peek();
    } else {
      started_ = true;
      c = in_.peek();
      if (c == '}') {
        in_.skip();
        return false;
      }
    }
    if (c != '"') return fail_expected("json", "a key");
    if (auto r = in_.read_string(key_); !r) return fail("json", r.error());
    if (in_.peek() != ':') return fail_expected(key_, "':'");
    in_.skip();
    return true;
  }

  bool failed() const { return failed_; }
  const Problem& problem() const { return problem_; }

 private:
  // Out of line (json_object.cc): the hot path stays small.
  bool fail(std::string_view field, std::string message, bool at_cursor = true);
  bool bad_separator(int sep);
  // "expected WHAT, got X" with X the next token.
  bool fail_expected(std::string_view field, std::string_view what);

  JsonCursor& in_;
  std::string& key_;
  std::string_view a_noun_;
  std::string_view the_noun_;
  bool started_ = false;
  bool failed_ = false;
  Problem problem_;
};

// How a value below the minimum is worded. Both wordings stand in published
// bad-input corpora, so both are kept: kvtrace fields say "0 must be >= 1",
// request records "0 (must be >= 1)".
enum class BelowMin { kPlain, kParenthesised };

// The rare paths of read_json_uint, out of line (json_object.cc).
Result<std::uint64_t, JsonMembers::Problem> json_uint_out_of_range(std::uint64_t value,
                                                                   std::uint64_t min,
                                                                   std::uint64_t max,
                                                                   BelowMin wording);
Result<std::uint64_t, JsonMembers::Problem> read_json_uint_slow(
    JsonCursor& in, std::string& scratch, std::uint64_t min, std::uint64_t max, BelowMin wording);

// Reads an unsigned integer in [min, max], as every JSON reader reads one:
// the cursor's fast path for a plain integer, else the whole number's text
// (fractions, exponents, -0, negatives and overflow each named). The
// problem's `field` is left for the caller, whose field it is; `at_cursor` as
// in JsonMembers. `scratch` holds the number's text on the slow path.
//   expected an integer, got X | V is negative (must be >= MIN)
//   V is too large (at most MAX) | V must be >= MIN (or "V (must be >= MIN)")
[[gnu::always_inline]] inline Result<std::uint64_t, JsonMembers::Problem> read_json_uint(
    JsonCursor& in, std::string& scratch, std::uint64_t min, std::uint64_t max, BelowMin wording) {
  if (std::uint64_t fast = 0; in.peek() >= 0 && in.read_plain_uint(fast)) {
    if (fast >= min && fast <= max) return fast;
    return json_uint_out_of_range(fast, min, max, wording);
  }
  return read_json_uint_slow(in, scratch, min, max, wording);
}

}  // namespace kvreplay
