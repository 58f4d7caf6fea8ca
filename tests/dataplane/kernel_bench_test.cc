#include "dataplane/kernel_bench.h"

#include <unistd.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "support.h"

using namespace kvreplay;

TEST_CASE("the replayed tables are full, disjoint and fragmented", "[kernels-bench]") {
  for (std::uint32_t page_tokens : {1u, 3u, 16u, 64u}) {
    for (std::uint32_t batch : {1u, 5u, 32u}) {
      CAPTURE(page_tokens, batch);
      const std::uint32_t context = page_tokens == 64 ? 20 : 97;  // a page longer than the context
      PagedKvConfig geometry = test::geometry(1, 2, 8, Dtype::kBf16, page_tokens, 1, context);
      FragmentedTables tables = replay_fragmented_tables(geometry, batch, context, 1);
      const std::uint32_t pages = (context + page_tokens - 1) / page_tokens;
      REQUIRE(tables.tables.size() == batch);
      REQUIRE(tables.reserved_from + batch == tables.pool_blocks);
      std::set<BlockId> seen;
      std::uint64_t contiguous = 0, steps = 0;
      for (const auto& table : tables.tables) {
        REQUIRE(table.size() == pages);
        for (std::size_t page = 0; page < table.size(); ++page) {
          REQUIRE(table[page] < tables.reserved_from);
          REQUIRE(seen.insert(table[page]).second);
          if (page > 0) {
            ++steps;
            contiguous += table[page] == table[page - 1] + 1;
          }
        }
      }
      if (batch > 1 && steps > 0) CHECK(contiguous * 2 < steps);  // mostly scattered
    }
  }
}

TEST_CASE("kvreplay kernels runs a small sweep on the cpu and writes its report",
          "[kernels-bench]") {
  KernelBenchRequest request;
  request.backend = BackendKind::kCpu;
  request.kv_heads = 2;
  request.head_dim = 8;
  request.dtype = Dtype::kFp16;
  request.group = 2;
  request.batches = {1, 3};
  request.contexts = {20};
  request.page_tokens = {1, 7};
  request.iterations = 2;
  request.warmup = 1;
  request.quiet = true;
  request.report_path = "kernels_test_report." + std::to_string(::getpid()) + ".json";
  REQUIRE(run_kernels(request) == 0);
  std::ifstream in(request.report_path);
  REQUIRE(in);
  nlohmann::json report = nlohmann::json::parse(in);
  std::remove(request.report_path.c_str());
  CHECK(report["kvreplay_kernels"] == 1);
  CHECK(report["copy_roof"]["gbps"].get<double>() > 0.0);
  REQUIRE(report["results"].size() == 2 * 2 * 1 * 4);
  std::set<std::string> kernels;
  for (const auto& row : report["results"]) {
    kernels.insert(row["kernel"].get<std::string>());
    CHECK(row["bytes"].get<std::uint64_t>() > 0);
    CHECK(row["paged"]["median_us"].get<double>() >= 0.0);
  }
  CHECK(kernels == std::set<std::string>{"append", "attention", "copy_blocks", "gather"});
}

TEST_CASE("kvreplay kernels refuses a cuda backend it cannot start", "[kernels-bench]") {
  if (make_backend(BackendKind::kCuda, test::geometry(1, 1, 8, Dtype::kFp32, 16, 1),
                   std::nullopt)) {
    SUCCEED("a CUDA device is present: nothing to refuse");
    return;
  }
  KernelBenchRequest request;
  request.backend = BackendKind::kCuda;
  request.quiet = true;
  CHECK(run_kernels(request) == 2);
}
