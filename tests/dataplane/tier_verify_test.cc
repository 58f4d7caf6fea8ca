// The prefix cache and the offload tiers under a data plane: a cached page is
// read back from the arena, a tier copy from its host memory, and a page
// loaded from a tier into a fresh block reads exactly the bytes that were
// stored. Planted faults (a corrupted copy, a skipped load) are caught and
// named.
#include <catch2/catch.hpp>

#include <string>

#include "dataplane/data_plane.h"
#include "support.h"

using namespace kvreplay;
using kvreplay::test::replay_text;

namespace {

DataPlaneOptions verifying() {
  DataPlaneOptions options;
  options.verify = true;
  return options;
}

const char* const kHeader =
    "{\"kvtrace\": 1, \"config\": {\"layers\": 2, \"kv_heads\": 1, \"head_dim\": 4, \"dtype\": "
    "\"fp16\", \"page_tokens\": 4, \"pool_blocks\": 8, \"alloc_order\": \"lifo\"}}\n";

// Seq 0 writes two pages, stores both and caches page 0; it is freed; the
// pages come back from the tiers into fresh blocks, and seq 1 admits on them.
std::string round_trip() {
  return std::string(kHeader) +
         "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 9}\n"
         "{\"op\": \"store\", \"seq\": 0, \"page\": 0, \"tier\": \"cpu\", \"key\": 10}\n"
         "{\"op\": \"store\", \"seq\": 0, \"page\": 1, \"tier\": \"disk\", \"key\": 11}\n"
         "{\"op\": \"free\", \"seq\": 0}\n"
         "{\"op\": \"admit\", \"seq\": 2, \"prompt\": 12}\n"  // reuses seq 0's blocks
         "{\"op\": \"load\", \"tier\": \"cpu\", \"key\": 10, \"block\": 1}\n"
         "{\"op\": \"load\", \"tier\": \"disk\", \"key\": 11, \"block\": 2}\n"
         "{\"op\": \"admit\", \"seq\": 1, \"prompt\": 10, \"hits\": [1, 2]}\n"
         "{\"op\": \"check\"}\n";
}

}  // namespace

TEST_CASE("a page stored to a tier and loaded into a fresh block reads the stored bytes",
          "[verify][tiers]") {
  auto run = replay_text(round_trip(), BackendKind::kCpu, verifying());
  REQUIRE_FALSE(run.input_error);
  INFO((run.violation ? run.violation->message : std::string()));
  CHECK_FALSE(run.violated);
  CHECK(run.verify.checkpoints == 2);
  CHECK(run.verify.copies == 4);  // two copies at each checkpoint
  CHECK(run.verify.cached == 4);  // two loaded pages at each checkpoint
  CHECK(run.totals.tier_loads[0] == 1);
  CHECK(run.totals.tier_loads[1] == 1);
}

TEST_CASE("a corrupted tier copy is caught in the tier and in the page loaded from it",
          "[verify][tiers]") {
  DataPlaneFaults faults;
  faults.corrupt_store = 2;  // the disk copy of page 1
  auto run = replay_text(round_trip(), BackendKind::kCpu, verifying(), faults);
  REQUIRE(run.violated);
  REQUIRE(run.violation);
  CHECK(run.violation->invariant == "D1");
  CHECK(run.violation->event == 9);  // the check event
  // Seq 1 read the loaded page first: it names position 4, seq 0's token.
  CHECK_THAT(run.violation->message, Catch::Contains("seq 1 position 4"));
  CHECK_THAT(run.violation->message, Catch::Contains("seq 0 (admit at event 1"));
}

TEST_CASE("a load that never wrote the block is caught, naming the stale writer",
          "[verify][tiers]") {
  DataPlaneFaults faults;
  faults.skip_load = 1;  // the cpu copy never reaches the fresh block
  auto run = replay_text(round_trip(), BackendKind::kCpu, verifying(), faults);
  REQUIRE(run.violated);
  REQUIRE(run.violation);
  CHECK(run.violation->invariant == "D1");
  CHECK_THAT(run.violation->message, Catch::Contains("seq 1 position 0"));
}

TEST_CASE("a tier copy alone is verified where it lies (host memory)", "[verify][tiers]") {
  DataPlaneFaults faults;
  faults.corrupt_store = 1;
  const std::string trace = std::string(kHeader) +
                            "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 4}\n"
                            "{\"op\": \"store\", \"seq\": 0, \"page\": 0, \"tier\": \"cpu\", "
                            "\"key\": 3}\n"
                            "{\"op\": \"free\", \"seq\": 0}\n";
  auto run = replay_text(trace, BackendKind::kCpu, verifying(), faults);
  REQUIRE(run.violation);
  CHECK(run.violation->invariant == "D1");
  CHECK(run.violation->message.rfind("cpu tier copy 3 (page 0) position 0: layer 0 byte 0", 0) ==
        0);
}

TEST_CASE("a cached page outside any table is read back from the arena", "[verify][tiers]") {
  // Block 0 is cached, its sequence freed; a planted dropped copy elsewhere
  // does not touch it, and the check reads it back.
  const std::string trace = std::string(kHeader) +
                            "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 5}\n"
                            "{\"op\": \"cache\", \"seq\": 0, \"page\": 0, \"block\": 7}\n"
                            "{\"op\": \"free\", \"seq\": 0}\n"
                            "{\"op\": \"check\"}\n";
  auto run = replay_text(trace, BackendKind::kCpu, verifying());
  INFO((run.violation ? run.violation->message : std::string()));
  CHECK_FALSE(run.violated);
  CHECK(run.verify.cached == 2);
  CHECK(run.verify.tables == 0);
}

TEST_CASE("random cache and tier traces verify at every event, with figures unchanged",
          "[verify][tiers]") {
  const std::string config =
      "{\"layers\": 2, \"kv_heads\": 1, \"head_dim\": 3, \"dtype\": \"fp16\", \"page_tokens\": 5, "
      "\"pool_blocks\": 200, \"max_seq_tokens\": 256}";
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    CAPTURE(seed);
    const std::string trace = test::random_cache_trace(seed, 500, config, 5, 120);
    const CheckPolicy every{CheckPolicy::Mode::kEvery, 1};
    auto none = replay_text(trace, BackendKind::kNone, {}, {}, every);
    REQUIRE_FALSE(none.input_error);
    INFO(none.input_message);
    DataPlaneOptions options = verifying();
    options.verify_chunk_bytes = seed % 3 == 0 ? 1 : options.verify_chunk_bytes;
    auto cpu = replay_text(trace, BackendKind::kCpu, options, {}, every);
    REQUIRE_FALSE(cpu.input_error);
    INFO((cpu.violation ? cpu.violation->message : std::string()));
    REQUIRE_FALSE(cpu.violated);
    CHECK(cpu.totals.oom_events == 0);
    CHECK(cpu.totals.hit_pages > 0);
    CHECK(cpu.totals.tier_loads[0] + cpu.totals.tier_loads[1] > 0);
    CHECK(cpu.verify.copies > 0);
    CHECK(cpu.totals.peak_used == none.totals.peak_used);
    CHECK(cpu.totals.tokens_appended == none.totals.tokens_appended);
  }
}

TEST_CASE("a tier past its host-memory limit stops the replay with a clear error",
          "[verify][tiers]") {
  DataPlaneOptions options = verifying();
  options.tier_limit_bytes = 1;  // less than one chunk of copies
  std::string caught;
  try {
    replay_text(round_trip(), BackendKind::kCpu, options);
  } catch (const BackendError& error) {
    caught = error.what();
  }
  CHECK_THAT(caught, Catch::Contains("the cpu tier would take more than 1 B of host memory"));
}
