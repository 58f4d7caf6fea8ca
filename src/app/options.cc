#include "app/options.h"

#include <fmt/format.h>
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
  options.assign(15, nullptr);
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
  options[4] = group(app.add_option("--dtype", dtype,
                                    "KV cache: fp32, fp16, bf16 or fp8 (default: the "
                                    "model's, else bf16)"));
  if (!swept) {
    options[5] =
        group(app.add_option("--page-tokens", page_tokens, "tokens per page (block); default 16")
                  ->check(positive));
    options[6] = group(app.add_option("--pool-blocks", pool_blocks, "pool size in blocks, per GPU")
                           ->check(CLI::Range(1u, 0xFFFFFFFEu)));
    options[7] = group(app.add_option("--kv-memory", kv_memory,
                                      "pool size in memory, per GPU: 80GiB, 512MiB, or bytes"));
  }
  options[8] = group(app.add_option("--max-seq-tokens", max_seq_tokens,
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
      options[11] = deploy(app.add_option("--tp", tps, tp_help + "; comma-separated to sweep")
                               ->delimiter(',')
                               ->check(CLI::Range(1u, 1024u)));
      options[12] = deploy(app.add_option("--pp", pps, pp_help + "; comma-separated to sweep")
                               ->delimiter(',')
                               ->check(CLI::Range(1u, 1024u)));
      options[13] = deploy(
          app.add_option("--gpu", gpus, gpu_help + "; comma-separated to sweep")->delimiter(','));
    } else {
      options[11] = deploy(app.add_option("--tp", tp, tp_help)->check(CLI::Range(1u, 1024u)));
      options[12] = deploy(app.add_option("--pp", pp, pp_help)->check(CLI::Range(1u, 1024u)));
      options[13] = deploy(app.add_option("--gpu", gpu, gpu_help));
    }
    options[14] = deploy(app.add_option("--gpu-memory-utilization", gpu_memory_utilization,
                                        "share of the GPU's memory for weights, activations and "
                                        "KV (default 0.9, as vLLM)"));
  }
}
ConfigOverrides ConfigOptions::overrides() const {
  ConfigOverrides out;
  auto given = [this](std::size_t i) { return options[i] != nullptr && options[i]->count() > 0; };
  if (given(0)) out.model = model;
  if (given(1)) out.layers = layers;
  if (given(2)) out.kv_heads = kv_heads;
  if (given(3)) out.head_dim = head_dim;
  if (given(4)) out.dtype = dtype;
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
  if (given(14)) out.gpu_memory_utilization = gpu_memory_utilization;
  out.context_default = options[11] != nullptr;  // simulate and plan
  out.kv_groups = out.context_default;
  return out;
}
void set_activation_limits(ConfigOverrides& overrides, const SimOptions& options) {
  overrides.max_batched_tokens = options.max_batched_tokens;
  overrides.max_seqs = options.max_seqs;
  if (options.engine == EngineKind::kSglang) {
    // SGLang's --page-size defaults to 1, and its allocator
    // (TokenToKVPoolAllocator: alloc takes free_pages from the front, free
    // appends to the back) hands out the oldest free page first.
    if (!overrides.page_tokens) overrides.page_tokens = 1;
    if (!overrides.alloc_order) overrides.alloc_order = "fifo";
  }
}
void SimOptionsCli::add_to(CLI::App& app, const std::string& check_help) {
  app.add_option("--format", format,
                 "request format: native, mooncake, azure, burstgpt (default: by content)")
      ->group("Simulation");
  engine_option =
      app.add_option("--engine", engine,
                     "scheduler to imitate: vllm (default: vLLM v1's rules, README), sglang "
                     "(SGLang's scheduler and radix cache) or generic")
          ->check(CLI::IsMember(engine_names()))
          ->group("Simulation");
  gpu_class_option =
      app.add_option("--gpu-class", gpu_class,
                     "vllm: the `vllm serve` batch defaults of a large GPU (>= 70 GiB, not A100: "
                     "8192 tokens, 1024 seqs; default, or --gpu's) or a small one (2048, 256)")
          ->check(CLI::IsMember(gpu_class_names()))
          ->group("Simulation");
  sglang_options.push_back(
      app.add_option("--schedule-policy", schedule_policy,
                     "sglang: waiting-queue order, lpm (longest cached prefix first; default) or "
                     "fcfs")
          ->check(CLI::IsMember(schedule_policy_names()))
          ->group("Simulation"));
  chunked_prefill =
      app.add_option("--chunked-prefill-size", defaults.sglang.chunked_prefill_size,
                     "sglang: most prompt tokens a prefill batch computes; a longer prompt is "
                     "prefilled in chunks; 0 for no chunking (default by --gpu's memory as "
                     "SGLang: 8192 for 60-160 GiB, 16384 above, 4096 or 2048 below)")
          ->check(CLI::Range(0u, 1u << 30))
          ->group("Simulation");
  sglang_options.push_back(chunked_prefill);
  sglang_options.push_back(
      app.add_option("--max-prefill-tokens", defaults.sglang.max_prefill_tokens,
                     "sglang: the input budget of a prefill batch, all its requests (default "
                     "16384)")
          ->check(CLI::Range(1u, 1u << 30))
          ->group("Simulation"));
  sglang_options.push_back(
      app.add_option("--max-running-requests", defaults.sglang.max_running_requests,
                     "sglang: most requests running at once (default as SGLang, from the pool: "
                     "pool tokens / --max-seq-tokens x 512, within 2048..4096)")
          ->check(CLI::Range(1u, 1u << 20))
          ->group("Simulation"));
  sglang_options.push_back(
      app.add_option("--schedule-conservativeness", defaults.sglang.schedule_conservativeness,
                     "sglang: scales the output reserved for running requests (new_token_ratio; "
                     "default 1)")
          ->check(number_range(0.0, 100.0))
          ->group("Simulation"));
  app.add_option("--allocator", allocator,
                 "paged (default), contiguous-max, contiguous-pow2, contiguous-oracle")
      ->check(CLI::IsMember(allocator_names()))
      ->group("Simulation");
  app.add_option("--evict", evict, "prefix-cache eviction: lru (default), fifo, lfu")
      ->check(CLI::IsMember(evict_policy_names()))
      ->group("Simulation");
  app.add_flag("--no-prefix-cache", no_prefix_cache, "disable prefix caching")->group("Simulation");
  max_seqs = app.add_option("--max-seqs", defaults.max_seqs,
                            "most sequences running at once (default: vllm by --gpu-class, "
                            "generic 256)")
                 ->check(CLI::Range(1u, 1u << 20))
                 ->group("Simulation");
  max_batched_tokens = app.add_option("--max-batched-tokens", defaults.max_batched_tokens,
                                      "token budget per step, chunked prefill (default: vllm by "
                                      "--gpu-class, generic 8192)")
                           ->check(CLI::Range(1u, 1u << 30))
                           ->group("Simulation");
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
  app.add_option("--check", check, check_help)->check(kCheckValidator);
  add_offload_to(app);
}

void SimOptionsCli::add_offload_to(CLI::App& app) {
  app.add_option("--offload", offload,
                 "KV offload tiers per GPU, cpu then disk, as vLLM's native offloading keeps them: "
                 "cpu:SIZE[,disk:SIZE] (sizes as --kv-memory); under --engine sglang, cpu:SIZE is "
                 "HiCache's host pool")
      ->group("Offload");
  offload_options.push_back(app.add_option("--offload-policy", offload_policy,
                                           "tier eviction: lru (default) or arc (vllm, generic)")
                                ->check(CLI::IsMember(std::vector<std::string>{"lru", "arc"}))
                                ->group("Offload"));
  const struct {
    const char* name;
    double* value;
    const char* help;
    double lo;
  } links[] = {
      {"--offload-cpu-gbps", &offload_cpu_gbps,
       "GB/s each way between a GPU and host memory (default: its PCIe, 64 Gen5, 32 Gen4)", 1e-3},
      {"--offload-cpu-latency-us", &offload_cpu_latency_us,
       "fixed cost of one host transfer, us (default 10)", 0.0},
      {"--offload-disk-gbps", &offload_disk_gbps, "GB/s each way to the disk tier (default 7)",
       1e-3},
      {"--offload-disk-latency-us", &offload_disk_latency_us,
       "fixed cost of one disk transfer, us (default 80)", 0.0},
  };
  for (const auto& link : links) {
    offload_options.push_back(app.add_option(link.name, *link.value, link.help)
                                  ->check(number_range(link.lo, 1e9))
                                  ->group("Offload"));
  }
}

namespace {

// --offload's value: cpu:SIZE[,disk:SIZE], each medium at most once.
std::optional<std::string> parse_offload(const std::string& text, OffloadOptions& out) {
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return fmt::format("--offload: '{}' is not TIER:SIZE (cpu:64GiB, disk:1TiB)", item);
    }
    const std::string medium = item.substr(0, colon);
    OffloadTierOptions tier;
    if (medium == "cpu") {
      tier.medium = OffloadMedium::kCpu;
    } else if (medium == "disk") {
      tier.medium = OffloadMedium::kDisk;
    } else {
      return fmt::format("--offload: unknown tier '{}' (cpu, disk)", medium);
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
  // Looked up cpu first: the faster tier first.
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
  if (auto problem = parse_offload(offload, out.offload)) return problem;
  out.offload.policy = *parse_offload_policy(offload_policy);
  for (OffloadTierOptions& tier : out.offload.tiers) {
    const bool cpu = tier.medium == OffloadMedium::kCpu;
    const CLI::Option* gbps = offload_options[cpu ? 1 : 3];
    const CLI::Option* latency = offload_options[cpu ? 2 : 4];
    tier.gbps = given(gbps) ? (cpu ? offload_cpu_gbps : offload_disk_gbps)
                            : default_offload_gbps(tier.medium, gpu.value_or(""));
    tier.latency_us = given(latency) ? (cpu ? offload_cpu_latency_us : offload_disk_latency_us)
                                     : default_offload_latency_us(tier.medium);
  }
  for (std::size_t i = 1; i < offload_options.size(); ++i) {
    const bool cpu = i <= 2;
    const bool has = std::any_of(
        out.offload.tiers.begin(), out.offload.tiers.end(), [&](const OffloadTierOptions& t) {
          return t.medium == (cpu ? OffloadMedium::kCpu : OffloadMedium::kDisk);
        });
    if (given(offload_options[i]) && !has) {
      return fmt::format("{}: --offload has no {} tier", offload_options[i]->get_name(),
                         cpu ? "cpu" : "disk");
    }
  }
  // Which engines and allocators take tiers: sim_options_error.
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
  if (out.engine == EngineKind::kVllm && out.allocator != AllocatorKind::kPaged) {
    // The contiguous allocators model the generic scheduler's whole-request reservation.
    if (given(engine_option)) {
      return fmt::format(
          "--engine vllm needs --allocator paged (the {} allocator runs the generic "
          "scheduler: give --engine generic)",
          allocator);
    }
    out.engine = EngineKind::kGeneric;
  }
  for (const CLI::Option* option : sglang_options) {
    if (given(option) && out.engine != EngineKind::kSglang) {
      return fmt::format("{} is an option of --engine sglang", option->get_name());
    }
  }
  if (out.engine == EngineKind::kSglang) {
    if (out.allocator != AllocatorKind::kPaged) {
      return fmt::format(
          "--engine sglang needs --allocator paged (the {} allocator runs the "
          "generic scheduler: give --engine generic)",
          allocator);
    }
    for (const CLI::Option* option : {max_seqs, max_batched_tokens, watermark}) {
      if (given(option)) {
        return fmt::format(
            "{} is not an option of --engine sglang (its budgets are "
            "--max-running-requests, --chunked-prefill-size and "
            "--max-prefill-tokens)",
            option->get_name());
      }
    }
    out.sglang.policy = *parse_schedule_policy(schedule_policy);
    if (!given(chunked_prefill)) {
      const GpuSpec* spec = gpu ? find_gpu_preset(*gpu) : nullptr;
      out.sglang.chunked_prefill_size =
          spec ? sglang_chunked_prefill_default(static_cast<double>(spec->memory_bytes) /
                                                (1ull << 30))
               : 8192;
    }
    // The activation reserve (set_activation_limits): a prefill batch's tokens.
    out.max_batched_tokens = out.sglang.chunked_prefill_size > 0 ? out.sglang.chunked_prefill_size
                                                                 : out.sglang.max_prefill_tokens;
  }
  if (out.engine == EngineKind::kVllm) {
    // vLLM has no watermark unless one is asked for (SPEC 3.1), and its batch
    // limits are those `vllm serve` picks for the GPU class.
    if (!given(watermark)) out.watermark = 0.0;
    const BatchDefaults batch = vllm_serve_batch_defaults(out.gpu_class);
    if (!given(max_seqs)) out.max_seqs = batch.max_seqs;
    if (!given(max_batched_tokens)) out.max_batched_tokens = batch.max_batched_tokens;
  }
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
  out.evict = *parse_evict_policy(evict);
  if (out.engine == EngineKind::kSglang && out.evict != EvictPolicy::kLru) {
    return fmt::format("--evict {}: the sglang engine's radix tree evicts lru only", evict);
  }
  out.prefix_cache = !no_prefix_cache;
  if (auto problem = resolve_offload(out, gpu)) return problem;
  out.check = *CheckPolicy::parse(check);
  if (!format.empty()) {
    out_format = parse_request_format(format);
    if (!out_format)
      return fmt::format(
          "--format: unknown format '{}' (expected native, mooncake, azure, burstgpt)", format);
  }
  return std::nullopt;
}
std::optional<std::string> disaggregation_problem(const SimOptions& options,
                                                  std::string_view option) {
  if (options.engine == EngineKind::kSglang) {
    return fmt::format(
        "{}: disaggregated serving runs the vllm and generic engines (the sglang engine cannot "
        "receive KV yet)",
        option);
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

void LoadOptionsCli::add_to(CLI::App& app, const std::string& group) {
  rate_option = app.add_option("--request-rate", request_rate,
                               "send the trace's requests, in order, at seeded Poisson times: R "
                               "requests a second on average (the trace's times are ignored)")
                    ->check(number_range(1e-9, 1e9))
                    ->group(group);
  concurrency_option =
      app.add_option("--concurrency", concurrency,
                     "a closed loop of C clients: each sends the trace's next request "
                     "when its previous one ends, as genai-perf --concurrency and vllm "
                     "bench serve --max-concurrency (the trace's times are ignored)")
          ->check(CLI::Range(1u, 1000000u))
          ->group(group);
  concurrency_option->excludes(rate_option);
  // A 64-bit value: CLI11's own conversion wraps an overflow.
  const CLI::Validator uint64_text(
      [](const std::string& text) {
        std::uint64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        return error == std::errc() && end == text.data() + text.size()
                   ? std::string()
                   : "'" + text.substr(0, 40) +
                         "' is not an integer from 0 to 18446744073709551615";
      },
      "UINT64");
  seed_option = app.add_option("--load-seed", seed, "seed of --request-rate's draws (default 0)")
                    ->check(uint64_text)
                    ->group(group);
  warmup_option = app.add_option("--warmup-requests", warmup,
                                 "send the trace's first N requests as a warm-up, wait until "
                                 "they all end, then measure the rest (genai-perf "
                                 "--warmup-request-count); needs --concurrency or --request-rate")
                      ->check(uint64_text)
                      ->group(group);
}

std::optional<std::string> LoadOptionsCli::resolve(LoadOptions& out) const {
  if (rate_option->count() > 0) out.request_rate = request_rate;
  if (concurrency_option->count() > 0) out.concurrency = concurrency;
  out.seed = seed;
  out.warmup = warmup;
  if (seed_option->count() > 0 && rate_option->count() == 0) {
    return std::string("--load-seed seeds --request-rate's draws: give --request-rate");
  }
  if (warmup_option->count() > 0 && !out.any()) {
    return std::string(
        "--warmup-requests warms up a load generator: give --concurrency or --request-rate "
        "(the trace's own times have no warm-up)");
  }
  return std::nullopt;
}

std::string load_args(const LoadOptions& load) {
  std::string out;
  if (load.concurrency) out += fmt::format(" --concurrency {}", *load.concurrency);
  if (load.request_rate) {
    out += fmt::format(" --request-rate {} --load-seed {}", *load.request_rate, load.seed);
  }
  if (load.warmup > 0) out += fmt::format(" --warmup-requests {}", load.warmup);
  return out;
}

}  // namespace kvreplay
