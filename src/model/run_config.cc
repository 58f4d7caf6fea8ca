#include "model/run_config.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>

#include "core/memory_budget.h"
#include "model/capacity.h"
#include "model/deployment.h"
#include "model/gpu.h"
#include "model/presets.h"

namespace kvreplay {

namespace {

constexpr std::array<std::string_view, 10> kKeys{
    "model",       "layers",      "kv_heads",  "head_dim",       "dtype",
    "page_tokens", "pool_blocks", "kv_memory", "max_seq_tokens", "alloc_order"};

std::string known_models() {
  return model_preset_list();
}

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// Bookkeeping of a pool of `blocks` (pool and invariant checker), in GiB.
double gib(std::uint64_t blocks) {
  return static_cast<double>(blocks * (kPoolBytesPerBlock + kCheckerBytesPerBlock)) /
         static_cast<double>(1ull << 30);
}

// Where a setting came from, for the error that names it: the header's
// config.KEY (at `file`, `line`) or the command line's --KEY.
struct ConfigSite {
  const std::string& file;
  std::uint64_t line;

  Unexpected<InputError> fail(std::string_view key, bool from_cli, std::string problem) const {
    return Unexpected{InputError{
        from_cli ? "command line" : file, from_cli ? 0 : line,
        from_cli ? fmt::format("--{}", key) : fmt::format("config.{}", key), std::move(problem)}};
  }

  // A problem PagedKvConfig::validate() found: it names the key it starts with
  // ("page_tokens must be >= 1"), or the config as a whole for a derived figure
  // ("bytes_per_token overflows 64 bits").
  Unexpected<InputError> invalid(const std::string& problem) const {
    std::string key = problem.substr(0, problem.find(' '));
    for (std::string_view candidate : kKeys) {
      if (candidate == key) return fail(key, false, problem);
    }
    return Unexpected{InputError{file, line, "config", problem}};
  }
};

// The header's settings, each checked for its type and range.
struct HeaderSettings {
  std::optional<std::string> model;
  std::optional<std::uint32_t> layers;
  std::optional<std::uint32_t> kv_heads;
  std::optional<std::uint32_t> head_dim;
  std::optional<std::string> dtype;
  std::optional<std::uint32_t> page_tokens;
  std::optional<std::uint32_t> pool_blocks;
  std::optional<std::uint32_t> max_seq;
  std::optional<std::string> alloc_order;
  std::optional<std::string> kv_memory;
};

InputResult<HeaderSettings> read_header(const nlohmann::json& header, const ConfigSite& site) {
  for (const auto& [key, value] : header.items()) {
    bool known = false;
    for (std::string_view candidate : kKeys) known = known || candidate == key;
    if (!known) {
      return site.fail(key, false,
                       "unknown key (expected model, layers, kv_heads, head_dim, dtype, "
                       "page_tokens, pool_blocks, kv_memory, max_seq_tokens, alloc_order)");
    }
  }
  // An integer from the header, checked to lie in [1, max].
  auto header_uint = [&](std::string_view key,
                         std::uint64_t max) -> InputResult<std::optional<std::uint32_t>> {
    auto it = header.find(key);
    if (it == header.end()) return std::optional<std::uint32_t>{};
    if (!it->is_number_integer())
      return site.fail(key, false, fmt::format("expected an integer, got {}", it->dump()));
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() == 0 : it->get<std::int64_t>() < 1) {
      return site.fail(key, false, fmt::format("{} must be >= 1", it->dump()));
    }
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > max) {
      return site.fail(key, false, fmt::format("{} is too large (at most {})", it->dump(), max));
    }
    return std::optional<std::uint32_t>{static_cast<std::uint32_t>(it->get<std::uint64_t>())};
  };
  auto header_string = [&](std::string_view key) -> InputResult<std::optional<std::string>> {
    auto it = header.find(key);
    if (it == header.end()) return std::optional<std::string>{};
    if (!it->is_string())
      return site.fail(key, false, fmt::format("expected a string, got {}", it->dump()));
    return std::optional<std::string>{it->get<std::string>()};
  };
#define KVREPLAY_TRY_SET(target, expr)              \
  do {                                              \
    auto result = (expr);                           \
    if (!result) return Unexpected{result.error()}; \
    (target) = std::move(result).value();           \
  } while (false)

  constexpr std::uint64_t kU32 = 0xFFFFFFFFull;
  HeaderSettings h;
  KVREPLAY_TRY_SET(h.model, header_string("model"));
  KVREPLAY_TRY_SET(h.layers, header_uint("layers", kU32));
  KVREPLAY_TRY_SET(h.kv_heads, header_uint("kv_heads", kU32));
  KVREPLAY_TRY_SET(h.head_dim, header_uint("head_dim", kU32));
  KVREPLAY_TRY_SET(h.dtype, header_string("dtype"));
  KVREPLAY_TRY_SET(h.page_tokens, header_uint("page_tokens", kU32));
  KVREPLAY_TRY_SET(h.pool_blocks, header_uint("pool_blocks", kInvalidBlock - 1));
  KVREPLAY_TRY_SET(h.max_seq, header_uint("max_seq_tokens", kU32));
  KVREPLAY_TRY_SET(h.alloc_order, header_string("alloc_order"));
#undef KVREPLAY_TRY_SET
  if (auto it = header.find("kv_memory"); it != header.end()) {
    if (it->is_number_unsigned()) {
      h.kv_memory = std::to_string(it->get<std::uint64_t>());
    } else if (it->is_string()) {
      h.kv_memory = it->get<std::string>();
    } else {
      return site.fail(
          "kv_memory", false,
          fmt::format("expected a size such as \"80GiB\" or a byte count, got {}", it->dump()));
    }
  }
  if (h.pool_blocks && h.kv_memory) {
    return site.fail("pool_blocks", false, "give one of pool_blocks or kv_memory, not both");
  }
  return h;
}

// The model's geometry, whole (before one GPU's share is taken).
struct ModelGeometry {
  std::uint32_t layers = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t attention_heads = 0;
  std::uint32_t kv_tensors = 2;
};

// --dtype (simulate, plan): the model served at another dtype, as vLLM's
// --dtype does. An unquantized checkpoint's weights take its size (the
// linear layers, embeddings and norms alike), and a KV cache that followed
// the weights follows it; a quantized checkpoint keeps its stored weights,
// so it is refused rather than resized.
InputStatus set_model_dtype(const std::string& name, const ConfigSite& site, RunConfig& run) {
  static const std::pair<std::string_view, Dtype> kNames[] = {
      {"half", Dtype::kFp16},     {"float16", Dtype::kFp16}, {"fp16", Dtype::kFp16},
      {"bfloat16", Dtype::kBf16}, {"bf16", Dtype::kBf16},    {"float", Dtype::kFp32},
      {"float32", Dtype::kFp32},  {"fp32", Dtype::kFp32}};
  std::optional<Dtype> dtype;
  for (const auto& [spelling, value] : kNames) {
    if (name == spelling) dtype = value;
  }
  if (!dtype) {
    const bool kv = name.rfind("fp8", 0) == 0;
    return site.fail(
        "dtype", true,
        fmt::format("'{}' is not a model dtype (auto, half, float16, bfloat16, float, float32, as "
                    "vLLM's --dtype){}",
                    name, kv ? fmt::format("; the KV cache's is --kv-cache-dtype {}", name) : ""));
  }
  if (!run.model_spec) {
    return site.fail("dtype", true, "the model's dtype needs a model (--model or --model-config)");
  }
  ModelSpec& spec = *run.model_spec;
  if (spec.shape.quant != WeightQuant::kNone) {
    return site.fail("dtype", true,
                     fmt::format("{}'s checkpoint is quantized ({}): its weights stay as stored",
                                 run.model, to_string(spec.shape.quant)));
  }
  const Dtype old = spec.dtype;
  run.model_dtype = std::string(to_string(*dtype));
  if (old == *dtype) return {};
  auto scaled = [&](std::uint64_t bytes) { return bytes / dtype_bytes(old) * dtype_bytes(*dtype); };
  spec.weight_bytes = scaled(spec.weight_bytes);
  spec.routed_expert_bytes = scaled(spec.routed_expert_bytes);
  spec.input_embedding_bytes = scaled(spec.input_embedding_bytes);
  if (spec.kv_dtype == old) spec.kv_dtype = *dtype;
  spec.dtype = *dtype;
  run.model_dtype = std::string(to_string(*dtype));
  return {};
}

// The model: --model-config or --model replace the header's model and
// geometry; dimensions given explicitly win.
InputResult<ModelGeometry> resolve_model(const HeaderSettings& h, const ConfigOverrides& cli,
                                         const ConfigSite& site, RunConfig& run) {
  if (cli.model && cli.model_config)
    return site.fail("model-config", true, "give one of --model or --model-config, not both");
  const bool model_from_cli = cli.model.has_value() || cli.model_config.has_value();
  std::optional<std::string> model =
      cli.model ? cli.model : (model_from_cli ? std::nullopt : h.model);
  if (cli.model_config) {
    auto spec = load_model_config(*cli.model_config);
    if (!spec) return Unexpected{spec.error()};
    run.model = *cli.model_config;
    run.model_source = "file:" + *cli.model_config;
    run.model_spec = std::move(spec).value();
  } else if (model) {
    const ModelPreset* preset = find_model_preset(*model);
    if (!preset)
      return site.fail("model", cli.model.has_value(),
                       fmt::format("unknown model '{}' (known: {})", *model, known_models()));
    run.model = *model;
    run.model_source = "preset:" + preset->name;
    run.model_spec = preset->spec;
  }
  if (cli.model_dtype) {
    if (InputStatus set = set_model_dtype(*cli.model_dtype, site, run); !set) {
      return Unexpected{set.error()};
    }
  }
  // The model's geometry; dimensions given explicitly win.
  ModelGeometry g;
  if (run.model_spec) {
    g.layers = run.model_spec->layers;
    g.kv_heads = run.model_spec->kv_heads;
    g.head_dim = run.model_spec->head_dim;
    g.attention_heads = run.model_spec->attention_heads;
    g.kv_tensors = run.model_spec->mla ? 1 : 2;
  }
  if (!model_from_cli) {
    if (h.layers) g.layers = *h.layers;
    if (h.kv_heads) g.kv_heads = *h.kv_heads;
    if (h.head_dim) g.head_dim = *h.head_dim;
  }
  if (cli.layers) g.layers = *cli.layers;
  if (cli.kv_heads) g.kv_heads = *cli.kv_heads;
  if (cli.head_dim) g.head_dim = *cli.head_dim;
  if (run.model_spec &&
      (g.layers != run.model_spec->layers || g.kv_heads != run.model_spec->kv_heads ||
       g.head_dim != run.model_spec->head_dim)) {
    // A model with a dimension changed by hand is no longer that model.
    run.model.clear();
    run.model_source.clear();
    run.model_spec.reset();
    g.attention_heads = 0;
    g.kv_tensors = 2;
  }
  for (auto [key, value] : {std::pair{"layers", g.layers}, std::pair{"kv_heads", g.kv_heads},
                            std::pair{"head_dim", g.head_dim}}) {
    if (value == 0) {
      return site.fail(key, false,
                       fmt::format("missing: give \"model\" ({}) or layers, kv_heads and head_dim",
                                   known_models()));
    }
  }
  return g;
}

// One GPU's share of the model under --tp and --pp: its KV geometry, vLLM's
// KV-cache groups of its layers, and its weights.
InputStatus take_gpu_share(const ModelGeometry& g, const ConfigOverrides& cli,
                           const ConfigSite& site, RunConfig& run) {
  run.tp = cli.tp.value_or(1);
  run.pp = cli.pp.value_or(1);
  run.dp_attention = cli.dp_attention.value_or(1);
  run.ep = cli.ep.value_or(1);
  if (run.dp_attention > 1 && run.tp % run.dp_attention != 0) {
    // SGLang's ServerArgs._handle_data_parallelism asserts tp_size % dp_size == 0.
    return site.fail("dp-attention", true,
                     fmt::format("{} attention replicas do not divide --tp {}: each replica is "
                                 "tp / N GPUs (give an N that divides --tp)",
                                 run.dp_attention, run.tp));
  }
  if (run.ep > 1) {
    if (run.tp % run.ep != 0) {
      return site.fail("ep", true,
                       fmt::format("--ep {} does not divide --tp {}: the experts spread over the "
                                   "deployment's GPUs",
                                   run.ep, run.tp));
    }
    if (!run.model_spec || run.model_spec->routed_experts == 0) {
      return site.fail("ep", true, "expert parallelism needs a model with routed experts");
    }
  }
  // Under attention data parallelism one attention replica's GPUs split the KV heads.
  auto share = gpu_share(g.layers, g.attention_heads, g.kv_heads, g.head_dim, g.kv_tensors,
                         run.tp / run.dp_attention, run.pp);
  if (!share) {
    return site.fail(share.error().find("--pp") != std::string::npos ? "pp" : "tp", true,
                     share.error());
  }
  // A speculative draft's layers keep their KV in the same pool (vLLM
  // allocates the drafter's attention layers with the model's).
  run.kv.layers = share.value().layers + cli.draft_layers;
  run.kv.kv_heads = share.value().kv_heads;
  run.kv.head_dim = share.value().head_dim;
  run.kv.kv_tensors = share.value().kv_tensors;
  if (run.model_spec) {
    if (cli.kv_groups && run.model_spec->sliding_window != 0) {
      // vLLM's KV-cache groups of this GPU's layers (kv_cache_utils.py,
      // get_kv_cache_groups): one pool block is a page of group_size layers.
      std::vector<LayerAttention> stage;
      for (std::uint32_t i = 0; i < share.value().layers; ++i) {
        const bool sliding = run.model_spec->layer_attention[share.value().first_layer + i] ==
                             AttentionKind::kSliding;
        stage.push_back(
            sliding ? LayerAttention{KvCacheGroupSpec::kSliding, run.model_spec->sliding_window}
                    : LayerAttention{KvCacheGroupSpec::kFull, 0});
      }
      run.kv_groups = form_kv_cache_groups(stage);
      const bool hybrid =
          run.kv_groups.size() > 1 || run.kv_groups[0].attention == KvCacheGroupSpec::kSliding;
      if (hybrid && cli.draft_layers > 0) {
        return site.fail("speculative", true,
                         "a draft's KV beside sliding-window layers' groups is not modelled: "
                         "give --speculative ngram:K, or a model with full attention only");
      }
      if (hybrid) {
        run.kv.block_layers = kv_group_size(run.kv_groups);
      } else {
        run.kv_groups.clear();
      }
    }
    run.weights_bytes_per_gpu = weights_bytes_per_gpu(*run.model_spec, run.tp, run.pp);
    run.kv.dtype = run.model_spec->kv_dtype;
  }
  return {};
}

// The KV cache's dtype, page size, longest sequence and allocation order: the
// command line's, else the header's, else the defaults.
InputStatus resolve_kv_options(const HeaderSettings& h, const ConfigOverrides& cli,
                               const ConfigSite& site, RunConfig& run) {
  std::optional<std::string> dtype = cli.dtype ? cli.dtype : h.dtype;
  if (dtype) {
    auto parsed = parse_dtype(*dtype);
    if (!parsed)
      return site.fail(cli.dtype ? "kv-cache-dtype" : "dtype", cli.dtype.has_value(),
                       fmt::format("unknown dtype '{}' (expected fp32, fp16, bf16, fp8)", *dtype));
    run.kv.dtype = *parsed;
  }
  run.kv.page_tokens = cli.page_tokens ? *cli.page_tokens : h.page_tokens.value_or(16);
  // simulate and plan serve up to the model's context length unless told otherwise.
  const std::uint32_t max_seq_default =
      cli.context_default && run.model_spec ? run.model_spec->max_position_embeddings : 32768;
  run.kv.max_seq_tokens =
      cli.max_seq_tokens ? *cli.max_seq_tokens : h.max_seq.value_or(max_seq_default);
  std::optional<std::string> order = cli.alloc_order ? cli.alloc_order : h.alloc_order;
  if (order) {
    auto parsed = parse_alloc_order(*order);
    if (!parsed)
      return site.fail(
          "alloc_order", cli.alloc_order.has_value(),
          fmt::format("unknown order '{}' (expected lifo, fifo, lowest, vllm)", *order));
    run.alloc_order = *parsed;
  }
  return {};
}

// The GPU: what a pool not sized by hand is sized from (null without --gpu).
InputResult<const GpuSpec*> resolve_gpu(const ConfigOverrides& cli, const ConfigSite& site,
                                        RunConfig& run) {
  const GpuSpec* gpu = nullptr;
  if (cli.gpu) {
    gpu = find_gpu_preset(*cli.gpu);
    if (gpu == nullptr) {
      return site.fail("gpu", true,
                       fmt::format("unknown GPU '{}' (known: {})", *cli.gpu, gpu_preset_list()));
    }
    run.gpu = gpu->name;
    run.gpu_memory_utilization = cli.gpu_memory_utilization.value_or(kDefaultGpuMemoryUtilization);
  } else if (cli.gpu_memory_utilization) {
    return site.fail("gpu-memory-utilization", true,
                     "needs --gpu (the GPU whose memory it divides)");
  }
  if (cli.gpu_memory_utilization &&
      !(*cli.gpu_memory_utilization > 0.0 && *cli.gpu_memory_utilization <= 1.0)) {
    return site.fail("gpu-memory-utilization", true,
                     fmt::format("{} is not in (0, 1]", *cli.gpu_memory_utilization));
  }
  return gpu;
}

// Pool size: a CLI option replaces both header keys; --gpu sizes it otherwise.
// Then the pool is checked against kvreplay's ceiling and this machine.
InputStatus size_pool(const HeaderSettings& h, const ConfigOverrides& cli, const ConfigSite& site,
                      const GpuSpec* gpu, RunConfig& run) {
  std::optional<std::uint32_t> pool_blocks;
  std::optional<std::string> kv_memory;
  // --kv-memory auto: what the engine would allocate on --gpu (the default
  // when a GPU is given).
  const bool kv_auto = cli.kv_memory && *cli.kv_memory == "auto";
  if (kv_auto && gpu == nullptr) {
    return site.fail("kv-memory", true,
                     "auto sizes the KV cache as the engine would on a GPU: give --gpu");
  }
  bool pool_from_cli = cli.pool_blocks || (cli.kv_memory && !kv_auto);
  if (cli.pool_blocks && cli.kv_memory)
    return site.fail("pool-blocks", true, "give one of --pool-blocks or --kv-memory, not both");
  if (pool_from_cli) {
    pool_blocks = cli.pool_blocks;
    kv_memory = cli.kv_memory;
  } else if (gpu != nullptr) {
    if (!run.model_spec) {
      return site.fail(
          "gpu", true,
          "sizing the pool from the GPU's memory needs the model's weights: give --model "
          "or --model-config (a geometry given by hand has none), or --kv-memory");
    }
    // What the engine would allocate at startup (model/capacity.h).
    CapacityRequest request;
    request.engine = cli.capacity_engine;
    request.model = &*run.model_spec;
    set_capacity_gpu(request, *gpu);
    request.tp = run.tp;
    request.pp = run.pp;
    request.dp_attention = run.dp_attention;
    request.ep = run.ep;
    request.max_model_len = run.kv.max_seq_tokens;
    request.kv_dtype = run.kv.dtype;
    request.page_tokens = run.kv.page_tokens;
    request.max_num_seqs = cli.max_seqs;
    request.max_num_batched_tokens = cli.max_batched_tokens;
    request.fraction = cli.gpu_memory_utilization;
    if (!request.fraction && request.engine == CapacityEngine::kTrtllm) {
      request.fraction = cli.free_gpu_memory_fraction;
    }
    // A pool too small for one request of the longest context is what the
    // simulation reports (requests it cannot hold), not a refusal here.
    request.refuse_short_context = false;
    auto figures = compute_capacity(request);
    if (!figures) {
      return site.fail(
          "gpu", true,
          fmt::format("{} at --tp {} --pp {}: {}", run.model, run.tp, run.pp, figures.error()));
    }
    const CapacityFigures& f = figures.value();
    run.kv.pool_blocks = 1;  // placeholder so the geometry validates
    if (auto problem = run.kv.validate()) return site.invalid(*problem);
    auto blocks = pool_blocks_for_memory(run.kv, f.kv_bytes);
    if (!blocks) return site.fail("gpu", true, blocks.error());
    run.kv.pool_blocks = blocks.value();
    run.kv_memory = f.kv_bytes;
    run.weights_bytes_per_gpu = f.weights_bytes;
    run.activation_reserve_bytes = f.activation_bytes + f.cuda_graph_bytes + f.non_torch_bytes;
    run.gpu_memory_utilization = f.fraction;
    run.capacity = f;
  } else {
    pool_blocks = h.pool_blocks;
    kv_memory = h.kv_memory;
  }
  if (pool_blocks) {
    run.kv.pool_blocks = *pool_blocks;
  } else if (kv_memory) {
    auto bytes = parse_memory_size(*kv_memory);
    if (!bytes)
      return site.fail(pool_from_cli ? "kv-memory" : "kv_memory", pool_from_cli, bytes.error());
    run.kv.pool_blocks = 1;  // placeholder so the geometry validates
    if (auto problem = run.kv.validate()) return site.invalid(*problem);
    auto blocks = pool_blocks_for_memory(run.kv, bytes.value());
    if (!blocks)
      return site.fail(pool_from_cli ? "kv-memory" : "kv_memory", pool_from_cli, blocks.error());
    run.kv.pool_blocks = blocks.value();
    run.kv_memory = bytes.value();
  } else if (!run.activation_reserve_bytes) {
    return site.fail("pool_blocks", false,
                     "missing: give pool_blocks or kv_memory (or --pool-blocks / --kv-memory)");
  }
  // A pool sized by memory is one GPU's; the attention replicas each have
  // theirs (a pool given in blocks is the whole deployment's).
  if (run.dp_attention > 1 && !pool_blocks) {
    run.kv.pool_blocks = static_cast<std::uint32_t>(std::min<std::uint64_t>(
        std::uint64_t{run.kv.pool_blocks} * run.dp_attention, kMaxSupportedPoolBlocks + 1ull));
  }
  if (run.kv.pool_blocks > kMaxSupportedPoolBlocks) {
    return site.fail(
        pool_from_cli                  ? (cli.pool_blocks ? "pool-blocks" : "kv-memory")
        : run.activation_reserve_bytes ? "gpu"
                                       : (pool_blocks ? "pool_blocks" : "kv_memory"),
        pool_from_cli || run.activation_reserve_bytes.has_value(),
        fmt::format("a pool of {} blocks is more than kvreplay keeps in memory (at most "
                    "{} blocks; each takes {} bytes in the pool and {} in the invariant "
                    "checker: {:.2f} GiB for this pool, {:.2f} GiB at the limit); use a "
                    "larger page_tokens",
                    run.kv.pool_blocks, kMaxSupportedPoolBlocks, kPoolBytesPerBlock,
                    kCheckerBytesPerBlock, gib(run.kv.pool_blocks), gib(kMaxSupportedPoolBlocks)));
  }
  if (auto problem = run.kv.validate()) return site.invalid(*problem);
  // Within the ceiling, the pool must still fit this machine (SPEC §8).
  if (auto problem =
          check_memory(mul_sat(run.kv.pool_blocks, kPoolBytesPerBlock + kCheckerBytesPerBlock),
                       fmt::format("a pool of {} blocks", run.kv.pool_blocks),
                       fmt::format("{} bytes a block in the pool and the invariant checker",
                                   kPoolBytesPerBlock + kCheckerBytesPerBlock))) {
    return site.fail(pool_from_cli ? (cli.pool_blocks ? "pool-blocks" : "kv-memory")
                     : run.activation_reserve_bytes ? "gpu"
                                                    : (pool_blocks ? "pool_blocks" : "kv_memory"),
                     pool_from_cli || run.activation_reserve_bytes.has_value(), *problem);
  }
  return {};
}

}  // namespace

nlohmann::json RunConfig::to_json() const {
  nlohmann::json out;
  out["model"] = model.empty() ? nlohmann::json(nullptr) : nlohmann::json(model);
  out["model_source"] =
      model_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(model_source);
  out["per_gpu"] = true;  // every byte, block and geometry figure is one GPU's
  out["tp"] = tp;
  out["pp"] = pp;
  // Present only when used: a report of a plain deployment is as before.
  if (dp_attention > 1) out["dp_attention"] = dp_attention;
  if (ep > 1) out["ep"] = ep;
  out["gpu"] = gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpu);
  out["gpu_memory_utilization"] = or_null(gpu_memory_utilization);
  out["weights_bytes_per_gpu"] = or_null(weights_bytes_per_gpu);
  if (model_dtype) out["model_dtype"] = *model_dtype;
  out["activation_reserve_bytes"] = or_null(activation_reserve_bytes);
  if (capacity) {
    // How the KV memory was reached: the engine's startup rule (model/capacity.h).
    out["kv_memory_rule"] = {{"engine", std::string(to_string(capacity->engine))},
                             {"engine_version", capacity->version},
                             {capacity->fraction_name, capacity->fraction},
                             {"total_bytes_per_gpu", capacity->total_bytes},
                             {"weights_bytes_per_gpu", capacity->weights_bytes},
                             {"activation_bytes_per_gpu", capacity->activation_bytes},
                             {"cuda_graph_bytes_per_gpu", capacity->cuda_graph_bytes},
                             {"non_torch_bytes_per_gpu", capacity->non_torch_bytes},
                             {"kv_bytes_per_gpu", capacity->kv_bytes},
                             {"kv_tokens", capacity->tokens}};
  }
  out["parameters"] = model_spec ? nlohmann::json{{"total", model_spec->parameters.total},
                                                  {"active", model_spec->parameters.active}}
                                 : nlohmann::json(nullptr);
  // The groups the pool serves: vLLM's for a hybrid model under simulate,
  // else one full-attention group of every layer.
  nlohmann::json groups = nlohmann::json::array();
  const std::vector<KvCacheGroupSpec> served =
      kv_groups.empty() ? std::vector<KvCacheGroupSpec>{{KvCacheGroupSpec::kFull, 0, kv.layers}}
                        : kv_groups;
  for (const KvCacheGroupSpec& group : served) {
    groups.push_back(
        {{"attention", group.attention == KvCacheGroupSpec::kSliding ? "sliding" : "full"},
         {"window_tokens", group.window_tokens},
         {"layers", group.layers}});
  }
  out["kv_cache_groups"] = std::move(groups);
  out["layers"] = kv.layers;
  out["kv_heads"] = kv.kv_heads;
  out["head_dim"] = kv.head_dim;
  out["kv_tensors"] = kv.kv_tensors;
  out["dtype"] = std::string(to_string(kv.dtype));
  out["page_tokens"] = kv.page_tokens;
  out["pool_blocks"] = kv.pool_blocks;
  out["kv_memory"] = kv_memory ? nlohmann::json(*kv_memory) : nlohmann::json(nullptr);
  out["max_seq_tokens"] = kv.max_seq_tokens;
  out["alloc_order"] = std::string(to_string(alloc_order));
  out["bytes_per_token"] = kv.bytes_per_token();
  out["block_bytes"] = kv.block_bytes();
  out["pool_bytes"] = kv.pool_bytes();
  return out;
}

InputResult<RunConfig> resolve_run_config(const nlohmann::json& header, const ConfigOverrides& cli,
                                          const std::string& file, std::uint64_t line) {
  const ConfigSite site{file, line};
  auto settings = read_header(header, site);
  if (!settings) return Unexpected{settings.error()};
  const HeaderSettings& h = settings.value();
  RunConfig run;
  auto geometry = resolve_model(h, cli, site, run);
  if (!geometry) return Unexpected{geometry.error()};
  if (auto status = take_gpu_share(geometry.value(), cli, site, run); !status) {
    return Unexpected{status.error()};
  }
  if (auto status = resolve_kv_options(h, cli, site, run); !status) {
    return Unexpected{status.error()};
  }
  auto gpu = resolve_gpu(cli, site, run);
  if (!gpu) return Unexpected{gpu.error()};
  if (auto status = size_pool(h, cli, site, gpu.value(), run); !status) {
    return Unexpected{status.error()};
  }
  return run;
}

}  // namespace kvreplay
