// The data-plane CUDA kernels (device code only; launchers.cu launches them).
// Arguments and shapes: dataplane/kernel_params.h. C++17 (nvcc).
//
// The three data movers (append, copy_blocks, gather) copy whole token rows or
// blocks with vector loads and stores of `Vec` (uint4 = 16 bytes when the row
// size allows; the launcher picks the widest width dividing it). A warp moves a
// token row, a CTA a block. Paged decode attention is split-K: CTA (item,
// kv_head, split) attends over one chunk of the context, tile by tile. The K
// and V rows of a tile are copied into shared memory asynchronously (cp.async,
// 4- to 16-byte vectors) into one of two buffers while the CTA computes on the
// other, so the next tile's loads overlap this tile's arithmetic. A thread
// computes one (token, query head) score from 16-byte reads of the K row (rows
// are padded in shared memory so a warp's reads of 32 rows hit distinct
// banks); an online softmax keeps (m, l, acc) per query head in shared memory;
// with more than one split, attention_merge_kernel combines the partial
// results.
#pragma once

#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dataplane/content.h"
#include "dataplane/kernel_params.h"

namespace kvreplay::cuda {

inline constexpr unsigned kMoverThreads = 256;      // threads per CTA, data movers
inline constexpr unsigned kAttentionThreads = 128;  // threads per CTA, attention
inline constexpr unsigned kWarp = 32;

// Shared memory of the attention kernel, in bytes from the start; each part
// is 16-byte aligned. K and V tiles are double-buffered; a tile row takes
// row_stride bytes (the row rounded up to 16 bytes, plus 16: with 16-byte reads
// of the same column of consecutive rows, every 8 lanes hit distinct banks).
struct AttentionLayout {
  std::uint64_t row_stride = 0;  // bytes from one tile row to the next
  std::uint64_t k_tiles = 0;     // [2][tile_tokens][row_stride]
  std::uint64_t v_tiles = 0;     // [2][tile_tokens][row_stride]
  std::uint64_t q = 0;           // [group][head_dim] float, scaled by 1/sqrt(head_dim)
  std::uint64_t acc = 0;         // [group][head_dim] float
  std::uint64_t scores = 0;  // [group][tile_tokens] float (probabilities after the softmax step)
  std::uint64_t m = 0;       // [group] float: running maximum
  std::uint64_t l = 0;       // [group] float: running sum of exp(score - m)
  std::uint64_t alpha = 0;   // [group] float: rescale factor of the current tile
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
  layout.row_stride = align16(row_bytes) + 16;
  const std::uint64_t tiles_bytes = 2 * std::uint64_t{tile_tokens} * layout.row_stride;
  std::uint64_t at = 0;
  layout.k_tiles = at;
  at = align16(at + tiles_bytes);
  layout.v_tiles = at;
  at = align16(at + tiles_bytes);
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
  layout.total = at;
  return layout;
}

template <ElemType kType>
__host__ __device__ constexpr std::uint32_t element_bytes() {
  return kType == ElemType::kFp32 ? 4 : kType == ElemType::kFp8 ? 1 : 2;
}

// Copies one Vec from global to shared memory: asynchronously (cp.async) for
// 4-, 8- and 16-byte vectors, directly for narrower ones. Completion: commit
// the group (__pipeline_commit), wait for it (__pipeline_wait_prior), then
// __syncthreads before other threads read it.
template <typename Vec>
__device__ __forceinline__ void copy_to_shared(void* shared_dst, const void* global_src) {
  if constexpr (sizeof(Vec) >= 4) {
    __pipeline_memcpy_async(shared_dst, global_src, sizeof(Vec));
  } else {
    *reinterpret_cast<Vec*>(shared_dst) = *reinterpret_cast<const Vec*>(global_src);
  }
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

// The online softmax over one tile's scores of paged_decode_attention_kernel,
// a warp per query head: scores[g][t] becomes e^(score - m_new), and m, l
// and alpha (the factor acc is rescaled by) are updated for each head.
__device__ __forceinline__ void online_softmax_tile(float* scores, float* m, float* l, float* alpha,
                                                    std::uint32_t group, std::uint32_t tile_tokens,
                                                    std::uint32_t n) {
  const unsigned warps = blockDim.x / kWarp, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
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
}

// A split's result of paged_decode_attention_kernel: with one split, acc / l
// to out; otherwise (acc..., m, l) to its row of `partial`.
__device__ __forceinline__ void write_attention_split(const float* acc, const float* m,
                                                      const float* l, std::uint32_t group,
                                                      std::uint32_t head_dim, std::uint32_t q_heads,
                                                      std::uint32_t kv_head, std::uint32_t item,
                                                      std::uint32_t split, float* out_rows,
                                                      float* partial) {
  for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += blockDim.x) {
    const std::uint32_t g = i / head_dim, d = i % head_dim;
    const std::uint32_t q_head = kv_head * group + g;
    if (gridDim.z == 1) {
      out_rows[(std::uint64_t{item} * q_heads + q_head) * head_dim + d] =
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

// grid: x = item, y = kv_head, z = split; block: kAttentionThreads; dynamic
// shared memory: attention_layout(...).total bytes.
// Split z covers positions [z * chunk_tokens, min(length, (z + 1) * chunk_tokens)).
// With one split the result goes to params.out; otherwise to
//   partial[batch][splits][q_heads][head_dim + 2]  (acc..., m, l)
// for attention_merge_kernel.
// REQUIRES: sizeof(Vec) >= element_bytes<kType>() and sizeof(Vec) divides the
// row (the launcher's choice).
template <ElemType kType, typename Vec>
__global__ void paged_decode_attention_kernel(ArenaView arena, PagedBatchView batch,
                                              AttentionParams params, std::uint32_t chunk_tokens,
                                              std::uint32_t tile_tokens, float* partial) {
  constexpr std::uint32_t kPerVec = sizeof(Vec) / element_bytes<kType>();
  static_assert(kPerVec >= 1, "a vector holds at least one element");
  extern __shared__ __align__(16) unsigned char shared[];
  const std::uint32_t head_dim = arena.head_dim;
  const std::uint32_t group = params.group;
  const std::uint64_t row_bytes = arena.row_bytes();
  const AttentionLayout layout = attention_layout(row_bytes, group, head_dim, tile_tokens);
  const std::uint64_t stride = layout.row_stride;
  const std::uint64_t tile_bytes = std::uint64_t{tile_tokens} * stride;
  std::uint8_t* k_tiles = shared + layout.k_tiles;
  std::uint8_t* v_tiles = shared + layout.v_tiles;
  float* q = reinterpret_cast<float*>(shared + layout.q);
  float* acc = reinterpret_cast<float*>(shared + layout.acc);
  float* scores = reinterpret_cast<float*>(shared + layout.scores);
  float* m = reinterpret_cast<float*>(shared + layout.m);
  float* l = reinterpret_cast<float*>(shared + layout.l);
  float* alpha = reinterpret_cast<float*>(shared + layout.alpha);

  const unsigned threads = blockDim.x;
  const std::uint32_t item = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const std::uint32_t q_heads = arena.kv_heads * group;
  const std::uint32_t length = batch.lengths[item];
  const std::uint64_t begin = std::uint64_t{split} * chunk_tokens;
  const std::uint64_t end = begin + chunk_tokens < length ? begin + chunk_tokens : length;
  const std::uint32_t page_tokens = arena.page_tokens;
  const std::uint64_t token_bytes = arena.token_bytes();
  const std::uint64_t v_offset = std::uint64_t{arena.kv_heads} * row_bytes;
  const std::uint8_t* head_base = arena.data + std::uint64_t{params.layer} * arena.layer_bytes() +
                                  std::uint64_t{kv_head} * row_bytes;
  const std::uint32_t* pages = batch.indices + batch.indptr[item];
  const auto row_vecs = static_cast<std::uint32_t>(row_bytes / sizeof(Vec));
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));

  // This thread copies vectors (t, c) = (first_t, first_c), then steps by
  // `threads` vectors: no division per vector.
  const std::uint32_t first_t = threadIdx.x / row_vecs, first_c = threadIdx.x % row_vecs;
  const std::uint32_t step_t = threads / row_vecs, step_c = threads % row_vecs;
  // Starts the copy of tokens [tile, tile + n) into buffer `buffer`.
  auto load_tile = [&](std::uint64_t tile, std::uint32_t n, std::uint32_t buffer) {
    std::uint8_t* k_dst = k_tiles + buffer * tile_bytes;
    std::uint8_t* v_dst = v_tiles + buffer * tile_bytes;
    std::uint32_t t = first_t, c = first_c;
    while (t < n) {
      const auto position = static_cast<std::uint32_t>(tile + t);  // < length
      const std::uint64_t slot =
          std::uint64_t{pages[position / page_tokens]} * page_tokens + position % page_tokens;
      const std::uint8_t* token = head_base + slot * token_bytes + std::uint64_t{c} * sizeof(Vec);
      const std::uint64_t at = t * stride + std::uint64_t{c} * sizeof(Vec);
      copy_to_shared<Vec>(k_dst + at, token);
      copy_to_shared<Vec>(v_dst + at, token + v_offset);
      c += step_c;
      t += step_t;
      if (c >= row_vecs) {
        c -= row_vecs;
        ++t;
      }
    }
  };
  auto tile_size = [&](std::uint64_t tile) {
    return static_cast<std::uint32_t>(end - tile < tile_tokens ? end - tile : tile_tokens);
  };

  if (begin < end) load_tile(begin, tile_size(begin), 0);
  __pipeline_commit();
  for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += threads) {
    const std::uint32_t g = i / head_dim, d = i % head_dim;
    q[i] = params.q[(std::uint64_t{item} * q_heads + kv_head * group + g) * head_dim + d] * scale;
    acc[i] = 0.0f;
  }
  for (std::uint32_t g = threadIdx.x; g < group; g += threads) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }

  std::uint32_t buffer = 0;
  for (std::uint64_t tile = begin; tile < end; tile += tile_tokens) {
    const std::uint32_t n = tile_size(tile);
    const std::uint64_t next = tile + tile_tokens;
    if (next < end) load_tile(next, tile_size(next), buffer ^ 1u);
    __pipeline_commit();
    __pipeline_wait_prior(1);  // this tile's copies (all but the newest group) are done
    __syncthreads();           // ... for every thread; q, m, l, acc are set
    const std::uint8_t* k_tile = k_tiles + buffer * tile_bytes;
    const std::uint8_t* v_tile = v_tiles + buffer * tile_bytes;
    // Scores: a thread per (token, query head); the lanes of a warp read
    // consecutive rows (conflict-free with the padded stride) and the same q.
    for (std::uint32_t index = threadIdx.x; index < group * tile_tokens; index += threads) {
      const std::uint32_t g = index / tile_tokens, t = index % tile_tokens;
      if (t >= n) continue;
      const Vec* k_row = reinterpret_cast<const Vec*>(k_tile + t * stride);
      const float* q_row = q + std::uint64_t{g} * head_dim;
      float dot = 0.0f;
      for (std::uint32_t c = 0; c < row_vecs; ++c) {
        const Vec packed = k_row[c];
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(&packed);
#pragma unroll
        for (std::uint32_t j = 0; j < kPerVec; ++j) {
          dot += q_row[c * kPerVec + j] * content::load_element(bytes, kType, j);
        }
      }
      scores[g * tile_tokens + t] = dot;
    }
    __syncthreads();
    online_softmax_tile(scores, m, l, alpha, group, tile_tokens, n);
    __syncthreads();
    // P.V: a thread per (query head, dimension); a warp reads one V row's
    // consecutive elements at a time.
    for (std::uint32_t i = threadIdx.x; i < group * head_dim; i += threads) {
      const std::uint32_t g = i / head_dim, d = i % head_dim;
      const float* p = scores + g * tile_tokens;
      float a = acc[i] * alpha[g];
#pragma unroll 4
      for (std::uint32_t t = 0; t < n; ++t) {
        a += p[t] * content::load_element(v_tile + t * stride, kType, d);
      }
      acc[i] = a;
    }
    __syncthreads();  // the buffer and scores are free for the next tile
    buffer ^= 1u;
  }
  __pipeline_wait_prior(0);
  __syncthreads();  // m, l and acc are set even when this split is empty

  write_attention_split(acc, m, l, group, head_dim, q_heads, kv_head, item, split, params.out,
                        partial);
}

// grid: x = item, y = query head; block: kAttentionThreads over head_dim.
// Combines the splits' (acc, m, l): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M).
__global__ void attention_merge_kernel(const float* partial, std::uint32_t splits,
                                       std::uint32_t q_heads, std::uint32_t head_dim, float* out);

}  // namespace kvreplay::cuda
