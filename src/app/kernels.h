// The `kernels` command: the sweep of dataplane/kernel_bench.h over batch sizes,
// contexts and page sizes, printed as a table and written as a JSON report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "dataplane/backend.h"
#include "dataplane/kernel_bench.h"

namespace kvreplay {

struct KernelBenchRequest {
  BackendKind backend = BackendKind::kCuda;
  std::uint32_t kv_heads = 8;  // one layer of llama-3-8b by default
  std::uint32_t head_dim = 128;
  Dtype dtype = Dtype::kBf16;
  std::uint32_t group = 4;  // query heads per KV head
  // Empty lists take the backend's defaults (cuda: batch 1,8,32,128, context
  // 512,4096,16384, page 16,64; cpu: batch 1,8,32, context 256,1024, page 16).
  std::vector<std::uint32_t> batches;
  std::vector<std::uint32_t> contexts;
  std::vector<std::uint32_t> page_tokens;
  int iterations = 20;
  int warmup = 3;
  std::optional<std::uint64_t> arena_limit;
  std::uint64_t seed = 1;
  std::string report_path;  // JSON; empty: none
  bool quiet = false;
};

// Runs the sweep, prints the table, writes the report. Returns the exit code:
// 0, or 2 when the backend cannot start or an option is bad (one line on stderr).
int run_kernels(const KernelBenchRequest& request);

}  // namespace kvreplay
