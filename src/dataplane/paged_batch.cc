#include "dataplane/paged_batch.h"

#include <algorithm>
#include <cassert>

namespace kvreplay {

void PagedBatch::add(std::span<const BlockId> entries, std::uint32_t page_tokens,
                     std::uint32_t begin, std::uint32_t end) {
  assert(begin <= end && page_tokens > 0);
  const std::uint32_t first_page = begin / page_tokens;
  const std::uint32_t last_page = end == begin ? first_page : (end - 1) / page_tokens + 1;
  assert(last_page <= entries.size() || end == begin);
  for (std::uint32_t page = first_page; page < last_page; ++page) indices_.push_back(entries[page]);
  indptr_.push_back(static_cast<std::uint32_t>(indices_.size()));
  starts_.push_back(begin % page_tokens);
  lengths_.push_back(end - begin);
  out_indptr_.push_back(out_indptr_.back() + (end - begin));
  max_length_ = std::max(max_length_, end - begin);
}

void PagedBatch::clear() {
  indptr_.assign(1, 0);
  indices_.clear();
  starts_.clear();
  lengths_.clear();
  out_indptr_.assign(1, 0);
  max_length_ = 0;
}

PagedBatchView PagedBatch::view() const {
  PagedBatchView view;
  view.indptr = indptr_.data();
  view.indices = indices_.data();
  view.starts = starts_.data();
  view.lengths = lengths_.data();
  view.out_indptr = out_indptr_.data();
  view.batch = size();
  view.max_length = max_length_;
  return view;
}

}  // namespace kvreplay
