// SequenceBlockTable: get, ensure_writable, append, fork_into,
// install_shared_prefix, release_all.
#include <vector>

#include "core/block_table.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

using test::entries_of;
using test::kAllOrders;
using test::must_append;

TEST_CASE("table: a new table is empty with its fixed capacity") {
  const SequenceBlockTable table(5, 3);
  CHECK(table.capacity_pages() == 5u);
  CHECK(table.page_tokens() == 3u);
  CHECK(table.capacity_tokens() == 15u);
  CHECK(table.length() == 0u);
  CHECK(table.empty());
  CHECK(table.entries().empty());
  for (std::uint32_t page : {0u, 4u, 5u, 1000u}) CHECK_FALSE(table.get(page).has_value());
  CHECK(SequenceBlockTable(0xFFFFFFFFu, 0xFFFFFFFFu).capacity_tokens() ==
        0xFFFFFFFFull * 0xFFFFFFFFull);
}

TEST_CASE("table: get returns the block of valid pages and nothing elsewhere") {
  BlockPool pool(8);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 7, pool);  // pages 0, 1, 2
  REQUIRE(table.get(0) == std::optional<BlockId>(0));
  REQUIRE(table.get(1) == std::optional<BlockId>(1));
  REQUIRE(table.get(2) == std::optional<BlockId>(2));
  CHECK_FALSE(table.get(3).has_value());  // within capacity, not written
  CHECK_FALSE(table.get(4).has_value());  // beyond capacity
  CHECK_FALSE(table.empty());
}

TEST_CASE("table: continued_pages counts pages whose block follows the previous page's") {
  BlockPool pool(16, AllocOrder::kLowest);
  SequenceBlockTable table(8, 4);
  must_append(table, 12, pool);  // b0 b1 b2
  CHECK(entries_of(table) == std::vector<BlockId>{0, 1, 2});
  CHECK(table.continued_pages() == 2u);
  // A fork shares the pages, and the count.
  SequenceBlockTable child(8, 4);
  REQUIRE(table.fork_into(child, pool).ok());
  CHECK(child.continued_pages() == 2u);
  // Making page 1 writable copies it to b3: [b0 b3 b2] continues nowhere.
  REQUIRE(child.ensure_writable(1, pool).ok());
  CHECK(entries_of(child) == std::vector<BlockId>{0, 3, 2});
  CHECK(child.continued_pages() == 0u);
  // A new page takes b4, the lowest free block, which does not follow b2.
  must_append(child, 1, pool);
  CHECK(entries_of(child) == std::vector<BlockId>{0, 3, 2, 4});
  CHECK(child.continued_pages() == 0u);
  must_append(child, 4, pool);  // b5 after b4
  CHECK(child.continued_pages() == 1u);
  // A shared prefix installed into an empty table is counted at once.
  SequenceBlockTable shared(8, 4);
  REQUIRE(shared.install_shared_prefix(std::vector<BlockId>{0, 1, 2}, 12, pool).ok());
  CHECK(shared.continued_pages() == 2u);
  // A failed append changes nothing, the count included.
  BlockPool tiny(2, AllocOrder::kLowest);
  SequenceBlockTable full(8, 4);
  must_append(full, 8, tiny);
  const SequenceBlockTable before = full;
  CHECK_FALSE(full.append(4, tiny).ok());
  CHECK(full == before);
  CHECK(full.continued_pages() == 1u);
  // Releasing leaves nothing to count.
  REQUIRE(child.release_all(pool).ok());
  CHECK(child.continued_pages() == 0u);
}

TEST_CASE("table: append of a single page allocates one block and records filled") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(4, order);
    SequenceBlockTable table(4, 16);
    const AppendEffect effect = must_append(table, 5, pool);
    CHECK(effect.copies.empty());
    CHECK(effect.first_page == 0u);
    CHECK(effect.new_pages == 1u);
    CHECK(table.length() == 5u);
    CHECK(entries_of(table) == std::vector<BlockId>{0});
    CHECK(pool.filled(0) == 5u);
    CHECK(pool.refcount(0) == 1u);
    CHECK(pool.used_count() == 1u);
  }
}

TEST_CASE(
    "table: append_fresh is append from a page boundary, and refuses anything else untouched") {
  for (AllocOrder order : kAllOrders) {
    BlockPool fresh_pool(8, order);
    BlockPool append_pool(8, order);
    SequenceBlockTable fresh(4, 3);
    SequenceBlockTable appended(4, 3);
    // 7 tokens from empty, then 2 more after a full page boundary: the same
    // blocks, fills, continued pages and pool as append.
    auto pages = fresh.append_fresh(6, fresh_pool);
    REQUIRE(pages.ok());
    CHECK(pages.value() == 2u);
    (void)must_append(appended, 6, append_pool);
    auto more = fresh.append_fresh(2, fresh_pool);
    REQUIRE(more.ok());
    CHECK(more.value() == 1u);
    (void)must_append(appended, 2, append_pool);
    CHECK(fresh == appended);
    CHECK(fresh.continued_pages() == appended.continued_pages());
    CHECK(fresh_pool.snapshot() == append_pool.snapshot());
    for (BlockId b : fresh.entries()) CHECK(fresh_pool.filled(b) == append_pool.filled(b));

    // Not on a page boundary (8 tokens: page 2 holds 2): refused, nothing changes.
    const SequenceBlockTable before = fresh;
    const PoolSnapshot pool_before = fresh_pool.snapshot();
    auto off_boundary = fresh.append_fresh(1, fresh_pool);
    REQUIRE_FALSE(off_boundary.ok());
    CHECK(off_boundary.error() == CoreError::kPageOutOfRange);
    CHECK(fresh == before);
    CHECK(fresh_pool.snapshot() == pool_before);
  }
  // Past capacity, and more pages than free blocks: refused, nothing changes.
  BlockPool pool(3);
  SequenceBlockTable table(4, 3);
  REQUIRE(table.append_fresh(3, pool).ok());
  const SequenceBlockTable before = table;
  const PoolSnapshot pool_before = pool.snapshot();
  auto too_long = table.append_fresh(10, pool);
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.error() == CoreError::kLengthExceeded);
  auto exhausted = table.append_fresh(7, pool);  // 3 pages, 2 free
  REQUIRE_FALSE(exhausted.ok());
  CHECK(exhausted.error() == CoreError::kPoolExhausted);
  CHECK(table == before);
  CHECK(pool.snapshot() == pool_before);
}

TEST_CASE(
    "table: append_taken is append_fresh onto blocks the caller took, and refuses untouched") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool taken_pool(8, order);
    BlockPool fresh_pool(8, order);
    SequenceBlockTable taken(4, 3);
    SequenceBlockTable fresh(4, 3);
    // 7 tokens (3 pages) onto the blocks the pool would hand out anyway.
    std::vector<BlockId> blocks;
    REQUIRE(taken_pool.allocate_n(3, blocks).ok());
    auto pages = taken.append_taken(7, blocks, taken_pool);
    REQUIRE(pages.ok());
    CHECK(pages.value() == 3u);
    REQUIRE(fresh.append_fresh(7, fresh_pool).ok());
    CHECK(taken == fresh);
    CHECK(taken.continued_pages() == fresh.continued_pages());
    CHECK(taken_pool.snapshot() == fresh_pool.snapshot());
    CHECK(taken_pool.filled_total() == 7u);
    CHECK(taken_pool.filled_total() == fresh_pool.filled_total());
  }
  BlockPool pool(8);
  SequenceBlockTable table(4, 3);
  std::vector<BlockId> first;
  REQUIRE(pool.allocate_n(1, first).ok());
  REQUIRE(table.append_taken(3, first, pool).ok());
  std::vector<BlockId> two;
  REQUIRE(pool.allocate_n(2, two).ok());
  const SequenceBlockTable before = table;
  auto expect_refused = [&](std::uint32_t tokens, std::vector<BlockId> blocks, CoreError error) {
    const PoolSnapshot pool_before = pool.snapshot();
    auto refused = table.append_taken(tokens, blocks, pool);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error() == error);
    CHECK(table == before);
    CHECK(pool.snapshot() == pool_before);
  };
  expect_refused(3, two, CoreError::kSizeMismatch);  // 1 page, 2 blocks
  expect_refused(10, {two[0], two[1], 6, 7}, CoreError::kLengthExceeded);
  expect_refused(6, {two[0], first[0]}, CoreError::kBlockNotLive);  // first[0]: the table's
  REQUIRE(pool.retain(two[1]).ok());  // shared: not the caller's alone
  expect_refused(6, two, CoreError::kBlockNotLive);
  REQUIRE(pool.release(two[1]).ok());
  expect_refused(6, {two[0], 8}, CoreError::kBlockOutOfRange);
  expect_refused(6, {two[0], 7}, CoreError::kBlockNotLive);  // free
  // Off a page boundary: refused.
  REQUIRE(table.append(1, pool).ok());
  const SequenceBlockTable partial = table;
  auto off = table.append_taken(3, std::vector<BlockId>{two[0]}, pool);
  REQUIRE_FALSE(off.ok());
  CHECK(off.error() == CoreError::kPageOutOfRange);
  CHECK(table == partial);
}

TEST_CASE("table: append across pages fills each page and leaves a partial last page") {
  BlockPool pool(8, AllocOrder::kFifo);
  SequenceBlockTable table(4, 3);
  const AppendEffect effect = must_append(table, 7, pool);
  CHECK(effect.new_pages == 3u);
  CHECK(effect.first_page == 0u);
  CHECK(effect.copies.empty());
  CHECK(entries_of(table) == std::vector<BlockId>{0, 1, 2});
  CHECK(pool.filled(0) == 3u);
  CHECK(pool.filled(1) == 3u);
  CHECK(pool.filled(2) == 1u);
  CHECK(table.length() == 7u);
}

TEST_CASE("table: append into a partial last page held alone writes in place") {
  BlockPool pool(8);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 7, pool);
  const PoolSnapshot before = pool.snapshot();
  AppendEffect effect = must_append(table, 1, pool);
  CHECK(effect.new_pages == 0u);
  CHECK(effect.first_page == 2u);
  CHECK(effect.copies.empty());
  CHECK(entries_of(table) == std::vector<BlockId>{0, 1, 2});
  CHECK(pool.filled(2) == 2u);
  CHECK(pool.allocations() == before.allocations);

  // Finishing the page and opening the next: one new page, first_page 2.
  effect = must_append(table, 2, pool);
  CHECK(effect.new_pages == 1u);
  CHECK(effect.first_page == 2u);
  CHECK(pool.filled(2) == 3u);
  CHECK(pool.filled(3) == 1u);
  CHECK(table.length() == 10u);

  // Zero tokens: nothing happens.
  const PoolSnapshot after = pool.snapshot();
  effect = must_append(table, 0, pool);
  CHECK(effect.new_pages == 0u);
  CHECK(effect.copies.empty());
  CHECK(pool.snapshot() == after);
  CHECK(table.length() == 10u);
}

TEST_CASE("table: a chunk onto a page held alone takes the free list's blocks in its order") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    // A free list out of id order: blocks taken, then released shuffled.
    BlockPool pool(16, order);
    SequenceBlockTable other(16, 4);
    (void)must_append(other, 4 * 12, pool);
    SequenceBlockTable table(16, 4);
    (void)must_append(table, 5, pool);  // a partial last page, this table's alone
    for (std::uint32_t page : {7u, 2u, 9u, 3u, 4u, 11u}) {
      REQUIRE(pool.release(other.entries()[page]).ok());
    }
    const std::vector<BlockId> free_before = pool.free_list();
    const BlockId tail = table.entries()[1];
    // 3 tokens finish the partial page, 9 more open three pages.
    const AppendEffect effect = must_append(table, 12, pool);
    CHECK(effect.new_pages == 3u);
    CHECK(effect.first_page == 1u);
    CHECK(effect.copies.empty());
    const std::vector<BlockId> want{table.entries()[0], tail, free_before[0], free_before[1],
                                    free_before[2]};
    CHECK(entries_of(table) == want);
    CHECK(pool.filled(tail) == 4u);
    CHECK(pool.filled(want[2]) == 4u);
    CHECK(pool.filled(want[3]) == 4u);
    CHECK(pool.filled(want[4]) == 1u);
    CHECK(table.length() == 17u);
    std::uint32_t continued = 0;
    for (std::size_t i = 1; i < want.size(); ++i) continued += want[i] == want[i - 1] + 1 ? 1 : 0;
    CHECK(table.continued_pages() == continued);
    CHECK(pool.free_list() == std::vector<BlockId>(free_before.begin() + 3, free_before.end()));

    // A chunk the free blocks cannot hold changes nothing.
    const PoolSnapshot before = pool.snapshot();
    REQUIRE(pool.free_count() == 5u);
    auto refused = table.append(3 + 4 * 5 + 1, pool);  // the partial page, then six more
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error() == CoreError::kPoolExhausted);
    CHECK(pool.snapshot() == before);
    CHECK(entries_of(table) == want);
    CHECK(table.length() == 17u);
  }
}

TEST_CASE("table: append into a shared partial last page makes exactly one copy") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(8, order);
    SequenceBlockTable parent(4, 3);
    SequenceBlockTable child(4, 3);
    (void)must_append(parent, 7, pool);  // blocks 0, 1, 2; page 2 holds 1 token
    REQUIRE(parent.fork_into(child, pool).ok());
    const BlockId shared = parent.get(2).value();
    REQUIRE(pool.refcount(shared) == 2u);

    // 4 tokens: 2 finish the copied page, 2 open a new page.
    const AppendEffect effect = must_append(parent, 4, pool);
    REQUIRE(effect.copies.size() == 1u);
    const CopyOnWrite cow = effect.copies[0];
    CHECK(cow.kind == CopyOnWrite::Kind::kCopy);
    CHECK(cow.source == shared);
    CHECK(cow.block != shared);
    CHECK(effect.new_pages == 1u);
    CHECK(effect.first_page == 2u);
    CHECK(parent.get(2) == std::optional<BlockId>(cow.block));
    CHECK(parent.length() == 11u);
    CHECK(pool.filled(cow.block) == 3u);  // 1 carried over + 2 written
    CHECK(pool.filled(parent.get(3).value()) == 2u);
    // The child still sees the original page, unchanged.
    CHECK(child.get(2) == std::optional<BlockId>(shared));
    CHECK(child.length() == 7u);
    CHECK(pool.filled(shared) == 1u);
    CHECK(pool.refcount(shared) == 1u);
    CHECK(pool.refcount(cow.block) == 1u);
    // Full pages stay shared.
    CHECK(parent.get(0) == child.get(0));
    CHECK(pool.refcount(parent.get(0).value()) == 2u);
    CHECK(test::describe(test::check(pool, 3, {&parent, &child})) == "no violation");
  }
}

TEST_CASE("table: append after a full shared last page opens a new page without a copy") {
  BlockPool pool(8);
  SequenceBlockTable parent(4, 3);
  SequenceBlockTable child(4, 3);
  (void)must_append(parent, 6, pool);
  REQUIRE(parent.fork_into(child, pool).ok());
  const AppendEffect effect = must_append(child, 1, pool);
  CHECK(effect.copies.empty());
  CHECK(effect.new_pages == 1u);
  CHECK(effect.first_page == 2u);
  CHECK(child.get(1) == parent.get(1));
  CHECK(pool.refcount(parent.get(1).value()) == 2u);
}

TEST_CASE("table: append past the capacity is kLengthExceeded") {
  BlockPool pool(8);
  SequenceBlockTable table(2, 3);  // 6 tokens
  SECTION("from empty") {
    const auto appended = table.append(7, pool);
    REQUIRE_FALSE(appended.ok());
    CHECK(appended.error() == CoreError::kLengthExceeded);
    CHECK(pool.used_count() == 0u);
    CHECK(table.empty());
  }
  SECTION("exactly to capacity, then one more") {
    (void)must_append(table, 6, pool);
    CHECK(table.length() == 6u);
    const auto appended = table.append(1, pool);
    REQUIRE_FALSE(appended.ok());
    CHECK(appended.error() == CoreError::kLengthExceeded);
    CHECK(table.length() == 6u);
  }
  SECTION("a token count that would wrap 32 bits") {
    (void)must_append(table, 1, pool);
    const auto appended = table.append(0xFFFFFFFFu, pool);
    REQUIRE_FALSE(appended.ok());
    CHECK(appended.error() == CoreError::kLengthExceeded);
    CHECK(table.length() == 1u);
  }
}

TEST_CASE("table: blocks_needed counts new pages and the copy of a shared partial page") {
  BlockPool pool(16);
  SequenceBlockTable parent(6, 3);
  SequenceBlockTable child(6, 3);
  auto needed = parent.blocks_needed(0, pool);
  REQUIRE(needed.ok());
  CHECK(needed.value() == 0u);
  needed = parent.blocks_needed(7, pool);  // 3 fresh pages
  REQUIRE(needed.ok());
  CHECK(needed.value() == 3u);
  (void)must_append(parent, 7, pool);  // page 2 holds 1 token
  const PoolSnapshot alone = pool.snapshot();
  needed = parent.blocks_needed(2, pool);  // in place
  REQUIRE(needed.ok());
  CHECK(needed.value() == 0u);
  needed = parent.blocks_needed(3, pool);  // in place, then one new page
  REQUIRE(needed.ok());
  CHECK(needed.value() == 1u);
  CHECK(pool.snapshot() == alone);  // asking changes nothing

  REQUIRE(parent.fork_into(child, pool).ok());
  needed = child.blocks_needed(1, pool);  // the copy
  REQUIRE(needed.ok());
  CHECK(needed.value() == 1u);
  needed = child.blocks_needed(6, pool);  // the copy and two new pages
  REQUIRE(needed.ok());
  CHECK(needed.value() == 3u);
  const AppendEffect effect = must_append(child, 6, pool);
  CHECK(effect.copies.size() + effect.new_pages == 3u);

  needed = parent.blocks_needed(12, pool);  // 7 + 12 > 18
  REQUIRE_FALSE(needed.ok());
  CHECK(needed.error() == CoreError::kLengthExceeded);
  // A stale partial page is reported as append would.
  BlockTableTestAccess::entries(parent)[2] = pool.free_list().front();
  needed = parent.blocks_needed(1, pool);
  REQUIRE_FALSE(needed.ok());
  CHECK(needed.error() == CoreError::kBlockNotLive);
  // A full pool does not make blocks_needed fail: it only counts.
  BlockPool tiny(1);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 1, tiny);
  needed = table.blocks_needed(9, tiny);
  REQUIRE(needed.ok());
  CHECK(needed.value() == 3u);
}

TEST_CASE("table: ensure_writable allocates an invalid page without changing the length") {
  BlockPool pool(4);
  SequenceBlockTable table(3, 2);
  const auto action = table.ensure_writable(0, pool);
  REQUIRE(action.ok());
  CHECK(action.value() == CopyOnWrite::allocated(0));
  CHECK(table.get(0) == std::optional<BlockId>(0));
  CHECK(table.length() == 0u);
  CHECK(pool.refcount(0) == 1u);
}

TEST_CASE("table: ensure_writable of a page held alone is Existing") {
  BlockPool pool(4);
  SequenceBlockTable table(3, 2);
  (void)must_append(table, 3, pool);
  const PoolSnapshot before = pool.snapshot();
  const auto action = table.ensure_writable(1, pool);
  REQUIRE(action.ok());
  CHECK(action.value() == CopyOnWrite::existing(1));
  CHECK(pool.snapshot() == before);
  CHECK(entries_of(table) == std::vector<BlockId>{0, 1});
}

TEST_CASE("table: ensure_writable of a shared page copies it and repoints the entry") {
  BlockPool pool(4);
  SequenceBlockTable parent(3, 2);
  SequenceBlockTable child(3, 2);
  (void)must_append(parent, 3, pool);
  REQUIRE(parent.fork_into(child, pool).ok());
  const auto action = child.ensure_writable(0, pool);
  REQUIRE(action.ok());
  CHECK(action.value() == CopyOnWrite::copy(0, 2));
  CHECK(child.get(0) == std::optional<BlockId>(2));
  CHECK(parent.get(0) == std::optional<BlockId>(0));
  CHECK(pool.refcount(0) == 1u);
  CHECK(pool.refcount(2) == 1u);
  CHECK(pool.filled(2) == 2u);
  CHECK(child.length() == 3u);
  CHECK(test::describe(test::check(pool, 2, {&parent, &child})) == "no violation");
}

TEST_CASE("table: ensure_writable past the capacity is kPageOutOfRange") {
  BlockPool pool(4);
  SequenceBlockTable table(3, 2);
  for (std::uint32_t page : {3u, 4u, 0xFFFFFFFFu}) {
    INFO("page " << page);
    const auto action = table.ensure_writable(page, pool);
    REQUIRE_FALSE(action.ok());
    CHECK(action.error() == CoreError::kPageOutOfRange);
  }
  CHECK(pool.used_count() == 0u);
  CHECK(table.empty());
}

TEST_CASE("table: fork_into shares every page with the same length") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(8, order);
    SequenceBlockTable parent(4, 3);
    SequenceBlockTable child(4, 3);
    (void)must_append(parent, 8, pool);
    const std::uint64_t allocations = pool.allocations();
    REQUIRE(parent.fork_into(child, pool).ok());
    CHECK(child.length() == 8u);
    CHECK(entries_of(child) == entries_of(parent));
    CHECK(child == parent);
    for (BlockId b : parent.entries()) CHECK(pool.refcount(b) == 2u);
    CHECK(pool.allocations() == allocations);
    CHECK(pool.used_count() == 3u);
  }
}

TEST_CASE("table: fork_into of an empty table leaves both empty") {
  BlockPool pool(2);
  const SequenceBlockTable parent(4, 3);
  SequenceBlockTable child(4, 3);
  REQUIRE(parent.fork_into(child, pool).ok());
  CHECK(child.empty());
  CHECK(pool.used_count() == 0u);
}

TEST_CASE("table: fork_into rejects tables of another shape and non-empty targets") {
  BlockPool pool(8);
  SequenceBlockTable parent(4, 3);
  (void)must_append(parent, 4, pool);
  SECTION("capacity differs") {
    SequenceBlockTable target(5, 3);
    const test::WorldSnapshot before = test::snapshot(pool, {&parent, &target});
    const auto forked = parent.fork_into(target, pool);
    REQUIRE_FALSE(forked.ok());
    CHECK(forked.error() == CoreError::kSizeMismatch);
    CHECK(test::snapshot(pool, {&parent, &target}) == before);
  }
  SECTION("page size differs") {
    SequenceBlockTable target(4, 4);
    const test::WorldSnapshot before = test::snapshot(pool, {&parent, &target});
    const auto forked = parent.fork_into(target, pool);
    REQUIRE_FALSE(forked.ok());
    CHECK(forked.error() == CoreError::kSizeMismatch);
    CHECK(test::snapshot(pool, {&parent, &target}) == before);
  }
  SECTION("target holds pages") {
    SequenceBlockTable target(4, 3);
    (void)must_append(target, 1, pool);
    const test::WorldSnapshot before = test::snapshot(pool, {&parent, &target});
    const auto forked = parent.fork_into(target, pool);
    REQUIRE_FALSE(forked.ok());
    CHECK(forked.error() == CoreError::kTargetNotEmpty);
    CHECK(test::snapshot(pool, {&parent, &target}) == before);
  }
  SECTION("target holds a page but has length 0") {
    SequenceBlockTable target(4, 3);
    REQUIRE(target.ensure_writable(1, pool).ok());
    const test::WorldSnapshot before = test::snapshot(pool, {&parent, &target});
    const auto forked = parent.fork_into(target, pool);
    REQUIRE_FALSE(forked.ok());
    CHECK(forked.error() == CoreError::kTargetNotEmpty);
    CHECK(test::snapshot(pool, {&parent, &target}) == before);
  }
}

TEST_CASE("table: install_shared_prefix shares the prefix pages and sets the length") {
  for (std::uint32_t page_tokens : test::kPageSizes) {
    INFO("page_tokens " << page_tokens);
    BlockPool pool(16);
    SequenceBlockTable prefix(6, page_tokens);
    SequenceBlockTable table(6, page_tokens);
    const std::uint32_t tokens = 2 * page_tokens + 1;  // 3 pages, the last partial
    (void)must_append(prefix, tokens, pool);
    REQUIRE(table.install_shared_prefix(prefix.entries(), tokens, pool).ok());
    CHECK(table.length() == tokens);
    CHECK(entries_of(table) == entries_of(prefix));
    for (BlockId b : prefix.entries()) CHECK(pool.refcount(b) == 2u);
    CHECK(test::describe(test::check(pool, page_tokens, {&prefix, &table})) == "no violation");
  }
}

TEST_CASE("table: install_shared_prefix accepts an empty prefix") {
  BlockPool pool(2);
  SequenceBlockTable table(4, 3);
  REQUIRE(table.install_shared_prefix({}, 0, pool).ok());
  CHECK(table.empty());
}

TEST_CASE("table: install_shared_prefix needs exactly ceil(tokens / page_tokens) pages") {
  BlockPool pool(8);
  SequenceBlockTable prefix(4, 3);
  (void)must_append(prefix, 9, pool);  // 3 full pages
  const std::vector<BlockId> pages = entries_of(prefix);
  const PoolSnapshot before = pool.snapshot();
  struct Case {
    std::size_t pages;
    std::uint32_t tokens;
  };
  // 3 pages hold 7..9 tokens; 2 pages hold 4..6.
  for (const Case c : {Case{3, 6}, Case{3, 10}, Case{2, 7}, Case{2, 3}, Case{1, 0}, Case{0, 1}}) {
    INFO(c.pages << " pages for " << c.tokens << " tokens");
    SequenceBlockTable table(4, 3);
    const auto installed =
        table.install_shared_prefix(std::span(pages).first(c.pages), c.tokens, pool);
    REQUIRE_FALSE(installed.ok());
    CHECK(installed.error() == CoreError::kSizeMismatch);
    CHECK(table.empty());
    CHECK(pool.snapshot() == before);
  }
  for (const Case c : {Case{3, 7}, Case{3, 9}, Case{2, 4}, Case{1, 1}}) {
    INFO(c.pages << " pages for " << c.tokens << " tokens");
    SequenceBlockTable table(4, 3);
    REQUIRE(table.install_shared_prefix(std::span(pages).first(c.pages), c.tokens, pool).ok());
    CHECK(table.length() == c.tokens);
    REQUIRE(table.release_all(pool).ok());
  }
}

TEST_CASE("table: install_shared_prefix with more pages than the capacity is kPageOutOfRange") {
  BlockPool pool(8);
  SequenceBlockTable prefix(4, 3);
  (void)must_append(prefix, 12, pool);
  const PoolSnapshot before = pool.snapshot();
  SequenceBlockTable table(3, 3);
  const auto installed = table.install_shared_prefix(prefix.entries(), 12, pool);
  REQUIRE_FALSE(installed.ok());
  CHECK(installed.error() == CoreError::kPageOutOfRange);
  CHECK(table.empty());
  CHECK(pool.snapshot() == before);
}

TEST_CASE("table: install_shared_prefix into a non-empty table is kTargetNotEmpty") {
  BlockPool pool(8);
  SequenceBlockTable prefix(4, 3);
  (void)must_append(prefix, 4, pool);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 1, pool);
  const test::WorldSnapshot before = test::snapshot(pool, {&prefix, &table});
  const auto installed = table.install_shared_prefix(prefix.entries(), 4, pool);
  REQUIRE_FALSE(installed.ok());
  CHECK(installed.error() == CoreError::kTargetNotEmpty);
  CHECK(test::snapshot(pool, {&prefix, &table}) == before);
}

TEST_CASE("table: install_shared_prefix of a stale or invalid page fails") {
  BlockPool pool(8);
  SequenceBlockTable prefix(4, 3);
  (void)must_append(prefix, 6, pool);
  std::vector<BlockId> pages = entries_of(prefix);
  SECTION("stale") {
    pages[1] = pool.free_list().front();
    const PoolSnapshot before = pool.snapshot();
    SequenceBlockTable table(4, 3);
    const auto installed = table.install_shared_prefix(pages, 6, pool);
    REQUIRE_FALSE(installed.ok());
    CHECK(installed.error() == CoreError::kBlockNotLive);
    CHECK(table.empty());
    CHECK(pool.snapshot() == before);
  }
  SECTION("invalid") {
    pages[1] = kInvalidBlock;
    const PoolSnapshot before = pool.snapshot();
    SequenceBlockTable table(4, 3);
    const auto installed = table.install_shared_prefix(pages, 6, pool);
    REQUIRE_FALSE(installed.ok());
    CHECK(installed.error() == CoreError::kBlockOutOfRange);
    CHECK(pool.snapshot() == before);
  }
}

TEST_CASE("table: release_all frees every page held alone and resets the table") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool pool(8, order);
    SequenceBlockTable table(4, 3);
    (void)must_append(table, 10, pool);
    REQUIRE(pool.used_count() == 4u);
    REQUIRE(table.release_all(pool).ok());
    CHECK(table.empty());
    CHECK(table.length() == 0u);
    CHECK(table.entries().empty());
    CHECK(pool.used_count() == 0u);
    CHECK(pool.frees() == 4u);
    for (BlockId b = 0; b < 4; ++b) CHECK(pool.filled(b) == 0u);
    // The table can be used again.
    (void)must_append(table, 2, pool);
    CHECK(table.length() == 2u);
  }
}

TEST_CASE("table: release_all can hand the released entries over") {
  // The same release as release_all's, the entries given to the caller in
  // page order; on error nothing changes, the caller's vector included.
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    BlockPool plain_pool(8, order);
    BlockPool pool(8, order);
    SequenceBlockTable plain(4, 3);
    SequenceBlockTable table(4, 3);
    (void)must_append(plain, 10, plain_pool);
    (void)must_append(table, 10, pool);
    REQUIRE(pool.retain(table.entries()[1]).ok());  // page 1 stays live
    REQUIRE(plain_pool.retain(plain.entries()[1]).ok());
    const std::vector<BlockId> entries(table.entries().begin(), table.entries().end());
    std::vector<BlockId> released = {7, 7};  // replaced, not appended to
    REQUIRE(table.release_all(pool, released).ok());
    REQUIRE(plain.release_all(plain_pool).ok());
    CHECK(released == entries);
    CHECK(table.empty());
    CHECK(table.continued_pages() == 0u);
    CHECK(pool.snapshot() == plain_pool.snapshot());
    // A bad entry: refused, the table, the pool and the vector unchanged.
    (void)must_append(table, 4, pool);
    BlockTableTestAccess::entries(table)[1] = 8;
    const test::WorldSnapshot before = test::snapshot(pool, {&table});
    const std::vector<BlockId> kept = released;
    const auto refused = table.release_all(pool, released);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error() == CoreError::kBlockOutOfRange);
    CHECK(test::snapshot(pool, {&table}) == before);
    CHECK(released == kept);
  }
}

TEST_CASE("table: release_all of shared pages keeps them live for the other holder") {
  BlockPool pool(8);
  SequenceBlockTable parent(4, 3);
  SequenceBlockTable child(4, 3);
  (void)must_append(parent, 5, pool);
  REQUIRE(parent.fork_into(child, pool).ok());
  (void)must_append(child, 4, pool);  // copies page 1, adds page 2
  REQUIRE(child.release_all(pool).ok());
  CHECK(child.empty());
  CHECK(pool.used_count() == 2u);
  for (BlockId b : parent.entries()) CHECK(pool.refcount(b) == 1u);
  CHECK(test::describe(test::check(pool, 3, {&parent, &child})) == "no violation");
}

TEST_CASE("table: release_all validates references before releasing anything") {
  BlockPool pool(8);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 9, pool);  // blocks 0, 1, 2
  SECTION("the same block twice with one reference is kBlockNotLive") {
    BlockTableTestAccess::entries(table)[2] = 0;
    const test::WorldSnapshot before = test::snapshot(pool, {&table});
    const auto released = table.release_all(pool);
    REQUIRE_FALSE(released.ok());
    CHECK(released.error() == CoreError::kBlockNotLive);
    CHECK(test::snapshot(pool, {&table}) == before);
  }
  SECTION("the same block twice with two references is released twice") {
    BlockTableTestAccess::entries(table)[2] = 0;
    REQUIRE(pool.retain(0).ok());
    REQUIRE(pool.release(2).ok());
    REQUIRE(table.release_all(pool).ok());
    CHECK(pool.refcount(0) == 0u);
    CHECK(pool.used_count() == 0u);
    CHECK(table.empty());
  }
  SECTION("an out-of-range entry is kBlockOutOfRange") {
    BlockTableTestAccess::entries(table)[1] = 8;
    const test::WorldSnapshot before = test::snapshot(pool, {&table});
    const auto released = table.release_all(pool);
    REQUIRE_FALSE(released.ok());
    CHECK(released.error() == CoreError::kBlockOutOfRange);
    CHECK(test::snapshot(pool, {&table}) == before);
  }
}

TEST_CASE("table: release_all of an empty table changes nothing") {
  BlockPool pool(2);
  (void)pool.allocate();
  SequenceBlockTable table(4, 3);
  const PoolSnapshot before = pool.snapshot();
  REQUIRE(table.release_all(pool).ok());
  CHECK(pool.snapshot() == before);
}

}  // namespace
}  // namespace kvreplay
