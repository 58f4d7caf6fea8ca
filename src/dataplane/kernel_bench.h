// `kvreplay kernels`: kernel throughput against the copy roof, and the cost of
// paging (SPEC 5).
//
// For every (page_tokens, batch, context) of the sweep it builds two block
// tables for the same `batch` sequences of `context` tokens each:
//   - paged: the tables the real Replayer ends with after an interleaved decode
//     trace (sequences decoded in shuffled order, chunked, beside short-lived
//     sequences that are freed and readmitted), so pages are scattered and
//     reused as in a serving run;
//   - identity: sequence i holds blocks [i * pages, (i + 1) * pages), the
//     contiguous layout of GpuBlockTablePlan::identity, one sequence after another,
// and times, on one layer of the model's geometry, each kernel on both:
//   append       one decode token per sequence (batch rows)
//   copy_blocks  one copy-on-write copy per sequence (its last page)
//   gather       every token of every sequence, paged -> dense
//   attention    decode attention over every sequence's whole context
// after `warmup` untimed launches, `iterations` timed ones (CUDA events on
// cuda, the wall clock on cpu). Reported per kernel: median and p99 latency,
// GB/s (bytes read plus written per launch / median latency), that rate as a
// fraction of the copy roof (a plain device-to-device copy, read plus write
// bytes), and the paged/identity latency ratio.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "dataplane/backend.h"

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

// The paged tables of one sweep point: the final tables of sequences 0 .. batch-1
// after replaying the interleaved decode trace. Exposed for tests.
struct FragmentedTables {
  std::vector<std::vector<BlockId>> tables;  // [batch][ceil(context / page_tokens)]
  std::uint32_t pool_blocks = 0;             // the replay's pool (reserved tail included)
  std::uint32_t reserved_from = 0;           // blocks [reserved_from, pool_blocks) are never used
};
FragmentedTables replay_fragmented_tables(const PagedKvConfig& geometry, std::uint32_t batch,
                                          std::uint32_t context, std::uint64_t seed);

}  // namespace kvreplay
