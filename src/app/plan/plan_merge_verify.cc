// plan-merge: each cell of a part checked against the sweep cell it claims to
// be, and the answers the merge writes simulated again with every cell whose
// figures decide them (README, "Plans on a cluster").
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "app/exit_codes.h"
#include "app/plan/plan_internal.h"
#include "core/memory_budget.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

// A value as a message quotes it: its JSON, cut short.
std::string quoted(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// The value at `key` of `object`, or null when it has none.
const nlohmann::json& member(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// A count of `object` (0 when it is no count: the message then quotes it).
std::optional<std::uint64_t> count_at(const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = member(object, key);
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<std::uint64_t>();
}

std::string cell_words(const PlanCell& cell) {
  return fmt::format("--model {} --page-tokens {} --kv-memory {}", cell.model, cell.page_tokens,
                     cell.kv_memory);
}

// The report's configuration: every key of the sweep cell's own (model,
// geometry, GPU, TP, PP, pool), and its simulation options the deployment's.
std::optional<std::string> config_problem(const nlohmann::json& r, const std::string& field,
                                          const PlanCell& cell, const PlanDeployment& deployment) {
  const nlohmann::json& config = member(r, "config");
  const nlohmann::json expected = cell.config.to_json();
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const nlohmann::json& claimed = member(config, it.key().c_str());
    if (claimed != it.value()) {
      return fmt::format("{}.config.{}: {}, but the sweep's cell {} has {}", field, it.key(),
                         quoted(claimed), cell_words(cell), quoted(it.value()));
    }
  }
  if (config.is_object()) {
    for (auto it = config.begin(); it != config.end(); ++it) {
      if (it.key() != "simulation" && !expected.contains(it.key())) {
        return fmt::format("{}.config.{}: not a key of the sweep's cell {}", field, it.key(),
                           cell_words(cell));
      }
    }
  }
  nlohmann::json simulation = member(config, "simulation");
  if (simulation.is_object()) simulation.erase("cost");
  const nlohmann::json options = sim_options_json(deployment.options);
  for (auto it = options.begin(); it != options.end(); ++it) {
    const nlohmann::json& claimed = member(simulation, it.key().c_str());
    if (claimed != it.value()) {
      return fmt::format("{}.config.simulation.{}: {}, but the sweep's deployment {} has {}", field,
                         it.key(), quoted(claimed), deployment_label(deployment),
                         quoted(it.value()));
    }
  }
  if (simulation.size() != options.size()) {
    return fmt::format("{}.config.simulation: {} options, but the sweep's deployment has {}", field,
                       simulation.size(), options.size());
  }
  return std::nullopt;
}

// A fleet's section: its instances, split and router the deployment's.
std::optional<std::string> fleet_problem(const nlohmann::json& r, const std::string& field,
                                         const PlanDeployment& deployment) {
  const FleetOptions& fleet = deployment.fleet;
  if (fleet.instances() <= 1) return std::nullopt;  // no fleet (plan_merge.cc checked)
  const nlohmann::json& f = member(r, "fleet");
  const std::string label = deployment_label(deployment);
  if (member(f, "replicas") != fleet.instances()) {
    return fmt::format("{}.fleet.replicas: {}, but the sweep's deployment {} has {} instances",
                       field, quoted(member(f, "replicas")), label, fleet.instances());
  }
  const nlohmann::json& policy = member(member(f, "router"), "policy");
  if (policy != std::string(to_string(fleet.router.policy))) {
    return fmt::format("{}.fleet.router.policy: {}, but the sweep's deployment {} routes by {}",
                       field, quoted(policy), label, to_string(fleet.router.policy));
  }
  const bool split = fleet.disaggregated();
  for (const auto& [key, want] :
       {std::pair{"prefill", fleet.prefill_replicas}, std::pair{"decode", fleet.decode_replicas}}) {
    const nlohmann::json& claimed = member(f, key);
    if (split ? claimed != want : !claimed.is_null()) {
      return fmt::format("{}.fleet.{}: {}, but the sweep's deployment {} {}", field, key,
                         quoted(claimed), label,
                         split ? fmt::format("has {} {} instances", want, key)
                               : std::string("is not disaggregated"));
    }
  }
  if (split) {
    const nlohmann::json& transfer = member(f, "kv_transfer");
    if (member(transfer, "gbps") != fleet.kv_transfer_gbps ||
        member(transfer, "latency_us") != fleet.kv_transfer_latency_us) {
      return fmt::format("{}.fleet.kv_transfer: not the sweep's link ({} GB/s, {} us)", field,
                         fleet.kv_transfer_gbps, fleet.kv_transfer_latency_us);
    }
  }
  return std::nullopt;
}

// The figures a report derives from its own counts: the hit rate, the
// throughput, the SLO attainment and targets, the cost and its GPUs.
std::optional<std::string> derived_problem(const nlohmann::json& r, const std::string& field,
                                           const PlanDeployment& deployment) {
  const SimOptions& options = deployment.options;
  const nlohmann::json& cache = member(r, "prefix_cache");
  const auto query = count_at(cache, "query_tokens");
  const auto hits = count_at(cache, "hit_tokens");
  if (!query || !hits || *hits > *query) {
    return fmt::format("{}.prefix_cache.hit_tokens: {} of {} query tokens", field,
                       quoted(member(cache, "hit_tokens")), quoted(member(cache, "query_tokens")));
  }
  if (*hits > 0 && (!options.prefix_cache || options.allocator != AllocatorKind::kPaged)) {
    return fmt::format("{}.prefix_cache.hit_tokens: {}, but the sweep's cells cache no prefixes",
                       field, *hits);
  }
  const double hit_rate =
      *query == 0 ? 0.0 : static_cast<double>(*hits) / static_cast<double>(*query);
  if (member(cache, "hit_rate") != hit_rate) {
    return fmt::format("{}.prefix_cache.hit_rate: {}, but {} hit of {} query tokens is {}", field,
                       quoted(member(cache, "hit_rate")), *hits, *query, hit_rate);
  }
  const nlohmann::json& scheduler = member(r, "scheduler");
  const auto output = count_at(scheduler, "output_tokens");
  const double seconds = member(scheduler, "virtual_seconds").get<double>();
  if (!output) {
    return fmt::format("{}.scheduler.output_tokens: {} is not a count", field,
                       quoted(member(scheduler, "output_tokens")));
  }
  const double per_second = seconds > 0 ? static_cast<double>(*output) / seconds : 0.0;
  if (member(scheduler, "output_tokens_per_second") != per_second) {
    return fmt::format("{}.scheduler.output_tokens_per_second: {}, but {} tokens in {} s is {}",
                       field, quoted(member(scheduler, "output_tokens_per_second")), *output,
                       seconds, per_second);
  }
  if (options.slo.any()) {
    const nlohmann::json& slo = member(r, "slo");
    bool met = true;
    const nlohmann::json& targets = member(slo, "targets");
    if (!targets.is_array() || targets.size() != options.slo.targets.size()) {
      return fmt::format("{}.slo.targets: {}, but the plan has {} targets", field, quoted(targets),
                         options.slo.targets.size());
    }
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const PercentileTarget& want = options.slo.targets[i];
      const nlohmann::json& t = targets[i];
      if (member(t, "metric") != to_string(want.metric) ||
          member(t, "percentile") != want.percentile || member(t, "limit_ms") != want.limit_ms ||
          !member(t, "met").is_boolean()) {
        return fmt::format("{}.slo.targets[{}]: {}, but the plan's target is {} p{} <= {:g} ms",
                           field, i, quoted(t), to_string(want.metric), want.percentile,
                           want.limit_ms);
      }
      const nlohmann::json& value = member(t, "value_ms");
      if (!value.is_null() &&
          (!value.is_number() || member(t, "met") != (value <= want.limit_ms))) {
        return fmt::format("{}.slo.targets[{}].met: {}, but its value is {}", field, i,
                           quoted(member(t, "met")), quoted(value));
      }
      met = met && member(t, "met").get<bool>();
    }
    if (options.slo.joint()) {
      const auto requests_met = count_at(slo, "requests_met");
      const auto total = member(r, "requests")["total"].get<std::uint64_t>();
      if (!requests_met || *requests_met > total) {
        return fmt::format("{}.slo.requests_met: {} of {} requests", field,
                           quoted(member(slo, "requests_met")), total);
      }
      const double attainment =
          total == 0 ? 0.0 : static_cast<double>(*requests_met) / static_cast<double>(total);
      if (member(slo, "attainment") != attainment) {
        return fmt::format("{}.slo.attainment: {}, but {} of {} requests is {}", field,
                           quoted(member(slo, "attainment")), *requests_met, total, attainment);
      }
      for (const auto& [key, target] :
           {std::pair{"ttft_ms", options.slo.ttft_ms}, std::pair{"tpot_ms", options.slo.tpot_ms},
            std::pair{"e2e_ms", options.slo.e2e_ms}}) {
        const nlohmann::json& claimed = member(slo, key);
        if (target ? claimed != *target : !claimed.is_null()) {
          return fmt::format("{}.slo.{}: {}, but the plan's target is {}", field, key,
                             quoted(claimed), target ? fmt::format("{}", *target) : "none");
        }
      }
      met = met && attainment >= options.slo.attainment;
    }
    if (member(slo, "met") != met) {
      return fmt::format("{}.slo.met: {}, but its targets and attainment say {}", field,
                         quoted(member(slo, "met")), met);
    }
  }
  if (!options.gpu_hour_usd) return std::nullopt;  // no cost_usd (plan_merge.cc checked)
  const nlohmann::json& cost = member(r, "cost_usd");
  if (member(cost, "gpu_hour_usd") != *options.gpu_hour_usd) {
    return fmt::format("{}.cost_usd.gpu_hour_usd: {}, but the sweep's price is {}", field,
                       quoted(member(cost, "gpu_hour_usd")), *options.gpu_hour_usd);
  }
  if (member(cost, "gpus") != deployment.gpus()) {
    return fmt::format("{}.cost_usd.gpus: {}, but the sweep's deployment {} has {} GPUs", field,
                       quoted(member(cost, "gpus")), deployment_label(deployment),
                       deployment.gpus());
  }
  // As cost_usd_json computes them.
  const double per_hour = *options.gpu_hour_usd * static_cast<double>(deployment.gpus());
  const double run = per_hour * seconds / 3600.0;
  if (member(cost, "usd_run") != run) {
    return fmt::format("{}.cost_usd.usd_run: {}, but {} s at ${} an hour cost {}", field,
                       quoted(member(cost, "usd_run")), seconds, per_hour, run);
  }
  const auto within = count_at(cost, "output_tokens_within_slo");
  if (!within || *within > *output) {
    return fmt::format("{}.cost_usd.output_tokens_within_slo: {} of {} output tokens", field,
                       quoted(member(cost, "output_tokens_within_slo")), *output);
  }
  const nlohmann::json per_million =
      *within == 0 ? nlohmann::json(nullptr)
                   : nlohmann::json(run / (static_cast<double>(*within) / 1e6));
  if (member(cost, "usd_per_million_output_tokens") != per_million) {
    return fmt::format(
        "{}.cost_usd.usd_per_million_output_tokens: {}, but ${} for {} tokens within the SLOs is "
        "{}",
        field, quoted(member(cost, "usd_per_million_output_tokens")), run, *within,
        quoted(per_million));
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> cell_identity_problem(const nlohmann::json& report,
                                                 const std::string& field, const PlanCell& cell,
                                                 const PlanDeployment& deployment) {
  if (auto problem = config_problem(report, field, cell, deployment)) return problem;
  if (auto problem = fleet_problem(report, field, deployment)) return problem;
  return derived_problem(report, field, deployment);
}

namespace {

// One simulation a merge runs again, and what it must show.
struct Recheck {
  enum class Expect {
    kFigures,       // cell: the figures its part gave
    kServes,        // a search's answer: serves the trace
    kFails,         // one block less than a search's answer: does not
    kComputeBound,  // a search's unmet pool: does not serve, and held nothing back
  };
  Expect expect = Expect::kFigures;
  std::size_t cell = 0;    // kFigures
  std::size_t search = 0;  // the others
  std::uint32_t blocks = 0;
};

// The cells of search `g`'s group (its model, deployment and page size).
std::vector<std::size_t> group_cells(const PlanSweep& sweep, const MinSearch& search) {
  std::vector<std::size_t> group;
  for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
    const PlanCell& cell = sweep.cells[i];
    if (cell.model == search.model && cell.page_tokens == search.page_tokens &&
        cell.deployment == search.deployment) {
      group.push_back(i);
    }
  }
  return group;
}

// What decides a search's answer, added to `checks`; a line when the part's
// own figures contradict it.
std::optional<std::string> search_rechecks(const PlanRequest& request, const PlanSweep& sweep,
                                           std::size_t g, std::vector<Recheck>& checks) {
  const MinSearch& search = sweep.searches[g];
  const std::vector<std::size_t> group = group_cells(sweep, search);
  auto serving = [&](std::size_t i) {
    return serves(*sweep.cells[i].figures, request.slo_attainment);
  };
  auto swept = [&](std::uint64_t blocks) -> std::optional<std::size_t> {
    for (std::size_t i : group) {
      if (sweep.cells[i].config.kv.pool_blocks == blocks) return i;
    }
    return std::nullopt;
  };
  for (std::uint32_t raised : search.raised_past) {
    if (auto i = swept(raised); i && serving(*i)) {
      return fmt::format(
          "{}.raised_past_pool_blocks: {} blocks, but {} says that swept pool serves the trace",
          search.from, raised, sweep.cells[*i].from);
    }
  }
  if (search.blocks) {
    const std::uint32_t answer = *search.blocks;
    // Every swept pool at or above the answer serves (else the search is
    // raised past it), and each is simulated again.
    for (std::size_t i : group) {
      if (sweep.cells[i].config.kv.pool_blocks < answer) continue;
      if (!serving(i)) {
        return fmt::format(
            "{}.pool_blocks: {} blocks, but {} says the swept {} blocks above it do not serve the "
            "trace (the search is raised past them)",
            search.from, answer, sweep.cells[i].from, sweep.cells[i].config.kv.pool_blocks);
      }
      checks.push_back({Recheck::Expect::kFigures, i, g, 0});
    }
    if (!swept(answer)) checks.push_back({Recheck::Expect::kServes, 0, g, answer});
    if (answer > 1) {
      if (auto below = swept(answer - 1)) {
        if (serving(*below)) {
          return fmt::format(
              "{}.pool_blocks: {} blocks, but {} says the swept {} blocks serve the trace too",
              search.from, answer, sweep.cells[*below].from, answer - 1);
        }
        checks.push_back({Recheck::Expect::kFigures, *below, g, 0});
      } else {
        checks.push_back({Recheck::Expect::kFails, 0, g, answer - 1});
      }
    }
    return std::nullopt;
  }
  // No pool serves: no swept one may (a compute-bound pool runs as every
  // larger one; the ceilings are above every pool below them).
  const bool compute_bound = search.unmet == SearchUnmet::kComputeBound;
  for (std::size_t i : group) {
    const std::uint32_t blocks = sweep.cells[i].config.kv.pool_blocks;
    if ((compute_bound ? blocks >= search.unmet_blocks : blocks <= search.unmet_blocks) &&
        serving(i)) {
      return fmt::format("{}.unmet: no pool serves, but {} says the swept {} blocks do",
                         search.from, sweep.cells[i].from, blocks);
    }
  }
  if (compute_bound) {
    checks.push_back({Recheck::Expect::kComputeBound, 0, g, search.unmet_blocks});
  }
  return std::nullopt;
}

// The smallest deployment per GPU kind (plan_report.cc's min_deployment_rows):
// the answer, every deployment with at least its GPUs (they serve), and the
// last that does not serve below it (which rules out every smaller one).
void deployment_rechecks(const PlanRequest& request, const PlanSweep& sweep,
                         std::vector<Recheck>& checks) {
  const std::vector<PlanCell>& cells = sweep.cells;
  const std::vector<PlanDeployment>& deployments = sweep.deployments;
  if (!sweep.show_deployments || !request.kv_memories.empty() || sweep.fleet_sweep) return;
  auto serving = [&](std::size_t i) { return serves(*cells[i].figures, request.slo_attainment); };
  auto gpus_of = [&](std::size_t i) { return deployments[cells[i].deployment].gpus(); };
  std::vector<std::tuple<std::string, std::uint32_t, std::string>> groups;
  for (const PlanCell& cell : cells) {
    if (!deployments[cell.deployment].gpu) continue;
    auto key = std::tuple{cell.model, cell.page_tokens, *deployments[cell.deployment].gpu};
    if (std::find(groups.begin(), groups.end(), key) == groups.end()) groups.push_back(key);
  }
  for (const auto& [model, page, gpu] : groups) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      if (cells[i].model == model && cells[i].page_tokens == page &&
          deployments[cells[i].deployment].gpu == gpu) {
        members.push_back(i);
      }
    }
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return std::pair{gpus_of(a), deployments[cells[a].deployment].tp} <
             std::pair{gpus_of(b), deployments[cells[b].deployment].tp};
    });
    std::optional<std::size_t> answer;
    for (std::size_t candidate : members) {
      if (!serving(candidate)) continue;
      const bool failing = std::any_of(members.begin(), members.end(), [&](std::size_t other) {
        return gpus_of(other) >= gpus_of(candidate) && !serving(other);
      });
      if (!failing) {
        answer = candidate;
        break;
      }
    }
    if (answer) {
      for (std::size_t i : members) {
        if (gpus_of(i) >= gpus_of(*answer)) checks.push_back({Recheck::Expect::kFigures, i, 0, 0});
      }
    }
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      if (!serving(*it)) {
        checks.push_back({Recheck::Expect::kFigures, *it, 0, 0});
        break;
      }
    }
  }
}

// What is wrong with what simulating `check` again gave, or nullopt; `code`
// becomes 1 when a simulation failed its invariant checks.
std::optional<std::string> recheck_problem(const PlanRequest& request, const PlanSweep& sweep,
                                           const Recheck& check, const SimulationResult& again,
                                           const SimOptions& options, int& code) {
  const CellFigures figures = CellFigures::of(again, options);
  if (again.violated) {
    code = kExitCheckFailed;
    return fmt::format("{}: {} while verifying the merged plan: {}", request.trace_path,
                       first_violation(again).invariant, first_violation(again).message);
  }
  // Every cell simulated the one trace (plan_merge.cc checked): so must this.
  const std::string& traced = sweep.cells.front().figures->trace_sha256;
  if (figures.trace_sha256 != traced) {
    return fmt::format(
        "{}: not the trace the plan's cells simulated (its SHA-256 is {}, theirs {})",
        request.trace_path, figures.trace_sha256, traced);
  }
  if (check.expect == Recheck::Expect::kFigures) {
    const PlanCell& cell = sweep.cells[check.cell];
    if (request.merge_verify_all) {
      // The whole report but its wall-clock timing, which no two runs share.
      nlohmann::json claimed = cell.result->report;
      nlohmann::json simulated = again.report;
      claimed.erase("timing");
      simulated.erase("timing");
      if (claimed == simulated) return std::nullopt;
      std::string key = "report";
      for (auto it = simulated.begin(); it != simulated.end(); ++it) {
        if (!claimed.contains(it.key()) || claimed[it.key()] != it.value()) {
          key += "." + it.key();
          break;
        }
      }
      return fmt::format(
          "{}.{}: not what simulating {} on {} gives: the part was altered, or written by another "
          "build",
          cell.from, key, cell_words(cell), deployment_label(sweep.deployments[cell.deployment]));
    }
    if (answer_figures(figures) == answer_figures(*cell.figures)) return std::nullopt;
    return fmt::format(
        "{}.report: the figures of {} on {} are not what simulating it gives: the part was "
        "altered, or written by another build",
        cell.from, cell_words(cell), deployment_label(sweep.deployments[cell.deployment]));
  }
  const MinSearch& search = sweep.searches[check.search];
  const bool served = serves(figures, request.slo_attainment);
  const double watermark = sweep.deployments[search.deployment].options.watermark;
  switch (check.expect) {
    case Recheck::Expect::kServes:
      if (served) return std::nullopt;
      return fmt::format(
          "{}.pool_blocks: {} blocks, but simulated again they do not serve the trace: the part "
          "was altered, or written by another build",
          search.from, check.blocks);
    case Recheck::Expect::kFails:
      if (!served) return std::nullopt;
      return fmt::format(
          "{}.pool_blocks: {} blocks, but simulated again {} blocks serve the trace too: the part "
          "was altered, or written by another build",
          search.from, check.blocks + 1, check.blocks);
    case Recheck::Expect::kComputeBound:
      if (!served && !pool_mattered(figures, check.blocks, watermark)) return std::nullopt;
      return fmt::format(
          "{}.unmet.pool_blocks: compute-bound at {} blocks, but simulated again that pool {}: "
          "the part was altered, or written by another build",
          search.from, check.blocks, served ? "serves the trace" : "held the run back");
    case Recheck::Expect::kFigures: break;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> verify_merged_answers(const PlanRequest& request, const PlanSweep& sweep,
                                         PlanSimulator& simulator, unsigned jobs) {
  std::vector<Recheck> checks;
  for (std::size_t g = 0; g < sweep.searches.size(); ++g) {
    if (auto problem = search_rechecks(request, sweep, g, checks)) {
      eprint("{}\n", *problem);
      return kExitInput;
    }
  }
  deployment_rechecks(request, sweep, checks);
  if (request.merge_verify_all) {
    for (std::size_t i = 0; i < sweep.cells.size(); ++i) {
      if (sweep.cells[i].result) checks.push_back(Recheck{Recheck::Expect::kFigures, i, 0, 0});
    }
  }
  // Each cell once.
  std::vector<Recheck> unique;
  for (const Recheck& check : checks) {
    const bool seen =
        check.expect == Recheck::Expect::kFigures &&
        std::any_of(unique.begin(), unique.end(), [&](const Recheck& other) {
          return other.expect == Recheck::Expect::kFigures && other.cell == check.cell;
        });
    if (!seen) unique.push_back(check);
  }
  if (unique.empty()) return std::nullopt;
  if (needs_spool(request.trace_path)) {
    eprint(
        "kvreplay plan-merge: the plan's answers are verified by simulating them again, which "
        "needs the trace, but the shards read it from standard input or a FIFO: shard a trace "
        "file\n");
    return kExitInput;
  }
  auto config_of = [&](const Recheck& check) {
    if (check.expect == Recheck::Expect::kFigures) return sweep.cells[check.cell].config;
    RunConfig config = sweep.searches[check.search].config;
    config.kv.pool_blocks = check.blocks;
    config.kv_memory.reset();
    return config;
  };
  auto deployment_of = [&](const Recheck& check) -> const PlanDeployment& {
    return sweep.deployments[check.expect == Recheck::Expect::kFigures
                                 ? sweep.cells[check.cell].deployment
                                 : sweep.searches[check.search].deployment];
  };
  // As the sweep's own simulations (a merge ran none): those at once must fit.
  std::uint64_t each = 0;
  for (const Recheck& check : unique) {
    each = std::max(each, fleet_memory_bytes(config_of(check).kv.pool_blocks,
                                             deployment_of(check).fleet.instances()));
  }
  const std::uint64_t at_once = jobs_at_once(unique.size(), jobs);
  if (auto problem = check_memory(
          mul_sat(at_once, each),
          fmt::format("verifying the merged plan's answers, {} simulations, {} at once",
                      unique.size(), at_once),
          fmt::format("{} x {}, the largest one's bound", at_once, memory_text(each)))) {
    eprint("kvreplay plan-merge: {}: give -j 1 or a larger memory limit\n", *problem);
    return kExitInput;
  }
  std::vector<std::optional<std::string>> problems(unique.size());
  std::vector<int> codes(unique.size(), kExitInput);
  parallel_for(unique.size(), jobs, [&](std::size_t k) {
    auto again = simulator.simulate(config_of(unique[k]), deployment_of(unique[k]), {});
    if (!again) {
      problems[k] = again.error().to_string();
      return;
    }
    problems[k] = recheck_problem(request, sweep, unique[k], again.value(),
                                  deployment_of(unique[k]).options, codes[k]);
  });
  simulator.clear_progress();
  for (std::size_t k = 0; k < unique.size(); ++k) {
    if (problems[k]) {
      eprint("{}\n", *problems[k]);
      return codes[k];
    }
  }
  return std::nullopt;
}

}  // namespace kvreplay
