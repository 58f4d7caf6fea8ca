// Options more than one command declares: the run configuration (model,
// geometry, pool size), the simulation and cost-model options of simulate and
// plan, and the --check validator.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_registry.h"
#include "engine/simulator.h"
#include "formats/requests/request.h"
#include "model/run_config.h"

// CLI11's types are only named here; options.cc and the commands include
// CLI/CLI.hpp, which costs each includer seconds of compilation.
namespace CLI {
class App;
class Option;
class Validator;
}  // namespace CLI

namespace kvreplay {

// Prints "command line: PROBLEM" on stderr; returns the usage exit code.
int usage_error(std::string_view problem);

// --check: every | N | end | off.
extern const CLI::Validator kCheckValidator;

// The checks every option of `app` and of its subcommands gets, however deep;
// main() adds them once after every command has declared its options, so no
// option can forget them (SPEC §8):
//   - a FLOAT option refuses NaN and infinities ("nan", "inf", "1e999"):
//     CLI11's Range lets NaN through, since every comparison with NaN is false;
//   - an option or argument that takes a value refuses an empty one
//     (`--report ''` is a usage error, never "no output").
void add_value_checks(CLI::App& app);

// A number option's range, lo and hi included, as CLI::Range checks it but
// with the bounds written as numbers are read ("1e-09", not "0.000000").
CLI::Validator number_range(double lo, double hi);

// An option simulate takes once (into `scalar`) and plan sweeps (`swept`: a
// comma-separated list into `list`, its help saying so).
CLI::Option* scalar_or_list(CLI::App& app, bool swept, const std::string& name,
                            std::uint32_t& scalar, std::vector<std::uint32_t>& list,
                            const std::string& help);
CLI::Option* scalar_or_list(CLI::App& app, bool swept, const std::string& name, double& scalar,
                            std::vector<double>& list, const std::string& help);

// Raw option storage; copied into ConfigOverrides for the options actually given.
struct ConfigOptions {
  std::string model, model_config, dtype, kv_memory, alloc_order, gpu;
  // simulate and plan (`deployment`): --dtype is the model's, as vLLM's;
  // the KV cache's is --kv-cache-dtype (`dtype` above).
  std::string model_dtype;
  CLI::Option* model_dtype_option = nullptr;
  std::uint32_t layers = 0, kv_heads = 0, head_dim = 0, page_tokens = 0, pool_blocks = 0,
                max_seq_tokens = 0, tp = 1, pp = 1, dp_attention = 1, ep = 1;
  double gpu_memory_utilization = 0.9;
  // plan (swept and deployment): --gpu, --tp and --pp are lists it sweeps.
  std::vector<std::string> gpus;
  std::vector<std::uint32_t> tps, pps;
  // plan: --gpu-memory-utilization as a list it sweeps (the engine's memory
  // knob: vLLM's gpu_memory_utilization, SGLang's mem_fraction_static,
  // TensorRT-LLM's free_gpu_memory_fraction).
  std::vector<double> memory_fractions;
  std::vector<CLI::Option*> options;

  // `swept`: plan sweeps --model (and --model-config), --page-tokens and
  // --kv-memory itself (and sizes pools by memory only), so those options are
  // left out. `deployment`: --tp, --pp, --gpu and --gpu-memory-utilization
  // (simulate and plan), and --max-seq-tokens defaulting to the model's context;
  // with `swept` too, --gpu, --tp and --pp take comma-separated lists (gpus,
  // tps, pps), and overrides() leaves them out.
  void add_to(CLI::App& app, bool swept = false, bool deployment = false);

  ConfigOverrides overrides() const;
};

// Options shared by simulate and plan.
struct SimOptionsCli {
  std::string format, allocator = "paged", evict = "lru", check = "end", engine = "vllm",
                      gpu_class = "large", cost_model = "auto";
  double slo_ttft_ms = 0, slo_tpot_ms = 0, slo_attainment = 0.99;
  CLI::Option* slo_ttft = nullptr;
  CLI::Option* slo_tpot = nullptr;
  std::vector<std::string> slo_targets;  // --slo, each a comma-separated list
  CLI::Option* slo_attainment_option = nullptr;
  std::vector<std::string> goodput;      // --goodput KEY:MS ...
  std::vector<std::string> percentiles;  // --percentiles
  std::optional<std::string> resolve_slo(SimOptions& out) const;
  std::vector<CLI::Option*> linear_options;    // --cost-model linear's constants
  std::vector<CLI::Option*> roofline_options;  // the roofline's, by roofline_constant_infos()
  CLI::Option* compute_efficiency = nullptr;   // prefill and decode at once
  double compute_efficiency_value = 0;
  CLI::Option* app_cost_profile = nullptr;  // --cost-profile
  std::string cost_profile_path;
  CLI::Option* gpu_class_option = nullptr;
  CLI::Option* watermark = nullptr;
  CLI::Option* engine_option = nullptr;
  bool engine_given() const;  // --engine was given
  CLI::Option* max_seqs = nullptr;
  CLI::Option* max_batched_tokens = nullptr;
  // The engines' own options (EngineEntry::options), each refused under
  // another engine; a choice's value by the option's name.
  struct OwnOption {
    EngineKind engine;
    const EngineOption* option;
    CLI::Option* cli;
  };
  std::vector<OwnOption> own_options;
  std::map<std::string, std::string> choice_values;
  CLI::App* app_ = nullptr;  // where the options were declared, to find one by name
  bool no_prefix_cache = false;
  // --offload TIER:SIZE[,TIER:SIZE], --offload-policy and each tier's link.
  std::string offload, offload_policy = "lru";
  // --offload-NAME-gbps and --offload-NAME-latency-us, by medium (kOffloadMedia's rows).
  std::array<double, kMaxOffloadTiers> offload_gbps{}, offload_latency_us{};
  std::array<CLI::Option*, kMaxOffloadTiers> offload_gbps_options{}, offload_latency_options{};
  std::vector<CLI::Option*> offload_options;  // all but --offload: refused without it
  // --speculative METHOD:K and its acceptance (engine/speculative.h).
  std::string speculative;
  double spec_acceptance = 0, spec_acceptance_length = 0;
  std::vector<double> spec_acceptance_dist;
  std::uint64_t spec_seed = 0;
  CLI::Option* spec_acceptance_option = nullptr;
  CLI::Option* spec_length_option = nullptr;
  SimOptions defaults;
  // plan (`swept`): --max-seqs and --max-batched-tokens take comma-separated
  // lists here, and --offload several settings (plan_offload_settings); the
  // plan sets defaults' and `offload` from them before each resolve.
  std::vector<std::uint32_t> max_seqs_list, max_batched_list;

  // `check_help`: what --check checks in this command.
  void add_to(CLI::App& app, const std::string& check_help, bool swept = false);
  // add_to's share: --offload, --offload-policy and the tiers' links.
  void add_offload_to(CLI::App& app);
  // add_to's share: the engines' own options, as their entries declare them.
  void add_engine_options_to(CLI::App& app);
  // add_to's share: --speculative and its acceptance; resolve's share.
  void add_speculative_to(CLI::App& app);
  std::optional<std::string> resolve_speculative(SimOptions& out) const;

  // Fills `out`; returns a problem for a bad value. `gpu`: the --gpu preset,
  // whose vLLM GPU class applies unless --gpu-class is given.
  std::optional<std::string> resolve(SimOptions& out, std::optional<RequestFormat>& out_format,
                                     const std::optional<std::string>& gpu = std::nullopt) const;
  // resolve's share for the engine: the allocators it runs, its own options
  // and the shared ones it refuses, its defaults (engine/engine_registry.h).
  std::optional<std::string> resolve_engine(SimOptions& out,
                                            const std::optional<std::string>& gpu) const;
  // resolve's share for --offload and its options.
  std::optional<std::string> resolve_offload(SimOptions& out,
                                             const std::optional<std::string>& gpu) const;
};

// The load generators' options (SPEC 3.5), of simulate and plan:
// --request-rate, --concurrency, --load-seed, --warmup-requests.
struct LoadOptionsCli {
  double request_rate = 0;
  std::uint32_t concurrency = 0;
  std::uint64_t seed = 0;
  std::uint64_t warmup = 0;
  std::uint64_t measure_after = 0;
  double burstiness = 1.0;
  std::string ramp_up;
  double ramp_start = 0, ramp_end = 0;
  double range_ratio = 0;
  std::string range_style = "vllm";
  CLI::Option* rate_option = nullptr;
  CLI::Option* concurrency_option = nullptr;
  CLI::Option* seed_option = nullptr;
  CLI::Option* warmup_option = nullptr;
  CLI::Option* measure_after_option = nullptr;
  CLI::Option* burstiness_option = nullptr;
  CLI::Option* ramp_option = nullptr;
  CLI::Option* ramp_start_option = nullptr;
  CLI::Option* ramp_end_option = nullptr;
  CLI::Option* range_option = nullptr;
  CLI::Option* range_style_option = nullptr;
  double time_scale = 1.0;
  CLI::Option* time_scale_option = nullptr;
  // plan (`swept`): --request-rate, --concurrency and --time-scale take
  // comma-separated lists here; the plan sets the scalars above from them,
  // one swept value at a time, before each resolve.
  std::vector<double> rates, time_scales;
  std::vector<std::uint32_t> concurrencies;

  void add_to(CLI::App& app, const std::string& group, bool swept = false);
  // Fills `out` from the options given; a problem for a pair that does not go
  // together (--load-seed without --request-rate, --warmup-requests without
  // a generator, a ramp without its ends). A ramp's request count is the
  // caller's to set (LoadOptions::ramp_requests).
  std::optional<std::string> resolve(LoadOptions& out) const;
};
// The same load as simulate's options (" --concurrency 8 ..."; empty for
// the trace's own times), for a command line printed to reproduce a run.
std::string load_args(const LoadOptions& load);
// plan's --offload: the settings it sweeps, each as simulate's --offload
// takes it. Comma-separated tiers form one setting until "none" or a medium
// the setting already has starts the next: "none,cpu:256GiB" is two settings,
// "cpu:64GiB,disk:1TiB" one of two tiers, "cpu:64GiB,cpu:256GiB" two. Empty
// text: no setting (nothing given).
std::vector<std::string> plan_offload_settings(const std::string& text);

// Why `options` cannot run disaggregated prefill and decode (`option`, the
// flag that asked for it, leads the message), or nullopt: the decode side
// receives KV into its prefix cache, so it needs the paged allocator, the
// prefix cache and an engine whose entry declares receives_kv.
std::optional<std::string> disaggregation_problem(const SimOptions& options,
                                                  std::string_view option);

// The batch limits the activation reserve of --gpu is sized for
// (model/deployment.h): those the simulation runs with. And the engine's
// page size: --engine sglang's is 1 token unless --page-tokens is given.
void set_activation_limits(ConfigOverrides& overrides, const SimOptions& options);
// --dp-attention N: the engine's limits for one scheduler running the N
// replicas as one (EngineDefaults::attention_replicas); after
// set_activation_limits, which sizes one replica's activation reserve.
void apply_attention_replicas(SimOptions& options, std::uint32_t replicas);

}  // namespace kvreplay
