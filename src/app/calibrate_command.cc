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

struct CalibrateRequest {
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
                      std::uint32_t, std::uint32_t, std::string>,
           std::size_t>
      index;
  for (MeasuredRow& row : rows) {
    const auto key = std::make_tuple(row.model, row.gpu, row.tp, row.input_tokens,
                                     row.output_tokens, row.concurrency, row.requests, row.engine);
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
    std::optional<RequestFormat> format;
    if (auto problem = cli.resolve(w.options, format, w.gpu)) return fail("gpu", *problem);
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
    overrides.context_default = overrides.kv_groups = true;
    set_activation_limits(overrides, w.options);
    // The engine that measured the row sized its KV cache by its own rule.
    // NVIDIA NIM serves its LLMs on TensorRT-LLM profiles where the GPU has one.
    if (auto engine = parse_capacity_engine(row.engine == "nim" ? "trtllm" : row.engine)) {
      overrides.capacity_engine = *engine;
    }
    auto config = resolve_sim_config(overrides);
    // The row, not the command line, gave the model, GPU and TP at fault; a
    // config.json's own error keeps its FILE:LINE.
    if (!config) {
      const InputError& error = config.error();
      return fail("model", error.file == "command line" ? error.problem : error.to_string());
    }
    w.config = std::move(config).value();
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
  std::string out;
  for (auto metric :
       {CalibrationMetric::kTtftMs, CalibrationMetric::kTpotMs, CalibrationMetric::kOutputTokS}) {
    std::vector<double> e;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].metric == metric) e.push_back(errors[i]);
    }
    if (!e.empty()) {
      out += fmt::format("{} {} (n={}), ", to_string(metric), percent(median(e)), e.size());
    }
  }
  return out + fmt::format("all {} (n={})", percent(median(errors)), errors.size());
}

// What the fit of one GPU kind's rows gave.
struct GpuFit {
  std::vector<std::size_t> rows;
  RooflineConstants start;
  std::vector<std::string> start_sources;
  FitResult fit;
};

std::map<std::string, GpuFit> fit_by_gpu(const std::vector<MeasuredRow>& rows,
                                         const std::vector<Workload>& workloads,
                                         const std::vector<Schedule>& schedules, bool no_fit,
                                         unsigned jobs) {
  std::map<std::string, GpuFit> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    out[workloads[rows[i].workload].gpu].rows.push_back(i);
  }
  for (auto& [gpu, group] : out) {
    const Workload& w = workloads[rows[group.rows.front()].workload];
    group.start = w.options.cost.roofline_for(gpu, w.options.engine);
    group.start_sources =
        w.options.cost.cost_profile().sources_for(gpu, to_string(w.options.engine));
    std::vector<FitPoint> points;
    for (std::size_t i : group.rows) points.push_back({&rows[i], &schedules[rows[i].workload]});
    const std::uint32_t held = no_fit ? ~0u : w.options.cost.given_mask;
    group.fit = fit_constants(points, group.start, held, jobs);
  }
  return out;
}

nlohmann::json profile_json(const std::map<std::string, GpuFit>& fits,
                            const std::vector<MeasuredRow>& rows, EngineKind engine,
                            const std::string& path, const std::string& set) {
  const auto& infos = roofline_constant_infos();
  std::vector<CostProfile::Entry> entries;
  for (const auto& [gpu, group] : fits) {
    CostProfile::Entry entry;
    entry.gpu = gpu;
    entry.engine = std::string(to_string(engine));
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
                     fmt::format("kvreplay calibrate {}{}, engine {}", path,
                                 set.empty() ? std::string() : " --set " + set, to_string(engine)),
                     std::move(entries))
      .to_json();
}

// Fits, checks the fit by simulating it again, prints the table and writes
// the outputs.
int report_and_write(const CalibrateRequest& request, std::vector<MeasuredRow>& rows,
                     const std::vector<Workload>& workloads, const std::vector<Schedule>& schedules,
                     OutputSet& outputs, OutputFile* report, OutputFile* results, unsigned jobs,
                     std::chrono::steady_clock::time_point started) {
  const auto fits = fit_by_gpu(rows, workloads, schedules, request.no_fit, jobs);
  auto fitted_of = [&](const Workload& w) { return fits.at(w.gpu).fit.constants; };
  auto again = record_schedules(workloads, fitted_of, jobs, request.measured_path);
  if (!again) {
    eprint("{}\n", again.error().to_string());
    return kExitInput;
  }
  std::vector<double> before(rows.size()), after(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const MeasuredRow& row = rows[i];
    const Workload& w = workloads[row.workload];
    before[i] = schedules[row.workload].figures(fits.at(w.gpu).start).of(row.metric);
    after[i] = again.value()[row.workload].simulated().of(row.metric);
    const double replayed = schedules[row.workload].figures(fitted_of(w)).of(row.metric);
    if (relative_error(replayed, after[i]) > 1e-9) {
      eprint("kvreplay calibrate: internal: line {}: the fit's {} replayed is {}, simulated {}\n",
             row.line, to_string(row.metric), replayed, after[i]);
      return kExitCheckFailed;
    }
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
    for (const auto& [gpu, group] : fits) {
      text += fmt::format("{} ({} rows):", gpu, group.rows.size());
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
    text += fmt::format("{} rows, {} workloads simulated twice in {:.1f} s\n", rows.size(),
                        workloads.size(), seconds);
    put_text(out, text);
  }
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
    const EngineKind engine = workloads.front().options.engine;
    report->write(profile_json(fits, rows, engine, request.measured_path, request.set).dump(2) +
                  "\n");
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
                   "requests,metric,value (metric ttft_ms, tpot_ms or output_tok_s; - for stdin)")
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
    options_.add_to(app, "invariant checks (default end)");
    // A calibration runs the roofline over its own closed loops: no trace to
    // read, no SLOs to meet.
    for (const char* name : {"--format", "--cost-model", "--slo-ttft-ms", "--slo-tpot-ms"}) {
      app.remove_option(app.get_option(name));
    }
    options_.slo_ttft = options_.slo_tpot = nullptr;
    app.footer(
        "Each distinct workload is simulated once, closed-loop (simulate --concurrency); the "
        "constants given on the command line are held, the others fitted per GPU kind to the "
        "median absolute percentage error.\n"
        "Examples:\n"
        "  kvreplay calibrate bench/accuracy/example.csv --report my-profile.json\n"
        "  kvreplay simulate traces/requests/azure_conv.csv --model llama-3.1-8b-fp8 --gpu "
        "h100-80gb --cost-profile my-profile.json");
  }

  int run() override;

 private:
  int run_steps();
  CalibrateRequest request_;
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
