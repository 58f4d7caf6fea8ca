// The data-plane CUDA kernels (device code only; launchers.cu launches them).
// Arguments and shapes: dataplane/kernel_params.h. C++17 (nvcc).
//
// The three data movers (append, copy_blocks, gather) copy whole token rows or
// blocks with vector loads and stores of `Vec` (uint4 = 16 bytes when the row
// size allows; the launcher picks the widest width dividing it). A warp moves a
// token row, a CTA a block. Paged decode attention is split-K: CTA (item,
// kv_head, split) attends over one chunk of the context, tile by tile, with the
// tile's page ids staged in shared memory and its K and V rows loaded into
// shared memory with 16-byte vectors; an online softmax keeps (m, l, acc) per
// query head in shared memory; with more than one split, attention_merge_kernel
// combines the partial results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dataplane/content.h"
#include "dataplane/kernel_params.h"

namespace kvreplay::cuda {

inline constexpr unsigned kMoverThreads = 256;      // threads per CTA, data movers
inline constexpr unsigned kAttentionThreads = 128;  // threads per CTA, attention
inline constexpr unsigned kWarp = 32;

// Shared memory of the attention kernel, in bytes from the start; each part
// is 16-byte aligned.
struct AttentionLayout {
  std::uint64_t k_tile = 0;  // [tile_tokens][row_bytes]
  std::uint64_t v_tile = 0;  // [tile_tokens][row_bytes]
  std::uint64_t q = 0;       // [group][head_dim] float, scaled by 1/sqrt(head_dim)
  std::uint64_t acc = 0;     // [group][head_dim] float
  std::uint64_t scores = 0;  // [group][tile_tokens] float (probabilities after the softmax step)
  std::uint64_t m = 0;       // [group] float: running maximum
  std::uint64_t l = 0;       // [group] float: running sum of exp(score - m)
  std::uint64_t alpha = 0;   // [group] float: rescale factor of the current tile
  std::uint64_t pages = 0;   // [tile_tokens + 1] uint32: the tile's page ids
  std::uint64_t total = 0;
};

__host__ __device__ inline std::uint64_t align16(std::uint64_t n) {
  return (n + 15) & ~std::uint64_t{15};
}

__host__ __device__ inline AttentionLayout attention_layout(std::uint64_t row_bytes,
                                                            std::uint32_t group,
                                                            std::uint32_t head_dim,
                                                            std::uint32_t tile_tokens) {
  AttentionLayout layout;
  std::uint64_t at = 0;
  layout.k_tile = at;
  at = align16(at + tile_tokens * row_bytes);
  layout.v_tile = at;
  at = align16(at + tile_tokens * row_bytes);
  layout.q = at;
  at = align16(at + std::uint64_t{group} * head_dim * 4);
  layout.acc = at;
  at = align16(at + std::uint64_t{group} * head_dim * 4);
  layout.scores = at;
  at = align16(at + std::uint64_t{group} * tile_tokens * 4);
  layout.m = at;
  at = align16(at + std::uint64_t{group} * 4);
  layout.l = at;
  at = align16(at + std::uint64_t{group} * 4);
  layout.alpha = at;
  at = align16(at + std::uint64_t{group} * 4);
  layout.pages = at;
  at = align16(at + (std::uint64_t{tile_tokens} + 1) * 4);
  layout.total = at;
  return layout;
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xFFFFFFFFu, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xFFFFFFFFu, value, offset));
  }
  return value;
}

// grid: x = row groups (grid-stride), y = layers (grid-stride); block: kMoverThreads.
// Warp w of CTA x moves staging row x * warps + w of each layer to its slot.
template <typename Vec>
__global__ void append_kernel(ArenaView arena, AppendParams params) {
  const unsigned warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint64_t token_bytes = arena.token_bytes();
  const std::uint64_t vecs = token_bytes / sizeof(Vec);
  for (std::uint32_t layer = blockIdx.y; layer < arena.layers; layer += gridDim.y) {
    for (std::uint64_t row = std::uint64_t{blockIdx.x} * warps + warp; row < params.rows;
         row += std::uint64_t{gridDim.x} * warps) {
      const std::int64_t slot = params.slots[row];
      if (slot < 0) continue;
      const Vec* source = reinterpret_cast<const Vec*>(
          params.staging + (std::uint64_t{layer} * params.rows + row) * token_bytes);
      Vec* destination = reinterpret_cast<Vec*>(
          arena.data + arena.offset(layer, static_cast<std::uint64_t>(slot)));
      for (std::uint64_t i = lane; i < vecs; i += kWarp) destination[i] = source[i];
    }
  }
}

// grid: x = copies (grid-stride), y = layers (grid-stride); block: kMoverThreads.
// CTA (c, layer) copies block pairs[c][0] to pairs[c][1] in that layer.
template <typename Vec>
__global__ void copy_blocks_kernel(ArenaView arena, CopyBlocksParams params) {
  const std::uint64_t block_bytes = arena.layer_block_bytes();
  const std::uint64_t vecs = block_bytes / sizeof(Vec);
  for (std::uint32_t layer = blockIdx.y; layer < arena.layers; layer += gridDim.y) {
    std::uint8_t* base = arena.data + std::uint64_t{layer} * arena.layer_bytes();
    for (std::uint32_t copy = blockIdx.x; copy < params.copies; copy += gridDim.x) {
      const Vec* source =
          reinterpret_cast<const Vec*>(base + params.pairs[2 * std::uint64_t{copy}] * block_bytes);
      Vec* destination =
          reinterpret_cast<Vec*>(base + params.pairs[2 * std::uint64_t{copy} + 1] * block_bytes);
      for (std::uint64_t i = threadIdx.x; i < vecs; i += blockDim.x) destination[i] = source[i];
    }
  }
}

// grid: x = items (grid-stride), y = layers (grid-stride), z = row tiles
// (grid-stride); block: kMoverThreads. Warp w of tile z moves token z * warps + w
// of the item, looking its page up in the block table.
template <typename Vec>
__global__ void gather_kernel(ArenaView arena, PagedBatchView batch, GatherParams params) {
  const unsigned warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint64_t token_bytes = arena.token_bytes();
  const std::uint64_t vecs = token_bytes / sizeof(Vec);
  const std::uint32_t page_tokens = arena.page_tokens;
  for (std::uint32_t layer = blockIdx.y; layer < arena.layers; layer += gridDim.y) {
    for (std::uint32_t item = blockIdx.x; item < batch.batch; item += gridDim.x) {
      const std::uint32_t length = batch.lengths[item];
      const std::uint32_t start = batch.starts[item];
      const std::uint32_t* pages = batch.indices + batch.indptr[item];
      std::uint8_t* out =
          params.out + (std::uint64_t{layer} * params.rows + batch.out_indptr[item]) * token_bytes;
      for (std::uint64_t t = std::uint64_t{blockIdx.z} * warps + warp; t < length;
           t += std::uint64_t{gridDim.z} * warps) {
        const std::uint64_t position = start + t;
        const std::uint64_t slot =
            std::uint64_t{pages[position / page_tokens]} * page_tokens + position % page_tokens;
        const Vec* source = reinterpret_cast<const Vec*>(arena.data + arena.offset(layer, slot));
        Vec* destination = reinterpret_cast<Vec*>(out + t * token_bytes);
        for (std::uint64_t i = lane; i < vecs; i += kWarp) destination[i] = source[i];
      }
    }
  }
}

// grid: x = item, y = kv_head, z = split; block: kAttentionThreads; dynamic
// shared memory: attention_layout(...).total bytes.
// Split z covers positions [z * chunk_tokens, min(length, (z + 1) * chunk_tokens)).
// With one split the result goes to params.out; otherwise to
//   partial[batch][splits][q_heads][head_dim + 2]  (acc..., m, l)
// for attention_merge_kernel.
template <ElemType kType, typename Vec>
__global__ void paged_decode_attention_kernel(ArenaView arena, PagedBatchView batch,
                                              AttentionParams params, std::uint32_t chunk_tokens,
                                              std::uint32_t tile_tokens, float* partial) {
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t head_dim = arena.head_dim;
  const std::uint32_t group = params.group;
  const std::uint64_t row_bytes = arena.row_bytes();
  const AttentionLayout layout = attention_layout(row_bytes, group, head_dim, tile_tokens);
  std::uint8_t* k_tile = shared + layout.k_tile;
  std::uint8_t* v_tile = shared + layout.v_tile;
  float* q = reinterpret_cast<float*>(shared + layout.q);
  float* acc = reinterpret_cast<float*>(shared + layout.acc);
  float* scores = reinterpret_cast<float*>(shared + layout.scores);
  float* m = reinterpret_cast<float*>(shared + layout.m);
  float* l = reinterpret_cast<float*>(shared + layout.l);
  float* alpha = reinterpret_cast<float*>(shared + layout.alpha);
  std::uint32_t* tile_pages = reinterpret_cast<std::uint32_t*>(shared + layout.pages);

  const unsigned threads = blockDim.x, warps = threads / kWarp;
  const unsigned warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::uint32_t item = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const std::uint32_t q_heads = arena.kv_heads * group;
  const std::uint32_t length = batch.lengths[item];
  const std::uint64_t begin = std::uint64_t{split} * chunk_tokens;
  const std::uint64_t end = begin + chunk_tokens < length ? begin + chunk_tokens : length;
  const std::uint32_t page_tokens = arena.page_tokens;
  const std::uint64_t token_bytes = arena.token_bytes();
  const std::uint64_t v_offset = std::uint64_t{arena.kv_heads} * row_bytes;
  const std::uint8_t* layer_base = arena.data + std::uint64_t{params.layer} * arena.layer_bytes();
  const std::uint32_t* pages = batch.indices + batch.indptr[item];
  const std::uint64_t row_vecs = row_bytes / sizeof(Vec);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));

  for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += threads) {
    const std::uint32_t g = i / head_dim, d = i % head_dim;
    q[i] = params.q[(std::uint64_t{item} * q_heads + kv_head * group + g) * head_dim + d] * scale;
    acc[i] = 0.0f;
  }
  for (std::uint32_t g = threadIdx.x; g < group; g += threads) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  __syncthreads();

  for (std::uint64_t tile = begin; tile < end; tile += tile_tokens) {
    const std::uint32_t n =
        static_cast<std::uint32_t>(end - tile < tile_tokens ? end - tile : tile_tokens);
    const std::uint64_t first_page = tile / page_tokens;
    const std::uint64_t page_count = (tile + n - 1) / page_tokens - first_page + 1;
    for (std::uint64_t i = threadIdx.x; i < page_count; i += threads)
      tile_pages[i] = pages[first_page + i];
    __syncthreads();
    for (std::uint64_t i = threadIdx.x; i < n * row_vecs; i += threads) {
      const std::uint64_t t = i / row_vecs, c = i % row_vecs;
      const std::uint64_t position = tile + t;
      const std::uint64_t slot =
          std::uint64_t{tile_pages[position / page_tokens - first_page]} * page_tokens +
          position % page_tokens;
      const std::uint8_t* token = layer_base + slot * token_bytes + kv_head * row_bytes;
      reinterpret_cast<Vec*>(k_tile + t * row_bytes)[c] = reinterpret_cast<const Vec*>(token)[c];
      reinterpret_cast<Vec*>(v_tile + t * row_bytes)[c] =
          reinterpret_cast<const Vec*>(token + v_offset)[c];
    }
    __syncthreads();
    // Scores: a warp per (token, query head).
    for (std::uint32_t index = warp; index < n * group; index += warps) {
      const std::uint32_t t = index / group, g = index % group;
      float dot = 0.0f;
      for (std::uint32_t d = lane; d < head_dim; d += kWarp) {
        dot += q[g * head_dim + d] * content::load_element(k_tile + t * row_bytes, kType, d);
      }
      dot = warp_sum(dot);
      if (lane == 0) scores[g * tile_tokens + t] = dot;
    }
    __syncthreads();
    // Online softmax: a warp per query head.
    for (std::uint32_t g = warp; g < group; g += warps) {
      float tile_max = -INFINITY;
      for (std::uint32_t t = lane; t < n; t += kWarp)
        tile_max = fmaxf(tile_max, scores[g * tile_tokens + t]);
      tile_max = warp_max(tile_max);
      const float m_old = m[g];
      const float m_new = fmaxf(m_old, tile_max);
      float sum = 0.0f;
      for (std::uint32_t t = lane; t < n; t += kWarp) {
        const float p = expf(scores[g * tile_tokens + t] - m_new);
        scores[g * tile_tokens + t] = p;
        sum += p;
      }
      sum = warp_sum(sum);
      __syncwarp();
      if (lane == 0) {
        const float factor = expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        alpha[g] = factor;
        l[g] = l[g] * factor + sum;
        m[g] = m_new;
      }
    }
    __syncthreads();
    for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += threads) {
      const std::uint32_t g = i / head_dim, d = i % head_dim;
      float a = acc[i] * alpha[g];
      for (std::uint32_t t = 0; t < n; ++t) {
        a += scores[g * tile_tokens + t] * content::load_element(v_tile + t * row_bytes, kType, d);
      }
      acc[i] = a;
    }
    __syncthreads();
  }

  for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += threads) {
    const std::uint32_t g = i / head_dim, d = i % head_dim;
    const std::uint32_t q_head = kv_head * group + g;
    if (gridDim.z == 1) {
      params.out[(std::uint64_t{item} * q_heads + q_head) * head_dim + d] =
          l[g] > 0.0f ? acc[i] / l[g] : 0.0f;
    } else {
      float* out = partial + ((std::uint64_t{item} * gridDim.z + split) * q_heads + q_head) *
                                 (std::uint64_t{head_dim} + 2);
      out[d] = acc[i];
      if (d == 0) {
        out[head_dim] = m[g];
        out[head_dim + 1] = l[g];
      }
    }
  }
}

// grid: x = item, y = query head; block: kAttentionThreads over head_dim.
// Combines the splits' (acc, m, l): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void attention_merge_kernel(const float* partial, std::uint32_t splits,
                                       std::uint32_t q_heads, std::uint32_t head_dim, float* out);

}  // namespace kvreplay::cuda
