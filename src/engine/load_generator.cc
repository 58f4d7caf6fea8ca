#include "engine/load_generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace kvreplay {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// Uniform in [0, 1) from the top 53 bits: the same on every platform.
double uniform01(std::mt19937_64& random) {
  return static_cast<double>(random() >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller (one of the pair), from uniform01.
double normal(std::mt19937_64& random) {
  const double u = 1.0 - uniform01(random);  // (0, 1]
  const double v = uniform01(random);
  return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
}

// Gamma(shape, 1) by Marsaglia and Tsang's squeeze (shape < 1: boosted by
// U^(1/shape)), from uniform01 and normal: libstdc++'s and libc++'s
// gamma_distribution draw differently, and a report must not.
double gamma(std::mt19937_64& random, double shape) {
  if (shape < 1.0) {
    const double boost = std::pow(1.0 - uniform01(random), 1.0 / shape);
    return gamma(random, shape + 1.0) * boost;
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = 0, v = 0;
    do {
      x = normal(random);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - uniform01(random);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

// A length drawn around `length` as the benchmark clients' random datasets
// draw it (RangeStyle); at least 1.
std::uint32_t spread(std::mt19937_64& random, std::uint32_t length, double ratio,
                     RangeStyle style) {
  const double l = length;
  const double lo = style == RangeStyle::kVllm ? std::floor(l * (1 - ratio))
                                               : std::max(std::floor(l * ratio), 1.0);
  const double hi = style == RangeStyle::kVllm ? std::ceil(l * (1 + ratio)) : l;
  const double drawn = std::floor(lo + uniform01(random) * (hi - lo + 1));
  return static_cast<std::uint32_t>(std::clamp(drawn, 1.0, 4294967295.0));
}

}  // namespace

LoadGenerator::LoadGenerator(const LoadOptions& options, std::function<double()> frontier,
                             std::function<bool(double)> run_until)
    : options_(options),
      frontier_(std::move(frontier)),
      run_until_(std::move(run_until)),
      random_(options.seed),
      lengths_(options.seed ^ 0x6c656e6774687321ull),
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
  if (auto it = unmeasured_.find(times.line); it != unmeasured_.end()) {
    unmeasured_.erase(it);
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
  if (!options_.any()) {
    if (options_.time_scale != 1.0) request.arrival /= options_.time_scale;
    if (!(request.arrival <= kMaxArrivalSeconds)) {
      error_ = InputError{"command line", 0, "--time-scale",
                          fmt::format("request {} (line {}) would arrive at {:.6g} s, past the "
                                      "2^33 s (about 272 years) a trace may use",
                                      request.id.substr(0, 40), request.line, request.arrival)};
      return false;
    }
    return true;
  }
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
  if (options_.range_ratio) {
    // A prompt of known content (hash ids, a named prefix) keeps its length.
    if (request.hash_ids.empty() && request.prefix.empty()) {
      request.prompt =
          spread(lengths_, request.prompt, *options_.range_ratio, options_.range_style);
    }
    request.output = spread(lengths_, request.output, *options_.range_ratio, options_.range_style);
  }
  if (options_.request_rate || options_.ramp_up != RampUp::kNone) {
    request.arrival = next_poisson_;
    next_poisson_ += gap();
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
  ++index_;
  if (!measuring_) {
    ++warmup_sent_;
  } else if (unmeasured_sent_ < options_.measure_after) {
    ++unmeasured_sent_;
    unmeasured_.insert(request.line);
  } else if (sent_++ == 0) {
    first_arrival_ = request.arrival;
  }
  return true;
}

double LoadGenerator::gap() {
  // vllm bench serve's get_request: the rate of this request's index
  // (ramped, or --request-rate), and a gamma gap of shape --burstiness and
  // mean 1 / rate (shape 1: exponential, drawn as -ln(1 - U) / rate).
  double rate = options_.request_rate.value_or(0.0);
  if (options_.ramp_up != RampUp::kNone) {
    const double progress =
        static_cast<double>(index_) /
        static_cast<double>(std::max<std::uint64_t>(options_.ramp_requests, 2) - 1);
    const double from = options_.ramp_start_rps, to = options_.ramp_end_rps;
    rate = options_.ramp_up == RampUp::kLinear ? from + (to - from) * progress
                                               : from * std::pow(to / from, progress);
  }
  if (!(rate > 0)) return 0.0;  // a ramp from 0 rps: vLLM sends at once
  if (options_.burstiness == 1.0) return -std::log1p(-uniform01(random_)) / rate;
  return gamma(random_, options_.burstiness) / (rate * options_.burstiness);
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
  if (options_.request_rate || options_.ramp_up != RampUp::kNone) {
    out["generator"] = options_.burstiness == 1.0 ? "poisson" : "gamma";
    if (options_.request_rate) out["request_rate"] = *options_.request_rate;
    if (options_.burstiness != 1.0) out["burstiness"] = options_.burstiness;
    if (options_.ramp_up != RampUp::kNone) {
      out["ramp_up"] = {
          {"strategy", options_.ramp_up == RampUp::kLinear ? "linear" : "exponential"},
          {"start_rps", options_.ramp_start_rps},
          {"end_rps", options_.ramp_end_rps},
          {"requests", options_.ramp_requests}};
    }
    out["seed"] = options_.seed;
  } else {
    out["generator"] = "closed_loop";
    out["concurrency"] = *options_.concurrency;
  }
  out["warmup"] = {{"requests", warmup_sent_}, {"end_s", warmup_end_}};
  if (options_.measure_after > 0) out["measure_after"] = options_.measure_after;
  if (options_.range_ratio) {
    out["random_range_ratio"] = {
        {"ratio", *options_.range_ratio},
        {"style", options_.range_style == RangeStyle::kVllm ? "vllm" : "sglang"}};
  }
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
  std::string generator;
  if (options_.ramp_up != RampUp::kNone) {
    generator = fmt::format("{} ramp from {} to {} requests/s (seed {})",
                            options_.ramp_up == RampUp::kLinear ? "linear" : "exponential",
                            options_.ramp_start_rps, options_.ramp_end_rps, options_.seed);
  } else if (options_.request_rate) {
    generator = fmt::format("{} at {} requests/s (seed {})",
                            options_.burstiness == 1.0
                                ? std::string("Poisson")
                                : fmt::format("gamma (burstiness {})", options_.burstiness),
                            *options_.request_rate, options_.seed);
  } else {
    generator = fmt::format("closed loop of {} clients", *options_.concurrency);
  }
  if (options_.measure_after > 0) {
    generator += fmt::format(", the first {} requests not measured", options_.measure_after);
  }
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
