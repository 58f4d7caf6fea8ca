// One GPU of a deployment (SPEC 3.2): the share of a model's KV cache and
// weights a GPU holds under tensor parallelism (--tp) and pipeline parallelism
// (--pp), and the memory left for KV on it. Every figure here is per GPU.
//
//   KV heads per GPU   ceil(kv_heads / tp): split across ranks, replicated
//                      when heads < tp; an MLA latent (kv_heads 1) is
//                      replicated on every rank. As vLLM (QKVParallelLinear,
//                      ModelConfig.verify_with_parallel_config), num_attention_heads
//                      must divide by tp, and kv_heads by tp or tp by kv_heads.
//   layers per GPU     the fullest pipeline stage of vLLM's split
//                      (get_pp_indices, vllm/distributed/utils.py): layers / pp
//                      each, the remainder one more each on the stages before the
//                      last; pp at most the layers.
//   weights per GPU    weight_bytes / (tp * pp), rounded up. An approximation:
//                      embeddings, lm_head and experts are taken to split as evenly
//                      as the layers (vLLM's vocab-parallel embedding does split
//                      by tp; under pp the first stage holds the embedding and the
//                      last the lm_head, so those stages hold up to one of them
//                      more than this).
//   activation reserve kActivationReserveFixedBytes
//                        + max_batched_tokens * (4 * hidden + 3 * mlp_width / tp) * dtype_bytes
//                        + max_seqs * vocab * 4
//                      vLLM sizes its KV cache after profiling one forward pass of
//                      max_num_batched_tokens tokens and one sampler pass of
//                      max_num_seqs logits (gpu_model_runner.profile_run): the
//                      middle term is that pass's peak (the residual stream, its
//                      normed copy, the attention output and the gate/up/down
//                      activations of the widest MLP, split by tp), the last the
//                      float32 logits of max_num_seqs sequences; the fixed term
//                      covers what the profile sees beside them (CUDA graphs,
//                      NCCL and cuBLAS workspaces, allocator slack).
//   KV memory per GPU  floor(gpu_memory_utilization * memory_bytes) - weights per GPU
//                      - activation reserve
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/gpu.h"
#include "model/model_config.h"

namespace kvreplay {

inline constexpr std::uint64_t kActivationReserveFixedBytes = 1ull << 30;
inline constexpr double kDefaultGpuMemoryUtilization = 0.9;  // vLLM's default

// The KV geometry one GPU holds.
struct GpuShare {
  std::uint32_t first_layer = 0;  // of the fullest stage
  std::uint32_t layers = 0;       // of the fullest stage
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t kv_tensors = 2;  // 1: an MLA latent
};

// `attention_heads` 0 when unknown (geometry given by hand). Errors name the
// problem ("num_attention_heads 28 is not divisible by --tp 8"); the caller
// names the option.
Result<GpuShare, std::string> gpu_share(std::uint32_t layers, std::uint32_t attention_heads,
                                        std::uint32_t kv_heads, std::uint32_t head_dim,
                                        std::uint32_t kv_tensors, std::uint32_t tp,
                                        std::uint32_t pp);

// Stage `stage` of `pp`: its first layer and its count, as vLLM's get_pp_indices.
std::pair<std::uint32_t, std::uint32_t> pipeline_stage(std::uint32_t layers, std::uint32_t pp,
                                                       std::uint32_t stage);

std::uint64_t weights_bytes_per_gpu(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp);

std::uint64_t activation_reserve_bytes(const ModelSpec& model, std::uint32_t tp,
                                       std::uint32_t max_batched_tokens, std::uint32_t max_seqs);

// The memory of one GPU, as vLLM's worker divides it (determine_available_memory).
struct GpuMemory {
  std::uint64_t budget = 0;   // floor(utilization * memory_bytes)
  std::uint64_t weights = 0;  // per GPU
  std::uint64_t activation_reserve = 0;
  std::uint64_t kv = 0;  // budget - weights - activation_reserve
};

// Errors when nothing is left for KV, naming every figure.
Result<GpuMemory, std::string> gpu_memory(const GpuSpec& gpu, double utilization,
                                          std::uint64_t weights, std::uint64_t activation_reserve);

// TensorRT-LLM's rule (BaseKVCacheManager::calculateFreeMemBytes, kvCacheManager.cpp):
// the KV cache takes free_gpu_memory_fraction of the memory free once the
// weights are loaded and the profile run has peaked:
//   KV memory per GPU  floor(fraction * (memory_bytes - weights per GPU - activation reserve))
// (budget is then the GPU's memory).
Result<GpuMemory, std::string> trtllm_gpu_memory(const GpuSpec& gpu, double fraction,
                                                 std::uint64_t weights,
                                                 std::uint64_t activation_reserve);

}  // namespace kvreplay
