// SequenceBlockTable: one sequence's logical pages -> physical blocks, and the
// sequence's length in tokens.
//
// Contract:
//   - capacity_pages() is fixed at construction; entries beyond entries().size()
//     are kInvalidBlock (storage grows with the sequence, not with its capacity).
//   - Tables built through append/fork/prefix hold valid entries for exactly the
//     pages covering [0, length()) (invariant I3).
//   - Every operation is failure-atomic: on error the table and the pool are
//     exactly as before.
//   - continued_pages() counts the pages whose block is the one right after the
//     previous page's block (entries p-1, p both valid, entry p == entry p-1 + 1):
//     how much of the table is physically contiguous. Kept by every operation in
//     O(pages changed).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "core/config.h"
#include "core/error.h"

namespace kvreplay {

// What an append did, for the data plane and the reports.
struct AppendEffect {
  // Copy-on-write copies made, in page order. At most one (the shared partial
  // last page) for tables whose valid pages are exactly those below length().
  std::vector<CopyOnWrite> copies;
  std::uint32_t first_page = 0;  // first logical page written
  std::uint32_t new_pages = 0;   // pages newly allocated (COW destination excluded)
};

class SequenceBlockTable {
 public:
  // REQUIRES: page_tokens >= 1.
  SequenceBlockTable(std::uint32_t capacity_pages, std::uint32_t page_tokens);

  std::uint32_t capacity_pages() const { return capacity_pages_; }
  std::uint32_t page_tokens() const { return page_tokens_; }
  std::uint64_t capacity_tokens() const { return std::uint64_t{capacity_pages_} * page_tokens_; }
  std::uint32_t length() const { return length_; }
  // Stored entries; logical pages past the end are kInvalidBlock.
  std::span<const BlockId> entries() const { return entries_; }
  bool empty() const;  // no valid entry and length 0
  // Valid pages that continue their predecessor's block (see the contract).
  std::uint32_t continued_pages() const { return continued_; }

  // The block of a logical page, or nullopt when the entry is invalid or out of range.
  std::optional<BlockId> get(std::uint32_t logical_page) const;

  // Makes one entry writable (copy-on-write when shared) and repoints it.
  // Errors: kPageOutOfRange, and those of BlockPool::writable. Does not change length().
  CoreResult<CopyOnWrite> ensure_writable(std::uint32_t logical_page, BlockPool& pool);

  // Appends `tokens` tokens at position length(): a fresh block for each new
  // page, copy-on-write of a shared partial last page, filled counts updated.
  // Reserves every block it needs before changing anything.
  // Errors: kLengthExceeded (past capacity_tokens()), kPoolExhausted, and stale-page
  // errors of the partial last page.
  CoreResult<AppendEffect> append(std::uint32_t tokens, BlockPool& pool);
  // The common decode step, inline: when `tokens` fit in a partial last page
  // that this table holds alone, writes them in place and returns true (the
  // same effect as append with no new page and no copy); otherwise changes
  // nothing and returns false.
  bool append_in_place(std::uint32_t tokens, BlockPool& pool) {
    if (!fits_in_place(tokens, pool)) return false;
    const std::uint32_t page = length_ / page_tokens_;
    pool.set_filled(entries_[page], length_ % page_tokens_ + tokens);
    length_ += tokens;
    return true;
  }
  // Appends `tokens` tokens from a page boundary (length() a multiple of the
  // page size): a fresh block for each new page, taken in the pool's order,
  // filled counts set. The same effect as append() there, without its
  // copy-on-write path. Errors: kPageOutOfRange (length() is not on a page
  // boundary, or a page past length() holds a block), kLengthExceeded,
  // kPoolExhausted; nothing changes on error. Returns the pages added.
  CoreResult<std::uint32_t> append_fresh(std::uint32_t tokens, BlockPool& pool);
  // append_fresh onto blocks the caller already took from the pool (each live
  // with one reference, the caller's, and filled 0), in page order: the table
  // takes over those references. Errors: those of append_fresh bar
  // kPoolExhausted, kSizeMismatch (not one block per new page), kBlockOutOfRange
  // and kBlockNotLive (a block not taken as described); nothing changes on
  // error, the blocks staying the caller's.
  CoreResult<std::uint32_t> append_taken(std::uint32_t tokens, std::span<const BlockId> blocks,
                                         BlockPool& pool);
  // The free blocks append(tokens) would take. Errors: those of append, bar
  // kPoolExhausted.
  CoreResult<std::uint32_t> blocks_needed(std::uint32_t tokens, const BlockPool& pool) const {
    if (fits_in_place(tokens, pool)) return 0u;  // the common decode step, inline
    return count_blocks_needed(tokens, pool);
  }

  // Makes `target` share every page of this table, with the same length.
  // Retains each live page; on failure releases what it retained.
  // Errors: kSizeMismatch (capacity or page size differ), kTargetNotEmpty, and
  // those of BlockPool::retain.
  CoreStatus fork_into(SequenceBlockTable& target, BlockPool& pool) const;

  // Attaches prefix pages holding `tokens` tokens to this empty table: retains
  // first, publishes after; rolls back on failure.
  // Errors: kPageOutOfRange (more pages than capacity), kSizeMismatch (pages
  // do not match ceil(tokens / page_tokens)), kTargetNotEmpty, and those of
  // BlockPool::retain (a stale page).
  CoreStatus install_shared_prefix(std::span<const BlockId> pages, std::uint32_t tokens,
                                   BlockPool& pool);

  // A page that attention no longer reads (it left a sliding window) gives its
  // block back and points at `null_block` instead (vLLM's
  // SingleTypeKVCacheManager.remove_skipped_blocks): retains null_block, then
  // releases the page's block. Returns that block. The length is unchanged;
  // the page stays valid (I3 exempts entries on the null block, see TableRef).
  // Errors (nothing changes): kPageOutOfRange (no valid entry at the page, or
  // it already holds null_block), kBlockNotLive (its block is not live), and
  // those of BlockPool::retain on null_block.
  CoreResult<BlockId> skip_page(std::uint32_t logical_page, BlockId null_block, BlockPool& pool);

  // Releases every page and resets the length to 0. Validates first (every
  // entry live, with enough references for its multiplicity), then releases
  // in page order, which fixes the free-list order under lifo and fifo.
  CoreStatus release_all(BlockPool& pool);
  // release_all, handing the released entries over in page order: `released`
  // takes them (and the table the storage `released` had, emptied) instead
  // of a copy. On error nothing changes, `released` included.
  CoreStatus release_all(BlockPool& pool, std::vector<BlockId>& released);

  bool operator==(const SequenceBlockTable&) const = default;

 private:
  friend struct BlockTableTestAccess;  // plants faults in tests

  // Whether `tokens` (at least one) fit in a partial last page that this
  // table holds alone.
  bool fits_in_place(std::uint32_t tokens, const BlockPool& pool) const {
    const std::uint32_t offset = length_ % page_tokens_;
    const std::uint32_t page = length_ / page_tokens_;
    if (offset == 0 || tokens == 0 || tokens > page_tokens_ - offset || page >= entries_.size()) {
      return false;
    }
    const BlockId b = entries_[page];
    return b < pool.total() && pool.refcount(b) == 1;
  }
  CoreResult<std::uint32_t> count_blocks_needed(std::uint32_t tokens, const BlockPool& pool) const;
  // append() of a table with no page stored past length() whose partial last
  // page, if any, it holds alone: returns true having appended, false having
  // changed nothing (another case, or too few free blocks).
  bool append_own_tail(std::uint32_t tokens, BlockPool& pool, AppendEffect& effect);
  bool continues(std::size_t page) const {
    return page > 0 && page < entries_.size() && entries_[page] != kInvalidBlock &&
           entries_[page - 1] != kInvalidBlock && entries_[page] == entries_[page - 1] + 1;
  }
  // release_all's references dropped, the entries left as they were.
  CoreStatus release_entries(BlockPool& pool);
  // entries_[page] = b, keeping continued_. REQUIRES: page < entries_.size().
  void set_entry(std::size_t page, BlockId b);

  std::uint32_t capacity_pages_;
  std::uint32_t page_tokens_;
  std::uint32_t length_ = 0;
  std::vector<BlockId> entries_;
  std::uint32_t continued_ = 0;
};

}  // namespace kvreplay
