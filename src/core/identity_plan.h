// The identity block-table plan: layout [layer][logical_page] -> physical_page
// with entry i = i. With identity pages a paged arena of layers * pages_per_seq
// blocks, each [page_tokens][K|V][kv_heads][head_dim], is byte-for-byte a dense
// [layer][token][K|V][kv_heads][head_dim] arena whose layers are padded to
// pages_per_seq * page_tokens tokens: the basis of differential kernel tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace kvreplay {

// Writes required_single_sequence_blocks() identity entries to the front of
// `out` and returns how many. Errors: kInvalidConfig, kOutputTooSmall.
CoreResult<std::size_t> fill_identity_block_table(const PagedKvConfig& config,
                                                  std::span<BlockId> out);

// An immutable block table prepared for upload to a device.
class GpuBlockTablePlan {
 public:
  // Errors: kInvalidConfig, and kOutputTooSmall when the plan would have
  // kInvalidBlock or more entries.
  static CoreResult<GpuBlockTablePlan> identity(const PagedKvConfig& config);

  const PagedKvConfig& config() const { return config_; }
  std::span<const BlockId> entries() const { return entries_; }
  std::uint32_t pages_per_layer() const { return config_.pages_per_seq(); }

 private:
  GpuBlockTablePlan(const PagedKvConfig& config, std::vector<BlockId> entries)
      : config_(config), entries_(std::move(entries)) {}

  PagedKvConfig config_;
  std::vector<BlockId> entries_;
};

}  // namespace kvreplay
