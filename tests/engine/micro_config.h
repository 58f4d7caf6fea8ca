// The geometry of the hand-worked engine tests: one layer of one 4-value head
// in fp32 (16 bytes a token), 4-token pages, a pool of `pool_blocks` blocks.
// tiny_config: the same with another page size (the Simulator's tests and the
// whole-trace simulations of tests/app/). hashed: a request of such a test.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/requests/request.h"
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

// A request named by the trace's hash ids, one per 4-token block (the micro
// geometry's page), arriving at `arrival`, with `n` samples.
inline Request hashed(std::string id, std::uint32_t prompt, std::uint32_t output,
                      std::vector<std::uint64_t> ids, double arrival, std::uint32_t n = 1) {
  Request r;
  r.id = std::move(id);
  r.prompt = prompt;
  r.output = output;
  r.hash_ids = std::move(ids);
  r.hash_block_tokens = 4;
  r.arrival = arrival;
  r.n = n;
  return r;
}

inline RunConfig tiny_config(std::uint32_t pool_blocks, std::uint32_t page_tokens = 4) {
  RunConfig config = micro_config(pool_blocks);
  config.kv.page_tokens = page_tokens;
  return config;
}

}  // namespace kvreplay
