// kvreplay calibrate MEASURED.csv: the command (engine/calibrate/calibrate.h says what it
// computes; engine/calibrate/calibrate_fit.h how it fits).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <thread>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/simulation/simulation.h"
#include "app/terminal.h"
#include "core/memory_budget.h"
#include "engine/calibrate/calibrate.h"
#include "engine/calibrate/calibrate_fit.h"
#include "io/output.h"
#include "io/standard_output.h"
#include "model/presets.h"

namespace kvreplay {

namespace {

// Whether a row's model names a file (a FIFO too: load_model_config reads
// each path once a run), not a folder or nothing.
bool names_a_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  return !error && std::filesystem::exists(status) && !std::filesystem::is_directory(status);
}

// What one workload's simulation holds besides its pool: each request's
// state and its recorded times, at most this many bytes a request (measured
// about 800 with every request in flight at once; README "Memory bounds").
constexpr std::uint64_t kWorkloadBytesPerRequest = 1024;

// The workloads `jobs` at once (the largest ones, as a bound) against the
// memory limit, before any runs: nullopt, or the line to print (exit 2),
// "FILE:LINE: requests: ..." naming the largest workload's first row.
std::optional<std::string> check_workload_memory(const std::vector<Workload>& workloads,
                                                 unsigned jobs, const std::string& file) {
  if (workloads.empty()) return std::nullopt;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> needs;  // bytes, line
  for (const Workload& w : workloads) {
    needs.emplace_back(add_sat(simulation_memory_bytes(w.config.kv.pool_blocks),
                               mul_sat(w.requests, kWorkloadBytesPerRequest)),
                       w.line);
  }
  std::sort(needs.begin(), needs.end(), std::greater<>());
  const std::size_t at_once = std::min<std::size_t>(std::max(jobs, 1u), needs.size());
  std::uint64_t need = 0;
  for (std::size_t i = 0; i < at_once; ++i) need = add_sat(need, needs[i].first);
  auto problem = check_memory(need,
                              fmt::format("simulating {} workload{} at once (-j {})", at_once,
                                          at_once == 1 ? "" : "s", jobs),
                              fmt::format("each {} + {} bytes a pool block + {} bytes a request",
                                          memory_text(kSimulationBaseBytes),
                                          kSimulationBytesPerBlock, kWorkloadBytesPerRequest));
  if (!problem) return std::nullopt;
  return fmt::format("{}:{}: requests: {}", file, needs.front().second, *problem);
}

// How rows are grouped into fits, each group one profile entry (--fit-per).
enum class FitPer : std::uint8_t { kGpuEngine, kGpu, kEngine, kAll };

// trtllm-bench throughput's engine settings (tensorrt_llm/bench/build/
// tuning.py, calc_engine_setting and finetune_setting): the requests its KV
// estimate holds (the GPUs' memory in GiB less the parameters at 1 or 2 bytes,
// times the KV fraction 0.95, over the KV bytes of a token with at least one
// KV head a rank, over ISL + OSL) give max_batch_size and max_num_tokens,
// rounded up as its table does; and chunked context is on
// (--enable_chunked_context, default true).
void trtllm_bench_settings(const RunConfig& config, const GpuSpec& gpu, std::uint32_t isl,
                           std::uint32_t osl, SimOptions& options) {
  if (!config.model_spec) return;
  const ModelSpec& m = *config.model_spec;
  const double elem = m.fp8_linear ? 1.0 : 2.0;
  const double kv_elem = dtype_bytes(m.kv_dtype);
  const double n_gpus = static_cast<double>(config.tp) * config.pp;
  const double per_token = 2.0 * m.layers * std::max<double>(config.tp, m.kv_heads) * m.head_dim *
                           kv_elem / (1024.0 * 1024 * 1024);
  const double engine_gb = static_cast<double>(m.parameters.total) / 1e9 * elem;
  const double total_gb =
      static_cast<double>(gpu.cuda_total_bytes) / (1024.0 * 1024 * 1024) * n_gpus;
  const double kv_requests = (total_gb - engine_gb) * 0.95 / per_token / (isl + osl);
  const double raw_bs = std::min(kv_requests, 4096.0) / config.pp;
  const double raw_token = std::min(raw_bs * (1 + static_cast<double>(isl) / osl), 32768.0);
  double bs = 0, tokens = 0;
  if (raw_bs < 256) {
    bs = std::max(64.0, 32 * std::ceil(raw_bs / 32));
  } else if (raw_bs < 1024) {
    bs = 128 * std::ceil(raw_bs / 128);
  } else {
    bs = 256 * std::ceil(raw_bs / 256);
  }
  if (raw_token < 4096) {
    tokens = std::max(2048.0, 256 * std::ceil(raw_token / 256));
  } else if (raw_token < 8192) {
    tokens = 512 * std::ceil(raw_token / 512);
  } else {
    tokens = 1024 * std::ceil(raw_token / 1024);
  }
  if (!(kv_requests >= 1)) return;  // trtllm-bench refuses it; the engine's defaults stand
  options.max_seqs = static_cast<std::uint32_t>(bs);
  options.max_batched_tokens = static_cast<std::uint32_t>(tokens);
  options.trtllm.enable_chunked_context = true;
}

struct CalibrateRequest {
  FitPer fit_per = FitPer::kGpuEngine;
  std::string measured_path;
  std::string report_path;   // the fitted profile
  std::string results_path;  // one CSV row per measured row
  std::string set;           // --set: the rows of one set only
  bool no_fit = false;
  bool quiet = false;
  unsigned jobs = 0;
};

// The workloads the rows name, each resolved as `simulate` would resolve it.
InputResult<std::vector<Workload>> make_workloads(std::vector<MeasuredRow>& rows,
                                                  const SimOptionsCli& cli,
                                                  const std::string& path) {
  std::vector<Workload> out;
  std::map<std::tuple<std::string, std::string, std::uint32_t, std::uint32_t, std::uint32_t,
                      std::uint32_t, std::uint32_t, std::string, std::uint64_t,
                      std::optional<double>, RangeStyle>,
           std::size_t>
      index;
  for (MeasuredRow& row : rows) {
    const auto key = std::make_tuple(row.model, row.gpu, row.tp, row.input_tokens,
                                     row.output_tokens, row.concurrency, row.requests,
                                     row.engine + "/" + row.client + "/" + row.kv_dtype,
                                     row.measure_after, row.range_ratio, row.range_style);
    if (auto it = index.find(key); it != index.end()) {
      row.workload = it->second;
      continue;
    }
    auto fail = [&](const char* field, std::string problem) {
      return Unexpected{InputError{path, row.line, field, std::move(problem)}};
    };
    const GpuSpec* gpu = find_gpu_preset(row.gpu);
    if (gpu == nullptr)
      return fail("gpu", fmt::format("unknown GPU (known: {})", gpu_preset_list()));
    Workload w;
    w.line = row.line;
    w.model = row.model;
    w.gpu = gpu->name;
    w.tp = row.tp;
    w.input_tokens = row.input_tokens;
    w.output_tokens = row.output_tokens;
    w.concurrency = row.concurrency;
    w.requests = row.requests;
    w.measure_after = row.measure_after;
    w.range_ratio = row.range_ratio;
    w.range_style = row.range_style;
    // The engine that measured the row is the one simulated, unless --engine
    // says otherwise. NVIDIA NIM serves its LLMs on TensorRT-LLM where the GPU
    // has a profile for it.
    const std::string measured_by = row.engine == "nim" ? "trtllm" : row.engine;
    SimOptionsCli row_cli = cli;
    if (!cli.engine_given() && parse_engine(measured_by)) row_cli.engine = measured_by;
    std::optional<RequestFormat> format;
    if (auto problem = row_cli.resolve(w.options, format, w.gpu)) {
      return fail(cli.engine_given() ? "gpu" : "engine", *problem);
    }
    ConfigOverrides overrides;
    if (find_model_preset(row.model) != nullptr) {
      overrides.model = row.model;
    } else if (names_a_file(row.model)) {
      overrides.model_config = row.model;
    } else {
      return fail("model", fmt::format("'{}' is neither a preset ({}) nor a config.json file",
                                       row.model.substr(0, 60), model_preset_list()));
    }
    overrides.gpu = w.gpu;
    overrides.tp = row.tp;
    if (!row.kv_dtype.empty()) overrides.dtype = row.kv_dtype;
    overrides.context_default = overrides.kv_groups = true;
    set_activation_limits(overrides, w.options);
    // The engine that measured the row sized its KV cache by its own rule.
    if (auto engine = parse_capacity_engine(measured_by)) {
      overrides.capacity_engine = *engine;
    }
    auto config = resolve_sim_config(overrides);
    // The row, not the command line, gave the model, GPU and TP at fault; a
    // config.json's own error keeps its FILE:LINE.
    if (!config) {
      const InputError& error = config.error();
      const char* field = error.field == "--kv-cache-dtype" ? "kv_dtype" : "model";
      return fail(field, error.file == "command line" ? error.problem : error.to_string());
    }
    w.config = std::move(config).value();
    if (row.client == "trtllm-bench" && to_string(w.options.engine) == "trtllm") {
      trtllm_bench_settings(w.config, *gpu, row.input_tokens, row.output_tokens, w.options);
    }
    row.workload = out.size();
    index.emplace(key, out.size());
    out.push_back(std::move(w));
  }
  return out;
}

std::string percent(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

// The median |error| of each metric and of all rows, as one line.
std::string medians_line(const std::vector<MeasuredRow>& rows, const std::vector<double>& errors) {
  std::map<std::string, std::vector<double>> by_metric;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    by_metric[std::string(to_string(rows[i].metric))].push_back(errors[i]);
  }
  std::string out;
  for (const auto& [metric, e] : by_metric) {
    out += fmt::format("{} {} (n={}), ", metric, percent(median(e)), e.size());
  }
  return out + fmt::format("all {} (n={})", percent(median(errors)), errors.size());
}

// A fit's group: the GPU and engine its profile entry names ("*": any).
using FitKey = std::pair<std::string, std::string>;
FitKey fit_key(FitPer per, const Workload& w) {
  const bool by_gpu = per == FitPer::kGpuEngine || per == FitPer::kGpu;
  const bool by_engine = per == FitPer::kGpuEngine || per == FitPer::kEngine;
  return {by_gpu ? w.gpu : "*", by_engine ? std::string(to_string(w.options.engine)) : "*"};
}

// What the fit of one group's rows gave.
struct GroupFit {
  std::vector<std::size_t> rows;
  RooflineConstants start;
  std::vector<std::string> start_sources;
  FitResult fit;
};

std::map<FitKey, GroupFit> fit_groups(FitPer per, const std::vector<MeasuredRow>& rows,
                                      const std::vector<Workload>& workloads,
                                      const std::vector<Schedule>& schedules, bool no_fit,
                                      unsigned jobs,
                                      const std::map<FitKey, RooflineConstants>* starts) {
  std::map<FitKey, GroupFit> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out[fit_key(per, workloads[rows[i].workload])].rows.push_back(i);
  }
  for (auto& [key, group] : out) {
    const Workload& w = workloads[rows[group.rows.front()].workload];
    // The group's start: the profile's constants for its GPU and engine ("*"
    // matches the entries for any only), the command line's over them.
    const EngineKind engine = key.second == "*" ? w.options.engine : *parse_engine(key.second);
    group.start =
        starts != nullptr ? starts->at(key) : w.options.cost.roofline_for(key.first, engine);
    group.start_sources = w.options.cost.cost_profile().sources_for(key.first, key.second);
    std::vector<FitPoint> points;
    for (std::size_t i : group.rows) points.push_back({&rows[i], &schedules[rows[i].workload]});
    const std::uint32_t held = no_fit ? ~0u : w.options.cost.given_mask;
    group.fit = fit_constants(points, group.start, held, jobs);
  }
  return out;
}

nlohmann::json profile_json(const std::map<FitKey, GroupFit>& fits,
                            const std::vector<MeasuredRow>& rows, const std::string& path,
                            const std::string& set) {
  const auto& infos = roofline_constant_infos();
  std::vector<CostProfile::Entry> entries;
  for (const auto& [key, group] : fits) {
    CostProfile::Entry entry;
    entry.gpu = key.first;
    entry.engine = key.second;
    entry.constants.resize(infos.size());
    std::map<std::string, int> metrics;
    for (std::size_t i : group.rows) ++metrics[std::string(to_string(rows[i].metric))];
    std::string counts;
    for (const auto& [metric, n] : metrics) {
      counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, metric);
    }
    for (std::size_t i = 0; i < infos.size(); ++i) {
      const bool fitted =
          std::find(group.fit.fitted.begin(), group.fit.fitted.end(), i) != group.fit.fitted.end();
      std::string source = group.start_sources[i];
      for (const auto& [kept, why] : group.fit.kept) {
        if (kept == i) source += fmt::format(" (not fitted: {})", why);
      }
      if (fitted) {
        source = fmt::format(
            "fitted by kvreplay calibrate to {}{} ({} rows: {}; median |error| {} before, {} "
            "after)",
            path, set.empty() ? std::string() : fmt::format(" (set {})", set), group.rows.size(),
            counts, percent(group.fit.median_before), percent(group.fit.median_after));
      }
      entry.constants[i] = CostProfile::Constant{group.fit.constants.*infos[i].field, source};
    }
    entries.push_back(std::move(entry));
  }
  return CostProfile("",
                     fmt::format("kvreplay calibrate {}{}", path,
                                 set.empty() ? std::string() : " --set " + set),
                     std::move(entries))
      .to_json();
}

// The warnings a fit earns, on stderr even under --quiet: a metric whose
// median error the fit made worse (the median over every row went down at
// its expense), and a fitted constant that ended at an end of its range.
void warn_fit(const std::vector<MeasuredRow>& rows, const std::vector<double>& before,
              const std::vector<double>& after, const std::map<FitKey, GroupFit>& fits) {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_metric;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    auto& [b, a] = by_metric[std::string(to_string(rows[i].metric))];
    b.push_back(before[i]);
    a.push_back(after[i]);
  }
  for (const auto& [metric, errors] : by_metric) {
    const double b = median(errors.first), a = median(errors.second);
    if (a > b + 1e-3) {
      eprint(
          "kvreplay calibrate: warning: the fit made {} worse: median |error| {} before, {} "
          "after ({} rows)\n",
          metric, percent(b), percent(a), errors.first.size());
    }
  }
  const auto& infos = roofline_constant_infos();
  for (const auto& [key, group] : fits) {
    for (std::size_t i : group.fit.at_bound) {
      eprint(
          "kvreplay calibrate: warning: {}/{}: {} ended at the end of its range ({:.4g}; {} "
          "takes [{}, {}]): the rows do not pin it\n",
          key.first, key.second, infos[i].name, group.fit.constants.*infos[i].field,
          infos[i].option, infos[i].lo, infos[i].hi);
    }
  }
}

// Fits, checks the fit by simulating it again, prints the table and writes
// the outputs.
int report_and_write(const CalibrateRequest& request, std::vector<MeasuredRow>& rows,
                     const std::vector<Workload>& workloads, const std::vector<Schedule>& schedules,
                     OutputSet& outputs, OutputFile* report, OutputFile* results, unsigned jobs,
                     std::chrono::steady_clock::time_point started) {
  const FitPer per = request.fit_per;
  const auto first = fit_groups(per, rows, workloads, schedules, request.no_fit, jobs, nullptr);
  auto fits = first;
  auto fitted_of = [&](const Workload& w) { return fits.at(fit_key(per, w)).fit.constants; };
  // Simulate the fit in full. The server's intake (request_overhead_ms) can
  // move a request to another step when the constants change; then the fit
  // runs again on the new schedules, from its last answer, up to 3 rounds.
  std::vector<Schedule> fitted_on, again;
  const std::vector<Schedule>* on = &schedules;
  bool agree = false;
  for (int round = 0;; ++round) {
    auto simulated = record_schedules(workloads, fitted_of, jobs, request.measured_path);
    if (!simulated) {
      eprint("{}\n", simulated.error().to_string());
      return kExitInput;
    }
    again = std::move(simulated).value();
    agree = true;
    for (std::size_t i = 0; i < rows.size() && agree; ++i) {
      const Workload& w = workloads[rows[i].workload];
      const double replayed = (*on)[rows[i].workload].figures(fitted_of(w)).of(rows[i].metric);
      agree =
          relative_error(replayed, again[rows[i].workload].simulated().of(rows[i].metric)) <= 1e-9;
    }
    if (agree || request.no_fit || round == 2) break;
    std::map<FitKey, RooflineConstants> from;
    for (const auto& [key, group] : fits) from[key] = group.fit.constants;
    fitted_on = std::move(again);
    on = &fitted_on;
    fits = fit_groups(per, rows, workloads, fitted_on, request.no_fit, jobs, &from);
  }
  if (!agree && request.no_fit) {
    eprint("kvreplay calibrate: internal: the schedules replayed do not give the run's figures\n");
    return kExitCheckFailed;
  }
  for (auto& [key, group] : fits) {  // before: the first fit's start
    group.start = first.at(key).start;
    group.fit.median_before = first.at(key).fit.median_before;
  }
  std::vector<double> before(rows.size()), after(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const MeasuredRow& row = rows[i];
    const Workload& w = workloads[row.workload];
    before[i] = schedules[row.workload].figures(first.at(fit_key(per, w)).start).of(row.metric);
    after[i] = again[row.workload].simulated().of(row.metric);
  }
  std::vector<double> error_before, error_after;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    error_before.push_back(relative_error(before[i], rows[i].value));
    error_after.push_back(relative_error(after[i], rows[i].value));
  }
  std::FILE* out = outputs.writes_stdout() ? stderr : stdout;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!request.quiet) {
    std::string text = fmt::format(
        "{:>5} {:<18} {:<10} {:>2} {:>11} {:>6} {:<12} {:>10} {:>10} "
        "{:>7} {:>10} {:>7}\n",
        "line", "model", "gpu", "tp", "in/out", "conc", "metric", "measured", "before", "error",
        "after", "error");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const MeasuredRow& r = rows[i];
      text += fmt::format(
          "{:>5} {:<18} {:<10} {:>2} {:>11} {:>6} {:<12} {:>10.4g} {:>10.4g} {:>+7.1f} {:>10.4g} "
          "{:>+7.1f}\n",
          r.line, r.model.substr(0, 18), r.gpu, r.tp,
          fmt::format("{}/{}", r.input_tokens, r.output_tokens), r.concurrency, to_string(r.metric),
          r.value, before[i], 100 * (before[i] / r.value - 1), after[i],
          100 * (after[i] / r.value - 1));
    }
    text += fmt::format("median |error| before: {}\n", medians_line(rows, error_before));
    text += fmt::format("median |error| after:  {}\n", medians_line(rows, error_after));
    const auto& infos = roofline_constant_infos();
    for (const auto& [key, group] : fits) {
      text += fmt::format("{}/{} ({} rows):", key.first, key.second, group.rows.size());
      for (std::size_t i : group.fit.fitted) {
        text += fmt::format(" {} {:.4g} -> {:.4g};", infos[i].name, group.start.*infos[i].field,
                            group.fit.constants.*infos[i].field);
      }
      for (const auto& [i, why] : group.fit.kept) {
        text += fmt::format(" {} kept at {:.4g} ({});", infos[i].name,
                            group.fit.constants.*infos[i].field, why);
      }
      text.back() = '\n';
    }
    text += fmt::format("{} rows, {} workloads simulated in {:.1f} s{}\n", rows.size(),
                        workloads.size(), seconds,
                        agree ? "" : " (the fit moved requests between steps: after = simulated)");
    put_text(out, text);
  }
  warn_fit(rows, error_before, error_after, fits);
  if (results != nullptr) {
    results->write(
        "line,model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,"
        "measured,before,after\n");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const MeasuredRow& r = rows[i];
      results->print("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.line, r.model, r.gpu, r.tp,
                     r.input_tokens, r.output_tokens, r.concurrency, r.requests,
                     to_string(r.metric), r.value, before[i], after[i]);
    }
  }
  if (report != nullptr) {
    report->write(profile_json(fits, rows, request.measured_path, request.set).dump(2) + "\n");
  }
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  return kExitOk;
}

class CalibrateCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("MEASURED", request_.measured_path,
                   "measured figures, CSV: model,gpu,tp,input_tokens,output_tokens,concurrency,"
                   "requests,metric,value (metric ttft_ms, ttft_p50_ms, ttft_p99_ms, tpot_ms, ..., "
                   "itl_ms, e2e_ms, ..., output_tok_s; columns engine, measure_after, "
                   "range_ratio, range_style, set may follow; - for stdin)")
        ->required();
    app.add_option("--report", request_.report_path,
                   "write the fitted cost profile here (JSON; --cost-profile reads it; - for "
                   "stdout)");
    app.add_option("--results", request_.results_path,
                   "write one CSV row per measured row: the figure measured, simulated before "
                   "and after the fit");
    app.add_option("--set", request_.set,
                   "only the rows whose column 'set' (after the nine) is this, e.g. fit");
    app.add_flag("--no-fit", request_.no_fit,
                 "only simulate each row under the profile and constants given, and print the "
                 "errors");
    app.add_option("-j,--jobs", request_.jobs, "workloads simulated at once (default: the cores)")
        ->check(CLI::Range(1u, 1024u));
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
    app.add_option("--fit-per", fit_per_,
                   "one fit, and one profile entry, per gpu-engine (default), gpu, engine (the "
                   "constants shared by every GPU kind), or all")
        ->check(CLI::IsMember(std::vector<std::string>{"gpu-engine", "gpu", "engine", "all"}));
    options_.add_to(app, "invariant checks (default end)");
    // A calibration runs the roofline over its own closed loops: no trace to
    // read, no SLOs to meet.
    for (const char* name : {"--format", "--cost-model", "--slo-ttft-ms", "--slo-tpot-ms"}) {
      app.remove_option(app.get_option(name));
    }
    options_.slo_ttft = options_.slo_tpot = nullptr;
    app.footer(
        "Each distinct workload is simulated once, closed-loop (simulate --concurrency), with "
        "the engine its row's engine column names; the constants given on the command line are "
        "held, the others fitted per GPU kind and engine (--fit-per) to the median absolute "
        "percentage error. The profile written goes over the shipped one: a run on a GPU kind "
        "or engine it does not name keeps the shipped constants.\n"
        "Examples:\n"
        "  kvreplay calibrate bench/accuracy/example.csv --report my-profile.json\n"
        "  kvreplay simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu "
        "h100-80gb --cost-profile my-profile.json");
  }

  int run() override;

 private:
  int run_steps();
  CalibrateRequest request_;
  std::string fit_per_ = "gpu-engine";
  SimOptionsCli options_;
};

// What a worker thread throws is rethrown on this one (parallel_for), so it ends
// as any other exception does, the outputs' temporaries removed as run_steps
// unwinds: exit 2, one line, nothing written. Out of memory here, with the
// option that lowers it; anything else in main's one line.
int CalibrateCommand::run() {
  try {
    return run_steps();
  } catch (const std::bad_alloc&) {
    eprint(
        "kvreplay calibrate: out of memory (nothing written): simulate fewer workloads at once "
        "(-j)\n");
  }
  return kExitInput;
}

int CalibrateCommand::run_steps() {
  const auto started = std::chrono::steady_clock::now();
  request_.fit_per = fit_per_ == "gpu"      ? FitPer::kGpu
                     : fit_per_ == "engine" ? FitPer::kEngine
                     : fit_per_ == "all"    ? FitPer::kAll
                                            : FitPer::kGpuEngine;
  auto rows = read_measured_csv(request_.measured_path, request_.set);
  if (!rows) {
    eprint("{}\n", rows.error().to_string());
    return kExitInput;
  }
  auto workloads = make_workloads(rows.value(), options_, request_.measured_path);
  if (!workloads) {
    eprint("{}\n", workloads.error().to_string());
    return kExitInput;
  }
  OutputSet outputs;
  outputs.add_input("MEASURED", request_.measured_path);
  OutputFile* report = nullptr;
  OutputFile* results = nullptr;
  if ((!request_.report_path.empty() &&
       (report = outputs.open("the profile", request_.report_path, OutputFile::Flow::kWhole,
                              "--report")) == nullptr) ||
      (!request_.results_path.empty() &&
       (results = outputs.open("the results", request_.results_path, OutputFile::Flow::kWhole,
                               "--results")) == nullptr)) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  const unsigned jobs =
      request_.jobs != 0 ? request_.jobs : std::max(1u, std::thread::hardware_concurrency());
  if (auto problem = check_workload_memory(workloads.value(), jobs, request_.measured_path)) {
    eprint("{}\n", *problem);
    return kExitInput;
  }
  auto start_of = [](const Workload& w) {
    return w.options.cost.roofline_for(w.gpu, w.options.engine);
  };
  auto schedules = record_schedules(workloads.value(), start_of, jobs, request_.measured_path);
  if (!schedules) {
    eprint("{}\n", schedules.error().to_string());
    return kExitInput;
  }
  return report_and_write(request_, rows.value(), workloads.value(), schedules.value(), outputs,
                          report, results, jobs, started);
}

}  // namespace

std::unique_ptr<Command> make_calibrate_command() {
  return std::make_unique<CalibrateCommand>();
}

}  // namespace kvreplay
