#include "core/block_pool.h"

#include <algorithm>
#include <cassert>
#include <functional>

namespace kvreplay {

BlockPool::BlockPool(std::uint32_t total, AllocOrder order, std::uint32_t max_refcount)
    : order_(order),
      total_(total),
      max_refcount_(max_refcount),
      blocks_(total),
      free_slots_(total, 0),
      free_size_(total) {
  assert(total < kInvalidBlock);
  // Every order hands out 0, 1, 2, ... from a fresh pool. The lifo stack pops
  // at the back, so it is stored reversed.
  for (std::uint32_t i = 0; i < total; ++i) {
    free_slots_[i] = stack() ? total - 1 - i : i;
  }
}

BlockId BlockPool::pop_free_heap() {
  assert(free_size_ > 0);
  std::pop_heap(free_slots_.begin(), free_slots_.begin() + free_size_, std::greater<>{});
  return free_slots_[--free_size_];
}

void BlockPool::push_free_heap(BlockId b) {
  assert(free_size_ < total());
  free_slots_[free_size_] = b;
  std::push_heap(free_slots_.begin(), free_slots_.begin() + free_size_ + 1, std::greater<>{});
  ++free_size_;
}

CoreStatus BlockPool::allocate_n(std::uint32_t n, std::vector<BlockId>& out) {
  if (n > free_size_) return Unexpected{CoreError::kPoolExhausted};
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(allocate().value());
  return {};
}

CoreResult<CopyOnWrite> BlockPool::writable(BlockId entry) {
  if (entry == kInvalidBlock) {
    auto fresh = allocate();
    if (!fresh) return Unexpected{fresh.error()};
    return CopyOnWrite::allocated(fresh.value());
  }
  if (entry >= total()) return Unexpected{CoreError::kBlockOutOfRange};
  if (blocks_[entry].refcount == 0) return Unexpected{CoreError::kBlockNotLive};
  if (blocks_[entry].refcount == 1) return CopyOnWrite::existing(entry);
  auto destination = allocate();
  if (!destination) return Unexpected{destination.error()};
  set_filled(destination.value(), blocks_[entry].filled);
  --blocks_[entry].refcount;  // shared, so it stays live
  return CopyOnWrite::copy(entry, destination.value());
}

std::vector<BlockId> BlockPool::free_list() const {
  std::vector<BlockId> out;
  out.reserve(free_size_);
  switch (order_) {
    case AllocOrder::kLifo:
    case AllocOrder::kVllm:
      out.assign(free_slots_.rbegin() + (total() - free_size_), free_slots_.rend());
      break;
    case AllocOrder::kFifo:
      for (std::uint32_t i = 0; i < free_size_; ++i) {
        out.push_back(free_slots_[(std::uint64_t{free_head_} + i) % total()]);
      }
      break;
    case AllocOrder::kLowest:
      out.assign(free_slots_.begin(), free_slots_.begin() + free_size_);
      std::sort(out.begin(), out.end());
      break;
  }
  return out;
}

PoolSnapshot BlockPool::snapshot() const {
  PoolSnapshot snapshot{{}, {}, free_list(), allocations_, frees_};
  snapshot.refcounts.reserve(total());
  snapshot.filled.reserve(total());
  for (const BlockState& block : blocks_) {
    snapshot.refcounts.push_back(block.refcount);
    snapshot.filled.push_back(block.filled);
  }
  return snapshot;
}

}  // namespace kvreplay
