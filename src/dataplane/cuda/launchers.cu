#include "dataplane/cuda/launchers.h"

#include <algorithm>

#include "dataplane/cuda/kernels.cuh"

namespace kvreplay::cuda {

namespace {

constexpr std::uint64_t kMaxGridX = 0x7FFFFFFFu;
constexpr std::uint64_t kMaxGridYZ = 65535;
constexpr std::uint64_t kDefaultSharedLimit = 48 * 1024;

unsigned grid_x(std::uint64_t n) {
  return static_cast<unsigned>(std::clamp<std::uint64_t>(n, 1, kMaxGridX));
}
unsigned grid_yz(std::uint64_t n) {
  return static_cast<unsigned>(std::clamp<std::uint64_t>(n, 1, kMaxGridYZ));
}

// The widest vector (16, 8, 4, 2 or 1 bytes) that divides `bytes`: every row or
// block offset is a multiple of `bytes` and buffers come from cudaMalloc (256-
// byte aligned), so every access of that width is aligned.
int vector_bytes(std::uint64_t bytes) {
  for (int width : {16, 8, 4, 2}) {
    if (bytes % static_cast<std::uint64_t>(width) == 0) return width;
  }
  return 1;
}

template <template <typename> class Launch, typename... Args>
cudaError_t with_vector(int width, Args&&... args) {
  switch (width) {
    case 16: return Launch<uint4>::run(args...);
    case 8: return Launch<uint2>::run(args...);
    case 4: return Launch<unsigned int>::run(args...);
    case 2: return Launch<unsigned short>::run(args...);
    default: return Launch<unsigned char>::run(args...);
  }
}

template <typename Vec>
struct AppendLaunch {
  static cudaError_t run(const ArenaView& arena, const AppendParams& params, cudaStream_t stream) {
    const unsigned warps = kMoverThreads / kWarp;
    dim3 grid(grid_x((params.rows + warps - 1) / warps), grid_yz(arena.layers));
    append_kernel<Vec><<<grid, kMoverThreads, 0, stream>>>(arena, params);
    return cudaGetLastError();
  }
};

template <typename Vec>
struct CopyBlocksLaunch {
  static cudaError_t run(const ArenaView& arena, const CopyBlocksParams& params,
                         cudaStream_t stream) {
    dim3 grid(grid_x(params.copies), grid_yz(arena.layers));
    copy_blocks_kernel<Vec><<<grid, kMoverThreads, 0, stream>>>(arena, params);
    return cudaGetLastError();
  }
};

template <typename Vec>
struct GatherLaunch {
  static cudaError_t run(const ArenaView& arena, const PagedBatchView& batch,
                         const GatherParams& params, cudaStream_t stream) {
    const unsigned warps = kMoverThreads / kWarp;
    dim3 grid(grid_x(batch.batch), grid_yz(arena.layers),
              grid_yz((std::uint64_t{batch.max_length} + warps - 1) / warps));
    gather_kernel<Vec><<<grid, kMoverThreads, 0, stream>>>(arena, batch, params);
    return cudaGetLastError();
  }
};

template <ElemType kType>
struct AttentionOf {
  template <typename Vec>
  struct Launch {
    static cudaError_t run(const ArenaView& arena, const PagedBatchView& batch,
                           const AttentionParams& params, const AttentionPlan& plan,
                           float* workspace, cudaStream_t stream) {
      if constexpr (sizeof(Vec) < element_bytes<kType>()) {
        // Never chosen: a row of whole elements is a multiple of the element size.
        return cudaErrorInvalidValue;
      } else {
        auto kernel = paged_decode_attention_kernel<kType, Vec>;
        if (plan.shared_bytes > kDefaultSharedLimit) {
          cudaError_t status =
              cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(plan.shared_bytes));
          if (status != cudaSuccess) return status;
        }
        dim3 grid(grid_x(batch.batch), arena.kv_heads, plan.splits);
        kernel<<<grid, kAttentionThreads, plan.shared_bytes, stream>>>(
            arena, batch, params, plan.chunk_tokens, plan.tile_tokens, workspace);
        return cudaGetLastError();
      }
    }
  };
};

}  // namespace

__global__ void attention_merge_kernel(const float* partial, std::uint32_t splits,
                                       std::uint32_t q_heads, std::uint32_t head_dim, float* out) {
  const std::uint32_t item = blockIdx.x, q_head = blockIdx.y;
  const std::uint64_t stride = std::uint64_t{q_heads} * (head_dim + 2);  // between splits
  const float* base = partial + (std::uint64_t{item} * splits * q_heads + q_head) * (head_dim + 2);
  float max_m = -INFINITY;
  for (std::uint32_t s = 0; s < splits; ++s) {
    const float* part = base + s * stride;
    if (part[head_dim + 1] > 0.0f) max_m = fmaxf(max_m, part[head_dim]);
  }
  float total = 0.0f;
  for (std::uint32_t s = 0; s < splits; ++s) {
    const float* part = base + s * stride;
    if (part[head_dim + 1] > 0.0f) total += part[head_dim + 1] * expf(part[head_dim] - max_m);
  }
  for (std::uint32_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f;
    for (std::uint32_t s = 0; s < splits; ++s) {
      const float* part = base + s * stride;
      if (part[head_dim + 1] > 0.0f) sum += part[d] * expf(part[head_dim] - max_m);
    }
    out[(std::uint64_t{item} * q_heads + q_head) * head_dim + d] =
        total > 0.0f ? sum / total : 0.0f;
  }
}

cudaError_t launch_append(const ArenaView& arena, const AppendParams& params, cudaStream_t stream) {
  if (params.rows == 0 || arena.layers == 0) return cudaSuccess;
  return with_vector<AppendLaunch>(vector_bytes(arena.token_bytes()), arena, params, stream);
}

cudaError_t launch_copy_blocks(const ArenaView& arena, const CopyBlocksParams& params,
                               cudaStream_t stream) {
  if (params.copies == 0 || arena.layers == 0) return cudaSuccess;
  return with_vector<CopyBlocksLaunch>(vector_bytes(arena.layer_block_bytes()), arena, params,
                                       stream);
}

cudaError_t launch_gather(const ArenaView& arena, const PagedBatchView& batch,
                          const GatherParams& params, cudaStream_t stream) {
  if (batch.batch == 0 || params.rows == 0 || arena.layers == 0) return cudaSuccess;
  return with_vector<GatherLaunch>(vector_bytes(arena.token_bytes()), arena, batch, params, stream);
}

AttentionPlan plan_attention(const ArenaView& arena, std::uint32_t batch, std::uint32_t max_length,
                             std::uint32_t group, int sm_count) {
  AttentionPlan plan;
  const std::uint64_t row_bytes = arena.row_bytes();
  // K and V tiles are double-buffered: 4 * tile_tokens rows, at most 32 KiB
  // (plus 16 bytes of padding a row) for rows of up to 8 KiB.
  plan.tile_tokens = static_cast<std::uint32_t>(
      std::clamp<std::uint64_t>(8192 / std::max<std::uint64_t>(row_bytes, 1), 1, 32));
  const std::uint64_t ctas = std::max<std::uint64_t>(1, std::uint64_t{batch} * arena.kv_heads);
  const std::uint64_t target = kTargetCtasPerSm * static_cast<std::uint64_t>(std::max(sm_count, 1));
  std::uint64_t splits = 1;
  if (max_length > kMinChunkTokens && ctas < target) {
    splits = std::min<std::uint64_t>((target + ctas - 1) / ctas,
                                     (max_length + kMinChunkTokens - 1) / kMinChunkTokens);
  }
  std::uint64_t chunk =
      std::max<std::uint64_t>(1, (std::uint64_t{max_length} + splits - 1) / splits);
  chunk = (chunk + plan.tile_tokens - 1) / plan.tile_tokens * plan.tile_tokens;
  splits = max_length == 0 ? 1 : (max_length + chunk - 1) / chunk;
  plan.splits = static_cast<std::uint32_t>(splits);
  plan.chunk_tokens = static_cast<std::uint32_t>(std::min<std::uint64_t>(chunk, 0xFFFFFFFFu));
  plan.shared_bytes = attention_layout(row_bytes, group, arena.head_dim, plan.tile_tokens).total;
  plan.workspace_floats = plan.splits > 1 ? std::uint64_t{batch} * plan.splits * arena.kv_heads *
                                                group * (std::uint64_t{arena.head_dim} + 2)
                                          : 0;
  return plan;
}

cudaError_t launch_attention(const ArenaView& arena, const PagedBatchView& batch,
                             const AttentionParams& params, const AttentionPlan& plan,
                             float* workspace, cudaStream_t stream) {
  if (batch.batch == 0) return cudaSuccess;
  const int width = vector_bytes(arena.row_bytes());
  cudaError_t status = cudaSuccess;
  switch (arena.dtype) {
    case ElemType::kFp32:
      status = with_vector<AttentionOf<ElemType::kFp32>::Launch>(width, arena, batch, params, plan,
                                                                 workspace, stream);
      break;
    case ElemType::kFp16:
      status = with_vector<AttentionOf<ElemType::kFp16>::Launch>(width, arena, batch, params, plan,
                                                                 workspace, stream);
      break;
    case ElemType::kBf16:
      status = with_vector<AttentionOf<ElemType::kBf16>::Launch>(width, arena, batch, params, plan,
                                                                 workspace, stream);
      break;
    case ElemType::kFp8:
      status = with_vector<AttentionOf<ElemType::kFp8>::Launch>(width, arena, batch, params, plan,
                                                                workspace, stream);
      break;
  }
  if (status != cudaSuccess || plan.splits == 1) return status;
  const std::uint32_t q_heads = arena.kv_heads * params.group;
  dim3 grid(grid_x(batch.batch), q_heads);
  attention_merge_kernel<<<grid, kAttentionThreads, 0, stream>>>(workspace, plan.splits, q_heads,
                                                                 arena.head_dim, params.out);
  return cudaGetLastError();
}

}  // namespace kvreplay::cuda
