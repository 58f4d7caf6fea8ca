#include "app/validate.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/command.h"
#include "app/options.h"
#include "app/replay_run.h"
#include "io/standard_output.h"

namespace kvreplay {

int run_validate(const std::string& trace_path, const ConfigOverrides& overrides) {
  auto progress = ProgressLine::for_stderr(true, 1024, trace_path);
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
    eprint("{}: invariant {} violated: {}\n", name, replayer.violation()->invariant,
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

namespace {

class ValidateCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("TRACE", path_, "kvtrace file (- for stdin)")->required();
    config_.add_to(app);
    app.footer("Example:\n  kvreplay validate traces/fork_cow.jsonl");
  }
  int run() override { return run_validate(path_, config_.overrides()); }

 private:
  std::string path_;
  ConfigOptions config_;
};

}  // namespace

std::unique_ptr<Command> make_validate_command() {
  return std::make_unique<ValidateCommand>();
}

}  // namespace kvreplay
