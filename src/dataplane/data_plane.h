// DataPlane: a real KV arena that follows a replay (SPEC 5). It is the
// Replayer's observer: every append is written through the slot mapping,
// every copy-on-write copy executes, and at every checkpoint (`check` events
// and the end of the trace) every live table is read back through its block
// table and compared byte for byte with what it wrote or inherited.
//
// How verification knows the expected bytes: each table gets a fresh writer
// number when it is created (prefix, admit, fork; numbers are never reused), a
// Lineage records which writer wrote each position (inherited at fork and
// prefix install), and token contents are content.h's deterministic function
// of (writer, position, layer, head, dim). The first difference is a D1
// violation naming the table, the position, the element, the writer whose
// bytes were expected and, when it can tell, whose bytes were found.
//
// Per event, writes and copies are collected and run at the event's end:
// first one copy_blocks launch with all of the event's copy-on-write copies,
// then one append launch with all of its tokens (ReplayObserver's contract
// says why that order is safe). A large event is flushed in parts of about
// DataPlaneOptions::staging_bytes, copies always first.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "dataplane/backend.h"
#include "dataplane/lineage.h"
#include "dataplane/paged_batch.h"
#include "engine/replay/replay_observer.h"

namespace kvreplay {

struct DataPlaneOptions {
  bool verify = false;                // compare every live table at every checkpoint
  bool attention = false;             // run decode attention (every layer) at every decode event
  std::uint32_t attention_group = 4;  // query heads per KV head
  std::uint64_t staging_bytes = 16ull << 20;       // pending writes before a flush
  std::uint64_t verify_chunk_bytes = 32ull << 20;  // dense bytes per verification gather
  // Host memory each offload tier may take (its copies, whole blocks).
  std::uint64_t tier_limit_bytes = 4ull << 30;
};

// Faults planted by tests to prove verification catches them. 1-based counts
// over the copy-on-write copies the replay makes; 0 plants nothing.
struct DataPlaneFaults {
  // The copy is dropped: the destination keeps whatever it held.
  std::uint64_t skip_copy = 0;
  // Copy-on-write is skipped altogether: no copy, and the writes meant for the
  // destination land in the still-shared source block (a missing COW).
  std::uint64_t write_shared = 0;
  // Over the tier stores: the copy's first byte is flipped after the store.
  std::uint64_t corrupt_store = 0;
  // Over the tier loads: the fresh block is not written (it keeps old bytes).
  std::uint64_t skip_load = 0;
};

struct VerifySummary {
  std::uint64_t checkpoints = 0;
  std::uint64_t tables = 0;  // tables compared, summed over checkpoints
  std::uint64_t tokens = 0;  // positions compared
  std::uint64_t bytes = 0;   // bytes compared
  std::uint64_t cached = 0;  // cached pages compared (outside tables too)
  std::uint64_t copies = 0;  // offload-tier copies compared
};

class DataPlane final : public ReplayObserver {
 public:
  DataPlane(std::unique_ptr<KvBackend> backend, DataPlaneOptions options,
            DataPlaneFaults faults = {});

  void on_create(const TableKey& key, const TableKey* source, const SequenceBlockTable& table,
                 const Event& event) override;
  void on_write(const TableKey& key, const SequenceBlockTable& table, std::uint32_t old_length,
                std::span<const CopyOnWrite> copies, const Event& event) override;
  void on_release(const TableKey& key, const Event& event) override;
  void on_event_end(const Event& event) override;
  void on_cache(std::uint64_t name, const TableKey& key, std::uint32_t page, BlockId block,
                const Event& event) override;
  void on_uncache(std::uint64_t name, const Event& event) override;
  void on_create_on_hits(const TableKey& key, std::span<const std::uint64_t> hits,
                         const SequenceBlockTable& table, const Event& event) override;
  void on_store(std::uint8_t tier, std::uint64_t copy, const TableKey& key, std::uint32_t page,
                BlockId block, const Event& event) override;
  void on_load(std::uint8_t tier, std::uint64_t copy, std::uint64_t name, BlockId block,
               const Event& event) override;
  void on_drop(std::uint8_t tier, std::uint64_t copy, const Event& event) override;
  std::optional<Violation> on_checkpoint(std::span<const LiveTable> live,
                                         const Event* event) override;

  KvBackend& backend() { return *backend_; }
  const DataPlaneOptions& options() const { return options_; }
  const VerifySummary& verify_summary() const { return summary_; }
  // timing.kernels of the report (waits for pending timings first).
  nlohmann::json kernels_json();
  // A few lines for the text summary.
  std::string summary_text();

 private:
  struct WriterInfo {
    std::string label;  // "seq 3", "prefix 'sys'"
    std::string how;    // "admit", "fork of seq 1", "prefix", ...
    std::uint64_t event = 0;
    std::uint64_t line = 0;
  };
  struct PendingToken {
    std::int64_t slot;
    std::uint32_t writer;
    std::uint32_t position;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PrefixMap = std::unordered_map<std::string, Lineage, StringHash, std::equal_to<>>;

  Lineage* find(const TableKey& key);
  static std::string label_of(const TableKey& key);
  std::string writer_text(std::uint32_t writer) const;
  // A new writer for table `key`, created by `how` at `event`.
  std::uint32_t new_writer(const TableKey& key, std::string how, const Event& event);
  // Checkpoint checks of the cached pages (read back from the arena) and of
  // the tier copies (in host memory): the first difference, if any.
  std::optional<std::string> verify_cached();
  std::optional<std::string> verify_copies();
  // The first difference between `bytes` (a block, [layers][page_tokens]
  // [token]) and what `runs` (positions of page `page`) say it holds.
  std::optional<std::string> compare_block(const std::uint8_t* bytes, std::uint64_t layer_stride,
                                           std::uint64_t row_stride, std::uint32_t page,
                                           std::span<const WriterRun> runs, std::string_view what);
  void flush();
  void run_attention();
  // Gathers and compares the pending verification batch, then empties it.
  std::optional<std::string> verify_batch(const std::vector<LiveTable>& tables,
                                          std::vector<std::size_t>& table_of_item);
  std::string describe_mismatch(const LiveTable& live, const Lineage& lineage,
                                std::uint32_t position, std::uint32_t layer,
                                const std::uint8_t* read_row);

  std::unique_ptr<KvBackend> backend_;
  ArenaView shape_;
  DataPlaneOptions options_;
  DataPlaneFaults faults_;
  std::unordered_map<std::uint64_t, Lineage> sequences_;
  PrefixMap prefixes_;
  std::vector<WriterInfo> writers_;  // writer w at [w - 1]

  // The prefix cache's pages and the offload tiers' copies, with the writers
  // of their positions.
  struct CachedBlock {
    BlockId block = kInvalidBlock;
    std::uint32_t page = 0;
    std::vector<WriterRun> runs;
  };
  std::unordered_map<std::uint64_t, CachedBlock> cached_;
  // A tier: whole blocks in host memory, kSlotsPerChunk slots per allocation,
  // freed slots reused.
  static constexpr std::uint32_t kSlotsPerChunk = 16;
  struct TierCopy {
    std::uint32_t slot = 0;
    std::uint32_t page = 0;
    std::vector<WriterRun> runs;
  };
  struct HostTier {
    std::vector<std::unique_ptr<std::uint8_t[]>> chunks;
    std::vector<std::uint32_t> free_slots;
    std::unordered_map<std::uint64_t, TierCopy> copies;
  };
  std::array<HostTier, kTraceTiers> tiers_;
  std::uint64_t block_bytes_ = 0;  // one block, every layer
  std::uint64_t stores_seen_ = 0, loads_seen_ = 0;
  std::uint8_t* slot_data(HostTier& tier, std::uint32_t slot) const {
    return tier.chunks[slot / kSlotsPerChunk].get() + (slot % kSlotsPerChunk) * block_bytes_;
  }

  // Work of the current event, run by flush().
  std::vector<std::uint32_t> pending_copies_;  // [n][2] (source, destination)
  std::vector<PendingToken> pending_tokens_;
  std::vector<std::int64_t> slots_;    // scratch
  std::vector<std::uint8_t> staging_;  // scratch: [layers][rows][token_bytes]
  std::uint64_t copies_seen_ = 0;      // copy-on-write copies reported so far
  PagedBatch decode_batch_;            // tables written by the current decode event
  std::vector<float> queries_, outputs_;
  std::uint64_t last_event_ = 0;

  // Verification scratch.
  PagedBatch verify_batch_;
  std::vector<std::uint32_t> verify_begin_;  // first position of each item
  std::vector<std::uint8_t> gathered_, expected_;
  VerifySummary summary_;
};

}  // namespace kvreplay
