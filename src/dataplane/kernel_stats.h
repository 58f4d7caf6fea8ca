// KernelStats: launches, latency samples and bytes moved per kernel, for the
// report's timing.kernels and `kvreplay kernels`.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

// Kernel names, as the report shows them.
inline constexpr std::string_view kKernelAppend = "append";
inline constexpr std::string_view kKernelCopyBlocks = "copy_blocks";
inline constexpr std::string_view kKernelGather = "gather";
inline constexpr std::string_view kKernelAttention = "attention";
// Offload-tier transfers of whole blocks (every layer), device to host and back.
inline constexpr std::string_view kKernelTierStore = "tier_store";
inline constexpr std::string_view kKernelTierLoad = "tier_load";

struct KernelTiming {
  std::uint64_t launches = 0;
  std::uint64_t bytes = 0;    // bytes read plus written by all launches
  std::vector<float> micros;  // one latency sample per launch

  double median_us() const;  // 0 without samples
  double p99_us() const;     // nearest rank
  double total_us() const;
  double gbps() const;  // bytes / total time, 10^9 bytes per second; 0 without time
};

class KernelStats {
 public:
  void record(std::string_view kernel, double micros, std::uint64_t bytes);
  void clear() { kernels_.clear(); }
  bool empty() const { return kernels_.empty(); }
  const std::map<std::string, KernelTiming, std::less<>>& kernels() const { return kernels_; }
  const KernelTiming* find(std::string_view kernel) const;

  // {NAME: {launches, median_us, p99_us, bytes, gbps}}, names sorted.
  nlohmann::json to_json() const;

 private:
  std::map<std::string, KernelTiming, std::less<>> kernels_;
};

}  // namespace kvreplay
