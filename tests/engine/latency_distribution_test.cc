// LatencyDistribution (engine/latency.h): exact up to kExactValues values,
// then a histogram whose percentiles lie within kRelativeError of the exact
// ones, with count, mean and max exact, in memory that does not grow with
// the number of values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/latency.h"

using kvreplay::LatencyDistribution;
using kvreplay::quantile_sorted;
using kvreplay::summarize_latency;

namespace {

// Latency-like values: log-normal around 50 ms, a tenth of them exactly zero
// (requests scheduled on arrival), a few far out.
std::vector<double> sample_values(std::size_t n, std::uint32_t seed) {
  std::mt19937_64 random(seed);
  std::lognormal_distribution<double> lognormal(std::log(50.0), 1.2);
  std::vector<double> values;
  values.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 10 == 3) {
      values.push_back(0.0);
    } else if (i % 9973 == 0) {
      values.push_back(1e6 + static_cast<double>(i));
    } else {
      values.push_back(lognormal(random));
    }
  }
  return values;
}

}  // namespace

TEST_CASE("latency distribution: exact up to the limit, the same figures as the sorted values") {
  const std::vector<double> values = sample_values(LatencyDistribution::kExactValues, 7);
  LatencyDistribution d;
  for (double v : values) d.add(v);
  REQUIRE(d.exact());
  const auto exact = summarize_latency(values);
  const auto summary = d.summary();
  CHECK(summary.exact);
  CHECK(summary.count == values.size());
  CHECK(summary.mean == exact.mean);
  CHECK(summary.p50 == exact.p50);
  CHECK(summary.p90 == exact.p90);
  CHECK(summary.p99 == exact.p99);
  CHECK(summary.max == exact.max);
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  CHECK(d.quantile(0.25) == quantile_sorted(sorted, 0.25));
}

TEST_CASE(
    "latency distribution: past the limit, percentiles within 0.1% and count, mean, max exact") {
  const std::size_t n = 4 * LatencyDistribution::kExactValues + 123;
  const std::vector<double> values = sample_values(n, 11);
  LatencyDistribution d;
  for (double v : values) d.add(v);
  REQUIRE_FALSE(d.exact());
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  const auto summary = d.summary();
  CHECK_FALSE(summary.exact);
  CHECK(summary.count == n);
  CHECK(summary.max == sorted.back());
  double sum = 0;
  for (double v : values) sum += v;
  CHECK(summary.mean == Approx(sum / static_cast<double>(n)).epsilon(1e-12));
  for (double q : {0.0, 0.05, 0.1, 0.11, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const double want = quantile_sorted(sorted, q);
    const double got = d.quantile(q);
    INFO("q = " << q << ": exact " << want << ", histogram " << got);
    CHECK(std::abs(got - want) <= LatencyDistribution::kRelativeError * want + 1e-9);
  }
  CHECK(d.quantile(0.0) == sorted.front());
  CHECK(d.quantile(1.0) == sorted.back());
}

TEST_CASE("latency distribution: the same values in another order give the same figures") {
  std::vector<double> values = sample_values(3 * LatencyDistribution::kExactValues, 5);
  LatencyDistribution forward;
  for (double v : values) forward.add(v);
  std::reverse(values.begin(), values.end());
  LatencyDistribution backward;
  for (double v : values) backward.add(v);
  for (double q : {0.5, 0.9, 0.99}) CHECK(forward.quantile(q) == backward.quantile(q));
}

TEST_CASE("latency distribution: values falling below the first bucket, and all zeros") {
  LatencyDistribution falling;
  double v = 1e4;
  for (std::size_t i = 0; i < 2 * LatencyDistribution::kExactValues; ++i) {
    falling.add(v);
    v *= 0.9999;  // creeps down across many buckets
  }
  CHECK_FALSE(falling.exact());
  CHECK(falling.quantile(1.0) == 1e4);
  CHECK(falling.quantile(0.5) > 0);
  LatencyDistribution zeros;
  for (std::size_t i = 0; i < 2 * LatencyDistribution::kExactValues; ++i) zeros.add(0.0);
  CHECK(zeros.quantile(0.99) == 0.0);
  CHECK(zeros.summary().max == 0.0);
  LatencyDistribution empty;
  CHECK(empty.quantile(0.5) == 0.0);
  CHECK(empty.summary().count == 0);
}

TEST_CASE("latency distribution: a value added n times at once is n values added one by one") {
  // Across the switch to the histogram: 70,000 values in runs of 7 and one by one.
  LatencyDistribution runs;
  LatencyDistribution ones;
  const std::vector<double> values = sample_values(10000, 11);
  for (double v : values) {
    runs.add(v, 7);
    for (int i = 0; i < 7; ++i) ones.add(v);
  }
  runs.add(3.0, 0);  // nothing
  REQUIRE(runs.count() == 70000);
  CHECK_FALSE(runs.exact());
  const auto a = runs.summary();
  const auto b = ones.summary();
  CHECK(a.count == b.count);
  CHECK(a.p50 == b.p50);
  CHECK(a.p99 == b.p99);
  CHECK(a.max == b.max);
  CHECK(a.mean == Approx(b.mean).epsilon(1e-12));
  // Exact mode: the very figures.
  LatencyDistribution small_runs;
  LatencyDistribution small_ones;
  for (double v : {5.0, 1.0, 9.0}) {
    small_runs.add(v, 3);
    for (int i = 0; i < 3; ++i) small_ones.add(v);
  }
  CHECK(small_runs.exact());
  CHECK(small_runs.summary().p90 == small_ones.summary().p90);
  CHECK(small_runs.summary().mean == small_ones.summary().mean);
}

TEST_CASE("latency distribution: percentiles asked for beyond the four, and at()") {
  LatencyDistribution d;
  for (int i = 1; i <= 1000; ++i) d.add(i);
  const std::vector<double> extra = {99.9, 75};
  const auto s = d.summary(extra);
  REQUIRE(s.extra.size() == 2);
  CHECK(s.extra[0].first == 99.9);
  CHECK(s.extra[0].second == Approx(quantile_sorted(std::vector<double>{}, 0) + 999.001));
  CHECK(s.extra[1].second == Approx(750.25));
  CHECK(*s.at(99.9) == s.extra[0].second);
  CHECK(*s.at(95) == s.p95);
  CHECK(*s.at(100) == 1000);
  CHECK_FALSE(s.at(42).has_value());  // not asked for
}
