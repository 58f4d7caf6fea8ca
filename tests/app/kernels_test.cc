#include "app/kernels.h"

#include <unistd.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "dataplane/support.h"

using namespace kvreplay;

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
