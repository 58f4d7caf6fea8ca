// The geometry of the hand-worked engine tests: one layer of one 4-value head
// in fp32 (16 bytes a token), 4-token pages, a pool of `pool_blocks` blocks.
// tiny_config: the same with another page size (the Simulator's tests and the
// whole-trace simulations of tests/app/).
#pragma once

#include <cstdint>

#include "model/run_config.h"

namespace kvreplay {

inline RunConfig micro_config(std::uint32_t pool_blocks, std::uint32_t max_seq_tokens = 256) {
  RunConfig config;
  config.kv.layers = 1;
  config.kv.kv_heads = 1;
  config.kv.head_dim = 4;
  config.kv.dtype = Dtype::kFp32;
  config.kv.page_tokens = 4;
  config.kv.pool_blocks = pool_blocks;
  config.kv.max_seq_tokens = max_seq_tokens;
  return config;
}

inline RunConfig tiny_config(std::uint32_t pool_blocks, std::uint32_t page_tokens = 4) {
  RunConfig config = micro_config(pool_blocks);
  config.kv.page_tokens = page_tokens;
  return config;
}

}  // namespace kvreplay
