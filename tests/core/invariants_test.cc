// check_invariants / InvariantChecker: silent on healthy states built by real
// operations, and names the broken invariant for each planted fault.
#include <string>
#include <vector>

#include "core/invariants.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

using test::kAllOrders;
using test::must_append;

using Access = BlockPoolTestAccess;
using TableAccess = BlockTableTestAccess;

// Requires a violation of `invariant` whose message contains every fragment.
void require_violation(const std::optional<InvariantViolation>& violation,
                       std::string_view invariant,
                       std::initializer_list<std::string_view> fragments) {
  INFO("got " << test::describe(violation));
  REQUIRE(violation.has_value());
  CHECK(violation->invariant == invariant);
  for (std::string_view fragment : fragments) {
    INFO("expected fragment '" << fragment << "'");
    CHECK(violation->message.find(fragment) != std::string::npos);
  }
}

// A small world built by real operations: a prefix shared by two sequences
// (one of which copied the shared partial page on write), a fork, and a
// released sequence. Page size 3, pool of 16.
struct World {
  explicit World(AllocOrder order) : pool(16, order) {
    (void)must_append(prefix, 7, pool);  // 3 pages, the last with 1 token
    REQUIRE(a.install_shared_prefix(prefix.entries(), 7, pool).ok());
    REQUIRE(b.install_shared_prefix(prefix.entries(), 7, pool).ok());
    (void)must_append(a, 5, pool);  // copies page 2, adds page 3
    REQUIRE(a.fork_into(c, pool).ok());
    (void)must_append(c, 1, pool);  // opens page 4 (page 3 is full)
    SequenceBlockTable gone(6, 3);
    (void)must_append(gone, 4, pool);
    REQUIRE(gone.release_all(pool).ok());
  }
  std::optional<InvariantViolation> check() const {
    return test::check(pool, 3, {&prefix, &a, &b, &c});
  }

  BlockPool pool;
  SequenceBlockTable prefix{6, 3};
  SequenceBlockTable a{6, 3};
  SequenceBlockTable b{6, 3};
  SequenceBlockTable c{6, 3};
};

TEST_CASE("invariants: healthy states built by real operations pass") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    World world(order);
    CHECK(test::describe(world.check()) == "no violation");
    // Releasing in any order keeps the world healthy.
    REQUIRE(world.prefix.release_all(world.pool).ok());
    CHECK(test::describe(world.check()) == "no violation");
    REQUIRE(world.a.release_all(world.pool).ok());
    CHECK(test::describe(world.check()) == "no violation");
    REQUIRE(world.c.release_all(world.pool).ok());
    REQUIRE(world.b.release_all(world.pool).ok());
    CHECK(test::describe(world.check()) == "no violation");
    CHECK(world.pool.used_count() == 0u);
  }
  const BlockPool empty(0);
  CHECK(test::describe(test::check(empty, 16, {})) == "no violation");
}

TEST_CASE("invariants: holds outside tables count as references") {
  World world(AllocOrder::kLifo);
  // A prefix-cache hold: the cache keeps the prefix pages after its table goes.
  std::vector<BlockId> holds(world.prefix.entries().begin(), world.prefix.entries().end());
  for (BlockId b : holds) REQUIRE(world.pool.retain(b).ok());
  CHECK(test::describe(test::check(world.pool, 3, {&world.prefix, &world.a, &world.b, &world.c},
                                   holds)) == "no violation");
  // Without the holds, block 0 (held by the four tables) has one reference too many.
  require_violation(world.check(), "I1", {"block 0:", "refcount 5 but 4 references", "t0 page 0"});
  // A hold naming a block past the pool.
  holds.push_back(16);
  require_violation(
      test::check(world.pool, 3, {&world.prefix, &world.a, &world.b, &world.c}, holds), "I1",
      {"hold", "block 16", "out of range"});
}

TEST_CASE("invariants: one InvariantChecker can be reused across pools and states") {
  InvariantChecker checker;
  World big(AllocOrder::kFifo);
  const std::vector<TableRef> big_refs{
      {&big.prefix, "prefix"}, {&big.a, "a"}, {&big.b, "b"}, {&big.c, "c"}};
  CHECK(test::describe(checker.check(big.pool, 3, big_refs)) == "no violation");

  BlockPool small(2);
  SequenceBlockTable table(2, 3);
  (void)must_append(table, 4, small);
  const std::vector<TableRef> small_refs{{&table, "seq 7"}};
  CHECK(test::describe(checker.check(small, 3, small_refs)) == "no violation");
  Access::refcount(small, 1) = 2;
  require_violation(checker.check(small, 3, small_refs), "I1",
                    {"block 1", "refcount 2 but 1 reference", "seq 7 page 1"});
  Access::refcount(small, 1) = 1;
  CHECK(test::describe(checker.check(small, 3, small_refs)) == "no violation");
  CHECK(test::describe(checker.check(big.pool, 3, big_refs)) == "no violation");
}

TEST_CASE("invariants: I1 catches a leaked block") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    {  // Allocated and never referenced.
      World world(order);
      const auto leaked = world.pool.allocate();
      REQUIRE(leaked.ok());
      require_violation(
          world.check(), "I1",
          {fmt::format("block {}:", leaked.value()), "refcount 1 but 0 references", "(leaked)"});
    }
    {  // A refcount bumped with no reference.
      World world(order);
      const BlockId b = world.b.get(0).value();  // held by prefix, a, b, c
      Access::refcount(world.pool, b) += 1;
      require_violation(world.check(), "I1",
                        {fmt::format("block {}:", b), "refcount 5 but 4 references"});
    }
  }
}

// A pool of 8 with one table of two pages (5 tokens, page size 3).
struct Owner {
  explicit Owner(AllocOrder order) : pool(8, order) { (void)must_append(owner, 5, pool); }
  BlockPool pool;
  SequenceBlockTable owner{4, 3};
  SequenceBlockTable intruder{4, 3};
};

TEST_CASE("invariants: I1 catches a reference the refcount does not count") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    {  // Two tables share a block with refcount 1.
      Owner w(order);
      TableAccess::entries(w.intruder) = {w.owner.get(0).value(), w.owner.get(1).value()};
      TableAccess::length(w.intruder) = 5;
      require_violation(test::check(w.pool, 3, {&w.owner, &w.intruder}), "I1",
                        {fmt::format("block {}:", w.owner.get(0).value()),
                         "refcount 1 but 2 references", "t0 page 0"});
    }
    {  // One table points at a block twice.
      Owner w(order);
      const BlockId first = w.owner.get(0).value();
      const BlockId b = w.owner.get(1).value();
      TableAccess::entries(w.owner)[0] = b;
      w.pool.set_filled(b, 3);
      REQUIRE(w.pool.release(first).ok());
      require_violation(test::check(w.pool, 3, {&w.owner}), "I1",
                        {fmt::format("block {}:", b), "refcount 1 but 2 references"});
    }
    {  // A table points at a free block.
      Owner w(order);
      const BlockId free_block = w.pool.free_list().front();
      TableAccess::entries(w.intruder) = {free_block};
      TableAccess::length(w.intruder) = 1;
      require_violation(
          test::check(w.pool, 3, {&w.owner, &w.intruder}), "I1",
          {fmt::format("block {}:", free_block), "refcount 0 but 1 reference", "t1 page 0"});
    }
    {  // A table points past the pool.
      Owner w(order);
      TableAccess::entries(w.intruder) = {8};
      TableAccess::length(w.intruder) = 1;
      require_violation(test::check(w.pool, 3, {&w.owner, &w.intruder}), "I1",
                        {"t1 page 0", "block 8", "out of range"});
    }
  }
}

TEST_CASE("invariants: I2 catches a block on the free list twice") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    World world(order);
    std::vector<BlockId> list = world.pool.free_list();
    REQUIRE(list.size() >= 3);
    list.back() = list.front();  // the first block twice, the last one missing
    Access::set_free_list(world.pool, list);
    require_violation(world.check(), "I2",
                      {fmt::format("block {} ", list.front()), "on the free list twice"});
  }
}

TEST_CASE("invariants: I2 catches a live block on the free list") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    World world(order);
    std::vector<BlockId> list = world.pool.free_list();
    const BlockId live = world.a.get(0).value();
    list.push_back(live);
    list.erase(list.begin());
    Access::set_free_list(world.pool, list);
    require_violation(world.check(), "I2",
                      {fmt::format("block {} ", live), "on the free list with refcount 4"});
  }
}

TEST_CASE("invariants: I2 catches a free block missing from the free list") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    World world(order);
    std::vector<BlockId> list = world.pool.free_list();
    const BlockId missing = list[list.size() / 2];
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(list.size() / 2));
    Access::set_free_list(world.pool, list);
    require_violation(
        world.check(), "I2",
        {fmt::format("block {} ", missing), "refcount 0 but is not on the free list"});
  }
}

TEST_CASE("invariants: I2 catches a free-list entry past the pool") {
  World world(AllocOrder::kLowest);
  std::vector<BlockId> list = world.pool.free_list();
  list.back() = 99;
  Access::set_free_list(world.pool, list);
  require_violation(world.check(), "I2", {"block 99", "out of range"});
}

TEST_CASE("invariants: I3 catches a valid page beyond the length") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    World world(order);  // b: 7 tokens in 3 pages
    TableAccess::length(world.b) = 6;
    require_violation(world.check(), "I3", {"t2 page 2", "lies beyond length 6"});
  }
}

TEST_CASE("invariants: I3 catches an invalid page within the length") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    {  // The length runs past the stored entries.
      World world(order);
      TableAccess::length(world.a) = 13;  // a: 4 full pages; 13 tokens need 5
      require_violation(world.check(), "I3", {"t1 page 4", "invalid within length 13"});
    }
    {  // A hole in the middle.
      World world(order);
      const BlockId b = world.c.get(1).value();
      TableAccess::entries(world.c)[1] = kInvalidBlock;
      REQUIRE(world.pool.release(b).ok());  // keep I1 intact
      require_violation(world.check(), "I3", {"t3 page 1", "invalid within length"});
    }
  }
}

TEST_CASE("invariants: I3 catches filled above page_tokens") {
  World world(AllocOrder::kLifo);
  const BlockId b = world.a.get(3).value();
  world.pool.set_filled(b, 4);
  require_violation(world.check(), "I3", {fmt::format("block {}:", b), "filled 4 > page_tokens 3"});
}

TEST_CASE("invariants: I3 catches filled below the tokens written") {
  for (AllocOrder order : kAllOrders) {
    INFO(to_string(order));
    {  // A full page.
      World world(order);
      const BlockId b = world.b.get(1).value();
      world.pool.set_filled(b, 2);
      require_violation(world.check(), "I3",
                        {fmt::format("block {}:", b), "filled 2 < 3 tokens written"});
    }
    {  // A partial last page. c: 7 + 5 + 1 = 13 tokens; page 4 holds 1 token.
      World world(order);
      REQUIRE(world.c.length() == 13u);
      const BlockId b = world.c.get(4).value();
      world.pool.set_filled(b, 0);
      require_violation(world.check(), "I3",
                        {"t3 page 4", fmt::format("block {}", b), "filled 0 < 1 tokens written"});
    }
  }
}

TEST_CASE("invariants: I3 catches a free block with a filled count") {
  World world(AllocOrder::kFifo);
  const BlockId b = world.pool.free_list().front();
  Access::filled(world.pool, b) = 1;
  require_violation(world.check(), "I3", {fmt::format("free block {} has filled 1", b)});
}

TEST_CASE("invariants: I3 catches a length past the capacity") {
  BlockPool pool(4);
  SequenceBlockTable table(1, 3);
  (void)must_append(table, 3, pool);
  TableAccess::length(table) = 4;
  require_violation(test::check(pool, 3, {&table}), "I3", {"t0", "length 4 > capacity 3"});
}

TEST_CASE("invariants: I2 is reported before I1 and I1 before I3") {
  World world(AllocOrder::kLifo);
  const BlockId b = world.b.get(1).value();
  world.pool.set_filled(b, 0);                                // I3
  Access::refcount(world.pool, world.a.get(0).value()) += 1;  // I1
  require_violation(world.check(), "I1", {});
  std::vector<BlockId> list = world.pool.free_list();
  list.push_back(list.front());  // I2
  Access::set_free_list(world.pool, list);
  require_violation(world.check(), "I2", {"twice"});
}

}  // namespace
}  // namespace kvreplay
