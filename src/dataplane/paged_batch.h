// PagedBatch: the host-side builder of a PagedBatchView (kernel_params.h), the
// block tables of a batch of sequences as flat arrays.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/config.h"
#include "dataplane/kernel_params.h"

namespace kvreplay {

class PagedBatch {
 public:
  // Adds positions [begin, end) of a table whose entries are `entries`: the
  // item's pages are entries[begin / page_tokens, ceil(end / page_tokens)) and
  // its start begin % page_tokens. REQUIRES: begin <= end and the entries cover
  // [0, end).
  void add(std::span<const BlockId> entries, std::uint32_t page_tokens, std::uint32_t begin,
           std::uint32_t end);
  void clear();

  std::uint32_t size() const { return static_cast<std::uint32_t>(lengths_.size()); }
  bool empty() const { return lengths_.empty(); }
  std::uint64_t rows() const { return out_indptr_.back(); }
  std::uint32_t max_length() const { return max_length_; }

  std::span<const std::uint32_t> indptr() const { return indptr_; }
  std::span<const BlockId> indices() const { return indices_; }
  std::span<const std::uint32_t> starts() const { return starts_; }
  std::span<const std::uint32_t> lengths() const { return lengths_; }
  std::span<const std::uint64_t> out_indptr() const { return out_indptr_; }

  // A view of this batch's host arrays (valid while the batch is unchanged).
  PagedBatchView view() const;

 private:
  std::vector<std::uint32_t> indptr_{0};      // [batch + 1]
  std::vector<BlockId> indices_;              // [indptr[batch]]
  std::vector<std::uint32_t> starts_;         // [batch]
  std::vector<std::uint32_t> lengths_;        // [batch]
  std::vector<std::uint64_t> out_indptr_{0};  // [batch + 1]
  std::uint32_t max_length_ = 0;
};

}  // namespace kvreplay
