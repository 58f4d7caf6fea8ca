// SimFigures::merge: each rule on two instances' figures worked by hand.
#include <catch2/catch.hpp>

#include "engine/sim_figures.h"

namespace kvreplay {
namespace {

// Two instances: a busy one with a warm cache, a slower one with a cold cache.
SimFigures instance_a() {
  SimFigures f;
  f.instances = 1;
  f.requests = 10;
  f.finished = 8;
  f.query_tokens = 100;
  f.hit_tokens = 90;  // hit rate 0.9
  f.hit_rate_sum = 1.5;
  f.hit_rate_requests = 2;  // per request 0.75
  f.peak_used = 5;
  f.mean_in_use = 2.5;
  f.waste_ratio_mean = MeanOverInstances::of(0.2);
  f.waste_ratio_max = 0.2;
  f.virtual_seconds = 10.0;
  f.output_tokens = 100;  // 10 tokens/s
  f.oom_first_event = 7;
  f.has_arrivals = true;
  f.first_arrival = 1.0;
  f.last_arrival = 4.0;
  f.end = 10.0;
  f.ttft_ms = LatencyFigures::of(LatencySummary{2, 10.0, 10.0, 11.0, 12.0, 12.0, true, 0.0, {}});
  f.violations.push_back({Violation{3, 4, "I1", "a"}, 0});
  f.offload = true;
  f.offload_policy = "lru";
  f.offload_block_bytes = 4096;
  f.tiers.push_back({});
  f.tiers[0].medium = "cpu";
  f.tiers[0].gbps = 32.0;
  f.tiers[0].stored = 6;
  f.tier_hit_tokens = {5};
  return f;
}

SimFigures instance_b() {
  SimFigures f;
  f.instances = 1;
  f.requests = 20;
  f.finished = 20;
  f.query_tokens = 300;
  f.hit_tokens = 30;  // hit rate 0.1
  f.hit_rate_sum = 0.5;
  f.hit_rate_requests = 3;  // per request 1/6
  f.peak_used = 7;
  f.mean_in_use = 1.5;
  f.waste_ratio_mean = MeanOverInstances::of(0.4);
  f.waste_ratio_max = 0.7;
  f.virtual_seconds = 25.0;
  f.output_tokens = 500;  // 20 tokens/s
  f.oom_first_event = 3;
  f.has_arrivals = true;
  f.first_arrival = 0.5;
  f.last_arrival = 3.0;
  f.end = 25.0;
  f.ttft_ms = LatencyFigures::of(LatencySummary{6, 2.0, 2.0, 4.0, 5.0, 20.0, false, 0.0, {}});
  f.violations.push_back({Violation{0, 0, "I2", "b"}, 1});
  f.offload = true;
  f.offload_policy = "arc";  // not a real fleet's: shows whose a kSame keeps
  f.offload_block_bytes = 8192;
  f.tiers.push_back({});
  f.tiers[0].medium = "cpu";
  f.tiers[0].gbps = 64.0;
  f.tiers[0].stored = 4;
  f.tier_hit_tokens = {15};
  return f;
}

SimFigures merged() {
  SimFigures total;
  total.merge(instance_a());
  total.merge(instance_b());
  return total;
}

TEST_CASE("merge: sums add counts, peaks and per-instance means") {
  const SimFigures f = merged();
  CHECK(f.instances == 2);
  CHECK(f.requests == 30);
  CHECK(f.finished == 28);
  CHECK(f.peak_used == 12);
  CHECK(f.mean_in_use == 4.0);
  CHECK(f.tiers[0].stored == 10);
  CHECK(f.tier_hit_tokens == std::vector<std::uint64_t>{20});
}

TEST_CASE("merge: ratios are recomputed from summed parts, not averaged") {
  const SimFigures f = merged();
  // 120 / 400, where the mean of 0.9 and 0.1 would be 0.5.
  CHECK(f.hit_rate() == Approx(0.3));
  CHECK(f.hit_rate() != Approx((0.9 + 0.1) / 2));
  // 2.0 / 5, where the mean of 0.75 and 1/6 would be 0.4583.
  CHECK(f.hit_rate_per_request() == Approx(0.4));
  // (120 + 20) / 400.
  CHECK(f.hit_rate_with_tiers() == Approx(0.35));
  // 600 tokens over the latest clock, 25 s: 24/s, where the mean is 15/s.
  CHECK(f.output_tokens_per_second() == Approx(24.0));
  CHECK(f.requests_per_second() == Approx(28.0 / 25.0));
}

TEST_CASE("merge: max and min take the extremes") {
  const SimFigures f = merged();
  CHECK(f.virtual_seconds == 25.0);
  CHECK(f.waste_ratio_max == 0.7);
  CHECK(f.end == 25.0);
  CHECK(f.last_arrival == 4.0);
  CHECK(f.first_arrival == 0.5);
  REQUIRE(f.oom_first_event);
  CHECK(*f.oom_first_event == 3);
}

TEST_CASE("merge: min and max skip instances without a value") {
  SimFigures b = instance_b();
  b.oom_first_event.reset();
  b.has_arrivals = false;  // an instance given no request: its 0.0 is no arrival
  b.first_arrival = 0.0;
  SimFigures total;
  total.merge(instance_a());
  total.merge(b);
  REQUIRE(total.oom_first_event);
  CHECK(*total.oom_first_event == 7);
  CHECK(total.first_arrival == 1.0);
  CHECK(total.has_arrivals);  // kAny
}

TEST_CASE("merge: a mean over instances is their values' plain mean") {
  CHECK(merged().waste_ratio_mean.value() == Approx(0.3));
  CHECK(instance_a().waste_ratio_mean.value() == 0.2);
}

TEST_CASE("merge: a setting is the first instance's") {
  const SimFigures f = merged();
  CHECK(f.offload);
  CHECK(f.offload_policy == "lru");
  CHECK(f.offload_block_bytes == 4096);
  CHECK(f.tiers[0].medium == "cpu");
  CHECK(f.tiers[0].gbps == 32.0);
}

TEST_CASE("merge: a latency's count sums, its mean is weighted, its quantiles bound") {
  const LatencyFigures& l = merged().ttft_ms;
  CHECK(l.count == 8);
  // (2 x 10 + 6 x 2) / 8 = 4, where the mean of the means is 6.
  CHECK(l.mean == Approx(4.0));
  CHECK(l.p50 == 10.0);
  CHECK(l.p90 == 11.0);
  CHECK(l.p99 == 12.0);
  CHECK(l.max == 20.0);
  CHECK_FALSE(l.exact);
}

TEST_CASE("merge: lists are concatenated in instance order") {
  const SimFigures f = merged();
  REQUIRE(f.violations.size() == 2);
  CHECK(f.violations[0].violation.message == "a");
  CHECK(*f.violations[0].instance == 0);
  CHECK(f.violations[1].violation.invariant == "I2");
  CHECK(*f.violations[1].instance == 1);
}

TEST_CASE("merge: the default value is the identity") {
  SimFigures one;
  one.merge(instance_a());
  const SimFigures a = instance_a();
  CHECK(one.instances == 1);
  CHECK(one.hit_rate() == a.hit_rate());
  CHECK(one.waste_ratio_mean.value() == a.waste_ratio_mean.value());
  CHECK(one.ttft_ms.mean == a.ttft_ms.mean);
  CHECK(one.first_arrival == a.first_arrival);
  CHECK(one.tiers.size() == 1);
  CHECK(to_string(Merge::kRatioOfSums) == "ratio of sums");
}

}  // namespace
}  // namespace kvreplay
