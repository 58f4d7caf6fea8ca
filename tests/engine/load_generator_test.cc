// The load generators as the benchmark clients send load (SPEC 3.5), and the
// server's intake of each request (roofline.h: request_overhead_ms): vllm
// bench serve's gamma gaps (--burstiness) and rate ramps (--ramp-up-strategy),
// the random datasets' length spread (--random-range-ratio, vLLM's and
// SGLang's), --measure-after's unmeasured requests, and requests taken in one
// taken in before the engine sees them.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/load_generator.h"
#include "engine/micro_config.h"
#include "engine/simulator.h"
#include "model/cost_profile.h"
#include "model/presets.h"

namespace kvreplay {
namespace {

SimOptions linear_options() {
  SimOptions options;
  options.engine = EngineKind::kVllm;
  options.watermark = 0.0;
  options.cost.kind = CostKind::kLinear;
  options.cost.linear = LinearCost{10.0, 0.0, 0.0, 1e9};
  return options;
}

Request plain(std::uint64_t line, std::uint32_t prompt = 8, std::uint32_t output = 4) {
  Request r;
  r.line = line;
  r.id = std::to_string(line);
  r.prompt = prompt;
  r.output = output;
  return r;
}

// The arrivals an open-loop generator gives `n` requests.
std::vector<double> arrivals(const LoadOptions& load, std::size_t n) {
  Simulator sim(micro_config(4096), linear_options());
  LoadGenerator generator(load, sim);
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    Request r = plain(i + 1);
    REQUIRE(generator.set_arrival(r));
    out.push_back(r.arrival);
  }
  return out;
}

// The mean and coefficient of variation of the gaps.
std::pair<double, double> gap_stats(const std::vector<double>& at) {
  double sum = 0, sq = 0;
  const double n = static_cast<double>(at.size() - 1);
  for (std::size_t i = 1; i < at.size(); ++i) sum += at[i] - at[i - 1];
  const double mean = sum / n;
  for (std::size_t i = 1; i < at.size(); ++i) sq += std::pow(at[i] - at[i - 1] - mean, 2);
  return {mean, std::sqrt(sq / n) / mean};
}

TEST_CASE("load: --burstiness draws gamma gaps of the rate's mean, burstier below 1") {
  LoadOptions load;
  load.request_rate = 10;
  load.seed = 3;
  const auto poisson = gap_stats(arrivals(load, 20001));
  CHECK(poisson.first == Approx(0.1).epsilon(0.03));
  CHECK(poisson.second == Approx(1.0).epsilon(0.05));  // exponential: CV 1
  load.burstiness = 0.25;
  const auto bursty = gap_stats(arrivals(load, 20001));
  CHECK(bursty.first == Approx(0.1).epsilon(0.05));
  CHECK(bursty.second == Approx(2.0).epsilon(0.08));  // gamma of shape k: CV 1 / sqrt(k)
  load.burstiness = 4;
  const auto steady = gap_stats(arrivals(load, 20001));
  CHECK(steady.first == Approx(0.1).epsilon(0.03));
  CHECK(steady.second == Approx(0.5).epsilon(0.05));
  // The same seed, the same arrivals; burstiness 1 is exactly the Poisson draws.
  load.burstiness = 1;
  load.seed = 3;
  CHECK(arrivals(load, 50) == arrivals(load, 50));
}

TEST_CASE("load: a linear ramp climbs from the start rate to the end rate over the requests") {
  LoadOptions load;
  load.ramp_up = RampUp::kLinear;
  load.ramp_start_rps = 1;
  load.ramp_end_rps = 9;
  load.ramp_requests = 101;
  load.burstiness = 1000;  // gaps within a few % of their mean: the rate shows through
  const auto at = arrivals(load, 101);
  CHECK(at.front() == 0);
  // The gap after request i (from 0) has the rate 1 + 8 i / 100.
  for (int i : {0, 25, 50, 99}) {
    const auto k = static_cast<std::size_t>(i);
    CHECK(at[k + 1] - at[k] == Approx(1.0 / (1 + 8.0 * i / 100)).epsilon(0.12));
  }
  load.ramp_up = RampUp::kExponential;
  const auto exp = arrivals(load, 101);
  // Exponential: 1 * 9^(i / 100): at the middle 3 requests a second.
  CHECK(exp[51] - exp[50] == Approx(1.0 / 3).epsilon(0.12));
}

TEST_CASE("load: --random-range-ratio spreads lengths as vLLM's and SGLang's random datasets") {
  LoadOptions load;
  load.concurrency = 4096;  // every request sent at once: set_arrival never waits
  load.range_ratio = 0.5;
  auto lengths = [&](RangeStyle style) {
    load.range_style = style;
    Simulator sim(micro_config(65536, 4096), linear_options());
    LoadGenerator generator(load, sim);
    std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
    for (std::uint64_t i = 1; i <= 2000; ++i) {
      Request r = plain(i, 200, 100);
      REQUIRE(generator.set_arrival(r));
      out.emplace_back(r.prompt, r.output);
    }
    return out;
  };
  double in_sum = 0;
  for (auto [in, out] : lengths(RangeStyle::kVllm)) {
    CHECK((in >= 100 && in <= 300));  // [200 (1 - 0.5), 200 (1 + 0.5)]
    CHECK((out >= 50 && out <= 150));
    in_sum += in;
  }
  CHECK(in_sum / 2000 == Approx(200).epsilon(0.03));
  in_sum = 0;
  for (auto [in, out] : lengths(RangeStyle::kSglang)) {
    CHECK((in >= 100 && in <= 200));  // [200 * 0.5, 200]
    CHECK((out >= 50 && out <= 100));
    in_sum += in;
  }
  CHECK(in_sum / 2000 == Approx(150).epsilon(0.03));
  // A prompt of known content keeps its length; its output still varies.
  Simulator sim(micro_config(4096), linear_options());
  load.range_style = RangeStyle::kVllm;
  LoadGenerator generator(load, sim);
  bool output_moved = false;
  for (std::uint64_t i = 1; i <= 20; ++i) {
    Request r = hashed(std::to_string(i), 8, 40, {1, 2}, 0);
    r.line = i;
    REQUIRE(generator.set_arrival(r));
    CHECK(r.prompt == 8);
    output_moved = output_moved || r.output != 40;
  }
  CHECK(output_moved);
}

TEST_CASE("load: --measure-after leaves the first requests out of the figures, without a pause") {
  auto figures = [](std::uint64_t after) {
    LoadOptions load;
    load.concurrency = 2;
    load.measure_after = after;
    Simulator sim(micro_config(4096), linear_options());
    LoadGenerator generator(load, sim);
    std::vector<double> sent;
    for (std::uint64_t i = 1; i <= 10; ++i) {
      Request r = plain(i);
      REQUIRE(generator.set_arrival(r));
      sent.push_back(r.arrival);
      REQUIRE(sim.run_until(r.arrival));
      sim.submit(std::move(r));
    }
    REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
    return std::make_pair(generator.figures(), sent);
  };
  const auto [all, all_sent] = figures(0);
  const auto [steady, steady_sent] = figures(4);
  CHECK(all["sent"] == 10);
  CHECK(steady["sent"] == 6);
  CHECK(steady["finished"] == 6);
  CHECK(steady["measure_after"] == 4);
  // The clients never paused: the same arrivals either way.
  CHECK(all_sent == steady_sent);
  CHECK(steady["window_start_s"].get<double>() == Approx(steady_sent[4]));
}

// A Llama-3.1-8B run on an H100 under the roofline with only
// request_overhead_ms set (the built-in constants otherwise).
SimOptions intake_options(double overhead_ms) {
  SimOptions options = linear_options();
  options.cost.kind = CostKind::kRoofline;
  options.cost.profile = std::make_shared<const CostProfile>();
  options.cost.given.request_overhead_ms = overhead_ms;
  const auto& infos = roofline_constant_infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (std::string_view(infos[i].name) == "request_overhead_ms") options.cost.given_mask = 1u << i;
  }
  return options;
}

std::vector<RequestTimes> run_burst(double overhead_ms, std::size_t n, bool from_client = true) {
  RunConfig config = micro_config(65536);
  config.kv.page_tokens = 16;
  config.model_spec = find_model_preset("llama-3.1-8b")->spec;
  config.gpu = "h100-80gb";
  Simulator sim(config, intake_options(overhead_ms));
  REQUIRE(sim.roofline()->constants().request_overhead_ms == overhead_ms);
  std::vector<RequestTimes> done;
  sim.on_request = [&done](const RequestTimes& t) { done.push_back(t); };
  for (std::size_t i = 0; i < n; ++i) sim.submit(plain(i + 1, 16, 2), from_client);
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  return done;
}

TEST_CASE("intake: the engine sees a client's request once the server has taken it in") {
  const auto none = run_burst(0, 1);
  const auto one = run_burst(20, 1);
  REQUIRE(one.size() == 1);
  // 20 ms in the server, then the same step: the TTFT grows by 20 ms.
  CHECK(one[0].arrival == 0);
  CHECK(one[0].ttft_ms() == Approx(none[0].ttft_ms() + 20).epsilon(1e-9));
  // Three at once: each is taken in side by side, seen at 20 ms, none scheduled before.
  const auto three = run_burst(20, 3);
  REQUIRE(three.size() == 3);
  for (const RequestTimes& t : three) CHECK(t.scheduled == Approx(0.020));
  // A request handed over by another instance is in already.
  const auto handed = run_burst(20, 1, false);
  CHECK(handed[0].ttft_ms() == Approx(none[0].ttft_ms()).epsilon(1e-9));
}

}  // namespace
}  // namespace kvreplay
