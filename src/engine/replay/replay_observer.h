// ReplayObserver: what the Replayer tells a data plane about every successful
// operation, so that a real KV arena can follow the metadata (SPEC 5). The
// Replayer holds at most one, as a plain pointer: with none (--backend none) the
// replay costs one null check per operation.
//
// Contract (the Replayer's side):
//   - Calls come only after the metadata operation succeeded and passed its
//     I4/I5 checks; an operation that failed (pool exhausted) or was skipped is
//     never reported.
//   - on_create announces a new table before its first on_write: a prefix, a
//     sequence (sharing a prefix's pages when `source` names one), or a fork's
//     child (sharing all of `source`'s pages, with its length).
//   - on_write reports that tokens [old_length, table.length()) were appended
//     to a table, with the copy-on-write copies that append made. The copies
//     must execute before the write. Within one event nothing is freed, no copy
//     source is written in place, and every copy source stays live (I5), so an
//     observer may defer an event's copies and writes until on_event_end as
//     long as it runs the copies first.
//   - on_release comes after a table's pages were released (free, drop_prefix).
//   - on_event_end comes after every event that reached the pool.
//   - on_checkpoint comes at every `check` event, after every event the
//     CheckPolicy checks (--check every or N), each after its invariant check
//     passed, and at the end of the trace, with every live table; a returned
//     Violation stops the replay like an invariant violation (exit code 1).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "formats/kvtrace_reader.h"

namespace kvreplay {

struct Violation {
  std::uint64_t event = 0;  // 1-based event index; 0 for the end-of-trace check
  std::uint64_t line = 0;
  std::string invariant;
  std::string message;
};

// Names a table: a sequence by its id, a prefix by its id.
struct TableKey {
  enum class Kind : std::uint8_t { kSequence, kPrefix };
  Kind kind = Kind::kSequence;
  std::uint64_t seq = 0;    // kSequence
  std::string_view prefix;  // kPrefix; valid during the call only

  static TableKey sequence(std::uint64_t id) { return {Kind::kSequence, id, {}}; }
  static TableKey prefix_of(std::string_view id) { return {Kind::kPrefix, 0, id}; }
};

struct LiveTable {
  TableKey key;
  const SequenceBlockTable* table = nullptr;
};

class ReplayObserver {
 public:
  virtual ~ReplayObserver() = default;

  virtual void on_create(const TableKey& key, const TableKey* source,
                         const SequenceBlockTable& table, const Event& event) = 0;
  virtual void on_write(const TableKey& key, const SequenceBlockTable& table,
                        std::uint32_t old_length, std::span<const CopyOnWrite> copies,
                        const Event& event) = 0;
  virtual void on_release(const TableKey& key, const Event& event) = 0;
  virtual void on_event_end(const Event& event) = 0;
  // The prefix cache and the offload tiers (cache, uncache, store, load, drop,
  // an admit's hits). An observer that keeps no bytes may ignore them.
  // on_cache: the cache took a reference on block `block`, page `page` of
  // `key`'s table, naming it `name`; on_uncache: it dropped it.
  virtual void on_cache(std::uint64_t name, const TableKey& key, std::uint32_t page, BlockId block,
                        const Event& event) {
    (void)name, (void)key, (void)page, (void)block, (void)event;
  }
  virtual void on_uncache(std::uint64_t name, const Event& event) { (void)name, (void)event; }
  // An admit on cached pages (instead of on_create): the table's first pages
  // are the cached pages `hits`, in order; its on_write follows.
  virtual void on_create_on_hits(const TableKey& key, std::span<const std::uint64_t> hits,
                                 const SequenceBlockTable& table, const Event& event) {
    (void)key, (void)hits, (void)table, (void)event;
  }
  // Tier `tier` keeps a copy of block `block`, page `page` of `key`'s table,
  // under `copy`.
  virtual void on_store(std::uint8_t tier, std::uint64_t copy, const TableKey& key,
                        std::uint32_t page, BlockId block, const Event& event) {
    (void)tier, (void)copy, (void)key, (void)page, (void)block, (void)event;
  }
  // Fresh block `block` takes tier's copy `copy`; the cache names it `name`.
  virtual void on_load(std::uint8_t tier, std::uint64_t copy, std::uint64_t name, BlockId block,
                       const Event& event) {
    (void)tier, (void)copy, (void)name, (void)block, (void)event;
  }
  virtual void on_drop(std::uint8_t tier, std::uint64_t copy, const Event& event) {
    (void)tier, (void)copy, (void)event;
  }
  // `event` is nullptr at the end of the trace.
  virtual std::optional<Violation> on_checkpoint(std::span<const LiveTable> live,
                                                 const Event* event) = 0;
};

}  // namespace kvreplay
