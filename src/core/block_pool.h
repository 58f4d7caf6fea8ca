// BlockPool: reference-counted physical KV blocks and their free list.
//
// Invariants (checked independently by check_invariants in invariants.h):
//   P1 refcount(b) == 0  <=>  b is on the free list, exactly once.
//   P2 used_count() + free_count() == total().
//   P3 filled(b) <= page_tokens of the owning config; a free block has filled 0.
//
// Every operation is failure-atomic: it either succeeds completely or returns
// an error and leaves the pool exactly as it was.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace kvreplay {

// What writable() did to make a table entry writable.
struct CopyOnWrite {
  enum class Kind : std::uint8_t {
    kExisting,   // the caller holds the only reference: write in place
    kAllocated,  // the entry was invalid: a fresh block was allocated
    kCopy,       // the entry was shared: copy source -> destination, then write
  };
  Kind kind = Kind::kExisting;
  BlockId block = kInvalidBlock;   // the block to write (destination for kCopy)
  BlockId source = kInvalidBlock;  // kCopy only: the shared block to copy from

  static CopyOnWrite existing(BlockId b) { return {Kind::kExisting, b, kInvalidBlock}; }
  static CopyOnWrite allocated(BlockId b) { return {Kind::kAllocated, b, kInvalidBlock}; }
  static CopyOnWrite copy(BlockId source, BlockId destination) {
    return {Kind::kCopy, destination, source};
  }
  bool operator==(const CopyOnWrite&) const = default;
};

// Everything observable about a pool, for failure-atomicity tests and debugging.
struct PoolSnapshot {
  std::vector<std::uint32_t> refcounts;
  std::vector<std::uint32_t> filled;
  std::vector<BlockId> free_list;  // in allocation order
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  bool operator==(const PoolSnapshot&) const = default;
};

class BlockPool {
 public:
  static constexpr std::uint32_t kMaxRefcount = std::numeric_limits<std::uint32_t>::max();

  // REQUIRES: total < kInvalidBlock. max_refcount bounds retain(); tests lower
  // it to force a retain failure at a chosen point.
  explicit BlockPool(std::uint32_t total, AllocOrder order = AllocOrder::kLifo,
                     std::uint32_t max_refcount = kMaxRefcount);

  // Takes a free block (refcount 1, filled 0). Error: kPoolExhausted.
  CoreResult<BlockId> allocate() {
    if (free_size_ == 0) return Unexpected{CoreError::kPoolExhausted};
    return take_free();
  }
  // allocate() when a block is known to be free. REQUIRES free_count() > 0.
  BlockId take_free() {
    const BlockId b = pop_free();
    blocks_[b].refcount = 1;
    blocks_[b].filled = 0;
    ++allocations_;
    return b;
  }
  // Takes n blocks or none. Error: kPoolExhausted (nothing taken).
  CoreStatus allocate_n(std::uint32_t n, std::vector<BlockId>& out);
  // release(b) for each of blocks, all or none (errors as release's, nothing
  // changed). REQUIRES the blocks distinct. Reads ahead in the pool's state:
  // a radix tree frees thousands of scattered blocks at once.
  CoreStatus release_each(std::span<const BlockId> blocks) {
    constexpr std::size_t kAhead = 16;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (i + kAhead < blocks.size() && blocks[i + kAhead] < total()) {
        __builtin_prefetch(&blocks_[blocks[i + kAhead]]);
      }
      const BlockId b = blocks[i];
      if (b >= total()) return Unexpected{CoreError::kBlockOutOfRange};
      if (blocks_[b].refcount == 0) return Unexpected{CoreError::kBlockNotLive};
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (i + kAhead < blocks.size()) __builtin_prefetch(&blocks_[blocks[i + kAhead]]);
      if (--blocks_[blocks[i]].refcount == 0) free_block(blocks[i]);
    }
    return {};
  }
  // n take_free() calls then fill_fresh(the n blocks, tokens, page_tokens),
  // in one pass: the blocks appended to `out`. REQUIRES n <= free_count() and
  // tokens in ((n - 1) * page_tokens, n * page_tokens].
  void take_free_filled(std::uint32_t n, std::uint32_t tokens, std::uint32_t page_tokens,
                        std::vector<BlockId>& out) {
    if (n == 0) return;
    for (std::uint32_t i = 0; i + 1 < n; ++i) {
      if (stack() && free_size_ > 16) __builtin_prefetch(&blocks_[free_slots_[free_size_ - 16]]);
      const BlockId b = pop_free();
      blocks_[b] = BlockState{1, page_tokens};
      out.push_back(b);
    }
    const BlockId last = pop_free();
    blocks_[last] = BlockState{1, tokens - (n - 1) * page_tokens};
    out.push_back(last);
    allocations_ += n;
    filled_total_ += tokens;
  }
  // REQUIRES b live. Errors: kBlockOutOfRange, kBlockNotLive, kRefcountOverflow.
  CoreStatus retain(BlockId b) {
    if (b >= total()) return Unexpected{CoreError::kBlockOutOfRange};
    if (blocks_[b].refcount == 0) return Unexpected{CoreError::kBlockNotLive};
    if (blocks_[b].refcount >= max_refcount_) return Unexpected{CoreError::kRefcountOverflow};
    ++blocks_[b].refcount;
    return {};
  }
  // Drops one reference; at zero the block returns to the free list with filled 0.
  // Errors: kBlockOutOfRange, kBlockNotLive (a double free is an error, never an underflow).
  CoreStatus release(BlockId b) {
    if (b >= total()) return Unexpected{CoreError::kBlockOutOfRange};
    if (blocks_[b].refcount == 0) return Unexpected{CoreError::kBlockNotLive};
    if (--blocks_[b].refcount == 0) free_block(b);
    return {};
  }
  // The free list is empty and the caller holds the only reference to b: the
  // same as release(b) then allocate() (which returns b, the one free block),
  // without the round trip. Errors (nothing changes): kBlockOutOfRange;
  // kBlockNotLive unless refcount(b) == 1 and the free list is empty.
  CoreStatus recycle(BlockId b) {
    if (b >= total()) return Unexpected{CoreError::kBlockOutOfRange};
    if (blocks_[b].refcount != 1 || free_size_ != 0) return Unexpected{CoreError::kBlockNotLive};
    filled_total_ -= blocks_[b].filled;
    blocks_[b].filled = 0;
    ++frees_;
    ++allocations_;
    return {};
  }
  // recycle(b) for each of blocks, all or none (errors as recycle's, nothing
  // changed). REQUIRES the blocks distinct.
  CoreStatus recycle_all(std::span<const BlockId> blocks) {
    if (free_size_ != 0 && !blocks.empty()) return Unexpected{CoreError::kBlockNotLive};
    for (BlockId b : blocks) {
      if (b >= total()) return Unexpected{CoreError::kBlockOutOfRange};
      if (blocks_[b].refcount != 1) return Unexpected{CoreError::kBlockNotLive};
    }
    for (BlockId b : blocks) {
      filled_total_ -= blocks_[b].filled;
      blocks_[b].filled = 0;
    }
    frees_ += blocks.size();
    allocations_ += blocks.size();
    return {};
  }
  // Makes a table entry writable. Existing(b) when the caller holds the only
  // reference, Allocated(b) when entry == kInvalidBlock, Copy{source, destination}
  // when shared: allocates the destination (filled copied from the source) and
  // drops one reference of the source. Errors: kPoolExhausted, kBlockOutOfRange,
  // kBlockNotLive.
  CoreResult<CopyOnWrite> writable(BlockId entry);

  // Moves b's refcount by delta without touching the free list. Only for
  // validation passes that restore every change before returning (release_all).
  // REQUIRES b < total() and the result stays within [0, max_refcount()].
  void adjust_refcount_unchecked(BlockId b, int delta) {
    blocks_[b].refcount =
        static_cast<std::uint32_t>(static_cast<std::int64_t>(blocks_[b].refcount) + delta);
  }

  // set_filled of fresh pages in order: page_tokens for each block but the
  // last, which gets the rest of `tokens`. REQUIRES each block live with
  // filled 0 and tokens in ((blocks.size() - 1) * page_tokens,
  // blocks.size() * page_tokens] (the caller checks).
  void fill_fresh(std::span<const BlockId> blocks, std::uint32_t tokens,
                  std::uint32_t page_tokens) {
    if (blocks.empty()) return;
    for (std::size_t i = 0; i + 1 < blocks.size(); ++i) blocks_[blocks[i]].filled = page_tokens;
    blocks_[blocks.back()].filled =
        tokens - static_cast<std::uint32_t>(blocks.size() - 1) * page_tokens;
    filled_total_ += tokens;
  }
  // REQUIRES b live and n <= the config's page_tokens (the caller checks).
  void set_filled(BlockId b, std::uint32_t n) {
    filled_total_ += n;
    filled_total_ -= blocks_[b].filled;
    blocks_[b].filled = n;
  }

  std::uint32_t total() const { return total_; }
  std::uint32_t free_count() const { return free_size_; }
  std::uint32_t used_count() const { return total() - free_size_; }
  std::uint32_t refcount(BlockId b) const { return blocks_[b].refcount; }
  std::uint32_t filled(BlockId b) const { return blocks_[b].filled; }
  bool is_live(BlockId b) const { return b < total() && blocks_[b].refcount > 0; }
  AllocOrder order() const { return order_; }
  std::uint32_t max_refcount() const { return max_refcount_; }
  // Sum of filled(b) over all blocks (free blocks have filled 0).
  std::uint64_t filled_total() const { return filled_total_; }
  std::uint64_t allocations() const { return allocations_; }
  std::uint64_t frees() const { return frees_; }

  // The free list in allocation order (the next allocate() returns front()).
  std::vector<BlockId> free_list() const;
  PoolSnapshot snapshot() const;

 private:
  friend struct BlockPoolTestAccess;  // plants faults in tests

  bool stack() const { return order_ == AllocOrder::kLifo || order_ == AllocOrder::kVllm; }
  BlockId pop_free() {  // REQUIRES free_size_ > 0
    if (stack()) return free_slots_[--free_size_];
    if (order_ == AllocOrder::kFifo) {
      const BlockId b = free_slots_[free_head_];
      free_head_ = free_head_ + 1 == total_ ? 0 : free_head_ + 1;
      --free_size_;
      return b;
    }
    return pop_free_heap();
  }
  void push_free(BlockId b) {
    if (stack()) {
      free_slots_[free_size_++] = b;
      return;
    }
    if (order_ == AllocOrder::kFifo) {
      // The ring's tail: head + size, wrapped (both below total).
      std::uint64_t tail = std::uint64_t{free_head_} + free_size_;
      if (tail >= total_) tail -= total_;
      free_slots_[tail] = b;
      ++free_size_;
      return;
    }
    push_free_heap(b);
  }
  BlockId pop_free_heap();  // lowest
  void push_free_heap(BlockId b);
  // refcount(b) reached zero: back to the free list with filled 0.
  void free_block(BlockId b) {
    filled_total_ -= blocks_[b].filled;
    blocks_[b].filled = 0;
    push_free(b);
    ++frees_;
  }

  AllocOrder order_;
  std::uint32_t total_;  // blocks_.size(), kept apart: read on every operation
  std::uint32_t max_refcount_;
  // What every operation reads of a block, side by side: one cache line
  // reached, not two.
  struct BlockState {
    std::uint32_t refcount = 0;
    std::uint32_t filled = 0;
  };
  std::vector<BlockState> blocks_;
  // Free list storage, capacity total(). lifo: a stack in [0, size) popped at
  // the back; fifo: a ring starting at free_head_; lowest: a min-heap in [0, size).
  std::vector<BlockId> free_slots_;
  std::uint32_t free_head_ = 0;
  std::uint32_t free_size_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t frees_ = 0;
  std::uint64_t filled_total_ = 0;
};

}  // namespace kvreplay
