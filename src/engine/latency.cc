#include "engine/latency.h"

#include <algorithm>
#include <cmath>

namespace kvreplay {

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(rank));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (rank - static_cast<double>(below));
}

namespace {

// The summary of values already sorted (summing them in that order).
LatencySummary summarize_sorted(const std::vector<double>& sorted) {
  LatencySummary out;
  out.count = sorted.size();
  if (sorted.empty()) return out;
  double sum = 0;
  for (double v : sorted) sum += v;
  out.mean = sum / static_cast<double>(sorted.size());
  out.p50 = quantile_sorted(sorted, 0.50);
  out.p90 = quantile_sorted(sorted, 0.90);
  out.p95 = quantile_sorted(sorted, 0.95);
  out.p99 = quantile_sorted(sorted, 0.99);
  out.max = sorted.back();
  return out;
}

}  // namespace

LatencySummary summarize_latency(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return summarize_sorted(values);
}

void LatencyDistribution::add(double value) {
  add(value, 1);
}

void LatencyDistribution::add(double value, std::uint64_t times) {
  if (times == 0) return;
  count_ += times;
  sum_ += value * static_cast<double>(times);
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
  // Into the histogram before the exact values would pass kExactValues.
  if (!histogram_ && values_.size() + times > kExactValues) to_histogram();
  if (histogram_) {
    count_in_bucket(value, times);
    return;
  }
  values_.insert(values_.end(), times, value);
  sorted_ = false;
}

void LatencyDistribution::sort_values() const {
  if (sorted_) return;
  std::sort(values_.begin(), values_.end());
  sorted_ = true;
}

void LatencyDistribution::to_histogram() {
  histogram_ = true;
  const double gamma = (1 + kRelativeError) / (1 - kRelativeError);
  log_gamma_ = std::log(gamma);
  for (double value : values_) count_in_bucket(value, 1);
  std::vector<double>().swap(values_);
}

void LatencyDistribution::count_in_bucket(double value, std::uint64_t times) {
  if (!(value > kZeroValue)) {
    zeros_ += times;
    return;
  }
  const auto bucket = static_cast<std::int64_t>(std::ceil(std::log(value) / log_gamma_));
  if (buckets_.empty()) {
    first_bucket_ = bucket;
    buckets_.assign(1, 0);
  } else if (bucket < first_bucket_) {
    // Grown by a margin, so values creeping downwards do not move it each time.
    const std::int64_t grow = (first_bucket_ - bucket) + 64;
    buckets_.insert(buckets_.begin(), static_cast<std::size_t>(grow), 0);
    first_bucket_ -= grow;
  } else if (bucket - first_bucket_ >= static_cast<std::int64_t>(buckets_.size())) {
    buckets_.resize(static_cast<std::size_t>(bucket - first_bucket_ + 1), 0);
  }
  buckets_[static_cast<std::size_t>(bucket - first_bucket_)] += times;
}

double LatencyDistribution::midpoint(std::int64_t bucket) const {
  return 2 * std::exp(static_cast<double>(bucket) * log_gamma_) / (std::exp(log_gamma_) + 1);
}

double LatencyDistribution::order_statistic(std::uint64_t k) const {
  if (!histogram_) return values_[k];
  if (k == 0) return min_;
  if (k + 1 == count_) return max_;
  if (k < zeros_) return min_;
  std::uint64_t seen = zeros_;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (k < seen) {
      return std::clamp(midpoint(first_bucket_ + static_cast<std::int64_t>(i)), min_, max_);
    }
  }
  return max_;
}

double LatencyDistribution::quantile(double q) const {
  if (count_ == 0) return 0.0;
  if (!histogram_) {
    sort_values();
    return quantile_sorted(values_, q);
  }
  const double rank = q * static_cast<double>(count_ - 1);
  const auto below = static_cast<std::uint64_t>(std::floor(rank));
  const std::uint64_t above = std::min(below + 1, count_ - 1);
  const double low = order_statistic(below);
  return low + (order_statistic(above) - low) * (rank - static_cast<double>(below));
}

LatencySummary LatencyDistribution::summary(std::span<const double> extra) const {
  LatencySummary out;
  if (!histogram_) {
    sort_values();
    out = summarize_sorted(values_);
    for (double p : extra) out.extra.emplace_back(p, quantile_sorted(values_, p / 100.0));
    return out;
  }
  out.count = count_;
  out.exact = false;
  out.mean = sum_ / static_cast<double>(count_);
  out.p50 = quantile(0.50);
  out.p90 = quantile(0.90);
  out.p95 = quantile(0.95);
  out.p99 = quantile(0.99);
  out.max = max_;
  for (double p : extra) out.extra.emplace_back(p, quantile(p / 100.0));
  return out;
}

std::optional<double> LatencySummary::at(double percentile) const {
  for (const auto& [p, value] : extra) {
    if (p == percentile) return value;
  }
  if (percentile == 50) return p50;
  if (percentile == 90) return p90;
  if (percentile == 95) return p95;
  if (percentile == 99) return p99;
  if (percentile == 100) return max;
  return std::nullopt;
}

}  // namespace kvreplay
