#include "app/plan/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/gpu_prices.h"
#include "app/plan/plan_internal.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "formats/requests/request_reader.h"
#include "io/json_file.h"
#include "io/output.h"
#include "io/sha256.h"
#include "io/spool.h"
#include "io/standard_output.h"
#include "model/gpu.h"
#include "model/presets.h"
#include "report/html.h"
#include "report/report.h"

namespace kvreplay {

namespace {

int run_plan_steps(const PlanRequest& request) {
  const bool slo = request.options.slo.any();
  const unsigned jobs =
      request.jobs != 0 ? request.jobs : std::max(1u, std::thread::hardware_concurrency());
  PlanSweep sweep;
  if (auto code = resolve_sweep(request, sweep)) return *code;
  if (auto code = check_sweep_memory(sweep, jobs)) return *code;
  // Opened before the sweep, so a path that cannot be written fails at once.
  OutputSet outputs;
  outputs.add_input("REQUESTS", request.trace_path);
  for (const std::string& config : request.model_configs)
    outputs.add_input("--model-config", config);
  for (const PlanPart& part : request.parts) outputs.add_input("PARTS", part.path);
  OutputFile* report_out = nullptr;
  OutputFile* html_out = nullptr;
  if ((!request.report_path.empty() &&
       (report_out = outputs.open(request.shard ? "the partial plan" : "the plan",
                                  request.report_path, OutputFile::Flow::kWhole, "--report")) ==
           nullptr) ||
      (!request.html_path.empty() &&
       (html_out = outputs.open("the HTML report", request.html_path, OutputFile::Flow::kWhole,
                                "--html")) == nullptr)) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  // The table never mixes with an output on stdout.
  std::FILE* table_stream = outputs.writes_stdout() ? stderr : stdout;
  // A trace that cannot be read twice (standard input, a FIFO) is read once,
  // into a temporary file every simulation then reads (each reads the trace
  // as it goes).
  std::optional<SpooledInput> spooled;
  std::string trace_file = request.trace_path;
  if (needs_spool(request.trace_path) && !sweep.merging) {
    auto spool = spool_input(request.trace_path, request.format);  // checked as it is spooled
    if (!spool) {
      eprint("{}\n", spool.error());
      return kExitInput;
    }
    spooled.emplace(std::move(spool).value());
    trace_file = spooled->path();
  }
  PlanSimulator simulator(request, trace_file, sweep);
  if (auto code = simulate_cells(request, sweep, simulator, jobs)) return *code;
  if (sweep.merging) {
    if (auto problem = fill_from_parts(request.parts, sweep, request.search_min, slo)) {
      eprint("{}\n", *problem);
      return kExitInput;
    }
  }
  std::vector<std::string> warned;
  if (auto code = report_cell_problems(request, sweep, warned)) return *code;
  // The smallest pool with no preemption, per model and page size: a binary
  // search over pool_blocks (assuming more memory never adds preemptions),
  // which stops where memory stops mattering, and never goes past the largest
  // pool kvreplay simulates or that the searches run at once fit in memory.
  if (request.search_min) {
    if (auto code = run_searches(request, sweep, simulator, jobs)) return *code;
  }
  // A fleet sweep's answer, simulated again (a shard has no answer: its merge does).
  if (sweep.fleet_sweep && !request.shard) {
    if (auto code = answer_fleets(request, sweep, simulator, jobs)) return *code;
  }
  // A merge's other answers, and the cells that decide them, simulated again.
  if (sweep.merging) {
    if (auto code = verify_merged_answers(request, sweep, simulator, jobs)) return *code;
  }
  if (request.shard) {
    // The part: this shard's figures, and what plan-merge checks them by.
    auto trace_sha256 = trace_identity(trace_file, request.trace_path, request.format);
    if (!trace_sha256) {
      eprint("{}\n", trace_sha256.error().to_string());
      return kExitInput;
    }
    const nlohmann::json part = part_json(request, sweep, trace_sha256.value());
    report_out->write(part.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!outputs.commit()) {
      eprint("{}\n", outputs.error());
      return kExitInput;
    }
    if (!request.quiet) {
      fmt::print(
          table_stream, "plan: shard {}/{}: {} of {} cells and {} of {} searches, written to {}\n",
          request.shard->index, request.shard->count, sweep.run_cells.size(), sweep.cells.size(),
          part["searches"].size(), sweep.searches.size(), request.report_path);
    }
    return kExitOk;
  }

  const PlanOutput plan = plan_output(request, sweep, !warned.empty());
  if (report_out != nullptr) {
    report_out->write(plan.report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
                      "\n");
  }
  if (html_out != nullptr) html_out->write(render_plan_html(plan.report));
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(table_stream, plan.table);
  return kExitOk;
}

}  // namespace

int run_plan(const PlanRequest& request) {
  // Whatever the estimates missed: exit 2 with a message, and the outputs'
  // temporary files removed as run_plan_steps unwinds.
  try {
    return run_plan_steps(request);
  } catch (const std::bad_alloc&) {
    eprint(
        "kvreplay plan: out of memory: run fewer simulations at once (-j) or sweep "
        "smaller pools (README, \"Memory bounds (plan)\")\n");
    return kExitInput;
  }
}

namespace {

// "I/N" with 1 <= I <= N.
Result<PlanShard, std::string> parse_shard(const std::string& text) {
  const std::string problem =
      fmt::format("--shard: '{}' is not I/N with 1 <= I <= N (e.g. 2/8)", text);
  const std::size_t slash = text.find('/');
  if (slash == std::string::npos) return Unexpected{problem};
  auto number = [](std::string_view digits) -> std::optional<std::uint32_t> {
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    std::uint32_t value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + static_cast<std::uint32_t>(c - '0');
    }
    return value;
  };
  auto index = number(std::string_view(text).substr(0, slash));
  auto count = number(std::string_view(text).substr(slash + 1));
  if (!index || !count || *index < 1 || *index > *count) return Unexpected{problem};
  return PlanShard{*index, *count};
}

// A value as a POSIX shell reads it back: bare when it is plain, else in
// single quotes.
std::string shell_quoted(const std::string& value) {
  const bool plain = !value.empty() && value.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_./:,=+-@%") == std::string::npos;
  if (plain) return value;
  std::string out = "'";
  for (char c : value) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The options given to plan that a cell's `kvreplay simulate` takes as they
// are: all but the swept ones (the cell's line names its own values), the
// load's (load_args) and the plan's own; the offload tiers' links and policy
// (`group` "Offload") apart, for the cells that have tiers.
std::string passthrough_args(const CLI::App& app, const std::string& group) {
  static const std::set<std::string, std::less<>> kNotPassed = {
      "--model",      "--model-config",
      "--kv-memory",  "--page-tokens",
      "--report",     "--html",
      "--jobs",       "--no-search",
      "--quiet",      "--replicas",
      "--pd",         "--router",
      "--shard",      "--gpu",
      "--tp",         "--pp",
      "--gpu-prices", "--gpu-hour-usd",
      "--objective",  "--offload",
      "--max-seqs",   "--max-batched-tokens",
      "--help"};
  std::string out;
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() == 0 || option->get_positional()) continue;
    // The load's options are load_args' (each cell's load, swept or not).
    if (option->get_group() == "Load") continue;
    if ((option->get_group() == "Offload") != (group == "Offload")) continue;
    const std::string name = option->get_name();
    if (kNotPassed.contains(name)) continue;
    // One memory knob applies to every cell; several are swept, each cell's own.
    if (name == "--gpu-memory-utilization" && option->results().size() > 1) continue;
    if (option->get_expected_min() == 0) {
      out += " " + name;
      continue;
    }
    for (const std::string& value : option->results())
      out += " " + name + " " + shell_quoted(value);
  }
  return out;
}

class PlanCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app_ = &app;
    app.add_option("REQUESTS", request_.trace_path, "request trace")->required();
    config_.add_to(app, /*swept=*/true, /*deployment=*/true);
    options_.add_to(app,
                    "invariant checks in every simulation of the sweep and the search: after "
                    "every step, every N steps, at the end (default), or off; a failed check "
                    "exits 1 naming the sweep point",
                    /*swept=*/true);
    app.add_option("--model", request_.models,
                   "model presets to sweep (comma-separated): " + model_preset_list())
        ->delimiter(',')
        ->default_str(std::string(kDefaultSimModel));
    app.add_option("--model-config", request_.model_configs,
                   "Hugging Face config.json files to sweep too (comma-separated)")
        ->delimiter(',');
    app.add_option("--kv-memory", request_.kv_memories,
                   "KV memory sizes per GPU to sweep (comma-separated; required unless --gpu, "
                   "whose memory then sizes one pool per model)")
        ->delimiter(',');
    app.add_option("--page-tokens", request_.page_tokens, "page sizes to sweep (comma-separated)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 0xFFFFFFFFu));
    app.add_option("--report", request_.report_path,
                   "write the sweep as JSON here (- for stdout; the table then goes to stderr)");
    app.add_option("--html", request_.html_path, "write the sweep as a self-contained HTML page");
    app.add_option("-j,--jobs", request_.jobs,
                   "parallel simulations (default: one per core); each holds up to 32 MiB + 128 "
                   "bytes a pool block, and those at once must fit the memory limit, else exit 2 "
                   "(README, \"Memory bounds (plan)\")");
    app.add_flag("--no-search", no_search_, "skip the search for the smallest KV memory");
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
    app.add_option("--objective", objective_,
                   "one answer across every swept cell, the best that serves by: gpus, "
                   "usd-per-hour or usd-per-mtok (these two need --gpu-hour-usd or --gpu-prices); "
                   "with none serving, the nearest miss and what binds it")
        ->check(CLI::IsMember(plan_objective_names()));
    declare_fleet(app);
    app.add_option("--shard", shard_,
                   "I/N: run only the I-th of N disjoint parts of the sweep and write them as a "
                   "partial report to --report, for `kvreplay plan-merge` (docs/SCALE.md)")
        ->group("Sharding");
    app.footer(
        "Examples:\n"
        "  kvreplay plan traces/requests/azure_conv.csv \\\n"
        "      --model llama-3-8b,llama-3-70b --kv-memory 8GiB,16GiB,40GiB --page-tokens 16,32\n"
        "  kvreplay plan traces/requests/mooncake_conv.jsonl --kv-memory 40GiB,80GiB --check 100 "
        "--no-search --report plan.json\n"
        "  kvreplay plan traces/requests/azure_conv.csv --model qwen3-32b,gpt-oss-120b --gpu "
        "h100-80gb "
        "--no-search\n"
        "  kvreplay plan traces/requests/azure_conv.csv --model llama-3.1-70b --gpu h100-80gb,h200 "
        "--tp 2,4,8 --slo-ttft-ms 2000 --slo-tpot-ms 80\n"
        "  kvreplay plan traces/requests/mooncake_conv.jsonl --gpu h100-80gb,h200 --replicas 1,2,4 "
        "--pd 2:2 --router round-robin,prefix-aware --slo-ttft-ms 10000 --slo-tpot-ms 300 "
        "--gpu-hour-usd 3 --no-search");
  }
  // Fleets (SPEC 3.6): lists of replicas, P:D splits and routers to sweep.
  void declare_fleet(CLI::App& app) {
    replicas_ = app.add_option("--replicas", replicas_list_,
                               "fleets to sweep: instances behind a router, each TP x PP GPUs "
                               "(comma-separated, e.g. 1,2,4,8); answered by the fewest GPUs")
                    ->delimiter(',')
                    ->check(CLI::Range(1u, 4096u))
                    ->group("Fleet");
    pd_ = app.add_option("--pd", pd_list_,
                         "disaggregated fleets to sweep: P:D prefill and decode instances "
                         "(comma-separated, e.g. 1:1,1:3,2:2)")
              ->delimiter(',')
              ->group("Fleet");
    router_ = app.add_option("--router", routers_,
                             fmt::format("routers to sweep for fleets of 2 or more "
                                         "(comma-separated; default {}): {}",
                                         to_string(RouterOptions{}.policy), router_policy_help()))
                  ->delimiter(',')
                  ->check(CLI::IsMember(router_policy_names()))
                  ->group("Fleet");
    transfer_.push_back(
        app.add_option("--kv-transfer-gbps", transfer_defaults_.kv_transfer_gbps,
                       "with --pd: GB/s of the link KV crosses from prefill to decode (default 50)")
            ->check(number_range(1e-6, 1e6))
            ->group("Fleet"));
    transfer_.push_back(app.add_option("--kv-transfer-latency-us",
                                       transfer_defaults_.kv_transfer_latency_us,
                                       "with --pd: fixed cost of one request's transfer, us "
                                       "(default 20)")
                            ->check(number_range(0.0, 1e9))
                            ->group("Fleet"));
    prices_.add_to(app, "Fleet");
    // Load generators (SPEC 3.5): every cell runs the trace's requests so.
    load_.add_to(app, "Load", /*swept=*/true);
  }

  // One point of the options swept besides the deployment (offload settings,
  // batch limits, load): the values to set before resolving, the simulate
  // options naming them (the load's come from load_args) and the label's
  // words for those with more than one value.
  struct SweptSetting {
    std::optional<std::string> offload;
    std::optional<std::uint32_t> max_seqs, max_batched_tokens, concurrency;
    std::optional<double> request_rate, time_scale;
    std::string args;
    std::vector<std::string> labels;
    void apply(SimOptionsCli& options, LoadOptionsCli& load) const {
      if (offload) options.offload = *offload;
      if (max_seqs) options.defaults.max_seqs = *max_seqs;
      if (max_batched_tokens) options.defaults.max_batched_tokens = *max_batched_tokens;
      if (concurrency) load.concurrency = *concurrency;
      if (request_rate) load.request_rate = *request_rate;
      if (time_scale) load.time_scale = *time_scale;
    }
  };
  // Every combination of the swept lists, in the order: offload, --max-seqs,
  // --max-batched-tokens, load (--request-rate, --concurrency or
  // --time-scale). One empty setting when none is given.
  std::vector<SweptSetting> swept_settings() const {
    std::vector<SweptSetting> out(1);
    auto cross = [&out](const auto& values, auto set) {
      if (values.empty()) return;
      std::vector<SweptSetting> next;
      for (const SweptSetting& base : out) {
        for (std::size_t i = 0; i < values.size(); ++i) {
          const auto& value = values[i];
          // A value given twice is one setting.
          if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i), value) !=
              values.begin() + static_cast<std::ptrdiff_t>(i)) {
            continue;
          }
          SweptSetting s = base;
          set(s, value, values.size() > 1);
          next.push_back(std::move(s));
        }
      }
      out = std::move(next);
    };
    cross(plan_offload_settings(options_.offload),
          [](SweptSetting& s, const std::string& text, bool several) {
            s.offload = text;
            if (text != "none") s.args += " --offload " + text;
            if (several) s.labels.push_back("offload " + text);
          });
    cross(options_.max_seqs_list, [](SweptSetting& s, std::uint32_t v, bool several) {
      s.max_seqs = v;
      s.args += fmt::format(" --max-seqs {}", v);
      if (several) s.labels.push_back(fmt::format("max-seqs {}", v));
    });
    cross(options_.max_batched_list, [](SweptSetting& s, std::uint32_t v, bool several) {
      s.max_batched_tokens = v;
      s.args += fmt::format(" --max-batched-tokens {}", v);
      if (several) s.labels.push_back(fmt::format("max-batched-tokens {}", v));
    });
    cross(load_.rates, [](SweptSetting& s, double v, bool several) {
      s.request_rate = v;
      if (several) s.labels.push_back(fmt::format("rate {:g}/s", v));
    });
    cross(load_.concurrencies, [](SweptSetting& s, std::uint32_t v, bool several) {
      s.concurrency = v;
      if (several) s.labels.push_back(fmt::format("concurrency {}", v));
    });
    cross(load_.time_scales, [](SweptSetting& s, double v, bool several) {
      s.time_scale = v;
      if (several) s.labels.push_back(fmt::format("time x{:g}", v));
    });
    return out;
  }

  // The fleets swept: each --replicas, then each --pd split; one instance
  // when neither is given.
  Result<std::vector<FleetOptions>, std::string> swept_fleets() const {
    std::vector<FleetOptions> fleets;
    for (std::uint32_t replicas : replicas_list_) {
      FleetOptions fleet = transfer_defaults_;
      fleet.replicas = replicas;
      fleets.push_back(fleet);
    }
    for (const std::string& split : pd_list_) {
      const std::size_t colon = split.find(':');
      unsigned long prefill = 0;
      unsigned long decode = 0;
      bool ok = colon != std::string::npos && colon > 0 && colon + 1 < split.size() &&
                split.find_first_not_of("0123456789:") == std::string::npos &&
                split.find(':', colon + 1) == std::string::npos && colon <= 4 &&
                split.size() - colon - 1 <= 4;
      if (ok) {
        prefill = std::stoul(split.substr(0, colon));
        decode = std::stoul(split.substr(colon + 1));
        ok = prefill >= 1 && decode >= 1 && prefill <= 4096 && decode <= 4096;
      }
      if (!ok) {
        return Unexpected{fmt::format(
            "--pd: '{}' is not P:D, prefill and decode instances from 1 to 4096 (e.g. 2:2)",
            split)};
      }
      FleetOptions fleet = transfer_defaults_;
      fleet.prefill_replicas = static_cast<std::uint32_t>(prefill);
      fleet.decode_replicas = static_cast<std::uint32_t>(decode);
      fleets.push_back(fleet);
    }
    if (fleets.empty()) fleets.emplace_back();
    return fleets;
  }

  // The fleet options' problems: routers without a fleet to route, transfer
  // options without --pd, a split the engine cannot serve.
  std::optional<std::string> fleet_problem(const std::vector<FleetOptions>& fleets,
                                           const SimOptions& options) const {
    const bool routed =
        std::any_of(fleets.begin(), fleets.end(), [](const FleetOptions& f) { return f.routed(); });
    if (router_->count() > 0 && !routed) {
      return std::string(
          "--router routes requests among replicas: sweep --replicas 2 or more, or --pd with 2 "
          "or more prefill instances");
    }
    if (pd_->count() == 0) {
      for (const CLI::Option* option : transfer_) {
        if (option->count() > 0) return fmt::format("{} is an option of --pd", option->get_name());
      }
      return std::nullopt;
    }
    return disaggregation_problem(options, "--pd");
  }

  int run() override {
    if (!shard_.empty()) {
      auto shard = parse_shard(shard_);
      if (!shard) return usage_error(shard.error());
      if (request_.report_path.empty()) {
        return usage_error("--shard: needs --report, the file the shard's part is written to");
      }
      if (!request_.html_path.empty()) {
        return usage_error("--html: not with --shard: plan-merge writes the page from the parts");
      }
      // Answers: a fleet's, the smallest KV memory, the smallest deployment.
      const bool answered =
          replicas_->count() > 0 || pd_->count() > 0 || !no_search_ || request_.kv_memories.empty();
      if (needs_spool(request_.trace_path) && answered) {
        return usage_error(
            "--shard: plan-merge verifies the plan's answers by simulating them again, which "
            "needs the trace: shard a trace file, not standard input or a FIFO");
      }
      request_.shard = shard.value();
      request_.command = arguments_after("plan");
    }
    return resolve_and_run();
  }

  // plan-merge: this plan (parsed from the parts' command line) assembled from
  // `parts` instead of simulated, written where the merge says.
  int merge(std::vector<PlanPart> parts, const PlanMergeRequest& merge) {
    request_.parts = std::move(parts);
    request_.shard.reset();
    request_.report_path = merge.report_path;
    request_.html_path = merge.html_path;
    request_.quiet = merge.quiet;
    request_.merge_verify_all = merge.verify_all;
    return resolve_and_run();
  }

 private:
  int resolve_and_run() {
    request_.passthrough_args = passthrough_args(*app_, "");
    request_.offload_passthrough_args = passthrough_args(*app_, "Offload");
    request_.overrides = config_.overrides();
    if (request_.models.empty() && request_.model_configs.empty()) {
      request_.models = {std::string(kDefaultSimModel)};
    }
    if (request_.page_tokens.empty()) {
      // The engine's page size (its entry's: SGLang's is one token), else 16.
      const std::uint32_t engine_page =
          engine_entry(*parse_engine(options_.engine)).defaults.page_tokens;
      request_.page_tokens = {engine_page != 0 ? engine_page : 16u};
    }
    request_.search_min = !no_search_;
    if (request_.kv_memories.empty() && config_.gpus.empty()) {
      return usage_error(
          "--kv-memory: missing: give the sizes to sweep, or --gpu to size one "
          "pool per model from its memory");
    }
    // The deployments: every --gpu x --tp x --pp, each GPU with the batch
    // limits of its class (unless given).
    std::vector<std::optional<std::string>> gpus;
    for (const std::string& gpu : config_.gpus) {
      if (find_gpu_preset(gpu) == nullptr) {
        return usage_error(
            fmt::format("--gpu: unknown GPU '{}' (known: {})", gpu, gpu_preset_list()));
      }
      gpus.emplace_back(gpu);
    }
    if (gpus.empty()) gpus.emplace_back(std::nullopt);
    const std::vector<std::uint32_t> tps =
        config_.tps.empty() ? std::vector<std::uint32_t>{1} : config_.tps;
    const std::vector<std::uint32_t> pps =
        config_.pps.empty() ? std::vector<std::uint32_t>{1} : config_.pps;
    auto fleets = swept_fleets();
    if (!fleets) return usage_error(fleets.error());
    request_.fleet_sweep = replicas_->count() > 0 || pd_->count() > 0;
    if (auto problem = prices_.load()) {
      eprint("kvreplay {}: {}\n", request_.parts.empty() ? "plan" : "plan-merge", *problem);
      return kExitInput;
    }
    // The engine's memory knob, when several are swept: one deployment each.
    std::vector<std::optional<double>> fractions;
    for (double f : config_.memory_fractions) {
      if (!(f > 0.0 && f <= 1.0)) {
        return usage_error(fmt::format("--gpu-memory-utilization: {} is not in (0, 1]", f));
      }
      if (config_.memory_fractions.size() > 1) fractions.emplace_back(f);
    }
    if (fractions.empty()) fractions.emplace_back(std::nullopt);
    std::vector<std::string> routers = routers_;
    if (routers.empty()) routers.emplace_back(to_string(RouterOptions{}.policy));
    const std::vector<SweptSetting> settings = swept_settings();
    for (const auto& gpu : gpus) {
      for (const SweptSetting& setting : settings) {
        setting.apply(options_, load_);
        SimOptions options;
        if (auto problem = options_.resolve(options, request_.format, gpu)) {
          return usage_error(*problem);
        }
        if (auto problem = load_.resolve(options.load)) return usage_error(*problem);
        if (auto problem = fleet_problem(fleets.value(), options)) return usage_error(*problem);
        auto price = prices_.price(gpu);
        if (!price) return usage_error(price.error());
        options.gpu_hour_usd = price.value();
        for (std::uint32_t tp : tps) {
          for (std::uint32_t pp : pps) {
            for (FleetOptions fleet : fleets.value()) {
              // A fleet of one (or with one prefill instance) routes nothing: one
              // deployment, whatever the routers.
              const std::size_t swept_routers = fleet.routed() ? routers.size() : 1;
              for (std::size_t r = 0; r < swept_routers; ++r) {
                fleet.router.policy = *parse_router_policy(routers[r]);
                for (const std::optional<double>& fraction : fractions) {
                  PlanDeployment d{gpu,   tp,       pp,           options,
                                   fleet, fraction, setting.args, setting.labels};
                  request_.deployments.push_back(std::move(d));
                }
              }
            }
          }
        }
      }
    }
    request_.options = request_.deployments[0].options;
    request_.slo_attainment = request_.options.slo.attainment;
    if (!objective_.empty()) {
      request_.objective = parse_plan_objective(objective_);
      const bool priced =
          std::all_of(request_.deployments.begin(), request_.deployments.end(),
                      [](const PlanDeployment& d) { return d.options.gpu_hour_usd.has_value(); });
      if (*request_.objective != PlanObjective::kGpus && !priced) {
        return usage_error(fmt::format(
            "--objective {}: needs a price for every swept GPU (--gpu-hour-usd, or --gpu-prices "
            "with each --gpu)",
            objective_));
      }
    }
    request_.overrides.gpu = gpus[0];
    set_activation_limits(request_.overrides, request_.options);
    return run_plan(request_);
  }

  CLI::App* app_ = nullptr;
  std::string objective_;
  PlanRequest request_;
  ConfigOptions config_;
  SimOptionsCli options_;
  bool no_search_ = false;
  std::string shard_;
  std::vector<std::uint32_t> replicas_list_;
  std::vector<std::string> pd_list_;
  std::vector<std::string> routers_;
  FleetOptions transfer_defaults_;
  CLI::Option* replicas_ = nullptr;
  CLI::Option* pd_ = nullptr;
  CLI::Option* router_ = nullptr;
  std::vector<CLI::Option*> transfer_;
  PriceOptions prices_;
  LoadOptionsCli load_;
};

}  // namespace

std::optional<int> merge_plan_command(const std::vector<std::string>& command,
                                      std::vector<PlanPart> parts, const PlanMergeRequest& request,
                                      std::string& error) {
  CLI::App app{"kvreplay plan"};
  PlanCommand plan;
  plan.declare(app);
  std::vector<std::string> arguments = command;
  std::reverse(arguments.begin(), arguments.end());  // CLI11 takes them last first
  try {
    app.parse(arguments);
  } catch (const CLI::ParseError& parse_error) {
    error = parse_error.what();
    return std::nullopt;
  }
  return plan.merge(std::move(parts), request);
}

std::unique_ptr<Command> make_plan_command() {
  return std::make_unique<PlanCommand>();
}

}  // namespace kvreplay
