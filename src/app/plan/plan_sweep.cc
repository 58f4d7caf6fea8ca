// The plan's sweep: its cells and searches, and the simulations of its cells.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include "app/exit_codes.h"
#include "app/options.h"
#include "app/plan/plan_internal.h"
#include "app/simulation/sim_report.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "formats/requests/request_reader.h"
#include "io/output.h"
#include "io/sha256.h"
#include "io/standard_output.h"
#include "report/duration_text.h"

namespace kvreplay {

// The first violation of a simulation: "invariant I1 violated" and its message.
ViolationText first_violation(const SimulationResult& result) {
  const auto& violations = result.report["invariants"]["violations"];
  if (violations.empty()) return {"invariant violated", "?"};
  return {fmt::format("invariant {} violated", violations[0]["invariant"].get<std::string>()),
          violations[0]["message"].get<std::string>()};
}

// What --kv-memory must say for a pool of exactly `blocks` blocks: GiB with the
// fewest decimals whose value, rounded up, still floors to `blocks` (checked by
// parsing it back as --kv-memory is parsed); bytes when no decimal does.
std::string reproducible_memory(std::uint32_t blocks, const PagedKvConfig& kv) {
  const std::uint64_t bytes = std::uint64_t{blocks} * kv.block_bytes();
  const double gib = static_cast<double>(bytes) / static_cast<double>(1ull << 30);
  for (int decimals = 0; decimals <= 9; ++decimals) {
    const double scale = std::pow(10.0, decimals);
    const std::string text = fmt::format("{:.{}f}GiB", std::ceil(gib * scale) / scale, decimals);
    auto parsed = parse_memory_size(text);
    if (!parsed) continue;
    auto pool = pool_blocks_for_memory(kv, parsed.value());
    if (pool && pool.value() == blocks) return text;
  }
  return std::to_string(bytes);
}

// How a row names its model: the preset, or the geometry when options changed it.
std::string model_label(const RunConfig& config) {
  if (!config.model.empty()) return config.model;
  return fmt::format("{}x{}x{}", config.kv.layers, config.kv.kv_heads, config.kv.head_dim);
}

// How a row names its deployment: "h100-80gb x4 (tp 4)", "- x1" without a
// GPU, "h100-80gb x8 (tp 2, 4 replicas, prefix-aware)", "h200 x4 (pd 1:3,
// round-robin)": its GPUs in all, then what differs from one instance of one.
std::string deployment_label(const PlanDeployment& d) {
  std::vector<std::string> parts;
  if (d.tp > 1) parts.push_back(fmt::format("tp {}", d.tp));
  if (d.pp > 1) parts.push_back(fmt::format("pp {}", d.pp));
  if (d.fleet.disaggregated()) {
    parts.push_back(fmt::format("pd {}:{}", d.fleet.prefill_replicas, d.fleet.decode_replicas));
  } else if (d.fleet.instances() > 1) {
    parts.push_back(fmt::format("{} replicas", d.fleet.instances()));
  }
  if (d.fleet.routed()) parts.emplace_back(to_string(d.fleet.router.policy));
  if (d.memory_fraction) parts.push_back(fmt::format("memory {}", *d.memory_fraction));
  parts.insert(parts.end(), d.setting_labels.begin(), d.setting_labels.end());
  std::string text = fmt::format("{} x{}", d.gpu.value_or("-"), d.gpus());
  if (!parts.empty()) text += fmt::format(" ({})", fmt::join(parts, ", "));
  return text;
}

nlohmann::json fleet_json(const FleetOptions& fleet) {
  // A fleet that routes nothing (one instance, one prefill instance) has no router.
  nlohmann::json out = {
      {"instances", fleet.instances()},
      {"replicas", fleet.disaggregated() ? 0 : fleet.instances()},
      {"prefill", fleet.prefill_replicas},
      {"decode", fleet.decode_replicas},
      {"router", fleet.routed() ? nlohmann::json(std::string(to_string(fleet.router.policy)))
                                : nlohmann::json(nullptr)}};
  if (fleet.disaggregated()) {
    out["kv_transfer_gbps"] = fleet.kv_transfer_gbps;
    out["kv_transfer_latency_us"] = fleet.kv_transfer_latency_us;
  }
  return out;
}

// Whether a simulation serves the trace: no preemption, nothing skipped for a
// pool too small, and with SLOs every target met and at least
// `slo_attainment` of the requests meeting the joint rule.
bool serves(const CellFigures& figures, double slo_attainment) {
  // Requests longer than max_seq_tokens (and failed BurstGPT rows) are skipped
  // whatever the pool; every other request must be served.
  if (figures.slo_met && !*figures.slo_met) return false;
  if (figures.slo_attainment && *figures.slo_attainment < slo_attainment) return false;
  return figures.preemptions == 0 && figures.skipped_pool_too_small == 0 && !figures.violated;
}

CellFigures CellFigures::read(const nlohmann::json& r, bool violated) {
  CellFigures f;
  f.trace_format = r.at("trace").at("format").get<std::string>();
  f.trace_sha256 = r.at("trace").at("sha256").get<std::string>();
  const nlohmann::json& requests = r.at("requests");
  f.requests_total = requests.at("total").get<std::uint64_t>();
  f.finished = requests.at("finished").get<std::uint64_t>();
  f.skipped = requests.at("skipped").get<std::uint64_t>();
  f.skipped_pool_too_small = requests.at("skipped_pool_too_small").get<std::uint64_t>();
  f.peak_used = r.at("blocks").at("peak_used").get<std::uint64_t>();
  f.instance_peak_used = f.peak_used;
  if (r.contains("instances")) {
    f.instance_peak_used = 0;
    for (const nlohmann::json& instance : r.at("instances")) {
      f.instance_peak_used = std::max(f.instance_peak_used,
                                      instance.at("blocks").at("peak_used").get<std::uint64_t>());
    }
  }
  f.peak_in_use = r.at("blocks").at("peak_in_use").get<std::uint64_t>();
  f.waste_ratio_mean = r.at("fragmentation").at("waste_ratio_mean").get<double>();
  f.waste_ratio_at_peak = r.at("fragmentation").at("waste_ratio_at_peak").get<double>();
  const nlohmann::json& scheduler = r.at("scheduler");
  f.preemptions = scheduler.at("preemptions").get<std::uint64_t>();
  f.output_tokens_per_second = scheduler.at("output_tokens_per_second").get<double>();
  f.virtual_seconds = scheduler.at("virtual_seconds").get<double>();
  f.hit_rate = r.at("prefix_cache").at("hit_rate").get<double>();
  f.prefix_cache = r.at("prefix_cache");
  if (f.prefix_cache.contains("hit_rate_with_tiers")) {
    f.hit_rate_with_tiers = f.prefix_cache.at("hit_rate_with_tiers").get<double>();
  }
  if (r.contains("offload")) f.offload = r.at("offload");
  // A part's report need not hold it: only probes (never merged) read it.
  f.evictions = r.at("prefix_cache").value("evictions", std::uint64_t{0});
  f.latency = r.at("latency");
  f.p99_ttft_ms = f.latency.at("ttft_ms").at("p99").get<double>();
  f.p99_tpot_ms = f.latency.at("tpot_ms").at("p99").get<double>();
  // Parts written before p95 was reported have none.
  f.p95_ttft_ms = f.latency.at("ttft_ms").value("p95", 0.0);
  f.p95_tpot_ms = f.latency.at("tpot_ms").value("p95", 0.0);
  f.overload = r.at("overload");
  if (!f.overload.at("ratio").is_null()) f.overload_ratio = f.overload["ratio"].get<double>();
  f.overloaded = f.overload.at("overloaded").get<bool>();
  f.invariant_checks = r.at("invariants").at("checks").get<std::uint64_t>();
  if (r.contains("slo")) {
    f.slo = r.at("slo");
    f.slo_met = f.slo.at("met").get<bool>();
    if (f.slo.contains("attainment")) f.slo_attainment = f.slo.at("attainment").get<double>();
    if (f.slo.contains("ttft_ms") && f.slo.at("ttft_ms").is_number()) {
      f.slo_ttft_ms = f.slo.at("ttft_ms").get<double>();
    }
    if (f.slo.contains("tpot_ms") && f.slo.at("tpot_ms").is_number()) {
      f.slo_tpot_ms = f.slo.at("tpot_ms").get<double>();
    }
  }
  f.cost = r.at("config").at("simulation").at("cost");
  if (r.contains("cost_usd")) {
    f.cost_usd = r.at("cost_usd");
    f.usd_per_hour = f.cost_usd.at("usd_per_hour").get<double>();
    const nlohmann::json& per_million = f.cost_usd.at("usd_per_million_output_tokens");
    if (!per_million.is_null()) f.usd_per_million_tokens = per_million.get<double>();
  }
  if (r.contains("fleet")) f.fleet = r.at("fleet");
  f.violated = violated;
  return f;
}

CellFigures CellFigures::of(const SimulationResult& r, const SimOptions& options) {
  const SimFigures& s = r.figures;
  CellFigures f;
  f.trace_format = r.trace.format;
  f.trace_sha256 = r.trace.sha256;
  f.requests_total = s.requests + r.reader_skipped;
  f.finished = s.finished;
  f.skipped = s.skipped + r.reader_skipped;
  f.skipped_pool_too_small = s.skipped - s.skipped_too_long - s.skipped_too_many_samples;
  f.peak_used = s.peak_used;
  f.instance_peak_used = r.instance_figures.empty() ? s.peak_used : 0;
  for (const SimFigures& instance : r.instance_figures) {
    f.instance_peak_used = std::max(f.instance_peak_used, instance.peak_used);
  }
  f.peak_in_use = s.peak_in_use;
  f.waste_ratio_mean = s.waste_ratio_mean.value();
  f.waste_ratio_at_peak = s.waste_ratio_at_peak.value();
  f.preemptions = s.preemptions;
  f.output_tokens_per_second = s.output_tokens_per_second();
  f.virtual_seconds = s.virtual_seconds;
  f.hit_rate = s.hit_rate();
  f.prefix_cache = prefix_cache_section(s);
  if (s.offload) {
    f.hit_rate_with_tiers = s.hit_rate_with_tiers();
    f.offload = offload_section(s);
  }
  f.evictions = s.evictions;
  f.latency = latency_section(s);
  f.p99_ttft_ms = s.ttft_ms.p99;
  f.p99_tpot_ms = s.tpot_ms.p99;
  f.p95_ttft_ms = s.ttft_ms.p95;
  f.p95_tpot_ms = s.tpot_ms.p95;
  f.overload = overload_section(s);
  f.overload_ratio = s.overload().ratio();
  f.overloaded = s.overload().overloaded();
  f.invariant_checks = s.checks;
  f.slo = slo_section(s, options, r.reader_skipped);
  if (!f.slo.is_null()) {
    f.slo_met = f.slo.at("met").get<bool>();
    if (f.slo.contains("attainment")) f.slo_attainment = f.slo.at("attainment").get<double>();
    f.slo_ttft_ms = options.slo.ttft_ms;
    f.slo_tpot_ms = options.slo.tpot_ms;
  }
  f.cost = r.cost_model;
  f.cost_usd = cost_usd_section(s, options);
  if (!f.cost_usd.is_null()) {
    f.usd_per_hour = f.cost_usd.at("usd_per_hour").get<double>();
    const nlohmann::json& per_million = f.cost_usd.at("usd_per_million_output_tokens");
    if (!per_million.is_null()) f.usd_per_million_tokens = per_million.get<double>();
  }
  // The fleet's shape and routing (not figures of an instance): the report's.
  if (r.report.contains("fleet")) f.fleet = r.report.at("fleet");
  f.violated = r.violated;
  return f;
}

namespace {

nlohmann::json cost_options_json(const CostModel& cost) {
  const RooflineConstants& r = cost.given;
  const LinearCost& l = cost.linear;
  nlohmann::json given = nlohmann::json::array();
  const auto& infos = roofline_constant_infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    given.push_back(cost.given_mask & (1u << i) ? nlohmann::json(r.*infos[i].field) : nullptr);
  }
  return {{"kind", std::string(to_string(cost.kind))},
          {"roofline", given},
          {"profile", cost.cost_profile().to_json()},
          {"linear", {l.step_ms, l.prefill_token_ms, l.decode_seq_ms, l.kv_bandwidth_gbps}}};
}

// SHA-256 of everything that decides a sweep's figures and its units: the
// trace as named, the resolved cells and deployments with their options, the
// search and its SLO rule. Two plans with the same fingerprint simulate the
// same things, so their parts can be merged.
std::string sweep_fingerprint(const PlanRequest& request,
                              const std::vector<PlanDeployment>& deployments,
                              const std::vector<PlanCell>& cells,
                              const std::vector<UnfitCell>& unfit, std::size_t units) {
  nlohmann::json sweep;
  sweep["trace"] = request.trace_path;
  sweep["format"] =
      request.format ? nlohmann::json(std::string(to_string(*request.format))) : nlohmann::json();
  sweep["search"] = request.search_min;
  sweep["slo_attainment"] = request.slo_attainment;
  // The objective picks the answer: parts asked for another do not merge.
  if (request.objective) sweep["objective"] = std::string(to_string(*request.objective));
  sweep["units"] = units;
  for (const PlanDeployment& d : deployments) {
    nlohmann::json options = sim_options_json(d.options);
    options["check"] = d.options.check.name();
    options["cost"] = cost_options_json(d.options.cost);
    // The price decides the fleet answer: parts priced otherwise do not merge.
    if (d.options.gpu_hour_usd) options["gpu_hour_usd"] = *d.options.gpu_hour_usd;
    sweep["deployments"].push_back({{"label", deployment_label(d)}, {"options", options}});
    if (request.fleet_sweep) sweep["deployments"].back()["fleet"] = fleet_json(d.fleet);
  }
  for (const PlanCell& cell : cells) {
    sweep["cells"].push_back({{"model", cell.model},
                              {"deployment", cell.deployment},
                              {"kv_memory", cell.kv_memory},
                              {"page_tokens", cell.page_tokens},
                              {"config", cell.config.to_json()}});
  }
  for (const UnfitCell& cell : unfit) {
    sweep["unfit"].push_back({{"model", cell.model},
                              {"deployment", cell.deployment},
                              {"page_tokens", cell.page_tokens},
                              {"problem", cell.problem}});
  }
  Sha256 sha;
  sha.update(sweep.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return sha.hex_digest();
}

}  // namespace

// The trace's SHA-256 (decompressed), as its simulations report it.
InputResult<std::string> trace_identity(const std::string& file, const std::string& shown,
                                        std::optional<RequestFormat> format) {
  auto reader = RequestReader::open(file, format, shown);
  if (!reader) return Unexpected{reader.error()};
  return reader.value()->content_sha256();
}

PlanSimulator::PlanSimulator(const PlanRequest& request, std::string trace_file,
                             const PlanSweep& sweep)
    : request_(request),
      trace_file_(std::move(trace_file)),
      sweep_(sweep),
      progress_(ProgressLine::for_stderr(!request.quiet, 1)) {}

InputResult<SimulationResult> PlanSimulator::simulate(const RunConfig& config,
                                                      const PlanDeployment& deployment,
                                                      const SimFaults& faults) {
  // A fleet of one is one instance (its report byte-identical to no fleet).
  auto result =
      deployment.fleet.instances() > 1
          ? simulate_fleet_file(trace_file_, request_.format, config, deployment.options,
                                deployment.fleet, FleetOutputs{}, {}, request_.trace_path)
          : simulate_file(trace_file_, request_.format, config, deployment.options, nullptr,
                          nullptr, {}, faults, nullptr, nullptr, nullptr, request_.trace_path);
  // Progress: simulations finished, from whichever thread finishes one.
  if (progress_) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    if (progress_->due()) {
      progress_->draw(fmt::format(
          "plan: {} simulations done ({} cells in the sweep{})", done_, sweep_.cells.size(),
          request_.shard ? fmt::format(", {} in shard {}/{}", sweep_.run_cells.size(),
                                       request_.shard->index, request_.shard->count)
                         : std::string()));
    }
  }
  return result;
}

void PlanSimulator::clear_progress() {
  if (progress_) progress_->clear();
}

std::optional<int> resolve_sweep(const PlanRequest& request, PlanSweep& sweep) {
  std::vector<PlanDeployment>& deployments = sweep.deployments;
  deployments = request.deployments;
  if (deployments.empty()) {
    deployments.push_back(PlanDeployment{request.overrides.gpu,
                                         request.overrides.tp.value_or(1),
                                         request.overrides.pp.value_or(1),
                                         request.options,
                                         FleetOptions{},
                                         std::nullopt,
                                         std::string(),
                                         {}});
  }
  // Deployment columns and answers when a GPU is named or more than one is swept.
  sweep.fleet_sweep = request.fleet_sweep;
  sweep.show_deployments = deployments.size() > 1 || deployments[0].gpu.has_value() ||
                           deployments[0].gpus() > 1 || sweep.fleet_sweep;
  for (const PlanDeployment& d : deployments) {
    sweep.label_width = std::max(sweep.label_width, deployment_label(d).size());
  }

  // The swept models: presets by name, then config.json files, each on every
  // swept deployment (--gpu x --tp x --pp).
  struct SweptModel {
    std::string name;  // a preset's name, or a config.json's path
    bool file = false;
  };
  std::vector<SweptModel> models;
  for (const std::string& model : request.models) models.push_back({model, false});
  for (const std::string& path : request.model_configs) models.push_back({path, true});
  // Without --kv-memory, --gpu sizes the one pool of each model (an empty memory).
  const std::vector<std::string> memories =
      request.kv_memories.empty() ? std::vector<std::string>{""} : request.kv_memories;
  std::vector<PlanCell>& cells = sweep.cells;
  std::vector<UnfitCell>& unfit = sweep.unfit;
  for (const SweptModel& model : models) {
    for (std::size_t d = 0; d < deployments.size(); ++d) {
      for (std::uint32_t page : request.page_tokens) {
        for (const std::string& memory : memories) {
          ConfigOverrides overrides = request.overrides;
          overrides.gpu = deployments[d].gpu;
          overrides.tp = deployments[d].tp;
          overrides.pp = deployments[d].pp;
          if (deployments[d].memory_fraction) {
            overrides.gpu_memory_utilization = deployments[d].memory_fraction;
          }
          overrides.max_batched_tokens = deployments[d].options.max_batched_tokens;
          overrides.max_seqs = deployments[d].options.max_seqs;
          overrides.model.reset();
          overrides.model_config.reset();
          (model.file ? overrides.model_config : overrides.model) = model.name;
          overrides.page_tokens = page;
          overrides.kv_memory.reset();
          if (!memory.empty()) overrides.kv_memory = memory;
          overrides.pool_blocks.reset();
          auto config = resolve_sim_config(overrides);
          if (!config && deployments.size() > 1 &&
              (config.error().field == "--gpu" || config.error().field == "--tp" ||
               config.error().field == "--pp")) {
            // A deployment too small for the weights, or one the heads do not
            // split over: part of what a deployment sweep measures.
            unfit.push_back(UnfitCell{model.name, d, page, config.error().problem});
            continue;
          }
          if (!config) {
            eprint("{}\n", config.error().to_string());
            return kExitInput;
          }
          const std::string label =
              !memory.empty()
                  ? memory
                  : reproducible_memory(config.value().kv.pool_blocks, config.value().kv);
          cells.push_back(PlanCell{model.name, d, label, page, config.value(), std::nullopt,
                                   std::nullopt, std::nullopt, std::string()});
        }
      }
    }
  }
  std::vector<MinSearch>& searches = sweep.searches;
  std::vector<std::size_t>& cell_group = sweep.cell_group;
  cell_group.assign(cells.size(), 0);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const PlanCell& cell = cells[i];
    std::size_t g = 0;
    while (g < searches.size() &&
           !(searches[g].model == cell.model && searches[g].page_tokens == cell.page_tokens &&
             searches[g].deployment == cell.deployment)) {
      ++g;
    }
    if (g == searches.size()) {
      MinSearch search;
      search.model = cell.model;
      search.deployment = cell.deployment;
      search.page_tokens = cell.page_tokens;
      search.config = cell.config;
      searches.push_back(std::move(search));
    }
    cell_group[i] = g;
  }
  if (!request.search_min) searches.clear();
  sweep.merging = !request.parts.empty();
  sweep.shard = request.shard;
  sweep.units = request.search_min ? searches.size() : cells.size();
  sweep.sweep_sha256 = sweep_fingerprint(request, deployments, cells, unfit, sweep.units);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (sweep.unit_runs_here(request.search_min ? cell_group[i] : i)) sweep.run_cells.push_back(i);
  }
  return std::nullopt;
}

std::optional<int> check_sweep_memory(const PlanSweep& sweep, unsigned jobs) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const std::vector<std::size_t>& run_cells = sweep.run_cells;
  // The sweep's simulations at once must fit in memory, each bounded by its
  // pool (README, "Memory bounds"); checked before anything is written. The
  // search caps its own pools by the same bound.
  if (auto problem = check_memory(0, "", "")) {  // KVREPLAY_MEMORY_LIMIT is no size
    eprint("kvreplay plan: {}\n", *problem);
    return kExitInput;
  }
  if (!run_cells.empty()) {
    // A fleet's simulation holds every instance's pool, and each instance's own structures.
    std::uint64_t largest = 0;
    std::uint64_t each = 0;
    bool tiers = false;
    for (std::size_t i : run_cells) {
      const std::uint64_t instances = sweep.deployments[cells[i].deployment].fleet.instances();
      largest = std::max(largest, std::uint64_t{cells[i].config.kv.pool_blocks} * instances);
      each = std::max(
          each, run_memory_bytes(cells[i].config, sweep.deployments[cells[i].deployment].options,
                                 instances));
      tiers = tiers || sweep.deployments[cells[i].deployment].options.offload.any();
    }
    const std::uint64_t at_once = jobs_at_once(run_cells.size(), jobs);
    if (auto problem = check_memory(
            mul_sat(at_once, each),
            fmt::format("running {} of the sweep's simulations at once", at_once),
            fmt::format("{} x ({} + {} bytes a block x {} blocks, the largest swept pool{}{})",
                        at_once, memory_text(kSimulationBaseBytes), kSimulationBytesPerBlock,
                        largest,
                        sweep.fleet_sweep
                            ? fmt::format(" or fleet (every instance's), + {} KiB an instance "
                                          "after the first",
                                          kFleetInstanceBytes >> 10)
                            : std::string(),
                        tiers ? fmt::format(", + each instance's offload tiers, {} bytes a tier "
                                            "block ({} under arc)",
                                            kTierBytesPerBlock, kArcTierBytesPerBlock)
                              : std::string()))) {
      const std::uint64_t fitting = memory_limit().bytes / each;
      eprint("kvreplay plan: {}: {}\n", *problem,
             fitting == 0 ? std::string("sweep smaller pools (a larger --page-tokens, "
                                        "or less --kv-memory)")
                          : fmt::format("-j {} fits", fitting));
      return kExitInput;
    }
  }
  return std::nullopt;
}

std::optional<int> simulate_cells(const PlanRequest& request, PlanSweep& sweep,
                                  PlanSimulator& simulator, unsigned jobs) {
  std::vector<PlanCell>& cells = sweep.cells;
  const std::vector<std::size_t>& run_cells = sweep.run_cells;
  parallel_for(run_cells.size(), jobs, [&](std::size_t k) {
    const std::size_t i = run_cells[k];
    const bool planted =
        !request.fault_kv_memory.empty() && cells[i].kv_memory == request.fault_kv_memory;
    auto result = simulator.simulate(cells[i].config, sweep.deployments[cells[i].deployment],
                                     planted ? request.faults : SimFaults{});
    if (result) {
      cells[i].figures =
          CellFigures::of(result.value(), sweep.deployments[cells[i].deployment].options);
      cells[i].result = std::move(result).value();
    } else {
      cells[i].error = result.error();
    }
  });
  simulator.clear_progress();
  for (const PlanCell& cell : cells) {
    if (cell.error) {
      eprint("{}\n", cell.error->to_string());
      return kExitInput;
    }
  }
  return std::nullopt;
}

std::optional<int> report_cell_problems(const PlanRequest& request, const PlanSweep& sweep,
                                        std::vector<std::string>& warned) {
  const std::vector<PlanCell>& cells = sweep.cells;
  // Requests no KV memory can serve, whatever the cell: said once each, even
  // with --quiet (a pool too small is what the sweep measures, not a warning).
  for (const PlanCell& cell : cells) {
    if (!cell.result) continue;  // another shard's
    const SimulationResult& result = *cell.result;
    for (std::size_t i = 0; i < result.warnings.size(); ++i) {
      if (result.warning_reasons[i] == SkipReason::kPoolTooSmall) continue;
      if (std::find(warned.begin(), warned.end(), result.warnings[i]) != warned.end()) continue;
      warned.push_back(result.warnings[i]);
      eprint("kvreplay plan: {}\n", result.warnings[i]);
    }
  }
  // A failed check means the engine is wrong: no figure of the sweep is trusted.
  bool violated = false;
  for (const PlanCell& cell : cells) {
    if (!cell.result || !cell.result->violated) continue;
    violated = true;
    ViolationText text = first_violation(*cell.result);
    eprint("{}: {} at sweep point --model {} --page-tokens {} --kv-memory {}: {}\n",
           request.trace_path, text.invariant, cell.model, cell.page_tokens, cell.kv_memory,
           text.message);
  }
  if (violated) return kExitCheckFailed;
  return std::nullopt;
}

}  // namespace kvreplay
