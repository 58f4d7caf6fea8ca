// check_invariants: verifies the pool and its tables by recounting from the
// tables, never trusting the pool's own counters.
//   I1 refcount(b) == table entries pointing at b + extra holds of b
//      (prefix-cache holds kept outside tables, pins of pending copies).
//   I2 the free list holds exactly the blocks with refcount 0, each once;
//      used + free == total.
//   I3 every table's pages covering [0, length) are valid and pages beyond are
//      invalid; filled(b) <= page_tokens; a free block has filled 0; a valid
//      page's block holds at least the table's tokens of that page, unless it is
//      the table's null block (a page attention skips, see TableRef).
// I4 (no write into a shared block) and I5 (a copy's source stays live until the
// copy runs) concern operations rather than states; the replay engine checks them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"

namespace kvreplay {

struct TableRef {
  const SequenceBlockTable* table = nullptr;
  std::string_view label;  // how messages name the table, e.g. "seq 7"
  // Entries on this block are pages attention skips (a sliding window's,
  // SequenceBlockTable::skip_page): counted as references (I1), but not held
  // to the page's tokens (I3). kInvalidBlock: none.
  BlockId null_block = kInvalidBlock;
};

struct InvariantViolation {
  std::string invariant;  // "I1", "I2", "I3"
  std::string message;    // e.g. "block 5: refcount 2 but 1 reference (seq 3 page 0)"
};

// Reusable checker: keeps scratch buffers between calls so frequent checks do
// not allocate. Returns the first violation found, in the order I2, I1, I3.
class InvariantChecker {
 public:
  std::optional<InvariantViolation> check(const BlockPool& pool, std::uint32_t page_tokens,
                                          std::span<const TableRef> tables,
                                          std::span<const BlockId> extra_holds = {});

 private:
  std::vector<std::uint32_t> references_;
  std::vector<std::uint8_t> on_free_list_;
};

std::optional<InvariantViolation> check_invariants(const BlockPool& pool, std::uint32_t page_tokens,
                                                   std::span<const TableRef> tables,
                                                   std::span<const BlockId> extra_holds = {});

}  // namespace kvreplay
