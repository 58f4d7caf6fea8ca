#include "dataplane/kernel_stats.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvreplay {

namespace {

// The nearest-rank percentile of the samples (0 < p <= 100).
double percentile(std::vector<float> samples, double p) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(samples.size())));
  return samples[std::clamp<std::size_t>(rank, 1, samples.size()) - 1];
}

}  // namespace

double KernelTiming::median_us() const {
  return percentile(micros, 50.0);
}
double KernelTiming::p99_us() const {
  return percentile(micros, 99.0);
}
double KernelTiming::total_us() const {
  return std::accumulate(micros.begin(), micros.end(), 0.0);
}
double KernelTiming::gbps() const {
  const double total = total_us();
  return total <= 0.0 ? 0.0 : static_cast<double>(bytes) / (total * 1e3);
}

void KernelStats::record(std::string_view kernel, double micros, std::uint64_t bytes) {
  auto it = kernels_.find(kernel);
  if (it == kernels_.end()) it = kernels_.emplace(std::string(kernel), KernelTiming{}).first;
  ++it->second.launches;
  it->second.bytes += bytes;
  it->second.micros.push_back(static_cast<float>(micros));
}

const KernelTiming* KernelStats::find(std::string_view kernel) const {
  auto it = kernels_.find(kernel);
  return it == kernels_.end() ? nullptr : &it->second;
}

nlohmann::json KernelStats::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, timing] : kernels_) {
    out[name] = {{"launches", timing.launches},
                 {"median_us", timing.median_us()},
                 {"p99_us", timing.p99_us()},
                 {"bytes", timing.bytes},
                 {"gbps", timing.gbps()}};
  }
  return out;
}

}  // namespace kvreplay
