// The load generators of `simulate` and `plan` (SPEC 3.5): the arrival of
// each request the trace gives, in its order, when --request-rate or
// --concurrency replaces the trace's own times; the warm-up; and the
// throughput and latency over the measurement window.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/fleet/fleet.h"
#include "engine/simulator.h"
#include "io/input_error.h"

namespace kvreplay {

// --request-rate R: arrivals at 0, then exponential gaps of mean 1/R drawn
// from a 64-bit Mersenne Twister seeded by --load-seed (the uniform is the
// top 53 bits, so the times are the same on every platform).
//
// --concurrency C: C clients, each free at time 0. A request is sent by the
// client that becomes free first, when it does: at the end of that client's
// previous request (its last token, or the step that gave up on it). When
// every client is busy, the simulation runs a step at a time until one is
// free. In a fleet, the instances with the earliest clock step first, and a
// client's end counts once no instance can still end a request before it
// (Fleet::frontier).
//
// --burstiness B (vllm bench serve's): the gaps are gamma-distributed of
// shape B and the same mean (B < 1 burstier, B > 1 steadier). --ramp-up-strategy
// linear|exponential (vllm bench serve's): the rate of the i-th of the trace's
// N requests is start + (end - start) i / (N - 1), or start (end / start)^(i / (N - 1)).
// --random-range-ratio R: each request's prompt (one of no known content) and
// output drawn around the trace's lengths as the benchmark clients' random
// datasets do (RangeStyle), from a stream of their own seeded by --load-seed.
// --measure-after N: the first N requests are sent as any other and left out
// of the load figures: what a benchmark reports once its measurement is
// stable (genai-perf's --measurement-interval windows), with no pause.
//
// --warmup-requests N (AIPerf's and genai-perf's --warmup-request-count):
// the first N requests are sent by the same generator from time 0; then the
// generator waits until every one of them has ended, and the measured
// requests start at that moment, as a benchmark's profiling phase starts
// after its warm-up phase: the closed loop's clients all free then, the
// Poisson arrivals drawn on from then.
//
// The measurement window runs from the first measured request's arrival to
// the last measured request's end (vllm bench serve's benchmark duration).
// Throughput and the mean TTFT and TPOT count the measured requests only;
// the rest of the report covers the whole run.
class LoadGenerator {
 public:
  // Observes `sim`'s request ends (after any observer already attached,
  // which it keeps calling). `sim` must outlive this.
  LoadGenerator(const LoadOptions& options, Simulator& sim);
  // The same for a fleet's requests, as the user sent them.
  LoadGenerator(const LoadOptions& options, Fleet& fleet);

  // Sets `request.arrival` (unchanged without a load option), running the
  // simulation as far as a closed loop or the warm-up needs. False when a
  // check failed, or when the arrival would pass the 2^33 s a trace may use
  // (kMaxArrivalSeconds: a --request-rate far too low for the trace), which
  // error() then names: an input error (exit 2), not a failed check.
  bool set_arrival(Request& request);
  const std::optional<InputError>& error() const { return error_; }

  // The report's "load": the generator, the warm-up, the window and the
  // throughput and latency in it.
  nlohmann::json figures() const;
  // The summary's line of it.
  std::string summary_line() const;

 private:
  LoadGenerator(const LoadOptions& options, std::function<double()> frontier,
                std::function<bool(double)> run_until);
  // A request sent by this generator ended at `end` (finished, or given up on).
  void ended(const RequestTimes& times, double end);

  LoadOptions options_;
  // What the generator drives: the earliest time a request in flight can
  // still end (+inf when none is), and the simulation's run_until.
  std::function<double()> frontier_;
  std::function<bool(double)> run_until_;
  std::optional<InputError> error_;
  // The gap to the next open-loop arrival after the index_-th request (from 0).
  double gap();

  std::mt19937_64 random_;
  std::mt19937_64 lengths_;  // --random-range-ratio's draws, apart from the arrivals'
  std::uint64_t index_ = 0;  // requests sent
  std::uint64_t unmeasured_sent_ = 0;
  std::unordered_set<std::uint64_t> unmeasured_;  // lines of --measure-after's requests in flight
  double next_poisson_ = 0;
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at_;
  double last_arrival_ = 0;
  std::uint64_t warmup_sent_ = 0;
  bool measuring_ = false;  // the warm-up is over (at once without one)
  double warmup_end_ = 0;   // the last warm-up request's end
  // The window's figures: the measured requests'.
  std::uint64_t sent_ = 0;
  double first_arrival_ = 0;
  double last_end_ = 0;
  std::uint64_t finished_ = 0;
  std::uint64_t output_tokens_ = 0;
  double ttft_ms_sum_ = 0;
  double tpot_ms_sum_ = 0;
  std::uint64_t tpot_count_ = 0;
};

}  // namespace kvreplay
