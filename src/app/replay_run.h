// What `replay` and `validate` share: a whole kvtrace through a Replayer (and
// the data plane, when one is asked for), the progress line, and the mapping of
// a run's status to its exit code.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "app/exit_codes.h"
#include "app/replay.h"
#include "app/terminal.h"
#include "dataplane/arena.h"
#include "dataplane/data_plane.h"
#include "engine/replay/replayer.h"
#include "formats/kvtrace_reader.h"
#include "io/input_error.h"
#include "io/standard_output.h"
#include "model/run_config.h"
#include "report/report.h"

namespace kvreplay {

inline int input_failure(const InputError& error) {
  eprint("{}\n", error.to_string());
  return kExitInput;
}

inline void show_progress(ProgressLine& progress, std::string_view command, std::uint64_t events) {
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
  if (dataplane.options.attention && config.value().kv.kv_tensors == 1) {
    return Unexpected{InputError{
        "command line", 0, "--attention",
        "the model keeps one MLA latent a token and layer; the paged decode attention kernel "
        "reads K and V heads (attention over the latent is not modelled); drop --attention"}};
  }
  ReplayRun run;
  run.replayer = std::make_unique<Replayer>(config.value(), check, on_oom);
  if (dataplane.backend != BackendKind::kNone) {
    auto backend = make_backend(dataplane.backend, config.value().kv, dataplane.arena_limit);
    if (!backend) {
      return Unexpected{
          InputError{"command line", 0, "--backend",
                     fmt::format("{}: {}", to_string(dataplane.backend), backend.error())}};
    }
    DataPlaneOptions options = dataplane.options;
    options.tier_limit_bytes = dataplane.arena_limit.value_or(kDefaultArenaLimit);
    run.dataplane =
        std::make_unique<DataPlane>(std::move(backend).value(), options, dataplane.faults);
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

inline int exit_code(RunStatus status) {
  switch (status) {
    case RunStatus::kOk: return kExitOk;
    case RunStatus::kOom: return kExitOom;
    case RunStatus::kViolation: return kExitCheckFailed;
  }
  return kExitCheckFailed;
}

}  // namespace kvreplay
