#include "app/replay.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include "app/command.h"
#include "app/options.h"
#include "app/replay_run.h"
#include "io/output.h"
#include "io/standard_output.h"
#include "report/html.h"
#include "report/report.h"

namespace kvreplay {

namespace {

int output_failure(const OutputSet& outputs) {
  eprint("{}\n", outputs.error());
  return kExitInput;
}

}  // namespace

int run_replay(const ReplayRequest& request) {
  // Opened before the run, so a path that cannot be written fails at once.
  OutputSet outputs;
  outputs.add_input("TRACE", request.trace_path);
  if (request.overrides.model_config) {
    outputs.add_input("--model-config", *request.overrides.model_config);
  }
  OutputFile* report_out = nullptr;
  OutputFile* timeline_out = nullptr;
  OutputFile* html_out = nullptr;
  if (!request.report_path.empty() &&
      (report_out = outputs.open("the report", request.report_path, OutputFile::Flow::kWhole,
                                 "--report")) == nullptr) {
    return output_failure(outputs);
  }
  if (!request.timeline_path.empty() &&
      (timeline_out = outputs.open("the timeline", request.timeline_path, OutputFile::Flow::kStream,
                                   "--timeline")) == nullptr) {
    return output_failure(outputs);
  }
  if (!request.html_path.empty() &&
      (html_out = outputs.open("the HTML report", request.html_path, OutputFile::Flow::kWhole,
                               "--html")) == nullptr) {
    return output_failure(outputs);
  }
  // The summary never mixes with an output on stdout.
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;
  std::optional<TimelineWriter> timeline;
  if (timeline_out != nullptr) timeline.emplace(*timeline_out);
  std::optional<TimelineSampler> sampler;  // --html: the run over time, downsampled
  if (html_out != nullptr) sampler.emplace();
  auto progress = ProgressLine::for_stderr(!request.quiet, 1024, request.trace_path);
  auto run = replay_trace(
      request.trace_path, request.overrides, request.check, request.on_oom, request.dataplane,
      [&](const Event& event, const Replayer& replayer) {
        if (timeline) timeline->row(event, replayer);
        if (sampler) {
          sampler->add(timeline_point(event.index, replayer.state(), replayer.cow_copies()));
        }
        if (progress && progress->due()) {
          show_progress(*progress, "replay", event.index);
        }
        return timeline_out == nullptr || !timeline_out->failed();
      });
  if (progress) progress->clear();
  if (!run) return input_failure(run.error());  // the outputs' temporaries are removed
  if (run.value().stopped) return output_failure(outputs);
  ReplayReportInput input{TraceInfo{request.trace_path, run.value().format,
                                    run.value().replayer->totals().events, run.value().sha256},
                          run.value().status, run.value().replayer.get(), run.value().wall_seconds};
  if (report_out != nullptr) {
    nlohmann::json report = replay_report(input);
    if (const auto& dataplane = run.value().dataplane) {
      report["timing"]["kernels"] = dataplane->kernels_json();
    }
    // A file name is not always UTF-8: its invalid bytes become U+FFFD in JSON.
    report_out->write(report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  if (html_out != nullptr) {
    html_out->write(render_run_html(replay_report(input), *sampler, "event"));
  }
  if (!outputs.commit()) return output_failure(outputs);
  if (!request.quiet) {
    put_text(summary_stream, replay_summary(input, color_enabled(summary_stream)));
    if (run.value().dataplane) put_text(summary_stream, run.value().dataplane->summary_text());
  }
  if (const auto& v = run.value().replayer->violation()) {
    if (v->event == 0) {
      eprint("{}: invariant {} violated at the end of the trace: {}\n", input.trace.path,
             v->invariant, v->message);
    } else {
      eprint("{}:{}: invariant {} violated at event {}: {}\n", input.trace.path, v->line,
             v->invariant, v->event, v->message);
    }
  }
  if (run.value().status == RunStatus::kOom) {
    eprint(
        "{}: pool exhausted at event {} (--on-oom fail); rerun with --on-oom skip "
        "or a larger --kv-memory / --pool-blocks\n",
        input.trace.path, *run.value().replayer->totals().oom_first_event);
  }
  return exit_code(run.value().status);
}

namespace {

// replay's data-plane options (SPEC 5; README "Data plane").
struct DataPlaneCli {
  std::string backend = "none", arena_limit;

  void add_to(CLI::App& app, DataPlaneRequest& request) {
    app.add_option("--backend", backend,
                   "none (default: metadata only), cpu (a KV arena in host memory) or cuda")
        ->check(CLI::IsMember(backend_names()))
        ->group("Data plane");
    app.add_flag("--verify", request.options.verify,
                 "compare every live sequence's bytes with what it wrote or inherited, at every "
                 "check event, every event --check checks, and the end (exit 1 on a mismatch)")
        ->group("Data plane");
    app.add_flag("--attention", request.options.attention,
                 "run paged decode attention (every layer) at every decode event")
        ->group("Data plane");
    app.add_option("--arena-limit", arena_limit,
                   "largest arena to allocate (default 4GiB on cpu; on cuda the device's free "
                   "memory less 1 GiB)")
        ->group("Data plane");
  }

  std::optional<std::string> resolve(DataPlaneRequest& request) const {
    request.backend = *parse_backend(backend);
    if (request.backend == BackendKind::kNone) {
      if (request.options.verify) return "--verify: needs --backend cpu or --backend cuda";
      if (request.options.attention) return "--attention: needs --backend cpu or --backend cuda";
    }
    if (!arena_limit.empty()) {
      auto bytes = parse_memory_size(arena_limit);
      if (!bytes) return fmt::format("--arena-limit: {}", bytes.error());
      request.arena_limit = bytes.value();
    }
    return std::nullopt;
  }
};

class ReplayCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("TRACE", request_.trace_path,
                   "kvtrace file (.jsonl, .json, gzip by content; - for stdin)")
        ->required();
    config_.add_to(app);
    app.add_option(
           "--check", check_,
           "invariant checks: after every event, every N events, at the end (default), or off")
        ->check(kCheckValidator);
    app.add_option("--on-oom", oom_,
                   "pool exhaustion: fail (exit 3, default) or skip the operation and go on")
        ->check(CLI::IsMember({"fail", "skip"}));
    app.add_option("--report", request_.report_path,
                   "write the JSON report here (- for stdout; the summary then goes to stderr)");
    app.add_option("--timeline", request_.timeline_path,
                   "write one CSV row per event here (- for stdout)");
    app.add_option("--html", request_.html_path,
                   "write a self-contained HTML page (summary and charts) here");
    app.add_flag("-q,--quiet", request_.quiet, "print no summary");
    dataplane_.add_to(app, request_.dataplane);
    app.footer(
        "Examples:\n"
        "  kvreplay replay traces/prefix_partial.jsonl --check every --report report.json\n"
        "  kvreplay replay traces/fork_cow.jsonl --backend cpu --verify\n"
        "  gzip -c traces/quickstart.jsonl | kvreplay replay - --kv-memory 8GiB --on-oom skip "
        "--check off");
  }

  int run() override {
    request_.overrides = config_.overrides();
    request_.check = *CheckPolicy::parse(check_);
    request_.on_oom = oom_ == "skip" ? OomPolicy::kSkip : OomPolicy::kFail;
    if (auto problem = dataplane_.resolve(request_.dataplane)) return usage_error(*problem);
    return run_replay(request_);
  }

 private:
  ReplayRequest request_;
  ConfigOptions config_;
  std::string check_ = "end", oom_ = "fail";
  DataPlaneCli dataplane_;
};

}  // namespace

std::unique_ptr<Command> make_replay_command() {
  return std::make_unique<ReplayCommand>();
}

}  // namespace kvreplay
