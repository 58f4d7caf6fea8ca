#include "app/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/terminal.h"
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

struct PlanCell {
  std::string model;
  std::size_t deployment = 0;  // index into the swept deployments
  std::string kv_memory;
  std::uint32_t page_tokens = 0;
  RunConfig config;
  std::optional<SimulationResult> result;
  std::optional<InputError> error;
};

struct ViolationText {
  std::string invariant;  // "invariant I1 violated"
  std::string message;
};

struct MinSearch {
  std::string model;
  std::size_t deployment = 0;
  std::uint32_t page_tokens = 0;
  RunConfig config;                     // geometry; pool_blocks is searched
  std::optional<std::uint32_t> blocks;  // smallest pool with no preemption and nothing skipped
  std::uint32_t probes = 0;
  std::optional<InputError> error;
  std::optional<std::uint32_t> violated_blocks;  // a probe whose invariant check failed
  ViolationText violation;
  // Swept pools at or above an answer that still preempted (or skipped): each
  // raised the answer past it, since preemptions need not fall as memory grows.
  std::vector<std::uint32_t> raised_past;
};

// Runs `count` jobs on up to `jobs` threads; job i writes only its own slot.
void parallel_for(std::size_t count, unsigned jobs, const std::function<void(std::size_t)>& job) {
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) job(i);
  };
  std::vector<std::thread> threads;
  unsigned n = std::max(1u, std::min<unsigned>(jobs, static_cast<unsigned>(count)));
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& thread : threads) thread.join();
}

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

// How a row names its deployment: "h100-80gb x4 (tp 4)", "- x1" without a GPU.
std::string deployment_label(const PlanDeployment& d) {
  std::string text = fmt::format("{} x{}", d.gpu.value_or("-"), d.tp * d.pp);
  if (d.tp > 1 && d.pp > 1) return text + fmt::format(" (tp {}, pp {})", d.tp, d.pp);
  if (d.tp > 1) return text + fmt::format(" (tp {})", d.tp);
  if (d.pp > 1) return text + fmt::format(" (pp {})", d.pp);
  return text;
}

// A swept deployment the model cannot run on (its weights do not fit, or its
// heads do not split): a row of the sweep with no simulation.
struct UnfitCell {
  std::string model;
  std::size_t deployment = 0;
  std::uint32_t page_tokens = 0;
  std::string problem;
}; 

// Whether a simulation serves the trace: no preemption, nothing skipped for a
// pool too small, and with SLOs at least `slo_attainment` of the requests
// meeting them (SPEC 3.4).
bool serves(const SimulationResult& result, double slo_attainment) {
  // Requests longer than max_seq_tokens (and failed BurstGPT rows) are skipped
  // whatever the pool; every other request must be served.
  const nlohmann::json& r = result.report;
  if (r.contains("slo") && r["slo"]["attainment"].get<double>() < slo_attainment) return false;
  return r["scheduler"]["preemptions"].get<std::uint64_t>() == 0 &&
         r["requests"]["skipped_pool_too_small"].get<std::uint64_t>() == 0 && !result.violated;
}

// kvreplay's version, recorded in a partial report: parts of another version
// are refused, since figures may differ between versions.
constexpr const char* kKvreplayVersion = KVREPLAY_VERSION;
// The size cap of a partial report read by plan-merge, and its reason.
constexpr std::uint64_t kMaxPartBytes = std::uint64_t{1} << 30;
constexpr std::string_view kPartTooLarge = "far more than a partial plan";

// The cost model's kind and every constant of both models: what a sweep's
// simulations time steps with.
nlohmann::json cost_options_json(const CostModel& cost) {
  const RooflineConstants& r = cost.roofline;
  const LinearCost& l = cost.linear;
  return {{"kind", std::string(to_string(cost.kind))},
          {"roofline", {r.compute_efficiency, r.bandwidth_efficiency, r.link_efficiency,
                        r.allreduce_latency_us, r.step_overhead_ms}},
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
  sweep["units"] = units;
  for (const PlanDeployment& d : deployments) {
    nlohmann::json options = sim_options_json(d.options);
    options["check"] = d.options.check.name();
    options["cost"] = cost_options_json(d.options.cost);
    sweep["deployments"].push_back({{"label", deployment_label(d)}, {"options", options}});
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

// The trace's SHA-256 (decompressed), as its simulations report it.
InputResult<std::string> trace_identity(const std::string& file, const std::string& shown,
                                        std::optional<RequestFormat> format) {
  auto reader = RequestReader::open(file, format, shown);
  if (!reader) return Unexpected{reader.error()};
  return reader.value()->content_sha256();
}

// One cell of a partial report: the figures run_plan reads of a simulation.
nlohmann::json cell_part_json(std::size_t index, const SimulationResult& result) {
  nlohmann::json reasons = nlohmann::json::array();
  for (SkipReason reason : result.warning_reasons) reasons.push_back(static_cast<int>(reason));
  return {{"index", index},
          {"report", result.report},
          {"warnings", result.warnings},
          {"warning_reasons", reasons}};
}

// plan-merge: every cell and search of the sweep from the parts (checked by
// run_plan_merge to be the shards of one sweep), each exactly once. Returns
// what is wrong, or nullopt.
std::optional<std::string> fill_from_parts(const std::vector<PlanPart>& parts,
                                           const std::string& sweep_sha256, std::size_t units,
                                           std::vector<PlanCell>& cells,
                                           std::vector<MinSearch>& searches) {
  std::vector<const std::string*> cell_from(cells.size(), nullptr);
  std::vector<const std::string*> search_from(searches.size(), nullptr);
  for (const PlanPart& part : parts) {
    const nlohmann::json& json = part.json;
    if (json.at("sweep_sha256").get<std::string>() != sweep_sha256 ||
        json.at("units").get<std::size_t>() != units) {
      return fmt::format(
          "{}: its sweep resolves differently here (a model preset, a --model-config file or "
          "this kvreplay changed since the part was written): rerun the shards",
          part.path);
    }
    for (const nlohmann::json& entry : json.at("cells")) {
      const std::size_t i = entry.at("index").get<std::size_t>();
      if (i >= cells.size()) return fmt::format("{}: cell {} is not in the sweep", part.path, i);
      if (cell_from[i] != nullptr) {
        return fmt::format("{} and {} both hold cell {}", *cell_from[i], part.path, i);
      }
      cell_from[i] = &part.path;
      SimulationResult result;
      result.report = entry.at("report");
      result.warnings = entry.at("warnings").get<std::vector<std::string>>();
      for (const nlohmann::json& reason : entry.at("warning_reasons")) {
        const int value = reason.get<int>();
        if (value < 0 || value >= static_cast<int>(kSkipReasons)) {
          return fmt::format("{}: cell {}: unknown skip reason {}", part.path, i, value);
        }
        result.warning_reasons.push_back(static_cast<SkipReason>(value));
      }
      if (result.warning_reasons.size() != result.warnings.size()) {
        return fmt::format("{}: cell {}: warnings and their reasons differ in number", part.path, i);
      }
      cells[i].result = std::move(result);
    }
    for (const nlohmann::json& entry : json.at("searches")) {
      const std::size_t g = entry.at("index").get<std::size_t>();
      if (g >= searches.size()) {
        return fmt::format("{}: search {} is not in the sweep", part.path, g);
      }
      if (search_from[g] != nullptr) {
        return fmt::format("{} and {} both hold search {}", *search_from[g], part.path, g);
      }
      search_from[g] = &part.path;
      MinSearch& search = searches[g];
      if (!entry.at("pool_blocks").is_null()) search.blocks = entry["pool_blocks"].get<std::uint32_t>();
      search.probes = entry.at("probes").get<std::uint32_t>();
      search.raised_past = entry.at("raised_past_pool_blocks").get<std::vector<std::uint32_t>>();
    }
  }
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (cell_from[i] == nullptr) {
      return fmt::format("no part holds the cell --model {} --page-tokens {} --kv-memory {}",
                         cells[i].model, cells[i].page_tokens, cells[i].kv_memory);
    }
  }
  for (std::size_t g = 0; g < searches.size(); ++g) {
    if (search_from[g] == nullptr) {
      return fmt::format("no part holds the search of --model {} --page-tokens {}",
                         searches[g].model, searches[g].page_tokens);
    }
  }
  return std::nullopt;
}

}  // namespace

int run_plan(const PlanRequest& request) {
  // No preemption, nothing skipped for the pool, and the SLOs when given.
  auto serves_trace = [&](const SimulationResult& result) {
    return serves(result, request.slo_attainment);
  };
  const bool slo = request.options.slo.any();
  unsigned jobs =
      request.jobs != 0 ? request.jobs : std::max(1u, std::thread::hardware_concurrency());
  const SimOptions& options = request.options;
  std::vector<PlanDeployment> deployments = request.deployments;
  if (deployments.empty()) {
    deployments.push_back(PlanDeployment{request.overrides.gpu, request.overrides.tp.value_or(1),
                                         request.overrides.pp.value_or(1), options});
  }
  // Deployment columns and answers when a GPU is named or more than one is swept.
  const bool show_deployments = deployments.size() > 1 || deployments[0].gpu.has_value() ||
                                deployments[0].tp * deployments[0].pp > 1;

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
  std::vector<PlanCell> cells;
  std::vector<UnfitCell> unfit;
  for (const SweptModel& model : models) {
    for (std::size_t d = 0; d < deployments.size(); ++d) {
    for (std::uint32_t page : request.page_tokens) {
      for (const std::string& memory : memories) {
        ConfigOverrides overrides = request.overrides;
        overrides.gpu = deployments[d].gpu;
        overrides.tp = deployments[d].tp;
        overrides.pp = deployments[d].pp;
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
          fmt::print(stderr, "{}\n", config.error().to_string());
          return kExitInput;
        }
        const std::string label =
            !memory.empty() ? memory
                            : reproducible_memory(config.value().kv.pool_blocks, config.value().kv);
        cells.push_back(
            PlanCell{model.name, d, label, page, config.value(), std::nullopt, std::nullopt});
      }
    }
    }
  }
  // The smallest pool with no preemption is searched per (model, deployment,
  // page size): one search per group of cells, in the order the groups appear.
  std::vector<MinSearch> searches;
  std::vector<std::size_t> cell_group(cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const PlanCell& cell = cells[i];
    std::size_t g = 0;
    while (g < searches.size() &&
           !(searches[g].model == cell.model && searches[g].page_tokens == cell.page_tokens &&
             searches[g].deployment == cell.deployment)) {
      ++g;
    }
    if (g == searches.size()) {
      searches.push_back(MinSearch{cell.model, cell.deployment, cell.page_tokens, cell.config,
                                   std::nullopt, 0, std::nullopt, std::nullopt, ViolationText{},
                                   {}});
    }
    cell_group[i] = g;
  }
  if (!request.search_min) searches.clear();
  // --shard splits the sweep into units dealt round-robin: with the search, a
  // group (its cells and its search, which is verified against them); without,
  // a cell. A merge simulates nothing: its parts hold every unit's figures.
  const bool merging = !request.parts.empty();
  const std::size_t units = request.search_min ? searches.size() : cells.size();
  auto unit_runs_here = [&](std::size_t unit) {
    if (merging) return false;
    return !request.shard || unit % request.shard->count == request.shard->index - 1;
  };
  const std::string sweep_sha256 =
      sweep_fingerprint(request, deployments, cells, unfit, units);

  // Opened before the sweep, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  OutputFile* html_out = nullptr;
  if ((!request.report_path.empty() &&
       (report_out = outputs.open(request.shard ? "the partial plan" : "the plan",
                                  request.report_path)) == nullptr) ||
      (!request.html_path.empty() &&
       (html_out = outputs.open("the HTML report", request.html_path)) == nullptr)) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  // The table never mixes with an output on stdout.
  std::FILE* table_stream = outputs.writes_stdout() ? stderr : stdout;
  // A trace on standard input is read once, into a temporary file every
  // simulation then reads (each reads the trace as it goes).
  std::optional<SpooledInput> spooled;
  std::string trace_file = request.trace_path;
  if (request.trace_path == "-" && !merging) {
    auto spool = spool_standard_input(request.format);  // checked as it is spooled
    if (!spool) {
      fmt::print(stderr, "{}\n", spool.error());
      return kExitInput;
    }
    spooled.emplace(std::move(spool).value());
    trace_file = spooled->path();
  }
  auto simulate_trace = [&](const RunConfig& config, const SimOptions& sim_options,
                            const SimFaults& faults) {
    return simulate_file(trace_file, request.format, config, sim_options, nullptr, nullptr, {},
                         faults, nullptr, request.trace_path);
  };

  // Progress: simulations finished, from whichever thread finishes one.
  auto progress = ProgressLine::for_stderr(!request.quiet, 1);
  std::mutex progress_mutex;
  std::uint64_t simulations_done = 0;
  std::vector<std::size_t> run_cells;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (unit_runs_here(request.search_min ? cell_group[i] : i)) run_cells.push_back(i);
  }
  auto count_simulation = [&] {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    ++simulations_done;
    if (progress->due()) {
      progress->draw(fmt::format("plan: {} simulations done ({} cells in the sweep{})",
                                 simulations_done, cells.size(),
                                 request.shard ? fmt::format(", {} in shard {}/{}", run_cells.size(),
                                                             request.shard->index,
                                                             request.shard->count)
                                               : std::string()));
    }
  };
  parallel_for(run_cells.size(), jobs, [&](std::size_t k) {
    const std::size_t i = run_cells[k];
    const bool planted =
        !request.fault_kv_memory.empty() && cells[i].kv_memory == request.fault_kv_memory;
    auto result = simulate_trace(cells[i].config, deployments[cells[i].deployment].options,
                                 planted ? request.faults : SimFaults{});
    count_simulation();
    if (result) {
      cells[i].result = std::move(result).value();
    } else {
      cells[i].error = result.error();
    }
  });
  if (progress) progress->clear();
  for (const PlanCell& cell : cells) {
    if (cell.error) {
      fmt::print(stderr, "{}\n", cell.error->to_string());
      return kExitInput;
    }
  }
  if (merging) {
    if (auto problem = fill_from_parts(request.parts, sweep_sha256, units, cells, searches)) {
      fmt::print(stderr, "kvreplay plan-merge: {}\n", *problem);
      return kExitInput;
    }
  }
  // Requests no KV memory can serve, whatever the cell: said once each, even
  // with --quiet (a pool too small is what the sweep measures, not a warning).
  std::vector<std::string> warned;
  for (const PlanCell& cell : cells) {
    if (!cell.result) continue;  // another shard's
    const SimulationResult& result = *cell.result;
    for (std::size_t i = 0; i < result.warnings.size(); ++i) {
      if (result.warning_reasons[i] == SkipReason::kPoolTooSmall) continue;
      if (std::find(warned.begin(), warned.end(), result.warnings[i]) != warned.end()) continue;
      warned.push_back(result.warnings[i]);
      fmt::print(stderr, "kvreplay plan: {}\n", result.warnings[i]);
    }
  }
  // A failed check means the engine is wrong: no figure of the sweep is trusted.
  bool violated = false;
  for (const PlanCell& cell : cells) {
    if (!cell.result || !cell.result->violated) continue;
    violated = true;
    ViolationText text = first_violation(*cell.result);
    fmt::print(stderr, "{}: {} at sweep point --model {} --page-tokens {} --kv-memory {}: {}\n",
               request.trace_path, text.invariant, cell.model, cell.page_tokens, cell.kv_memory,
               text.message);
  }
  if (violated) return kExitCheckFailed;

  // The smallest pool with no preemption, per model and page size: a binary
  // search over pool_blocks (assuming more memory never adds preemptions).
  if (request.search_min) {
    std::vector<std::size_t> run_searches;
    for (std::size_t g = 0; g < searches.size(); ++g) {
      if (unit_runs_here(g)) run_searches.push_back(g);
    }
    parallel_for(run_searches.size(), jobs, [&](std::size_t k) {
      MinSearch& search = searches[run_searches[k]];
      auto probe = [&](std::uint32_t blocks) -> std::optional<bool> {
        RunConfig config = search.config;
        config.kv.pool_blocks = blocks;
        config.kv_memory.reset();
        ++search.probes;
        auto result =
            simulate_trace(config, deployments[search.deployment].options,
                           request.fault_kv_memory == "search" ? request.faults : SimFaults{});
        count_simulation();
        if (!result) {
          search.error = result.error();
          return std::nullopt;
        }
        if (result.value().violated) {
          search.violated_blocks = blocks;
          search.violation = first_violation(result.value());
          return std::nullopt;
        }
        return serves_trace(result.value());
      };
      // The smallest passing pool above `low` (which fails, or is 0): doubling
      // from `start` to a passing pool, then bisection. 0 when none below the bound.
      auto smallest_above = [&](std::uint64_t low,
                                std::uint64_t start) -> std::optional<std::uint64_t> {
        std::uint64_t high = std::max<std::uint64_t>(start, low + 1);
        for (;;) {
          auto ok = probe(static_cast<std::uint32_t>(high));
          if (!ok) return std::nullopt;
          if (*ok) break;
          low = high;
          if (high * 2 > kMaxSupportedPoolBlocks) return 0;  // not found
          high *= 2;
        }
        while (high - low > 1) {
          std::uint64_t mid = low + (high - low) / 2;
          auto ok = probe(static_cast<std::uint32_t>(mid));
          if (!ok) return std::nullopt;
          (*ok ? high : low) = mid;
        }
        return high;
      };
      auto found = smallest_above(0, search.config.kv.pool_blocks);
      // The answer must hold at every swept size above it too: a swept pool at
      // or above it that still preempts raises the search past it.
      while (found && *found != 0) {
        std::uint64_t failing = 0;
        for (const PlanCell& cell : cells) {
          if (cell.model != search.model || cell.page_tokens != search.page_tokens ||
              cell.deployment != search.deployment) {
            continue;
          }
          if (cell.config.kv.pool_blocks < *found) continue;
          if (!serves_trace(*cell.result)) {
            failing = std::max<std::uint64_t>(failing, cell.config.kv.pool_blocks);
          }
        }
        if (failing == 0) break;
        search.raised_past.push_back(static_cast<std::uint32_t>(failing));
        found = smallest_above(failing, failing + 1);
      }
      if (found && *found != 0) search.blocks = static_cast<std::uint32_t>(*found);
    });
    if (progress) progress->clear();
    for (const MinSearch& search : searches) {
      if (search.error) {
        fmt::print(stderr, "{}\n", search.error->to_string());
        return kExitInput;
      }
    }
    for (const MinSearch& search : searches) {
      if (!search.violated_blocks) continue;
      violated = true;
      fmt::print(stderr,
                 "{}: {} while searching the smallest KV memory, at --model {} --page-tokens {} "
                 "--pool-blocks {}: {}\n",
                 request.trace_path, search.violation.invariant, search.model, search.page_tokens,
                 *search.violated_blocks, search.violation.message);
    }
    if (violated) return kExitCheckFailed;
  }

  if (request.shard) {
    // The part: this shard's figures, and what plan-merge checks them by.
    auto trace_sha256 = trace_identity(trace_file, request.trace_path, request.format);
    if (!trace_sha256) {
      fmt::print(stderr, "{}\n", trace_sha256.error().to_string());
      return kExitInput;
    }
    nlohmann::json part = {{"kvreplay_plan_part", kPlanPartVersion},
                           {"kvreplay", kKvreplayVersion},
                           {"shard", {{"index", request.shard->index}, {"count", request.shard->count}}},
                           {"command", request.command},
                           {"trace", {{"path", request.trace_path}, {"sha256", trace_sha256.value()}}},
                           {"sweep_sha256", sweep_sha256},
                           {"units", units}};
    nlohmann::json part_cells = nlohmann::json::array();
    for (std::size_t i : run_cells) part_cells.push_back(cell_part_json(i, *cells[i].result));
    part["cells"] = std::move(part_cells);
    nlohmann::json part_searches = nlohmann::json::array();
    for (std::size_t g = 0; g < searches.size(); ++g) {
      if (!unit_runs_here(g)) continue;
      const MinSearch& search = searches[g];
      part_searches.push_back(
          {{"index", g},
           {"pool_blocks", search.blocks ? nlohmann::json(*search.blocks) : nlohmann::json(nullptr)},
           {"probes", search.probes},
           {"raised_past_pool_blocks", search.raised_past}});
    }
    part["searches"] = std::move(part_searches);
    report_out->write(part.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!outputs.commit()) {
      fmt::print(stderr, "{}\n", outputs.error());
      return kExitInput;
    }
    if (!request.quiet) {
      fmt::print(table_stream, "plan: shard {}/{}: {} of {} cells and {} of {} searches, written to {}\n",
                 request.shard->index, request.shard->count, run_cells.size(), cells.size(),
                 part["searches"].size(), searches.size(), request.report_path);
    }
    return kExitOk;
  }

  nlohmann::json plan;
  plan["kvreplay_plan"] = 1;
  plan["trace"] = {{"path", request.trace_path}};
  if (!cells.empty()) {
    plan["trace"]["format"] = cells[0].result->report["trace"]["format"];
    plan["trace"]["requests"] = cells[0].result->report["requests"]["total"];
    plan["trace"]["sha256"] = cells[0].result->report["trace"]["sha256"];
  }
  plan["simulation"] = sim_options_json(options);
  plan["simulation"]["check"] = options.check.name();
  if (slo) plan["simulation"]["slo_attainment"] = request.slo_attainment;
  if (!cells.empty()) {
    // The cost model as the simulations resolved it (its GPU is each cell's deployment's).
    nlohmann::json cost = cells[0].result->report["config"]["simulation"]["cost"];
    cost.erase("gpu");
    plan["simulation"]["cost"] = std::move(cost);
  }
  // Every setting that changes a figure, as the sweep resolved it (the swept
  // model, page size and pool vary per cell: cells[].config).
  if (!cells.empty()) {
    // Keys of the model or the sweep point always vary per cell; any other key
    // is common when every cell agrees on it (max_seq_tokens follows the model's
    // context length unless --max-seq-tokens is given).
    nlohmann::json common = cells[0].config.to_json();
    for (const char* swept :
         {"model", "model_source", "parameters", "layers", "kv_heads", "head_dim", "kv_tensors",
          "kv_cache_groups", "page_tokens", "pool_blocks", "kv_memory", "bytes_per_token",
          "block_bytes", "pool_bytes", "weights_bytes_per_gpu", "activation_reserve_bytes"}) {
      common.erase(swept);
    }
    for (const PlanCell& cell : cells) {
      const nlohmann::json config = cell.config.to_json();
      std::vector<std::string> differing;
      for (auto it = common.begin(); it != common.end(); ++it) {
        if (!config.contains(it.key()) || config[it.key()] != it.value()) {
          differing.push_back(it.key());
        }
      }
      for (const std::string& key : differing) common.erase(key);
    }
    plan["config"] = std::move(common);
  }
  nlohmann::json rows = nlohmann::json::array();
  auto deployment_json = [&](std::size_t d) {
    const PlanDeployment& deployment = deployments[d];
    return nlohmann::json{
        {"gpu", deployment.gpu ? nlohmann::json(*deployment.gpu) : nlohmann::json(nullptr)},
        {"tp", deployment.tp},
        {"pp", deployment.pp},
        {"gpus", deployment.tp * deployment.pp},
        {"label", deployment_label(deployment)}};
  };
  // With deployments, each row starts with its deployment ("h100-80gb x4 (tp 4)").
  auto deployment_column = [&](std::size_t d) {
    return show_deployments ? fmt::format("{:<26} ", deployment_label(deployments[d]))
                            : std::string();
  };
  std::string table =
      (show_deployments ? fmt::format("{:<26} ", "deployment") : std::string()) +
      fmt::format("{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} "
                  "{:>10} {:>8} {:>6}{}\n",
                  "model", "page", "kv_memory", "blocks", "peak", "in_use", "waste", "preempt",
                  "hit_rate", "finished", "skipped", "out_tok/s", "p99_ttft", "p99_tpot", "load",
                  slo ? fmt::format(" {:>7}", "slo") : std::string());
  bool any_skipped = !warned.empty();
  for (const PlanCell& cell : cells) {
    const nlohmann::json& r = cell.result->report;
    any_skipped = any_skipped || r["requests"]["skipped"].get<std::uint64_t>() >
                                     r["requests"]["skipped_pool_too_small"].get<std::uint64_t>();
    nlohmann::json row = {{"model", cell.model},
                          {"label", model_label(cell.config)},
                          {"config", cell.config.to_json()},
                          {"peak_in_use", r["blocks"]["peak_in_use"]},
                          {"page_tokens", cell.page_tokens},
                          {"kv_memory", cell.kv_memory},
                          {"kv_memory_bytes", cell.config.kv_memory.value_or(0)},
                          {"pool_blocks", cell.config.kv.pool_blocks},
                          {"peak_used", r["blocks"]["peak_used"]},
                          {"waste_ratio_mean", r["fragmentation"]["waste_ratio_mean"]},
                          {"waste_ratio_at_peak", r["fragmentation"]["waste_ratio_at_peak"]},
                          {"preemptions", r["scheduler"]["preemptions"]},
                          {"hit_rate", r["prefix_cache"]["hit_rate"]},
                          {"finished", r["requests"]["finished"]},
                          {"skipped", r["requests"]["skipped"]},
                          {"output_tokens_per_second", r["scheduler"]["output_tokens_per_second"]},
                          {"virtual_seconds", r["scheduler"]["virtual_seconds"]},
                          {"latency", r["latency"]},
                          {"overload", r["overload"]},
                          {"invariant_checks", r["invariants"]["checks"]}};
    if (r.contains("slo")) row["slo"] = r["slo"];
    if (show_deployments) row["deployment"] = deployment_json(cell.deployment);
    const nlohmann::json& load = r["overload"];
    table += deployment_column(cell.deployment) + fmt::format(
        "{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>7.2f}% {:>8} {:>8.4f} {:>9} {:>8} {:>10.1f} "
        "{:>10} {:>8} {:>6}{}\n",
        model_label(cell.config), cell.page_tokens, cell.kv_memory, cell.config.kv.pool_blocks,
        r["blocks"]["peak_used"].get<std::uint64_t>(),
        r["blocks"]["peak_in_use"].get<std::uint64_t>(),
        r["fragmentation"]["waste_ratio_mean"].get<double>() * 100.0,
        r["scheduler"]["preemptions"].get<std::uint64_t>(),
        r["prefix_cache"]["hit_rate"].get<double>(), r["requests"]["finished"].get<std::uint64_t>(),
        r["requests"]["skipped"].get<std::uint64_t>(),
        r["scheduler"]["output_tokens_per_second"].get<double>(),
        ms_text(r["latency"]["ttft_ms"]["p99"].get<double>()),
        ms_text(r["latency"]["tpot_ms"]["p99"].get<double>()),
        load["ratio"].is_null() ? std::string("-")
                                : fmt::format("{:.2f}{}", load["ratio"].get<double>(),
                                              load["overloaded"].get<bool>() ? "!" : ""),
        r.contains("slo") ? fmt::format(" {:>6.2f}%", r["slo"]["attainment"].get<double>() * 100)
                          : std::string());
    rows.push_back(std::move(row));
  }
  plan["cells"] = std::move(rows);
  // Deployments that cannot run the model at all, said as rows of their own.
  nlohmann::json unfit_rows = nlohmann::json::array();
  for (const UnfitCell& cell : unfit) {
    unfit_rows.push_back({{"model", cell.model},
                          {"page_tokens", cell.page_tokens},
                          {"deployment", deployment_json(cell.deployment)},
                          {"problem", cell.problem}});
    table += deployment_column(cell.deployment) +
             fmt::format("{:<15} {:>6} does not run: {}\n", cell.model, cell.page_tokens,
                         cell.problem);
  }
  if (show_deployments) plan["unfit"] = std::move(unfit_rows);

  // The smallest deployment per GPU kind that serves the trace with no
  // preemption and nothing skipped, its pool sized by the GPU (no --kv-memory):
  // the fewest GPUs (then the smaller tp) such that every swept deployment of
  // that kind with at least as many GPUs serves too (deployments, like memory,
  // are not assumed monotone: a larger one that preempts raises the answer).
  // The SLOs the answers meet, in words (empty without SLOs).
  std::string slo_words;
  if (slo) {
    std::vector<std::string> parts;
    if (options.slo.ttft_ms) parts.push_back(fmt::format("TTFT <= {:g} ms", *options.slo.ttft_ms));
    if (options.slo.tpot_ms) parts.push_back(fmt::format("TPOT <= {:g} ms", *options.slo.tpot_ms));
    slo_words = fmt::format(" and {:g}% of requests meeting {}", request.slo_attainment * 100,
                            fmt::join(parts, ", "));
  }
  nlohmann::json min_deployments = nlohmann::json::array();
  if (show_deployments && request.kv_memories.empty()) {
    std::string answers;
    std::vector<std::tuple<std::string, std::uint32_t, std::string>> groups;  // model, page, gpu
    for (const PlanCell& cell : cells) {
      if (!deployments[cell.deployment].gpu) continue;
      auto key = std::tuple{cell.model, cell.page_tokens, *deployments[cell.deployment].gpu};
      if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
    }
    for (const auto& [model, page, gpu] : groups) {
      std::vector<const PlanCell*> members;
      for (const PlanCell& cell : cells) {
        if (cell.model == model && cell.page_tokens == page &&
            deployments[cell.deployment].gpu == gpu) {
          members.push_back(&cell);
        }
      }
      auto gpus_of = [&](const PlanCell* cell) {
        return deployments[cell->deployment].tp * deployments[cell->deployment].pp;
      };
      std::sort(members.begin(), members.end(), [&](const PlanCell* a, const PlanCell* b) {
        return std::pair{gpus_of(a), deployments[a->deployment].tp} <
               std::pair{gpus_of(b), deployments[b->deployment].tp};
      });
      const PlanCell* answer = nullptr;
      std::vector<std::string> raised;
      for (const PlanCell* candidate : members) {
        if (!serves_trace(*candidate->result)) continue;
        const PlanCell* failing = nullptr;
        for (const PlanCell* other : members) {
          if (gpus_of(other) >= gpus_of(candidate) && !serves_trace(*other->result)) {
            failing = other;
          }
        }
        if (failing == nullptr) {
          answer = candidate;
          break;
        }
        raised.push_back(deployment_label(deployments[failing->deployment]));
      }
      nlohmann::json entry = {{"model", model}, {"page_tokens", page}, {"gpu", gpu},
                              {"raised_past", raised}};
      if (answer != nullptr) {
        entry["deployment"] = deployment_json(answer->deployment);
        entry["kv_memory_bytes"] = answer->config.kv_memory.value_or(0);
        entry["pool_blocks"] = answer->config.kv.pool_blocks;
        answers += fmt::format("  {:<15} page {:>4}: {} GPUs of {}: {}, {} of KV a GPU ({} blocks)\n",
                               model, page, gpus_of(answer), gpu,
                               deployment_label(deployments[answer->deployment]),
                               reproducible_memory(answer->config.kv.pool_blocks, answer->config.kv),
                               answer->config.kv.pool_blocks);
      } else {
        entry["deployment"] = nullptr;
        answers += fmt::format("  {:<15} page {:>4}: no swept deployment of {} serves it\n",
                               model, page, gpu);
      }
      min_deployments.push_back(std::move(entry));
    }
    if (!answers.empty()) {
      table += fmt::format("\nsmallest deployment per GPU kind with no preemption{} (its pool sized "
                           "by the GPU), verified at every swept deployment with more GPUs:\n",
                           slo_words) +
               answers;
    }
  }
  if (show_deployments) plan["min_deployment"] = std::move(min_deployments);
  nlohmann::json minimum = nlohmann::json::array();
  if (request.search_min) {
    table += !any_skipped
                 ? fmt::format("\nsmallest KV memory with no preemption{} (every request served), "
                               "verified at every swept size above it:\n",
                               slo_words)
                 : fmt::format("\nsmallest KV memory with no preemption{} (every request that can "
                               "fit served; some were skipped: see the warnings), verified at "
                               "every swept size above it:\n",
                               slo_words);
    for (const MinSearch& search : searches) {
      std::uint64_t bytes = search.blocks ? *search.blocks * search.config.kv.block_bytes() : 0;
      const std::string memory =
          search.blocks ? reproducible_memory(*search.blocks, search.config.kv) : std::string();
      minimum.push_back(
          {{"model", search.model},
           {"label", model_label(search.config)},
           {"page_tokens", search.page_tokens},
           {"pool_blocks",
            search.blocks ? nlohmann::json(*search.blocks) : nlohmann::json(nullptr)},
           {"kv_memory_bytes", search.blocks ? nlohmann::json(bytes) : nlohmann::json(nullptr)},
           {"kv_memory", search.blocks ? nlohmann::json(memory) : nlohmann::json(nullptr)},
           {"raised_past_pool_blocks", search.raised_past},
           {"probes", search.probes}});
      if (show_deployments) minimum.back()["deployment"] = deployment_json(search.deployment);
      std::string raised;
      for (std::uint32_t failing : search.raised_past) {
        raised += fmt::format("; raised past the swept {} blocks, which preempt", failing);
      }
      table +=
          search.blocks
              ? fmt::format("  {}{:<15} page {:>4}: --kv-memory {} = {} blocks ({} simulations{})\n",
                            deployment_column(search.deployment), model_label(search.config),
                            search.page_tokens, memory, *search.blocks, search.probes, raised)
              : fmt::format("  {}{:<15} page {:>4}: not found below 2^31 blocks\n",
                            deployment_column(search.deployment), model_label(search.config),
                            search.page_tokens);
    }
  }
  plan["min_kv_memory"] = std::move(minimum);
  if (report_out != nullptr) {
    report_out->write(plan.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (html_out != nullptr) html_out->write(render_plan_html(plan));
  if (!outputs.commit()) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(table_stream, table);
  return kExitOk;
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

class PlanCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("REQUESTS", request_.trace_path, "request trace")->required();
    config_.add_to(app, /*swept=*/true, /*deployment=*/true);
    options_.add_to(app,
                    "invariant checks in every simulation of the sweep and the search: after "
                    "every step, every N steps, at the end (default), or off; a failed check "
                    "exits 1 naming the sweep point");
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
    app.add_option("-j,--jobs", request_.jobs, "parallel simulations (default: one per core)");
    app.add_flag("--no-search", no_search_, "skip the search for the smallest KV memory");
    app.add_option("--slo-attainment", request_.slo_attainment,
                   "with --slo-ttft-ms/--slo-tpot-ms: the share of requests that must meet them "
                   "(default 0.99)")
        ->check(CLI::Range(0.0, 1.0))
        ->group("Latency");
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
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
        "--tp 2,4,8 --slo-ttft-ms 2000 --slo-tpot-ms 80");
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
    return resolve_and_run();
  }

 private:
  int resolve_and_run() {
    request_.overrides = config_.overrides();
    if (request_.models.empty() && request_.model_configs.empty()) {
      request_.models = {std::string(kDefaultSimModel)};
    }
    if (request_.page_tokens.empty()) request_.page_tokens = {16};
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
    const std::vector<std::uint32_t> tps = config_.tps.empty() ? std::vector<std::uint32_t>{1}
                                                               : config_.tps;
    const std::vector<std::uint32_t> pps = config_.pps.empty() ? std::vector<std::uint32_t>{1}
                                                               : config_.pps;
    for (const auto& gpu : gpus) {
      SimOptions options;
      if (auto problem = options_.resolve(options, request_.format, gpu)) {
        return usage_error(*problem);
      }
      for (std::uint32_t tp : tps) {
        for (std::uint32_t pp : pps) request_.deployments.push_back({gpu, tp, pp, options});
      }
    }
    request_.options = request_.deployments[0].options;
    request_.overrides.gpu = gpus[0];
    set_activation_limits(request_.overrides, request_.options);
    return run_plan(request_);
  }

  PlanRequest request_;
  ConfigOptions config_;
  SimOptionsCli options_;
  bool no_search_ = false;
  std::string shard_;
};

// What is wrong with a part on its own, or nullopt.
std::optional<std::string> part_problem(const PlanPart& part) {
  const nlohmann::json& j = part.json;
  if (!j.is_object() || !j.contains("kvreplay_plan_part")) {
    return fmt::format("{}: not a partial plan (kvreplay plan --shard I/N --report FILE writes them)",
                       part.path);
  }
  if (j["kvreplay_plan_part"] != kPlanPartVersion) {
    return fmt::format("{}: a partial plan of format {}; this kvreplay reads format {}", part.path,
                       j["kvreplay_plan_part"].dump(), kPlanPartVersion);
  }
  if (j.value("kvreplay", std::string()) != kKvreplayVersion) {
    return fmt::format("{}: written by kvreplay {}; this is kvreplay {}: rerun the shards",
                       part.path, j.value("kvreplay", std::string("?")), kKvreplayVersion);
  }
  for (const char* key : {"shard", "command", "trace", "sweep_sha256", "units", "cells", "searches"}) {
    if (!j.contains(key)) return fmt::format("{}: a partial plan without \"{}\"", part.path, key);
  }
  const nlohmann::json& shard = j["shard"];
  if (!shard.is_object() || !shard.contains("index") || !shard.contains("count") ||
      !shard["index"].is_number_unsigned() || !shard["count"].is_number_unsigned() ||
      shard["index"].get<std::uint64_t>() < 1 ||
      shard["index"].get<std::uint64_t>() > shard["count"].get<std::uint64_t>()) {
    return fmt::format("{}: \"shard\" is not {{\"index\": I, \"count\": N}} with 1 <= I <= N",
                       part.path);
  }
  if (!j["command"].is_array() || !j["trace"].is_object() || !j["trace"].contains("sha256") ||
      !j["sweep_sha256"].is_string() || !j["cells"].is_array() || !j["searches"].is_array()) {
    return fmt::format("{}: a malformed partial plan", part.path);
  }
  for (const nlohmann::json& argument : j["command"]) {
    if (!argument.is_string()) return fmt::format("{}: \"command\" holds a non-string", part.path);
  }
  return std::nullopt;
}

class PlanMergeCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("PARTS", request_.part_paths,
                   "the partial reports of `plan --shard I/N --report FILE`, one per shard")
        ->required();
    app.add_option("--report", request_.report_path,
                   "write the plan as JSON here (- for stdout; the table then goes to stderr)");
    app.add_option("--html", request_.html_path, "write the plan as a self-contained HTML page");
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
    app.footer(
        "Writes exactly what the unsharded plan would have: the same table, and the same report "
        "and HTML byte for byte. Refuses (exit 2) parts of different traces, sweeps or kvreplay "
        "versions, and a set that misses or repeats a shard. Model config files named by "
        "--model-config must be readable here as they were for the shards.\n"
        "Example:\n"
        "  for i in 1 2 3; do kvreplay plan traces/requests/azure_conv.csv --kv-memory "
        "1GiB,2GiB,4GiB \\\n"
        "      --shard $i/3 --report part-$i.json; done\n"
        "  kvreplay plan-merge part-*.json --report plan.json --html plan.html");
  }
  int run() override { return run_plan_merge(request_); }

 private:
  PlanMergeRequest request_;
};

}  // namespace

int run_plan_merge(const PlanMergeRequest& request) {
  auto refuse = [](const std::string& why) {
    fmt::print(stderr, "kvreplay plan-merge: {}\n", why);
    return kExitInput;
  };
  std::vector<PlanPart> parts;
  for (const std::string& path : request.part_paths) {
    auto json = read_json_file(path, kMaxPartBytes, kPartTooLarge);
    if (!json) return refuse(json.error());
    parts.push_back(PlanPart{path, std::move(json).value()});
    if (auto problem = part_problem(parts.back())) return refuse(*problem);
  }
  // The N shards of one sweep of one trace, each once.
  const PlanPart& first = parts.front();
  const std::uint64_t count = first.json["shard"]["count"].get<std::uint64_t>();
  std::vector<const PlanPart*> by_index(count + 1, nullptr);
  for (const PlanPart& part : parts) {
    const nlohmann::json& j = part.json;
    if (j["trace"]["sha256"] != first.json["trace"]["sha256"]) {
      return refuse(fmt::format("{} and {} are parts of plans of different traces (sha256 {} and {})",
                                first.path, part.path, first.json["trace"]["sha256"].dump(),
                                j["trace"]["sha256"].dump()));
    }
    // The fingerprint covers everything that decides the figures (the command
    // lines differ in --shard and --report, and may in --jobs).
    if (j["sweep_sha256"] != first.json["sweep_sha256"]) {
      return refuse(fmt::format("{} and {} are parts of different sweeps", first.path, part.path));
    }
    if (j["shard"]["count"].get<std::uint64_t>() != count) {
      return refuse(fmt::format("{} is one of {} shards, {} one of {}", first.path, count,
                                part.path, j["shard"]["count"].get<std::uint64_t>()));
    }
    const std::uint64_t index = j["shard"]["index"].get<std::uint64_t>();
    if (by_index[index] != nullptr) {
      return refuse(fmt::format("{} and {} are both shard {}/{}", by_index[index]->path, part.path,
                                index, count));
    }
    by_index[index] = &part;
  }
  for (std::uint64_t index = 1; index <= count; ++index) {
    if (by_index[index] == nullptr) {
      return refuse(fmt::format("shard {}/{} is missing ({} of {} parts given)", index, count,
                                parts.size(), count));
    }
  }
  // The plan the parts came from, rebuilt from its command line.
  CLI::App app{"kvreplay plan"};
  PlanCommand plan;
  plan.declare(app);
  std::vector<std::string> arguments = first.json["command"].get<std::vector<std::string>>();
  std::reverse(arguments.begin(), arguments.end());  // CLI11 takes them last first
  try {
    app.parse(arguments);
  } catch (const CLI::ParseError& error) {
    return refuse(fmt::format("{}: its plan command line does not parse here: {}", first.path,
                              error.what()));
  }
  try {
    return plan.merge(std::move(parts), request);
  } catch (const nlohmann::json::exception& error) {
    return refuse(fmt::format("a part's figures are malformed: {}", error.what()));
  }
}

std::unique_ptr<Command> make_plan_command() {
  return std::make_unique<PlanCommand>();
}

std::unique_ptr<Command> make_plan_merge_command() {
  return std::make_unique<PlanMergeCommand>();
}

}  // namespace kvreplay
