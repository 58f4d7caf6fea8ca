// BlockPool: allocation orders, reference counting, copy-on-write, counters.
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "core/block_pool.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

using test::kAllOrders;

BlockId must_allocate(BlockPool& pool) {
  auto b = pool.allocate();
  REQUIRE(b.ok());
  return b.value();
}

void must_release(BlockPool& pool, BlockId b) {
  INFO("release " << b);
  REQUIRE(pool.release(b).ok());
}

// Allocates `count` blocks and returns them in allocation order.
std::vector<BlockId> allocate_all(BlockPool& pool, std::uint32_t count) {
  std::vector<BlockId> out;
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(must_allocate(pool));
  return out;
}

TEST_CASE("pool: a fresh pool hands out 0, 1, 2, ... in every order") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(6, order);
    CHECK(pool.order() == order);
    CHECK(pool.total() == 6u);
    CHECK(pool.free_count() == 6u);
    CHECK(pool.used_count() == 0u);
    CHECK(pool.free_list() == std::vector<BlockId>{0, 1, 2, 3, 4, 5});
    CHECK(allocate_all(pool, 6) == std::vector<BlockId>{0, 1, 2, 3, 4, 5});
    CHECK(pool.free_count() == 0u);
    CHECK(pool.used_count() == 6u);
    for (BlockId b = 0; b < 6; ++b) {
      CHECK(pool.refcount(b) == 1u);
      CHECK(pool.filled(b) == 0u);
      CHECK(pool.is_live(b));
    }
  }
}

// Pool of 8: blocks 0..5 taken, then 2, 4, 1 freed in that order.
BlockPool pool_after_frees(AllocOrder order) {
  BlockPool pool(8, order);
  (void)allocate_all(pool, 6);
  must_release(pool, 2);
  must_release(pool, 4);
  must_release(pool, 1);
  return pool;
}

TEST_CASE("pool: lifo hands out the most recently freed block first") {
  BlockPool pool = pool_after_frees(AllocOrder::kLifo);
  CHECK(pool.free_list() == std::vector<BlockId>{1, 4, 2, 6, 7});
  CHECK(allocate_all(pool, 5) == std::vector<BlockId>{1, 4, 2, 6, 7});
}

TEST_CASE("pool: fifo hands out the least recently freed block first") {
  BlockPool pool = pool_after_frees(AllocOrder::kFifo);
  CHECK(pool.free_list() == std::vector<BlockId>{6, 7, 2, 4, 1});
  CHECK(allocate_all(pool, 5) == std::vector<BlockId>{6, 7, 2, 4, 1});
}

TEST_CASE("pool: lowest hands out the lowest-numbered free block first") {
  BlockPool pool = pool_after_frees(AllocOrder::kLowest);
  CHECK(pool.free_list() == std::vector<BlockId>{1, 2, 4, 6, 7});
  CHECK(allocate_all(pool, 5) == std::vector<BlockId>{1, 2, 4, 6, 7});
}

TEST_CASE("pool: interleaved frees and allocations follow each order exactly") {
  // Pool of 4, all taken: free 3, take, free 2, free 0, take, take.
  struct Expected {
    AllocOrder order;
    std::vector<BlockId> free_list;  // after freeing 2 then 0
    std::vector<BlockId> taken;
  };
  const Expected expected[] = {{AllocOrder::kLifo, {0, 2}, {3, 0, 2}},
                               {AllocOrder::kFifo, {2, 0}, {3, 2, 0}},
                               {AllocOrder::kLowest, {0, 2}, {3, 0, 2}}};
  for (const Expected& e : expected) {
    INFO(to_string(e.order));
    BlockPool pool(4, e.order);
    (void)allocate_all(pool, 4);
    std::vector<BlockId> taken;
    must_release(pool, 3);
    taken.push_back(must_allocate(pool));
    must_release(pool, 2);
    must_release(pool, 0);
    CHECK(pool.free_list() == e.free_list);
    taken.push_back(must_allocate(pool));
    taken.push_back(must_allocate(pool));
    CHECK(taken == e.taken);
  }
}

TEST_CASE("pool: each order matches its reference discipline over random frees and allocations") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    constexpr std::uint32_t kTotal = 7;
    BlockPool pool(kTotal, order);
    // Reference free list in allocation order.
    std::deque<BlockId> free_ref;
    for (BlockId b = 0; b < kTotal; ++b) free_ref.push_back(b);
    std::vector<BlockId> live;
    std::mt19937_64 rng(0xB10C + static_cast<unsigned>(order));
    for (int step = 0; step < 2000; ++step) {
      INFO("step " << step);
      const bool allocate = live.empty() || (!free_ref.empty() && (rng() & 1) != 0);
      if (allocate) {
        const BlockId expected = free_ref.front();
        free_ref.pop_front();
        REQUIRE(must_allocate(pool) == expected);
        live.push_back(expected);
      } else {
        const std::size_t index = rng() % live.size();
        const BlockId b = live[index];
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
        must_release(pool, b);
        switch (order) {
          case AllocOrder::kLifo:
          case AllocOrder::kVllm: free_ref.push_front(b); break;
          case AllocOrder::kFifo: free_ref.push_back(b); break;
          case AllocOrder::kLowest:
            free_ref.insert(std::lower_bound(free_ref.begin(), free_ref.end(), b), b);
            break;
        }
      }
      REQUIRE(pool.free_list() == std::vector<BlockId>(free_ref.begin(), free_ref.end()));
      REQUIRE(pool.free_count() == free_ref.size());
      REQUIRE(pool.used_count() == live.size());
    }
  }
}

TEST_CASE("pool: retain and release count references and the last release frees the block") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(3, order);
    const BlockId b = must_allocate(pool);
    pool.set_filled(b, 5);
    REQUIRE(pool.retain(b).ok());
    REQUIRE(pool.retain(b).ok());
    CHECK(pool.refcount(b) == 3u);
    CHECK(pool.used_count() == 1u);
    must_release(pool, b);
    must_release(pool, b);
    CHECK(pool.refcount(b) == 1u);
    CHECK(pool.is_live(b));
    CHECK(pool.filled(b) == 5u);
    CHECK(pool.frees() == 0u);
    must_release(pool, b);
    CHECK(pool.refcount(b) == 0u);
    CHECK_FALSE(pool.is_live(b));
    CHECK(pool.filled(b) == 0u);  // a free block holds nothing
    CHECK(pool.free_count() == 3u);
    CHECK(pool.frees() == 1u);
    const auto free_list = pool.free_list();
    CHECK(std::count(free_list.begin(), free_list.end(), b) == 1);
  }
}

TEST_CASE("pool: a double free is kBlockNotLive and never underflows the refcount") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(3, order);
    const BlockId b = must_allocate(pool);
    must_release(pool, b);
    const PoolSnapshot before = pool.snapshot();
    const auto again = pool.release(b);
    REQUIRE_FALSE(again.ok());
    CHECK(again.error() == CoreError::kBlockNotLive);
    CHECK(pool.refcount(b) == 0u);
    CHECK(pool.snapshot() == before);
    // A block never allocated is not live either.
    const auto never = pool.release(2);
    REQUIRE_FALSE(never.ok());
    CHECK(never.error() == CoreError::kBlockNotLive);
    CHECK(pool.snapshot() == before);
  }
}

TEST_CASE("pool: retain of a free block is kBlockNotLive") {
  BlockPool pool(2);
  const BlockId b = must_allocate(pool);
  must_release(pool, b);
  const PoolSnapshot before = pool.snapshot();
  const auto retained = pool.retain(b);
  REQUIRE_FALSE(retained.ok());
  CHECK(retained.error() == CoreError::kBlockNotLive);
  CHECK(pool.snapshot() == before);
}

TEST_CASE("pool: block ids at or past total are kBlockOutOfRange") {
  BlockPool pool(4);
  (void)allocate_all(pool, 2);
  const PoolSnapshot before = pool.snapshot();
  for (BlockId b : {BlockId{4}, BlockId{5}, BlockId{1000}, kInvalidBlock - 1}) {
    INFO("block " << b);
    const auto retained = pool.retain(b);
    REQUIRE_FALSE(retained.ok());
    CHECK(retained.error() == CoreError::kBlockOutOfRange);
    const auto released = pool.release(b);
    REQUIRE_FALSE(released.ok());
    CHECK(released.error() == CoreError::kBlockOutOfRange);
    const auto writable = pool.writable(b);
    REQUIRE_FALSE(writable.ok());
    CHECK(writable.error() == CoreError::kBlockOutOfRange);
    CHECK_FALSE(pool.is_live(b));
  }
  const auto retained = pool.retain(kInvalidBlock);
  REQUIRE_FALSE(retained.ok());
  CHECK(retained.error() == CoreError::kBlockOutOfRange);
  const auto released = pool.release(kInvalidBlock);
  REQUIRE_FALSE(released.ok());
  CHECK(released.error() == CoreError::kBlockOutOfRange);
  CHECK(pool.snapshot() == before);
}

TEST_CASE("pool: retain past max_refcount is kRefcountOverflow and changes nothing") {
  BlockPool pool(4, AllocOrder::kLifo, 3);
  CHECK(pool.max_refcount() == 3u);
  const BlockId b = must_allocate(pool);
  REQUIRE(pool.retain(b).ok());
  REQUIRE(pool.retain(b).ok());
  REQUIRE(pool.refcount(b) == 3u);
  const PoolSnapshot before = pool.snapshot();
  const auto overflow = pool.retain(b);
  REQUIRE_FALSE(overflow.ok());
  CHECK(overflow.error() == CoreError::kRefcountOverflow);
  CHECK(pool.refcount(b) == 3u);
  CHECK(pool.snapshot() == before);
  must_release(pool, b);
  CHECK(pool.retain(b).ok());  // room again
  CHECK(pool.refcount(b) == 3u);
}

TEST_CASE("pool: the default refcount limit is UINT32_MAX and never wraps") {
  BlockPool pool(2);
  CHECK(pool.max_refcount() == BlockPool::kMaxRefcount);
  CHECK(BlockPool::kMaxRefcount == 0xFFFFFFFFu);
  const BlockId b = must_allocate(pool);
  BlockPoolTestAccess::refcount(pool, b) = BlockPool::kMaxRefcount - 1;
  REQUIRE(pool.retain(b).ok());
  CHECK(pool.refcount(b) == BlockPool::kMaxRefcount);
  const auto overflow = pool.retain(b);
  REQUIRE_FALSE(overflow.ok());
  CHECK(overflow.error() == CoreError::kRefcountOverflow);
  CHECK(pool.refcount(b) == BlockPool::kMaxRefcount);
}

TEST_CASE("pool: an exhausted pool returns kPoolExhausted and changes nothing") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(3, order);
    (void)allocate_all(pool, 3);
    const PoolSnapshot before = pool.snapshot();
    const auto b = pool.allocate();
    REQUIRE_FALSE(b.ok());
    CHECK(b.error() == CoreError::kPoolExhausted);
    CHECK(pool.snapshot() == before);
    CHECK(pool.allocations() == 3u);
  }
  BlockPool empty(0);
  const auto b = empty.allocate();
  REQUIRE_FALSE(b.ok());
  CHECK(b.error() == CoreError::kPoolExhausted);
  CHECK(empty.free_list().empty());
}

TEST_CASE("pool: allocate_n takes all n blocks or none") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(5, order);
    std::vector<BlockId> out{kInvalidBlock};  // allocate_n appends
    REQUIRE(pool.allocate_n(3, out).ok());
    CHECK(out == std::vector<BlockId>{kInvalidBlock, 0, 1, 2});
    CHECK(pool.free_count() == 2u);

    const PoolSnapshot before = pool.snapshot();
    const auto too_many = pool.allocate_n(3, out);
    REQUIRE_FALSE(too_many.ok());
    CHECK(too_many.error() == CoreError::kPoolExhausted);
    CHECK(out.size() == 4u);
    CHECK(pool.snapshot() == before);

    REQUIRE(pool.allocate_n(2, out).ok());
    CHECK(out == std::vector<BlockId>{kInvalidBlock, 0, 1, 2, 3, 4});
    CHECK(pool.free_count() == 0u);
    REQUIRE(pool.allocate_n(0, out).ok());  // nothing needed: fine even when exhausted
    CHECK(out.size() == 6u);
    for (BlockId b = 0; b < 5; ++b) CHECK(pool.refcount(b) == 1u);
  }
}

TEST_CASE("pool: writable gives Existing for the only reference, without allocating") {
  BlockPool pool(3);
  const BlockId b = must_allocate(pool);
  pool.set_filled(b, 4);
  const PoolSnapshot before = pool.snapshot();
  const auto action = pool.writable(b);
  REQUIRE(action.ok());
  CHECK(action.value() == CopyOnWrite::existing(b));
  CHECK(action.value().kind == CopyOnWrite::Kind::kExisting);
  CHECK(action.value().block == b);
  CHECK(action.value().source == kInvalidBlock);
  CHECK(pool.snapshot() == before);
}

TEST_CASE("pool: writable gives Allocated for an invalid entry") {
  BlockPool pool(3);
  (void)must_allocate(pool);
  const auto action = pool.writable(kInvalidBlock);
  REQUIRE(action.ok());
  CHECK(action.value().kind == CopyOnWrite::Kind::kAllocated);
  CHECK(action.value() == CopyOnWrite::allocated(1));
  CHECK(pool.refcount(1) == 1u);
  CHECK(pool.filled(1) == 0u);
  CHECK(pool.allocations() == 2u);
}

TEST_CASE("pool: writable of a shared block copies it and drops one source reference") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(4, order);
    const BlockId source = must_allocate(pool);
    pool.set_filled(source, 7);
    REQUIRE(pool.retain(source).ok());
    REQUIRE(pool.retain(source).ok());  // refcount 3
    const auto action = pool.writable(source);
    REQUIRE(action.ok());
    const CopyOnWrite cow = action.value();
    CHECK(cow.kind == CopyOnWrite::Kind::kCopy);
    CHECK(cow.source == source);
    CHECK(cow.block != source);
    CHECK(cow == CopyOnWrite::copy(source, 1));
    CHECK(pool.refcount(source) == 2u);
    CHECK(pool.refcount(cow.block) == 1u);
    CHECK(pool.filled(cow.block) == 7u);  // the copy carries the filled count
    CHECK(pool.filled(source) == 7u);
    CHECK(pool.used_count() == 2u);
    CHECK(pool.allocations() == 2u);
    CHECK(pool.frees() == 0u);

    // The last sharer writes in place.
    const auto second = pool.writable(source);
    REQUIRE(second.ok());
    CHECK(second.value().kind == CopyOnWrite::Kind::kCopy);
    CHECK(pool.refcount(source) == 1u);
    const auto third = pool.writable(source);
    REQUIRE(third.ok());
    CHECK(third.value() == CopyOnWrite::existing(source));
  }
}

TEST_CASE("pool: writable fails without side effects on stale entries and exhaustion") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(2, order);
    const BlockId a = must_allocate(pool);
    const BlockId stale = must_allocate(pool);
    must_release(pool, stale);
    PoolSnapshot before = pool.snapshot();
    auto action = pool.writable(stale);
    REQUIRE_FALSE(action.ok());
    CHECK(action.error() == CoreError::kBlockNotLive);
    CHECK(pool.snapshot() == before);

    // Exhaust the pool, then ask for a copy and for a fresh block.
    (void)must_allocate(pool);
    REQUIRE(pool.retain(a).ok());
    pool.set_filled(a, 2);
    before = pool.snapshot();
    action = pool.writable(a);
    REQUIRE_FALSE(action.ok());
    CHECK(action.error() == CoreError::kPoolExhausted);
    CHECK(pool.refcount(a) == 2u);
    CHECK(pool.snapshot() == before);
    action = pool.writable(kInvalidBlock);
    REQUIRE_FALSE(action.ok());
    CHECK(action.error() == CoreError::kPoolExhausted);
    CHECK(pool.snapshot() == before);
  }
}

TEST_CASE("pool: allocations and frees count every allocation and every return to the list") {
  BlockPool pool(4, AllocOrder::kFifo);
  CHECK(pool.allocations() == 0u);
  CHECK(pool.frees() == 0u);
  const BlockId a = must_allocate(pool);
  const BlockId b = must_allocate(pool);
  REQUIRE(pool.retain(a).ok());
  must_release(pool, a);  // still live: not a free
  CHECK(pool.frees() == 0u);
  REQUIRE(pool.writable(a).ok());  // Existing: no allocation
  CHECK(pool.allocations() == 2u);
  REQUIRE(pool.retain(b).ok());
  REQUIRE(pool.writable(b).ok());  // Copy: one allocation
  CHECK(pool.allocations() == 3u);
  must_release(pool, a);
  must_release(pool, b);
  CHECK(pool.frees() == 2u);
  CHECK(pool.used_count() == 1u);
  (void)pool.allocate();
  (void)pool.allocate();
  (void)pool.allocate();
  const auto fails = pool.allocate();  // exhausted: not counted
  CHECK_FALSE(fails.ok());
  CHECK(pool.allocations() == 6u);
  const PoolSnapshot snap = pool.snapshot();
  CHECK(snap.allocations == 6u);
  CHECK(snap.frees == 2u);
}

TEST_CASE("pool: snapshots capture refcounts, filled counts and the free list order") {
  BlockPool pool(3, AllocOrder::kLifo);
  const BlockId a = must_allocate(pool);
  const BlockId b = must_allocate(pool);
  pool.set_filled(a, 3);
  REQUIRE(pool.retain(b).ok());
  const PoolSnapshot snap = pool.snapshot();
  CHECK(snap.refcounts == std::vector<std::uint32_t>{1, 2, 0});
  CHECK(snap.filled == std::vector<std::uint32_t>{3, 0, 0});
  CHECK(snap.free_list == std::vector<BlockId>{2});

  // Same counters, different free-list order: the snapshots differ.
  BlockPool x(3, AllocOrder::kLifo);
  BlockPool y(3, AllocOrder::kLifo);
  (void)allocate_all(x, 3);
  (void)allocate_all(y, 3);
  must_release(x, 0);
  must_release(x, 1);
  must_release(y, 1);
  must_release(y, 0);
  CHECK(x.snapshot().refcounts == y.snapshot().refcounts);
  CHECK_FALSE(x.snapshot() == y.snapshot());
}

TEST_CASE("pool: filled_total follows set_filled, copies and frees") {
  BlockPool pool(4);
  CHECK(pool.filled_total() == 0u);
  const BlockId a = must_allocate(pool);
  const BlockId b = must_allocate(pool);
  pool.set_filled(a, 5);
  pool.set_filled(b, 3);
  CHECK(pool.filled_total() == 8u);
  pool.set_filled(a, 2);  // overwrites, does not add
  CHECK(pool.filled_total() == 5u);
  REQUIRE(pool.retain(a).ok());
  const auto copy = pool.writable(a);  // the copy carries 2 more
  REQUIRE(copy.ok());
  CHECK(pool.filled_total() == 7u);
  must_release(pool, b);  // a free block holds nothing
  CHECK(pool.filled_total() == 4u);
  must_release(pool, a);
  must_release(pool, copy.value().block);
  CHECK(pool.filled_total() == 0u);
  // A block taken again starts empty.
  const BlockId c = must_allocate(pool);
  CHECK(pool.filled(c) == 0u);
  CHECK(pool.filled_total() == 0u);
}

TEST_CASE("pool: recycle is release then allocate of the only free block, or refuses untouched") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool recycled(4, order);
    BlockPool round_trip(4, order);
    std::vector<BlockId> a = allocate_all(recycled, 4);
    std::vector<BlockId> b = allocate_all(round_trip, 4);
    REQUIRE(a == b);
    recycled.set_filled(a[2], 5);
    round_trip.set_filled(b[2], 5);
    // The free list is empty and the caller holds the only reference.
    REQUIRE(recycled.recycle(a[2]).ok());
    must_release(round_trip, b[2]);
    CHECK(must_allocate(round_trip) == b[2]);
    CHECK(recycled.snapshot() == round_trip.snapshot());
    CHECK(recycled.filled_total() == round_trip.filled_total());

    // Shared, free, out of range, or with a block free: refused, nothing changes.
    REQUIRE(recycled.retain(a[0]).ok());
    must_release(recycled, a[1]);
    const PoolSnapshot before = recycled.snapshot();
    for (BlockId refused : {a[0], a[1], BlockId{4}, a[3]}) {
      auto status = recycled.recycle(refused);
      REQUIRE_FALSE(status.ok());
      CHECK(status.error() ==
            (refused == 4 ? CoreError::kBlockOutOfRange : CoreError::kBlockNotLive));
      CHECK(recycled.snapshot() == before);
    }
  }
}

TEST_CASE("pool: recycle_all is recycle of each block, or refuses untouched") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool all(6, order);
    BlockPool each(6, order);
    std::vector<BlockId> a = allocate_all(all, 6);
    std::vector<BlockId> b = allocate_all(each, 6);
    REQUIRE(a == b);
    for (std::size_t i = 0; i < a.size(); ++i) {
      all.set_filled(a[i], static_cast<std::uint32_t>(i + 1));
      each.set_filled(b[i], static_cast<std::uint32_t>(i + 1));
    }
    const std::vector<BlockId> run = {a[4], a[1], a[2]};
    REQUIRE(all.recycle_all(run).ok());
    for (BlockId x : run) REQUIRE(each.recycle(x).ok());
    CHECK(all.snapshot() == each.snapshot());
    CHECK(all.filled_total() == each.filled_total());
    CHECK(all.frees() == each.frees());
    CHECK(all.allocations() == each.allocations());
    CHECK(all.filled(a[4]) == 0);
    CHECK(all.filled(a[0]) == 1);

    // One block shared, out of range, or a block free: refused, nothing changes.
    REQUIRE(all.retain(a[0]).ok());
    const PoolSnapshot before = all.snapshot();
    const std::uint64_t filled_before = all.filled_total();
    for (const std::vector<BlockId>& refused :
         {std::vector<BlockId>{a[3], a[0]}, std::vector<BlockId>{a[3], BlockId{6}}}) {
      auto status = all.recycle_all(refused);
      REQUIRE_FALSE(status.ok());
      CHECK(status.error() ==
            (refused[1] == 6 ? CoreError::kBlockOutOfRange : CoreError::kBlockNotLive));
      CHECK(all.snapshot() == before);
      CHECK(all.filled_total() == filled_before);
    }
    must_release(all, a[5]);
    const PoolSnapshot with_free = all.snapshot();
    auto status = all.recycle_all(std::vector<BlockId>{a[3]});
    REQUIRE_FALSE(status.ok());
    CHECK(status.error() == CoreError::kBlockNotLive);
    CHECK(all.snapshot() == with_free);
  }
}

TEST_CASE("pool: errors print with fmt") {
  CHECK(fmt::format("{}", CoreError::kPoolExhausted) == "pool exhausted");
  CHECK(fmt::format("{}", CoreError::kBlockNotLive) == "block not live");
  CHECK(fmt::format("{}", CoreError::kRefcountOverflow) == "refcount overflow");
  CHECK(fmt::format("[{:>16}]", CoreError::kSizeMismatch) == "[   size mismatch]");
  const CoreError all[] = {CoreError::kPoolExhausted,  CoreError::kBlockOutOfRange,
                           CoreError::kBlockNotLive,   CoreError::kRefcountOverflow,
                           CoreError::kInvalidConfig,  CoreError::kOutputTooSmall,
                           CoreError::kPageOutOfRange, CoreError::kTargetNotEmpty,
                           CoreError::kSizeMismatch,   CoreError::kLengthExceeded};
  std::set<std::string> names;
  for (CoreError error : all) {
    const std::string name = fmt::format("{}", error);
    CHECK(name == to_string(error));
    CHECK(name != "unknown error");
    names.insert(name);
  }
  CHECK(names.size() == std::size(all));
}

}  // namespace
}  // namespace kvreplay
