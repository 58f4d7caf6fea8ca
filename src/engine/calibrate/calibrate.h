// kvreplay calibrate (SPEC 3.5): fits the roofline's constants to measured
// benchmark figures.
//
// MEASURED.csv has the header model,gpu,tp,input_tokens,output_tokens,
// concurrency,requests,metric,value (more columns after these are allowed and
// ignored: a source, a note). Each row is one figure of one benchmark run:
// `requests` requests of input_tokens prompt and output_tokens output, sent by
// `concurrency` clients in a closed loop (simulate --concurrency), on a model
// (a preset or a config.json path) served with TP `tp` on one GPU kind; the
// metric is the mean TTFT (ttft_ms), the mean TPOT (tpot_ms), or the output
// tokens a second over the run (output_tok_s, the whole deployment).
//
// Each distinct workload is simulated once. A closed loop sends a request at
// the end of the step that ended another, so which requests each step runs
// does not depend on how long steps take: the schedule is recorded once (each
// step's StepWork, each request's arrival, first and last step) and the
// figures under other constants are sums of the roofline over it. The fit
// minimizes the median absolute percentage error over the rows (the mean
// breaks ties), by Nelder-Mead over the constants' logarithms, and its answer
// is simulated again in full: the figures must agree.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/sim_types.h"
#include "io/input_error.h"
#include "model/run_config.h"

namespace kvreplay {

enum class CalibrationMetric { kTtftMs, kTpotMs, kOutputTokS };
std::string_view to_string(CalibrationMetric metric);

struct MeasuredRow {
  std::uint64_t line = 0;
  std::string model, gpu;
  std::uint32_t tp = 1;
  std::uint32_t input_tokens = 0, output_tokens = 0, concurrency = 0;
  std::uint32_t requests = 0;
  CalibrationMetric metric = CalibrationMetric::kTpotMs;
  double value = 0;
  // The column "engine", when there is one: the engine that was measured
  // (its startup rule sizes the KV memory, model/capacity.h).
  std::string engine;
  std::size_t workload = 0;  // index into the workloads the rows name
};

// Reads MEASURED.csv ("-": standard input). Errors: FILE:LINE: FIELD: problem.
// `set`: keep only the rows whose column "set" (one after the nine) holds it;
// empty: every row.
InputResult<std::vector<MeasuredRow>> read_measured_csv(const std::string& path,
                                                        const std::string& set = {});

// One benchmark run to simulate: the rows that share it point to it.
struct Workload {
  std::uint64_t line = 0;  // its first row
  std::string model, gpu;
  std::uint32_t tp = 1, input_tokens = 0, output_tokens = 0, concurrency = 0, requests = 0;
  RunConfig config;
  SimOptions options;
};

// The figures of a run: mean TTFT and TPOT (ms), output tokens a second.
struct Figures {
  double ttft_ms = 0, tpot_ms = 0, output_tok_s = 0;
  double of(CalibrationMetric metric) const;
};

// A simulated workload's schedule, replayable under any constants.
class Schedule {
 public:
  // Simulates `workload` closed-loop with `constants`; an error when the run
  // fails (a check, a request that never fits).
  static Result<Schedule, std::string> record(const Workload& workload,
                                              const RooflineConstants& constants);
  // The figures under `constants`, without simulating again.
  Figures figures(const RooflineConstants& constants) const;
  // The figures the recording run measured itself.
  const Figures& simulated() const { return simulated_; }
  std::size_t steps() const { return terms_.size(); }

 private:
  struct Times {
    std::int64_t arrival = -1;  // the step whose end it arrived at; -1: time 0
    std::int64_t first = 0, last = 0;
    std::uint32_t output = 0;
  };
  std::vector<StepTerms> terms_;  // each step's, priced by figures()
  std::vector<Times> times_;
  Figures simulated_;
};

// Records every workload's schedule under constants_of(workload), `jobs` at
// once. Error: the first workload (in order) whose run fails, as
// PATH:LINE: row: ... at its first row. What a worker throws is rethrown.
InputResult<std::vector<Schedule>> record_schedules(
    const std::vector<Workload>& workloads,
    const std::function<RooflineConstants(const Workload&)>& constants_of, unsigned jobs,
    const std::string& path);

}  // namespace kvreplay
