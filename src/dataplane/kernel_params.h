// The plain-data arguments of the four data-plane kernels, shared by the CPU
// reference kernels (cpu_kernels.h) and the CUDA kernels (cuda/kernels.cuh).
// Pointers are host memory for the CPU and device memory for CUDA; the comment
// beside each pointer gives its shape (FlashInfer style).
//
// Arena layout (SPEC 5), per layer [block][page_tokens][K|V][kv_heads][head_dim],
// layers one after another:
//   arena[layers][pool_blocks][page_tokens][kv_tensors][kv_heads][head_dim]   (dtype elements)
// kv_tensors is 2 (a K and a V), or 1 for MLA: one latent of kv_lora_rank +
// qk_rope_head_dim values per token and layer, stored as one "head" (kv_heads 1).
// A token row is one token of one layer, [kv_tensors][kv_heads][head_dim], token_bytes()
// long and contiguous. A slot is block * page_tokens + offset in the block (vLLM's
// slot mapping), so a token row lives at layer * layer_bytes() + slot * token_bytes().
// Dense buffers (the append staging, the gather output) are
//   dense[layers][rows][kv_tensors][kv_heads][head_dim]
// so one dense row and one arena slot hold the same token_bytes() bytes.
// C++17: CUDA sources include it.
#pragma once

#include <cstdint>

#include "dataplane/content.h"

namespace kvreplay {

struct ArenaView {
  std::uint8_t* data =
      nullptr;  // [layers][pool_blocks][page_tokens][kv_tensors][kv_heads][head_dim]
  std::uint32_t layers = 0;
  std::uint32_t pool_blocks = 0;
  std::uint32_t page_tokens = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t kv_tensors = 2;  // 2: K and V; 1: an MLA latent
  std::uint32_t elem_bytes = 0;
  ElemType dtype = ElemType::kFp32;

  KVREPLAY_HD std::uint64_t row_bytes() const { return std::uint64_t{head_dim} * elem_bytes; }
  KVREPLAY_HD std::uint64_t token_bytes() const {
    return std::uint64_t{kv_tensors} * kv_heads * row_bytes();
  }
  KVREPLAY_HD std::uint64_t layer_block_bytes() const { return token_bytes() * page_tokens; }
  KVREPLAY_HD std::uint64_t layer_bytes() const { return layer_block_bytes() * pool_blocks; }
  KVREPLAY_HD std::uint64_t bytes() const { return layer_bytes() * layers; }
  // Byte offset of the token row of `slot` in `layer`.
  KVREPLAY_HD std::uint64_t offset(std::uint32_t layer, std::uint64_t slot) const {
    return std::uint64_t{layer} * layer_bytes() + slot * token_bytes();
  }
};

// A batch of sequences' block tables, CSR like FlashInfer's paged_kv_t. Item i
// reads positions [starts[i], starts[i] + lengths[i]) counted from the start of
// its first page indices[indptr[i]].
struct PagedBatchView {
  const std::uint32_t* indptr = nullptr;      // [batch + 1]
  const std::uint32_t* indices = nullptr;     // [indptr[batch]] physical blocks, page order
  const std::uint32_t* starts = nullptr;      // [batch] first position (< page_tokens)
  const std::uint32_t* lengths = nullptr;     // [batch] tokens
  const std::uint64_t* out_indptr = nullptr;  // [batch + 1] dense rows of item i (gather)
  std::uint32_t batch = 0;
  std::uint32_t max_length = 0;  // max over lengths[i] (launch sizing)
};

// append: dense row r goes to `slots[r]` (skipped when negative).
struct AppendParams {
  const std::uint8_t* staging = nullptr;  // [layers][rows][kv_tensors][kv_heads][head_dim]
  const std::int64_t* slots = nullptr;    // [rows]
  std::uint32_t rows = 0;
};

// copy_blocks: every layer of block pairs[i][0] is copied to block pairs[i][1].
// REQUIRES: no destination is also a source or another pair's destination.
struct CopyBlocksParams {
  const std::uint32_t* pairs = nullptr;  // [copies][2] (source, destination)
  std::uint32_t copies = 0;
};

// gather: item i's tokens land in dense rows [out_indptr[i], out_indptr[i+1]).
struct GatherParams {
  std::uint8_t* out = nullptr;  // [layers][out_indptr[batch]][kv_tensors][kv_heads][head_dim]
  std::uint64_t rows = 0;       // out_indptr[batch]
};

// Paged decode attention of one layer: one query token per sequence, GQA with
// `group` query heads per KV head (query head h reads KV head h / group),
// scale 1/sqrt(head_dim), fp32 softmax and accumulation. Item i attends over
// positions [0, lengths[i]) (starts must be 0); an empty context gives zeros.
// REQUIRES: kv_tensors == 2 (MLA's absorbed attention over one latent is not
// this kernel; DataPlane refuses attention on an MLA arena).
struct AttentionParams {
  const float* q = nullptr;  // [batch][kv_heads * group][head_dim]
  float* out = nullptr;      // [batch][kv_heads * group][head_dim]
  std::uint32_t layer = 0;
  std::uint32_t group = 1;
};

}  // namespace kvreplay
