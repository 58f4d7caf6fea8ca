#include "sim/run_simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "io/standard_output.h"
#include "replay/run_replay.h"
#include "report/report.h"
#include "sim/request_reader.h"

namespace kvreplay {

namespace {

nlohmann::json options_json(const SimOptions& options) {
  return {{"allocator", std::string(to_string(options.allocator))},
          {"prefix_cache", options.prefix_cache && options.allocator == AllocatorKind::kPaged},
          {"evict", std::string(to_string(options.evict))},
          {"max_seqs", options.max_seqs},
          {"max_batched_tokens", options.max_batched_tokens},
          {"watermark", options.watermark},
          {"cost",
           {{"step_ms", options.cost.step_ms},
            {"prefill_token_ms", options.cost.prefill_token_ms},
            {"decode_seq_ms", options.cost.decode_seq_ms},
            {"kv_bandwidth_gbps", options.cost.kv_bandwidth_gbps}}}};
}

// One line per reason some requests were skipped as never fitting.
void skip_warnings(const std::string& path, const Simulator& sim, SimulationResult& out) {
  const SimTotals& st = sim.sim_totals();
  const RunConfig& config = sim.config();
  const std::uint64_t counts[kSkipReasons] = {
      st.skipped_too_long, st.skipped_too_many_samples,
      st.skipped - st.skipped_too_long - st.skipped_too_many_samples};
  for (std::size_t i = 0; i < kSkipReasons; ++i) {
    const auto reason = static_cast<SkipReason>(i);
    const auto& first = sim.first_skipped(reason);
    if (counts[i] == 0 || !first) continue;
    std::string why;
    switch (reason) {
      case SkipReason::kTooLong:
        why = fmt::format("longer than --max-seq-tokens {} (first: line {}, {} tokens)",
                          config.kv.max_seq_tokens, first->line, first->need);
        break;
      case SkipReason::kTooManySamples:
        why = fmt::format("n above --max-seqs {} (first: line {}, n {})", sim.options().max_seqs,
                          first->line, first->need);
        break;
      case SkipReason::kPoolTooSmall:
        why = sim.options().allocator == AllocatorKind::kPaged
                  ? fmt::format(
                        "more blocks than the pool of {} less the --watermark (first: line {}, "
                        "{} blocks; give a larger --kv-memory or --pool-blocks)",
                        config.kv.pool_blocks, first->line, first->need)
                  : fmt::format(
                        "larger than the pool of {} slots (first: line {}, {} slots; give a "
                        "larger --kv-memory or --pool-blocks)",
                        std::uint64_t{config.kv.pool_blocks} * config.kv.page_tokens, first->line,
                        first->need);
        break;
    }
    out.warnings.push_back(fmt::format("warning: {}: {} request{} skipped: {}", path, counts[i],
                                       counts[i] == 1 ? "" : "s", why));
    out.warning_reasons.push_back(reason);
  }
}

}  // namespace

InputResult<RunConfig> resolve_sim_config(const ConfigOverrides& overrides) {
  nlohmann::json header = nlohmann::json::object();
  if (!overrides.model && !overrides.layers && !overrides.kv_heads && !overrides.head_dim) {
    header["model"] = "llama-3-8b";
  }
  if (!overrides.pool_blocks && !overrides.kv_memory) {
    return Unexpected{InputError{"command line", 0, "--kv-memory",
                                 "missing: give --kv-memory (e.g. 40GiB) or --pool-blocks"}};
  }
  return resolve_run_config(header, overrides, "command line", 0);
}

InputResult<SimulationResult> simulate_file(const std::string& path,
                                            std::optional<RequestFormat> format,
                                            const RunConfig& config, const SimOptions& options,
                                            OutputFile* timeline, TimelineSampler* sampler,
                                            const SimulateTerminal& terminal,
                                            const SimFaults& faults) {
  auto start = std::chrono::steady_clock::now();
  auto opened = RequestReader::open(path, format);
  if (!opened) return Unexpected{opened.error()};
  RequestReader& reader = *opened.value();
  Simulator sim(config, options);

  if (timeline != nullptr) {
    timeline->write(
        "step,t,used_blocks,free_blocks,waste_slots,waste_ratio,logical_tokens,"
        "physical_tokens,running_seqs,cow_copies,preemptions,evictions,finished\n");
    sim.on_step = [timeline](const Simulator& s) {
      const ReplayState& st = s.state();
      timeline->print("{},{:.6f},{},{},{},{:.6f},{},{},{},{},{},{},{}\n", s.sim_totals().steps,
                      s.now(), st.used, s.config().kv.pool_blocks - st.used, st.waste_slots,
                      st.waste_ratio, st.logical_tokens, st.physical_tokens, st.live_sequences,
                      s.totals().cow_copies, s.sim_totals().preemptions, s.evictions(),
                      s.sim_totals().finished);
    };
  }
  if (sampler != nullptr) {
    sim.on_step = [sampler, timeline_row = std::move(sim.on_step)](const Simulator& s) {
      if (timeline_row) timeline_row(s);
      sampler->add(timeline_point(s.sim_totals().steps, s.state(), s.totals().cow_copies));
    };
  }
  if (terminal.progress != nullptr) {
    sim.on_step = [progress = terminal.progress,
                   previous = std::move(sim.on_step)](const Simulator& s) {
      if (previous) previous(s);
      if (!progress->due()) return;
      const SimTotals& totals = s.sim_totals();
      progress->draw(fmt::format("simulate: {} requests, {} finished, virtual time {:.1f} s",
                                 grouped(totals.requests), grouped(totals.finished), s.now()));
    };
  }
  if (faults.leak_block_at_step != 0) {
    sim.on_step = [at = faults.leak_block_at_step,
                   previous = std::move(sim.on_step)](const Simulator& s) {
      if (previous) previous(s);
      if (s.sim_totals().steps != at) return;
      // The pool is the Simulator's own (never const); observers see it const.
      auto& pool = const_cast<BlockPool&>(s.pool());
      for (BlockId b = 0; b < pool.total(); ++b) {
        if (pool.is_live(b)) {
          (void)pool.retain(b);
          return;
        }
      }
    };
  }
  auto timeline_failed = [timeline] { return timeline != nullptr && timeline->failed(); };

  Request request;
  bool violated = false;
  for (;;) {
    if (timeline_failed()) return SimulationResult{};
    auto more = reader.next(request);
    if (!more) return Unexpected{more.error()};
    if (!more.value()) break;
    if (!sim.run_until(request.arrival)) {
      violated = true;
      break;
    }
    sim.submit(std::move(request));
    request = Request{};
  }
  if (!violated && !sim.run_until(std::numeric_limits<double>::infinity())) violated = true;
  if (!violated && !sim.finish()) violated = true;
  if (timeline_failed()) return SimulationResult{};
  auto sha256 = reader.content_sha256();  // the whole trace's, even after a violation
  if (!sha256) return Unexpected{sha256.error()};

  const SimTotals& st = sim.sim_totals();
  ReportSource source{
      TraceInfo{path, std::string(to_string(reader.format())), st.requests + reader.skipped(),
                std::move(sha256).value()},
      violated ? RunStatus::kViolation : RunStatus::kOk,
      &sim.config(),
      &sim.totals(),
      &sim.state(),
      sim.pool().total(),
      sim.pool().allocations(),
      sim.pool().frees(),
      options.check.name(),
      &sim.violation(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  if (options.allocator != AllocatorKind::kPaged) {
    // The baselines reserve regions instead of taking blocks.
    source.allocations = 0;
    source.frees = 0;
  }
  SimulationResult result;
  result.violated = violated;
  result.report = base_report(source);
  result.report["config"]["simulation"] = options_json(options);
  result.report["requests"] = {{"total", st.requests + reader.skipped()},
                               {"finished", st.finished},
                               {"skipped", st.skipped + reader.skipped()},
                               {"skipped_pool_too_small",
                                st.skipped - st.skipped_too_long - st.skipped_too_many_samples},
                               {"skipped_too_many_samples", st.skipped_too_many_samples}};
  const double hit_rate = st.query_tokens == 0 ? 0.0
                                               : static_cast<double>(st.hit_tokens) /
                                                     static_cast<double>(st.query_tokens);
  const double per_request =
      st.hit_rate_requests == 0 ? 0.0 : st.hit_rate_sum / static_cast<double>(st.hit_rate_requests);
  result.report["prefix_cache"] = {{"query_tokens", st.query_tokens},
                                   {"hit_tokens", st.hit_tokens},
                                   {"hit_rate", hit_rate},
                                   {"hit_rate_per_request", per_request},
                                   {"hit_blocks", st.hit_blocks},
                                   {"evictions", sim.evictions()}};
  const double seconds = st.virtual_seconds;
  result.report["scheduler"] = {
      {"steps", st.steps},
      {"preemptions", st.preemptions},
      {"max_running", st.max_running},
      {"virtual_seconds", seconds},
      {"output_tokens", st.output_tokens},
      {"prompt_tokens_computed", st.prompt_tokens_computed},
      {"output_tokens_per_second",
       seconds > 0 ? static_cast<double>(st.output_tokens) / seconds : 0.0},
      {"requests_per_second", seconds > 0 ? static_cast<double>(st.finished) / seconds : 0.0}};
  std::string summary = base_summary(source, terminal.color);
  auto line = [&summary](std::string_view label, const std::string& value) {
    summary += fmt::format("  {:<26} {}\n", label, value);
  };
  summary += fmt::format("{} ({}, prefix cache {})\n", Paint{terminal.color}.bold("simulation"),
                         to_string(options.allocator),
                         options.prefix_cache && options.allocator == AllocatorKind::kPaged
                             ? fmt::format("on, evict {}", to_string(options.evict))
                             : std::string("off"));
  line("requests", fmt::format("{} total, {} finished, {} skipped", st.requests + reader.skipped(),
                               st.finished, st.skipped + reader.skipped()));
  line("prefix-cache hit rate",
       fmt::format("{:.4f} of prompt tokens ({:.4f} per request)", hit_rate, per_request));
  line("hit blocks / evictions", fmt::format("{} / {}", st.hit_blocks, sim.evictions()));
  line("steps / preemptions", fmt::format("{} / {}", st.steps, st.preemptions));
  line("max running sequences", std::to_string(st.max_running));
  line("virtual time",
       fmt::format("{:.1f} s ({:.1f} output tokens/s)", seconds,
                   seconds > 0 ? static_cast<double>(st.output_tokens) / seconds : 0.0));
  result.summary = std::move(summary);
  skip_warnings(path, sim, result);
  return result;
}

int run_simulate(const SimulateRequest& request) {
  auto config = resolve_sim_config(request.overrides);
  if (!config) {
    fmt::print(stderr, "{}\n", config.error().to_string());
    return kExitInput;
  }
  // Opened before the run, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  OutputFile* timeline_out = nullptr;
  OutputFile* html_out = nullptr;
  if ((!request.report_path.empty() &&
       (report_out = outputs.open("the report", request.report_path)) == nullptr) ||
      (!request.timeline_path.empty() &&
       (timeline_out = outputs.open("the timeline", request.timeline_path,
                                    OutputFile::Flow::kStream)) == nullptr) ||
      (!request.html_path.empty() &&
       (html_out = outputs.open("the HTML report", request.html_path)) == nullptr)) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  // The summary never mixes with an output on stdout.
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;
  std::optional<TimelineSampler> sampler;  // --html: the run over time, downsampled
  if (html_out != nullptr) sampler.emplace();
  auto progress = ProgressLine::for_stderr(!request.quiet, 16);
  auto result = simulate_file(request.trace_path, request.format, config.value(), request.options,
                              timeline_out, sampler ? &*sampler : nullptr,
                              SimulateTerminal{progress.get(), color_enabled(summary_stream)});
  if (progress) progress->clear();
  if (!result) {
    fmt::print(stderr, "{}\n", result.error().to_string());
    return kExitInput;
  }
  for (const std::string& warning : result.value().warnings) {
    fmt::print(stderr, "kvreplay simulate: {}\n", warning);
  }
  if (outputs.failed()) {  // the run stopped early: its result is incomplete
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  if (report_out != nullptr) {
    report_out->write(
        result.value().report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (html_out != nullptr) {
    html_out->write(render_run_html(result.value().report, *sampler, "step"));
  }
  if (!outputs.commit()) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(summary_stream, result.value().summary);
  if (result.value().violated) {
    const auto& violations = result.value().report["invariants"]["violations"];
    fmt::print(stderr, "{}: invariant violated: {}\n", request.trace_path,
               violations.empty() ? std::string("?") : violations[0]["message"].get<std::string>());
    return kExitCheckFailed;
  }
  return kExitOk;
}

}  // namespace kvreplay

namespace kvreplay {

namespace {

struct PlanCell {
  std::string model;
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
  std::uint32_t page_tokens = 0;
  RunConfig config;                     // geometry; pool_blocks is searched
  std::optional<std::uint32_t> blocks;  // smallest pool with no preemption and nothing skipped
  std::uint32_t probes = 0;
  std::optional<InputError> error;
  std::optional<std::uint32_t> violated_blocks;  // a probe whose invariant check failed
  ViolationText violation;
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

bool serves_without_preemption(const SimulationResult& result) {
  // Requests longer than max_seq_tokens (and failed BurstGPT rows) are skipped
  // whatever the pool; every other request must be served.
  return result.report["scheduler"]["preemptions"].get<std::uint64_t>() == 0 &&
         result.report["requests"]["skipped_pool_too_small"].get<std::uint64_t>() == 0 &&
         !result.violated;
}

}  // namespace

int run_plan(const PlanRequest& request) {
  unsigned jobs =
      request.jobs != 0 ? request.jobs : std::max(1u, std::thread::hardware_concurrency());
  const SimOptions& options = request.options;

  std::vector<PlanCell> cells;
  for (const std::string& model : request.models) {
    for (std::uint32_t page : request.page_tokens) {
      for (const std::string& memory : request.kv_memories) {
        ConfigOverrides overrides = request.overrides;
        overrides.model = model;
        overrides.page_tokens = page;
        overrides.kv_memory = memory;
        overrides.pool_blocks.reset();
        auto config = resolve_sim_config(overrides);
        if (!config) {
          fmt::print(stderr, "{}\n", config.error().to_string());
          return kExitInput;
        }
        cells.push_back(PlanCell{model, memory, page, config.value(), std::nullopt, std::nullopt});
      }
    }
  }
  // Opened before the sweep, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  OutputFile* html_out = nullptr;
  if ((!request.report_path.empty() &&
       (report_out = outputs.open("the plan", request.report_path)) == nullptr) ||
      (!request.html_path.empty() &&
       (html_out = outputs.open("the HTML report", request.html_path)) == nullptr)) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  // The table never mixes with an output on stdout.
  std::FILE* table_stream = outputs.writes_stdout() ? stderr : stdout;
  // Progress: simulations finished, from whichever thread finishes one.
  auto progress = ProgressLine::for_stderr(!request.quiet, 1);
  std::mutex progress_mutex;
  std::uint64_t simulations_done = 0;
  auto count_simulation = [&] {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(progress_mutex);
    ++simulations_done;
    if (progress->due()) {
      progress->draw(fmt::format("plan: {} simulations done ({} cells in the sweep)",
                                 simulations_done, cells.size()));
    }
  };
  parallel_for(cells.size(), jobs, [&](std::size_t i) {
    const bool planted =
        !request.fault_kv_memory.empty() && cells[i].kv_memory == request.fault_kv_memory;
    auto result = simulate_file(request.trace_path, request.format, cells[i].config, options,
                                nullptr, nullptr, {}, planted ? request.faults : SimFaults{});
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
  // Requests no KV memory can serve, whatever the cell: said once each, even
  // with --quiet (a pool too small is what the sweep measures, not a warning).
  std::vector<std::string> warned;
  for (const PlanCell& cell : cells) {
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
    if (!cell.result->violated) continue;
    violated = true;
    ViolationText text = first_violation(*cell.result);
    fmt::print(stderr, "{}: {} at sweep point --model {} --page-tokens {} --kv-memory {}: {}\n",
               request.trace_path, text.invariant, cell.model, cell.page_tokens, cell.kv_memory,
               text.message);
  }
  if (violated) return kExitCheckFailed;

  // The smallest pool with no preemption, per model and page size: a binary
  // search over pool_blocks (assuming more memory never adds preemptions).
  std::vector<MinSearch> searches;
  if (request.search_min) {
    for (const PlanCell& cell : cells) {
      bool seen = false;
      for (const MinSearch& s : searches)
        seen = seen || (s.model == cell.model && s.page_tokens == cell.page_tokens);
      if (!seen)
        searches.push_back(MinSearch{cell.model, cell.page_tokens, cell.config, std::nullopt, 0,
                                     std::nullopt, std::nullopt, ViolationText{}});
    }
    parallel_for(searches.size(), jobs, [&](std::size_t i) {
      MinSearch& search = searches[i];
      auto probe = [&](std::uint32_t blocks) -> std::optional<bool> {
        RunConfig config = search.config;
        config.kv.pool_blocks = blocks;
        config.kv_memory.reset();
        ++search.probes;
        auto result =
            simulate_file(request.trace_path, request.format, config, options, nullptr, nullptr,
                          {}, request.fault_kv_memory == "search" ? request.faults : SimFaults{});
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
        return serves_without_preemption(result.value());
      };
      std::uint64_t high = search.config.kv.pool_blocks;
      for (;;) {
        auto ok = probe(static_cast<std::uint32_t>(high));
        if (!ok) return;
        if (*ok) break;
        if (high * 2 > kMaxSupportedPoolBlocks) return;  // not found
        high *= 2;
      }
      std::uint64_t low = 0;  // fails (or untested 0)
      while (high - low > 1) {
        std::uint64_t mid = low + (high - low) / 2;
        auto ok = probe(static_cast<std::uint32_t>(mid));
        if (!ok) return;
        (*ok ? high : low) = mid;
      }
      search.blocks = static_cast<std::uint32_t>(high);
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

  nlohmann::json plan;
  plan["kvreplay_plan"] = 1;
  plan["trace"] = {{"path", request.trace_path}};
  if (!cells.empty()) {
    plan["trace"]["format"] = cells[0].result->report["trace"]["format"];
    plan["trace"]["requests"] = cells[0].result->report["requests"]["total"];
    plan["trace"]["sha256"] = cells[0].result->report["trace"]["sha256"];
  }
  plan["simulation"] = options_json(options);
  plan["simulation"]["check"] = options.check.name();
  nlohmann::json rows = nlohmann::json::array();
  std::string table = fmt::format(
      "{:<12} {:>6} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>10}\n", "model", "page",
      "kv_memory", "blocks", "peak", "waste", "preempt", "hit_rate", "finished", "out_tok/s");
  for (const PlanCell& cell : cells) {
    const nlohmann::json& r = cell.result->report;
    nlohmann::json row = {{"model", cell.model},
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
                          {"invariant_checks", r["invariants"]["checks"]}};
    table += fmt::format(
        "{:<12} {:>6} {:>10} {:>9} {:>9} {:>7.2f}% {:>8} {:>8.4f} {:>9} {:>10.1f}\n", cell.model,
        cell.page_tokens, cell.kv_memory, cell.config.kv.pool_blocks,
        r["blocks"]["peak_used"].get<std::uint64_t>(),
        r["fragmentation"]["waste_ratio_mean"].get<double>() * 100.0,
        r["scheduler"]["preemptions"].get<std::uint64_t>(),
        r["prefix_cache"]["hit_rate"].get<double>(), r["requests"]["finished"].get<std::uint64_t>(),
        r["scheduler"]["output_tokens_per_second"].get<double>());
    rows.push_back(std::move(row));
  }
  plan["cells"] = std::move(rows);
  nlohmann::json minimum = nlohmann::json::array();
  if (request.search_min) {
    table += warned.empty()
                 ? "\nsmallest KV memory with no preemption (every request served):\n"
                 : "\nsmallest KV memory with no preemption (every request that can fit served; "
                   "see the warnings):\n";
    for (const MinSearch& search : searches) {
      std::uint64_t bytes = search.blocks ? *search.blocks * search.config.kv.block_bytes() : 0;
      minimum.push_back(
          {{"model", search.model},
           {"page_tokens", search.page_tokens},
           {"pool_blocks",
            search.blocks ? nlohmann::json(*search.blocks) : nlohmann::json(nullptr)},
           {"kv_memory_bytes", search.blocks ? nlohmann::json(bytes) : nlohmann::json(nullptr)},
           {"probes", search.probes}});
      table += search.blocks ? fmt::format("  {:<12} page {:>4}: {} blocks = {} ({} simulations)\n",
                                           search.model, search.page_tokens, *search.blocks,
                                           bytes_text(bytes), search.probes)
                             : fmt::format("  {:<12} page {:>4}: not found below 2^31 blocks\n",
                                           search.model, search.page_tokens);
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

}  // namespace kvreplay
