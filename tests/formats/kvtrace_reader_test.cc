// KvTraceReader: the header, both forms (JSON Lines and one document) giving
// the same events, each op's fields, and the exact message of each per-event
// field error.
#include "formats/kvtrace_reader.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "io/sha256.h"

namespace kvreplay {
namespace {

constexpr const char* kHeader =
    R"({"kvtrace": 1, "config": {"page_tokens": 16, "pool_blocks": 64}})";

std::vector<Event> read_all(const std::string& text) {
  auto opened = KvTraceReader::from_string(text, "t.kvtrace");
  if (!opened) FAIL("open failed: " << opened.error().to_string());
  std::vector<Event> events;
  Event event;
  for (;;) {
    auto more = opened.value()->next(event);
    if (!more) FAIL("next failed: " << more.error().to_string());
    if (!more.value()) break;
    events.push_back(event);
  }
  return events;
}

// The first error reading `text`, as printed; "" when it reads cleanly.
std::string error_of(const std::string& text) {
  auto opened = KvTraceReader::from_string(text, "t.kvtrace");
  if (!opened) return opened.error().to_string();
  Event event;
  for (;;) {
    auto more = opened.value()->next(event);
    if (!more) return more.error().to_string();
    if (!more.value()) return "";
  }
}

// The error of a JSON Lines trace whose line 2 is `event`.
std::string event_error(const std::string& event) {
  return error_of(std::string(kHeader) + "\n" + event + "\n");
}

TEST_CASE("kvtrace reader: the JSON Lines header gives the config and the form") {
  auto opened = KvTraceReader::from_string(
      "\xEF\xBB\xBF\n" + std::string(kHeader) + "\n{\"op\": \"check\"}\n", "t.kvtrace");
  REQUIRE(opened);
  const KvTraceReader& reader = *opened.value();
  CHECK(reader.form() == KvTraceReader::Form::kJsonLines);
  CHECK(reader.format_name() == "kvtrace-jsonl");
  CHECK(reader.name() == "t.kvtrace");
  CHECK(reader.header().version == 1);
  CHECK(reader.header().config.dump() == R"({"page_tokens":16,"pool_blocks":64})");
  CHECK(reader.header().config_line == 2);
}

TEST_CASE("kvtrace reader: both forms give the same events") {
  const std::vector<std::string> events{
      R"({"op": "prefix", "id": "sys", "tokens": 32})",
      R"({"op": "admit", "seq": 0, "prompt": 40, "prefix": "sys", "t": 0.5})",
      R"({"op": "append", "seq": 0, "tokens": 3})",
      R"({"op": "decode", "seqs": [0], "t": 0.5})",
      R"({"op": "fork", "seq": 0, "child": 9})",
      R"({"op": "decode", "seqs": [0, 9], "tokens": 2})",
      R"({"op": "free", "seq": 9})",
      R"({"op": "drop_prefix", "id": "sys"})",
      R"({"t": 2, "op": "check"})",
  };
  std::string lines = std::string(kHeader) + "\n";
  std::string document = R"({"config": {"page_tokens": 16, "pool_blocks": 64}, "events": [)";
  for (std::size_t i = 0; i < events.size(); ++i) {
    lines += events[i] + "\n\n";
    document += (i == 0 ? "\n  " : ",\n  ") + events[i];
  }
  document += "\n], \"kvtrace\": 1, \"meta\": {\"any\": [1]}}\n";

  auto opened = KvTraceReader::from_string(document, "t.json");
  REQUIRE(opened);
  CHECK(opened.value()->form() == KvTraceReader::Form::kDocument);
  CHECK(opened.value()->format_name() == "kvtrace-json");

  const std::vector<Event> from_lines = read_all(lines);
  const std::vector<Event> from_document = read_all(document);
  REQUIRE(from_lines.size() == events.size());
  REQUIRE(from_document.size() == events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    INFO(events[i]);
    const Event& a = from_lines[i];
    const Event& b = from_document[i];
    CHECK(a.index == i + 1);
    CHECK(b.index == i + 1);
    CHECK(a.line == 2 + 2 * i);
    CHECK(b.line == 2 + i);
    CHECK(a.op == b.op);
    CHECK(a.has_t == b.has_t);
    CHECK(a.t == b.t);
    CHECK(a.seq == b.seq);
    CHECK(a.child == b.child);
    CHECK(a.prompt == b.prompt);
    CHECK(a.tokens == b.tokens);
    CHECK(a.has_prefix == b.has_prefix);
    CHECK(a.id == b.id);
    CHECK(a.seqs == b.seqs);
  }
  const std::vector<Event>& e = from_lines;
  CHECK(e[0].op == Op::kPrefix);
  CHECK(e[0].id == "sys");
  CHECK(e[0].tokens == 32);
  CHECK(e[1].op == Op::kAdmit);
  CHECK(e[1].prompt == 40);
  CHECK(e[1].has_prefix);
  CHECK(e[1].id == "sys");
  CHECK(e[1].has_t);
  CHECK(e[1].t == 0.5);
  CHECK(e[2].tokens == 3);
  CHECK(e[3].seqs == std::vector<std::uint64_t>{0});
  CHECK(e[3].tokens == 1);  // decode's default
  CHECK(e[4].child == 9);
  CHECK(e[5].seqs == std::vector<std::uint64_t>{0, 9});
  CHECK(e[5].tokens == 2);
  CHECK_FALSE(e[5].has_t);
  CHECK(e[6].op == Op::kFree);
  CHECK(e[7].op == Op::kDropPrefix);
  CHECK(e[8].op == Op::kCheck);
  CHECK(e[8].t == 2);
  CHECK(to_string(Op::kDropPrefix) == "drop_prefix");
}

// A request trace given to replay or validate: the message names its format
// and the command that reads it, whatever the format.
TEST_CASE("kvtrace reader: a request trace is told to use simulate") {
  CHECK(error_of("{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, "
                 "\"hash_ids\": [0]}\n") ==
        "t.kvtrace:1: kvtrace: this is a request trace (mooncake): use kvreplay simulate");
  CHECK(error_of("{\"arrival\": 0.5, \"prompt\": 10, \"output\": 2}\n") ==
        "t.kvtrace:1: kvtrace: this is a request trace (native): use kvreplay simulate");
  // id and hash_ids are keys of both formats: the next key decides.
  CHECK(error_of("{\"id\": \"r1\", \"hash_ids\": [1, 2], \"input_length\": 600}\n") ==
        "t.kvtrace:1: kvtrace: this is a request trace (mooncake): use kvreplay simulate");
  CHECK(error_of("{\"id\": {\"a\": [1]}, \"prompt\": 3}\n") ==
        "t.kvtrace:1: kvtrace: this is a request trace (native): use kvreplay simulate");
  CHECK(error_of("{\"id\": 7}\n") ==
        "t.kvtrace:1: kvtrace: this is a request trace: use kvreplay simulate");
  CHECK(
      error_of("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n") ==
      "t.kvtrace:1: kvtrace: this is a request trace (azure): use kvreplay simulate");
  CHECK(error_of("\xEF\xBB\xBF\ntimestamp,model,request tokens,response tokens\n5,x,1,2\n") ==
        "t.kvtrace:2: kvtrace: this is a request trace (burstgpt): use kvreplay simulate");
  // Not a request trace: the kvtrace messages as before.
  CHECK(error_of("time,prompt\n1,2\n") ==
        R"(t.kvtrace:1: json: a kvtrace starts with {"kvtrace": 1, ...}, not 't')");
}

TEST_CASE("kvtrace reader: header problems name the header key") {
  CHECK(error_of("") ==
        R"(t.kvtrace:1: json: empty input: a kvtrace starts with {"kvtrace": 1, ...})");
  CHECK(error_of("[]") ==
        R"(t.kvtrace:1: json: a kvtrace starts with {"kvtrace": 1, ...}, not '[')");
  CHECK(error_of(R"({"kvtrace": 2, "config": {}})") ==
        "t.kvtrace:1: kvtrace: unsupported version 2 (this kvreplay reads version 1)");
  CHECK(error_of(R"({"kvtrace": "1", "config": {}})") ==
        R"(t.kvtrace:1: kvtrace: expected the integer 1, got "1")");
  CHECK(error_of(R"({"config": {}})") ==
        R"(t.kvtrace:1: kvtrace: missing (the header must say "kvtrace": 1))");
  CHECK(error_of(R"({"kvtrace": 1})") == "t.kvtrace:1: config: missing from the header");
  CHECK(error_of(R"({"kvtrace": 1, "config": []})") ==
        "t.kvtrace:1: config: expected an object, got an array");
  CHECK(error_of(R"({"kvtrace": 1, "config": {}, "config": {}})") ==
        "t.kvtrace:1: config: duplicate key");
  CHECK(error_of(R"({"kvtrace": 1, "config": {}, "model": "x"})") ==
        "t.kvtrace:1: model: unknown header key (expected kvtrace, config, meta, events)");
  CHECK(
      error_of(R"({"op": "check"})") ==
      R"(t.kvtrace:1: kvtrace: missing: the trace starts with an event, not the header {"kvtrace": 1, "config": {...}})");
  CHECK(error_of(std::string(kHeader) + " {") ==
        "t.kvtrace:1: json: expected end of line after the header, got '{'");
  CHECK(
      error_of(R"({"kvtrace": 1, "events": []})") ==
      R"(t.kvtrace:1: config: missing before "events" (a single-document trace must give config before its events))");
  CHECK(error_of(R"({"config": {}, "events": []})") ==
        R"(t.kvtrace:1: kvtrace: missing (the trace must say "kvtrace": 1))");
  CHECK(error_of(R"({"kvtrace": 1, "config": {}, "events": [{"op": "check"},]})") ==
        "t.kvtrace:1: json: trailing ',' in the events array");
  CHECK(error_of(R"({"kvtrace": 1, "config": {}, "events": []} 1)") ==
        "t.kvtrace:1: json: unexpected '1' after the trace document");
}

TEST_CASE("kvtrace reader: per-event field errors name the field") {
  CHECK(event_error("{}") == "t.kvtrace:2: op: missing");
  CHECK(event_error(R"({"seq": 1})") == "t.kvtrace:2: op: missing");
  CHECK(event_error(R"({"op": "evict"})") ==
        "t.kvtrace:2: op: unknown op 'evict' (expected prefix, drop_prefix, admit, append, "
        "decode, fork, free, check, cache, uncache, store, load, drop)");
  CHECK(event_error(R"({"op": 1})") == "t.kvtrace:2: op: expected a string, got a number");
  CHECK(event_error(R"({"op": "free", "seq": 1, "priority": 2})") ==
        "t.kvtrace:2: priority: unknown field");
  CHECK(event_error(R"({"op": "free", "seq": 1, "seq": 2})") ==
        "t.kvtrace:2: seq: duplicate field");
  CHECK(event_error(R"({"op": "admit", "seq": 1, "prompt": 4, "child": 2})") ==
        "t.kvtrace:2: child: not a field of admit (it takes seq, prompt, prefix, hits)");
  CHECK(event_error(R"({"op": "check", "seq": 1})") ==
        "t.kvtrace:2: seq: not a field of check (it takes no fields)");
  CHECK(event_error(R"({"op": "admit", "seq": 1})") ==
        "t.kvtrace:2: prompt: missing (admit needs seq, prompt)");
  CHECK(event_error(R"({"op": "append", "seq": 0, "tokens": 0})") ==
        "t.kvtrace:2: tokens: 0 must be >= 1");
  CHECK(event_error(R"({"op": "append", "seq": 0, "tokens": -3})") ==
        "t.kvtrace:2: tokens: -3 is negative (must be >= 1)");
  CHECK(event_error(R"({"op": "append", "seq": 0, "tokens": 1.5})") ==
        "t.kvtrace:2: tokens: expected an integer, got 1.5");
  CHECK(event_error(R"({"op": "append", "seq": 0, "tokens": 4294967296})") ==
        "t.kvtrace:2: tokens: 4294967296 is too large (at most 4294967295)");
  CHECK(event_error(R"({"op": "free", "seq": 18446744073709551616})") ==
        "t.kvtrace:2: seq: 18446744073709551616 is too large (at most 9223372036854775807)");
  CHECK(event_error(R"({"op": "free", "seq": -0})") ==
        "t.kvtrace:2: seq: expected an integer, got -0");
  CHECK(event_error(R"({"op": "free", "seq": "0"})") ==
        "t.kvtrace:2: seq: expected an integer, got a string");
  CHECK(event_error(R"({"op": "prefix", "id": "", "tokens": 1})") ==
        "t.kvtrace:2: id: must not be empty");
  CHECK(event_error(R"({"op": "decode", "seqs": []})") == "t.kvtrace:2: seqs: must not be empty");
  CHECK(event_error(R"({"op": "decode", "seqs": 0})") ==
        "t.kvtrace:2: seqs: expected an array, got a number");
  CHECK(event_error(R"({"op": "decode", "seqs": [0 1]})") ==
        "t.kvtrace:2: seqs: expected ',' or ']', got '1'");
  CHECK(event_error(R"({"op": "check", "t": "now"})") ==
        "t.kvtrace:2: t: expected a number, got a string");
  CHECK(event_error(R"({"op": "check", "t": 1e999})") == "t.kvtrace:2: t: 1e999 is out of range");
  CHECK(event_error("{\"op\": \"check\", \"t\": 2}\n{\"op\": \"check\", \"t\": 1.75}") ==
        "t.kvtrace:3: t: 1.75 goes backwards (previous t was 2)");
  CHECK(event_error(R"({"op": "check" "t": 1})") ==
        "t.kvtrace:2: json: expected ',' or '}' in the event, got '\"'");
  CHECK(event_error(R"({"op": "check",)") == "t.kvtrace:2: json: expected a key, got end of input");
  CHECK(event_error(R"({"op": "check")") ==
        "t.kvtrace:2: json: unexpected end of input inside an event");
  CHECK(event_error("{\"op\":\n\"check\"}") ==
        "t.kvtrace:2: json: the event continues on line 3 (JSON Lines: one event per line)");
  CHECK(event_error(R"({"op": "check"} {"op": "check"})") ==
        "t.kvtrace:2: json: expected end of line after the event, got '{'");
  CHECK(event_error("[1]") == "t.kvtrace:2: json: expected an event object, got '['");
}

TEST_CASE("kvtrace reader: the prefix cache's and the offload tiers' ops") {
  auto events = read_all(std::string(kHeader) + "\n" +
                         R"({"op": "cache", "seq": 3, "page": 2, "block": 9})"
                         "\n"
                         R"({"op": "uncache", "block": 9})"
                         "\n"
                         R"({"op": "store", "seq": 3, "page": 0, "tier": "disk", "key": 77})"
                         "\n"
                         R"({"op": "load", "tier": "cpu", "key": 5, "block": 8})"
                         "\n"
                         R"({"op": "drop", "tier": "link", "key": 77})"
                         "\n"
                         R"({"op": "admit", "seq": 4, "prompt": 40, "hits": [8, 1]})"
                         "\n"
                         R"({"op": "admit", "seq": 5, "prompt": 4, "hits": []})"
                         "\n");
  REQUIRE(events.size() == 7);
  CHECK(events[0].op == Op::kCache);
  CHECK((events[0].seq == 3 && events[0].page == 2 && events[0].block == 9));
  CHECK(events[1].op == Op::kUncache);
  CHECK(events[2].op == Op::kStore);
  CHECK((events[2].tier == 1 && events[2].key == 77 && events[2].page == 0));
  CHECK(events[3].op == Op::kLoad);
  CHECK((events[3].tier == 0 && events[3].key == 5 && events[3].block == 8));
  CHECK(events[4].op == Op::kDrop);
  CHECK((events[4].tier == kLinkTier && trace_tier_name(events[4].tier) == "link"));
  CHECK(events[5].hits == std::vector<std::uint64_t>{8, 1});
  CHECK(events[6].hits.empty());  // the previous event's hits do not leak
  CHECK(event_error(R"({"op": "store", "seq": 0, "page": 0, "tier": "gpu", "key": 1})") ==
        "t.kvtrace:2: tier: unknown tier 'gpu' (expected cpu, disk or link)");
  CHECK(event_error(R"({"op": "load", "tier": "cpu", "key": 1})") ==
        "t.kvtrace:2: block: missing (load needs block, tier, key)");
  CHECK(event_error(R"({"op": "admit", "seq": 0, "prompt": 8, "prefix": "p", "hits": [1]})") ==
        "t.kvtrace:2: hits: an admit takes a prefix or hits, not both");
  CHECK(event_error(R"({"op": "admit", "seq": 0, "prompt": 8, "hits": [1, -2]})") ==
        "t.kvtrace:2: hits: -2 is negative (must be >= 0)");
  CHECK(event_error(R"({"op": "cache", "seq": 0, "page": 4294967296, "block": 1})") ==
        "t.kvtrace:2: page: 4294967296 is too large (at most 4294967295)");
  CHECK(event_error(R"({"op": "drop", "tier": "cpu", "key": 1, "seq": 2})") ==
        "t.kvtrace:2: seq: not a field of drop (it takes tier, key)");
}

TEST_CASE("kvtrace_reader: the hash covers events it never read") {
  const std::string trace =
      "{\"kvtrace\": 1, \"config\": {\"layers\": 1, \"kv_heads\": 1, \"head_dim\": 4, "
      "\"pool_blocks\": 8}}\n"
      "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 4}\n"
      "{\"op\": \"free\", \"seq\": 0}\n";
  auto reader = KvTraceReader::from_string(trace, "t.jsonl");
  REQUIRE(reader.ok());
  Event event;
  auto more = reader.value()->next(event);
  REQUIRE(more.ok());
  REQUIRE(more.value());
  auto digest = reader.value()->content_sha256();
  REQUIRE(digest.ok());
  CHECK(digest.value() == Sha256::hex(trace));
}

}  // namespace
}  // namespace kvreplay
