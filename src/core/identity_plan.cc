#include "core/identity_plan.h"

#include <numeric>

namespace kvreplay {

CoreResult<std::size_t> fill_identity_block_table(const PagedKvConfig& config,
                                                  std::span<BlockId> out) {
  if (!config.is_valid()) return Unexpected{CoreError::kInvalidConfig};
  std::uint64_t required = config.required_single_sequence_blocks();
  if (required >= kInvalidBlock) return Unexpected{CoreError::kOutputTooSmall};
  if (out.size() < required) return Unexpected{CoreError::kOutputTooSmall};
  std::iota(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(required), BlockId{0});
  return static_cast<std::size_t>(required);
}

CoreResult<GpuBlockTablePlan> GpuBlockTablePlan::identity(const PagedKvConfig& config) {
  if (!config.is_valid()) return Unexpected{CoreError::kInvalidConfig};
  std::uint64_t required = config.required_single_sequence_blocks();
  if (required >= kInvalidBlock) return Unexpected{CoreError::kOutputTooSmall};
  std::vector<BlockId> entries(static_cast<std::size_t>(required), kInvalidBlock);
  auto filled = fill_identity_block_table(config, entries);
  if (!filled) return Unexpected{filled.error()};
  return GpuBlockTablePlan(config, std::move(entries));
}

}  // namespace kvreplay
