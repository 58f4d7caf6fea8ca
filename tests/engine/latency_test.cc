// Request latency (SPEC 3.3) on schedules worked by hand: queueing delay, TTFT,
// TPOT and end-to-end per request, their percentiles, SLO attainment, the
// per-request records (--requests), the roofline driving virtual time, and
// the overload figures. The linear cost model with only a fixed 10 ms a step
// makes every time a multiple of 10 ms.
#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "engine/micro_config.h"
#include "engine/simulator.h"
#include "model/presets.h"

namespace kvreplay {
namespace {

SimOptions options_of(EngineKind engine) {
  SimOptions options;
  options.engine = engine;
  options.watermark = 0.0;
  options.max_seqs = 1;  // one request at a time: the second waits for the first
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  options.cost.kind = CostKind::kLinear;
  options.cost.linear = LinearCost{10.0, 0.0, 0.0, 1e9};  // 10 ms a step, nothing else
  return options;
}

Request request(std::string id, std::uint32_t prompt, std::uint32_t output, double arrival,
                std::uint64_t line) {
  Request r;
  r.id = std::move(id);
  r.prompt = prompt;
  r.output = output;
  r.arrival = arrival;
  r.line = line;
  return r;
}

std::vector<RequestTimes> run(Simulator& sim, std::vector<Request> requests) {
  std::vector<RequestTimes> done;
  sim.on_request = [&done](const RequestTimes& t) { done.push_back(t); };
  for (Request& r : requests) {
    REQUIRE(sim.run_until(r.arrival));
    sim.submit(std::move(r));
  }
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.finish());
  REQUIRE_FALSE(sim.violation());
  return done;
}

TEST_CASE("latency: queueing, TTFT, TPOT and end-to-end of a schedule worked by hand") {
  // A (prompt 8, 3 tokens) arrives at 0 and runs alone: its prefill step ends at
  // 10 ms with the first token, two decodes at 20 and 30 ms. B (prompt 8, 2
  // tokens) arrives at 5 ms and waits (--max-seqs 1) until A is freed at the end
  // of the step ending at 30 ms: scheduled at 30, first token at 40, last at 50.
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    INFO(to_string(engine));
    SimOptions options = options_of(engine);
    options.slo.ttft_ms = 20;
    Simulator sim(micro_config(16), options);
    const auto done = run(sim, {request("A", 8, 3, 0.0, 1), request("B", 8, 2, 0.005, 2)});
    REQUIRE(done.size() == 2);
    const RequestTimes& a = done[0];
    const RequestTimes& b = done[1];
    CHECK(a.id == "A");
    CHECK(a.line == 1);
    CHECK(a.queue_ms() == Approx(0.0).margin(1e-9));
    CHECK(a.ttft_ms() == Approx(10.0));
    CHECK(*a.tpot_ms() == Approx(10.0));  // (30 - 10) / (3 - 1)
    CHECK(a.e2e_ms() == Approx(30.0));
    CHECK(b.id == "B");
    if (engine == EngineKind::kVllm) {
      // vLLM frees A at the end of its last step; B is scheduled in the next.
      CHECK(b.queue_ms() == Approx(25.0));
      CHECK(b.ttft_ms() == Approx(35.0));
      CHECK(*b.tpot_ms() == Approx(10.0));
      CHECK(b.e2e_ms() == Approx(45.0));
    } else {
      // The generic engine frees A inside the step ending at 30 ms and admits B
      // in it: B's prefill shares that step.
      CHECK(b.queue_ms() == Approx(15.0));
      CHECK(b.ttft_ms() == Approx(25.0));
      CHECK(b.e2e_ms() == Approx(35.0));
    }
    CHECK(sim.latencies().ttft_ms.count() == 2);
    const LatencySummary ttft = sim.latencies().ttft_ms.summary();
    CHECK(ttft.count == 2);
    CHECK(ttft.mean == Approx((a.ttft_ms() + b.ttft_ms()) / 2));
    CHECK(ttft.p50 == Approx((a.ttft_ms() + b.ttft_ms()) / 2));
    CHECK(ttft.p90 == Approx(a.ttft_ms() + 0.9 * (b.ttft_ms() - a.ttft_ms())));
    CHECK(ttft.max == Approx(b.ttft_ms()));
    CHECK(sim.slo_met() == 1);  // A within 20 ms, B not
  }
}

TEST_CASE("latency: one output token has no TPOT, and a skipped request is reported untimed") {
  SimOptions options = options_of(EngineKind::kVllm);
  options.slo.tpot_ms = 1;  // only a TPOT SLO: a request without one meets it
  Simulator sim(micro_config(16), options);
  const auto done =
      run(sim, {request("one", 8, 1, 0.0, 1), request("long", 300, 4, 0.0, 2)});  // 303 > 256
  REQUIRE(done.size() == 2);
  CHECK(done[0].id == "long");
  CHECK(done[0].skipped);
  CHECK(done[1].id == "one");
  CHECK_FALSE(done[1].tpot_ms());
  CHECK(done[1].ttft_ms() == Approx(10.0));
  CHECK(done[1].e2e_ms() == Approx(10.0));
  CHECK(sim.latencies().tpot_ms.empty());
  CHECK(sim.slo_met() == 1);
}

TEST_CASE("latency: n > 1 takes the first sample's first token and the last sample's end") {
  SimOptions options = options_of(EngineKind::kVllm);
  options.max_seqs = 4;
  Simulator sim(micro_config(32), options);
  Request r = request("fan", 8, 3, 0.0, 1);
  r.n = 2;
  const auto done = run(sim, {r});
  REQUIRE(done.size() == 1);  // one record for the request, not one per child
  CHECK(done[0].n == 2);
  // Both children prefill in the first step (16 tokens within the budget) and
  // decode together: first token at 10 ms, last at 30 ms.
  CHECK(done[0].ttft_ms() == Approx(10.0));
  CHECK(done[0].e2e_ms() == Approx(30.0));
}

TEST_CASE("latency: a preempted request keeps its first token and counts its preemption") {
  // Pool of 4 blocks (3 hold KV besides the null block), 4-token pages. A and
  // B each need 2 blocks at the end (prompt 4 + 4 outputs - 1 = 7 tokens); with
  // both running, the third block goes to whoever asks first and the other is
  // preempted.
  SimOptions options = options_of(EngineKind::kVllm);
  options.max_seqs = 2;
  Simulator sim(micro_config(4), options);
  const auto done = run(sim, {request("A", 4, 6, 0.0, 1), request("B", 4, 6, 0.0, 2)});
  REQUIRE(done.size() == 2);
  std::uint32_t preemptions = 0;
  for (const RequestTimes& t : done) {
    preemptions += t.preemptions;
    CHECK(t.ttft_ms() <= t.e2e_ms());
    CHECK(t.ttft_ms() == Approx(10.0));  // both prefill in the first step
  }
  CHECK(preemptions == sim.sim_totals().preemptions);
  CHECK(preemptions > 0);
}

TEST_CASE("latency: virtual time follows the roofline of the model and the GPU") {
  // One Llama-3.1-8B decode on an H100 is memory-bound: weights (less the input
  // table, looked up) / (3.35 TB/s * 0.8) + 0.5 ms under the built-in constants
  // (an empty profile); the 70B model's takes about 70 / 8 as long, an H200
  // 3.35 / 4.8 as long.
  auto tpot = [](const char* model, const char* gpu) {
    RunConfig config = micro_config(4096);
    config.kv.page_tokens = 16;
    config.model_spec = find_model_preset(model)->spec;
    config.gpu = gpu;
    SimOptions options = options_of(EngineKind::kVllm);
    options.cost.kind = CostKind::kAuto;
    options.cost.profile = std::make_shared<const CostProfile>();
    Simulator sim(config, options);
    REQUIRE(sim.cost_kind() == CostKind::kRoofline);
    REQUIRE(sim.roofline()->constants() == RooflineConstants{});
    const auto done = run(sim, {request("r", 16, 101, 0.0, 1)});
    REQUIRE(done.size() == 1);
    return *done[0].tpot_ms();
  };
  const double small = tpot("llama-3.1-8b", "h100-80gb");
  const ModelSpec& spec = find_model_preset("llama-3.1-8b")->spec;
  const double weights_ms =
      static_cast<double>(spec.weight_bytes - spec.input_embedding_bytes) / (3.35e12 * 0.8) * 1e3;
  CHECK(small == Approx(weights_ms + 0.5).epsilon(0.01));  // KV and FLOPs are a rounding error
  const double large = tpot("llama-3.1-70b", "h100-80gb");
  // The weights less the input tables: 70.55B - 1.05B against 8.03B - 0.525B.
  CHECK(large / small ==
        Approx((69.50 / 7.505 * weights_ms + 0.5) / (weights_ms + 0.5)).epsilon(0.02));
  CHECK(tpot("llama-3.1-8b", "h200") < small * 0.75);
}

TEST_CASE(
    "overload: a trace arriving faster than it is served says so, one that keeps up does not") {
  auto overload = [](double spacing) {
    SimOptions options = options_of(EngineKind::kVllm);
    Simulator sim(micro_config(64), options);
    std::vector<Request> requests;
    for (int i = 0; i < 200; ++i) {
      requests.push_back(
          request(std::to_string(i), 8, 4, i * spacing, static_cast<std::uint64_t>(i) + 1));
    }
    run(sim, requests);
    return sim.overload();
  };
  // One request at a time, 4 steps (40 ms) each: 200 requests take 8 s.
  const OverloadFigures fast = overload(0.01);  // 100 a second against 25 served
  CHECK(fast.ratio().value() == Approx(8.0 / 1.99).epsilon(0.01));
  CHECK(fast.waiting_at_last_arrival > 100);
  CHECK(fast.overloaded());
  const OverloadFigures slow = overload(0.05);  // 20 a second: the server keeps up
  CHECK(slow.ratio().value() < kOverloadRatio);
  CHECK_FALSE(slow.overloaded());
  // All at once: a batch, no ratio.
  const OverloadFigures batch = overload(0.0);
  CHECK_FALSE(batch.ratio());
  CHECK_FALSE(batch.overloaded());
}

TEST_CASE("latency: inter-token latency is every gap between a request's emissions") {
  // The schedule of the first case: A's tokens at 10, 20 and 30 ms, B's two
  // 10 ms apart; the joint rule's end-to-end limit (--goodput e2el) of 33 ms
  // takes A (30 ms) and not B (45 ms under vllm, 35 under generic).
  for (EngineKind engine : {EngineKind::kVllm, EngineKind::kGeneric}) {
    INFO(to_string(engine));
    SimOptions options = options_of(engine);
    options.slo.e2e_ms = 33;
    Simulator sim(micro_config(16), options);
    const auto done = run(sim, {request("A", 8, 3, 0.0, 1), request("B", 8, 2, 0.005, 2)});
    REQUIRE(done.size() == 2);
    const LatencySummary itl = sim.latencies().itl_ms.summary();
    CHECK(itl.count == 3);  // two gaps of A, one of B
    CHECK(itl.mean == Approx(10.0));
    CHECK(itl.max == Approx(10.0));
    CHECK(sim.slo_met() == 1);
  }
}

}  // namespace
}  // namespace kvreplay
