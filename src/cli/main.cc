// kvreplay: the command line. A thin main: an options struct per subcommand,
// and each subcommand is a function (src/replay/run_replay.h, ...).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli/suggest.h"
#include "core/config.h"
#include "dataplane/kernel_bench.h"
#include "gpu/device.h"
#include "io/standard_output.h"
#include "replay/run_replay.h"
#include "report/compare.h"
#include "sim/convert.h"
#include "sim/run_simulate.h"

namespace {

using kvreplay::ConfigOverrides;

std::string version_text() {
  kvreplay::GpuProbe gpu = kvreplay::probe_gpu();
  std::string cuda;
  if (!gpu.built_with_cuda) {
    cuda = "built without CUDA";
  } else if (gpu.devices > 0) {
    cuda = fmt::format("CUDA, {} device(s): {}", gpu.devices, gpu.name);
  } else {
    cuda = fmt::format("CUDA, {}", gpu.reason);
  }
  return fmt::format("kvreplay {} ({})", KVREPLAY_VERSION, cuda);
}

// Raw option storage; copied into ConfigOverrides for the options actually given.
struct ConfigOptions {
  std::string model, dtype, kv_memory, alloc_order;
  std::uint32_t layers = 0, kv_heads = 0, head_dim = 0, page_tokens = 0, pool_blocks = 0,
                max_seq_tokens = 0;
  std::vector<CLI::Option*> options;

  // `swept`: plan sweeps --model, --page-tokens and --kv-memory itself (and
  // sizes pools by memory only), so those options are left out.
  void add_to(CLI::App& app, bool swept = false) {
    auto positive = CLI::Range(1u, 0xFFFFFFFFu);
    std::string models;
    for (const auto& preset : kvreplay::model_presets()) {
      models += models.empty() ? "" : ", ";
      models += preset.name;
    }
    auto group = [](CLI::Option* option) { return option->group("Configuration"); };
    options.assign(10, nullptr);
    if (!swept) options[0] = group(app.add_option("--model", model, "model preset: " + models));
    options[1] =
        group(app.add_option("--layers", layers, "layers (overrides the model)")->check(positive));
    options[2] = group(
        app.add_option("--kv-heads", kv_heads, "KV heads (overrides the model)")->check(positive));
    options[3] =
        group(app.add_option("--head-dim", head_dim, "head dimension (overrides the model)")
                  ->check(positive));
    options[4] = group(app.add_option("--dtype", dtype, "fp32, fp16, bf16 (default) or fp8"));
    if (!swept) {
      options[5] =
          group(app.add_option("--page-tokens", page_tokens, "tokens per page (block); default 16")
                    ->check(positive));
      options[6] = group(app.add_option("--pool-blocks", pool_blocks, "pool size in blocks")
                             ->check(CLI::Range(1u, 0xFFFFFFFEu)));
      options[7] = group(
          app.add_option("--kv-memory", kv_memory, "pool size in memory: 80GiB, 512MiB, or bytes"));
    }
    options[8] =
        group(app.add_option("--max-seq-tokens", max_seq_tokens, "longest sequence; default 32768")
                  ->check(positive));
    options[9] = group(app.add_option("--alloc-order", alloc_order,
                                      "free-block order: lifo (default), fifo, lowest"));
  }

  ConfigOverrides overrides() const {
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
    return out;
  }
};

const CLI::Validator kCheckValidator(
    [](std::string& value) -> std::string {
      return kvreplay::CheckPolicy::parse(value)
                 ? std::string()
                 : "must be every, end, off or a positive integer N";
    },
    "every|N|end|off");

// Options shared by simulate and plan.
struct SimOptionsCli {
  std::string format, allocator = "paged", evict = "lru", check = "end";
  bool no_prefix_cache = false;
  kvreplay::SimOptions defaults;

  // `check_help`: what --check checks in this command.
  void add_to(CLI::App& app, const std::string& check_help) {
    app.add_option("--format", format,
                   "request format: native, mooncake, azure, burstgpt (default: by content)")
        ->group("Simulation");
    app.add_option("--allocator", allocator,
                   "paged (default), contiguous-max, contiguous-pow2, contiguous-oracle")
        ->check(CLI::IsMember(kvreplay::allocator_names()))
        ->group("Simulation");
    app.add_option("--evict", evict, "prefix-cache eviction: lru (default), fifo, lfu")
        ->check(CLI::IsMember(kvreplay::evict_policy_names()))
        ->group("Simulation");
    app.add_flag("--no-prefix-cache", no_prefix_cache, "disable prefix caching")
        ->group("Simulation");
    app.add_option("--max-seqs", defaults.max_seqs, "most sequences running at once (default 256)")
        ->check(CLI::Range(1u, 1u << 20))
        ->group("Simulation");
    app.add_option("--max-batched-tokens", defaults.max_batched_tokens,
                   "token budget per step, chunked prefill (default 8192)")
        ->check(CLI::Range(1u, 1u << 30))
        ->group("Simulation");
    app.add_option("--watermark", defaults.watermark,
                   "fraction of blocks kept free at admission (default 0.01)")
        ->check(CLI::Range(0.0, 0.5))
        ->group("Simulation");
    app.add_option("--step-ms", defaults.cost.step_ms, "cost model: fixed ms per step (default 5)")
        ->check(CLI::Range(0.0, 1e6))
        ->group("Cost model");
    app.add_option("--prefill-token-ms", defaults.cost.prefill_token_ms,
                   "cost model: ms per prompt token computed (default 0.025)")
        ->check(CLI::Range(0.0, 1e6))
        ->group("Cost model");
    app.add_option("--decode-seq-ms", defaults.cost.decode_seq_ms,
                   "cost model: ms per sequence decoded (default 0.01)")
        ->check(CLI::Range(0.0, 1e6))
        ->group("Cost model");
    app.add_option("--kv-bandwidth-gbps", defaults.cost.kv_bandwidth_gbps,
                   "cost model: GB/s at which attention reads KV (default 3000)")
        ->check(CLI::Range(1e-3, 1e9))
        ->group("Cost model");
    app.add_option("--check", check, check_help)->check(kCheckValidator);
  }

  // Fills `out`; returns a problem for a bad value.
  std::optional<std::string> resolve(kvreplay::SimOptions& out,
                                     std::optional<kvreplay::RequestFormat>& out_format) const {
    out = defaults;
    out.allocator = *kvreplay::parse_allocator(allocator);
    out.evict = *kvreplay::parse_evict_policy(evict);
    out.prefix_cache = !no_prefix_cache;
    out.check = *kvreplay::CheckPolicy::parse(check);
    if (!format.empty()) {
      out_format = kvreplay::parse_request_format(format);
      if (!out_format)
        return fmt::format(
            "--format: unknown format '{}' (expected native, mooncake, azure, burstgpt)", format);
    }
    return std::nullopt;
  }
};

// replay's data-plane options (SPEC 5; README "Data plane").
struct DataPlaneCli {
  std::string backend = "none", arena_limit;

  void add_to(CLI::App& app, kvreplay::DataPlaneRequest& request) {
    app.add_option("--backend", backend,
                   "none (default: metadata only), cpu (a KV arena in host memory) or cuda")
        ->check(CLI::IsMember(kvreplay::backend_names()))
        ->group("Data plane");
    app.add_flag("--verify", request.options.verify,
                 "compare every live sequence's bytes with what it wrote or inherited, at every "
                 "check event, every event --check checks, and the end (exit 1 on a mismatch)")
        ->group("Data plane");
    app.add_flag("--attention", request.options.attention,
                 "run paged decode attention (every layer) at every decode event")
        ->group("Data plane");
    app.add_option("--arena-limit", arena_limit,
                   "largest arena to allocate (default 4GiB on cpu; on cuda the device's free "
                   "memory less 1 GiB)")
        ->group("Data plane");
  }

  std::optional<std::string> resolve(kvreplay::DataPlaneRequest& request) const {
    request.backend = *kvreplay::parse_backend(backend);
    if (request.backend == kvreplay::BackendKind::kNone) {
      if (request.options.verify) return "--verify: needs --backend cpu or --backend cuda";
      if (request.options.attention) return "--attention: needs --backend cpu or --backend cuda";
    }
    if (!arena_limit.empty()) {
      auto bytes = kvreplay::parse_memory_size(arena_limit);
      if (!bytes) return fmt::format("--arena-limit: {}", bytes.error());
      request.arena_limit = bytes.value();
    }
    return std::nullopt;
  }
};

// The `kernels` subcommand's options.
struct KernelsCli {
  kvreplay::KernelBenchRequest request;
  std::string backend = "cuda", model = "llama-3-8b", dtype = "bf16", arena_limit;
  std::uint32_t kv_heads = 0, head_dim = 0;
  CLI::App* command = nullptr;

  void add_to(CLI::App& app) {
    command = app.add_subcommand(
        "kernels",
        "time the data-plane kernels against the device copy roof, on paged and identity tables");
    command->add_option("--backend", backend, "cuda (default) or cpu")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    command->add_option("--model", model, "geometry of one layer: a model preset (llama-3-8b)");
    command->add_option("--kv-heads", kv_heads, "KV heads (overrides the model)")
        ->check(CLI::Range(1u, 0xFFFFFFFFu));
    command->add_option("--head-dim", head_dim, "head dimension (overrides the model)")
        ->check(CLI::Range(1u, 0xFFFFFFFFu));
    command->add_option("--dtype", dtype, "fp32, fp16, bf16 (default) or fp8")
        ->check(CLI::IsMember(kvreplay::dtype_names()));
    command->add_option("--group", request.group, "query heads per KV head (default 4)")
        ->check(CLI::Range(1u, 1024u));
    command->add_option("--batch", request.batches, "batch sizes (default 1,8,32,128; cpu 1,8,32)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 20));
    command
        ->add_option("--context", request.contexts,
                     "context lengths (default 512,4096,16384; cpu 256,1024)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 24));
    command->add_option("--page-tokens", request.page_tokens, "page sizes (default 16,64; cpu 16)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 16));
    command->add_option("--iters", request.iterations, "timed launches per point (default 20)")
        ->check(CLI::Range(1, 100000));
    command->add_option("--warmup", request.warmup, "untimed launches first (default 3)")
        ->check(CLI::Range(0, 100000));
    command->add_option("--arena-limit", arena_limit, "largest arena of a sweep point");
    command->add_option("--seed", request.seed, "seed of the fragmenting trace (default 1)");
    command->add_option("--report", request.report_path,
                        "write the results as JSON here (- for stdout; the table then goes to "
                        "stderr)");
    command->add_flag("-q,--quiet", request.quiet, "print no table");
    command->footer(
        "Examples:\n"
        "  kvreplay kernels --report kernels.json\n"
        "  kvreplay kernels --batch 8,64 --context 2048,32768 --page-tokens 16 --dtype fp16\n"
        "  kvreplay kernels --backend cpu --batch 1,4 --context 256 --iters 5");
  }

  std::optional<std::string> resolve() {
    request.backend = *kvreplay::parse_backend(backend);
    auto preset = kvreplay::find_model_preset(model);
    if (!preset) return fmt::format("--model: unknown model '{}'", model);
    request.kv_heads = kv_heads != 0 ? kv_heads : preset->kv_heads;
    request.head_dim = head_dim != 0 ? head_dim : preset->head_dim;
    request.dtype = *kvreplay::parse_dtype(dtype);
    if (!arena_limit.empty()) {
      auto bytes = kvreplay::parse_memory_size(arena_limit);
      if (!bytes) return fmt::format("--arena-limit: {}", bytes.error());
      request.arena_limit = bytes.value();
    }
    return std::nullopt;
  }
};

// Parses the command line. Returns the exit code when the run ends here: 0
// after --help or --version; 2 after a usage error, with one line on stderr
// (the closest name to a misspelled command or option).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() != 0) {
      if (auto message = kvreplay::unknown_name_message(app, argc, argv)) {
        fmt::print(stderr, "{}\n", *message);
        return kvreplay::kExitInput;
      }
    }
    int code = app.exit(error);
    return code == 0 ? kvreplay::kExitOk : kvreplay::kExitInput;
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  // Temporaries removed on SIGINT/SIGTERM/SIGHUP/SIGPIPE; a stdout write error exits 2.
  kvreplay::install_output_guards();
  CLI::App app{"kvreplay: replay and simulate paged KV-cache traces against a real block pool"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.footer(
      "Examples:\n"
      "  kvreplay replay traces/quickstart.jsonl\n"
      "  kvreplay simulate traces/requests/azure_conv.csv --kv-memory 8GiB\n"
      "  kvreplay replay --help\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage or input error, 3 pool exhausted.");
  app.require_subcommand(0, 1);

  // replay
  kvreplay::ReplayRequest replay;
  ConfigOptions replay_config;
  std::string replay_check = "end", replay_oom = "fail";
  CLI::App* replay_cmd =
      app.add_subcommand("replay", "replay a kvtrace event trace against the real pool and tables");
  replay_cmd
      ->add_option("TRACE", replay.trace_path,
                   "kvtrace file (.jsonl, .json, gzip by content; - for stdin)")
      ->required();
  replay_config.add_to(*replay_cmd);
  replay_cmd
      ->add_option(
          "--check", replay_check,
          "invariant checks: after every event, every N events, at the end (default), or off")
      ->check(kCheckValidator);
  replay_cmd
      ->add_option("--on-oom", replay_oom,
                   "pool exhaustion: fail (exit 3, default) or skip the operation and go on")
      ->check(CLI::IsMember({"fail", "skip"}));
  replay_cmd->add_option("--report", replay.report_path,
                         "write the JSON report here (- for stdout; the summary then goes to "
                         "stderr)");
  replay_cmd->add_option("--timeline", replay.timeline_path,
                         "write one CSV row per event here (- for stdout)");
  replay_cmd->add_option("--html", replay.html_path,
                         "write a self-contained HTML page (summary and charts) here");
  replay_cmd->add_flag("-q,--quiet", replay.quiet, "print no summary");
  DataPlaneCli replay_dataplane;
  replay_dataplane.add_to(*replay_cmd, replay.dataplane);
  replay_cmd->footer(
      "Examples:\n"
      "  kvreplay replay traces/prefix_partial.jsonl --check every --report report.json\n"
      "  kvreplay replay traces/fork_cow.jsonl --backend cpu --verify\n"
      "  gzip -c traces/quickstart.jsonl | kvreplay replay - --kv-memory 8GiB --on-oom skip "
      "--check off");

  // validate
  std::string validate_path;
  ConfigOptions validate_config;
  CLI::App* validate_cmd =
      app.add_subcommand("validate", "check that a kvtrace is well formed and consistent");
  validate_cmd->add_option("TRACE", validate_path, "kvtrace file (- for stdin)")->required();
  validate_config.add_to(*validate_cmd);
  validate_cmd->footer("Example:\n  kvreplay validate traces/fork_cow.jsonl");

  // convert
  std::string convert_input, convert_format, convert_output = "-";
  CLI::App* convert_cmd = app.add_subcommand(
      "convert",
      "convert a request trace (native, Mooncake, Azure, BurstGPT) to native JSON Lines");
  convert_cmd
      ->add_option("INPUT", convert_input,
                   "request trace (format told by content, gzip too; - for stdin)")
      ->required();
  convert_cmd
      ->add_option("--format", convert_format,
                   "read as this format instead of telling it by content")
      ->check(CLI::IsMember(kvreplay::request_format_names()));
  convert_cmd->add_option("-o,--output", convert_output,
                          "write here (default - for stdout); a file appears only once the whole "
                          "input converted");
  convert_cmd->footer(
      "Examples:\n"
      "  kvreplay convert traces/requests/mooncake_conv.jsonl -o requests.jsonl\n"
      "  kvreplay convert traces/requests/azure_conv.csv -o requests.jsonl");

  // simulate
  kvreplay::SimulateRequest simulate;
  ConfigOptions simulate_config;
  SimOptionsCli simulate_options;
  CLI::App* simulate_cmd = app.add_subcommand(
      "simulate",
      "schedule a request trace (native, Mooncake, Azure, BurstGPT) over the real pool");
  simulate_cmd->add_option("REQUESTS", simulate.trace_path, "request trace (- for stdin)")
      ->required();
  simulate_config.add_to(*simulate_cmd);
  simulate_options.add_to(
      *simulate_cmd,
      "invariant checks: after every step, every N steps, at the end (default), or off");
  simulate_cmd->add_option("--report", simulate.report_path,
                           "write the JSON report here (- for stdout; the summary then goes to "
                           "stderr)");
  simulate_cmd->add_option("--timeline", simulate.timeline_path,
                           "write one CSV row per step here (- for stdout)");
  simulate_cmd->add_option("--html", simulate.html_path,
                           "write a self-contained HTML page (summary and charts) here");
  simulate_cmd->add_flag("-q,--quiet", simulate.quiet, "print no summary");
  simulate_cmd->footer(
      "Examples:\n"
      "  kvreplay simulate traces/requests/mooncake_conv.jsonl --kv-memory 40GiB "
      "--max-seq-tokens 131072\n"
      "  kvreplay simulate traces/requests/azure_conv.csv --kv-memory 16GiB --allocator "
      "contiguous-max --report contiguous.json");

  // plan
  kvreplay::PlanRequest plan;
  ConfigOptions plan_config;
  SimOptionsCli plan_options;
  bool plan_no_search = false;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan",
      "sweep models, KV memory and page sizes over a request trace; find the smallest KV memory");
  plan_cmd->add_option("REQUESTS", plan.trace_path, "request trace")->required();
  plan_config.add_to(*plan_cmd, /*swept=*/true);
  plan_options.add_to(*plan_cmd,
                      "invariant checks in every simulation of the sweep and the search: after "
                      "every step, every N steps, at the end (default), or off; a failed check "
                      "exits 1 naming the sweep point");
  plan_cmd->add_option("--model", plan.models, "models to sweep (comma-separated)")
      ->delimiter(',')
      ->default_str("llama-3-8b");
  plan_cmd
      ->add_option("--kv-memory", plan.kv_memories, "KV memory sizes to sweep (comma-separated)")
      ->delimiter(',')
      ->required();
  plan_cmd->add_option("--page-tokens", plan.page_tokens, "page sizes to sweep (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 0xFFFFFFFFu));
  plan_cmd->add_option(
      "--report", plan.report_path,
      "write the sweep as JSON here (- for stdout; the table then goes to stderr)");
  plan_cmd->add_option("--html", plan.html_path, "write the sweep as a self-contained HTML page");
  plan_cmd->add_option("-j,--jobs", plan.jobs, "parallel simulations (default: one per core)");
  plan_cmd->add_flag("--no-search", plan_no_search, "skip the search for the smallest KV memory");
  plan_cmd->add_flag("-q,--quiet", plan.quiet, "print no table");
  plan_cmd->footer(
      "Examples:\n"
      "  kvreplay plan traces/requests/azure_conv.csv \\\n"
      "      --model llama-3-8b,llama-3-70b --kv-memory 8GiB,16GiB,40GiB --page-tokens 16,32\n"
      "  kvreplay plan traces/requests/mooncake_conv.jsonl --kv-memory 40GiB,80GiB --check 100 "
      "--no-search --report plan.json");

  // compare
  kvreplay::CompareRequest compare;
  CLI::App* compare_cmd = app.add_subcommand(
      "compare", "compare two reports of the same trace metric by metric (exit 1 on a regression)");
  compare_cmd->add_option("BASE", compare.base_path, "the baseline report (JSON)")->required();
  compare_cmd->add_option("NEW", compare.new_path, "the report to check (JSON)")->required();
  compare_cmd->add_option("--threshold", compare.thresholds,
                          "NAME=VALUE, repeatable: 0.005 absolute, 2% relative to the base, or "
                          "off (NAME: a metric or its last part, e.g. peak_used)");
  compare_cmd->add_option("--thresholds", compare.thresholds_file,
                          "a JSON object of thresholds, e.g. {\"peak_used\": \"2%\"} "
                          "(--threshold wins)");
  compare_cmd->add_flag("-q,--quiet", compare.quiet,
                        "print no table (regressions still go to stderr)");
  compare_cmd->footer(
      "Examples:\n"
      "  kvreplay replay traces/quickstart.jsonl --report base.json --quiet\n"
      "  kvreplay replay traces/quickstart.jsonl --alloc-order fifo --report new.json --quiet\n"
      "  kvreplay compare base.json new.json --threshold peak_used=2% --threshold "
      "waste_ratio_mean=0.005\n"
      "Defaults: waste ratios +0.001 (absolute), peak_used / cow.copies / preemptions +1%, "
      "hit_rate -0.001,\n"
      "oom.events any increase; an invariant violation (or --verify mismatch) or leaving "
      "status ok always fails.\n"
      "Exit codes: 0 no regression, 1 a regression, 2 unreadable or incomparable reports.");

  // kernels
  KernelsCli kernels;
  kernels.add_to(app);

  if (auto code = parse_command_line(app, argc, argv)) return *code;
  if (replay_cmd->parsed()) {
    replay.overrides = replay_config.overrides();
    replay.check = *kvreplay::CheckPolicy::parse(replay_check);
    replay.on_oom = replay_oom == "skip" ? kvreplay::OomPolicy::kSkip : kvreplay::OomPolicy::kFail;
    if (auto problem = replay_dataplane.resolve(replay.dataplane)) {
      fmt::print(stderr, "command line: {}\n", *problem);
      return kvreplay::kExitInput;
    }
    return kvreplay::run_replay(replay);
  }
  if (simulate_cmd->parsed()) {
    simulate.overrides = simulate_config.overrides();
    if (auto problem = simulate_options.resolve(simulate.options, simulate.format)) {
      fmt::print(stderr, "command line: {}\n", *problem);
      return kvreplay::kExitInput;
    }
    return kvreplay::run_simulate(simulate);
  }
  if (plan_cmd->parsed()) {
    plan.overrides = plan_config.overrides();
    if (plan.models.empty()) plan.models = {"llama-3-8b"};
    if (plan.page_tokens.empty()) plan.page_tokens = {16};
    plan.search_min = !plan_no_search;
    if (auto problem = plan_options.resolve(plan.options, plan.format)) {
      fmt::print(stderr, "command line: {}\n", *problem);
      return kvreplay::kExitInput;
    }
    return kvreplay::run_plan(plan);
  }
  if (validate_cmd->parsed()) {
    return kvreplay::run_validate(validate_path, validate_config.overrides());
  }
  if (convert_cmd->parsed()) {
    std::optional<kvreplay::RequestFormat> format;
    if (!convert_format.empty()) format = kvreplay::parse_request_format(convert_format);
    return kvreplay::run_convert(convert_input, format, convert_output);
  }
  if (compare_cmd->parsed()) return kvreplay::run_compare(compare);
  if (kernels.command->parsed()) {
    if (auto problem = kernels.resolve()) {
      fmt::print(stderr, "command line: {}\n", *problem);
      return kvreplay::kExitInput;
    }
    return kvreplay::run_kernels(kernels.request);
  }
  kvreplay::put_text(stdout, app.help());
  return kvreplay::kExitOk;
}
