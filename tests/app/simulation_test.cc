// One simulation of a whole request trace through app/simulation/simulation.h, on the
// real Mooncake conversation trace: the published reuse figures, and every
// invariant at every step under memory pressure.
#include "app/simulation/simulation.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "engine/micro_config.h"

namespace {

using kvreplay::CheckPolicy;
using kvreplay::RunConfig;
using kvreplay::SimOptions;
using kvreplay::tiny_config;

// An engine as the command line runs it (vllm: no watermark), checked at the end.
SimOptions engine_options(kvreplay::EngineKind engine) {
  SimOptions options;
  options.engine = engine;
  if (engine == kvreplay::EngineKind::kVllm) options.watermark = 0.0;
  options.check = CheckPolicy{CheckPolicy::Mode::kEnd, 1};
  return options;
}

std::filesystem::path shared_trace(const char* relative) {
  return std::filesystem::path(KVREPLAY_SHARED_DIR) / "traces" / relative;
}

}  // namespace

TEST_CASE("simulate report: vLLM's null block and max_model_len in the report's figures") {
  // --max-seq-tokens 8 (max_model_len), pool 4 (null + 3), 4-token pages, no
  // prefix cache. a: prompt 6, output 2: step 1 computes 6 tokens in 2 blocks
  // (2 of 8 slots unfilled), step 2 its last token; freed at the step's end.
  // b (prompt 8 >= max_model_len) and c (5 + 4 > 8) are rejected as `vllm
  // serve` does (InputProcessor._validate_prompt_len,
  // TokenizeParams._token_len_check): skipped, counted, warned. No figure
  // counts the null block (BlockPool.get_usage).
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvreplay_simulation_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.jsonl").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"arrival\": 0, \"id\": \"a\", \"prompt\": 6, \"output\": 2}\n"
           "{\"arrival\": 0, \"id\": \"b\", \"prompt\": 8, \"output\": 1}\n"
           "{\"arrival\": 0, \"id\": \"c\", \"prompt\": 5, \"output\": 4}\n";
  }
  RunConfig config = tiny_config(4, 4);
  config.kv.max_seq_tokens = 8;
  SimOptions options = engine_options(kvreplay::EngineKind::kVllm);
  options.prefix_cache = false;
  auto result = kvreplay::simulate_file(path, std::nullopt, config, options, nullptr);
  std::filesystem::remove_all(dir);
  REQUIRE(result);
  const auto& report = result.value().report;
  INFO(report.dump(1));
  CHECK(report["blocks"]["total"] == 4);
  CHECK(report["blocks"]["peak_used"] == 2);
  CHECK(report["blocks"]["peak_in_use"] == 2);
  CHECK(report["blocks"]["final_used"] == 0);
  CHECK(report["blocks"]["allocations"] == 2);  // block 0 taken as the null block is none
  CHECK(report["blocks"]["mean_in_use"].get<double>() == Approx(1.0));  // 2, then 0
  CHECK(report["fragmentation"]["waste_ratio_max"].get<double>() == 0.25);
  CHECK(report["fragmentation"]["waste_ratio_at_peak"].get<double>() == 0.25);
  CHECK(report["fragmentation"]["waste_slots_at_peak"] == 2);
  CHECK(report["memory"]["peak_in_use_bytes"] == 2 * 4 * 32);  // 2 blocks of 4 tokens, K + V 32 B
  CHECK(report["requests"]["total"] == 3);
  CHECK(report["requests"]["finished"] == 1);
  CHECK(report["requests"]["skipped"] == 2);
  CHECK(report["requests"]["skipped_too_long"] == 2);
  CHECK(report["requests"]["skipped_pool_too_small"] == 0);
  CHECK(report["scheduler"]["output_tokens"] == 2);
  const auto& warnings = result.value().warnings;
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("2 requests skipped: prompt + output tokens above --max-seq-tokens 8 "
                         "(vLLM's max_model_len") != std::string::npos);
  CHECK(warnings[0].find("first: line 2, 9 tokens") != std::string::npos);
  // The summary's share of the pool is of the 3 blocks that can hold KV.
  CHECK(result.value().summary.find("2 of 4 (66.67%)") != std::string::npos);
}

TEST_CASE("simulator: Mooncake conversation trace matches the published reuse figures",
          "[shared]") {
  auto path = shared_trace("mooncake/conversation_trace.jsonl");
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(std::filesystem::exists(path));
  // Pages of 512 tokens (Mooncake's hash blocks) and a pool too large to evict;
  // both engines.
  for (auto engine : {kvreplay::EngineKind::kGeneric, kvreplay::EngineKind::kVllm}) {
    INFO(to_string(engine));
    RunConfig config = tiny_config(400000, 512);
    config.kv.max_seq_tokens = 131072;
    const SimOptions options = engine_options(engine);
    auto result = kvreplay::simulate_file(path.string(), std::nullopt, config, options, nullptr);
    REQUIRE(result);
    const auto& report = result.value().report;
    CHECK(report["requests"]["total"] == 12031);
    CHECK(report["requests"]["finished"] == 12031);
    CHECK(report["prefix_cache"]["evictions"] == 0);
    const double mean_input = report["prefix_cache"]["query_tokens"].get<double>() / 12031.0;
    const double mean_output = report["scheduler"]["output_tokens"].get<double>() / 12031.0;
    CHECK(mean_input == Approx(12035).margin(1.0));
    CHECK(mean_output == Approx(343).margin(1.0));
    CHECK(report["prefix_cache"]["hit_rate"].get<double>() == Approx(0.374).margin(0.01));
    CHECK(report["prefix_cache"]["hit_rate_per_request"].get<double>() ==
          Approx(0.409).margin(0.01));
    CHECK(report["invariants"]["violations"].empty());
  }
}

TEST_CASE("simulator: Mooncake slice under memory pressure keeps every invariant at every step",
          "[shared]") {
  auto path = shared_trace("mooncake/conversation_trace.jsonl");
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(std::filesystem::exists(path));
  RunConfig config = tiny_config(3000, 64);
  config.kv.max_seq_tokens = 131072;
  SimOptions options;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.max_seqs = 16;
  auto opened = kvreplay::simulate_file(path.string(), std::nullopt, config, options, nullptr);
  REQUIRE(opened);
  const auto& report = opened.value().report;
  INFO(report["invariants"].dump());
  CHECK(report["invariants"]["violations"].empty());
  CHECK(report["prefix_cache"]["evictions"].get<std::uint64_t>() > 0);
  CHECK(report["requests"]["finished"].get<std::uint64_t>() +
            report["requests"]["skipped"].get<std::uint64_t>() ==
        12031);
}

TEST_CASE(
    "simulator: Mooncake LRU block hit ratio matches the published 0.21 at 10k and 0.33 at 30k "
    "blocks",
    "[shared]") {
  auto path = shared_trace("mooncake/conversation_trace.jsonl");
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(std::filesystem::exists(path));
  // 288,500 hash blocks of 512 tokens in the whole trace.
  // The vllm engine (its null block, per-step allocation, duplicates) gives
  // the same figures within the margin.
  for (auto engine : {kvreplay::EngineKind::kGeneric, kvreplay::EngineKind::kVllm})
    for (auto [blocks, expected] : {std::pair{10000u, 0.21}, std::pair{30000u, 0.33}}) {
      INFO(to_string(engine));
      RunConfig config = tiny_config(blocks, 512);
      config.kv.max_seq_tokens = 131072;
      const SimOptions options = engine_options(engine);
      auto result = kvreplay::simulate_file(path.string(), std::nullopt, config, options, nullptr);
      REQUIRE(result);
      const auto& report = result.value().report;
      INFO("pool of " << blocks << " blocks: " << report["prefix_cache"].dump());
      CHECK(report["prefix_cache"]["hit_blocks"].get<double>() / 288500.0 ==
            Approx(expected).margin(0.015));
      CHECK(report["prefix_cache"]["evictions"].get<std::uint64_t>() > 0);
    }
}

TEST_CASE("simulate fleet: the total is the instances' figures merged, rendered by one writer") {
  // Two sglang instances, round-robin: a (prompt 8, output 2) and c on
  // instance 0, b (prompt 4, output 4) on instance 1. The total's counts and
  // peaks are the instances' sums, its hit rate the ratio of the summed
  // tokens, and the engine's own section stays with each instance
  // (Merge::kPerInstance).
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvreplay_fleet_figures_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.jsonl").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"arrival\": 0, \"id\": \"a\", \"prompt\": 8, \"output\": 2}\n"
           "{\"arrival\": 0, \"id\": \"b\", \"prompt\": 4, \"output\": 4}\n"
           "{\"arrival\": 1, \"id\": \"c\", \"prompt\": 8, \"output\": 2}\n";
  }
  kvreplay::FleetOptions fleet;
  fleet.replicas = 2;
  const SimOptions options = engine_options(kvreplay::EngineKind::kSglang);
  auto result = kvreplay::simulate_fleet_file(path, std::nullopt, tiny_config(16, 4), options,
                                              fleet, kvreplay::FleetOutputs{});
  std::filesystem::remove_all(dir);
  REQUIRE(result);
  const auto& r = result.value();
  const auto& report = r.report;
  INFO(report.dump(1));
  REQUIRE(r.instance_figures.size() == 2);
  const kvreplay::SimFigures& a = r.instance_figures[0];
  const kvreplay::SimFigures& b = r.instance_figures[1];
  CHECK(r.figures.instances == 2);
  CHECK(a.requests + b.requests == 3);
  CHECK(r.figures.peak_used == a.peak_used + b.peak_used);
  CHECK(report["blocks"]["peak_used"] == r.figures.peak_used);
  CHECK(r.figures.query_tokens == a.query_tokens + b.query_tokens);
  CHECK(report["prefix_cache"]["hit_rate"].get<double>() == r.figures.hit_rate());
  CHECK(report["requests"]["total"] == 3);
  CHECK(report["requests"]["finished"] == 3);
  CHECK(report["scheduler"]["output_tokens"] == 8);
  CHECK(report["latency"]["ttft_ms"]["count"] == 3);
  CHECK_FALSE(report.contains("sglang"));
  CHECK(report["instances"][0].contains("sglang"));
  CHECK(report["instances"][1].contains("sglang"));
}
