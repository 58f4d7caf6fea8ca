#include "core/invariants.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvreplay {

namespace {

InvariantViolation violation(std::string_view invariant, std::string message) {
  return InvariantViolation{std::string(invariant), std::move(message)};
}

// First place a block is referenced, for messages.
std::string describe_holder(std::span<const TableRef> tables, BlockId b) {
  for (const TableRef& ref : tables) {
    auto entries = ref.table->entries();
    for (std::size_t page = 0; page < entries.size(); ++page) {
      if (entries[page] == b) return fmt::format("{} page {}", ref.label, page);
    }
  }
  return "a hold";
}

}  // namespace

std::optional<InvariantViolation> InvariantChecker::check(const BlockPool& pool,
                                                          std::uint32_t page_tokens,
                                                          std::span<const TableRef> tables,
                                                          std::span<const BlockId> extra_holds) {
  const std::uint32_t total = pool.total();

  // I2: the free list, walked entry by entry.
  on_free_list_.assign(total, 0);
  std::vector<BlockId> free_list = pool.free_list();
  for (std::size_t i = 0; i < free_list.size(); ++i) {
    BlockId b = free_list[i];
    if (b >= total) {
      return violation(
          "I2",
          fmt::format("free list entry {} is block {}, out of range (pool of {})", i, b, total));
    }
    if (on_free_list_[b]) {
      return violation("I2", fmt::format("block {} is on the free list twice", b));
    }
    on_free_list_[b] = 1;
    if (pool.refcount(b) != 0) {
      return violation(
          "I2", fmt::format("block {} is on the free list with refcount {}", b, pool.refcount(b)));
    }
  }
  std::uint32_t live = 0;
  for (BlockId b = 0; b < total; ++b) {
    if (pool.refcount(b) > 0) {
      ++live;
    } else if (!on_free_list_[b]) {
      return violation("I2", fmt::format("block {} has refcount 0 but is not on the free list", b));
    }
  }
  if (std::uint64_t{live} + free_list.size() != total || pool.free_count() != free_list.size()) {
    return violation("I2",
                     fmt::format("used {} + free {} != total {}", live, free_list.size(), total));
  }

  // I1: recount references from the tables and holds.
  references_.assign(total, 0);
  for (const TableRef& ref : tables) {
    auto entries = ref.table->entries();
    for (std::size_t page = 0; page < entries.size(); ++page) {
      BlockId b = entries[page];
      if (b == kInvalidBlock) continue;
      if (b >= total) {
        return violation(
            "I1", fmt::format("{} page {} points at block {}, out of range (pool of {})", ref.label,
                              page, b, total));
      }
      ++references_[b];
    }
  }
  for (BlockId b : extra_holds) {
    if (b >= total) return violation("I1", fmt::format("a hold names block {}, out of range", b));
    ++references_[b];
  }
  for (BlockId b = 0; b < total; ++b) {
    if (references_[b] != pool.refcount(b)) {
      return violation(
          "I1",
          fmt::format("block {}: refcount {} but {} reference{}{}", b, pool.refcount(b),
                      references_[b], references_[b] == 1 ? "" : "s",
                      references_[b] == 0 ? std::string(" (leaked)")
                                          : fmt::format(" ({})", describe_holder(tables, b))));
    }
  }

  // I3: table shape and filled counts.
  for (BlockId b = 0; b < total; ++b) {
    if (pool.filled(b) > page_tokens) {
      return violation("I3", fmt::format("block {}: filled {} > page_tokens {}", b, pool.filled(b),
                                         page_tokens));
    }
    if (pool.refcount(b) == 0 && pool.filled(b) != 0) {
      return violation("I3", fmt::format("free block {} has filled {}", b, pool.filled(b)));
    }
  }
  for (const TableRef& ref : tables) {
    const SequenceBlockTable& table = *ref.table;
    if (table.length() > table.capacity_tokens()) {
      return violation("I3", fmt::format("{}: length {} > capacity {} tokens", ref.label,
                                         table.length(), table.capacity_tokens()));
    }
    // Each table is measured in its own page size.
    const std::uint64_t table_page = table.page_tokens();
    const std::uint64_t covering = (std::uint64_t{table.length()} + table_page - 1) / table_page;
    auto entries = table.entries();
    for (std::size_t page = 0; page < std::max<std::uint64_t>(covering, entries.size()); ++page) {
      BlockId b = page < entries.size() ? entries[page] : kInvalidBlock;
      if (page >= covering) {
        if (b != kInvalidBlock) {
          return violation("I3", fmt::format("{} page {} -> block {} lies beyond length {}",
                                             ref.label, page, b, table.length()));
        }
        continue;
      }
      if (b == kInvalidBlock) {
        return violation("I3", fmt::format("{} page {} is invalid within length {}", ref.label,
                                           page, table.length()));
      }
      if (b == ref.null_block) continue;  // a skipped page: no tokens held
      std::uint64_t tokens_here =
          std::min<std::uint64_t>(table_page, table.length() - page * table_page);
      if (pool.filled(b) < tokens_here) {
        return violation("I3", fmt::format("{} page {} -> block {}: filled {} < {} tokens written",
                                           ref.label, page, b, pool.filled(b), tokens_here));
      }
    }
  }
  return std::nullopt;
}

std::optional<InvariantViolation> check_invariants(const BlockPool& pool, std::uint32_t page_tokens,
                                                   std::span<const TableRef> tables,
                                                   std::span<const BlockId> extra_holds) {
  InvariantChecker checker;
  return checker.check(pool, page_tokens, tables, extra_holds);
}

}  // namespace kvreplay
