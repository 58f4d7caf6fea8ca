// End-to-end verification: replays with a CPU data plane read every live
// sequence back through its table; planted faults (a dropped or a skipped
// copy-on-write) are caught and named.
#include "dataplane/data_plane.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "support.h"

using namespace kvreplay;
using kvreplay::test::replay_text;

namespace {

std::string read_trace(const std::string& name) {
  std::ifstream in(std::string(KVREPLAY_SOURCE_DIR) + "/traces/" + name, std::ios::binary);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

DataPlaneOptions verifying() {
  DataPlaneOptions options;
  options.verify = true;
  return options;
}

bool same_figures(const ReplayTotals& a, const ReplayTotals& b) {
  return a.events == b.events && a.peak_used == b.peak_used && a.peak_logical == b.peak_logical &&
         a.peak_physical == b.peak_physical && a.tokens_appended == b.tokens_appended &&
         a.cow_copies == b.cow_copies && a.cow_bytes == b.cow_bytes && a.forks == b.forks &&
         a.checks == b.checks && a.oom_events == b.oom_events &&
         a.waste_ratio_sum == b.waste_ratio_sum && a.saved_blocks_at_peak == b.saved_blocks_at_peak;
}

// The example traces; those on llama-3-8b run on a small geometry with the
// same pool (the unit tests must stay fast under sanitizers; the CLI tests
// replay them as they are).
struct ExampleTrace {
  const char* name;
  ConfigOverrides overrides;
};
const ExampleTrace kTraces[] = {{"fork_cow.jsonl", {}},
                                {"prefix_partial.jsonl", {}},
                                {"prefix_drop.jsonl", {}},
                                {"oom.jsonl", {}},
                                {"quickstart.jsonl", test::small_geometry(64)},
                                {"document.json", test::small_geometry(8)},
                                {"offload_tiers.jsonl", {}}};

}  // namespace

TEST_CASE("every example trace verifies byte for byte on the cpu data plane", "[verify]") {
  for (const ExampleTrace& example : kTraces) {
    CAPTURE(example.name);
    const std::string trace = read_trace(example.name);
    const CheckPolicy end{CheckPolicy::Mode::kEnd, 1};
    auto none = replay_text(trace, BackendKind::kNone, {}, {}, end, example.overrides);
    DataPlaneOptions options = verifying();
    options.attention = true;
    auto cpu = replay_text(trace, BackendKind::kCpu, options, {}, end, example.overrides);
    REQUIRE_FALSE(cpu.input_error);
    INFO((cpu.violation ? cpu.violation->message : std::string()));
    CHECK_FALSE(cpu.violated);
    CHECK(cpu.verify.checkpoints >= 1);
    // The data plane never changes a figure of the report.
    CHECK(same_figures(none.totals, cpu.totals));
  }
}

TEST_CASE("an MLA geometry (one latent a token) verifies, and a dropped copy names the latent",
          "[verify]") {
  const auto mla = [](RunConfig& config) {
    config.kv.kv_tensors = 1;
    config.kv.kv_heads = 1;
  };
  for (const ExampleTrace& example : kTraces) {
    CAPTURE(example.name);
    const std::string trace = read_trace(example.name);
    const CheckPolicy end{CheckPolicy::Mode::kEnd, 1};
    auto none = replay_text(trace, BackendKind::kNone, {}, {}, end, example.overrides, mla);
    auto cpu = replay_text(trace, BackendKind::kCpu, verifying(), {}, end, example.overrides, mla);
    REQUIRE_FALSE(cpu.input_error);
    INFO((cpu.violation ? cpu.violation->message : std::string()));
    CHECK_FALSE(cpu.violated);
    CHECK(cpu.verify.checkpoints >= 1);
    CHECK(same_figures(none.totals, cpu.totals));
  }
  const std::string trace = read_trace("fork_cow.jsonl");
  DataPlaneFaults faults;
  faults.skip_copy = 1;
  auto planted = replay_text(trace, BackendKind::kCpu, verifying(), faults,
                             CheckPolicy{CheckPolicy::Mode::kEnd, 1}, {}, mla);
  REQUIRE(planted.violated);
  REQUIRE(planted.violation);
  CHECK(planted.violation->invariant == "D1");
  CHECK_THAT(planted.violation->message,
             Catch::StartsWith("seq 0 position 4: layer 0 latent head 0 dim 0 reads 0x00000000"));
  // Half the bytes of the K+V arena: the copy-on-write bytes halve too.
  auto kv = replay_text(trace, BackendKind::kNone);
  auto latent =
      replay_text(trace, BackendKind::kNone, {}, {}, CheckPolicy{CheckPolicy::Mode::kEnd, 1}, {},
                  [](RunConfig& config) { config.kv.kv_tensors = 1; });
  CHECK(latent.totals.cow_copies == kv.totals.cow_copies);
  CHECK(latent.totals.cow_bytes * 2 == kv.totals.cow_bytes);
}

TEST_CASE("fork_cow: a dropped copy-on-write copy is caught at the check event", "[verify]") {
  const std::string trace = read_trace("fork_cow.jsonl");
  auto clean = replay_text(trace, BackendKind::kCpu, verifying());
  REQUIRE_FALSE(clean.violated);
  REQUIRE(clean.totals.cow_copies == 3);
  // The first copy is seq 0's (decode at event 4): its new page 1 misses tokens 4 and 5.
  DataPlaneFaults faults;
  faults.skip_copy = 1;
  auto planted = replay_text(trace, BackendKind::kCpu, verifying(), faults);
  REQUIRE(planted.violated);
  REQUIRE(planted.violation);
  CHECK(planted.violation->invariant == "D1");
  CHECK(planted.violation->event == 8);  // the check event, line 9
  CHECK(planted.violation->line == 9);
  CHECK_THAT(planted.violation->message,
             Catch::StartsWith("seq 0 position 4: layer 0 K head 0 dim 0 reads 0x00000000 through "
                               "page 1"));
  CHECK_THAT(planted.violation->message,
             Catch::Contains("the token of seq 0 (admit at event 1, line 2)"));
  CHECK_THAT(planted.violation->message, Catch::Contains("found zero bytes (never written)"));
}

TEST_CASE("fork_cow: a skipped copy-on-write (the write lands in the shared page) is caught",
          "[verify]") {
  const std::string trace = read_trace("fork_cow.jsonl");
  DataPlaneFaults faults;
  faults.write_shared = 2;  // seq 1's copy at event 4: it writes position 6 into the shared page
  auto planted = replay_text(trace, BackendKind::kCpu, verifying(), faults);
  REQUIRE(planted.violated);
  REQUIRE(planted.violation);
  CHECK(planted.violation->invariant == "D1");
  CHECK(planted.violation->event == 8);
  // seq 1 reads its inherited tokens 4..5 from a page nobody copied: zeros.
  CHECK_THAT(planted.violation->message, Catch::StartsWith("seq 1 position 4"));
}

TEST_CASE("a missing copy-on-write is caught whichever copy it hits", "[verify]") {
  for (const ExampleTrace& example : kTraces) {
    const std::string trace = read_trace(example.name);
    // Verifying after every event (--check every), the copy's destination is
    // read back at once, before its sequence can be freed.
    const CheckPolicy every{CheckPolicy::Mode::kEvery, 1};
    auto clean = replay_text(trace, BackendKind::kCpu, verifying(), {}, every, example.overrides);
    REQUIRE_FALSE(clean.violated);
    for (std::uint64_t copy = 1; copy <= clean.totals.cow_copies; ++copy) {
      CAPTURE(example.name, copy);
      DataPlaneFaults skip;
      skip.skip_copy = copy;
      auto skipped =
          replay_text(trace, BackendKind::kCpu, verifying(), skip, every, example.overrides);
      CHECK(skipped.violated);
      DataPlaneFaults shared;
      shared.write_shared = copy;
      auto in_place =
          replay_text(trace, BackendKind::kCpu, verifying(), shared, every, example.overrides);
      CHECK(in_place.violated);
      if (in_place.violation) CHECK(in_place.violation->invariant == "D1");
    }
  }
}

TEST_CASE("a dropped copy into a reused block names the stale writer it found", "[verify]") {
  // seq 9 leaves its page 1 (positions 4..7) in block 1; seq 0's copy-on-write
  // gets block 1 back (lifo) and, with the copy dropped, reads seq 9's tokens.
  const std::string trace =
      "{\"kvtrace\": 1, \"config\": {\"layers\": 2, \"kv_heads\": 2, \"head_dim\": 3, \"dtype\": "
      "\"bf16\", \"page_tokens\": 4, \"pool_blocks\": 4}}\n"
      "{\"op\": \"admit\", \"seq\": 9, \"prompt\": 8}\n"
      "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 6}\n"
      "{\"op\": \"fork\", \"seq\": 0, \"child\": 1}\n"
      "{\"op\": \"free\", \"seq\": 9}\n"
      "{\"op\": \"decode\", \"seqs\": [0]}\n"
      "{\"op\": \"check\"}\n";
  REQUIRE_FALSE(replay_text(trace, BackendKind::kCpu, verifying()).violated);
  DataPlaneFaults faults;
  faults.skip_copy = 1;
  auto planted = replay_text(trace, BackendKind::kCpu, verifying(), faults);
  REQUIRE(planted.violation);
  CHECK(planted.violation->event == 6);
  CHECK(planted.violation->line == 7);
  CHECK_THAT(planted.violation->message,
             Catch::StartsWith("seq 0 position 4: layer 0 K head 0 dim 0"));
  CHECK_THAT(planted.violation->message, Catch::Contains("through page 1 (block 1)"));
  CHECK_THAT(planted.violation->message,
             Catch::Contains("found the token of seq 9 (admit at event 1, line 2)"));
}

TEST_CASE("sequence ids reused after a free get fresh contents", "[verify]") {
  const std::string trace =
      "{\"kvtrace\": 1, \"config\": {\"layers\": 1, \"kv_heads\": 1, \"head_dim\": 2, \"dtype\": "
      "\"fp8\", \"page_tokens\": 3, \"pool_blocks\": 6, \"alloc_order\": \"lifo\"}}\n"
      "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 7}\n"
      "{\"op\": \"free\", \"seq\": 0}\n"
      "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 4}\n"
      "{\"op\": \"check\"}\n"
      "{\"op\": \"append\", \"seq\": 0, \"tokens\": 4}\n";
  auto run = replay_text(trace, BackendKind::kCpu, verifying());
  CHECK_FALSE(run.violated);
  CHECK(run.verify.checkpoints == 2);
  CHECK(run.verify.tokens == 4 + 8);
}

TEST_CASE("random traces verify under every allocation order, with figures unchanged", "[verify]") {
  const std::string config =
      "{\"layers\": 2, \"kv_heads\": 1, \"head_dim\": 3, \"dtype\": \"fp16\", \"page_tokens\": 5, "
      "\"pool_blocks\": 48, \"max_seq_tokens\": 256}";
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const std::string trace = test::random_trace(seed, 400, config);
    for (AllocOrder order : {AllocOrder::kLifo, AllocOrder::kFifo, AllocOrder::kLowest}) {
      CAPTURE(seed, to_string(order));
      ConfigOverrides overrides;
      overrides.alloc_order = std::string(to_string(order));
      auto none = replay_text(trace, BackendKind::kNone, {}, {},
                              CheckPolicy{CheckPolicy::Mode::kEvery, 1}, overrides);
      DataPlaneOptions options = verifying();
      options.attention = seed % 2 == 0;
      options.staging_bytes = seed % 3 == 0 ? 1 : options.staging_bytes;  // flush after every token
      options.verify_chunk_bytes =
          seed % 4 == 0 ? 1 : options.verify_chunk_bytes;  // one row a gather
      auto cpu = replay_text(trace, BackendKind::kCpu, options, {},
                             CheckPolicy{CheckPolicy::Mode::kEvery, 1}, overrides);
      REQUIRE_FALSE(cpu.input_error);
      INFO(cpu.input_message);
      INFO((cpu.violation ? cpu.violation->message : std::string()));
      REQUIRE_FALSE(cpu.violated);
      CHECK(cpu.verify.checkpoints >= 1);
      CHECK(same_figures(none.totals, cpu.totals));
    }
  }
}

TEST_CASE("copies of one event run in one copy_blocks launch", "[verify]") {
  // Three branches share a partial page; one decode makes two copies.
  const std::string trace = read_trace("fork_cow.jsonl");
  auto run = replay_text(trace, BackendKind::kCpu, verifying());
  REQUIRE(run.totals.cow_copies == 3);
  CHECK(run.copies_launched == 2);  // event 4 (two copies), event 7 (one)
}

TEST_CASE("an arena above the limit is refused with the options that size it", "[verify]") {
  PagedKvConfig config = test::geometry(32, 8, 128, Dtype::kBf16, 16, 4096);
  auto refused = make_backend(BackendKind::kCpu, config, std::uint64_t{1} << 30);
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error(), Catch::Contains("8.0 GiB"));
  CHECK_THAT(refused.error(), Catch::Contains("--kv-memory / --pool-blocks"));
  CHECK_THAT(refused.error(), Catch::Contains("--arena-limit 1.0 GiB"));
  auto none = make_backend(BackendKind::kNone, config, std::nullopt);
  CHECK_FALSE(none);
}
