#include "core/block_table.h"

#include <algorithm>
#include <cassert>

namespace kvreplay {

SequenceBlockTable::SequenceBlockTable(std::uint32_t capacity_pages, std::uint32_t page_tokens)
    : capacity_pages_(capacity_pages), page_tokens_(page_tokens) {
  assert(page_tokens >= 1);
}

void SequenceBlockTable::set_entry(std::size_t page, BlockId b) {
  continued_ -= (continues(page) ? 1 : 0) + (continues(page + 1) ? 1 : 0);
  entries_[page] = b;
  continued_ += (continues(page) ? 1 : 0) + (continues(page + 1) ? 1 : 0);
}

bool SequenceBlockTable::empty() const {
  return length_ == 0 && std::all_of(entries_.begin(), entries_.end(),
                                     [](BlockId b) { return b == kInvalidBlock; });
}

std::optional<BlockId> SequenceBlockTable::get(std::uint32_t logical_page) const {
  if (logical_page >= entries_.size() || entries_[logical_page] == kInvalidBlock) {
    return std::nullopt;
  }
  return entries_[logical_page];
}

CoreResult<CopyOnWrite> SequenceBlockTable::ensure_writable(std::uint32_t logical_page,
                                                            BlockPool& pool) {
  if (logical_page >= capacity_pages_) return Unexpected{CoreError::kPageOutOfRange};
  BlockId entry = logical_page < entries_.size() ? entries_[logical_page] : kInvalidBlock;
  auto action = pool.writable(entry);
  if (!action) return action;
  // Growing the vector may throw bad_alloc; that is fatal, not a failure mode.
  if (logical_page >= entries_.size()) entries_.resize(logical_page + 1, kInvalidBlock);
  set_entry(logical_page, action.value().block);
  return action;
}

CoreResult<std::uint32_t> SequenceBlockTable::count_blocks_needed(std::uint32_t tokens,
                                                                  const BlockPool& pool) const {
  std::uint64_t new_length = std::uint64_t{length_} + tokens;
  if (new_length > capacity_tokens()) return Unexpected{CoreError::kLengthExceeded};
  if (tokens == 0) return 0u;
  const std::uint32_t first_page = length_ / page_tokens_;
  // new_length - 1 < capacity_tokens() fits 64 bits; divide in 32 bits when it fits (cheaper).
  const auto last_page = static_cast<std::uint32_t>(
      new_length - 1 <= UINT32_MAX ? static_cast<std::uint32_t>(new_length - 1) / page_tokens_
                                   : (new_length - 1) / page_tokens_);
  // Pages that already hold a block (the partial last page) are written in
  // place, or copied when shared; every other page needs a fresh block.
  // The pages past the stored entries are counted at once.
  const auto stored = static_cast<std::uint32_t>(
      std::min<std::size_t>(entries_.size(), std::size_t{last_page} + 1));
  std::uint32_t needed = last_page + 1 - std::max(first_page, stored);
  if (first_page >= stored) return needed;
  for (std::uint32_t page = first_page; page < stored; ++page) {
    const BlockId b = entries_[page];
    if (b == kInvalidBlock) {
      ++needed;
      continue;
    }
    if (b >= pool.total()) return Unexpected{CoreError::kBlockOutOfRange};
    if (pool.refcount(b) == 0) return Unexpected{CoreError::kBlockNotLive};
    if (pool.refcount(b) > 1) ++needed;
  }
  return needed;
}

CoreResult<AppendEffect> SequenceBlockTable::append(std::uint32_t tokens, BlockPool& pool) {
  std::uint64_t new_length = std::uint64_t{length_} + tokens;
  if (new_length > capacity_tokens()) return Unexpected{CoreError::kLengthExceeded};
  AppendEffect effect;
  if (tokens == 0) return effect;
  const std::uint32_t first_page = length_ / page_tokens_;
  if (append_in_place(tokens, pool)) {
    effect.first_page = first_page;
    return effect;
  }
  const auto last_page = static_cast<std::uint32_t>((new_length - 1) / page_tokens_);
  effect.first_page = first_page;
  if (append_own_tail(tokens, pool, effect)) return effect;

  auto planned = blocks_needed(tokens, pool);
  if (!planned) return Unexpected{planned.error()};
  const std::uint32_t needed = planned.value();
  if (needed > pool.free_count()) return Unexpected{CoreError::kPoolExhausted};
  if (entries_.size() < std::size_t{last_page} + 1) {
    entries_.resize(std::size_t{last_page} + 1, kInvalidBlock);
  }

  // Commit: nothing below can fail.
  for (std::uint32_t page = first_page; page <= last_page; ++page) {
    CopyOnWrite action = pool.writable(entries_[page]).value();
    if (action.kind == CopyOnWrite::Kind::kCopy) effect.copies.push_back(action);
    if (action.kind == CopyOnWrite::Kind::kAllocated) ++effect.new_pages;
    set_entry(page, action.block);
    std::uint64_t page_end = std::uint64_t{page + 1} * page_tokens_;
    std::uint64_t written_end = std::min(page_end, new_length);
    pool.set_filled(action.block,
                    static_cast<std::uint32_t>(written_end - std::uint64_t{page} * page_tokens_));
  }
  length_ = static_cast<std::uint32_t>(new_length);
  return effect;
}

bool SequenceBlockTable::append_own_tail(std::uint32_t tokens, BlockPool& pool,
                                         AppendEffect& effect) {
  // The prefill chunk: no page stored past length() and the partial last
  // page, if any, this table's alone. append()'s loop would write that page in
  // place and allocate() each new page in the pool's order; take_free_filled
  // takes the same blocks with the same fills in one pass.
  const std::uint32_t offset = length_ % page_tokens_;
  const std::size_t stored = length_ / page_tokens_ + (offset > 0 ? 1 : 0);
  if (entries_.size() != stored) return false;
  if (offset > 0) {
    const BlockId tail = entries_.back();
    if (tail >= pool.total() || pool.refcount(tail) != 1) return false;
  }
  const std::uint32_t room = offset > 0 ? std::min(tokens, page_tokens_ - offset) : 0;
  const std::uint32_t rest = tokens - room;
  const auto pages =
      static_cast<std::uint32_t>((std::uint64_t{rest} + page_tokens_ - 1) / page_tokens_);
  if (pages > pool.free_count()) return false;  // the general path reports it
  // Commit: nothing below can fail (bad_alloc growing the vector is fatal).
  if (room > 0) pool.set_filled(entries_.back(), offset + room);
  const std::size_t first_new = entries_.size();
  pool.take_free_filled(pages, rest, page_tokens_, entries_);
  for (std::size_t i = first_new; i < entries_.size(); ++i) continued_ += continues(i) ? 1 : 0;
  length_ += tokens;
  effect.new_pages = pages;
  return true;
}

CoreResult<std::uint32_t> SequenceBlockTable::append_fresh(std::uint32_t tokens, BlockPool& pool) {
  if (length_ % page_tokens_ != 0 || entries_.size() != length_ / page_tokens_) {
    return Unexpected{CoreError::kPageOutOfRange};
  }
  const std::uint64_t new_length = std::uint64_t{length_} + tokens;
  if (new_length > capacity_tokens()) return Unexpected{CoreError::kLengthExceeded};
  const auto pages =
      static_cast<std::uint32_t>((std::uint64_t{tokens} + page_tokens_ - 1) / page_tokens_);
  if (pages > pool.free_count()) return Unexpected{CoreError::kPoolExhausted};
  // Commit: nothing below can fail (bad_alloc growing the vector is fatal).
  std::uint32_t left = tokens;
  for (std::uint32_t i = 0; i < pages; ++i) {
    const BlockId b = pool.allocate().value();
    entries_.push_back(b);
    continued_ += continues(entries_.size() - 1) ? 1 : 0;
    const std::uint32_t filled = std::min(left, page_tokens_);
    pool.set_filled(b, filled);
    left -= filled;
  }
  length_ = static_cast<std::uint32_t>(new_length);
  return pages;
}

CoreResult<std::uint32_t> SequenceBlockTable::append_taken(std::uint32_t tokens,
                                                           std::span<const BlockId> blocks,
                                                           BlockPool& pool) {
  if (length_ % page_tokens_ != 0 || entries_.size() != length_ / page_tokens_) {
    return Unexpected{CoreError::kPageOutOfRange};
  }
  const std::uint64_t new_length = std::uint64_t{length_} + tokens;
  if (new_length > capacity_tokens()) return Unexpected{CoreError::kLengthExceeded};
  const auto pages =
      static_cast<std::uint32_t>((std::uint64_t{tokens} + page_tokens_ - 1) / page_tokens_);
  if (blocks.size() != pages) return Unexpected{CoreError::kSizeMismatch};
  for (BlockId b : blocks) {
    if (b >= pool.total()) return Unexpected{CoreError::kBlockOutOfRange};
    if (pool.refcount(b) != 1 || pool.filled(b) != 0) return Unexpected{CoreError::kBlockNotLive};
  }
  // Commit: nothing below can fail (bad_alloc growing the vector is fatal).
  BlockId previous = entries_.empty() ? kInvalidBlock : entries_.back();
  entries_.insert(entries_.end(), blocks.begin(), blocks.end());
  std::uint32_t continued = 0;
  for (BlockId b : blocks) {
    continued += previous != kInvalidBlock && b == previous + 1 ? 1 : 0;
    previous = b;
  }
  continued_ += continued;
  pool.fill_fresh(blocks, tokens, page_tokens_);  // each checked live with filled 0
  length_ = static_cast<std::uint32_t>(new_length);
  return pages;
}

CoreStatus SequenceBlockTable::fork_into(SequenceBlockTable& target, BlockPool& pool) const {
  if (capacity_pages_ != target.capacity_pages_ || page_tokens_ != target.page_tokens_) {
    return Unexpected{CoreError::kSizeMismatch};
  }
  if (!target.empty()) return Unexpected{CoreError::kTargetNotEmpty};
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i] == kInvalidBlock) continue;
    if (auto retained = pool.retain(entries_[i]); !retained) {
      for (std::size_t j = 0; j < i; ++j) {
        if (entries_[j] != kInvalidBlock) (void)pool.release(entries_[j]);
      }
      return retained;
    }
  }
  target.entries_ = entries_;
  target.continued_ = continued_;
  target.length_ = length_;
  return {};
}

CoreStatus SequenceBlockTable::install_shared_prefix(std::span<const BlockId> pages,
                                                     std::uint32_t tokens, BlockPool& pool) {
  if (pages.size() > capacity_pages_) return Unexpected{CoreError::kPageOutOfRange};
  if (pages.size() != (std::uint64_t{tokens} + page_tokens_ - 1) / page_tokens_) {
    return Unexpected{CoreError::kSizeMismatch};
  }
  if (!empty()) return Unexpected{CoreError::kTargetNotEmpty};
  // Retained page by page (a block out of range, kInvalidBlock among them,
  // is refused), the pages that continue their predecessor counted as they go.
  std::uint32_t continued = 0;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (auto retained = pool.retain(pages[i]); !retained) {
      for (std::size_t j = 0; j < i; ++j) (void)pool.release(pages[j]);
      return retained;
    }
    continued += i > 0 && pages[i] == pages[i - 1] + 1 ? 1 : 0;
  }
  entries_.assign(pages.begin(), pages.end());
  continued_ = continued;
  length_ = tokens;
  return {};
}

CoreResult<BlockId> SequenceBlockTable::skip_page(std::uint32_t logical_page, BlockId null_block,
                                                  BlockPool& pool) {
  if (logical_page >= entries_.size()) return Unexpected{CoreError::kPageOutOfRange};
  const BlockId b = entries_[logical_page];
  if (b == kInvalidBlock || b == null_block) return Unexpected{CoreError::kPageOutOfRange};
  if (!pool.is_live(b)) return Unexpected{CoreError::kBlockNotLive};
  // Retain first: the only step that can fail once the page's block is live.
  if (auto retained = pool.retain(null_block); !retained) return Unexpected{retained.error()};
  (void)pool.release(b);  // live: cannot fail
  set_entry(logical_page, null_block);
  return b;
}

CoreStatus SequenceBlockTable::release_all(BlockPool& pool) {
  if (auto released = release_entries(pool); !released) return released;
  entries_.clear();
  continued_ = 0;
  length_ = 0;
  return {};
}

CoreStatus SequenceBlockTable::release_all(BlockPool& pool, std::vector<BlockId>& released) {
  if (auto status = release_entries(pool); !status) return status;
  released.swap(entries_);
  entries_.clear();
  continued_ = 0;
  length_ = 0;
  return {};
}

CoreStatus SequenceBlockTable::release_entries(BlockPool& pool) {
  // Validate with decrements: each block must hold at least as many
  // references as this table has entries on it. On failure the decrements
  // are undone; on success they are the release itself.
  //
  // Releasing page by page frees a block at its last entry, once its count
  // reaches zero: the entries whose decrement reaches zero, in page order,
  // are the blocks to free, in the free-list order of page-by-page releases.
  // Each is noted (a later entry on it finds a count of zero: an error) and,
  // once the whole table is validated, given its last reference back and
  // released, which frees it.
  thread_local std::vector<BlockId> zeroed;
  zeroed.clear();
  std::size_t checked = 0;
  CoreStatus status;
  const std::uint32_t total = pool.total();
  for (; checked < entries_.size(); ++checked) {
    const BlockId b = entries_[checked];
    if (b == kInvalidBlock) continue;
    if (b >= total) {
      status = Unexpected{CoreError::kBlockOutOfRange};
      break;
    }
    const std::uint32_t count = pool.refcount(b);
    if (count == 0) {
      status = Unexpected{CoreError::kBlockNotLive};
      break;
    }
    pool.adjust_refcount_unchecked(b, -1);
    if (count == 1) zeroed.push_back(b);
  }
  if (!status) {
    for (std::size_t i = 0; i < checked; ++i) {
      if (entries_[i] != kInvalidBlock) pool.adjust_refcount_unchecked(entries_[i], +1);
    }
    return status;
  }
  for (BlockId b : zeroed) {
    pool.adjust_refcount_unchecked(b, +1);
    (void)pool.release(b);
  }
  return {};
}

}  // namespace kvreplay
