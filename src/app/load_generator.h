// The load generators of `simulate` (SPEC 3.5): the arrival of each request
// the trace gives, in its order, when --request-rate or --concurrency
// replaces the trace's own times; and the throughput over the measurement
// window.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "engine/simulator.h"

namespace kvreplay {

// Measurement window: from the first request's arrival to the last one's end
// (vllm bench serve's benchmark duration); no warm-up is left out.
//
// --request-rate R: arrivals at 0, then exponential gaps of mean 1/R drawn
// from a 64-bit Mersenne Twister seeded by --load-seed (the uniform is the
// top 53 bits, so the times are the same on every platform).
//
// --concurrency C: C clients, each free at time 0. A request is sent by the
// client that becomes free first, when it does: at the end of that client's
// previous request (its last token, or the step that skipped it). When every
// client is busy, the simulation runs one step at a time until one is free.
class LoadGenerator {
 public:
  // Observes `sim`'s request ends (after any observer already attached, which
  // it keeps calling). `sim` must outlive this.
  LoadGenerator(const LoadOptions& options, Simulator& sim);

  // Sets `request.arrival` (unchanged without a load option), running the
  // simulation as far as a closed loop needs. False when a check failed.
  bool set_arrival(Request& request);

  // The report's "load": the generator, the window and the throughput in it.
  nlohmann::json figures() const;
  // The summary's line of it.
  std::string summary_line() const;

 private:
  LoadOptions options_;
  Simulator& sim_;
  std::mt19937_64 random_;
  double next_poisson_ = 0;
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at_;
  double last_arrival_ = 0;
  // The window's figures.
  std::uint64_t sent_ = 0;
  double first_arrival_ = 0;
  double last_end_ = 0;
  std::uint64_t finished_ = 0;
  std::uint64_t output_tokens_ = 0;
};

}  // namespace kvreplay
