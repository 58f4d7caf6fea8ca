// Shared helpers of the core tests: fault planting through the friend structs
// declared in block_pool.h / block_table.h, whole-state snapshots for the
// failure-atomicity tests, and Catch2 printers for the core types.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/config.h"
#include "core/error.h"
#include "core/invariants.h"

namespace kvreplay {

// Plants faults in a BlockPool by writing its private members.
struct BlockPoolTestAccess {
  static std::uint32_t& refcount(BlockPool& pool, BlockId b) { return pool.blocks_.at(b).refcount; }
  static std::uint32_t& filled(BlockPool& pool, BlockId b) { return pool.blocks_.at(b).filled; }

  // Rewrites the free list so that free_list() returns `list` (in allocation
  // order), in the storage layout of the pool's order. Refcounts are untouched,
  // so this can plant duplicates, live blocks or missing blocks.
  static void set_free_list(BlockPool& pool, const std::vector<BlockId>& list) {
    REQUIRE(list.size() <= pool.free_slots_.size());
    const auto size = static_cast<std::uint32_t>(list.size());
    switch (pool.order_) {
      case AllocOrder::kLifo:
      case AllocOrder::kVllm:
        for (std::uint32_t i = 0; i < size; ++i) pool.free_slots_[size - 1 - i] = list[i];
        break;
      case AllocOrder::kFifo:
        pool.free_head_ = 0;
        std::copy(list.begin(), list.end(), pool.free_slots_.begin());
        break;
      case AllocOrder::kLowest:
        std::copy(list.begin(), list.end(), pool.free_slots_.begin());
        std::make_heap(pool.free_slots_.begin(), pool.free_slots_.begin() + size, std::greater<>{});
        break;
    }
    pool.free_size_ = size;
  }
};

// Plants faults in a SequenceBlockTable by writing its private members.
struct BlockTableTestAccess {
  static std::vector<BlockId>& entries(SequenceBlockTable& table) { return table.entries_; }
  static std::uint32_t& length(SequenceBlockTable& table) { return table.length_; }
};

namespace test {

inline constexpr std::array<AllocOrder, 4> kAllOrders{AllocOrder::kLifo, AllocOrder::kFifo,
                                                      AllocOrder::kLowest, AllocOrder::kVllm};
inline constexpr std::array<std::uint32_t, 3> kPageSizes{1, 3, 16};

// Everything observable: the pool and a copy of each table, in a fixed order.
struct WorldSnapshot {
  PoolSnapshot pool;
  std::vector<SequenceBlockTable> tables;
  bool operator==(const WorldSnapshot&) const = default;
};

inline WorldSnapshot snapshot(const BlockPool& pool,
                              std::initializer_list<const SequenceBlockTable*> tables) {
  WorldSnapshot out{pool.snapshot(), {}};
  for (const SequenceBlockTable* table : tables) out.tables.push_back(*table);
  return out;
}

// Appends and requires success.
inline AppendEffect must_append(SequenceBlockTable& table, std::uint32_t tokens, BlockPool& pool) {
  auto effect = table.append(tokens, pool);
  INFO("append of " << tokens << " tokens failed");
  REQUIRE(effect.ok());
  return effect.value();
}

// Makes `filler` (page size 1 is simplest) take blocks until exactly `keep_free`
// are left. REQUIRES: enough capacity in filler.
inline void fill_until_free(SequenceBlockTable& filler, BlockPool& pool, std::uint32_t keep_free) {
  REQUIRE(pool.free_count() >= keep_free);
  const std::uint32_t take = pool.free_count() - keep_free;
  if (take == 0) return;
  // Top up a partial last page first so every later page costs one block.
  const std::uint32_t partial = filler.length() % filler.page_tokens();
  if (partial != 0) (void)must_append(filler, filler.page_tokens() - partial, pool);
  (void)must_append(filler, take * filler.page_tokens(), pool);
  REQUIRE(pool.free_count() == keep_free);
}

// The invariant checker over a list of tables labelled "t0", "t1", ...
inline std::optional<InvariantViolation> check(const BlockPool& pool, std::uint32_t page_tokens,
                                               std::initializer_list<const SequenceBlockTable*> ts,
                                               std::span<const BlockId> extra_holds = {}) {
  static constexpr std::array<std::string_view, 8> kLabels{"t0", "t1", "t2", "t3",
                                                           "t4", "t5", "t6", "t7"};
  std::vector<TableRef> refs;
  for (const SequenceBlockTable* table : ts) {
    refs.push_back(TableRef{table, kLabels.at(refs.size())});
  }
  return check_invariants(pool, page_tokens, refs, extra_holds);
}

inline std::string describe(const std::optional<InvariantViolation>& violation) {
  if (!violation) return "no violation";
  return fmt::format("{}: {}", violation->invariant, violation->message);
}

// Entries as a vector, for comparisons.
inline std::vector<BlockId> entries_of(const SequenceBlockTable& table) {
  return {table.entries().begin(), table.entries().end()};
}

}  // namespace test
}  // namespace kvreplay

namespace Catch {

template <>
struct StringMaker<kvreplay::CoreError> {
  static std::string convert(kvreplay::CoreError error) {
    return std::string(kvreplay::to_string(error));
  }
};

template <>
struct StringMaker<kvreplay::CopyOnWrite> {
  static std::string convert(const kvreplay::CopyOnWrite& cow) {
    switch (cow.kind) {
      case kvreplay::CopyOnWrite::Kind::kExisting: return fmt::format("Existing({})", cow.block);
      case kvreplay::CopyOnWrite::Kind::kAllocated: return fmt::format("Allocated({})", cow.block);
      case kvreplay::CopyOnWrite::Kind::kCopy:
        return fmt::format("Copy{{source {}, destination {}}}", cow.source, cow.block);
    }
    return "CopyOnWrite(?)";
  }
};

template <>
struct StringMaker<kvreplay::SequenceBlockTable> {
  static std::string convert(const kvreplay::SequenceBlockTable& table) {
    return fmt::format("table(capacity {} x {}, length {}, entries [{}])", table.capacity_pages(),
                       table.page_tokens(), table.length(), fmt::join(table.entries(), ", "));
  }
};

template <>
struct StringMaker<kvreplay::PoolSnapshot> {
  static std::string convert(const kvreplay::PoolSnapshot& s) {
    return fmt::format("pool(refcounts [{}], filled [{}], free [{}], allocations {}, frees {})",
                       fmt::join(s.refcounts, ","), fmt::join(s.filled, ","),
                       fmt::join(s.free_list, ","), s.allocations, s.frees);
  }
};

template <>
struct StringMaker<kvreplay::test::WorldSnapshot> {
  static std::string convert(const kvreplay::test::WorldSnapshot& s) {
    std::string out = StringMaker<kvreplay::PoolSnapshot>::convert(s.pool);
    for (const auto& table : s.tables) {
      out += "\n  " + StringMaker<kvreplay::SequenceBlockTable>::convert(table);
    }
    return out;
  }
};

}  // namespace Catch
