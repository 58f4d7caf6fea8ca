// Timing the data-plane kernels against the copy roof, and the cost of paging
// (SPEC 5): what `kvreplay kernels` (app/kernels.h) sweeps.
//
// For one (page_tokens, batch, context) point of a sweep it builds two block
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

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "dataplane/backend.h"
#include "dataplane/kernel_stats.h"

namespace kvreplay {

// The paged tables of one sweep point: the final tables of sequences 0 .. batch-1
// after replaying the interleaved decode trace. Exposed for tests.
struct FragmentedTables {
  std::vector<std::vector<BlockId>> tables;  // [batch][ceil(context / page_tokens)]
  std::uint32_t pool_blocks = 0;             // the replay's pool (reserved tail included)
  std::uint32_t reserved_from = 0;           // blocks [reserved_from, pool_blocks) are never used
};
FragmentedTables replay_fragmented_tables(const PagedKvConfig& geometry, std::uint32_t batch,
                                          std::uint32_t context, std::uint64_t seed);

// The pool a sweep point's fragmenting replay needs (FragmentedTables::pool_blocks),
// in 64 bits: the batch's pages, the noise sequences' and the reserved tail.
std::uint64_t fragmented_pool_blocks(std::uint32_t batch, std::uint32_t context,
                                     std::uint32_t page_tokens);

// The host memory a sweep point needs before any arena (kernels' "Memory
// bounds" in the README): per pool block, the pool's bookkeeping
// (kPoolBytesPerBlock), the replay's block-table entry and the captured
// table's copy (4 bytes each), the backend's table on the host (4 bytes) and
// its slot mapping and lineage (16 bytes): kKernelBytesPerBlock.
inline constexpr std::uint64_t kKernelBytesPerBlock = 40;

// The kernels timed at every point, in the order of the report and the table.
inline constexpr std::array<std::string_view, 4> kBenchKernels = {"append", "copy_blocks", "gather",
                                                                  "attention"};

// One kernel at one point: launches timed by the backend's clock.
struct KernelMeasure {
  double median_us = 0.0;
  double p99_us = 0.0;
  double gbps = 0.0;        // bytes / median latency
  std::uint64_t bytes = 0;  // read plus written, per launch
};

struct SweepPoint {
  std::uint32_t batch = 1;
  std::uint32_t context = 1;
  std::uint32_t page_tokens = 16;
  std::uint32_t group = 4;  // query heads per KV head
  std::uint64_t seed = 1;
  int warmup = 3;
  int iterations = 20;
};

// Each of kBenchKernels, on the paged tables and on identity tables.
struct PointTimings {
  std::array<KernelMeasure, kBenchKernels.size()> paged;
  std::array<KernelMeasure, kBenchKernels.size()> identity;
};

// Times every kernel of kBenchKernels on `backend` (an arena of `paged.pool_blocks`
// blocks of the point's geometry). Throws BackendError (out of device memory, say).
PointTimings time_kernels(KvBackend& backend, const FragmentedTables& paged,
                          const SweepPoint& point);

}  // namespace kvreplay
