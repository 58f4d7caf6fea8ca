// JsonCursor and the shared member walk (json_object.h): numbers as text,
// strings with escapes and UTF-8 checks, the caps that bound memory, line
// counting, and the exact problem each malformed input gets.
#include "io/json_cursor.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/byte_source.h"
#include "io/json_object.h"

namespace kvreplay {
namespace {

// A cursor over in-memory text; the source lives as long as the cursor.
struct Text {
  explicit Text(std::string data, JsonCursor::Limits limits = {})
      : source(ByteSource::from_string(std::move(data))), cursor(*source, limits) {}
  std::unique_ptr<ByteSource> source;
  JsonCursor cursor;
};

// The number's text, or "error: PROBLEM".
std::string number(const std::string& data) {
  Text text(data);
  text.cursor.peek();
  std::string out;
  auto r = text.cursor.read_number(out);
  return r ? out : "error: " + r.error();
}

// The decoded string, or "error: PROBLEM".
std::string string_of(const std::string& data, JsonCursor::Limits limits = {}) {
  Text text(data, limits);
  REQUIRE(text.cursor.peek() == '"');
  std::string out;
  auto r = text.cursor.read_string(out);
  return r ? out : "error: " + r.error();
}

// Skips one value: "" when it is well formed, else the problem.
std::string skip_problem(const std::string& data) {
  Text text(data);
  auto r = text.cursor.skip_value();
  return r ? "" : r.error();
}

TEST_CASE("json cursor: numbers are returned as their text") {
  CHECK(number("0") == "0");
  CHECK(number("-0") == "-0");
  CHECK(number("42,") == "42");
  CHECK(number("0.25}") == "0.25");
  CHECK(number("-12.5e+3 ") == "-12.5e+3");
  CHECK(number("1E-7") == "1E-7");
  CHECK(number(std::string(64, '9')) == std::string(64, '9'));
}

TEST_CASE("json cursor: malformed numbers name the problem") {
  CHECK(number("007") == "error: number 007 has a leading zero (JSON allows none)");
  CHECK(number("-01.5") == "error: number -01.5 has a leading zero (JSON allows none)");
  CHECK(number("-x") == "error: expected a number");
  CHECK(number("1.") == "error: expected digits after '.'");
  CHECK(number("1.e5") == "error: expected digits after '.'");
  CHECK(number("1e") == "error: expected digits in exponent");
  CHECK(number("1e+") == "error: expected digits in exponent");
  CHECK(number("1.5.3") == "error: malformed number 1.5.3");
  CHECK(number("1e5e3") == "error: malformed number 1e5e3");
  CHECK(number("1-2") == "error: malformed number 1-2");
  CHECK(number(std::string(65, '9')) == "error: number longer than 64 characters");
  CHECK(number("0." + std::string(64, '1')) == "error: number longer than 64 characters");
}

TEST_CASE("json cursor: the plain integer fast path takes only what it can decide") {
  auto plain = [](const std::string& data, std::uint64_t& value) {
    Text text(data);
    text.cursor.peek();
    bool taken = text.cursor.read_plain_uint(value);
    return std::make_pair(taken, text.cursor.describe_next());
  };
  std::uint64_t value = 7;
  CHECK(plain("123,", value) == std::make_pair(true, std::string("','")));
  CHECK(value == 123);
  CHECK(plain("0]", value) == std::make_pair(true, std::string("']'")));
  CHECK(value == 0);
  // Declined, nothing consumed: fractions, exponents, leading zeros, signs, a
  // 20th digit (possible overflow) and a number that ends the buffer.
  value = 7;
  for (const char* declined : {"1.5,", "1e3,", "01,", "-1,", "18446744073709551615,", "12"}) {
    INFO(declined);
    auto [taken, next] = plain(declined, value);
    CHECK_FALSE(taken);
    CHECK(next == fmt::format("'{}'", declined[0]));
  }
  CHECK(value == 7);
}

TEST_CASE("json cursor: string escapes decode to UTF-8") {
  CHECK(string_of(R"("plain")") == "plain");
  CHECK(string_of(R"("a\"b\\c\/d")") == "a\"b\\c/d");
  CHECK(string_of(R"("\b\f\n\r\t")") == "\b\f\n\r\t");
  CHECK(string_of(R"("\u0041\u00e9\u20AC")") == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(string_of(R"("\ud83d\ude00")") == "\xF0\x9F\x98\x80");
  CHECK(string_of("\"caf\xC3\xA9\"") == "caf\xC3\xA9");
  CHECK(string_of(R"("\x")") == "error: bad escape in string");
  CHECK(string_of(R"("\u12g4")") == "error: bad \\u escape in string");
  CHECK(string_of(R"("\ud800x")") == "error: unpaired surrogate in string");
  CHECK(string_of(R"("\ud800\u0041")") == "error: unpaired surrogate in string");
  CHECK(string_of(R"("\udc00")") == "error: unpaired surrogate in string");
}

TEST_CASE("json cursor: bad bytes in strings are refused") {
  CHECK(string_of("\"a\xFF\"") == "error: invalid UTF-8 in string");
  CHECK(string_of("\"\xC3(\"") == "error: invalid UTF-8 in string");
  CHECK(string_of("\"\xC0\xAF\"") == "error: invalid UTF-8 in string");          // overlong
  CHECK(string_of("\"\xED\xA0\x80\"") == "error: invalid UTF-8 in string");      // surrogate
  CHECK(string_of("\"\xF4\x90\x80\x80\"") == "error: invalid UTF-8 in string");  // > U+10FFFF
  CHECK(string_of("\"a\x01\"") == "error: control character in string");
  CHECK(string_of("\"a\nb\"") == "error: unterminated string");
  CHECK(string_of("\"abc") == "error: unterminated string");
}

TEST_CASE("json cursor: strings are capped at 4 KiB unless the limits say otherwise") {
  const std::string at_cap(JsonCursor::kMaxString, 'a');
  CHECK(string_of('"' + at_cap + '"') == at_cap);
  CHECK(string_of('"' + at_cap + "b\"") == "error: string longer than 4096 bytes");
  // Escapes count as what they decode to, and the cap holds across them.
  CHECK(string_of('"' + at_cap + "\\n\"") == "error: string longer than 4096 bytes");
  JsonCursor::Limits small;
  small.max_string = 3;
  CHECK(string_of(R"("abc")", small) == "abc");
  CHECK(string_of(R"("abcd")", small) == "error: string longer than 3 bytes");
}

TEST_CASE("json cursor: nesting is capped at 64 levels") {
  const int cap = JsonCursor::kMaxDepth;
  const auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']');
  };
  CHECK(skip_problem(nested(cap)) == "");
  CHECK(skip_problem(nested(cap + 1)) == "nested deeper than 64 levels");
  CHECK(skip_problem(std::string(100000, '[')) == "nested deeper than 64 levels");
  // Starting deeper counts: a value read at depth 1 has 63 levels left.
  Text text(nested(cap));
  auto r = text.cursor.skip_value(1);
  REQUIRE_FALSE(r);
  CHECK(r.error() == "nested deeper than 64 levels");
}

TEST_CASE("json cursor: whole values are read with their grammar checked") {
  Text text(R"({"a": [1, 2.5, "x", true, null], "b": {}})");
  nlohmann::json value;
  REQUIRE(text.cursor.read_value(value));
  CHECK(value.dump() == R"({"a":[1,2.5,"x",true,null],"b":{}})");
  CHECK(text.cursor.peek() == -1);

  auto problem = [](const std::string& data) {
    Text t(data);
    nlohmann::json v;
    auto r = t.cursor.read_value(v);
    return r ? std::string() : r.error();
  };
  CHECK(problem(R"({"a": 1, "a": 2})") == "duplicate key 'a'");
  CHECK(problem(R"({"a" 1})") == "expected ':', got '1'");
  CHECK(problem(R"({1: 1})") == "expected a key, got '1'");
  CHECK(problem(R"([1 2])") == "expected ',' or ']' in array, got '2'");
  CHECK(problem(R"({"a": 1 "b"})") == "expected ',' or '}' in object, got '\"'");
  CHECK(problem("[1,") == "unexpected end of input");
  CHECK(problem("tru") == "invalid literal (expected 'true')");
  CHECK(problem("1e999") == "number 1e999 is out of range");
  CHECK(problem("}") == "unexpected '}'");

  JsonCursor::Limits small;
  small.max_value = 100;
  Text big(
      R"(["0123456789012345678901234567890123456789", "0123456789012345678901234567890123456789"])",
      small);
  nlohmann::json v;
  auto r = big.cursor.read_value(v);
  REQUIRE_FALSE(r);
  CHECK(r.error() == "value larger than 100 bytes");
}

TEST_CASE("json cursor: lines are counted up to the last line with content") {
  Text text("\n\n  {\"a\":\r\n 1}\n\n");
  CHECK(text.cursor.peek() == '{');
  CHECK(text.cursor.line() == 3);
  REQUIRE(text.cursor.skip_value());
  CHECK(text.cursor.line() == 4);
  CHECK(text.cursor.peek() == -1);
  CHECK(text.cursor.line() == 4);  // the trailing newlines are not counted
}

TEST_CASE("json cursor: the next token and value are described for messages") {
  auto next = [](const std::string& data) {
    Text text(data);
    return text.cursor.describe_next();
  };
  CHECK(next("") == "end of input");
  CHECK(next("  \n{") == "end of line");
  CHECK(next(" x") == "'x'");
  CHECK(next("\xFF") == "byte 0xff");
  auto value = [](const std::string& data) {
    Text text(data);
    return describe_value(text.cursor);
  };
  CHECK(value("\"s\"") == "a string");
  CHECK(value("[1]") == "an array");
  CHECK(value("{}") == "an object");
  CHECK(value("true") == "a boolean");
  CHECK(value("false") == "a boolean");
  CHECK(value("null") == "null");
  CHECK(value("-1") == "a number");
  CHECK(value("7") == "a number");
  CHECK(value("x") == "'x'");
  CHECK(value("") == "end of input");
}

// What JsonMembers stepped through: the keys in order, then "FIELD: problem"
// for the problem that ended it, if any ("(at cursor)" marks at_cursor). A key
// in `refused` ends the walk as a reader's own error would.
struct Members {
  std::vector<std::string> keys;
  std::string problem;
};

Members members(const std::string& data, const std::string& refused = "") {
  Text text(data);
  REQUIRE(text.cursor.peek() == '{');
  text.cursor.skip();
  Members out;
  std::string key;
  JsonMembers walk(text.cursor, key, "a record", "the record");
  while (walk.next()) {
    out.keys.push_back(key);
    if (key == refused) {
      out.problem = key + ": refused";
      return out;
    }
    if (auto r = text.cursor.skip_value(); !r) {
      out.problem = key + ": " + r.error();
      return out;
    }
  }
  if (walk.failed()) {
    const JsonMembers::Problem& problem = walk.problem();
    out.problem =
        problem.field + ": " + problem.message + (problem.at_cursor ? " (at cursor)" : "");
  }
  return out;
}

TEST_CASE("json object: members are handed over in order, duplicates and unknown keys included") {
  // Which keys are known, and whether a repeat is an error, is the reader's
  // business: the loop hands over every key as written.
  Members got = members(R"({"b": 1, "a": [2, {"x": 3}], "b": "again", "zz": null})");
  CHECK(got.keys == std::vector<std::string>{"b", "a", "b", "zz"});
  CHECK(got.problem == "");
  CHECK(members("{}").keys.empty());
  CHECK(members("{ }").problem == "");
  CHECK(members(R"({"\u00e9": 1})").keys == std::vector<std::string>{"\xC3\xA9"});
  // The reader's own problem ends the walk.
  Members refused = members(R"({"a": 1, "stop": 2, "c": 3})", "stop");
  CHECK(refused.keys == std::vector<std::string>{"a", "stop"});
  CHECK(refused.problem == "stop: refused");
}

TEST_CASE("json object: malformed members get the shared messages") {
  CHECK(members(R"({1: 2})").problem == "json: expected a key, got '1' (at cursor)");
  CHECK(members(R"({"a": 1,})").problem == "json: expected a key, got '}' (at cursor)");
  CHECK(members("{\"a\x01\": 1}").problem == "json: control character in string (at cursor)");
  CHECK(members(R"({"a" 1})").problem == "a: expected ':', got '1' (at cursor)");
  CHECK(members(R"({"a": 1)").problem ==
        "json: unexpected end of input inside a record (at cursor)");
  CHECK(members(R"({"a": 1 "b": 2})").problem ==
        "json: expected ',' or '}' in the record, got '\"'");
  CHECK(members(R"({"a": 1])").problem == "json: expected ',' or '}' in the record, got ']'");
}

}  // namespace
}  // namespace kvreplay
