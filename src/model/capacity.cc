#include "model/capacity.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/enum_names.h"
#include "model/deployment.h"
#include "model/gpu.h"
#include "model/kv_groups.h"
#include "model/rank_weights.h"

namespace kvreplay {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::uint64_t kMiB = 1ull << 20;

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

double gib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

// "1,234,567" as vLLM's f"{n:,}".
std::string thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A version "A.B" or "A.B.C" as A * 10000 + B * 100 + C; nullopt when it does not parse.
std::optional<std::uint32_t> version_number(const std::string& text) {
  std::uint32_t parts[3] = {0, 0, 0};
  std::size_t at = 0;
  int count = 0;
  const std::string body = !text.empty() && text[0] == 'v' ? text.substr(1) : text;
  while (count < 3) {
    const char* begin = body.data() + at;
    const char* end = body.data() + body.size();
    auto [next, ec] = std::from_chars(begin, end, parts[count]);
    if (ec != std::errc{} || parts[count] > 99) return std::nullopt;
    ++count;
    at = static_cast<std::size_t>(next - body.data());
    if (at == body.size()) break;
    if (body[at] != '.') {
      // A suffix after the patch ("0.21.0rc1", "1.1.0rc3") is the release it leads to.
      if (count == 3 || (count >= 2 && std::isalpha(static_cast<unsigned char>(body[at])))) break;
      return std::nullopt;
    }
    ++at;
  }
  if (count < 2) return std::nullopt;
  return parts[0] * 10000 + parts[1] * 100 + parts[2];
}

// The terms no config.json gives, fitted to the public startup logs of
// bench/capacity/ (scripts/capacity-fit prints the fit): see each use.
struct Fitted {
  // vLLM: the sampler's warm-up holds the logits of min(max_num_batched_tokens,
  // max_num_seqs) dummy requests over the padded vocabulary in several float32
  // copies (logits, probabilities, the sorted values and their int64 indices
  // for top-k/top-p): bytes a logit, from 0.17 on and before (0.17 dropped
  // copies: the same model's peak fell 60% between 0.16 and 0.17).
  double vllm_sampler_bytes_per_logit = 14.9;
  double vllm_sampler_bytes_per_logit_before_017 = 38.3;
  double vllm_sampler_bytes_per_logit_before_09 = 20.0;  // the first V1 releases
  // vLLM: a mixture of experts keeps its fused-MoE workspace from the forward
  // pass into the sampler's warm-up: this many times the tokens x experts a
  // token x the wider of 2 x expert width and hidden (fused_experts' cache13).
  double vllm_moe_workspace_copies = 1.8;
  // vLLM: the forward pass of max_num_batched_tokens tokens holds the MLP's
  // gate/up output, its activation and a few hidden-width tensors at once.
  double vllm_forward_hidden_copies = 4.0;
  // Memory outside torch that the profile run adds: cuBLAS and attention
  // workspaces at tp 1 (0.25 GiB from 0.17, 0.13 before); with tp > 1 over
  // NVLink the custom all-reduce's and NCCL's buffers (2.02 + 0.04 x tp GiB
  // from 0.17, 0.55 before); over PCIe (no custom all-reduce) 1.7 and 0.21;
  // pipeline stages alone 0.07.
  double vllm_non_torch_gib_tp1 = 0.25;
  double vllm_non_torch_gib_tp1_before_017 = 0.13;
  double vllm_non_torch_gib_nvlink = 2.02;
  double vllm_non_torch_gib_nvlink_per_rank = 0.04;
  double vllm_non_torch_gib_nvlink_before_017 = 0.55;
  double vllm_non_torch_gib_pcie = 1.7;
  double vllm_non_torch_gib_pcie_before_017 = 0.21;
  double vllm_non_torch_gib_pp = 0.07;
  // vLLM before 0.9: the CUDA context, charged to the budget.
  double vllm_cuda_context_gib = 0.45;
  // vLLM 0.21 on: profile_cudagraph_memory's estimate at the default capture
  // sizes: a + b x layers of the rank - c x log2(tp), and more with MoE
  // layers, as 0.19 estimated it (logged, not yet applied).
  double vllm_cuda_graph_gib = 0.376;
  double vllm_cuda_graph_gib_per_layer = 0.0167;
  double vllm_cuda_graph_gib_per_tp_doubling = 0.12;
  double vllm_cuda_graph_gib_moe = 0.35;
  // SGLang: the memory CUDA's context and NCCL take before the weights load.
  double sglang_context_gib_tp1 = 0.38;
  double sglang_context_gib_tp = 0.5;
  // SGLang: what "Load weight end ... mem usage" holds beyond the parameters'
  // bytes (the caching allocator's rounding and the buffers made at load).
  double sglang_load_gib_tp1 = 0.11;
  double sglang_load_gib_tp = 0.22;
  // TensorRT-LLM: what its profile run holds beside the weights (activations of
  // max_num_tokens, CUDA graphs, NCCL and the CUDA context).
  double trtllm_outside_gib_tp1 = 1.5;
  double trtllm_outside_gib_tp = 2.1;
  double trtllm_activation_bytes_per_token_hidden = 40.0;
};

constexpr Fitted kFitted;

constexpr EnumName<CapacityEngine> kCapacityEngineNames[] = {
    {CapacityEngine::kVllm, "vllm"},
    {CapacityEngine::kSglang, "sglang"},
    {CapacityEngine::kTrtllm, "trtllm"},
};
static_assert(enum_names_unique(kCapacityEngineNames));

// How messages name an engine.
std::string_view display_name(CapacityEngine engine) {
  return engine == CapacityEngine::kVllm     ? "vLLM"
         : engine == CapacityEngine::kSglang ? "SGLang"
                                             : "TensorRT-LLM";
}

// SGLang's --swa-full-tokens-ratio default (server_args.py).
constexpr double kSwaFullTokensRatio = 0.8;

// The padded vocabulary of one rank (VocabParallelEmbedding: a multiple of 64).
std::uint64_t padded_vocab(const ModelSpec& model) {
  return ceil_div(model.vocab_size, 64) * 64;
}

struct StageKv {
  std::uint32_t stage = 0;
  std::uint32_t layers = 0;
  std::uint64_t weights = 0;
  std::vector<KvCacheGroup> groups;
};

// The GPUs of one attention replica.
std::uint32_t attention_tp(const CapacityRequest& r) {
  return r.tp / std::max<std::uint32_t>(r.dp_attention, 1);
}

std::vector<StageKv> stages_of(const ModelSpec& model, const CapacityRequest& r) {
  std::vector<StageKv> out;
  for (std::uint32_t stage = 0; stage < r.pp; ++stage) {
    auto [first, count] = pipeline_stage(model.layers, r.pp, stage);
    out.push_back(StageKv{stage, count,
                          rank_weights(model, r.tp, r.pp, stage, r.ep, attention_tp(r)).total(),
                          model.kv_cache_groups(first, count)});
  }
  return out;
}

// Bytes of one token in one layer of a rank.
std::uint64_t layer_token_bytes(const ModelSpec& model, std::uint32_t tp, Dtype kv_dtype) {
  const std::uint64_t heads = model.mla ? 1 : ceil_div(model.kv_heads, tp);
  return (model.mla ? 1u : 2u) * heads * model.head_dim * dtype_bytes(kv_dtype);
}

std::string shortfall(const CapacityRequest& r, const std::string& what, std::uint64_t granted,
                      std::uint64_t taken) {
  return fmt::format(
      "{} leave {:.2f} GiB for the KV cache of a {} ({:.2f} GiB taken, {:.2f} GiB granted); "
      "give a larger --tp or --pp, a larger memory fraction, or a GPU with more memory",
      what, (static_cast<double>(granted) - static_cast<double>(taken)) / kGiB, r.gpu_name,
      gib(taken), gib(granted));
}

// --- vLLM ---------------------------------------------------------------------

// What vLLM's profile run and its neighbours take (activation, memory outside
// torch, the CUDA-graph estimate) into `f`; the figures the rules name.
struct VllmProfile {
  std::uint64_t tokens = 0, requests = 0;
  double per_logit = 0, non_torch = 0;
  bool graphs = false;
};

VllmProfile vllm_profile(const CapacityRequest& r, std::uint32_t version, CapacityFigures& f) {
  const ModelSpec& m = *r.model;
  // The profile run's torch peak (gpu_model_runner.py, profile_run): a forward
  // pass of max_num_batched_tokens tokens, then the sampler's warm-up of
  // min(tokens, max_num_seqs) requests; the larger of the two peaks.
  VllmProfile p;
  const std::uint64_t tokens = f.max_num_batched_tokens;
  const std::uint64_t requests = std::min<std::uint64_t>(tokens, f.max_num_seqs);
  const std::uint64_t element = dtype_bytes(m.dtype);
  const std::uint64_t mlp = ceil_div(m.mlp_width, r.tp);
  const double forward =
      static_cast<double>(tokens * element) *
      (3.0 * static_cast<double>(mlp) + kFitted.vllm_forward_hidden_copies * m.hidden_size);
  const double per_logit = version >= 1700  ? kFitted.vllm_sampler_bytes_per_logit
                           : version >= 900 ? kFitted.vllm_sampler_bytes_per_logit_before_017
                                            : kFitted.vllm_sampler_bytes_per_logit_before_09;
  // Seen with 16-bit experts from 0.17 on; quantized experts (fp8, mxfp4) run
  // other kernels and show none.
  const bool moe_workspace =
      m.routed_experts > 0 && m.shape.quant == WeightQuant::kNone && version >= 1700;
  const double workspace =
      moe_workspace ? kFitted.vllm_moe_workspace_copies * static_cast<double>(tokens * element) *
                          m.experts_per_token *
                          static_cast<double>(std::max<std::uint64_t>(
                              2 * ceil_div(m.shape.moe_intermediate, r.tp), m.hidden_size))
                    : 0.0;
  const double sampler = static_cast<double>(requests * padded_vocab(m)) * per_logit +
                         static_cast<double>(tokens * m.hidden_size * element) + workspace;
  f.activation_bytes = static_cast<std::uint64_t>(std::max(forward, sampler));
  const bool recent = version >= 1700;
  double non_torch = 0;
  if (r.tp > 1 && r.fast_link) {
    non_torch = recent ? kFitted.vllm_non_torch_gib_nvlink +
                             kFitted.vllm_non_torch_gib_nvlink_per_rank * r.tp
                       : kFitted.vllm_non_torch_gib_nvlink_before_017;
  } else if (r.tp > 1) {
    non_torch =
        recent ? kFitted.vllm_non_torch_gib_pcie : kFitted.vllm_non_torch_gib_pcie_before_017;
  } else if (r.pp > 1) {
    non_torch = kFitted.vllm_non_torch_gib_pp;
  } else {
    non_torch = recent ? kFitted.vllm_non_torch_gib_tp1 : kFitted.vllm_non_torch_gib_tp1_before_017;
  }
  // Before 0.9 the budget also paid for the CUDA context and whatever else
  // was outside torch (the absolute peak: gpu_worker.py of 0.8).
  if (version < 900) non_torch += kFitted.vllm_cuda_context_gib;
  f.non_torch_bytes = static_cast<std::uint64_t>(non_torch * kGiB);
  const bool graphs = version >= 2100 && !r.enforce_eager;
  if (graphs) {
    const std::uint32_t last_stage_layers = pipeline_stage(m.layers, r.pp, r.pp - 1).second;
    // The capture sizes (CompilationConfig): 1, 2, 4, then every 8 to 256,
    // then every 16 to min(512, 2 x max_num_seqs); the estimate grows with
    // their count (shared pool + one increment a further graph).
    const std::uint32_t largest = std::min<std::uint32_t>(512, 2 * f.max_num_seqs);
    std::uint32_t sizes = 0;
    for (std::uint32_t size : {1u, 2u, 4u}) sizes += size <= largest ? 1 : 0;
    for (std::uint32_t size = 8; size < 256; size += 8) sizes += size <= largest ? 1 : 0;
    for (std::uint32_t size = 256; size <= largest; size += 16) ++sizes;
    const double at_default = kFitted.vllm_cuda_graph_gib +
                              kFitted.vllm_cuda_graph_gib_per_layer * last_stage_layers -
                              kFitted.vllm_cuda_graph_gib_per_tp_doubling * std::log2(r.tp) +
                              (m.routed_experts > 0 ? kFitted.vllm_cuda_graph_gib_moe : 0.0);
    const double estimate = at_default * static_cast<double>(std::max(sizes, 2u) - 1) / 50.0;
    f.cuda_graph_bytes = static_cast<std::uint64_t>(std::max(0.05, estimate) * kGiB);
  }

  p.tokens = tokens;
  p.requests = requests;
  p.per_logit = per_logit;
  p.non_torch = non_torch;
  p.graphs = graphs;
  return p;
}

// vLLM's log lines and the rule of each term.
void vllm_words(const CapacityRequest& r, std::uint32_t version, const VllmProfile& p,
                CapacityFigures& f) {
  const ModelSpec& m = *r.model;
  const std::uint64_t tokens = p.tokens, requests = p.requests;
  const double per_logit = p.per_logit, non_torch = p.non_torch;
  const bool graphs = p.graphs;
  f.log_lines.push_back(fmt::format("Model loading took {:.4f} GiB", gib(f.weights_bytes)));
  if (graphs) {
    f.log_lines.push_back(
        fmt::format("Estimated CUDA graph memory: {:.2f} GiB total", gib(f.cuda_graph_bytes)));
  }
  f.log_lines.push_back(fmt::format("Available KV cache memory: {:.2f} GiB", gib(f.kv_bytes)));
  if (version >= 2100) {
    f.log_lines.push_back(fmt::format(
        "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2f}x",
        thousands(f.tokens), thousands(f.max_model_len), f.max_concurrency));
  } else {
    f.log_lines.push_back(fmt::format("GPU KV cache size: {} tokens", thousands(f.tokens)));
    f.log_lines.push_back(fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x",
                                      thousands(f.max_model_len), f.max_concurrency));
  }
  f.rules = {
      "budget: ceil(gpu_memory_utilization x CUDA's total) (vllm/v1/worker/gpu_worker.py, "
      "Worker.determine_available_memory; vllm/v1/worker/utils.py, request_memory)",
      "weights: the bytes the rank holds (model/rank_weights.h), as DeviceMemoryProfiler "
      "measures load_model (gpu_model_runner.py)",
      fmt::format("activation: the larger of a forward pass of {} tokens (MLP gate/up and its "
                  "activation, {} hidden-width tensors) and the sampler warm-up of {} requests "
                  "x {} padded vocabulary at {} bytes a logit (gpu_model_runner.py, profile_run, "
                  "_dummy_sampler_run; constants fitted to bench/capacity/)",
                  tokens, kFitted.vllm_forward_hidden_copies, requests, padded_vocab(m), per_logit),
      fmt::format("non-torch: {:.2f} GiB ({}; mem_utils.py, memory_profiling non_torch_increase; "
                  "fitted)",
                  non_torch,
                  r.tp > 1 ? (r.fast_link ? "tp > 1 over NVLink: custom all-reduce and NCCL"
                                          : "tp > 1 over PCIe")
                           : (r.pp > 1 ? "pipeline stages" : "tp 1")),
      graphs ? fmt::format("cuda graphs: {:.2f} GiB (0.21 on: gpu_model_runner.py, "
                           "profile_cudagraph_memory; by layers, tp and MoE, fitted)",
                           gib(f.cuda_graph_bytes))
             : std::string(r.enforce_eager ? "cuda graphs: none (--enforce-eager)"
                                           : "cuda graphs: not subtracted before 0.21 "
                                             "(captured after the KV cache is allocated)"),
      "blocks: floor(floor(KV bytes / page bytes) / layers of a group), the fewest of any "
      "rank (kv_cache_utils.py, get_num_blocks, get_kv_cache_configs)",
      version >= 2100 ? "tokens: int(max concurrency x max_model_len) (kv_cache_utils.py, "
                        "get_kv_cache_capacity, 0.21 on)"
                      : "tokens: blocks / groups x block_size (kv_cache_utils.py, "
                        "_report_kv_cache_config, 0.9 - 0.20)",
  };
}

Result<CapacityFigures, std::string> vllm_capacity(const CapacityRequest& r,
                                                   std::uint32_t version) {
  const ModelSpec& m = *r.model;
  CapacityFigures f;
  f.fraction_name = "gpu_memory_utilization";
  // 0.21 raised the default to 0.92 as it began charging CUDA graphs
  // (vllm/config/cache.py; vLLM PR 38284).
  f.fraction = r.fraction.value_or(version >= 2100 ? 0.92 : kDefaultGpuMemoryUtilization);
  f.fraction_default = !r.fraction.has_value();
  f.total_bytes = r.total_bytes;
  f.budget_bytes =
      static_cast<std::uint64_t>(std::ceil(f.fraction * static_cast<double>(r.total_bytes)));
  // 16 a block; MLA's backends on CUDA (FlashMLA) take 64.
  f.page_tokens = r.page_tokens != 0 ? r.page_tokens : (m.mla ? 64 : 16);
  // vllm serve's batch defaults (arg_utils.py, EngineArgs._set_default_args):
  // 8192 tokens and 1024 sequences on a GPU of 70 GiB or more that is no A100,
  // else 2048 and 256.
  const bool large =
      r.total_bytes >= 70ull * (1ull << 30) && r.gpu_name.find("a100") == std::string::npos;
  f.max_num_batched_tokens =
      r.max_num_batched_tokens != 0 ? r.max_num_batched_tokens : (large ? 8192u : 2048u);
  f.max_num_seqs = r.max_num_seqs != 0 ? r.max_num_seqs : (large ? 1024u : 256u);
  if (f.max_num_seqs > f.max_num_batched_tokens) {
    return Unexpected{fmt::format(
        "--max-num-seqs {} is more than --max-num-batched-tokens {} (vLLM's SchedulerConfig "
        "refuses it)",
        f.max_num_seqs, f.max_num_batched_tokens)};
  }
  f.max_model_len = r.max_model_len != 0 ? r.max_model_len : m.max_position_embeddings;

  const VllmProfile profile = vllm_profile(r, version, f);

  const std::uint64_t per_layer_page =
      layer_token_bytes(m, attention_tp(r), r.kv_dtype) * f.page_tokens;
  std::optional<std::uint64_t> fewest;
  for (const StageKv& stage : stages_of(m, r)) {
    const std::uint64_t taken =
        stage.weights + f.activation_bytes + f.non_torch_bytes + f.cuda_graph_bytes;
    if (taken >= f.budget_bytes) {
      return Unexpected{shortfall(
          r,
          fmt::format("the weights ({:.2f} GiB a GPU), the profile run ({:.2f} GiB), memory "
                      "outside torch ({:.2f} GiB) and CUDA graphs ({:.2f} GiB) under "
                      "--gpu-memory-utilization {}",
                      gib(stage.weights), gib(f.activation_bytes), gib(f.non_torch_bytes),
                      gib(f.cuda_graph_bytes), f.fraction),
          f.budget_bytes, taken)};
    }
    const std::uint64_t kv = f.budget_bytes - taken;
    // Hybrid models: every group padded to the largest (kv_groups.h).
    std::uint32_t group_layers = 0;
    for (const KvCacheGroup& g : stage.groups) group_layers = std::max(group_layers, g.layers);
    std::vector<LayerAttention> layers;
    for (const KvCacheGroup& g : stage.groups) {
      for (std::uint32_t i = 0; i < g.layers; ++i) {
        layers.push_back(LayerAttention{g.attention == AttentionKind::kSliding
                                            ? KvCacheGroupSpec::kSliding
                                            : KvCacheGroupSpec::kFull,
                                        g.window_tokens});
      }
    }
    const std::vector<KvCacheGroupSpec> vllm_groups = form_kv_cache_groups(layers);
    const std::uint32_t group_size = std::max<std::uint32_t>(1, kv_group_size(vllm_groups));
    const std::uint64_t blocks = kv / per_layer_page / group_size;
    if (!fewest || blocks < *fewest) {
      fewest = blocks;
      f.deciding_stage = stage.stage;
      f.weights_bytes = stage.weights;
      f.kv_bytes = kv;
      f.bytes_per_token = layer_token_bytes(m, attention_tp(r), r.kv_dtype) * stage.layers;
      // Blocks one request of max_model_len needs, over the groups.
      std::uint64_t per_request = 0;
      for (const KvCacheGroupSpec& g : vllm_groups) {
        const std::uint64_t need =
            g.attention == KvCacheGroupSpec::kSliding
                ? ceil_div(std::min<std::uint64_t>(
                               std::uint64_t{g.window_tokens} - 1 + f.max_num_batched_tokens,
                               f.max_model_len),
                           f.page_tokens) +
                      1
                : ceil_div(f.max_model_len, f.page_tokens);
        per_request += need;
      }
      f.blocks = blocks;
      f.max_concurrency = static_cast<double>(blocks) /
                          static_cast<double>(std::max<std::uint64_t>(1, per_request));
      const std::uint64_t groups = std::max<std::size_t>(1, vllm_groups.size());
      f.tokens = version >= 2100 ? static_cast<std::uint64_t>(f.max_concurrency * f.max_model_len)
                                 : blocks / groups * f.page_tokens;
    }
  }
  if (f.blocks == 0 || (r.refuse_short_context && f.max_concurrency < 1.0)) {
    const std::uint64_t need =
        ceil_div(f.max_model_len, f.page_tokens) * per_layer_page *
        std::max<std::uint64_t>(
            1, f.bytes_per_token /
                   std::max<std::uint64_t>(1, layer_token_bytes(m, attention_tp(r), r.kv_dtype)));
    return Unexpected{fmt::format(
        "one request of --max-model-len {} needs {:.2f} GiB of KV cache a GPU, more than the "
        "{:.2f} GiB left on a {} (vLLM refuses to start: check_enough_kv_cache_memory); give a "
        "smaller --max-model-len, a larger --tp, or more memory",
        f.max_model_len, gib(need), gib(f.kv_bytes), r.gpu_name)};
  }

  vllm_words(r, version, profile, f);
  return f;
}

// --- SGLang -------------------------------------------------------------------

// SGLang's default chunked_prefill_size and the memory its default
// mem_fraction_static holds back (server_args.py, _handle_gpu_memory_settings),
// by version; `gpu_mem` is nvidia-smi's MiB.
struct SglangReserve {
  std::uint64_t chunked = 0;
  double reserved_mib = 0;
};

SglangReserve sglang_reserve(const CapacityRequest& r, std::uint32_t version,
                             std::uint64_t gpu_mem) {
  // server_args.py, _handle_gpu_memory_settings: chunked_prefill_size and
  // cuda_graph_max_bs by GPU memory, then the reserve.
  std::uint64_t chunked = 0, graph_bs = 0;
  if (gpu_mem < 20 * 1024) {
    chunked = 2048, graph_bs = 8;
  } else if (gpu_mem < 35 * 1024) {
    chunked = 2048, graph_bs = r.tp < 4 ? 24 : 80;
  } else if (gpu_mem < 60 * 1024) {
    chunked = 4096, graph_bs = r.tp < 4 ? 32 : 160;
  } else if (gpu_mem < 160 * 1024) {
    chunked = 8192, graph_bs = r.tp < 4 ? 256 : 512;
  } else {
    chunked = 16384, graph_bs = 512;
  }
  if (r.max_num_batched_tokens != 0) chunked = r.max_num_batched_tokens;
  double reserved_mib = 0;
  const double parallel = static_cast<double>(r.tp) * r.pp;
  if (version >= 504) {
    reserved_mib = 512 + static_cast<double>(std::max<std::uint64_t>(chunked, 2048)) * 1.5 +
                   static_cast<double>(graph_bs) * 2 + parallel / 8 * 1024;
    if (gpu_mem > 60 * 1024) reserved_mib = std::max(reserved_mib, 10.0 * 1024);
  } else if (version >= 406) {
    if (gpu_mem < 35 * 1024) {
      reserved_mib = (2.8 + parallel / 10) * 1024;
    } else if (gpu_mem < 90 * 1024) {
      reserved_mib = (9.5 + parallel / 2) * 1024;
    } else if (gpu_mem < 160 * 1024) {
      reserved_mib = (12 + parallel / 2) * 1024;
    } else {
      reserved_mib = 32 * 1024;
    }
  } else {
    // Up to 0.4.5 a table by TP size: 0.88, 0.87 (tp 2+), 0.85 (4+), 0.81 (8+), 0.79 (16+).
    const double table = r.tp >= 16  ? 0.79
                         : r.tp >= 8 ? 0.81
                         : r.tp >= 4 ? 0.85
                         : r.tp >= 2 ? 0.87
                                     : 0.88;
    reserved_mib = static_cast<double>(gpu_mem) * (1.0 - table);
  }
  return SglangReserve{chunked, reserved_mib};
}

Result<CapacityFigures, std::string> sglang_capacity(const CapacityRequest& r,
                                                     std::uint32_t version) {
  const ModelSpec& m = *r.model;
  CapacityFigures f;
  f.fraction_name = "mem_fraction_static";
  f.total_bytes = r.total_bytes;
  f.page_tokens = r.page_tokens != 0 ? r.page_tokens : 1;
  f.max_model_len = r.max_model_len != 0 ? r.max_model_len : m.max_position_embeddings;
  // gpu_mem: nvidia-smi's memory.total in MiB (get_nvgpu_memory_capacity).
  const std::uint64_t gpu_mem = r.smi_mib != 0 ? r.smi_mib : r.total_bytes / kMiB;
  const auto [chunked, reserved_mib] = sglang_reserve(r, version, gpu_mem);
  f.max_num_batched_tokens = static_cast<std::uint32_t>(chunked);
  const double chosen = std::round((static_cast<double>(gpu_mem) - reserved_mib) /
                                   static_cast<double>(gpu_mem) * 1000.0) /
                        1000.0;
  f.fraction = r.fraction.value_or(chosen);
  f.fraction_default = !r.fraction.has_value();
  if (!(f.fraction > 0.0)) {
    return Unexpected{fmt::format(
        "SGLang's default mem_fraction_static comes to {:.3f} on a {} ({:.0f} MiB held back of "
        "{} MiB for chunked_prefill_size {}); give a smaller --max-num-batched-tokens or a "
        "--mem-fraction-static",
        chosen, r.gpu_name, reserved_mib, gpu_mem, chunked)};
  }

  const double context =
      (r.tp * r.pp > 1 ? kFitted.sglang_context_gib_tp : kFitted.sglang_context_gib_tp1) * kGiB;
  const double pre = static_cast<double>(r.total_bytes) - context;
  f.non_torch_bytes = static_cast<std::uint64_t>(context);
  // What (1 - mem_fraction_static) holds back of the memory free before the
  // weights: SGLang's room for activations and CUDA graphs.
  f.activation_bytes = static_cast<std::uint64_t>(pre * (1.0 - f.fraction));
  f.budget_bytes = static_cast<std::uint64_t>(pre * f.fraction);
  std::optional<std::uint64_t> fewest;
  std::uint64_t swa_tokens = 0;  // a hybrid model's sliding layers' tokens
  const auto load = static_cast<std::uint64_t>(
      (r.tp * r.pp > 1 ? kFitted.sglang_load_gib_tp : kFitted.sglang_load_gib_tp1) * kGiB);
  for (StageKv stage : stages_of(m, r)) {
    stage.weights += load;
    const double rest = pre - static_cast<double>(stage.weights) - pre * (1.0 - f.fraction);
    if (rest <= 0) {
      return Unexpected{shortfall(
          r,
          fmt::format("the weights ({:.2f} GiB a GPU) under --mem-fraction-static {} of the "
                      "{:.2f} GiB free before they load",
                      gib(stage.weights), f.fraction, pre / kGiB),
          f.budget_bytes, stage.weights)};
    }
    const std::uint64_t cell = layer_token_bytes(m, attention_tp(r), r.kv_dtype) * stage.layers;
    // int(rest GiB * 2^30) // cell, to the page.
    std::uint64_t tokens = static_cast<std::uint64_t>(rest) / cell;
    tokens = tokens / f.page_tokens * f.page_tokens;
    // A model of full and sliding layers gets SGLang's sliding-window pool
    // (model_runner.py, set_num_token_hybrid): the same bytes shared so that
    // a sliding layer holds swa_full_tokens_ratio (0.8) of a full layer's
    // tokens; max_total_num_tokens is the full layers'.
    std::uint32_t full = 0, sliding = 0;
    for (const KvCacheGroup& g : stage.groups) {
      (g.attention == AttentionKind::kSliding ? sliding : full) += g.layers;
    }
    const bool hybrid = full > 0 && sliding > 0;
    // A full layer's token and 0.8 of a sliding layer's: what one token of
    // the full pool costs.
    const double effective_layers =
        hybrid ? kSwaFullTokensRatio * sliding + full : static_cast<double>(stage.layers);
    if (hybrid) {
      tokens =
          static_cast<std::uint64_t>(static_cast<double>(tokens) * stage.layers / effective_layers);
    }
    if (!fewest || tokens < *fewest) {
      fewest = tokens;
      f.deciding_stage = stage.stage;
      f.weights_bytes = stage.weights;
      f.kv_bytes = static_cast<std::uint64_t>(rest);
      f.bytes_per_token = static_cast<std::uint64_t>(
          std::llround(static_cast<double>(layer_token_bytes(m, attention_tp(r), r.kv_dtype)) *
                       effective_layers));
      f.tokens = tokens;
      swa_tokens =
          hybrid ? static_cast<std::uint64_t>(static_cast<double>(tokens) * kSwaFullTokensRatio)
                 : 0;
    }
  }
  if (f.tokens == 0) {
    return Unexpected{
        fmt::format("no KV token fits on a {} (SGLang: \"Not enough memory. Please try to increase "
                    "--mem-fraction-static.\")",
                    r.gpu_name)};
  }
  f.blocks = f.tokens / f.page_tokens;
  f.max_concurrency = static_cast<double>(f.tokens) / f.max_model_len;
  const double avail_before = pre / kGiB;
  const double avail_after = avail_before - gib(f.weights_bytes);
  f.log_lines = {
      fmt::format("Load weight begin. avail mem={:.2f} GB", avail_before),
      fmt::format("Load weight end. avail mem={:.2f} GB, mem usage={:.2f} GB.", avail_after,
                  gib(f.weights_bytes)),
      swa_tokens > 0
          ? fmt::format("Use Sliding window memory pool. full_layer_tokens={}, swa_layer_tokens={}",
                        f.tokens, swa_tokens)
      : m.mla
          ? fmt::format("KV Cache is allocated. #tokens: {}, KV size: {:.2f} GB", f.tokens,
                        gib(f.tokens * f.bytes_per_token))
          : fmt::format("KV Cache is allocated. #tokens: {}, K size: {:.2f} GB, V size: {:.2f} GB",
                        f.tokens, gib(f.tokens * f.bytes_per_token / 2),
                        gib(f.tokens * f.bytes_per_token / 2)),
      fmt::format("max_total_num_tokens={}, chunked_prefill_size={}, context_len={}", f.tokens,
                  chunked, f.max_model_len),
  };
  f.rules = {
      fmt::format("mem_fraction_static: {} ({}; server_args.py, _handle_gpu_memory_settings: "
                  "gpu_mem {} MiB, reserved {:.0f} MiB{})",
                  f.fraction, f.fraction_default ? "SGLang's default" : "given", gpu_mem,
                  reserved_mib,
                  version >= 504   ? ", 0.5.4 on"
                  : version >= 406 ? ", the GPU-bucket rule of 0.4.6 - 0.5.3"
                                   : ", the TP-size table up to 0.4.5"),
      fmt::format("free before the weights: CUDA's total less {} GiB of CUDA context and "
                  "NCCL (model_runner.py, init_torch_distributed; fitted)",
                  std::round(context / kGiB * 100) / 100),
      fmt::format("weights: the bytes the rank holds (model/rank_weights.h) and {} GiB the load "
                  "leaves beside them (the 'Load weight end' mem usage; fitted)",
                  std::round(static_cast<double>(load) / kGiB * 100) / 100),
      "KV bytes: free after the weights - (1 - mem_fraction_static) x free before "
      "(model_runner.py, profile_max_num_token)",
      "tokens: KV bytes // cell size, down to page_size; the fewest of any rank "
      "(model_runner.py, init_memory_pool); with full and sliding layers, the full layers' "
      "tokens when a sliding layer holds 0.8 of them (set_num_token_hybrid)",
  };
  return f;
}

// --- TensorRT-LLM -------------------------------------------------------------

// The PyTorch backend's rule (0.20 on); blocks rounded up to whole ones up to
// 1.1 (KVCacheManager.calculate_max_num_blocks), down from 1.2.
Result<CapacityFigures, std::string> trtllm_capacity(const CapacityRequest& r,
                                                     std::uint32_t version) {
  const bool round_up = version < 10200;
  const ModelSpec& m = *r.model;
  CapacityFigures f;
  f.fraction_name = "free_gpu_memory_fraction";
  f.fraction = r.fraction.value_or(0.9);
  f.fraction_default = !r.fraction.has_value();
  f.total_bytes = r.total_bytes;
  f.page_tokens = r.page_tokens != 0 ? r.page_tokens : 32;
  f.max_model_len = r.max_model_len != 0 ? r.max_model_len : m.max_position_embeddings;
  f.max_num_batched_tokens = r.max_num_batched_tokens != 0 ? r.max_num_batched_tokens : 8192;
  f.max_num_seqs = r.max_num_seqs != 0 ? r.max_num_seqs : 2048;
  f.activation_bytes =
      static_cast<std::uint64_t>(static_cast<double>(f.max_num_batched_tokens) * m.hidden_size *
                                 kFitted.trtllm_activation_bytes_per_token_hidden);
  f.non_torch_bytes = static_cast<std::uint64_t>(
      (r.tp * r.pp > 1 ? kFitted.trtllm_outside_gib_tp : kFitted.trtllm_outside_gib_tp1) * kGiB);
  std::optional<std::uint64_t> fewest;
  for (const StageKv& stage : stages_of(m, r)) {
    const std::uint64_t peak = stage.weights + f.activation_bytes + f.non_torch_bytes;
    if (peak >= r.total_bytes) {
      return Unexpected{shortfall(
          r,
          fmt::format("the weights ({:.2f} GiB a GPU), the profile run's activations ({:.2f} "
                      "GiB) and memory outside torch ({:.2f} GiB)",
                      gib(stage.weights), gib(f.activation_bytes), gib(f.non_torch_bytes)),
          r.total_bytes, peak)};
    }
    const std::uint64_t kv =
        static_cast<std::uint64_t>(f.fraction * static_cast<double>(r.total_bytes - peak));
    const std::uint64_t per_token =
        layer_token_bytes(m, attention_tp(r), r.kv_dtype) * stage.layers;
    const std::uint64_t tokens =
        (round_up ? ceil_div(kv / per_token, f.page_tokens) : kv / per_token / f.page_tokens) *
        f.page_tokens;
    if (!fewest || tokens < *fewest) {
      fewest = tokens;
      f.deciding_stage = stage.stage;
      f.weights_bytes = stage.weights;
      // The budget the fraction divides: what is free at the profile's peak.
      f.budget_bytes = r.total_bytes - peak;
      f.kv_bytes = kv;
      f.bytes_per_token = per_token;
      f.tokens = tokens;
    }
  }
  if (f.tokens == 0) {
    return Unexpected{fmt::format(
        "no block of {} tokens fits the {:.2f} GiB of KV cache on a {} (TensorRT-LLM refuses to "
        "start); give a larger --free-gpu-memory-fraction or smaller --page-tokens",
        f.page_tokens, gib(f.kv_bytes), r.gpu_name)};
  }
  f.blocks = f.tokens / f.page_tokens;
  f.max_concurrency = static_cast<double>(f.tokens) / f.max_model_len;
  const double peak = gib(f.weights_bytes + f.activation_bytes + f.non_torch_bytes);
  f.log_lines = {
      fmt::format("Memory used after loading model weights (inside torch) in memory usage "
                  "profiling: {:.2f} GiB",
                  gib(f.weights_bytes)),
      fmt::format("Peak memory during memory usage profiling (torch + non-torch): {:.2f} GiB, "
                  "available KV cache memory when calculating max tokens: {:.2f} GiB, fraction "
                  "is set {}, kv size is {}. device total memory {:.2f} GiB",
                  peak, gib(f.kv_bytes), f.fraction, f.bytes_per_token, gib(r.total_bytes)),
      fmt::format("[MemUsageChange] Allocated {:.2f} GiB for max tokens in paged KV cache ({}).",
                  gib(f.tokens * f.bytes_per_token), f.tokens),
  };
  f.rules = {
      "KV bytes: free_gpu_memory_fraction x (CUDA's total - the profile run's peak) "
      "(tensorrt_llm/_torch/pyexecutor/_util.py, KvCacheCreator.configure_kv_cache_capacity)",
      "weights: the bytes the rank holds (model/rank_weights.h)",
      fmt::format("activation: max_num_tokens ({}) x hidden x {} bytes (the profile run's "
                  "torch increase; fitted)",
                  f.max_num_batched_tokens, kFitted.trtllm_activation_bytes_per_token_hidden),
      fmt::format("outside torch: {} GiB at tp 1, {} GiB at tp > 1 (CUDA context, NCCL, CUDA "
                  "graphs; fitted)",
                  kFitted.trtllm_outside_gib_tp1, kFitted.trtllm_outside_gib_tp),
      round_up ? "tokens: floor(KV bytes / bytes a token), up to whole blocks of "
                 "tokens_per_block (resource_manager.py, calculate_max_num_blocks, to 1.1)"
               : "tokens: floor(KV bytes / bytes a token), down to whole blocks of "
                 "tokens_per_block (resource_manager.py, calculate_max_num_blocks, 1.2 on)",
  };
  return f;
}

}  // namespace

std::string_view to_string(CapacityEngine engine) {
  return enum_name(kCapacityEngineNames, engine);
}

std::optional<CapacityEngine> parse_capacity_engine(std::string_view name) {
  return enum_parse(kCapacityEngineNames, name);
}

void set_capacity_gpu(CapacityRequest& request, const GpuSpec& gpu) {
  request.gpu_name = gpu.name;
  request.total_bytes = gpu.cuda_total_bytes;
  request.smi_mib = gpu.nvidia_smi_mib;
  request.fast_link = gpu.interconnect.find("PCIe") == std::string::npos;
}

std::string newest_capacity_version(CapacityEngine engine) {
  switch (engine) {
    case CapacityEngine::kVllm: return "0.21";
    case CapacityEngine::kSglang: return "0.5.4";
    case CapacityEngine::kTrtllm: return "1.2";
  }
  return "";
}

std::optional<std::string> capacity_version_error(CapacityEngine engine,
                                                  const std::string& version) {
  if (version.empty() || version_number(version)) return std::nullopt;
  return fmt::format("'{}' is not a version (A.B or A.B.C, e.g. {})", version,
                     newest_capacity_version(engine));
}

Result<CapacityFigures, std::string> compute_capacity(const CapacityRequest& request) {
  if (request.model == nullptr) return Unexpected{std::string("no model")};
  if (request.fraction && !(*request.fraction > 0.0 && *request.fraction <= 1.0)) {
    return Unexpected{fmt::format("the memory fraction {} is outside (0, 1]", *request.fraction)};
  }
  if (request.total_bytes == 0) return Unexpected{std::string("the GPU has no memory")};
  const ModelSpec& m = *request.model;
  if (request.dp_attention == 0 || request.tp % request.dp_attention != 0) {
    return Unexpected{
        fmt::format("--dp-attention {} does not divide --tp {}", request.dp_attention, request.tp)};
  }
  auto share = gpu_share(m.layers, m.attention_heads, m.kv_heads, m.head_dim, m.mla ? 1 : 2,
                         attention_tp(request), request.pp);
  if (!share) {
    // gpu_share speaks of vLLM; the same split rule holds in each engine.
    std::string problem = share.error();
    const std::string vllm = "(vLLM refuses it)";
    if (auto at = problem.find(vllm); at != std::string::npos) {
      problem.replace(at, vllm.size(),
                      fmt::format("({} refuses it)", display_name(request.engine)));
    }
    return Unexpected{problem};
  }
  // vLLM and SGLang refuse a context past the model's without an override
  // (VLLM_ALLOW_LONG_MAX_MODEL_LEN, SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN).
  if (request.engine != CapacityEngine::kTrtllm &&
      request.max_model_len > m.max_position_embeddings) {
    return Unexpected{fmt::format(
        "--max-model-len {} is past the model's max_position_embeddings {} ({} refuses it "
        "without an override)",
        request.max_model_len, m.max_position_embeddings, display_name(request.engine))};
  }

  const std::string version_text =
      request.version.empty() ? newest_capacity_version(request.engine) : request.version;
  const auto version = version_number(version_text);
  if (!version) return Unexpected{*capacity_version_error(request.engine, request.version)};
  // The versions whose rules are modelled (the logs of bench/capacity/ span them).
  struct Span {
    std::uint32_t lo, hi;
    const char* text;
  };
  const Span span = request.engine == CapacityEngine::kVllm     ? Span{700, 3199, "0.7 - 0.31"}
                    : request.engine == CapacityEngine::kSglang ? Span{300, 599, "0.3 - 0.5"}
                                                                : Span{2000, 10399, "0.20 - 1.3"};
  if (*version < span.lo || *version > span.hi) {
    return Unexpected{fmt::format("--engine-version {}: {}'s rules are modelled for {}",
                                  version_text, to_string(request.engine), span.text)};
  }
  Result<CapacityFigures, std::string> figures = Unexpected{std::string()};
  switch (request.engine) {
    case CapacityEngine::kVllm: figures = vllm_capacity(request, *version); break;
    case CapacityEngine::kSglang: figures = sglang_capacity(request, *version); break;
    case CapacityEngine::kTrtllm: figures = trtllm_capacity(request, *version); break;
  }
  if (figures) {
    figures.value().engine = request.engine;
    // The version whose rules applied, as given (the rules of the nearest
    // modelled one below it).
    figures.value().version = version_text;
  }
  return figures;
}

}  // namespace kvreplay
