#include "dataplane/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvreplay {

void cpu_append(const ArenaView& arena, const AppendParams& params) {
  const std::uint64_t token_bytes = arena.token_bytes();
  for (std::uint32_t layer = 0; layer < arena.layers; ++layer) {
    const std::uint8_t* source = params.staging + std::uint64_t{layer} * params.rows * token_bytes;
    for (std::uint32_t row = 0; row < params.rows; ++row, source += token_bytes) {
      const std::int64_t slot = params.slots[row];
      if (slot < 0) continue;
      std::memcpy(arena.data + arena.offset(layer, static_cast<std::uint64_t>(slot)), source,
                  token_bytes);
    }
  }
}

void cpu_copy_blocks(const ArenaView& arena, const CopyBlocksParams& params) {
  const std::uint64_t block_bytes = arena.layer_block_bytes();
  for (std::uint32_t i = 0; i < params.copies; ++i) {
    const std::uint64_t source = params.pairs[2 * std::uint64_t{i}];
    const std::uint64_t destination = params.pairs[2 * std::uint64_t{i} + 1];
    for (std::uint32_t layer = 0; layer < arena.layers; ++layer) {
      std::uint8_t* base = arena.data + std::uint64_t{layer} * arena.layer_bytes();
      std::memcpy(base + destination * block_bytes, base + source * block_bytes, block_bytes);
    }
  }
}

void cpu_gather(const ArenaView& arena, const PagedBatchView& batch, const GatherParams& params) {
  const std::uint64_t token_bytes = arena.token_bytes();
  const std::uint32_t page_tokens = arena.page_tokens;
  for (std::uint32_t layer = 0; layer < arena.layers; ++layer) {
    std::uint8_t* out = params.out + std::uint64_t{layer} * params.rows * token_bytes;
    for (std::uint32_t item = 0; item < batch.batch; ++item) {
      const std::uint32_t* pages = batch.indices + batch.indptr[item];
      std::uint8_t* row = out + batch.out_indptr[item] * token_bytes;
      for (std::uint32_t t = 0; t < batch.lengths[item]; ++t, row += token_bytes) {
        const std::uint32_t position = batch.starts[item] + t;
        const std::uint64_t slot =
            std::uint64_t{pages[position / page_tokens]} * page_tokens + position % page_tokens;
        std::memcpy(row, arena.data + arena.offset(layer, slot), token_bytes);
      }
    }
  }
}

void cpu_attention(const ArenaView& arena, const PagedBatchView& batch,
                   const AttentionParams& params) {
  const std::uint32_t head_dim = arena.head_dim;
  const std::uint32_t q_heads = arena.kv_heads * params.group;
  const std::uint64_t row_bytes = arena.row_bytes();
  const std::uint64_t v_offset = std::uint64_t{arena.kv_heads} * row_bytes;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> scores;
  for (std::uint32_t item = 0; item < batch.batch; ++item) {
    const std::uint32_t length = batch.lengths[item];
    const std::uint32_t* pages = batch.indices + batch.indptr[item];
    scores.resize(length);
    for (std::uint32_t q_head = 0; q_head < q_heads; ++q_head) {
      const std::uint32_t kv_head = q_head / params.group;
      const float* q = params.q + (std::uint64_t{item} * q_heads + q_head) * head_dim;
      float* out = params.out + (std::uint64_t{item} * q_heads + q_head) * head_dim;
      std::fill(out, out + head_dim, 0.0f);
      if (length == 0) continue;
      auto row_of = [&](std::uint32_t position) {
        const std::uint64_t slot =
            std::uint64_t{pages[position / arena.page_tokens]} * arena.page_tokens +
            position % arena.page_tokens;
        return arena.data + arena.offset(params.layer, slot) + kv_head * row_bytes;
      };
      float max_score = -std::numeric_limits<float>::infinity();
      for (std::uint32_t t = 0; t < length; ++t) {
        const std::uint8_t* k = row_of(t);
        float dot = 0.0f;
        for (std::uint32_t d = 0; d < head_dim; ++d) {
          dot += q[d] * content::load_element(k, arena.dtype, d);
        }
        scores[t] = dot * scale;
        max_score = std::max(max_score, scores[t]);
      }
      float sum = 0.0f;
      for (std::uint32_t t = 0; t < length; ++t) {
        scores[t] = std::exp(scores[t] - max_score);
        sum += scores[t];
      }
      for (std::uint32_t t = 0; t < length; ++t) {
        const std::uint8_t* v = row_of(t) + v_offset;
        const float weight = scores[t] / sum;
        for (std::uint32_t d = 0; d < head_dim; ++d) {
          out[d] += weight * content::load_element(v, arena.dtype, d);
        }
      }
    }
  }
}

}  // namespace kvreplay
