// kvreplay events (engine/events/events_check.h): vLLM's KV-event stream
// (vllm/distributed/kv_events.py) read one line at a time, in both batch and
// both event forms; every check at its line and field; the summary of a small
// stream against figures worked out by hand; reuse distances against a
// brute-force LRU stack.
#include "engine/events/events_check.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kvreplay::EventsChecker;
using kvreplay::EventsMedium;
using kvreplay::EventsOptions;
using kvreplay::EventsSummary;

// Feeds `text` line by line; the first problem as "FILE:LINE: FIELD: problem",
// or "" when the stream passed (its summary then in `out`).
std::string check(const std::string& text, EventsSummary* out = nullptr,
                  EventsOptions options = {}) {
  EventsChecker checker("s.jsonl", options);
  std::istringstream in(text);
  std::string line;
  for (std::uint64_t number = 1; std::getline(in, line); ++number) {
    if (auto status = checker.add_line(line, number); !status) return status.error().to_string();
  }
  if (out != nullptr) *out = checker.summary();
  return "";
}

EventsSummary summarize(const std::string& text, EventsOptions options = {}) {
  EventsSummary summary;
  REQUIRE(check(text, &summary, options).empty());
  return summary;
}

const EventsMedium& medium(const EventsSummary& summary, std::uint64_t instance,
                           const std::string& name) {
  for (const EventsMedium& m : summary.media) {
    if (m.instance == instance && m.medium == name) return m;
  }
  FAIL("no instance " << instance << " medium " << name);
  return summary.media.front();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const std::string kDir = std::string(KVREPLAY_SOURCE_DIR) + "/tests/cli/events/";

}  // namespace

TEST_CASE("events: the summary of a small stream, worked out by hand") {
  // tests/cli/events/summary.jsonl, GPU (the stack: positions of each store):
  //   ts 0  store 1 2 3                 cached 3   1@0 2@1 3@2
  //   ts 1  remove 1; store 4 5 (<- 3)  cached 4   4@3 5@4
  //   ts 2  store 1: re-store, after 2 3 4 5: distance 4, time 2 - 1 = 1; cached 5
  //   ts 3  remove 2 3                  cached 3
  //   ts 5  store 6 7; 3 (after 4 5 1 6 7: 5, time 2); 2 (after 4 5 1 6 7 3: 6,
  //         time 2); cached 7, the peak; CPU (tag first, "cpu"): store 1 4
  //   (a blank line 6)
  //   ts 9  AllBlocksCleared: GPU 7 and CPU 2 cleared
  //   ts 10 store 4: re-store after 5 1 6 7 3 2: distance 6, time 10 - 9 = 1
  //   ts 10 remove 4, store 4: distance 0, time 0; cached 1
  // Distances 0 4 5 6 6 (nearest rank: p50 the 3rd, p90 and p99 the 5th);
  // times 0 1 1 2 2.
  const EventsSummary s = summarize(read_file(kDir + "summary.jsonl"));
  CHECK(s.batches == 8);
  CHECK(s.stored_events == 9);
  CHECK(s.removed_events == 3);
  CHECK(s.cleared_events == 1);
  CHECK(s.first_ts == 0.0);
  CHECK(s.last_ts == 10.0);
  REQUIRE(s.media.size() == 2);
  CHECK(s.media[0].medium == "GPU");  // GPU first, then CPU
  CHECK(s.media[1].medium == "CPU");

  const EventsMedium& gpu = medium(s, 0, "GPU");
  CHECK(gpu.stored == 12);
  CHECK(gpu.removed == 4);
  CHECK(gpu.cleared == 7);
  CHECK(gpu.cached == 1);
  CHECK(gpu.peak == 7);
  CHECK(gpu.peak_ts == 5.0);
  REQUIRE(gpu.churn);
  CHECK(*gpu.churn == Approx(1.6).epsilon(1e-12));  // (12 + 4) / 10 s
  CHECK(gpu.reuses == 5);
  CHECK(gpu.distance_p50 == 5);
  CHECK(gpu.distance_p90 == 6);
  CHECK(gpu.distance_p99 == 6);
  CHECK(gpu.distance_max == 6);
  CHECK(gpu.time_p50 == 1.0);
  CHECK(gpu.time_p99 == 2.0);

  const EventsMedium& cpu = medium(s, 0, "CPU");
  CHECK(cpu.stored == 2);
  CHECK(cpu.removed == 0);
  CHECK(cpu.cleared == 2);
  CHECK(cpu.cached == 0);
  CHECK(cpu.peak == 2);
  CHECK(cpu.peak_ts == 5.0);
  REQUIRE(cpu.churn);
  CHECK(*cpu.churn == Approx(0.2).epsilon(1e-12));
  CHECK(cpu.reuses == 0);

  // Ten points from 0 to 10 s, each the count after the last batch at or before it.
  REQUIRE(s.sample_ts.size() == 10);
  CHECK(s.sample_ts.front() == 0.0);
  CHECK(s.sample_ts[1] == Approx(10.0 / 9));
  CHECK(s.sample_ts.back() == 10.0);
  CHECK(gpu.samples == std::vector<std::uint64_t>{3, 4, 5, 3, 3, 7, 7, 7, 7, 1});
  CHECK(cpu.samples == std::vector<std::uint64_t>{0, 0, 0, 0, 0, 2, 2, 2, 2, 0});
}

TEST_CASE("events: vLLM's recorded shape passes (positional batches, tag first, CPU events)") {
  const EventsSummary s = summarize(read_file(kDir + "vllm_recorded.jsonl"));
  CHECK(s.batches == 7);
  CHECK(s.stored_events == 5);
  CHECK(s.removed_events == 3);
  CHECK(s.cleared_events == 1);
  const EventsMedium& gpu = medium(s, 0, "GPU");
  CHECK(gpu.stored == 4);
  CHECK(gpu.removed == 1);
  CHECK(gpu.cleared == 3);
  CHECK(gpu.reuses == 1);  // 2^64-1 stored again after its removal
  CHECK(gpu.distance_max == 0);
  CHECK(gpu.time_p50 == Approx(0.1));
  const EventsMedium& cpu = medium(s, 0, "CPU");
  CHECK(cpu.stored == 3);
  CHECK(cpu.removed == 2);
  CHECK(cpu.cleared == 1);
  CHECK(cpu.peak == 2);
  CHECK(cpu.reuses == 1);
  CHECK(cpu.distance_max == 1);  // the CPU's other hash was stored in between
}

TEST_CASE("events: both batch forms and both event forms read the same") {
  const std::string objects =
      R"({"ts": 1, "events": [{"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": null, "token_ids": [5, 6], "block_size": 1, "lora_id": 3, "medium": "GPU", "lora_name": "x", "group_idx": 0}]})"
      "\n"
      R"({"ts": 2, "events": [{"type": "BlockRemoved", "block_hashes": [2], "medium": null}, {"type": "BlockStored", "block_hashes": [2], "parent_block_hash": 1}], "data_parallel_rank": null})"
      "\n"
      R"({"ts": 3, "events": [{"type": "AllBlocksCleared", "medium": "GPU"}]})"
      "\n";
  const std::string arrays = R"([1, [["BlockStored", [1, 2], null, [5, 6], 1, 3, "GPU", "x"]]])"
                             "\n"
                             R"([2, [["BlockRemoved", [2]], ["BlockStored", [2], 1]], null])"
                             "\n"
                             R"([3, [["AllBlocksCleared"]], 0])"
                             "\n";
  const EventsSummary a = summarize(objects), b = summarize(arrays);
  CHECK(events_summary_json(a, "x") == events_summary_json(b, "x"));
  const EventsMedium& gpu = medium(a, 0, "GPU");
  CHECK(gpu.stored == 3);
  CHECK(gpu.removed == 1);
  CHECK(gpu.cleared == 2);
  CHECK(gpu.reuses == 1);
  CHECK(gpu.distance_max == 0);  // nothing was stored between 2's two stores
  CHECK(gpu.time_p99 == 0.0);
}

TEST_CASE("events: hashes are integers up to 2^64-1 or strings, each its own") {
  const EventsSummary s = summarize(
      R"({"ts": 0, "events": [{"type": "BlockStored", "block_hashes": [18446744073709551615, "18446744073709551615", 5, "5", "0a1b"]}]})"
      "\n"
      R"({"ts": 0, "events": [{"type": "BlockStored", "block_hashes": ["ff"], "parent_block_hash": "0a1b"}, {"type": "BlockRemoved", "block_hashes": [5, "5", 18446744073709551615]}]})");
  const EventsMedium& gpu = medium(s, 0, "GPU");
  CHECK(gpu.stored == 6);
  CHECK(gpu.removed == 3);
  CHECK(gpu.cached == 3);
  CHECK(check(R"({"ts": 0, "events": [["BlockStored", [5]], ["BlockRemoved", ["5"]]]})") ==
        "s.jsonl:1: events[1].block_hashes[0]: \"5\" is not cached in instance 0's GPU (a stream "
        "captured mid-run: --mid-stream)");
  CHECK(check(R"({"ts": 0, "events": [["BlockStored", [18446744073709551616]]]})") ==
        "s.jsonl:1: events[0].block_hashes[0]: 18446744073709551616 is too large (at most "
        "18446744073709551615)");
  CHECK(check(R"({"ts": 0, "events": [["BlockStored", [1], 99999999999999999999999]]})") ==
        "s.jsonl:1: events[0].parent_block_hash: 99999999999999999999999 is too large (at most "
        "18446744073709551615)");
}

TEST_CASE("events: instances, data_parallel_rank and media are separate caches") {
  // The same hash in two instances and two media; ts goes back across
  // instances (allowed) but not within one.
  const EventsSummary s = summarize(
      R"({"ts": 5, "events": [["BlockStored", [1]]], "instance": 1})"
      "\n"
      R"({"ts": 2, "events": [["BlockStored", [1]]], "data_parallel_rank": 2})"
      "\n"
      R"([3, [["BlockStored", [1], null, [], 0, null, "cpu"], ["BlockStored", [2], null, [], 0, null, "CPU"]], 2])"
      "\n"
      R"({"ts": 6, "events": [["BlockRemoved", [1]], ["AllBlocksCleared"]], "instance": 1, "data_parallel_rank": 2})"
      "\n"
      R"({"ts": 3, "events": [["BlockRemoved", [1], "Cpu"]], "instance": 2})");
  REQUIRE(s.media.size() == 3);
  CHECK(s.media[0].instance == 1);
  CHECK(s.media[1].instance == 2);
  CHECK(s.media[1].medium == "GPU");
  CHECK(s.media[2].medium == "CPU");
  CHECK(medium(s, 1, "GPU").removed == 1);
  CHECK(medium(s, 2, "GPU").cached == 1);
  CHECK(medium(s, 2, "CPU").cached == 1);
  CHECK(medium(s, 2, "CPU").removed == 1);
  CHECK(check(R"({"ts": 5, "events": [], "instance": 1})"
              "\n"
              R"({"ts": 1, "events": []})"
              "\n"
              R"({"ts": 4.5, "events": [], "instance": 1})") ==
        "s.jsonl:3: ts: 4.5 goes back from 5 (line 1, instance 1)");
}

TEST_CASE("events: a parent may have been removed since, never unstored") {
  CHECK(
      check(
          R"({"ts": 0, "events": [["BlockStored", [1]], ["BlockRemoved", [1]], ["BlockStored", [2], 1]]})")
          .empty());
  CHECK(
      check(
          R"({"ts": 0, "events": [["BlockStored", [1]]]})"
          "\n"
          R"({"ts": 0, "events": [["BlockStored", [3], null, [], 0, null, "CPU"], ["BlockStored", [2], 1, [], 0, null, "CPU"]]})") ==
      "s.jsonl:2: events[1].parent_block_hash: 1 was never stored in instance 0's CPU (a stream "
      "captured mid-run: --mid-stream)");
  // A parent must come before: the run's own later hash is not one.
  CHECK(check(R"({"ts": 0, "events": [["BlockStored", [1, 2], 2]]})") ==
        "s.jsonl:1: events[0].parent_block_hash: 2 was never stored in instance 0's GPU (a stream "
        "captured mid-run: --mid-stream)");
}

TEST_CASE("events: a double store counts per block, --unique refuses it") {
  // vLLM's BlockPool caches a hash in several blocks, a BlockStored and a
  // BlockRemoved for each (block_pool.py); Dynamo's EventDedupFilter counts
  // them per hash and passes a removal on when the count reaches 0.
  const std::string twice = R"({"ts": 0, "events": [["BlockStored", [7]]]})"
                            "\n"
                            R"({"ts": 1, "events": [["BlockStored", [7]]]})";
  EventsOptions unique;
  unique.unique = true;
  CHECK(check(twice, nullptr, unique) ==
        "s.jsonl:2: events[0].block_hashes[0]: 7 is already cached in instance 0's GPU (stored "
        "on line 1; without --unique a medium holds a hash in several blocks)");
  EventsSummary s;
  REQUIRE(check(twice + "\n" + R"({"ts": 2, "events": [["BlockRemoved", [7]]]})", &s).empty());
  CHECK(!s.unique);
  const EventsMedium& one = medium(s, 0, "GPU");
  CHECK(one.peak == 2);
  CHECK(one.cached == 1);  // one block still holds 7
  CHECK(one.duplicate_stores == 1);
  CHECK(one.keys_stored == 1);
  CHECK(one.keys_removed == 0);  // the count went 2 -> 1: no key removed
  CHECK(one.keys_cached == 1);
  REQUIRE(check(twice + "\n" + R"({"ts": 2, "events": [["BlockRemoved", [7, 7]]]})", &s).empty());
  CHECK(medium(s, 0, "GPU").cached == 0);
  CHECK(medium(s, 0, "GPU").keys_removed == 1);
  CHECK(medium(s, 0, "GPU").reuses == 0);  // the second store came while it was cached
  CHECK(check(twice + "\n" + R"({"ts": 2, "events": [["BlockRemoved", [7, 7, 7]]]})") ==
        "s.jsonl:3: events[0].block_hashes[2]: 7 is not cached in instance 0's GPU (a stream "
        "captured mid-run: --mid-stream)");
}

TEST_CASE("events: --mid-stream makes an unknown parent a root and counts unmatched removals") {
  // A capture begun mid-run: 1 and 9 were stored before it.
  const std::string tail =
      R"({"ts": 5, "seq": 7, "events": [["BlockStored", [2, 3], 1], ["BlockRemoved", [9, 2]]]})"
      "\n"
      R"({"ts": 6, "seq": 9, "events": [["BlockRemoved", [9]]]})";
  CHECK(check(tail) ==
        "s.jsonl:1: seq: instance 0 starts at 7, not 0 (a stream captured "
        "mid-run: --mid-stream)");
  EventsOptions mid;
  mid.mid_stream = true;
  EventsSummary s;
  REQUIRE(check(tail, &s, mid).empty());
  const EventsMedium& gpu = medium(s, 0, "GPU");
  CHECK(gpu.orphan_stores == 1);
  CHECK(gpu.unmatched_removals == 2);  // 9 twice
  CHECK(gpu.removed == 3);
  CHECK(gpu.cached == 1);  // 3
  CHECK(s.late_starts == 1);
  CHECK(s.seq_gaps == 1);
  CHECK(s.seq_missing == 1);
  CHECK(check(R"({"ts": 5, "seq": 3, "events": []})"
              "\n"
              R"({"ts": 6, "seq": 3, "events": []})",
              nullptr, mid) == "s.jsonl:2: seq: 3 does not follow 3 (line 1, instance 0)");
}

TEST_CASE("events: every malformed batch is one problem at its line and field") {
  struct Case {
    const char* line;
    const char* problem;
  };
  const Case cases[] = {
      {R"({"ts": 1, "events": [])", "json: unexpected end of input inside a batch"},
      {R"({"ts": 1, "events": [})",
       "events[0]: expected an event (an object or an array), got '}'"},
      {R"({"ts": "1", "events": []})", "ts: expected a number, got a string"},
      {R"({"ts": 1e999, "events": []})", "ts: 1e999 is out of range"},
      {R"({"events": []})", "ts: missing"},
      {R"({"ts": 1})", "events: missing"},
      {R"([1])", "events: missing"},
      {R"([])", "ts: missing"},
      {R"({"ts": 1, "events": {}})", "events: expected an array, got an object"},
      {R"({"ts": 1, "ts": 2, "events": []})", "ts: duplicate key"},
      {R"({"ts": 1, "events": [], "instance": -1})", "instance: -1 is negative (must be >= 0)"},
      {R"({"ts": 1, "events": [], "data_parallel_rank": "0"})",
       "data_parallel_rank: expected an integer, got a string"},
      {R"({"ts": 1, "events": [5]})",
       "events[0]: expected an event (an object or an array), got a number"},
      {R"({"ts": 1, "events": [{"type": "BlockMoved", "block_hashes": []}]})",
       "events[0].type: unknown event type \"BlockMoved\" (BlockStored, BlockRemoved or "
       "AllBlocksCleared)"},
      {R"({"ts": 1, "events": [{"block_hashes": []}]})", "events[0].type: missing"},
      {R"({"ts": 1, "events": [{"type": "BlockStored"}]})",
       "events[0].block_hashes: missing (BlockStored needs it)"},
      {R"({"ts": 1, "events": [["BlockRemoved"]]})",
       "events[0].block_hashes: missing (BlockRemoved needs it)"},
      {R"({"ts": 1, "events": [[]]})",
       "events[0].type: missing (an array event starts with its type)"},
      {R"({"ts": 1, "events": [["BlockStored", [1.5]]]})",
       "events[0].block_hashes[0]: expected an integer, got 1.5"},
      {R"({"ts": 1, "events": [["BlockStored", [true]]]})",
       "events[0].block_hashes[0]: expected a block hash (an integer or a string), got a boolean"},
      {R"({"ts": 1, "events": [["BlockStored", [1], null, [1, -2]]]})",
       "events[0].token_ids[1]: -2 is negative (must be >= 0)"},
      {R"({"ts": 1, "events": [{"type": "BlockStored", "block_hashes": [1], "lora_id": "a"}]})",
       "events[0].lora_id: expected an integer, got a string"},
      {R"({"ts": 1, "events": [{"type": "BlockStored", "block_hashes": [1], "medium": 1}]})",
       "events[0].medium: expected a string or null, got a number"},
      {R"({"ts": 1, "events": [{"type": "BlockRemoved", "block_hashes": [], "block_hashes": []}]})",
       "events[0].block_hashes: duplicate key"},
      {R"({"ts": 1, "events": []} {})", "json: unexpected '{' after the batch (one a line)"},
      {R"(7)", "json: expected a batch (an object or an array), got a number"},
  };
  for (const Case& c : cases) {
    const std::string got = check("\n" + std::string(c.line));
    INFO(c.line);
    CHECK(got == std::string("s.jsonl:2: ") + c.problem);
  }
}

TEST_CASE("events: an empty stream, blank lines and a byte order mark") {
  const EventsSummary none = summarize("");
  CHECK(none.batches == 0);
  CHECK(none.media.empty());
  CHECK(none.sample_ts.empty());
  CHECK(!none.first_ts);
  const EventsSummary blank = summarize("\n  \r\n\n");
  CHECK(blank.batches == 0);
  const EventsSummary one = summarize("\xEF\xBB\xBF{\"ts\": 4, \"events\": []}\r\n\n");
  CHECK(one.batches == 1);
  CHECK(one.sample_ts == std::vector<double>{4.0});  // one point when the stream has no span
  const std::string json = events_summary_json(one, "x").dump();
  CHECK(json.find("\"span\":0.0") != std::string::npos);
}

TEST_CASE("events: the JSON summary is the same bytes every time, keys sorted") {
  const std::string text = read_file(kDir + "summary.jsonl");
  const std::string a = events_summary_json(summarize(text), "s").dump(2);
  const std::string b = events_summary_json(summarize(text), "s").dump(2);
  CHECK(a == b);
  CHECK(a.find("\"batches\"") < a.find("\"duplicates\""));
  CHECK(a.find("\"distance\": {\n") != std::string::npos);
  const std::string text_summary = events_summary_text(summarize(text), "s");
  CHECK(text_summary.find("s: 8 batches, 13 events (9 BlockStored, 3 BlockRemoved, 1 "
                          "AllBlocksCleared), ts 0 to 10 (10 s)") == 0);
  CHECK(text_summary.find("5 re-stores: distance p50 5 p90 6 p99 6 max 6") != std::string::npos);
}

TEST_CASE("events: reuse distances match a brute-force LRU stack, across renumbering") {
  // 30,000 random stores and removals over 300 hashes: the store positions are
  // renumbered many times (at 4,096 and twice the distinct hashes).
  std::mt19937_64 random(7);
  std::vector<bool> cached(300, false), ever(300, false);
  std::vector<std::size_t> stack;  // most recent store first
  std::vector<std::uint64_t> expected;
  std::string text;
  for (int step = 0; step < 30000; ++step) {
    const std::size_t h = random() % 300;
    if (cached[h] && random() % 2 == 0) {
      text += "[" + std::to_string(step) + ", [[\"BlockRemoved\", [" + std::to_string(h) + "]]]]\n";
      cached[h] = false;
      continue;
    }
    if (cached[h]) continue;
    auto it = std::find(stack.begin(), stack.end(), h);
    if (ever[h]) {
      expected.push_back(static_cast<std::uint64_t>(it - stack.begin()));
      stack.erase(it);
    }
    stack.insert(stack.begin(), h);
    ever[h] = cached[h] = true;
    text += "[" + std::to_string(step) + ", [[\"BlockStored\", [" + std::to_string(h) + "]]]]\n";
  }
  const EventsSummary s = summarize(text);
  const EventsMedium& gpu = medium(s, 0, "GPU");
  std::sort(expected.begin(), expected.end());
  REQUIRE(expected.size() > 4096);
  auto rank = [&](std::uint64_t p) {
    return expected[std::max<std::uint64_t>((p * expected.size() + 99) / 100, 1) - 1];
  };
  CHECK(gpu.reuses == expected.size());
  CHECK(gpu.distance_p50 == rank(50));
  CHECK(gpu.distance_p90 == rank(90));
  CHECK(gpu.distance_p99 == rank(99));
  CHECK(gpu.distance_max == expected.back());
}

TEST_CASE("events: what the check keeps is counted against the memory limit as it grows") {
  // 20,000 distinct hashes, 100 a batch: ~4 MiB of state over the 16 MiB base.
  std::string text;
  for (int batch = 0; batch < 200; ++batch) {
    text += "{\"ts\": " + std::to_string(batch) + ", \"events\": [[\"BlockStored\", [";
    for (int k = 0; k < 100; ++k) text += (k > 0 ? "," : "") + std::to_string(batch * 100 + k);
    text += "]]]}\n";
  }
  // Without a limit below it, the stream passes.
  EventsOptions roomy;
  roomy.memory_limit = std::uint64_t{64} << 20;
  EventsSummary s;
  REQUIRE(check(text, &s, roomy).empty());
  CHECK(medium(s, 0, "GPU").cached == 20000);
  // Under 18 MiB it fails at the hash that passes the limit, in one line.
  EventsOptions tight;
  tight.memory_limit = std::uint64_t{18} << 20;
  const std::string problem = check(text, nullptr, tight);
  INFO(problem);
  CHECK(problem.starts_with("s.jsonl:"));
  CHECK(problem.find(": events[0].block_hashes[") != std::string::npos);
  CHECK(problem.find("checking the stream up to here needs 18.00 MiB (16 MiB + 4 x ") !=
        std::string::npos);
  CHECK(problem.find(" distinct hashes + ") != std::string::npos);
  CHECK(problem.find("over the memory limit of 18.00 MiB") != std::string::npos);
  CHECK(problem.find('\n') == std::string::npos);
  // Before line 200: the state, not the stream's end, passed the limit.
  const auto line = std::stoull(problem.substr(std::string("s.jsonl:").size()));
  CHECK(line > 1);
  CHECK(line < 200);
}

TEST_CASE("events: a line is refused as it grows past 64 MiB or what the limit leaves") {
  EventsOptions options;
  options.memory_limit = std::uint64_t{20} << 20;  // 4 MiB over the base: a line of 1 MiB
  EventsChecker checker("s.jsonl", options);
  CHECK_FALSE(checker.line_problem(1000).has_value());
  CHECK_FALSE(checker.line_problem(std::uint64_t{1} << 20).has_value());
  const auto long_line = checker.line_problem((std::uint64_t{1} << 20) + 1);
  REQUIRE(long_line.has_value());
  CHECK(
      long_line->starts_with("checking the stream up to here needs 20.00 MiB (16 MiB + 4 x "
                             "1048577 bytes of the line)"));
  // A batch whose parsed events pass the limit (a 600 KiB line of 60,000
  // hashes parses to more than it holds as text) fails at the hash.
  std::string line = "{\"ts\": 1, \"events\": [[\"BlockStored\", [";
  for (int k = 0; k < 60000; ++k) line += (k > 0 ? "," : "") + std::to_string(k);
  line += "]]]}";
  REQUIRE_FALSE(checker.line_problem(line.size()).has_value());
  auto status = checker.add_line(line, 1);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().field.starts_with("events[0].block_hashes["));
  CHECK(status.error().problem.find("bytes of its events") != std::string::npos);
  // Whatever the limit, no line is longer than 64 MiB.
  EventsChecker unlimited("s.jsonl", EventsOptions{});
  CHECK(unlimited.line_problem((std::uint64_t{64} << 20) + 1) == "line longer than 64 MiB");
}
