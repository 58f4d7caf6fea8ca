// kvreplay calibrate (SPEC 3.5): fits the roofline's constants to measured
// benchmark figures.
//
// MEASURED.csv has the header model,gpu,tp,input_tokens,output_tokens,
// concurrency,requests,metric,value (more columns after these are allowed: a
// source, a note, and those below). Each row is one figure of one benchmark
// run: `requests` requests of input_tokens prompt and output_tokens output,
// sent by `concurrency` clients in a closed loop (simulate --concurrency), on
// a model (a preset or a config.json path) served with TP `tp` on one GPU
// kind. The metric is a figure as vllm bench serve prints it: the mean, median
// or 99th percentile of TTFT, TPOT or end-to-end latency (ttft_ms,
// ttft_p50_ms, ttft_p99_ms, tpot_ms, ...), the mean inter-token latency over
// every token (itl_ms), or the output tokens a second over the run
// (output_tok_s, the whole deployment).
//
// Optional columns, by name: `engine` (vllm, sglang, trtllm; nim is
// TensorRT-LLM): the engine that measured the row, which is the engine
// simulated (unless --engine is given) and sizes the KV memory by its rule
// (model/capacity.h); `client` (trtllm-bench: the engine is set up as
// trtllm-bench sets it, chunked context on and its batch limits by its
// heuristic); `kv_dtype` (simulate --dtype: the KV cache's); `measure_after`
// (simulate --measure-after: requests the
// benchmark left out of its figures); `range_ratio` and `range_style`
// (simulate --random-range-ratio and --range-ratio-style); `set` (--set).
//
// Each distinct workload is simulated once. A closed loop sends a request at
// the end of the step that ended another, so which requests each step runs
// does not depend on how long steps take, save for the server's intake
// (request_overhead_ms, one request at a time): the schedule is recorded once
// (each step's StepWork, the intake it waited for, idle, each request's
// arrival, first and last step) and
// the figures under other constants are sums of the roofline over it. The fit
// minimizes the median absolute percentage error over the rows (the mean
// breaks ties), by Nelder-Mead over the constants' logarithms, and its answer
// is simulated again in full.
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

enum class CalibrationMetric : std::uint8_t {
  kTtftMs,
  kTtftP50Ms,
  kTtftP99Ms,
  kTpotMs,
  kTpotP50Ms,
  kTpotP99Ms,
  kItlMs,
  kE2eMs,
  kE2eP50Ms,
  kE2eP99Ms,
  kOutputTokS
};
std::string_view to_string(CalibrationMetric metric);
std::optional<CalibrationMetric> parse_calibration_metric(std::string_view name);
// "ttft_ms, ttft_p50_ms, ...": the names, for messages.
std::string calibration_metric_list();
// A percentile's metric (the fit prices those schedules' percentiles).
bool is_percentile(CalibrationMetric metric);
// The class a metric is reported under ("ttft", "tpot", "itl", "e2e", "throughput").
std::string_view metric_class(CalibrationMetric metric);

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
  std::string client;               // the column "client": the benchmark that measured it
  std::string kv_dtype;             // the column "kv_dtype" (simulate --dtype); empty: the model's
  std::uint64_t measure_after = 0;  // the column "measure_after"
  std::optional<double> range_ratio;  // the column "range_ratio", when filled
  RangeStyle range_style = RangeStyle::kVllm;
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
  std::uint64_t measure_after = 0;
  std::optional<double> range_ratio;
  RangeStyle range_style = RangeStyle::kVllm;
  RunConfig config;
  SimOptions options;
};

// The figures of a run over its measured requests (ms; output tokens a
// second). The percentiles are numpy's default (linear between order
// statistics), filled only when asked for.
struct Figures {
  double ttft_ms = 0, tpot_ms = 0, itl_ms = 0, e2e_ms = 0, output_tok_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, tpot_p50_ms = 0, tpot_p99_ms = 0;
  double e2e_p50_ms = 0, e2e_p99_ms = 0;
  double of(CalibrationMetric metric) const;
};

// One request's times (s) as a benchmark client sees them.
struct RequestSpan {
  std::uint64_t line = 0;  // the order it was sent in, from 1
  double arrival = 0, first = 0, last = 0;
  std::uint32_t output = 0;
};
// The figures of `spans`, leaving out the first `measure_after` sent; the
// throughput's window runs from the first measured arrival to the last end.
Figures figures_of(const std::vector<RequestSpan>& spans, std::uint64_t measure_after,
                   bool percentiles);

// A simulated workload's schedule, replayable under any constants.
class Schedule {
 public:
  // Simulates `workload` closed-loop with `constants`; an error when the run
  // fails (a check, a request that never fits).
  static Result<Schedule, std::string> record(const Workload& workload,
                                              const RooflineConstants& constants);
  // The figures under `constants`, without simulating again (the
  // percentiles when `percentiles`).
  Figures figures(const RooflineConstants& constants, bool percentiles = true) const;
  // The figures the recording run measured itself.
  const Figures& simulated() const { return simulated_; }
  std::size_t steps() const { return terms_.size(); }

 private:
  struct Times {
    std::uint64_t line = 0;
    std::int64_t arrival = -1;  // the step whose end it arrived at; -1: time 0
    std::int64_t first = 0, last = 0;
    std::uint32_t output = 0;
  };
  std::uint64_t measure_after_ = 0;
  std::vector<StepTerms> terms_;  // each step's, priced by figures()
  // Each step's idle wait for the server's intake: it began `queued`
  // request_overhead_ms after the end of step `base` (-1: time 0); queued 0:
  // it began where the last ended.
  struct Wait {
    std::int64_t base = -1;
    std::uint64_t queued = 0;
  };
  std::vector<Wait> waits_;
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
