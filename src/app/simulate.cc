#include "app/simulate.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <optional>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "app/terminal.h"
#include "io/standard_output.h"
#include "report/html.h"

namespace kvreplay {

int run_simulate(const SimulateRequest& request) {
  auto config = resolve_sim_config(request.overrides);
  if (!config) {
    eprint("{}\n", config.error().to_string());
    return kExitInput;
  }
  // Opened before the run, so a path that cannot be written fails at once.
  OutputSet outputs;
  outputs.add_input("REQUESTS", request.trace_path);
  if (request.overrides.model_config) {
    outputs.add_input("--model-config", *request.overrides.model_config);
  }
  OutputFile* report_out = nullptr;
  OutputFile* timeline_out = nullptr;
  OutputFile* html_out = nullptr;
  OutputFile* requests_out = nullptr;
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
                                    OutputFile::Flow::kStream, "--requests")) == nullptr)) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  // The summary never mixes with an output on stdout.
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;
  std::optional<TimelineSampler> sampler;  // --html: the run over time, downsampled
  if (html_out != nullptr) sampler.emplace(TimelineSampler::kDefaultBuckets, /*simulate=*/true);
  auto progress = ProgressLine::for_stderr(!request.quiet, 16, request.trace_path);
  auto result = simulate_file(request.trace_path, request.format, config.value(), request.options,
                              timeline_out, sampler ? &*sampler : nullptr,
                              SimulateTerminal{progress.get(), color_enabled(summary_stream)},
                              SimFaults{}, requests_out);
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
        render_run_html(result.value().report, *sampler, "step", result.value().latency_cdf));
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
    app.add_flag("-q,--quiet", request_.quiet, "print no summary");
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
    return run_simulate(request_);
  }

 private:
  SimulateRequest request_;
  ConfigOptions config_;
  SimOptionsCli options_;
};

}  // namespace

std::unique_ptr<Command> make_simulate_command() {
  return std::make_unique<SimulateCommand>();
}

}  // namespace kvreplay
