#include "app/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace kvreplay {

LoadGenerator::LoadGenerator(const LoadOptions& options, Simulator& sim)
    : options_(options), sim_(sim), random_(options.seed) {
  if (!options_.any()) return;
  for (std::uint32_t i = 0; options_.concurrency && i < *options_.concurrency; ++i) {
    free_at_.push(0.0);
  }
  std::function<void(const RequestTimes&)> previous = std::move(sim_.on_request_end);
  sim_.on_request_end = [this, previous = std::move(previous)](const RequestTimes& times) {
    if (previous) previous(times);
    // A skipped request ends when the engine gives up on it: now.
    const double end = times.skipped || times.finished < 0 ? sim_.now() : times.finished;
    last_end_ = std::max(last_end_, end);
    if (!times.skipped && times.finished >= 0) {
      ++finished_;
      output_tokens_ += std::uint64_t{times.output} * times.n;
    }
    if (options_.concurrency) free_at_.push(end);
  };
}

bool LoadGenerator::set_arrival(Request& request) {
  if (!options_.any()) return true;
  if (options_.request_rate) {
    request.arrival = next_poisson_;
    // Exponential gap: -ln(1 - U) / R, U uniform in [0, 1) from the top 53 bits.
    const double u = static_cast<double>(random_() >> 11) * 0x1.0p-53;
    next_poisson_ += -std::log1p(-u) / *options_.request_rate;
  } else {
    // Every client busy: run a step at a time until one ends. A request in
    // flight always ends (finished, or skipped when it can never fit).
    while (free_at_.empty()) {
      if (sim_.idle()) break;  // none in flight: cannot happen; never wait forever
      if (!sim_.run_until(std::nextafter(sim_.now(), std::numeric_limits<double>::infinity()))) {
        return false;
      }
    }
    double free = last_arrival_;
    if (!free_at_.empty()) {
      free = free_at_.top();
      free_at_.pop();
    }
    request.arrival = std::max(free, last_arrival_);
  }
  if (sent_++ == 0) first_arrival_ = request.arrival;
  last_arrival_ = request.arrival;
  return true;
}

nlohmann::json LoadGenerator::figures() const {
  const double window = std::max(0.0, last_end_ - first_arrival_);
  auto per_second = [window](double count) {
    return window > 0 ? nlohmann::json(count / window) : nlohmann::json(nullptr);
  };
  nlohmann::json out;
  if (options_.request_rate) {
    out["generator"] = "poisson";
    out["request_rate"] = *options_.request_rate;
    out["seed"] = options_.seed;
  } else {
    out["generator"] = "closed_loop";
    out["concurrency"] = *options_.concurrency;
  }
  out["sent"] = sent_;
  out["window_s"] = window;
  out["finished"] = finished_;
  out["output_tokens"] = output_tokens_;
  out["requests_per_second"] = per_second(static_cast<double>(finished_));
  out["output_tokens_per_second"] = per_second(static_cast<double>(output_tokens_));
  return out;
}

std::string LoadGenerator::summary_line() const {
  const nlohmann::json f = figures();
  const std::string generator =
      options_.request_rate
          ? fmt::format("Poisson at {} requests/s (seed {})", *options_.request_rate, options_.seed)
          : fmt::format("closed loop of {} clients", *options_.concurrency);
  if (f["requests_per_second"].is_null()) return fmt::format("load: {}\n", generator);
  return fmt::format("load: {}: {:.2f} requests/s, {:.1f} output tokens/s over {:.1f} s\n",
                     generator, f["requests_per_second"].get<double>(),
                     f["output_tokens_per_second"].get<double>(), f["window_s"].get<double>());
}

}  // namespace kvreplay
