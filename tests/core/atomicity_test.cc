// Failure atomicity: every operation either succeeds completely or leaves the
// pool and every table exactly as they were. Each test forces a failure at
// every possible point of an operation and compares whole-world snapshots.
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

using test::entries_of;
using test::kAllOrders;
using test::kPageSizes;
using test::must_append;
using test::snapshot;
using test::WorldSnapshot;

std::string healthy(const BlockPool& pool, std::uint32_t page_tokens,
                    std::initializer_list<const SequenceBlockTable*> tables) {
  return test::describe(test::check(pool, page_tokens, tables));
}

TEST_CASE("atomicity: snapshots notice any single change") {
  BlockPool pool(4, AllocOrder::kFifo);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 4, pool);
  const WorldSnapshot before = snapshot(pool, {&table});
  SECTION("a refcount") {
    BlockPoolTestAccess::refcount(pool, 0) += 1;
    CHECK_FALSE(snapshot(pool, {&table}) == before);
  }
  SECTION("a filled count") {
    pool.set_filled(1, 2);
    CHECK_FALSE(snapshot(pool, {&table}) == before);
  }
  SECTION("the free-list order") {
    BlockPoolTestAccess::set_free_list(pool, {3, 2});
    CHECK_FALSE(snapshot(pool, {&table}) == before);
  }
  SECTION("a table entry") {
    BlockTableTestAccess::entries(table)[1] = 2;
    CHECK_FALSE(snapshot(pool, {&table}) == before);
  }
  SECTION("a table length") {
    BlockTableTestAccess::length(table) = 5;
    CHECK_FALSE(snapshot(pool, {&table}) == before);
  }
  SECTION("the counters") {
    REQUIRE(pool.retain(0).ok());
    REQUIRE(pool.release(0).ok());
    CHECK(snapshot(pool, {&table}) == before);  // a round trip is invisible...
    const auto b = pool.allocate();
    REQUIRE(b.ok());
    REQUIRE(pool.release(b.value()).ok());
    CHECK_FALSE(snapshot(pool, {&table}) == before);  // ...an allocation is not
  }
}

TEST_CASE("atomicity: a multi-page append fails whole for every shortfall of free blocks") {
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      // start: tokens already in the table (0, or a partial page written in place).
      for (std::uint32_t start : {0u, page_tokens > 1 ? 1u : page_tokens}) {
        for (std::uint32_t m = 1; m <= 4; ++m) {
          // Tokens that need exactly m new blocks, the last page partial when possible.
          const std::uint32_t to_page_end = (page_tokens - start % page_tokens) % page_tokens;
          const std::uint32_t tokens = to_page_end + (m - 1) * page_tokens + 1;
          for (std::uint32_t k = 0; k <= m; ++k) {
            INFO(to_string(order) << ", page_tokens " << page_tokens << ", start " << start
                                  << ", m " << m << ", free " << k);
            const std::uint32_t total = m + 4;
            BlockPool pool(total, order);
            SequenceBlockTable table(8, page_tokens);
            SequenceBlockTable filler(total, page_tokens);
            if (start > 0) (void)must_append(table, start, pool);
            test::fill_until_free(filler, pool, k);
            const WorldSnapshot before = snapshot(pool, {&table, &filler});
            const auto appended = table.append(tokens, pool);
            if (k < m) {
              REQUIRE_FALSE(appended.ok());
              CHECK(appended.error() == CoreError::kPoolExhausted);
              CHECK(snapshot(pool, {&table, &filler}) == before);
            } else {
              REQUIRE(appended.ok());
              CHECK(appended.value().new_pages == m);
              CHECK(appended.value().copies.empty());
              CHECK(pool.free_count() == 0u);
              CHECK(table.length() == start + tokens);
            }
            CHECK(healthy(pool, page_tokens, {&table, &filler}) == "no violation");
          }
        }
      }
    }
  }
}

TEST_CASE("atomicity: an append that copies a shared page and adds pages fails whole") {
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : {3u, 16u}) {  // 1-token pages are never partial
      for (std::uint32_t n = 0; n <= 3; ++n) {     // new pages beyond the copied one
        const std::uint32_t m = n + 1;             // blocks needed: the copy and n pages
        // Page 1 holds 1 token and is shared; fill it, then n pages, the last partial.
        const std::uint32_t tokens = n == 0 ? 1 : (page_tokens - 1) + (n - 1) * page_tokens + 1;
        for (bool writer_is_parent : {false, true}) {
          for (std::uint32_t k = 0; k <= m; ++k) {
            INFO(to_string(order) << ", page_tokens " << page_tokens << ", n " << n << ", free "
                                  << k
                                  << (writer_is_parent ? ", parent writes" : ", child writes"));
            const std::uint32_t total = m + 6;
            BlockPool pool(total, order);
            SequenceBlockTable parent(8, page_tokens);
            SequenceBlockTable child(8, page_tokens);
            SequenceBlockTable filler(total, page_tokens);
            (void)must_append(parent, page_tokens + 1, pool);
            REQUIRE(parent.fork_into(child, pool).ok());
            const BlockId shared = parent.get(1).value();
            test::fill_until_free(filler, pool, k);
            SequenceBlockTable& writer = writer_is_parent ? parent : child;
            const WorldSnapshot before = snapshot(pool, {&parent, &child, &filler});
            const auto appended = writer.append(tokens, pool);
            if (k < m) {
              REQUIRE_FALSE(appended.ok());
              CHECK(appended.error() == CoreError::kPoolExhausted);
              CHECK(snapshot(pool, {&parent, &child, &filler}) == before);
              CHECK(pool.refcount(shared) == 2u);
            } else {
              REQUIRE(appended.ok());
              REQUIRE(appended.value().copies.size() == 1u);
              CHECK(appended.value().copies[0].source == shared);
              CHECK(appended.value().new_pages == n);
              CHECK(pool.refcount(shared) == 1u);
              CHECK(pool.free_count() == 0u);
            }
            CHECK(healthy(pool, page_tokens, {&parent, &child, &filler}) == "no violation");
          }
        }
      }
    }
  }
}

TEST_CASE("atomicity: an append over a stale or out-of-range last page changes nothing") {
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : {3u, 16u}) {
      INFO(to_string(order) << ", page_tokens " << page_tokens);
      BlockPool pool(8, order);
      SequenceBlockTable table(8, page_tokens);
      (void)must_append(table, page_tokens + 1, pool);  // page 1 partial
      for (const auto& [planted, error] :
           {std::pair{pool.free_list().front(), CoreError::kBlockNotLive},
            std::pair{BlockId{8}, CoreError::kBlockOutOfRange}}) {
        INFO("planted block " << planted);
        SequenceBlockTable faulty = table;
        BlockTableTestAccess::entries(faulty)[1] = planted;
        // Asking for the page to be finished plus more pages must fail before any allocation.
        for (std::uint32_t tokens : {1u, page_tokens, 3 * page_tokens}) {
          INFO(tokens << " tokens");
          const WorldSnapshot before = snapshot(pool, {&faulty});
          const auto appended = faulty.append(tokens, pool);
          REQUIRE_FALSE(appended.ok());
          CHECK(appended.error() == error);
          CHECK(snapshot(pool, {&faulty}) == before);
        }
      }
      // Past the capacity: also nothing.
      const WorldSnapshot before = snapshot(pool, {&table});
      const auto appended = table.append(7 * page_tokens, pool);
      REQUIRE_FALSE(appended.ok());
      CHECK(appended.error() == CoreError::kLengthExceeded);
      CHECK(snapshot(pool, {&table}) == before);
    }
  }
}

// A parent of `pages` pages (the last partial when page_tokens > 1).
std::uint32_t tokens_for_pages(std::uint32_t pages, std::uint32_t page_tokens) {
  return pages * page_tokens - (page_tokens > 1 ? 1 : 0);
}

TEST_CASE("atomicity: fork_into rolls back when retain overflows at any page") {
  constexpr std::uint32_t kPages = 5;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      for (std::uint32_t i = 0; i < kPages; ++i) {
        INFO(to_string(order) << ", page_tokens " << page_tokens << ", overflow at page " << i);
        {  // The limit reached through holders in other tables.
          // max_refcount 3: the parent and two holders of page i reach it.
          BlockPool pool(kPages + 2, order, 3);
          SequenceBlockTable parent(kPages, page_tokens);
          SequenceBlockTable child(kPages, page_tokens);
          SequenceBlockTable holder_a(kPages, page_tokens);
          SequenceBlockTable holder_b(kPages, page_tokens);
          (void)must_append(parent, tokens_for_pages(kPages, page_tokens), pool);
          const BlockId page_i = parent.get(i).value();
          REQUIRE(holder_a.install_shared_prefix({&page_i, 1}, 1, pool).ok());
          REQUIRE(holder_b.install_shared_prefix({&page_i, 1}, 1, pool).ok());
          REQUIRE(pool.refcount(page_i) == 3u);
          const WorldSnapshot before = snapshot(pool, {&parent, &child, &holder_a, &holder_b});
          const auto forked = parent.fork_into(child, pool);
          REQUIRE_FALSE(forked.ok());
          CHECK(forked.error() == CoreError::kRefcountOverflow);
          CHECK(snapshot(pool, {&parent, &child, &holder_a, &holder_b}) == before);
          CHECK(child.empty());
          CHECK(healthy(pool, page_tokens, {&parent, &child, &holder_a, &holder_b}) ==
                "no violation");
          // Once a holder lets go, the same fork succeeds.
          REQUIRE(holder_b.release_all(pool).ok());
          REQUIRE(parent.fork_into(child, pool).ok());
          CHECK(child == parent);
        }
        {  // The limit planted through test access.
          BlockPool pool(kPages + 2, order);
          SequenceBlockTable parent(kPages, page_tokens);
          SequenceBlockTable child(kPages, page_tokens);
          (void)must_append(parent, tokens_for_pages(kPages, page_tokens), pool);
          BlockPoolTestAccess::refcount(pool, parent.get(i).value()) = BlockPool::kMaxRefcount;
          const WorldSnapshot before = snapshot(pool, {&parent, &child});
          const auto forked = parent.fork_into(child, pool);
          REQUIRE_FALSE(forked.ok());
          CHECK(forked.error() == CoreError::kRefcountOverflow);
          CHECK(snapshot(pool, {&parent, &child}) == before);
        }
      }
    }
  }
}

TEST_CASE("atomicity: fork_into rolls back on a stale or out-of-range page at any position") {
  constexpr std::uint32_t kPages = 5;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      for (std::uint32_t i = 0; i < kPages; ++i) {
        BlockPool pool(kPages + 2, order);
        SequenceBlockTable parent(kPages, page_tokens);
        (void)must_append(parent, tokens_for_pages(kPages, page_tokens), pool);
        for (const auto& [planted, error] :
             {std::pair{pool.free_list().front(), CoreError::kBlockNotLive},
              std::pair{kPages + 2, CoreError::kBlockOutOfRange},
              std::pair{kInvalidBlock - 1, CoreError::kBlockOutOfRange}}) {
          INFO(to_string(order) << ", page_tokens " << page_tokens << ", block " << planted
                                << " planted at page " << i);
          SequenceBlockTable faulty = parent;
          BlockTableTestAccess::entries(faulty)[i] = planted;
          SequenceBlockTable child(kPages, page_tokens);
          const WorldSnapshot before = snapshot(pool, {&faulty, &child});
          const auto forked = faulty.fork_into(child, pool);
          REQUIRE_FALSE(forked.ok());
          CHECK(forked.error() == error);
          CHECK(snapshot(pool, {&faulty, &child}) == before);
        }
      }
    }
  }
}

TEST_CASE("atomicity: install_shared_prefix rolls back on a freed page at any position") {
  constexpr std::uint32_t kPages = 5;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      for (std::uint32_t i = 0; i < kPages; ++i) {
        INFO(to_string(order) << ", page_tokens " << page_tokens << ", freed page " << i);
        // Prefix-cache blocks held outside any table; block i has been freed.
        BlockPool pool(kPages + 2, order);
        std::vector<BlockId> pages;
        REQUIRE(pool.allocate_n(kPages, pages).ok());
        for (BlockId b : pages) pool.set_filled(b, page_tokens);
        REQUIRE(pool.release(pages[i]).ok());
        SequenceBlockTable table(kPages, page_tokens);
        const WorldSnapshot before = snapshot(pool, {&table});
        const auto installed =
            table.install_shared_prefix(pages, tokens_for_pages(kPages, page_tokens), pool);
        REQUIRE_FALSE(installed.ok());
        CHECK(installed.error() == CoreError::kBlockNotLive);
        CHECK(snapshot(pool, {&table}) == before);
        for (std::uint32_t j = 0; j < kPages; ++j) {
          CHECK(pool.refcount(pages[j]) == (j == i ? 0u : 1u));
        }
      }
    }
  }
}

TEST_CASE("atomicity: install_shared_prefix rolls back on an invalid page at any position") {
  constexpr std::uint32_t kPages = 4;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      BlockPool pool(kPages + 1, order);
      SequenceBlockTable prefix(kPages, page_tokens);
      (void)must_append(prefix, tokens_for_pages(kPages, page_tokens), pool);
      for (std::uint32_t i = 0; i < kPages; ++i) {
        for (BlockId planted : {kInvalidBlock, BlockId{kPages + 1}}) {
          INFO(to_string(order) << ", page_tokens " << page_tokens << ", block " << planted
                                << " at " << i);
          std::vector<BlockId> pages = entries_of(prefix);
          pages[i] = planted;
          SequenceBlockTable table(kPages, page_tokens);
          const WorldSnapshot before = snapshot(pool, {&prefix, &table});
          const auto installed =
              table.install_shared_prefix(pages, tokens_for_pages(kPages, page_tokens), pool);
          REQUIRE_FALSE(installed.ok());
          CHECK(installed.error() == CoreError::kBlockOutOfRange);
          CHECK(snapshot(pool, {&prefix, &table}) == before);
        }
      }
    }
  }
}

TEST_CASE("atomicity: install_shared_prefix rolls back on a refcount overflow at any position") {
  constexpr std::uint32_t kPages = 5;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      for (std::uint32_t i = 0; i < kPages; ++i) {
        INFO(to_string(order) << ", page_tokens " << page_tokens << ", overflow at " << i);
        // max_refcount 2: the prefix table and one holder of page i reach it.
        BlockPool pool(kPages + 2, order, 2);
        SequenceBlockTable prefix(kPages, page_tokens);
        SequenceBlockTable holder(kPages, page_tokens);
        SequenceBlockTable table(kPages, page_tokens);
        const std::uint32_t tokens = tokens_for_pages(kPages, page_tokens);
        (void)must_append(prefix, tokens, pool);
        const BlockId page_i = prefix.get(i).value();
        REQUIRE(holder.install_shared_prefix({&page_i, 1}, 1, pool).ok());
        const WorldSnapshot before = snapshot(pool, {&prefix, &holder, &table});
        const auto installed = table.install_shared_prefix(prefix.entries(), tokens, pool);
        REQUIRE_FALSE(installed.ok());
        CHECK(installed.error() == CoreError::kRefcountOverflow);
        CHECK(snapshot(pool, {&prefix, &holder, &table}) == before);
        CHECK(healthy(pool, page_tokens, {&prefix, &holder, &table}) == "no violation");
      }
    }
  }
}

TEST_CASE("atomicity: skip_page changes nothing when it fails, at any page") {
  // A page skipped by a sliding window points at the null block: retained
  // first, so an overflow of the null block's refcount, a page already on it,
  // an invalid page and a stale block all leave the world as it was.
  constexpr std::uint32_t kPages = 4;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      for (std::uint32_t i = 0; i < kPages; ++i) {
        INFO(to_string(order) << ", page_tokens " << page_tokens << ", page " << i);
        // max_refcount 2: the null block's holder and one skipped page reach it.
        BlockPool pool(kPages + 3, order, 2);
        const BlockId null_block = pool.allocate().value();
        SequenceBlockTable table(kPages + 1, page_tokens);
        (void)must_append(table, tokens_for_pages(kPages, page_tokens), pool);
        const std::uint32_t other = (i + 1) % kPages;
        REQUIRE(table.skip_page(other, null_block, pool).ok());
        WorldSnapshot before = snapshot(pool, {&table});
        auto skipped = table.skip_page(i, null_block, pool);
        REQUIRE_FALSE(skipped.ok());
        CHECK(skipped.error() == CoreError::kRefcountOverflow);
        CHECK(snapshot(pool, {&table}) == before);
        // Already on the null block, or past the table's pages.
        CHECK(table.skip_page(other, null_block, pool).error() == CoreError::kPageOutOfRange);
        CHECK(table.skip_page(kPages, null_block, pool).error() == CoreError::kPageOutOfRange);
        CHECK(snapshot(pool, {&table}) == before);
      }
    }
  }
}

TEST_CASE("atomicity: release_all leaves the pool untouched when any entry is bad") {
  constexpr std::uint32_t kPages = 5;
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : kPageSizes) {
      BlockPool pool(kPages + 2, order);
      SequenceBlockTable table(kPages, page_tokens);
      (void)must_append(table, tokens_for_pages(kPages, page_tokens), pool);
      const std::vector<BlockId> good = entries_of(table);
      for (std::uint32_t i = 0; i < kPages; ++i) {
        struct Fault {
          const char* what;
          BlockId block;
          CoreError error;
        };
        const Fault faults[] = {
            {"a freed block", pool.free_list().front(), CoreError::kBlockNotLive},
            {"a block past the pool", kPages + 2, CoreError::kBlockOutOfRange},
            {"a second reference to the next page", good[(i + 1) % kPages],
             CoreError::kBlockNotLive},
        };
        for (const Fault& fault : faults) {
          INFO(to_string(order) << ", page_tokens " << page_tokens << ", " << fault.what
                                << " at page " << i);
          SequenceBlockTable faulty = table;
          BlockTableTestAccess::entries(faulty)[i] = fault.block;
          const WorldSnapshot before = snapshot(pool, {&faulty});
          const auto released = faulty.release_all(pool);
          REQUIRE_FALSE(released.ok());
          CHECK(released.error() == fault.error);
          CHECK(snapshot(pool, {&faulty}) == before);
        }
      }
      // The healthy table still releases.
      REQUIRE(table.release_all(pool).ok());
      CHECK(pool.used_count() == 0u);
    }
  }
}

TEST_CASE("atomicity: writable and ensure_writable on an exhausted pool change nothing") {
  for (AllocOrder order : kAllOrders) {
    for (std::uint32_t page_tokens : {3u, 16u}) {
      INFO(to_string(order) << ", page_tokens " << page_tokens);
      BlockPool pool(4, order);
      SequenceBlockTable parent(4, page_tokens);
      SequenceBlockTable child(4, page_tokens);
      SequenceBlockTable filler(4, page_tokens);
      (void)must_append(parent, page_tokens + 1, pool);
      REQUIRE(parent.fork_into(child, pool).ok());
      test::fill_until_free(filler, pool, 0);
      const WorldSnapshot before = snapshot(pool, {&parent, &child, &filler});
      const BlockId shared = parent.get(1).value();

      auto action = child.ensure_writable(1, pool);  // shared: needs a copy
      REQUIRE_FALSE(action.ok());
      CHECK(action.error() == CoreError::kPoolExhausted);
      CHECK(snapshot(pool, {&parent, &child, &filler}) == before);

      action = child.ensure_writable(2, pool);  // invalid: needs a block
      REQUIRE_FALSE(action.ok());
      CHECK(action.error() == CoreError::kPoolExhausted);
      CHECK(snapshot(pool, {&parent, &child, &filler}) == before);

      action = child.ensure_writable(4, pool);  // past the capacity
      REQUIRE_FALSE(action.ok());
      CHECK(action.error() == CoreError::kPageOutOfRange);
      CHECK(snapshot(pool, {&parent, &child, &filler}) == before);

      action = pool.writable(shared);
      REQUIRE_FALSE(action.ok());
      CHECK(action.error() == CoreError::kPoolExhausted);
      action = pool.writable(kInvalidBlock);
      REQUIRE_FALSE(action.ok());
      CHECK(action.error() == CoreError::kPoolExhausted);
      CHECK(snapshot(pool, {&parent, &child, &filler}) == before);

      // A page held alone stays writable in place even with no free block.
      action = filler.ensure_writable(0, pool);
      REQUIRE(action.ok());
      CHECK(action.value().kind == CopyOnWrite::Kind::kExisting);
      CHECK(snapshot(pool, {&parent, &child, &filler}) == before);
    }
  }
}

TEST_CASE("atomicity: ensure_writable of a stale entry changes nothing") {
  BlockPool pool(4);
  SequenceBlockTable table(4, 3);
  (void)must_append(table, 4, pool);
  BlockTableTestAccess::entries(table)[1] = pool.free_list().front();
  const WorldSnapshot before = snapshot(pool, {&table});
  const auto action = table.ensure_writable(1, pool);
  REQUIRE_FALSE(action.ok());
  CHECK(action.error() == CoreError::kBlockNotLive);
  CHECK(snapshot(pool, {&table}) == before);
}

}  // namespace
}  // namespace kvreplay
