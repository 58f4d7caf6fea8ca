#include "engine/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace kvreplay {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

}  // namespace

LoadGenerator::LoadGenerator(const LoadOptions& options, std::function<double()> frontier,
                             std::function<bool(double)> run_until)
    : options_(options),
      frontier_(std::move(frontier)),
      run_until_(std::move(run_until)),
      random_(options.seed),
      measuring_(options.warmup == 0) {
  for (std::uint32_t i = 0; options_.concurrency && i < *options_.concurrency; ++i) {
    free_at_.push(0.0);
  }
}

LoadGenerator::LoadGenerator(const LoadOptions& options, Simulator& sim)
    : LoadGenerator(
          options, [&sim] { return sim.idle() ? kNever : sim.next_change(); },
          [&sim](double horizon) { return sim.run_until(horizon); }) {
  if (!options_.any()) return;
  std::function<void(const RequestTimes&)> previous = std::move(sim.on_request_end);
  sim.on_request_end = [this, &sim, previous = std::move(previous)](const RequestTimes& times) {
    if (previous) previous(times);
    // A request given up on ends when the engine gives up on it: now, or its
    // arrival when refused as it is submitted to an idle engine.
    ended(times, times.skipped || times.finished < 0 ? std::max(sim.now(), times.arrival)
                                                     : times.finished);
  };
}

LoadGenerator::LoadGenerator(const LoadOptions& options, Fleet& fleet)
    : LoadGenerator(
          options, [&fleet] { return fleet.frontier(); },
          [&fleet](double horizon) { return fleet.run_until(horizon); }) {
  if (!options_.any()) return;
  std::function<void(const RequestTimes&, double)> previous = std::move(fleet.on_request_end);
  fleet.on_request_end = [this, previous = std::move(previous)](const RequestTimes& times,
                                                                double end) {
    if (previous) previous(times, end);
    ended(times, end);
  };
}

void LoadGenerator::ended(const RequestTimes& times, double end) {
  if (options_.concurrency) free_at_.push(end);
  if (!measuring_) {
    warmup_end_ = std::max(warmup_end_, end);
    return;
  }
  last_end_ = std::max(last_end_, end);
  if (times.skipped || times.finished < 0) return;
  ++finished_;
  output_tokens_ += std::uint64_t{times.output} * times.n;
  ttft_ms_sum_ += times.ttft_ms();
  if (auto tpot = times.tpot_ms()) {
    tpot_ms_sum_ += *tpot;
    ++tpot_count_;
  }
}

bool LoadGenerator::set_arrival(Request& request) {
  if (!options_.any()) return true;
  if (!measuring_ && warmup_sent_ == options_.warmup) {
    // The warm-up is sent: every request of it ends before the first
    // measured one is sent.
    if (!run_until_(kNever)) return false;
    measuring_ = true;
    warmup_end_ = std::max(warmup_end_, last_arrival_);
    free_at_ = {};
    for (std::uint32_t i = 0; options_.concurrency && i < *options_.concurrency; ++i) {
      free_at_.push(warmup_end_);
    }
    next_poisson_ = warmup_end_;
    last_arrival_ = warmup_end_;
  }
  if (options_.request_rate) {
    request.arrival = next_poisson_;
    // Exponential gap: -ln(1 - U) / R, U uniform in [0, 1) from the top 53 bits.
    const double u = static_cast<double>(random_() >> 11) * 0x1.0p-53;
    next_poisson_ += -std::log1p(-u) / *options_.request_rate;
  } else {
    // Run the earliest work a step at a time until a client is free, and no
    // request in flight can still end before it.
    for (;;) {
      const double frontier = frontier_();
      if (!free_at_.empty() && free_at_.top() <= frontier) break;
      if (frontier == kNever) break;  // none in flight: cannot happen; never wait forever
      if (!run_until_(std::nextafter(frontier, kNever))) return false;
    }
    double free = last_arrival_;
    if (!free_at_.empty()) {
      free = free_at_.top();
      free_at_.pop();
    }
    request.arrival = std::max(free, last_arrival_);
  }
  if (!(request.arrival <= kMaxArrivalSeconds)) {
    error_ = InputError{
        "command line", 0, options_.request_rate ? "--request-rate" : "--concurrency",
        fmt::format("request {} (line {}) would arrive at {:.6g} s, past the 2^33 s (about 272 "
                    "years) a trace may use{}",
                    request.id.substr(0, 40), request.line, request.arrival,
                    options_.request_rate ? ": give a higher rate" : "")};
    return false;
  }
  last_arrival_ = request.arrival;
  if (!measuring_) {
    ++warmup_sent_;
  } else if (sent_++ == 0) {
    first_arrival_ = request.arrival;
  }
  return true;
}

nlohmann::json LoadGenerator::figures() const {
  const double window = sent_ == 0 ? 0.0 : std::max(0.0, last_end_ - first_arrival_);
  auto per_second = [window](double count) {
    return window > 0 ? nlohmann::json(count / window) : nlohmann::json(nullptr);
  };
  auto mean = [](double sum, std::uint64_t count) {
    return count > 0 ? nlohmann::json(sum / static_cast<double>(count)) : nlohmann::json(nullptr);
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
  out["warmup"] = {{"requests", warmup_sent_}, {"end_s", warmup_end_}};
  out["sent"] = sent_;
  out["window_start_s"] = sent_ == 0 ? warmup_end_ : first_arrival_;
  out["window_s"] = window;
  out["finished"] = finished_;
  out["output_tokens"] = output_tokens_;
  out["requests_per_second"] = per_second(static_cast<double>(finished_));
  out["output_tokens_per_second"] = per_second(static_cast<double>(output_tokens_));
  out["ttft_ms_mean"] = mean(ttft_ms_sum_, finished_);
  out["tpot_ms_mean"] = mean(tpot_ms_sum_, tpot_count_);
  return out;
}

std::string LoadGenerator::summary_line() const {
  const nlohmann::json f = figures();
  std::string generator =
      options_.request_rate
          ? fmt::format("Poisson at {} requests/s (seed {})", *options_.request_rate, options_.seed)
          : fmt::format("closed loop of {} clients", *options_.concurrency);
  if (warmup_sent_ > 0) {
    generator += fmt::format(" after {} warm-up requests (to {:.1f} s)", warmup_sent_, warmup_end_);
  }
  if (sent_ == 0 && warmup_sent_ > 0) {
    return fmt::format(
        "load: {}: every request was a warm-up; none measured (lower "
        "--warmup-requests)\n",
        generator);
  }
  if (f["requests_per_second"].is_null()) {
    return fmt::format("load: {}: no measured request finished\n", generator);
  }
  return fmt::format("load: {}: {:.2f} requests/s, {:.1f} output tokens/s over {:.1f} s\n",
                     generator, f["requests_per_second"].get<double>(),
                     f["output_tokens_per_second"].get<double>(), f["window_s"].get<double>());
}

}  // namespace kvreplay
