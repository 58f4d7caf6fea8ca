#include "app/compare.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/terminal.h"
#include "io/json_file.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

// The size cap's reason, after "larger than N MiB, ".
constexpr std::string_view kTooLarge = "far more than a kvreplay report";

}  // namespace

int run_compare(const CompareRequest& request) {
  auto refuse = [](const std::string& why) {
    eprint("kvreplay compare: {}\n", why);
    return kExitInput;
  };
  Thresholds thresholds;
  if (!request.thresholds_file.empty()) {
    auto object = read_json_file(request.thresholds_file, kMaxThresholdsBytes, kTooLarge);
    if (!object) return refuse(object.error());
    if (auto set = thresholds.set_all(object.value()); !set) {
      return refuse(fmt::format("{}: {}", request.thresholds_file, set.error()));
    }
  }
  for (const std::string& assignment : request.thresholds) {
    if (auto set = thresholds.set(assignment); !set) {
      return refuse(fmt::format("--threshold: {}", set.error()));
    }
  }
  auto base = read_json_file(request.base_path, kMaxReportBytes, kTooLarge);
  if (!base) return refuse(base.error());
  auto now = read_json_file(request.new_path, kMaxReportBytes, kTooLarge);
  if (!now) return refuse(now.error());
  auto comparison =
      compare_reports(base.value(), now.value(), thresholds, request.base_path, request.new_path);
  if (!comparison) return refuse(comparison.error());
  const std::string name = request.name.empty() ? request.new_path : request.name;
  const Comparison& c = comparison.value();
  if (request.format == "json") {
    put_text(stdout, comparison_json(c, request.base_path, request.new_path));
  } else if (request.format == "junit") {
    put_text(stdout, comparison_junit(c, name));
  } else if (request.format == "github") {
    put_text(stdout, comparison_github(c, name));
  } else if (!request.quiet) {
    put_text(stdout,
             comparison_text(c, request.base_path, request.new_path, color_enabled(stdout)));
  }
  // Each line names the case: a gate over many cases reads stderr alone under -q.
  const std::string prefix = request.name.empty() ? std::string() : request.name + ": ";
  for (const std::string& regression : c.regressions) {
    eprint("kvreplay compare: {}regression: {}\n", prefix, regression);
  }
  return comparison.value().regressed() ? kExitCheckFailed : kExitOk;
}

namespace {

class CompareCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("BASE", request_.base_path, "the baseline report (JSON)")->required();
    app.add_option("NEW", request_.new_path, "the report to check (JSON)")->required();
    app.add_option("--threshold", request_.thresholds,
                   "NAME=VALUE, repeatable: 0.005 absolute, 2% relative to the base, or off "
                   "(NAME: a metric or its last part, e.g. peak_used; or any number of the "
                   "report by its dotted path, an increase worse, or a decrease with -VALUE)");
    app.add_option("--thresholds", request_.thresholds_file,
                   "a JSON object of thresholds, e.g. {\"peak_used\": \"2%\"} (--threshold wins)");
    app.add_flag("-q,--quiet", request_.quiet, "print no table (regressions still go to stderr)");
    app.add_option("--format", request_.format,
                   "stdout: text (the table; default), json, junit (JUnit XML, a test case a "
                   "metric, for CI dashboards) or github (workflow annotations, ::error a "
                   "regression)")
        ->check(CLI::IsMember(std::vector<std::string>{"text", "json", "junit", "github"}));
    app.add_option("--name", request_.name,
                   "the case's name: junit's suite, github's titles and every stderr line "
                   "(default: NEW's path)");
    app.footer(
        "Examples:\n"
        "  kvreplay replay traces/quickstart.jsonl --report base.json --quiet\n"
        "  kvreplay replay traces/quickstart.jsonl --alloc-order fifo --report new.json --quiet\n"
        "  kvreplay compare base.json new.json --threshold peak_used=2% --threshold "
        "waste_ratio_mean=0.005\n"
        "  kvreplay compare base.json new.json --threshold tokens.peak_logical=1% "
        "--format junit\n"
        "Defaults: waste ratios +0.001 (absolute), peak_used / peak_in_use / cow.copies / "
        "preemptions +1%, hit_rate\n"
        "and hit_rate_with_tiers -0.001, TTFT / TPOT / E2E p90 and p99 +5%, slo.attainment "
        "-0.01, $ per million\n"
        "output tokens +1%, oom.events any increase; an invariant violation (or --verify "
        "mismatch) or leaving status ok always fails.\n"
        "Exit codes: 0 no regression, 1 a regression, 2 unreadable or incomparable reports.");
  }
  int run() override { return run_compare(request_); }

 private:
  CompareRequest request_;
};

}  // namespace

std::unique_ptr<Command> make_compare_command() {
  return std::make_unique<CompareCommand>();
}

}  // namespace kvreplay
