// KV capacity as each engine computes it at startup (SPEC 3.11): the memory
// breakdown of one GPU the way the engine logs it, and the KV tokens in its own
// words. `kvreplay capacity` prints it; simulate and plan size their pools from
// it (--kv-memory auto).
//
// vLLM V1 (vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory;
// vllm/utils/mem_utils.py, memory_profiling):
//   requested   ceil(gpu_memory_utilization * total), total as CUDA reports it
//               (torch.cuda.mem_get_info; an H100 80GB 79.19 GiB)
//   KV bytes    requested - weights - torch peak increase of the profile run
//               - non-torch increase - CUDA graph estimate (0.21 and later,
//               GPUModelRunner.profile_cudagraph_memory; 0 under --enforce-eager)
//   blocks      floor(floor(KV bytes / page bytes) / layers of a group)
//               (kv_cache_utils.py, get_num_blocks); page bytes =
//               block_size * kv_heads per rank * head_dim * 2 (K, V; 1 for MLA's
//               latent, replicated on every rank) * the KV dtype's bytes
//   the smallest rank decides: every worker takes the fewest blocks of any
//               (get_kv_cache_configs)
//   tokens      up to 0.20: blocks / groups * block_size ("GPU KV cache size: N
//               tokens"); 0.21 on: int(max concurrency * max_model_len)
//   concurrency blocks / sum over groups of the blocks one request of
//               max_model_len needs (get_max_concurrency_for_kv_cache_config;
//               a sliding group needs cdiv(min(window - 1 + max_num_batched_tokens,
//               max_model_len), block_size) + 1)
// SGLang (python/sglang/srt/model_executor/model_runner.py, profile_max_num_token,
// init_memory_pool; server_args.py, _handle_gpu_memory_settings):
//   pre         the memory free once CUDA and NCCL are up, before the weights
//   post        pre - weights
//   KV bytes    post - pre * (1 - mem_fraction_static)
//   tokens      floor(KV bytes / cell) rounded down to page_size, cell = kv_heads
//               per rank * head_dim * 2 * layers * dtype bytes ((kv_lora_rank +
//               qk_rope_head_dim) * layers * dtype bytes for MLA)
//   default mem_fraction_static: round((gpu_mem - reserved) / gpu_mem, 3), gpu_mem
//               nvidia-smi's MiB, reserved = 512 + 1.5 * max(chunked_prefill_size,
//               2048) + 2 * cuda_graph_max_bs + 1024 * tp * pp / 8, at least
//               10 GiB above 60 GiB (0.5.4 on); (9.5 + tp*pp/2) GiB and kin by GPU
//               bucket (0.4.6 - 0.5.3)
// TensorRT-LLM (tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator
// configure_kv_cache_capacity):
//   KV bytes    free_gpu_memory_fraction * (total - peak of the profile run),
//               peak = weights + activations + memory outside torch
//   tokens      floor(KV bytes / bytes per token), rounded up to whole blocks
//               of tokens_per_block (32) (kvCacheManager.cpp, calculateMaxNumBlocks)
//
// What no config.json gives (the profile run's activation peak, memory outside
// torch, the CUDA graph estimate) is a term whose constants were fitted to
// public startup logs (bench/capacity/), each named in `rules`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/result.h"
#include "model/model_config.h"

namespace kvreplay {

enum class CapacityEngine : std::uint8_t { kVllm, kSglang, kTrtllm };

struct CapacityRequest {
  CapacityEngine engine = CapacityEngine::kVllm;
  std::string version;  // "0.11", "0.21.0"; empty: the newest modelled
  const ModelSpec* model = nullptr;
  std::string gpu_name;           // for messages
  std::uint64_t total_bytes = 0;  // CUDA's total of one GPU
  std::uint64_t smi_mib = 0;      // nvidia-smi's memory.total (SGLang's gpu_mem); 0: from total
  // GPUs linked by NVLink (or Infinity Fabric): vLLM's custom all-reduce
  // takes its buffers; over PCIe it stays off.
  bool fast_link = false;
  std::uint32_t tp = 1, pp = 1;
  // Attention data parallelism (--dp-attention): tp / dp_attention GPUs hold
  // one attention replica's weights and KV heads (the figures are one GPU's,
  // of one replica); expert parallelism (--ep): whole experts a rank.
  std::uint32_t dp_attention = 1, ep = 1;
  std::uint32_t max_model_len = 0;  // 0: the model's context
  Dtype kv_dtype = Dtype::kBf16;
  std::uint32_t page_tokens = 0;   // 0: the engine's default (16, 1, 32)
  std::uint32_t max_num_seqs = 0;  // 0: the engine's default for the GPU
  std::uint32_t max_num_batched_tokens = 0;
  bool enforce_eager = false;
  std::optional<double> fraction;  // the engine's memory knob; nullopt: its default
  // vLLM refuses to start when one request of max_model_len does not fit
  // (check_enough_kv_cache_memory); false: report the figures anyway.
  bool refuse_short_context = true;
};

struct CapacityFigures {
  CapacityEngine engine = CapacityEngine::kVllm;
  std::string version;        // the rules applied, "0.21"
  std::string fraction_name;  // "gpu_memory_utilization"
  double fraction = 0;
  bool fraction_default = true;
  std::uint64_t total_bytes = 0;
  std::uint64_t budget_bytes = 0;  // what the fraction grants (engine's own sense)
  // Per GPU, of the rank that decides.
  std::uint64_t weights_bytes = 0;
  std::uint64_t activation_bytes = 0;
  std::uint64_t cuda_graph_bytes = 0;
  std::uint64_t non_torch_bytes = 0;
  std::uint64_t kv_bytes = 0;
  std::uint32_t deciding_stage = 0;
  std::uint32_t page_tokens = 0;
  std::uint64_t bytes_per_token = 0;  // one token in every layer of the deciding rank
  std::uint64_t blocks = 0;
  std::uint64_t tokens = 0;  // as the engine logs it
  std::uint32_t max_model_len = 0;
  double max_concurrency = 0;
  std::uint32_t max_num_seqs = 0;
  std::uint32_t max_num_batched_tokens = 0;
  std::vector<std::string> log_lines;  // the engine's own words
  std::vector<std::string> rules;      // each term and where it comes from
};

std::string_view to_string(CapacityEngine engine);
// "vllm", "sglang" or "trtllm"; nullopt for another name.
std::optional<CapacityEngine> parse_capacity_engine(std::string_view name);

struct GpuSpec;
// A GPU preset's figures into `request`: its name, CUDA's and nvidia-smi's
// totals, and whether its GPUs link by NVLink (anything but PCIe).
void set_capacity_gpu(CapacityRequest& request, const GpuSpec& gpu);

// The newest version modelled, and whether `version` parses ("0.11", "0.21.3").
std::string newest_capacity_version(CapacityEngine engine);
std::optional<std::string> capacity_version_error(CapacityEngine engine,
                                                  const std::string& version);

// The engine's figures. Errors are one line naming the shortfall in GiB
// ("the weights (70.12 GiB a GPU) and ... leave -3.20 GiB for the KV cache
// of ...") or the impossible setting.
Result<CapacityFigures, std::string> compute_capacity(const CapacityRequest& request);

}  // namespace kvreplay
