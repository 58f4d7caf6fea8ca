// The trtllm engine's options, as TensorRT-LLM's LLM API names them
// (tensorrt_llm/llmapi/llm_args.py: KvCacheConfig, SchedulerConfig,
// TorchLlmArgs). The batch limits are SimOptions' max_seqs (max_batch_size)
// and max_batched_tokens (max_num_tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

// executor::CapacitySchedulerPolicy (capacityScheduler.cpp): GUARANTEED_NO_EVICT
// admits a request only when the blocks every scheduled request still needs
// to finish fit; MAX_UTILIZATION admits while the next step fits and pauses
// the newest started request when it does not.
enum class CapacityPolicy : std::uint8_t { kGuaranteedNoEvict, kMaxUtilization };
std::string_view to_string(CapacityPolicy policy);  // "guaranteed-no-evict", "max-utilization"
std::optional<CapacityPolicy> parse_capacity_policy(std::string_view name);
std::vector<std::string> capacity_policy_names();

struct TrtllmOptions {
  CapacityPolicy capacity_policy = CapacityPolicy::kGuaranteedNoEvict;  // SchedulerConfig default
  bool enable_partial_reuse = true;     // KvCacheConfig.enable_partial_reuse (default True)
  bool copy_on_partial_reuse = true;    // KvCacheConfig.copy_on_partial_reuse (default True)
  bool enable_chunked_context = false;  // TorchLlmArgs.enable_chunked_prefill (default False)
  bool no_partial_reuse = false;        // --no-partial-reuse, as given (enable_partial_reuse off)
};

// TensorRT-LLM's defaults the command line applies: KvCacheConfig.tokens_per_block
// 32; BuildConfig's max_batch_size 2048 and max_num_tokens 8192; and
// KvCacheConfig.free_gpu_memory_fraction 0.9 (of the memory free after
// the weights and the profile run).
inline constexpr std::uint32_t kTrtllmTokensPerBlock = 32;
inline constexpr std::uint32_t kTrtllmMaxBatchSize = 2048;
inline constexpr std::uint32_t kTrtllmMaxNumTokens = 8192;
inline constexpr double kTrtllmFreeGpuMemoryFraction = 0.9;

}  // namespace kvreplay
