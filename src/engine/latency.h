// LatencyDistribution: the values of one latency (TTFT, TPOT, ...) over a
// run's finished requests, in memory bounded whatever the trace's length.
//
// Up to kExactValues values are kept as they are, and the percentiles are
// exact (linear interpolation between order statistics, numpy's default).
// Past that, the values move into a histogram of logarithmic buckets, each
// (g^(i-1), g^i] with g = (1 + e) / (1 - e), whose midpoint 2 g^i / (g + 1)
// lies within a relative e = kRelativeError of every value in it (the
// construction of DDSketch, Masson et al., VLDB 2019). An order statistic is
// then that midpoint clamped to the exact minimum and maximum, so each
// percentile is within 0.1% of the exact one; count, mean and max stay exact.
// Values at or below kZeroValue count as zero. Memory: one 8-byte counter per
// bucket between the smallest and largest value, about 1,150 per decade
// (11.5k for values from 1 us to 10,000 s, say).
//
// Deterministic: the same values in any order give the same figures.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace kvreplay {

// mean and percentiles (linear interpolation between order statistics, as
// numpy's default) of one latency over the finished requests. `exact`: false
// when the percentiles come from the histogram (LatencyDistribution).
struct LatencySummary {
  std::uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  bool exact = true;
  double p95 = 0;  // the planners' percentile (an SLO's p95)
  // Percentiles asked for beyond those (--percentiles, --slo targets): the
  // percentile (0..100] and its value, in the order asked.
  std::vector<std::pair<double, double>> extra;
  // The value at `percentile` (0..100]: a field, an extra one, or max at 100;
  // nullopt when this summary was not asked for it.
  std::optional<double> at(double percentile) const;
};
LatencySummary summarize_latency(std::vector<double> values);
// The q-quantile (0..1) of sorted values, interpolated; 0 when empty.
double quantile_sorted(const std::vector<double>& sorted, double q);

class LatencyDistribution {
 public:
  static constexpr std::size_t kExactValues = std::size_t{1} << 16;
  static constexpr double kRelativeError = 0.001;
  static constexpr double kZeroValue = 1e-9;

  void add(double value);
  void add(double value, std::uint64_t times);  // `times` values equal to `value`
  std::uint64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool exact() const { return !histogram_; }
  // The q-quantile (0..1), interpolated; 0 when empty.
  double quantile(double q) const;
  // With `extra`: those percentiles (0..100] too (LatencySummary::extra).
  LatencySummary summary(std::span<const double> extra = {}) const;

 private:
  // The k-th smallest value (0-based): exact, or its bucket's midpoint clamped.
  double order_statistic(std::uint64_t k) const;
  void sort_values() const;
  void to_histogram();
  void count_in_bucket(double value, std::uint64_t times);
  double midpoint(std::int64_t bucket) const;

  std::uint64_t count_ = 0;
  double sum_ = 0;  // the histogram's mean (exact mode sums the sorted values)
  double min_ = std::numeric_limits<double>::infinity();
  double max_ = -std::numeric_limits<double>::infinity();
  mutable std::vector<double> values_;  // exact mode; sorted on demand
  mutable bool sorted_ = true;
  bool histogram_ = false;
  std::uint64_t zeros_ = 0;        // values at or below kZeroValue
  std::int64_t first_bucket_ = 0;  // the bucket buckets_[0] counts
  std::vector<std::uint64_t> buckets_;
  double log_gamma_ = 0;
};

}  // namespace kvreplay
