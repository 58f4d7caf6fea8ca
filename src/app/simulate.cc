#include "app/simulate.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <optional>
#include <system_error>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/gpu_prices.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "io/standard_output.h"
#include "report/html.h"

namespace kvreplay {

namespace {

// The fleet page's comparison: the trace on one instance whose pool holds
// every instance's blocks (same engine, TP and options), its hit rate beside
// the router's. Null when that pool is larger than kvreplay simulates or the
// run fails (the page then has no such card).
nlohmann::json single_pool_figures(const SimulateRequest& request, const RunConfig& config,
                                   const nlohmann::json& fleet_report, ProgressLine* progress) {
  // The trace is read again: only a file can be (not standard input, a pipe).
  std::error_code error;
  if (request.trace_path == "-" || !std::filesystem::is_regular_file(request.trace_path, error)) {
    return nullptr;
  }
  const std::uint64_t blocks = std::uint64_t{config.kv.pool_blocks} * request.fleet.instances();
  if (blocks > kMaxSupportedPoolBlocks) return nullptr;
  RunConfig one = config;
  one.kv.pool_blocks = static_cast<std::uint32_t>(blocks);
  one.kv_memory.reset();
  auto result = simulate_file(request.trace_path, request.format, one, request.options, nullptr,
                              nullptr, SimulateTerminal{progress, false});
  if (progress) progress->clear();
  if (!result || result.value().violated ||
      result.value().report["trace"]["sha256"] != fleet_report["trace"]["sha256"]) {
    return nullptr;  // or the file changed since the fleet read it
  }
  return {{"hit_rate", result.value().report["prefix_cache"]["hit_rate"]}, {"pool_blocks", blocks}};
}

}  // namespace

int run_simulate(const SimulateRequest& request) {
  auto config = resolve_sim_config(request.overrides);
  if (!config) {
    eprint("{}\n", config.error().to_string());
    return kExitInput;
  }
  const bool fleet = request.fleet.instances() > 1;
  if (fleet || request.options.offload.any()) {
    // Every instance's pool and tiers at once (resolve_sim_config checked one pool).
    if (auto problem =
            check_simulation_memory(config.value(), request.options, request.fleet.instances())) {
      eprint("command line: {}: {}\n",
             request.options.offload.any()   ? "--offload"
             : request.fleet.disaggregated() ? "--prefill-replicas"
                                             : "--replicas",
             *problem);
      return kExitInput;
    }
  }
  // Opened before the run, so a path that cannot be written fails at once.
  OutputSet outputs;
  outputs.add_input("REQUESTS", request.trace_path);
  if (request.overrides.model_config) {
    outputs.add_input("--model-config", *request.overrides.model_config);
  }
  for (const auto& [option, path] : request.inputs) outputs.add_input(option, path);
  OutputFile* report_out = nullptr;
  OutputFile* timeline_out = nullptr;
  OutputFile* html_out = nullptr;
  OutputFile* requests_out = nullptr;
  OutputFile* router_log_out = nullptr;
  OutputFile* kv_events_out = nullptr;
  OutputFile* trace_out = nullptr;
  if ((!request.report_path.empty() &&
       (report_out = outputs.open("the report", request.report_path, OutputFile::Flow::kWhole,
                                  "--report")) == nullptr) ||
      (!request.timeline_path.empty() &&
       (timeline_out = outputs.open("the timeline", request.timeline_path,
                                    OutputFile::Flow::kStream, "--timeline")) == nullptr) ||
      (!request.html_path.empty() &&
       (html_out = outputs.open("the HTML report", request.html_path, OutputFile::Flow::kWhole,
                                "--html")) == nullptr) ||
      (!request.requests_path.empty() &&
       (requests_out = outputs.open("the request times", request.requests_path,
                                    OutputFile::Flow::kStream, "--requests")) == nullptr) ||
      (!request.router_log_path.empty() &&
       (router_log_out = outputs.open("the router log", request.router_log_path,
                                      OutputFile::Flow::kStream, "--router-log")) == nullptr) ||
      (!request.kv_events_path.empty() &&
       (kv_events_out = outputs.open("the KV events", request.kv_events_path,
                                     OutputFile::Flow::kStream, "--kv-events")) == nullptr) ||
      (!request.emit_trace_path.empty() &&
       (trace_out = outputs.open("the emitted trace", request.emit_trace_path,
                                 OutputFile::Flow::kStream, "--emit-trace")) == nullptr)) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  // The summary never mixes with an output on stdout.
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;
  std::optional<TimelineSampler> sampler;  // --html: the run over time, downsampled
  if (html_out != nullptr && !fleet) {
    sampler.emplace(TimelineSampler::kDefaultBuckets, /*simulate=*/true,
                    request.options.offload.tiers.size());
  }
  std::vector<TimelineSampler> fleet_samplers;  // --html with a fleet: one per instance
  auto progress = ProgressLine::for_stderr(!request.quiet, 16, request.trace_path);
  const SimulateTerminal terminal{progress.get(), color_enabled(summary_stream)};
  auto result =
      fleet ? simulate_fleet_file(request.trace_path, request.format, config.value(),
                                  request.options, request.fleet,
                                  FleetOutputs{timeline_out, requests_out, router_log_out,
                                               html_out != nullptr ? &fleet_samplers : nullptr,
                                               kv_events_out, trace_out},
                                  terminal)
            : simulate_file(request.trace_path, request.format, config.value(), request.options,
                            timeline_out, sampler ? &*sampler : nullptr, terminal, SimFaults{},
                            requests_out, kv_events_out, trace_out);
  if (progress) progress->clear();
  if (!result) {
    eprint("{}\n", result.error().to_string());
    return kExitInput;
  }
  for (const std::string& warning : result.value().warnings) {
    eprint("kvreplay simulate: {}\n", warning);
  }
  if (!result.value().overload_warning.empty()) {
    eprint("kvreplay simulate: {}\n", result.value().overload_warning);
  }
  if (outputs.failed()) {  // the run stopped early: its result is incomplete
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (report_out != nullptr) {
    report_out->write(
        result.value().report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (html_out != nullptr) {
    html_out->write(
        fleet
            ? render_fleet_html(result.value().report, fleet_samplers, result.value().latency_cdf,
                                single_pool_figures(request, config.value(), result.value().report,
                                                    progress.get()))
            : render_run_html(result.value().report, *sampler, "step", result.value().latency_cdf));
  }
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(summary_stream, result.value().summary);
  if (result.value().violated) {
    const auto& violations = result.value().report["invariants"]["violations"];
    eprint("{}: invariant violated: {}\n", request.trace_path,
           violations.empty() ? std::string("?") : violations[0]["message"].get<std::string>());
    return kExitCheckFailed;
  }
  return kExitOk;
}

namespace {

class SimulateCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("REQUESTS", request_.trace_path, "request trace (- for stdin)")->required();
    config_.add_to(app, /*swept=*/false, /*deployment=*/true);
    options_.add_to(app,
                    "invariant checks: after every step, every N steps, at the end (default), or "
                    "off");
    app.add_option("--report", request_.report_path,
                   "write the JSON report here (- for stdout; the summary then goes to stderr)");
    app.add_option("--timeline", request_.timeline_path,
                   "write one CSV row per step here (- for stdout)");
    app.add_option("--html", request_.html_path,
                   "write a self-contained HTML page (summary and charts) here");
    app.add_option("--requests", request_.requests_path,
                   "write one CSV row per request here (times in ms: queueing, TTFT, TPOT, "
                   "end-to-end; - for stdout)");
    app.add_option("--kv-events", request_.kv_events_path,
                   "write the caches' changes here as vLLM's KV events (SGLang's under --engine "
                   "sglang), one KVEventBatch "
                   "JSON line per step (- for stdout; kvreplay events checks them)");
    app.add_option("--emit-trace", request_.emit_trace_path,
                   "paged allocator: write the schedule the run made as a kvtrace here "
                   "(admits, appends, frees, the prefix cache's or radix tree's and the offload "
                   "tiers' ops, a disaggregated fleet's KV through the link tier), "
                   "for kvreplay replay --backend cpu --verify (- for stdout)");
    app.add_flag("-q,--quiet", request_.quiet, "print no summary");
    // A fleet (SPEC 3.6): replicas behind a router.
    replicas_ = app.add_option("--replicas", request_.fleet.replicas,
                               "identical instances of the engine behind a router, each with its "
                               "own pool and TP x PP GPUs (default 1: one instance)")
                    ->check(CLI::Range(1u, 4096u))
                    ->group("Fleet");
    pd_.push_back(app.add_option("--prefill-replicas", request_.fleet.prefill_replicas,
                                 "disaggregated serving: instances that compute prompts (and "
                                 "the first token), routed by --router; with --decode-replicas")
                      ->check(CLI::Range(1u, 4096u))
                      ->group("Fleet"));
    pd_.push_back(app.add_option("--decode-replicas", request_.fleet.decode_replicas,
                                 "disaggregated serving: instances that receive a prompt's KV "
                                 "and decode, chosen by least KV usage; with --prefill-replicas")
                      ->check(CLI::Range(1u, 4096u))
                      ->group("Fleet"));
    transfer_options_.push_back(
        app.add_option("--kv-transfer-gbps", request_.fleet.kv_transfer_gbps,
                       "disaggregated: GB/s of the link KV crosses from prefill to decode "
                       "(default 50: a 400 Gb/s RDMA NIC per GPU)")
            ->check(number_range(1e-6, 1e6))
            ->group("Fleet"));
    transfer_options_.push_back(
        app.add_option("--kv-transfer-latency-us", request_.fleet.kv_transfer_latency_us,
                       "disaggregated: fixed cost of one request's transfer, us (default 20)")
            ->check(number_range(0.0, 1e9))
            ->group("Fleet"));
    router_options_.push_back(
        app.add_option("--router", router_,
                       fmt::format("fleet router (default {}): {}",
                                   to_string(RouterOptions{}.policy), router_policy_help()))
            ->check(CLI::IsMember(router_policy_names()))
            ->group("Fleet"));
    prefix_options_.push_back(
        app.add_option("--router-overlap-weight", request_.fleet.router.overlap_weight,
                       router_policies_reading(kReadsOverlapWeight) +
                           ": weight of the prompt blocks to compute against the "
                           "decode blocks (Dynamo's kv_overlap_score_weight; default 1)")
            ->check(number_range(0.0, 1e6))
            ->group("Fleet"));
    prefix_options_.push_back(
        app.add_option("--router-temperature", request_.fleet.router.temperature,
                       router_policies_reading(kReadsTemperature) +
                           ": 0 takes the lowest cost (default); above 0, a seeded "
                           "softmax over the normalised costs")
            ->check(number_range(0.0, 1e6))
            ->group("Fleet"));
    prefix_options_.push_back(
        app.add_option("--router-view", view_,
                       router_policies_reading(kReadsView) +
                           ": what the router knows of each instance's cache: precise "
                           "(its KV events; default) or approximate (a router-side LRU of what it "
                           "sent where)")
            ->check(CLI::IsMember(router_view_names()))
            ->group("Fleet"));
    approx_options_.push_back(
        app.add_option("--router-approx-blocks", request_.fleet.router.approx_blocks,
                       "approximate view: pages of prompt remembered per instance (default: "
                       "the instance's pool)")
            ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
            ->group("Fleet"));
    approx_options_.push_back(
        app.add_option("--router-approx-ttl-s", request_.fleet.router.approx_ttl_s,
                       "approximate view: seconds an entry lives after the last request that "
                       "named it (default 120)")
            ->check(number_range(0.0, 1e9))
            ->group("Fleet"));
    router_options_.push_back(
        app.add_option("--router-seed", request_.fleet.router.seed,
                       fmt::format("seed of the draws of {} (a softmax: with a temperature "
                                   "above 0; default 0)",
                                   router_policies_reading(kReadsSeed)))
            ->group("Fleet"));
    router_options_.push_back(
        app.add_option("--router-log", request_.router_log_path,
                       "write one CSV row per routing decision here: the instance chosen, the "
                       "cached blocks seen on each and each one's cost (- for stdout)")
            ->group("Fleet"));
    prices_.add_to(app, "Fleet");
    // Load generators (SPEC 3.5): the trace's requests at other times.
    load_.add_to(app, "Load");
    app.footer(
        "Examples:\n"
        "  kvreplay simulate traces/requests/mooncake_conv.jsonl --kv-memory 40GiB "
        "--max-seq-tokens 131072\n"
        "  kvreplay simulate traces/requests/azure_conv.csv --kv-memory 16GiB --allocator "
        "contiguous-max --report contiguous.json\n"
        "  kvreplay simulate traces/requests/azure_conv.csv --model llama-3.1-70b --gpu h100-80gb "
        "--tp 4 --slo-ttft-ms 2000 --slo-tpot-ms 100 --requests times.csv");
  }
  int run() override {
    request_.overrides = config_.overrides();
    if (auto problem =
            options_.resolve(request_.options, request_.format, request_.overrides.gpu)) {
      return usage_error(*problem);
    }
    set_activation_limits(request_.overrides, request_.options);
    apply_attention_replicas(request_.options, request_.overrides.dp_attention.value_or(1));
    request_.options.kv_events = !request_.kv_events_path.empty();
    request_.options.emit_trace = !request_.emit_trace_path.empty();
    if (!prices_.prices_path.empty())
      request_.inputs.emplace_back("--gpu-prices", prices_.prices_path);
    if (!options_.cost_profile_path.empty()) {
      request_.inputs.emplace_back("--cost-profile", options_.cost_profile_path);
    }
    if (auto problem = resolve_fleet()) return usage_error(*problem);
    if (auto problem = resolve_load()) return usage_error(*problem);
    if (auto problem = prices_.load()) {
      eprint("kvreplay simulate: {}\n", *problem);
      return kExitInput;
    }
    auto price = prices_.price(request_.overrides.gpu);
    if (!price) return usage_error(price.error());
    request_.options.gpu_hour_usd = price.value();
    return run_simulate(request_);
  }

 private:
  std::optional<std::string> resolve_load() { return load_.resolve(request_.options.load); }

  // The fleet options: router options only with --replicas above 1, the
  // prefix-aware ones only with that router, the approximate view's with it.
  std::optional<std::string> resolve_fleet() {
    RouterOptions& router = request_.fleet.router;
    router.policy = *parse_router_policy(router_);
    router.view = *parse_router_view(view_);
    auto given = [](const CLI::Option* option) { return option->count() > 0; };
    const bool pd = given(pd_[0]) || given(pd_[1]);
    if (pd) {
      if (!given(pd_[0]) || !given(pd_[1])) {
        return fmt::format("{} needs {} too",
                           given(pd_[0]) ? "--prefill-replicas" : "--decode-replicas",
                           given(pd_[0]) ? "--decode-replicas" : "--prefill-replicas");
      }
      if (given(replicas_)) {
        return std::string(
            "--replicas counts instances that prefill and decode; with --prefill-replicas and "
            "--decode-replicas give one or the other");
      }
      if (auto problem = disaggregation_problem(request_.options, "--prefill-replicas")) {
        return problem;
      }
    } else {
      for (const CLI::Option* option : transfer_options_) {
        if (given(option)) {
          return fmt::format("{} is an option of --prefill-replicas and --decode-replicas",
                             option->get_name());
        }
      }
    }
    if (!pd && request_.fleet.replicas == 1) {
      for (const auto* list : {&router_options_, &prefix_options_, &approx_options_}) {
        for (const CLI::Option* option : *list) {
          if (given(option)) {
            return fmt::format("{} routes requests among replicas: give --replicas 2 or more",
                               option->get_name());
          }
        }
      }
      return std::nullopt;
    }
    // An option of the policies that read it (router_policies.cc's table).
    const std::pair<const CLI::Option*, std::uint32_t> reads[] = {
        {prefix_options_[0], kReadsOverlapWeight},
        {prefix_options_[1], kReadsTemperature},
        {prefix_options_[2], kReadsView},
        {approx_options_[0], kReadsApprox},
        {approx_options_[1], kReadsApprox}};
    for (const auto& [option, read] : reads) {
      if (given(option) && (router_reads(router.policy) & read) == 0) {
        return fmt::format("{} is an option of --router {}", option->get_name(),
                           router_policies_reading(read));
      }
    }
    for (const CLI::Option* option : approx_options_) {
      if (given(option) && router.view != RouterView::kApproximate) {
        return fmt::format("{} is an option of --router-view approximate", option->get_name());
      }
    }
    return std::nullopt;
  }

  SimulateRequest request_;
  std::string router_{to_string(RouterOptions{}.policy)};
  std::string view_ = "precise";
  CLI::Option* replicas_ = nullptr;
  PriceOptions prices_;
  LoadOptionsCli load_;
  std::vector<CLI::Option*> router_options_, prefix_options_, approx_options_, pd_,
      transfer_options_;
  ConfigOptions config_;
  SimOptionsCli options_;
};

}  // namespace

std::unique_ptr<Command> make_simulate_command() {
  return std::make_unique<SimulateCommand>();
}

}  // namespace kvreplay
