#include "app/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "app/exit_codes.h"
#include "io/input_registry.h"
#include "io/standard_output.h"
#include "model/gpu.h"
#include "model/presets.h"

namespace kvreplay {

int usage_error(std::string_view problem) {
  eprint("command line: {}\n", problem);
  return kExitInput;
}

const CLI::Validator kCheckValidator(
    [](std::string& value) -> std::string {
      return CheckPolicy::parse(value) ? std::string()
                                       : "must be every, end, off or a positive integer N";
    },
    "every|N|end|off");

namespace {

// A FLOAT option's value: refused when it reads as NaN or an infinity (or a
// number too large for a double, which strtod makes an infinity). A value
// that is not a number at all is left to CLI11's own conversion error.
const CLI::Validator kFiniteValidator(
    [](std::string& value) -> std::string {
      const char* begin = value.c_str();
      char* end = nullptr;
      const double number = std::strtod(begin, &end);
      if (end == begin) return std::string();
      return std::isfinite(number) ? std::string() : "must be a finite number, got " + value;
    },
    "", "finite");

const CLI::Validator kNonEmptyValidator(
    [](std::string& value) -> std::string {
      return value.empty() ? "an empty value names nothing" : std::string();
    },
    "", "non-empty");

// An integer option's value, in decimal: CLI11 reads integers with strtoull
// (base 0), so without this "-1" wraps to 2^64 - 1, 2^64 saturates to it and
// "010" is eight. An unsigned option takes digits alone, a signed one a minus
// sign too; the value must fit 64 bits (the option's own type narrows it
// further, through CLI11's check or the option's range).
CLI::Validator integer_text(bool is_signed) {
  return CLI::Validator(
      [is_signed](std::string& value) -> std::string {
        std::string_view digits = value;
        const bool negative = is_signed && !digits.empty() && digits.front() == '-';
        if (negative) digits.remove_prefix(1);
        const bool decimal = !digits.empty() &&
                             digits.find_first_not_of("0123456789") == std::string_view::npos &&
                             (digits.size() == 1 || digits.front() != '0');
        std::uint64_t magnitude = 0;
        const bool fits =
            decimal &&
            std::from_chars(digits.data(), digits.data() + digits.size(), magnitude).ec ==
                std::errc() &&
            (!is_signed ||
             magnitude <= (negative ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1));
        if (fits) return std::string();
        return fmt::format("'{}' is not {} (decimal digits{})", value.substr(0, 40),
                           is_signed ? "an integer" : "a whole number from 0",
                           is_signed ? ", a minus sign allowed" : "");
      },
      "", is_signed ? "decimal" : "unsigned decimal");
}

}  // namespace

namespace {

template <class T>
CLI::Option* add_scalar_or_list(CLI::App& app, bool swept, const std::string& name, T& scalar,
                                std::vector<T>& list, const std::string& help) {
  if (!swept) return app.add_option(name, scalar, help);
  return app.add_option(name, list, help + "; comma-separated to sweep")->delimiter(',');
}

}  // namespace

CLI::Option* scalar_or_list(CLI::App& app, bool swept, const std::string& name,
                            std::uint32_t& scalar, std::vector<std::uint32_t>& list,
                            const std::string& help) {
  return add_scalar_or_list(app, swept, name, scalar, list, help);
}

CLI::Option* scalar_or_list(CLI::App& app, bool swept, const std::string& name, double& scalar,
                            std::vector<double>& list, const std::string& help) {
  return add_scalar_or_list(app, swept, name, scalar, list, help);
}

CLI::Validator number_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        const char* begin = value.c_str();
        char* end = nullptr;
        const double number = std::strtod(begin, &end);
        if (end == begin) return std::string();  // CLI11's own conversion error
        return number >= lo && number <= hi
                   ? std::string()
                   : fmt::format("value {} not in range {:g} to {:g}", value.substr(0, 40), lo, hi);
      },
      fmt::format("[{:g} - {:g}]", lo, hi), "number range");
}

void add_value_checks(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_expected_min() > 0 || option->get_positional()) {
      option->check(kNonEmptyValidator);
    }
    const std::string type = option->get_type_name();
    if (type.rfind("FLOAT", 0) == 0) option->check(kFiniteValidator);
    if (type.rfind("UINT", 0) == 0) option->check(integer_text(false));
    if (type.rfind("INT", 0) == 0) option->check(integer_text(true));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    add_value_checks(*sub);
  }
}

void ConfigOptions::add_to(CLI::App& app, bool swept, bool deployment) {
  auto positive = CLI::Range(1u, 0xFFFFFFFFu);
  auto group = [](CLI::Option* option) { return option->group("Configuration"); };
  options.assign(17, nullptr);
  if (!swept) {
    options[0] = group(app.add_option("--model", model, "model preset: " + model_preset_list()));
    options[10] = group(app.add_option(
        "--model-config", model_config,
        "a Hugging Face config.json (text_config too): the model's geometry, context and size"));
  }
  options[1] =
      group(app.add_option("--layers", layers, "layers (replaces the model's)")->check(positive));
  options[2] = group(
      app.add_option("--kv-heads", kv_heads, "KV heads (replaces the model's)")->check(positive));
  options[3] = group(app.add_option("--head-dim", head_dim, "head dimension (replaces the model's)")
                         ->check(positive));
  if (deployment) {
    // vLLM's meanings: --kv-cache-dtype the KV cache's, --dtype the model's.
    options[4] = group(app.add_option("--kv-cache-dtype", dtype,
                                      "KV cache: auto (the model's), fp8 (fp8_e4m3, fp8_e5m2), "
                                      "bf16, fp16 or fp32"));
    model_dtype_option = group(
        app.add_option("--dtype", model_dtype,
                       "the model's dtype, as vLLM's --dtype: auto (the checkpoint's; float32 "
                       "served as bf16), half/float16, bfloat16, float/float32; an unquantized "
                       "KV cache follows it"));
  } else {
    options[4] = group(app.add_option("--dtype,--kv-cache-dtype", dtype,
                                      "KV cache: fp32, fp16, bf16 or fp8 (default: the "
                                      "model's, else bf16)"));
  }
  if (!swept) {
    options[5] = group(app.add_option("--page-tokens,--block-size,--page-size", page_tokens,
                                      "tokens per page (block); default 16")
                           ->check(positive));
    options[6] = group(app.add_option("--pool-blocks", pool_blocks, "pool size in blocks, per GPU")
                           ->check(CLI::Range(1u, 0xFFFFFFFEu)));
    options[7] = group(app.add_option("--kv-memory", kv_memory,
                                      "pool size in memory, per GPU: 80GiB, 512MiB, or bytes"));
  }
  options[8] =
      group(app.add_option("--max-seq-tokens,--max-model-len,--context-length", max_seq_tokens,
                           deployment ? "longest sequence; default: the model's context "
                                        "length (max_position_embeddings), else 32768"
                                      : "longest sequence; default 32768")
                ->check(positive));
  options[9] = group(app.add_option(
      "--alloc-order", alloc_order,
      "free-block order: lifo (default; sglang: fifo, as SGLang's allocator), fifo, lowest, vllm "
      "(lifo with block 0 held as vLLM's null block)"));
  if (deployment) {
    auto deploy = [](CLI::Option* option) { return option->group("Deployment (figures per GPU)"); };
    const std::string tp_help =
        "tensor parallelism: KV heads split across N GPUs (replicated when fewer; an MLA latent "
        "on every GPU)";
    const std::string pp_help =
        "pipeline parallelism: layers split across N stages (the fullest stage is reported)";
    const std::string gpu_help =
        "GPU preset (datasheet figures; sizes the pool unless --kv-memory or --pool-blocks, and "
        "sets --gpu-class): " +
        gpu_preset_list();
    if (swept) {
      // plan sweeps deployments as it sweeps memory.
      options[11] = deploy(app.add_option("--tp,--tensor-parallel-size,--tp-size", tps,
                                          tp_help + "; comma-separated to sweep")
                               ->delimiter(',')
                               ->check(CLI::Range(1u, 1024u)));
      options[12] = deploy(app.add_option("--pp,--pipeline-parallel-size,--pp-size", pps,
                                          pp_help + "; comma-separated to sweep")
                               ->delimiter(',')
                               ->check(CLI::Range(1u, 1024u)));
      options[13] = deploy(
          app.add_option("--gpu", gpus, gpu_help + "; comma-separated to sweep")->delimiter(','));
    } else {
      options[11] = deploy(app.add_option("--tp,--tensor-parallel-size,--tp-size", tp, tp_help)
                               ->check(CLI::Range(1u, 1024u)));
      options[12] = deploy(app.add_option("--pp,--pipeline-parallel-size,--pp-size", pp, pp_help)
                               ->check(CLI::Range(1u, 1024u)));
      options[13] = deploy(app.add_option("--gpu", gpu, gpu_help));
      options[15] = deploy(
          app.add_option("--dp-attention", dp_attention,
                         "attention data parallelism (SGLang's --enable-dp-attention --dp N): "
                         "N attention replicas of tp/N GPUs, each its own requests and KV, "
                         "the MLP and experts over all --tp GPUs")
              ->check(CLI::Range(1u, 1024u)));
      options[16] = deploy(app.add_option("--ep,--ep-size", ep,
                                          "expert parallelism: routed experts whole, E/N a GPU, "
                                          "tokens sent to them by all-to-all (N divides --tp)")
                               ->check(CLI::Range(1u, 1024u)));
    }
    const std::string fraction_help =
        "the engine's memory knob: vLLM's gpu_memory_utilization (default 0.92 from vLLM 0.21), "
        "SGLang's "
        "mem_fraction_static (default as SGLang picks it), TensorRT-LLM's "
        "free_gpu_memory_fraction (default 0.9); see kvreplay capacity";
    if (swept) {
      options[14] =
          deploy(app.add_option("--gpu-memory-utilization,--mem-fraction-static", memory_fractions,
                                fraction_help + "; comma-separated to sweep")
                     ->delimiter(','));
    } else {
      options[14] = deploy(app.add_option("--gpu-memory-utilization,--mem-fraction-static",
                                          gpu_memory_utilization, fraction_help));
    }
  }
}
ConfigOverrides ConfigOptions::overrides() const {
  ConfigOverrides out;
  auto given = [this](std::size_t i) { return options[i] != nullptr && options[i]->count() > 0; };
  if (given(0)) out.model = model;
  if (given(1)) out.layers = layers;
  if (given(2)) out.kv_heads = kv_heads;
  if (given(3)) out.head_dim = head_dim;
  if (given(4)) {
    // vLLM's and SGLang's --kv-cache-dtype spellings: auto keeps the model's.
    static const std::pair<std::string_view, std::string_view> kSpellings[] = {
        {"fp8_e4m3", "fp8"}, {"fp8_e5m2", "fp8"}, {"bfloat16", "bf16"}, {"float16", "fp16"},
        {"half", "fp16"},    {"float32", "fp32"}, {"float", "fp32"}};
    std::string name = dtype;
    for (auto [spelling, ours] : kSpellings) {
      if (name == spelling) name = ours;
    }
    if (name != "auto") out.dtype = name;
  }
  if (model_dtype_option != nullptr && model_dtype_option->count() > 0 && model_dtype != "auto") {
    out.model_dtype = model_dtype;
  }
  if (given(5)) out.page_tokens = page_tokens;
  if (given(6)) out.pool_blocks = pool_blocks;
  if (given(7)) out.kv_memory = kv_memory;
  if (given(8)) out.max_seq_tokens = max_seq_tokens;
  if (given(9)) out.alloc_order = alloc_order;
  if (given(10)) out.model_config = model_config;
  const bool lists = !gpus.empty() || !tps.empty() || !pps.empty();  // plan: swept per cell
  if (given(11) && !lists) out.tp = tp;
  if (given(12) && !lists) out.pp = pp;
  if (given(13) && !lists) out.gpu = gpu;
  if (given(15)) out.dp_attention = dp_attention;
  if (given(16)) out.ep = ep;
  if (given(14) && memory_fractions.empty()) out.gpu_memory_utilization = gpu_memory_utilization;
  if (given(14) && memory_fractions.size() == 1) out.gpu_memory_utilization = memory_fractions[0];
  out.context_default = options[11] != nullptr;  // simulate and plan
  out.kv_groups = out.context_default;
  return out;
}
void set_activation_limits(ConfigOverrides& overrides, const SimOptions& options) {
  overrides.draft_layers = options.speculative.draft_layers();
  overrides.max_batched_tokens = options.max_batched_tokens;
  overrides.max_seqs = options.max_seqs;
  // The engine's page size and free-block order, unless given.
  const EngineDefaults& engine = engine_entry(options.engine).defaults;
  if (engine.page_tokens != 0 && !overrides.page_tokens) overrides.page_tokens = engine.page_tokens;
  if (!engine.alloc_order.empty() && !overrides.alloc_order) {
    overrides.alloc_order = std::string(engine.alloc_order);
  }
  if (engine.free_gpu_memory_fraction) {
    overrides.free_gpu_memory_fraction = engine.free_gpu_memory_fraction;
  }
  overrides.capacity_engine =
      parse_capacity_engine(engine.capacity_rule).value_or(CapacityEngine::kVllm);
}
void SimOptionsCli::add_speculative_to(CLI::App& app) {
  const std::string group = "Speculative decoding";
  app.add_option("--speculative", speculative,
                 "METHOD:K: a draft proposes K tokens a decode step and the model verifies "
                 "the K + 1 at once; METHOD eagle, eagle3 or mtp (a draft of one decoder "
                 "layer, its KV in the pool) or ngram (no draft model)")
      ->group(group);
  spec_acceptance_option =
      app.add_option("--spec-acceptance", spec_acceptance,
                     "each draft accepted with probability R when the one before it was "
                     "(default for mtp 0.85, DeepSeek-V3's report)")
          ->check(number_range(0.0, 1.0))
          ->group(group);
  spec_length_option =
      app.add_option("--spec-acceptance-length", spec_acceptance_length,
                     "vLLM's mean acceptance length (1 + accepted / drafts), from 1 to K + 1")
          ->check(number_range(1.0, 17.0))
          ->group(group);
  app.add_option("--spec-acceptance-dist", spec_acceptance_dist,
                 "P0,...,PK: the probability that 0, 1, ... K drafts of a step are accepted")
      ->delimiter(',')
      ->group(group);
  app.add_option("--spec-seed", spec_seed, "seed of the acceptance draws (default 0)")
      ->group(group);
}
std::optional<std::string> SimOptionsCli::resolve_speculative(SimOptions& out) const {
  auto given = [](const CLI::Option* option) { return option != nullptr && option->count() > 0; };
  if (!speculative.empty()) {
    auto spec = parse_speculative(speculative);
    if (!spec) return spec.error();
    out.speculative = std::move(spec).value();
    out.speculative.seed = spec_seed;
  }
  return set_acceptance(
      out.speculative,
      given(spec_acceptance_option) ? std::optional<double>(spec_acceptance) : std::nullopt,
      given(spec_length_option) ? std::optional<double>(spec_acceptance_length) : std::nullopt,
      spec_acceptance_dist);
}
std::optional<std::string> SimOptionsCli::resolve_slo(SimOptions& out) const {
  for (const std::string& list : slo_targets) {
    auto targets = parse_slo_targets(list);
    if (!targets) return "--slo: " + targets.error();
    for (const PercentileTarget& t : targets.value()) {
      for (const PercentileTarget& had : out.slo.targets) {
        if (had.metric == t.metric && had.percentile == t.percentile) {
          return fmt::format("--slo: {} p{:g} is given twice", to_string(t.metric), t.percentile);
        }
      }
      out.slo.targets.push_back(t);
    }
  }
  if (auto problem = parse_goodput(goodput, out.slo)) return "--goodput: " + *problem;
  out.slo.attainment = slo_attainment;
  if (slo_attainment_option != nullptr && slo_attainment_option->count() > 0 && !out.slo.joint()) {
    return std::string(
        "--slo-attainment is the joint rule's share: give --slo-ttft-ms, --slo-tpot-ms or "
        "--goodput (a --slo target is met by its percentile alone)");
  }
  if (std::signbit(slo_attainment)) return std::string("--slo-attainment: -0 is not a share");
  for (const std::string& text : percentiles) {
    // vllm bench serve writes them bare (99.9), kvreplay's keys with a p.
    auto p = parse_percentile(!text.empty() && text.front() == 'p' ? text : "p" + text);
    if (!p) return "--percentiles: " + p.error();
    if (std::find(out.percentiles.begin(), out.percentiles.end(), p.value()) ==
        out.percentiles.end()) {
      out.percentiles.push_back(p.value());
    }
  }
  return std::nullopt;
}

void apply_attention_replicas(SimOptions& options, std::uint32_t replicas) {
  if (replicas <= 1) return;
  const EngineEntry& engine = engine_entry(options.engine);
  if (engine.defaults.attention_replicas) {
    engine.defaults.attention_replicas(options, replicas);
    return;
  }
  auto times = [replicas](std::uint32_t limit) {
    return static_cast<std::uint32_t>(
        std::min<std::uint64_t>(std::uint64_t{limit} * replicas, 0xFFFFFFFFu));
  };
  options.max_seqs = times(options.max_seqs);
  options.max_batched_tokens = times(options.max_batched_tokens);
}
void SimOptionsCli::add_to(CLI::App& app, const std::string& check_help, bool swept) {
  app.add_option("--format", format,
                 "request format (default: by content): " + request_format_help())
      ->group("Simulation");
  std::string engine_help = "scheduler to imitate:";
  const std::span<const EngineEntry> engines = engine_table();
  for (std::size_t i = 0; i < engines.size(); ++i) {
    const EngineEntry& entry = engines[i];
    engine_help += fmt::format("{} {}",
                               i == 0                    ? ""
                               : i + 1 == engines.size() ? " or"
                                                         : ",",
                               entry.name);
    const bool is_default = entry.name == engine;
    if (is_default || !entry.summary.empty()) {
      engine_help += fmt::format(" ({}{}{})", is_default ? "default" : "",
                                 is_default && !entry.summary.empty() ? ": " : "", entry.summary);
    }
  }
  engine_option = app.add_option("--engine", engine, engine_help)
                      ->check(CLI::IsMember(engine_names()))
                      ->group("Simulation");
  gpu_class_option =
      app.add_option("--gpu-class", gpu_class,
                     "vllm: the `vllm serve` batch defaults of a large GPU (>= 70 GiB, not A100: "
                     "8192 tokens, 1024 seqs; default, or --gpu's) or a small one (2048, 256)")
          ->check(CLI::IsMember(gpu_class_names()))
          ->group("Simulation");
  add_engine_options_to(app);
  app.add_option("--allocator", allocator,
                 "paged (default), contiguous-max, contiguous-pow2, contiguous-oracle")
      ->check(CLI::IsMember(allocator_names()))
      ->group("Simulation");
  app.add_option("--evict", evict, "prefix-cache eviction: lru (default), fifo, lfu")
      ->check(CLI::IsMember(evict_policy_names()))
      ->group("Simulation");
  app.add_flag("--no-prefix-cache", no_prefix_cache, "disable prefix caching")->group("Simulation");
  max_seqs =
      scalar_or_list(app, swept, "--max-seqs,--max-num-seqs", defaults.max_seqs, max_seqs_list,
                     "most sequences running at once (default: vllm by --gpu-class, "
                     "generic 256)")
          ->check(CLI::Range(1u, 1u << 20))
          ->group("Simulation");
  max_batched_tokens =
      scalar_or_list(app, swept, "--max-batched-tokens,--max-num-batched-tokens",
                     defaults.max_batched_tokens, max_batched_list,
                     "token budget per step, chunked prefill (default: vllm by --gpu-class, "
                     "generic 8192)")
          ->check(CLI::Range(1u, 1u << 30))
          ->group("Simulation");
  add_speculative_to(app);
  watermark = app.add_option("--watermark", defaults.watermark,
                             "fraction of blocks kept free at admission (default 0.01; vllm: 0)")
                  ->check(number_range(0.0, 0.5))
                  ->group("Simulation");
  app.add_option("--cost-model", cost_model,
                 "virtual time: roofline (the model's FLOPs and bytes on --gpu, else h100-80gb), "
                 "linear (the constants below), or auto (default: roofline when the model's "
                 "parameters are known)")
      ->check(CLI::IsMember(std::vector<std::string>{"auto", "roofline", "linear"}))
      ->group("Cost model");
  // The constants of each cost model (model/roofline.h, engine/simulator.h): a
  // constant given with the other model is refused in resolve().
  struct Constant {
    const char* name;
    double* value;
    const char* help;
    double lo, hi;
  };
  LinearCost& linear = defaults.cost.linear;
  const Constant linear_constants[] = {
      {"--step-ms", &linear.step_ms, "linear: fixed ms per step (default 5)", 0.0, 1e6},
      {"--prefill-token-ms", &linear.prefill_token_ms,
       "linear: ms per prompt token computed (default 0.025)", 0.0, 1e6},
      {"--decode-seq-ms", &linear.decode_seq_ms, "linear: ms per sequence decoded (default 0.01)",
       0.0, 1e6},
      {"--kv-bandwidth-gbps", &linear.kv_bandwidth_gbps,
       "linear: GB/s at which attention reads KV (default 3000)", 1e-3, 1e9},
  };
  auto declare = [&](const Constant& c) {
    return app.add_option(c.name, *c.value, c.help)
        ->check(number_range(c.lo, c.hi))
        ->group("Cost model");
  };
  app_cost_profile =
      app.add_option(
             "--cost-profile", cost_profile_path,
             "roofline: a JSON file of the constants per GPU kind and engine, each with its "
             "source (default: the shipped profile, fitted to published measurements; "
             "kvreplay calibrate writes one)")
          ->group("Cost model");
  for (const RooflineConstantInfo& info : roofline_constant_infos()) {
    roofline_options.push_back(
        app.add_option(info.option, defaults.cost.given.*info.field,
                       fmt::format("{} (default: the cost profile's)", info.help))
            ->check(number_range(info.lo, info.hi))
            ->group("Cost model"));
  }
  compute_efficiency = app.add_option("--compute-efficiency", compute_efficiency_value,
                                      "roofline: --prefill-efficiency and --decode-efficiency "
                                      "both")
                           ->check(number_range(1e-3, 1.0))
                           ->group("Cost model");
  compute_efficiency->excludes(roofline_options[0]);  // prefill_efficiency
  compute_efficiency->excludes(roofline_options[1]);  // decode_efficiency
  for (const Constant& c : linear_constants) linear_options.push_back(declare(c));
  slo_ttft = app.add_option("--slo-ttft-ms", slo_ttft_ms,
                            "SLO: time to first token, ms (SLO attainment and goodput)")
                 ->check(number_range(0.0, 1e12))
                 ->group("Latency");
  slo_tpot =
      app.add_option("--slo-tpot-ms", slo_tpot_ms, "SLO: time per output token after the first, ms")
          ->check(number_range(0.0, 1e12))
          ->group("Latency");
  app.add_option("--slo", slo_targets,
                 "per-metric percentile targets, METRIC:pNN:MS, comma-separated (ttft, tpot, "
                 "itl, e2e or e2el; as ttft:p95:2000,tpot:p95:50): the report's slo.targets, "
                 "met when every one is")
      ->allow_extra_args(false)
      ->group("Latency");
  app.add_option("--goodput", goodput,
                 "vllm bench serve's goodput: KEY:MS pairs (ttft, tpot, e2el or e2e) a request "
                 "must all meet, the joint rule as --slo-ttft-ms and --slo-tpot-ms")
      ->delimiter(',')
      ->group("Latency");
  slo_attainment_option =
      app.add_option(
             "--slo-attainment", slo_attainment,
             "the joint rule (--slo-ttft-ms, --slo-tpot-ms, --goodput) is met when this share "
             "of the requests meets it (default 0.99)")
          ->check(number_range(0.0, 1.0))
          ->group("Latency");
  app.add_option("--percentiles,--metric-percentiles", percentiles,
                 "latency percentiles for the report beside p50, p90, p95 and p99, and for the "
                 "summary instead of them (as 99.9 or p99.9, comma-separated)")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->group("Latency");
  app.add_option("--check", check, check_help)->check(kCheckValidator);
  add_offload_to(app);
}

void SimOptionsCli::add_engine_options_to(CLI::App& app) {
  app_ = &app;
  for (const EngineEntry& entry : engine_table()) {
    for (const EngineOption& own : entry.options) {
      CLI::Option* option = nullptr;
      const std::string name(own.name), help(own.help);
      if (own.whole) {
        option = app.add_option(name, own.whole(defaults), help)
                     ->check(CLI::Range(static_cast<std::uint32_t>(own.lo),
                                        static_cast<std::uint32_t>(own.hi)));
      } else if (own.real) {
        option =
            app.add_option(name, own.real(defaults), help)->check(number_range(own.lo, own.hi));
      } else if (own.flag) {
        option = app.add_flag(name, own.flag(defaults), help);
      } else {
        std::string& value = choice_values[name];
        value = own.choice_default;
        option = app.add_option(name, value, help)->check(CLI::IsMember(own.choices()));
      }
      option->group("Simulation");
      own_options.push_back(OwnOption{entry.kind, &own, option});
    }
  }
}

void SimOptionsCli::add_offload_to(CLI::App& app) {
  // "cpu then disk", "cpu:SIZE[,disk:SIZE]": kOffloadMedia's rows in order.
  std::string order, grammar;
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    order += fmt::format("{}{}", order.empty() ? "" : " then ", row.name);
    grammar +=
        grammar.empty() ? fmt::format("{}:SIZE", row.name) : fmt::format("[,{}:SIZE]", row.name);
  }
  app.add_option("--offload", offload,
                 fmt::format("KV offload tiers per GPU, {}, as vLLM's native offloading keeps "
                             "them: {} (sizes as --kv-memory); under --engine sglang, {}:SIZE is "
                             "HiCache's host pool; none for no tiers (plan: settings to sweep, "
                             "the next one starting at none or at a tier given again)",
                             order, grammar, to_string(host_memory_medium())))
      ->group("Offload");
  offload_options.push_back(app.add_option("--offload-policy", offload_policy,
                                           "tier eviction: lru (default) or arc (vllm, generic)")
                                ->check(CLI::IsMember(std::vector<std::string>{"lru", "arc"}))
                                ->group("Offload"));
  // Each medium's link: --offload-NAME-gbps and --offload-NAME-latency-us.
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    const auto m = static_cast<std::size_t>(row.medium);
    offload_gbps_options[m] = app.add_option(fmt::format("--offload-{}-gbps", row.name),
                                             offload_gbps[m], std::string(row.gbps_help))
                                  ->check(number_range(1e-3, 1e9))
                                  ->group("Offload");
    offload_latency_options[m] =
        app.add_option(fmt::format("--offload-{}-latency-us", row.name), offload_latency_us[m],
                       std::string(row.latency_help))
            ->check(number_range(0.0, 1e9))
            ->group("Offload");
    offload_options.push_back(offload_gbps_options[m]);
    offload_options.push_back(offload_latency_options[m]);
  }
}

namespace {

// --offload's value: NAME:SIZE[,NAME:SIZE...] of kOffloadMedia, each medium at most once.
std::optional<std::string> parse_offload(const std::string& text, OffloadOptions& out) {
  std::vector<std::string> examples;
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    examples.push_back(fmt::format("{}:{}", row.name, row.example_size));
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return fmt::format("--offload: '{}' is not TIER:SIZE ({})", item, fmt::join(examples, ", "));
    }
    const std::string medium = item.substr(0, colon);
    OffloadTierOptions tier;
    if (auto parsed = parse_offload_medium(medium)) {
      tier.medium = *parsed;
    } else {
      return fmt::format("--offload: unknown tier '{}' ({})", medium,
                         fmt::join(offload_medium_names(), ", "));
    }
    for (const OffloadTierOptions& seen : out.tiers) {
      if (seen.medium == tier.medium)
        return fmt::format("--offload: the {} tier given twice", medium);
    }
    auto bytes = parse_memory_size(item.substr(colon + 1));
    if (!bytes) return fmt::format("--offload: {}: {}", medium, bytes.error());
    if (bytes.value() == 0) return fmt::format("--offload: {}: the size must be above 0", medium);
    tier.bytes = bytes.value();
    out.tiers.push_back(tier);
    if (comma == text.size()) break;
  }
  // Looked up in kOffloadMedia's order: the faster tier first.
  std::stable_sort(
      out.tiers.begin(), out.tiers.end(),
      [](const OffloadTierOptions& a, const OffloadTierOptions& b) { return a.medium < b.medium; });
  return std::nullopt;
}

}  // namespace

std::optional<std::string> SimOptionsCli::resolve_offload(
    SimOptions& out, const std::optional<std::string>& gpu) const {
  auto given = [](const CLI::Option* option) { return option != nullptr && option->count() > 0; };
  if (offload.empty()) {
    for (const CLI::Option* option : offload_options) {
      if (given(option)) return fmt::format("{} needs --offload", option->get_name());
    }
    return std::nullopt;
  }
  // No tiers, said so (a plan's swept "none" keeps the tiers' other options).
  if (offload == "none") return std::nullopt;
  if (auto problem = parse_offload(offload, out.offload)) return problem;
  out.offload.policy = *parse_offload_policy(offload_policy);
  for (OffloadTierOptions& tier : out.offload.tiers) {
    const auto m = static_cast<std::size_t>(tier.medium);
    tier.gbps = given(offload_gbps_options[m])
                    ? offload_gbps[m]
                    : default_offload_gbps(tier.medium, gpu.value_or(""));
    tier.latency_us = given(offload_latency_options[m]) ? offload_latency_us[m]
                                                        : default_offload_latency_us(tier.medium);
  }
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    const auto m = static_cast<std::size_t>(row.medium);
    const bool has =
        std::any_of(out.offload.tiers.begin(), out.offload.tiers.end(),
                    [&](const OffloadTierOptions& t) { return t.medium == row.medium; });
    for (const CLI::Option* option : {offload_gbps_options[m], offload_latency_options[m]}) {
      if (given(option) && !has) {
        return fmt::format("{}: --offload has no {} tier", option->get_name(), row.name);
      }
    }
  }
  // Which engines and allocators take tiers: sim_options_error.
  return std::nullopt;
}
bool SimOptionsCli::engine_given() const {
  return engine_option != nullptr && engine_option->count() > 0;
}

std::optional<std::string> SimOptionsCli::resolve_engine(
    SimOptions& out, const std::optional<std::string>& gpu) const {
  auto given = [](const CLI::Option* option) { return option != nullptr && option->count() > 0; };
  auto given_name = [this, &given](std::string_view name) {
    return app_ != nullptr && given(app_->get_option_no_throw(std::string(name)));
  };
  const EngineEntry* chosen = &engine_entry(out.engine);
  if (out.allocator != AllocatorKind::kPaged && !chosen->can.contiguous_allocators) {
    // The contiguous allocators model one engine's whole-request reservation.
    const EngineEntry* runs = chosen;
    for (const EngineEntry& entry : engine_table()) {
      if (entry.can.contiguous_allocators) {
        runs = &entry;
        break;
      }
    }
    if (given(engine_option) || runs == chosen) {
      return fmt::format(
          "--engine {} needs --allocator paged (the {} allocator runs the {} scheduler: give "
          "--engine {})",
          chosen->name, allocator, runs->name, runs->name);
    }
    out.engine = runs->kind;
    chosen = runs;
  }
  for (const OwnOption& own : own_options) {
    if (given(own.cli) && own.engine != out.engine) {
      return fmt::format("{} is an option of --engine {}", own.cli->get_name(),
                         engine_entry(own.engine).name);
    }
  }
  const EngineDefaults& defaults_of = chosen->defaults;
  for (std::string_view name : defaults_of.refused_options) {
    if (given_name(name)) {
      return fmt::format("{} is not an option of --engine {} ({})", name, chosen->name,
                         defaults_of.refused_why);
    }
  }
  for (const OwnOption& own : own_options) {
    if (own.engine == out.engine && own.option->set_choice) {
      own.option->set_choice(out, choice_values.at(std::string(own.option->name)));
    }
  }
  if (defaults_of.watermark && !given(watermark)) out.watermark = *defaults_of.watermark;
  if (defaults_of.batch) {
    const BatchDefaults batch = defaults_of.batch(out.gpu_class);
    if (!given(max_seqs)) out.max_seqs = batch.max_seqs;
    if (!given(max_batched_tokens)) out.max_batched_tokens = batch.max_batched_tokens;
  }
  if (defaults_of.resolve) {
    EngineSetup setup;
    setup.gpu = gpu ? find_gpu_preset(*gpu) : nullptr;
    setup.given = given_name;
    if (auto problem = defaults_of.resolve(out, setup)) return problem;
  }
  return std::nullopt;
}
std::optional<std::string> SimOptionsCli::resolve(SimOptions& out,
                                                  std::optional<RequestFormat>& out_format,
                                                  const std::optional<std::string>& gpu) const {
  out = defaults;
  out.allocator = *parse_allocator(allocator);
  out.engine = *parse_engine(engine);
  out.gpu_class = *parse_gpu_class(gpu_class);
  auto given = [](const CLI::Option* option) { return option != nullptr && option->count() > 0; };
  if (gpu && !given(gpu_class_option)) {
    // --gpu names the GPU, and with it vLLM's class (an unknown name is
    // refused with the model, by resolve_run_config).
    if (const GpuSpec* spec = find_gpu_preset(*gpu)) {
      out.gpu_class = *parse_gpu_class(spec->vllm_gpu_class);
    }
  }
  if (auto problem = resolve_engine(out, gpu)) return problem;
  out.cost.kind = *parse_cost_kind(cost_model);
  for (const CLI::Option* option : linear_options) {
    if (given(option) && out.cost.kind != CostKind::kLinear) {
      return fmt::format("{} is a constant of the linear cost model: give --cost-model linear",
                         option->get_name());
    }
  }
  std::vector<const CLI::Option*> roofline_given(roofline_options.begin(), roofline_options.end());
  roofline_given.push_back(compute_efficiency);
  roofline_given.push_back(app_cost_profile);
  for (const CLI::Option* option : roofline_given) {
    if (given(option) && out.cost.kind == CostKind::kLinear) {
      return fmt::format("{} is a constant of the roofline cost model, not of --cost-model linear",
                         option->get_name());
    }
  }
  for (std::size_t i = 0; i < roofline_options.size(); ++i) {
    if (given(roofline_options[i])) out.cost.given_mask |= 1u << i;
  }
  if (given(compute_efficiency)) {
    out.cost.given.prefill_efficiency = out.cost.given.decode_efficiency = compute_efficiency_value;
    out.cost.given_mask |= 0b11u;
  }
  if (given(app_cost_profile)) {
    record_input_path(cost_profile_path, "--cost-profile");  // the name an output clash gives it
    auto profile = CostProfile::load(cost_profile_path);
    if (!profile) return profile.error();
    out.cost.profile = std::make_shared<const CostProfile>(std::move(profile).value());
  }
  if (given(slo_ttft)) out.slo.ttft_ms = slo_ttft_ms;
  if (given(slo_tpot)) out.slo.tpot_ms = slo_tpot_ms;
  if (auto problem = resolve_slo(out)) return problem;
  out.evict = *parse_evict_policy(evict);
  const EngineEntry& chosen = engine_entry(out.engine);
  if (!declared(chosen.can.evict_policies, evict)) {
    return fmt::format("--evict {}: the {} engine's {}", evict, chosen.name, chosen.can.evict_why);
  }
  out.prefix_cache = !no_prefix_cache;
  if (auto problem = resolve_offload(out, gpu)) return problem;
  if (auto problem = resolve_speculative(out)) return problem;
  out.check = *CheckPolicy::parse(check);
  if (!format.empty()) {
    out_format = parse_request_format(format);
    if (!out_format)
      return fmt::format("--format: unknown format '{}' (expected {})", format,
                         fmt::join(request_format_names(), ", "));
  }
  return std::nullopt;
}
std::optional<std::string> disaggregation_problem(const SimOptions& options,
                                                  std::string_view option) {
  if (const EngineEntry& engine = engine_entry(options.engine); !engine.can.receives_kv) {
    return fmt::format(
        "{}: disaggregated serving runs the {} engines (the {} engine cannot receive KV yet)",
        option, engines_with(&EngineCapabilities::receives_kv, " and "), engine.name);
  }
  if (options.allocator != AllocatorKind::kPaged) {
    return fmt::format(
        "{}: the decode side receives KV into its prefix cache, which needs --allocator paged",
        option);
  }
  if (!options.prefix_cache) {
    return fmt::format(
        "{}: the decode side receives KV into its prefix cache (drop --no-prefix-cache)", option);
  }
  return std::nullopt;
}

}  // namespace kvreplay
