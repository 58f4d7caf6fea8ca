#include "replay/run_replay.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>

#include "io/output.h"
#include "io/standard_output.h"
#include "report/html.h"
#include "report/report.h"
#include "report/terminal.h"
#include "trace/kvtrace_reader.h"

namespace kvreplay {

namespace {

int input_failure(const InputError& error) {
  fmt::print(stderr, "{}\n", error.to_string());
  return kExitInput;
}

int output_failure(const OutputSet& outputs) {
  fmt::print(stderr, "{}\n", outputs.error());
  return kExitInput;
}

void show_progress(ProgressLine& progress, std::string_view command, std::uint64_t events) {
  const double seconds = progress.elapsed_seconds();
  progress.draw(fmt::format(
      "{}: {} events ({} events/s)", command, grouped(events),
      grouped(seconds > 0 ? static_cast<std::uint64_t>(static_cast<double>(events) / seconds)
                          : 0)));
}

struct ReplayRun {
  RunStatus status = RunStatus::kOk;
  std::unique_ptr<DataPlane> dataplane;  // observes the replayer (--backend cpu|cuda)
  std::unique_ptr<Replayer> replayer;
  std::string format;
  std::string sha256;
  double wall_seconds = 0.0;
  bool stopped = false;  // on_event said stop (an output failed): nothing else is valid
};

// Runs the whole trace. `on_event` sees every applied event (for the timeline)
// and returns false to stop the run at once.
template <class OnEvent>
InputResult<ReplayRun> replay_trace(const std::string& path, const ConfigOverrides& overrides,
                                    CheckPolicy check, OomPolicy on_oom,
                                    const DataPlaneRequest& dataplane, OnEvent&& on_event) {
  auto start = std::chrono::steady_clock::now();
  auto opened = KvTraceReader::open(path);
  if (!opened) return Unexpected{opened.error()};
  KvTraceReader& reader = *opened.value();
  auto config = resolve_run_config(reader.header().config, overrides, reader.name(),
                                   reader.header().config_line);
  if (!config) return Unexpected{config.error()};
  ReplayRun run;
  run.replayer = std::make_unique<Replayer>(config.value(), check, on_oom);
  if (dataplane.backend != BackendKind::kNone) {
    auto backend = make_backend(dataplane.backend, config.value().kv, dataplane.arena_limit);
    if (!backend) {
      return Unexpected{
          InputError{"command line", 0, "--backend",
                     fmt::format("{}: {}", to_string(dataplane.backend), backend.error())}};
    }
    run.dataplane = std::make_unique<DataPlane>(std::move(backend).value(), dataplane.options,
                                                dataplane.faults);
    run.replayer->set_observer(run.dataplane.get());
  }
  Event event;
  try {
    for (;;) {
      auto more = reader.next(event);
      if (!more) return Unexpected{more.error()};
      if (!more.value()) break;
      auto outcome = run.replayer->apply(event, reader.name());
      if (!outcome) return Unexpected{outcome.error()};
      if (!on_event(event, *run.replayer)) {
        run.stopped = true;
        return run;
      }
      if (outcome.value() == Replayer::Outcome::kViolation) {
        run.status = RunStatus::kViolation;
        break;
      }
      if (outcome.value() == Replayer::Outcome::kOom && on_oom == OomPolicy::kFail) {
        run.status = RunStatus::kOom;
        break;
      }
    }
    if (run.status == RunStatus::kOk && run.replayer->finish() == Replayer::Outcome::kViolation) {
      run.status = RunStatus::kViolation;
    }
    if (run.dataplane) run.dataplane->backend().synchronize();
  } catch (const BackendError& error) {
    // A device failure: neither bad input nor a check that failed, but the run
    // cannot go on (exit code 2, like a backend that cannot start).
    return Unexpected{
        InputError{reader.name(), event.line, "--backend",
                   fmt::format("{}: {}", to_string(dataplane.backend), error.what())}};
  }
  run.format = std::string(reader.format_name());
  // The whole trace's hash, even when the replay stopped early (oom, violation).
  auto sha256 = reader.content_sha256();
  if (!sha256) return Unexpected{sha256.error()};
  run.sha256 = std::move(sha256).value();
  run.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

int exit_code(RunStatus status) {
  switch (status) {
    case RunStatus::kOk: return kExitOk;
    case RunStatus::kOom: return kExitOom;
    case RunStatus::kViolation: return kExitCheckFailed;
  }
  return kExitCheckFailed;
}

}  // namespace

int run_replay(const ReplayRequest& request) {
  // Opened before the run, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  OutputFile* timeline_out = nullptr;
  OutputFile* html_out = nullptr;
  if (!request.report_path.empty() &&
      (report_out = outputs.open("the report", request.report_path)) == nullptr) {
    return output_failure(outputs);
  }
  if (!request.timeline_path.empty() &&
      (timeline_out = outputs.open("the timeline", request.timeline_path,
                                   OutputFile::Flow::kStream)) == nullptr) {
    return output_failure(outputs);
  }
  if (!request.html_path.empty() &&
      (html_out = outputs.open("the HTML report", request.html_path)) == nullptr) {
    return output_failure(outputs);
  }
  // The summary never mixes with an output on stdout.
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;
  std::optional<TimelineWriter> timeline;
  if (timeline_out != nullptr) timeline.emplace(*timeline_out);
  std::optional<TimelineSampler> sampler;  // --html: the run over time, downsampled
  if (html_out != nullptr) sampler.emplace();
  auto progress = ProgressLine::for_stderr(!request.quiet, 1024);
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
      fmt::print(stderr, "{}: invariant {} violated at the end of the trace: {}\n",
                 input.trace.path, v->invariant, v->message);
    } else {
      fmt::print(stderr, "{}:{}: invariant {} violated at event {}: {}\n", input.trace.path,
                 v->line, v->invariant, v->event, v->message);
    }
  }
  if (run.value().status == RunStatus::kOom) {
    fmt::print(stderr,
               "{}: pool exhausted at event {} (--on-oom fail); rerun with --on-oom skip "
               "or a larger --kv-memory / --pool-blocks\n",
               input.trace.path, *run.value().replayer->totals().oom_first_event);
  }
  return exit_code(run.value().status);
}

int run_validate(const std::string& trace_path, const ConfigOverrides& overrides) {
  auto progress = ProgressLine::for_stderr(true, 1024);
  auto run =
      replay_trace(trace_path, overrides, CheckPolicy{CheckPolicy::Mode::kEnd, 1}, OomPolicy::kSkip,
                   DataPlaneRequest{}, [&](const Event& event, const Replayer&) {
                     if (progress && progress->due()) {
                       show_progress(*progress, "validate", event.index);
                     }
                     return true;
                   });
  if (progress) progress->clear();
  if (!run) return input_failure(run.error());
  const Replayer& replayer = *run.value().replayer;
  std::string name = trace_path == "-" ? "<stdin>" : trace_path;
  if (run.value().status == RunStatus::kViolation) {
    fmt::print(stderr, "{}: invariant {} violated: {}\n", name, replayer.violation()->invariant,
               replayer.violation()->message);
    return kExitCheckFailed;
  }
  std::string line =
      fmt::format("{}: valid {}, {} events", name, run.value().format, replayer.totals().events);
  if (replayer.totals().oom_events > 0) {
    line += fmt::format(" ({} operations would exhaust the pool of {} blocks)",
                        replayer.totals().oom_events, replayer.pool().total());
  }
  put_text(stdout, line + "\n");
  return kExitOk;
}

}  // namespace kvreplay
