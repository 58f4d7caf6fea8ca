#include "app/plan.h"

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
  // Why no pool serves (blocks is empty): the reason, the pool that showed it,
  // and the table's words (`unmet_message`, plan.json's unmet.message).
  std::optional<SearchUnmet> unmet;
  std::uint32_t unmet_blocks = 0;
  std::string unmet_message;
  // The last probe's pool and, when it did not serve, why (for the message).
  std::uint32_t last_probe_blocks = 0;
  std::string last_shortfall;
};

// How many of `count` jobs run at once with `-j jobs`.
std::size_t jobs_at_once(std::size_t count, unsigned jobs) {
  return std::max<std::size_t>(1, std::min<std::size_t>(jobs, count));
}

// Runs `count` jobs on up to `jobs` threads; job i writes only its own slot.
// An exception in a job (std::bad_alloc) stops the others from starting more
// jobs and is rethrown here once every thread has joined; a thread that cannot
// be started leaves the jobs to the others.
void parallel_for(std::size_t count, unsigned jobs, const std::function<void(std::size_t)>& job) {
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      for (std::size_t i = next++; i < count; i = next++) job(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> threads;
  const std::size_t n = jobs_at_once(count, jobs);
  threads.reserve(n - 1);  // so that emplace_back below only fails to start a thread
  for (std::size_t t = 1; t < n; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;
    }
  }
  worker();
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
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

// Why a simulation does not serve the trace, in words ("3 preemptions, 84.1%
// of requests meet TTFT <= 50 ms (p99 TTFT 147.4 ms), under the 99% required");
// empty when it serves.
std::string shortfall_words(const nlohmann::json& r, double slo_attainment) {
  std::vector<std::string> words;
  const auto preemptions = r.at("scheduler").at("preemptions").get<std::uint64_t>();
  if (preemptions > 0) {
    words.push_back(fmt::format("{} preemption{}", preemptions, preemptions == 1 ? "" : "s"));
  }
  const auto skipped = r.at("requests").at("skipped_pool_too_small").get<std::uint64_t>();
  if (skipped > 0) {
    words.push_back(
        fmt::format("{} request{} skipped for the pool's size", skipped, skipped == 1 ? "" : "s"));
  }
  if (r.contains("slo") && r.at("slo").at("attainment").get<double>() < slo_attainment) {
    const nlohmann::json& slo = r.at("slo");
    std::vector<std::string> slos;
    std::vector<std::string> p99s;
    if (slo.contains("ttft_ms") && slo.at("ttft_ms").is_number()) {
      slos.push_back(fmt::format("TTFT <= {:g} ms", slo.at("ttft_ms").get<double>()));
      p99s.push_back("p99 TTFT " + ms_text(r.at("latency").at("ttft_ms").at("p99").get<double>()));
    }
    if (slo.contains("tpot_ms") && slo.at("tpot_ms").is_number()) {
      slos.push_back(fmt::format("TPOT <= {:g} ms", slo.at("tpot_ms").get<double>()));
      p99s.push_back("p99 TPOT " + ms_text(r.at("latency").at("tpot_ms").at("p99").get<double>()));
    }
    words.push_back(fmt::format("{:.1f}% of requests meet {} ({}), under the {:g}% required",
                                slo.at("attainment").get<double>() * 100, fmt::join(slos, ", "),
                                fmt::join(p99s, ", "), slo_attainment * 100));
  }
  return fmt::format("{}", fmt::join(words, ", "));
}

// Whether the pool of `blocks` held a simulation back: it preempted, skipped a
// request for the pool's size, evicted a cached block, or filled (its peak use,
// the watermark and one block of margin, for vLLM's null block, reach it).
// When not, any larger pool runs the very same simulation.
bool pool_mattered(const nlohmann::json& r, std::uint32_t blocks, double watermark) {
  const auto watermark_blocks =
      static_cast<std::uint64_t>(std::floor(watermark * static_cast<double>(blocks)));
  return r.at("scheduler").at("preemptions").get<std::uint64_t>() > 0 ||
         r.at("requests").at("skipped_pool_too_small").get<std::uint64_t>() > 0 ||
         r.at("prefix_cache").at("evictions").get<std::uint64_t>() > 0 ||
         r.at("blocks").at("peak_used").get<std::uint64_t>() + watermark_blocks + 1 >= blocks;
}

// plan.json's min_kv_memory[].unmet (and a part's searches[].unmet): null
// when the search found a pool, else why not.
nlohmann::json unmet_json(const MinSearch& search) {
  if (!search.unmet) return nullptr;
  return {{"reason", std::string(to_string(*search.unmet))},
          {"pool_blocks", search.unmet_blocks},
          {"message", search.unmet_message}};
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
          {"roofline",
           {r.compute_efficiency, r.bandwidth_efficiency, r.link_efficiency, r.allreduce_latency_us,
            r.step_overhead_ms}},
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

// plan-merge reads every number of a part against the plan it claims to be
// part of: a forged or corrupt part is refused, "FILE: FIELD: PROBLEM", before
// any of it is used (counts that would wrap or size an allocation, shares
// outside [0, 1], pools past the ceiling, cells of another shard, text with
// control characters for the terminal).

// The most shards `plan --shard I/N` accepts (N of at most nine digits).
constexpr std::uint64_t kMaxShards = 999'999'999;
// The most probes one search makes per start: doubling from 1 block to the
// ceiling (2^28: 29 probes), then bisecting it (28), rounded up.
constexpr std::uint64_t kMaxProbesPerStart = 64;
// The longest text read from a part (a warning, a reason).
constexpr std::size_t kMaxPartText = 4096;

std::string field_problem(const std::string& file, std::string_view field,
                          std::string_view problem) {
  return fmt::format("{}: {}: {}", file, field, problem);
}

// A value as a message quotes it: its JSON, cut short.
std::string shown(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// The value at a dotted path ("blocks.peak_used") under `json`, or nullptr.
const nlohmann::json* find_dotted(const nlohmann::json& json, std::string_view dotted) {
  const nlohmann::json* at = &json;
  while (!dotted.empty()) {
    const std::size_t dot = dotted.find('.');
    if (!at->is_object()) return nullptr;
    auto it = at->find(std::string(dotted.substr(0, dot)));
    if (it == at->end()) return nullptr;
    at = &*it;
    dotted = dot == std::string_view::npos ? std::string_view() : dotted.substr(dot + 1);
  }
  return at;
}

// What a number or text read from a part must be.
enum class Figure {
  kCount,         // an integer >= 0
  kShare,         // a number in [0, 1]
  kAmount,        // a number >= 0
  kAmountOrNull,  // an amount, or null
  kFlag,          // true or false
  kText,          // a string of printable characters, at most kMaxPartText bytes
  kObject,        // an object
  kNone,          // an empty array
};

// What is wrong with `value` as a `figure`, or nullopt.
std::optional<std::string> figure_problem(const nlohmann::json* value, Figure figure) {
  if (value == nullptr) return std::string("missing");
  const nlohmann::json& v = *value;
  switch (figure) {
    case Figure::kCount:
      if (!v.is_number_unsigned()) return shown(v) + " is not a count (an integer >= 0)";
      break;
    case Figure::kShare:
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 1.0)) {
        return shown(v) + " is not a share between 0 and 1";
      }
      break;
    case Figure::kAmountOrNull:
      if (v.is_null()) break;
      [[fallthrough]];
    case Figure::kAmount:
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0.0) {
        return shown(v) + " is not a number >= 0";
      }
      break;
    case Figure::kFlag:
      if (!v.is_boolean()) return shown(v) + " is not true or false";
      break;
    case Figure::kText: {
      if (!v.is_string()) return shown(v) + " is not a string";
      const std::string& text = v.get_ref<const std::string&>();
      if (text.size() > kMaxPartText) {
        return fmt::format("{} bytes of text, more than the {} a part holds", text.size(),
                           kMaxPartText);
      }
      for (char c : text) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          return shown(v) + " holds a control character";
        }
      }
      break;
    }
    case Figure::kObject:
      if (!v.is_object()) return shown(v) + " is not an object";
      break;
    case Figure::kNone:
      if (!v.is_array() || !v.empty()) return shown(v) + " is not an empty array";
      break;
  }
  return std::nullopt;
}

// The figures plan and plan-merge read of a cell's report, and what each must be.
struct FigureRule {
  const char* path;
  Figure figure;
};
constexpr FigureRule kCellFigures[] = {
    {"trace.format", Figure::kText},
    {"trace.sha256", Figure::kText},
    {"requests.total", Figure::kCount},
    {"requests.finished", Figure::kCount},
    {"requests.skipped", Figure::kCount},
    {"requests.skipped_pool_too_small", Figure::kCount},
    {"blocks.peak_used", Figure::kCount},
    {"blocks.peak_in_use", Figure::kCount},
    {"fragmentation.waste_ratio_mean", Figure::kShare},
    {"fragmentation.waste_ratio_at_peak", Figure::kShare},
    {"scheduler.preemptions", Figure::kCount},
    {"scheduler.output_tokens_per_second", Figure::kAmount},
    {"scheduler.virtual_seconds", Figure::kAmount},
    {"prefix_cache.hit_rate", Figure::kShare},
    {"latency", Figure::kObject},
    {"latency.ttft_ms.p99", Figure::kAmount},
    {"latency.tpot_ms.p99", Figure::kAmount},
    {"overload", Figure::kObject},
    {"overload.ratio", Figure::kAmountOrNull},
    {"overload.overloaded", Figure::kFlag},
    {"invariants.checks", Figure::kCount},
    {"invariants.violations", Figure::kNone},
    {"config.pool_blocks", Figure::kCount},
    {"config.simulation.cost", Figure::kObject},
};

// What is wrong with the report a part gives for `cell`, as "FIELD: PROBLEM"
// under `field` ("cells[3].report"), or nullopt. `trace_sha256`: the part's
// trace; `slo`: whether the plan has SLOs (then every report has "slo").
std::optional<std::string> cell_report_problem(const nlohmann::json& r, const std::string& field,
                                               const PlanCell& cell,
                                               const std::string& trace_sha256, bool slo) {
  if (!r.is_object()) return fmt::format("{}: {} is not an object", field, shown(r));
  for (const FigureRule& rule : kCellFigures) {
    if (auto problem = figure_problem(find_dotted(r, rule.path), rule.figure)) {
      return fmt::format("{}.{}: {}", field, rule.path, *problem);
    }
  }
  if (slo != r.contains("slo")) {
    return fmt::format(
        "{}.slo: {}", field,
        slo ? "missing, but the plan has SLOs" : "present, but the plan has no SLOs");
  }
  if (slo) {
    if (auto problem = figure_problem(find_dotted(r, "slo"), Figure::kObject)) {
      return fmt::format("{}.slo: {}", field, *problem);
    }
    if (auto problem = figure_problem(find_dotted(r, "slo.attainment"), Figure::kShare)) {
      return fmt::format("{}.slo.attainment: {}", field, *problem);
    }
  }
  if (r["trace"]["sha256"] != trace_sha256) {
    return fmt::format("{}.trace.sha256: {}, but the part's trace is {}", field,
                       shown(r["trace"]["sha256"]), trace_sha256);
  }
  const auto total = r["requests"]["total"].get<std::uint64_t>();
  const auto finished = r["requests"]["finished"].get<std::uint64_t>();
  const auto skipped = r["requests"]["skipped"].get<std::uint64_t>();
  if (add_sat(finished, skipped) > total) {
    return fmt::format("{}.requests: {} finished and {} skipped of {} requests", field, finished,
                       skipped, total);
  }
  if (r["requests"]["skipped_pool_too_small"].get<std::uint64_t>() > skipped) {
    return fmt::format("{}.requests.skipped_pool_too_small: more than the {} skipped", field,
                       skipped);
  }
  const std::uint32_t pool = cell.config.kv.pool_blocks;
  if (r["config"]["pool_blocks"].get<std::uint64_t>() != pool) {
    return fmt::format(
        "{}.config.pool_blocks: {}, but the sweep's cell --model {} --page-tokens "
        "{} --kv-memory {} has {} blocks",
        field, r["config"]["pool_blocks"].get<std::uint64_t>(), cell.model, cell.page_tokens,
        cell.kv_memory, pool);
  }
  const auto peak_used = r["blocks"]["peak_used"].get<std::uint64_t>();
  if (peak_used > pool) {
    return fmt::format("{}.blocks.peak_used: {} blocks, more than the pool's {}", field, peak_used,
                       pool);
  }
  if (r["blocks"]["peak_in_use"].get<std::uint64_t>() > peak_used) {
    return fmt::format("{}.blocks.peak_in_use: {}, more than the {} blocks used at the peak", field,
                       r["blocks"]["peak_in_use"].get<std::uint64_t>(), peak_used);
  }
  return std::nullopt;
}

// The plan the parts claim to be of, as this plan-merge resolved it.
struct MergedSweep {
  const std::string& sweep_sha256;
  std::size_t units = 0;
  bool search_min = true;
  bool slo = false;
  const std::vector<std::size_t>& cell_group;  // each cell's search (its unit with the search)
};

// plan-merge: every cell and search of the sweep from the parts (checked by
// run_plan_merge to be the shards of one sweep), each exactly once, every
// figure range-checked. Returns the line to print when a part is refused.
std::optional<std::string> fill_from_parts(const std::vector<PlanPart>& parts,
                                           const MergedSweep& sweep, std::vector<PlanCell>& cells,
                                           std::vector<MinSearch>& searches) {
  std::vector<const std::string*> cell_from(cells.size(), nullptr);
  std::vector<const std::string*> search_from(searches.size(), nullptr);
  auto refuse = [](const std::string& why) { return "kvreplay plan-merge: " + why; };
  for (const PlanPart& part : parts) {
    const nlohmann::json& json = part.json;
    const std::string& file = part.path;
    if (json.at("sweep_sha256").get<std::string>() != sweep.sweep_sha256 ||
        json.at("units").get<std::uint64_t>() != sweep.units) {
      return refuse(fmt::format(
          "{}: its sweep resolves differently here (a model preset, a --model-config file or "
          "this kvreplay changed since the part was written): rerun the shards",
          file));
    }
    // run_plan_merge checked 1 <= index <= count.
    const auto shard_index = json["shard"]["index"].get<std::uint64_t>();
    const auto shard_count = json["shard"]["count"].get<std::uint64_t>();
    auto other_shard = [&](std::string_view what, std::size_t i,
                           std::size_t unit) -> std::optional<std::string> {
      if (unit % shard_count == shard_index - 1) return std::nullopt;
      return fmt::format("{} {} is shard {}/{}'s, not this part's {}/{}", what, i,
                         unit % shard_count + 1, shard_count, shard_index, shard_count);
    };
    const std::string trace_sha256 = json["trace"]["sha256"].get<std::string>();
    const nlohmann::json& part_cells = json.at("cells");
    for (std::size_t k = 0; k < part_cells.size(); ++k) {
      const nlohmann::json& entry = part_cells[k];
      const std::string field = fmt::format("cells[{}]", k);
      if (auto problem = figure_problem(&entry, Figure::kObject)) {
        return field_problem(file, field, *problem);
      }
      if (auto problem = figure_problem(find_dotted(entry, "index"), Figure::kCount)) {
        return field_problem(file, field + ".index", *problem);
      }
      const auto index = entry["index"].get<std::uint64_t>();
      if (index >= cells.size()) {
        return field_problem(
            file, field + ".index",
            fmt::format("cell {} is not in the sweep ({} cells)", index, cells.size()));
      }
      const std::size_t i = static_cast<std::size_t>(index);
      if (auto problem = other_shard("cell", i, sweep.search_min ? sweep.cell_group[i] : i)) {
        return field_problem(file, field + ".index", *problem);
      }
      if (cell_from[i] != nullptr) {
        return refuse(fmt::format("{} and {} both hold cell {}", *cell_from[i], file, i));
      }
      cell_from[i] = &file;
      if (auto problem =
              cell_report_problem(entry.contains("report") ? entry["report"] : nullptr,
                                  field + ".report", cells[i], trace_sha256, sweep.slo)) {
        return fmt::format("{}: {}", file, *problem);
      }
      const nlohmann::json* warnings = find_dotted(entry, "warnings");
      const nlohmann::json* reasons = find_dotted(entry, "warning_reasons");
      if (warnings == nullptr || !warnings->is_array()) {
        return field_problem(file, field + ".warnings", "not an array");
      }
      if (reasons == nullptr || !reasons->is_array()) {
        return field_problem(file, field + ".warning_reasons", "not an array");
      }
      if (warnings->size() != reasons->size()) {
        return field_problem(
            file, field + ".warning_reasons",
            fmt::format("{} reasons for {} warnings", reasons->size(), warnings->size()));
      }
      SimulationResult result;
      for (std::size_t w = 0; w < warnings->size(); ++w) {
        if (auto problem = figure_problem(&(*warnings)[w], Figure::kText)) {
          return field_problem(file, fmt::format("{}.warnings[{}]", field, w), *problem);
        }
        const nlohmann::json& reason = (*reasons)[w];
        if (!reason.is_number_unsigned() || reason.get<std::uint64_t>() >= kSkipReasons) {
          return field_problem(file, fmt::format("{}.warning_reasons[{}]", field, w),
                               fmt::format("unknown skip reason {}", shown(reason)));
        }
        result.warnings.push_back((*warnings)[w].get<std::string>());
        result.warning_reasons.push_back(static_cast<SkipReason>(reason.get<std::uint64_t>()));
      }
      result.report = entry["report"];
      cells[i].result = std::move(result);
    }
    const nlohmann::json& part_searches = json.at("searches");
    for (std::size_t k = 0; k < part_searches.size(); ++k) {
      const nlohmann::json& entry = part_searches[k];
      const std::string field = fmt::format("searches[{}]", k);
      if (auto problem = figure_problem(&entry, Figure::kObject)) {
        return field_problem(file, field, *problem);
      }
      for (const char* key : {"index", "probes"}) {
        if (auto problem = figure_problem(find_dotted(entry, key), Figure::kCount)) {
          return field_problem(file, field + "." + key, *problem);
        }
      }
      const auto index = entry["index"].get<std::uint64_t>();
      if (index >= searches.size()) {
        return field_problem(
            file, field + ".index",
            fmt::format("search {} is not in the sweep ({} searches)", index, searches.size()));
      }
      const std::size_t g = static_cast<std::size_t>(index);
      if (auto problem = other_shard("search", g, g)) {
        return field_problem(file, field + ".index", *problem);
      }
      if (search_from[g] != nullptr) {
        return refuse(fmt::format("{} and {} both hold search {}", *search_from[g], file, g));
      }
      search_from[g] = &file;
      MinSearch& search = searches[g];
      // Raised past: swept pools of this search's cells, each larger than the last.
      const nlohmann::json* raised = find_dotted(entry, "raised_past_pool_blocks");
      if (raised == nullptr || !raised->is_array()) {
        return field_problem(file, field + ".raised_past_pool_blocks", "not an array");
      }
      for (std::size_t r = 0; r < raised->size(); ++r) {
        const std::string raised_field = fmt::format("{}.raised_past_pool_blocks[{}]", field, r);
        const nlohmann::json& value = (*raised)[r];
        if (auto problem = figure_problem(&value, Figure::kCount)) {
          return field_problem(file, raised_field, *problem);
        }
        const auto blocks = value.get<std::uint64_t>();
        const bool swept = std::any_of(cells.begin(), cells.end(), [&](const PlanCell& cell) {
          return cell.model == search.model && cell.page_tokens == search.page_tokens &&
                 cell.deployment == search.deployment && cell.config.kv.pool_blocks == blocks;
        });
        if (!swept) {
          return field_problem(file, raised_field,
                               fmt::format("{} blocks is no swept pool of this search", blocks));
        }
        if (!search.raised_past.empty() && blocks <= search.raised_past.back()) {
          return field_problem(file, raised_field, "not above the one before");
        }
        search.raised_past.push_back(static_cast<std::uint32_t>(blocks));
      }
      const auto probes = entry["probes"].get<std::uint64_t>();
      if (probes > kMaxProbesPerStart * (1 + raised->size())) {
        return field_problem(file, field + ".probes",
                             fmt::format("{} probes, more than a search makes ({} a start)", probes,
                                         kMaxProbesPerStart));
      }
      search.probes = static_cast<std::uint32_t>(probes);
      const nlohmann::json* pool = find_dotted(entry, "pool_blocks");
      const nlohmann::json* unmet = find_dotted(entry, "unmet");
      if (pool == nullptr || unmet == nullptr || pool->is_null() == unmet->is_null()) {
        return field_problem(file, field,
                             "not exactly one of \"pool_blocks\" (the answer) and \"unmet\" (why "
                             "none)");
      }
      auto pool_problem = [&](const nlohmann::json& value) -> std::optional<std::string> {
        if (auto problem = figure_problem(&value, Figure::kCount)) return problem;
        const auto blocks = value.get<std::uint64_t>();
        if (blocks < 1 || blocks > kMaxSupportedPoolBlocks) {
          return fmt::format("{} blocks, not within 1 to {} (the largest pool kvreplay simulates)",
                             blocks, kMaxSupportedPoolBlocks);
        }
        return std::nullopt;
      };
      if (!pool->is_null()) {
        if (auto problem = pool_problem(*pool)) {
          return field_problem(file, field + ".pool_blocks", *problem);
        }
        if (!search.raised_past.empty() &&
            pool->get<std::uint64_t>() <= search.raised_past.back()) {
          return field_problem(file, field + ".pool_blocks",
                               "not above the swept pools it was raised past");
        }
        search.blocks = pool->get<std::uint32_t>();
        continue;
      }
      if (auto problem = figure_problem(unmet, Figure::kObject)) {
        return field_problem(file, field + ".unmet", *problem);
      }
      if (auto problem = figure_problem(find_dotted(*unmet, "reason"), Figure::kText)) {
        return field_problem(file, field + ".unmet.reason", *problem);
      }
      auto why = parse_search_unmet((*unmet)["reason"].get<std::string>());
      if (!why) {
        return field_problem(file, field + ".unmet.reason",
                             fmt::format("{} is not compute_bound, block_ceiling or memory_limit",
                                         shown((*unmet)["reason"])));
      }
      if (auto problem = figure_problem(find_dotted(*unmet, "message"), Figure::kText)) {
        return field_problem(file, field + ".unmet.message", *problem);
      }
      const nlohmann::json* unmet_pool = find_dotted(*unmet, "pool_blocks");
      if (auto problem = unmet_pool == nullptr ? std::optional<std::string>("missing")
                                               : pool_problem(*unmet_pool)) {
        return field_problem(file, field + ".unmet.pool_blocks", *problem);
      }
      search.unmet = why;
      search.unmet_blocks = unmet_pool->get<std::uint32_t>();
      search.unmet_message = (*unmet)["message"].get<std::string>();
    }
  }
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (cell_from[i] == nullptr) {
      return refuse(fmt::format("no part holds the cell --model {} --page-tokens {} --kv-memory {}",
                                cells[i].model, cells[i].page_tokens, cells[i].kv_memory));
    }
  }
  for (std::size_t g = 0; g < searches.size(); ++g) {
    if (search_from[g] == nullptr) {
      return refuse(fmt::format("no part holds the search of --model {} --page-tokens {}",
                                searches[g].model, searches[g].page_tokens));
    }
  }
  // Every cell simulated the one trace: the same requests.
  for (std::size_t i = 1; i < cells.size(); ++i) {
    const nlohmann::json& total = cells[i].result->report["requests"]["total"];
    if (total != cells[0].result->report["requests"]["total"]) {
      return field_problem(
          *cell_from[i], fmt::format("cells[].report.requests.total (cell {})", i),
          fmt::format("{} requests, but the cells of {} have {}", total.dump(), *cell_from[0],
                      cells[0].result->report["requests"]["total"].dump()));
    }
  }
  return std::nullopt;
}

}  // namespace

std::uint64_t simulation_memory_bound(std::uint64_t pool_blocks) {
  return add_sat(kSimulationBaseBytes, mul_sat(kSimulationBytesPerBlock, pool_blocks));
}

std::string_view to_string(SearchUnmet unmet) {
  switch (unmet) {
    case SearchUnmet::kComputeBound: return "compute_bound";
    case SearchUnmet::kBlockCeiling: return "block_ceiling";
    case SearchUnmet::kMemoryLimit: return "memory_limit";
  }
  return "?";
}

std::optional<SearchUnmet> parse_search_unmet(std::string_view text) {
  for (SearchUnmet unmet :
       {SearchUnmet::kComputeBound, SearchUnmet::kBlockCeiling, SearchUnmet::kMemoryLimit}) {
    if (to_string(unmet) == text) return unmet;
  }
  return std::nullopt;
}

PoolSearchOutcome search_smallest_pool(
    std::uint32_t start, std::uint32_t ceiling, SearchUnmet at_ceiling,
    const std::function<std::optional<PoolProbe>(std::uint32_t)>& probe,
    const std::function<std::uint32_t(std::uint32_t)>& largest_failing_swept) {
  PoolSearchOutcome outcome;
  auto give_up = [&](SearchUnmet why, std::uint64_t blocks) {
    outcome.unmet = why;
    outcome.decided_at = static_cast<std::uint32_t>(blocks);
    return std::nullopt;
  };
  // The smallest pool that serves above `low` (which does not, or is 0):
  // doubling from `first` (capped at the ceiling) to one that serves, then
  // bisection. nullopt: stopped, or none (outcome.unmet says why).
  auto smallest_above = [&](std::uint64_t low,
                            std::uint64_t first) -> std::optional<std::uint64_t> {
    std::uint64_t high = std::max<std::uint64_t>(first, low + 1);
    for (;;) {
      if (high > ceiling) return give_up(at_ceiling, ceiling);
      auto seen = probe(static_cast<std::uint32_t>(high));
      if (!seen) {
        outcome.stopped = true;
        return std::nullopt;
      }
      if (seen->serves) break;
      // A pool that held nothing back runs as any larger one: no memory serves.
      if (!seen->pool_mattered) return give_up(SearchUnmet::kComputeBound, high);
      if (high == ceiling) return give_up(at_ceiling, ceiling);
      low = high;
      high = std::min<std::uint64_t>(high * 2, ceiling);
    }
    while (high - low > 1) {
      const std::uint64_t mid = low + (high - low) / 2;
      auto seen = probe(static_cast<std::uint32_t>(mid));
      if (!seen) {
        outcome.stopped = true;
        return std::nullopt;
      }
      (seen->serves ? high : low) = mid;
    }
    return high;
  };
  auto found = smallest_above(0, start);
  // The answer must hold at every swept size above it too: a swept pool at or
  // above it that does not serve raises the search past it.
  while (found) {
    const std::uint32_t failing = largest_failing_swept(static_cast<std::uint32_t>(*found));
    if (failing == 0) break;
    outcome.raised_past.push_back(failing);
    found = smallest_above(failing, std::uint64_t{failing} + 1);
  }
  if (found) outcome.blocks = static_cast<std::uint32_t>(*found);
  return outcome;
}

namespace {

int run_plan_steps(const PlanRequest& request) {
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
            eprint("{}\n", config.error().to_string());
            return kExitInput;
          }
          const std::string label =
              !memory.empty()
                  ? memory
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
  // --shard splits the sweep into units dealt round-robin: with the search, a
  // group (its cells and its search, which is verified against them); without,
  // a cell. A merge simulates nothing: its parts hold every unit's figures.
  const bool merging = !request.parts.empty();
  const std::size_t units = request.search_min ? searches.size() : cells.size();
  auto unit_runs_here = [&](std::size_t unit) {
    if (merging) return false;
    return !request.shard || unit % request.shard->count == request.shard->index - 1;
  };
  const std::string sweep_sha256 = sweep_fingerprint(request, deployments, cells, unfit, units);
  std::vector<std::size_t> run_cells;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (unit_runs_here(request.search_min ? cell_group[i] : i)) run_cells.push_back(i);
  }
  // The sweep's simulations at once must fit in memory, each bounded by its
  // pool (README, "Memory bounds"); checked before anything is written. The
  // search caps its own pools by the same bound.
  if (auto problem = check_memory(0, "", "")) {  // KVREPLAY_MEMORY_LIMIT is no size
    eprint("kvreplay plan: {}\n", *problem);
    return kExitInput;
  }
  if (!run_cells.empty()) {
    std::uint32_t largest = 0;
    for (std::size_t i : run_cells) largest = std::max(largest, cells[i].config.kv.pool_blocks);
    const std::uint64_t at_once = jobs_at_once(run_cells.size(), jobs);
    const std::uint64_t each = simulation_memory_bound(largest);
    if (auto problem = check_memory(
            mul_sat(at_once, each),
            fmt::format("running {} of the sweep's simulations at once", at_once),
            fmt::format("{} x ({} + {} bytes a block x {} blocks, the largest swept pool)", at_once,
                        memory_text(kSimulationBaseBytes), kSimulationBytesPerBlock, largest))) {
      const std::uint64_t fitting = memory_limit().bytes / each;
      eprint("kvreplay plan: {}: {}\n", *problem,
             fitting == 0 ? std::string("sweep smaller pools (a larger --page-tokens, "
                                        "or less --kv-memory)")
                          : fmt::format("-j {} fits", fitting));
      return kExitInput;
    }
  }

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
  // A trace on standard input is read once, into a temporary file every
  // simulation then reads (each reads the trace as it goes).
  std::optional<SpooledInput> spooled;
  std::string trace_file = request.trace_path;
  if (request.trace_path == "-" && !merging) {
    auto spool = spool_standard_input(request.format);  // checked as it is spooled
    if (!spool) {
      eprint("{}\n", spool.error());
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
  auto count_simulation = [&] {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    ++simulations_done;
    if (progress->due()) {
      progress->draw(fmt::format(
          "plan: {} simulations done ({} cells in the sweep{})", simulations_done, cells.size(),
          request.shard ? fmt::format(", {} in shard {}/{}", run_cells.size(), request.shard->index,
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
      eprint("{}\n", cell.error->to_string());
      return kExitInput;
    }
  }
  if (merging) {
    const MergedSweep sweep{sweep_sha256, units, request.search_min, slo, cell_group};
    if (auto problem = fill_from_parts(request.parts, sweep, cells, searches)) {
      eprint("{}\n", *problem);
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

  // The smallest pool with no preemption, per model and page size: a binary
  // search over pool_blocks (assuming more memory never adds preemptions),
  // which stops where memory stops mattering, and never goes past the largest
  // pool kvreplay simulates or that the searches run at once fit in memory.
  if (request.search_min) {
    std::vector<std::size_t> run_searches;
    for (std::size_t g = 0; g < searches.size(); ++g) {
      if (unit_runs_here(g)) run_searches.push_back(g);
    }
    const std::uint64_t searching_at_once = jobs_at_once(run_searches.size(), jobs);
    const MemoryLimit limit = memory_limit();
    const std::uint64_t share = limit.bytes / searching_at_once;
    const std::uint64_t fitting_blocks =
        share <= kSimulationBaseBytes ? 0
                                      : (share - kSimulationBaseBytes) / kSimulationBytesPerBlock;
    const std::uint32_t ceiling = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(kMaxSupportedPoolBlocks, fitting_blocks));
    const SearchUnmet at_ceiling = fitting_blocks < kMaxSupportedPoolBlocks
                                       ? SearchUnmet::kMemoryLimit
                                       : SearchUnmet::kBlockCeiling;
    parallel_for(run_searches.size(), jobs, [&](std::size_t k) {
      MinSearch& search = searches[run_searches[k]];
      const SimOptions& sim_options = deployments[search.deployment].options;
      auto probe = [&](std::uint32_t blocks) -> std::optional<PoolProbe> {
        if (request.fault_out_of_memory) throw std::bad_alloc();
        RunConfig config = search.config;
        config.kv.pool_blocks = blocks;
        config.kv_memory.reset();
        ++search.probes;
        auto result =
            simulate_trace(config, sim_options,
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
        search.last_probe_blocks = blocks;
        search.last_shortfall = shortfall_words(result.value().report, request.slo_attainment);
        return PoolProbe{serves_trace(result.value()),
                         pool_mattered(result.value().report, blocks, sim_options.watermark)};
      };
      auto largest_failing_swept = [&](std::uint32_t answer) {
        std::uint32_t failing = 0;
        for (const PlanCell& cell : cells) {
          if (cell.model != search.model || cell.page_tokens != search.page_tokens ||
              cell.deployment != search.deployment || cell.config.kv.pool_blocks < answer) {
            continue;
          }
          if (!serves_trace(*cell.result)) failing = std::max(failing, cell.config.kv.pool_blocks);
        }
        return failing;
      };
      PoolSearchOutcome outcome = search_smallest_pool(search.config.kv.pool_blocks, ceiling,
                                                       at_ceiling, probe, largest_failing_swept);
      search.blocks = outcome.blocks;
      search.raised_past = outcome.raised_past;
      if (outcome.stopped || !outcome.unmet) return;
      search.unmet = outcome.unmet;
      search.unmet_blocks = outcome.decided_at;
      const std::string at_last =
          search.last_probe_blocks == outcome.decided_at && !search.last_shortfall.empty()
              ? " (" + search.last_shortfall + ")"
              : std::string();
      switch (*outcome.unmet) {
        case SearchUnmet::kComputeBound:
          search.unmet_message = fmt::format(
              "compute-bound: at any KV memory, {} (the pool of {} blocks never filled, and "
              "nothing was preempted or skipped for its size)",
              search.last_shortfall, outcome.decided_at);
          break;
        case SearchUnmet::kBlockCeiling:
          search.unmet_message = fmt::format(
              "block ceiling: {} blocks, the largest pool kvreplay simulates, do not serve the "
              "trace{}",
              outcome.decided_at, at_last);
          break;
        case SearchUnmet::kMemoryLimit:
          search.unmet_message = fmt::format(
              "memory limit: {} blocks do not serve the trace{}, and no larger pool fits: {} "
              "simulation{} at once, each {} + {} bytes a block, within the memory limit of {} "
              "({})",
              outcome.decided_at, at_last, searching_at_once, searching_at_once == 1 ? "" : "s",
              memory_text(kSimulationBaseBytes), kSimulationBytesPerBlock, memory_text(limit.bytes),
              limit.source);
          break;
      }
    });
    if (progress) progress->clear();
    for (const MinSearch& search : searches) {
      if (search.error) {
        eprint("{}\n", search.error->to_string());
        return kExitInput;
      }
    }
    for (const MinSearch& search : searches) {
      if (!search.violated_blocks) continue;
      violated = true;
      eprint(
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
      eprint("{}\n", trace_sha256.error().to_string());
      return kExitInput;
    }
    nlohmann::json part = {
        {"kvreplay_plan_part", kPlanPartVersion},
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
      part_searches.push_back({{"index", g},
                               {"pool_blocks", search.blocks ? nlohmann::json(*search.blocks)
                                                             : nlohmann::json(nullptr)},
                               {"probes", search.probes},
                               {"raised_past_pool_blocks", search.raised_past},
                               {"unmet", unmet_json(search)}});
    }
    part["searches"] = std::move(part_searches);
    report_out->write(part.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!outputs.commit()) {
      eprint("{}\n", outputs.error());
      return kExitInput;
    }
    if (!request.quiet) {
      fmt::print(table_stream,
                 "plan: shard {}/{}: {} of {} cells and {} of {} searches, written to {}\n",
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
      fmt::format(
          "{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} "
          "{:>10} {:>8} {:>6}{}\n",
          "model", "page", "kv_memory", "blocks", "peak", "in_use", "waste", "preempt", "hit_rate",
          "finished", "skipped", "out_tok/s", "p99_ttft", "p99_tpot", "load",
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
    table +=
        deployment_column(cell.deployment) +
        fmt::format(
            "{:<15} {:>6} {:>10} {:>9} {:>9} {:>9} {:>7.2f}% {:>8} {:>8.4f} {:>9} {:>8} {:>10.1f} "
            "{:>10} {:>8} {:>6}{}\n",
            model_label(cell.config), cell.page_tokens, cell.kv_memory, cell.config.kv.pool_blocks,
            r["blocks"]["peak_used"].get<std::uint64_t>(),
            r["blocks"]["peak_in_use"].get<std::uint64_t>(),
            r["fragmentation"]["waste_ratio_mean"].get<double>() * 100.0,
            r["scheduler"]["preemptions"].get<std::uint64_t>(),
            r["prefix_cache"]["hit_rate"].get<double>(),
            r["requests"]["finished"].get<std::uint64_t>(),
            r["requests"]["skipped"].get<std::uint64_t>(),
            r["scheduler"]["output_tokens_per_second"].get<double>(),
            ms_text(r["latency"]["ttft_ms"]["p99"].get<double>()),
            ms_text(r["latency"]["tpot_ms"]["p99"].get<double>()),
            load["ratio"].is_null() ? std::string("-")
                                    : fmt::format("{:.2f}{}", load["ratio"].get<double>(),
                                                  load["overloaded"].get<bool>() ? "!" : ""),
            r.contains("slo")
                ? fmt::format(" {:>6.2f}%", r["slo"]["attainment"].get<double>() * 100)
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
    table +=
        deployment_column(cell.deployment) +
        fmt::format("{:<15} {:>6} does not run: {}\n", cell.model, cell.page_tokens, cell.problem);
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
      nlohmann::json entry = {
          {"model", model}, {"page_tokens", page}, {"gpu", gpu}, {"raised_past", raised}};
      if (answer != nullptr) {
        entry["deployment"] = deployment_json(answer->deployment);
        entry["kv_memory_bytes"] = answer->config.kv_memory.value_or(0);
        entry["pool_blocks"] = answer->config.kv.pool_blocks;
        answers += fmt::format(
            "  {:<15} page {:>4}: {} GPUs of {}: {}, {} of KV a GPU ({} blocks)\n", model, page,
            gpus_of(answer), gpu, deployment_label(deployments[answer->deployment]),
            reproducible_memory(answer->config.kv.pool_blocks, answer->config.kv),
            answer->config.kv.pool_blocks);
      } else {
        entry["deployment"] = nullptr;
        answers += fmt::format("  {:<15} page {:>4}: no swept deployment of {} serves it\n", model,
                               page, gpu);
      }
      min_deployments.push_back(std::move(entry));
    }
    if (!answers.empty()) {
      table += fmt::format(
                   "\nsmallest deployment per GPU kind with no preemption{} (its pool sized "
                   "by the GPU), verified at every swept deployment with more GPUs:\n",
                   slo_words) +
               answers;
    }
  }
  if (show_deployments) plan["min_deployment"] = std::move(min_deployments);
  nlohmann::json minimum = nlohmann::json::array();
  if (request.search_min) {
    table += !any_skipped ? fmt::format(
                                "\nsmallest KV memory with no preemption{} (every request served), "
                                "verified at every swept size above it:\n",
                                slo_words)
                          : fmt::format(
                                "\nsmallest KV memory with no preemption{} (every request that can "
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
           {"probes", search.probes},
           {"unmet", unmet_json(search)}});
      if (show_deployments) minimum.back()["deployment"] = deployment_json(search.deployment);
      std::string raised;
      for (std::uint32_t failing : search.raised_past) {
        raised += fmt::format("; raised past the swept {} blocks, which preempt", failing);
      }
      table += search.blocks
                   ? fmt::format(
                         "  {}{:<15} page {:>4}: --kv-memory {} = {} blocks ({} simulations{})\n",
                         deployment_column(search.deployment), model_label(search.config),
                         search.page_tokens, memory, *search.blocks, search.probes, raised)
                   : fmt::format("  {}{:<15} page {:>4}: not found: {}\n",
                                 deployment_column(search.deployment), model_label(search.config),
                                 search.page_tokens, search.unmet_message);
    }
  }
  plan["min_kv_memory"] = std::move(minimum);
  if (report_out != nullptr) {
    report_out->write(plan.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (html_out != nullptr) html_out->write(render_plan_html(plan));
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(table_stream, table);
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
    app.add_option("-j,--jobs", request_.jobs,
                   "parallel simulations (default: one per core); each holds up to 32 MiB + 128 "
                   "bytes a pool block, and those at once must fit the memory limit, else exit 2 "
                   "(README, \"Memory bounds (plan)\")");
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
    const std::vector<std::uint32_t> tps =
        config_.tps.empty() ? std::vector<std::uint32_t>{1} : config_.tps;
    const std::vector<std::uint32_t> pps =
        config_.pps.empty() ? std::vector<std::uint32_t>{1} : config_.pps;
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
    return fmt::format(
        "{}: not a partial plan (kvreplay plan --shard I/N --report FILE writes them)", part.path);
  }
  if (j["kvreplay_plan_part"] != kPlanPartVersion) {
    return fmt::format("{}: a partial plan of format {}; this kvreplay reads format {}", part.path,
                       j["kvreplay_plan_part"].dump(), kPlanPartVersion);
  }
  if (j.value("kvreplay", std::string()) != kKvreplayVersion) {
    return fmt::format("{}: written by kvreplay {}; this is kvreplay {}: rerun the shards",
                       part.path, j.value("kvreplay", std::string("?")), kKvreplayVersion);
  }
  for (const char* key :
       {"shard", "command", "trace", "sweep_sha256", "units", "cells", "searches"}) {
    if (!j.contains(key)) return fmt::format("{}: a partial plan without \"{}\"", part.path, key);
  }
  const nlohmann::json& shard = j["shard"];
  if (!shard.is_object()) {
    return field_problem(part.path, "shard", shown(shard) + " is not {\"index\": I, \"count\": N}");
  }
  for (const char* key : {"index", "count"}) {
    if (auto problem = figure_problem(find_dotted(shard, key), Figure::kCount)) {
      return field_problem(part.path, fmt::format("shard.{}", key), *problem);
    }
  }
  const auto count = shard["count"].get<std::uint64_t>();
  const auto index = shard["index"].get<std::uint64_t>();
  if (count < 1 || count > kMaxShards) {
    return field_problem(
        part.path, "shard.count",
        fmt::format("{} shards, not within 1 to {} (what --shard I/N takes)", count, kMaxShards));
  }
  if (index < 1 || index > count) {
    return field_problem(part.path, "shard.index",
                         fmt::format("{} is not within 1 to the {} shards", index, count));
  }
  if (auto problem = figure_problem(&j["units"], Figure::kCount)) {
    return field_problem(part.path, "units", *problem);
  }
  if (auto problem = figure_problem(find_dotted(j, "trace.sha256"), Figure::kText)) {
    return field_problem(part.path, "trace.sha256", *problem);
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

int merge_parts(const PlanMergeRequest& request) {
  auto refuse = [](const std::string& why) {
    eprint("kvreplay plan-merge: {}\n", why);
    return kExitInput;
  };
  std::vector<PlanPart> parts;
  for (const std::string& path : request.part_paths) {
    auto json = read_json_file(path, kMaxPartBytes, kPartTooLarge);
    if (!json) return refuse(json.error());
    parts.push_back(PlanPart{path, std::move(json).value()});
    if (auto problem = part_problem(parts.back())) {  // "FILE: ..."
      eprint("{}\n", *problem);
      return kExitInput;
    }
  }
  // The N shards of one sweep of one trace, each once.
  const PlanPart& first = parts.front();
  const std::uint64_t count = first.json["shard"]["count"].get<std::uint64_t>();
  // By shard index: a map, as N (checked to be at most kMaxShards) may be far
  // more than the parts given.
  std::map<std::uint64_t, const PlanPart*> by_index;
  for (const PlanPart& part : parts) {
    const nlohmann::json& j = part.json;
    if (j["trace"]["sha256"] != first.json["trace"]["sha256"]) {
      return refuse(fmt::format(
          "{} and {} are parts of plans of different traces (sha256 {} and {})", first.path,
          part.path, first.json["trace"]["sha256"].dump(), j["trace"]["sha256"].dump()));
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
    if (auto [at, fresh] = by_index.emplace(index, &part); !fresh) {
      return refuse(
          fmt::format("{} and {} are both shard {}/{}", at->second->path, part.path, index, count));
    }
  }
  // Each index once, each within 1..count: the first missing one is at most
  // the number of parts given plus one.
  for (std::uint64_t index = 1; index <= count; ++index) {
    if (by_index.count(index) == 0) {
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
    return refuse(
        fmt::format("{}: its plan command line does not parse here: {}", first.path, error.what()));
  }
  try {
    return plan.merge(std::move(parts), request);
  } catch (const nlohmann::json::exception& error) {
    return refuse(fmt::format("a part's figures are malformed: {}", error.what()));
  }
}

}  // namespace

int run_plan_merge(const PlanMergeRequest& request) {
  try {
    return merge_parts(request);
  } catch (const std::bad_alloc&) {
    eprint("kvreplay plan-merge: out of memory reading the parts\n");
    return kExitInput;
  }
}

std::unique_ptr<Command> make_plan_command() {
  return std::make_unique<PlanCommand>();
}

std::unique_ptr<Command> make_plan_merge_command() {
  return std::make_unique<PlanMergeCommand>();
}

}  // namespace kvreplay
