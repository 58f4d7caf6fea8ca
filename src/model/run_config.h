// Resolving a run's configuration: a trace header's config object, overridden
// by command-line options; the model (a preset or a config.json) and, for
// simulate and plan, its deployment (model/deployment.h): the geometry and the
// pool are those of one GPU.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "io/input_error.h"
#include "model/capacity.h"
#include "model/kv_groups.h"
#include "model/model_config.h"

namespace kvreplay {

// Options given on the command line; unset ones fall back to the header.
struct ConfigOverrides {
  std::optional<std::string> model;
  std::optional<std::string> model_config;  // --model-config FILE: a config.json
  std::optional<std::uint32_t> layers;
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  std::optional<std::string> dtype;  // the KV cache's (--kv-cache-dtype)
  // simulate's and plan's --dtype: the model's, as vLLM's (half, float16,
  // bfloat16, float, float32, or fp16, bf16, fp32).
  std::optional<std::string> model_dtype;
  std::optional<std::uint32_t> page_tokens;
  std::optional<std::uint32_t> pool_blocks;
  std::optional<std::string> kv_memory;
  std::optional<std::uint32_t> max_seq_tokens;
  std::optional<std::string> alloc_order;
  // The deployment (simulate and plan): parallelism, and the GPU whose memory
  // sizes the pool when neither --pool-blocks nor --kv-memory is given.
  std::optional<std::uint32_t> tp;
  std::optional<std::uint32_t> pp;
  std::optional<std::uint32_t> dp_attention;  // --dp-attention (simulate)
  std::optional<std::uint32_t> ep;            // --ep (simulate)
  std::optional<std::string> gpu;
  std::optional<double> gpu_memory_utilization;
  // Set by the command, not by an option. `context_default`: max_seq_tokens
  // defaults to the model's context length (simulate, plan) rather than 32768
  // (replay, SPEC 2.1). `max_batched_tokens` and `max_seqs`: the batch limits
  // the activation reserve is sized for (model/deployment.h).
  bool context_default = false;
  // Set by simulate and plan: a model with sliding-window layers runs as vLLM's
  // KV-cache groups (RunConfig::kv_groups), which also size the pool's blocks.
  bool kv_groups = false;
  std::uint32_t max_batched_tokens = 0;
  std::uint32_t max_seqs = 0;
  // Set by simulate and plan under --speculative: the draft's decoder layers,
  // whose KV the pool holds beside the model's (one more layer a token).
  std::uint32_t draft_layers = 0;
  // Set for the trtllm engine: the GPU's KV memory by TensorRT-LLM's rule
  // (trtllm_gpu_memory), this fraction unless --gpu-memory-utilization gives one.
  std::optional<double> free_gpu_memory_fraction;
  // Whose startup rule sizes the KV memory from --gpu (model/capacity.h); set
  // by simulate and plan from the engine.
  CapacityEngine capacity_engine = CapacityEngine::kVllm;
};

// The largest pool a run accepts. The pool keeps a refcount, a filled count and
// a free-list slot per block up front (12 bytes), and the invariant checker a
// reference count and a free-list mark per block (5 bytes) when it runs, so
// 2^28 blocks is 4.25 GiB of bookkeeping; SPEC's bound (below 2^32-1) would be 68 GiB.
inline constexpr std::uint32_t kMaxSupportedPoolBlocks = 1u << 28;
inline constexpr std::uint64_t kPoolBytesPerBlock = 12;
inline constexpr std::uint64_t kCheckerBytesPerBlock = 5;

struct RunConfig {
  // One GPU's share (model/deployment.h): the layers of the fullest pipeline
  // stage, the KV heads of one tensor-parallel rank, and the pool of one GPU.
  // bytes_per_token is that of full attention in every layer of the stage: what a
  // replay writes per token, whatever the layers' windows.
  PagedKvConfig kv;
  AllocOrder alloc_order = AllocOrder::kLifo;
  std::string model;  // as named (a preset, an alias or the config's path); empty by hand
  // "preset:NAME" (NAME the preset an alias names) or "file:PATH"; empty when
  // the geometry was given by hand.
  std::string model_source;
  std::optional<ModelSpec> model_spec;     // the model as read, with model_source
  std::optional<std::uint64_t> kv_memory;  // bytes per GPU, when the pool was sized by memory
  std::uint32_t tp = 1;
  std::uint32_t pp = 1;
  // Attention data parallelism (--dp-attention N, SGLang's
  // --enable-dp-attention --dp N): the tp GPUs form N attention replicas of
  // tp / N GPUs, each with its own requests and KV pool, the MLP and experts
  // spread over all tp. kv is one replica's GPU geometry; pool_blocks is the N
  // replicas' pools together (one scheduler runs them as one, balanced).
  std::uint32_t dp_attention = 1;
  // Expert parallelism (--ep N): routed experts whole, E / N a GPU, tokens
  // dispatched to them and combined back by all-to-all.
  std::uint32_t ep = 1;
  std::string gpu;                                     // the GPU preset, empty when none was named
  std::optional<double> gpu_memory_utilization;        // with gpu
  std::optional<std::uint64_t> weights_bytes_per_gpu;  // with model_spec
  // --dtype: the dtype the model is served at when it was asked for (the
  // report's config.model_dtype; none otherwise, as before).
  std::optional<std::string> model_dtype;
  // When the pool was sized from the GPU's memory (model/deployment.h).
  std::optional<std::uint64_t> activation_reserve_bytes;
  // vLLM's KV-cache groups of the GPU's layers (model/kv_groups.h), when the
  // run keeps them (ConfigOverrides::kv_groups) and some layer slides; then
  // kv.block_layers is their group size. Empty: one full-attention group of
  // every layer, which is also what a replay keeps for any model.
  std::vector<KvCacheGroupSpec> kv_groups;
  // When the pool was sized from --gpu: the engine's startup figures
  // (model/capacity.h), which the report states with their breakdown.
  std::optional<CapacityFigures> capacity;

  nlohmann::json to_json() const;  // the report's resolved "config" object
};

// Header keys: model | layers, kv_heads, head_dim; dtype; page_tokens (default 16);
// pool_blocks | kv_memory (one required); max_seq_tokens (default 32768);
// alloc_order (default lifo). A command-line option replaces the header's value;
// --model or --model-config replaces the header's geometry, --pool-blocks its
// kv_memory and --kv-memory its pool_blocks. layers, kv_heads and head_dim,
// from the header or --layers/--kv-heads/--head-dim, are the model's (before
// --tp and --pp split them) and replace the model's: a model changed so is no
// longer that model (model, model_source and model_spec are cleared). The pool
// comes from --pool-blocks or --kv-memory, else from --gpu (its memory less the
// weights and the activation reserve, which needs a model), else from the
// header. Errors name `file`, `line` and the key ("config.page_tokens", or
// "--page-tokens" for an option); a config.json's own errors name its path and
// field.
InputResult<RunConfig> resolve_run_config(const nlohmann::json& header, const ConfigOverrides& cli,
                                          const std::string& file, std::uint64_t line);

}  // namespace kvreplay
