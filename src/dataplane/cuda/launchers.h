// Host launchers of the data-plane CUDA kernels (kernels.cuh). Every launcher
// enqueues its kernel(s) on `stream` and returns the first CUDA error (from the
// launch configuration or cudaGetLastError), cudaSuccess otherwise; it never
// synchronizes. Pointers in the parameter structs are device memory.
// C++17 and free of kernel code, so host C++ (cuda_backend.cc) includes it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "dataplane/kernel_params.h"

namespace kvreplay::cuda {

cudaError_t launch_append(const ArenaView& arena, const AppendParams& params, cudaStream_t stream);
cudaError_t launch_copy_blocks(const ArenaView& arena, const CopyBlocksParams& params,
                               cudaStream_t stream);
cudaError_t launch_gather(const ArenaView& arena, const PagedBatchView& batch,
                          const GatherParams& params, cudaStream_t stream);

// How an attention launch is split. A context longer than kMinChunkTokens is
// split into chunks when the batch alone (batch * kv_heads CTAs) cannot fill
// the GPU (kTargetCtasPerSm CTAs per SM); chunks are whole tiles. A CTA's time
// is set by its chunk (tile after tile), so short chunks keep small batches
// fast; the merge kernel is cheap next to it.
struct AttentionPlan {
  std::uint32_t splits = 1;
  std::uint32_t chunk_tokens = 0;
  std::uint32_t tile_tokens = 0;
  std::uint64_t shared_bytes = 0;      // dynamic shared memory per CTA
  std::uint64_t workspace_floats = 0;  // partial results, when splits > 1
};
inline constexpr std::uint32_t kMinChunkTokens = 64;
inline constexpr std::uint32_t kTargetCtasPerSm = 4;

AttentionPlan plan_attention(const ArenaView& arena, std::uint32_t batch, std::uint32_t max_length,
                             std::uint32_t group, int sm_count);

// REQUIRES: plan from plan_attention for this batch and group; workspace holds
// plan.workspace_floats floats (may be null when splits == 1); kv_heads and
// kv_heads * group <= 65535; plan.shared_bytes within the device's limit.
cudaError_t launch_attention(const ArenaView& arena, const PagedBatchView& batch,
                             const AttentionParams& params, const AttentionPlan& plan,
                             float* workspace, cudaStream_t stream);

}  // namespace kvreplay::cuda
