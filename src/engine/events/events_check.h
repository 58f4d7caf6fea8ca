// EventsChecker: `kvreplay events` (app/events.cc) without files. It takes a
// KV-event stream one JSON line at a time, checks it and sums it up. The stream
// imitates vLLM's KV events (vllm/distributed/kv_events.py): each line is one
// KVEventBatch, whose events are BlockStored, BlockRemoved and
// AllBlocksCleared. kvreplay writes it with `simulate --kv-events`
// (engine/events/kv_events.h).
//
// The form it reads:
//   batch  {"ts": T, "events": [EVENT...], "instance": I, "data_parallel_rank": R}
//          (instance and data_parallel_rank optional; R is the instance when
//          there is no instance), or vLLM's array_like encoding [T, [EVENT...], R];
//   EVENT  {"type": "BlockStored", "block_hashes": [H...], "parent_block_hash": H|null,
//           "token_ids": [...], "block_size": N, "lora_id": N|null, "medium": M|null},
//          {"type": "BlockRemoved", "block_hashes": [H...], "medium": M|null},
//          {"type": "AllBlocksCleared"}; unknown keys are skipped. Or tag first:
//          ["BlockStored", block_hashes, parent, token_ids, block_size, lora_id,
//          medium], ["BlockRemoved", block_hashes, medium], ["AllBlocksCleared"]
//          (trailing items may be missing; items past those are skipped);
//   H      an integer in 0..2^64-1 or a string (compared as a string: 5 and "5"
//          are two hashes); M a medium, null = "GPU", compared case-insensitively.
// Every problem is one InputError, FILE:LINE: FIELD: problem, the field named
// as a path: ts, events[2].block_hashes[0], json for syntax. Checks, per
// (instance, medium) of the stream: ts never goes backwards within an
// instance; a batch's "seq" (the ZMQ frame's sequence number, when a recorder
// writes it) goes up within an instance, from 0; a BlockStored's
// parent_block_hash was stored in it before (ever: it may have been removed
// since); a BlockRemoved's hash is cached. AllBlocksCleared empties every
// medium of its instance.
//
// Counts per block, as Dynamo's KV router keeps them (ai-dynamo/dynamo,
// lib/llm/src/kv_router/publisher: EventDedupFilter, per DP rank and storage
// tier): a medium is a multiset of hashes, as vLLM's BlockPool caches one hash
// in several blocks and sends a BlockStored for each and a BlockRemoved for
// each (vllm/v1/core/block_pool.py); a store counts the hash up, a removal
// down. The key-level figures are the hashes' counts going 0 -> 1 (a key
// stored) and 1 -> 0 (a key removed: the removals Dynamo's filter passes on
// to its indexer). --unique refuses a store of a hash already cached (a
// key-level stream: SGLang's, or one deduplicated upstream).
//
// A capture that starts mid-run (--mid-stream): a parent never stored in the
// stream makes its BlockStored a root, a removal of a hash not cached is
// counted (Dynamo's filter passes an untracked removal on), a first seq above
// 0 is a start; without --mid-stream each is the line's problem, which says
// so.
//
// Memory (README, "Memory bounds"): what the check keeps grows with the
// distinct hashes, the re-stores and the changes of a cached count, and a line
// is held whole while it is checked. Each of them is counted as it grows, at an
// upper bound of its bytes, and the line at which their sum passes the memory
// limit fails: FILE:LINE: FIELD: "checking the stream ... needs X (FORMULA),
// over the memory limit of Y (SOURCE)".
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/input_error.h"

namespace kvreplay {

struct EventsOptions {
  bool unique = false;      // --unique: a medium holds a hash once at most
  bool mid_stream = false;  // --mid-stream: the stream may start mid-run
  // The memory the check may hold (bytes); none: memory_limit() (core/memory_budget.h).
  std::optional<std::uint64_t> memory_limit;
};

// The figures of one (instance, medium). Percentiles are nearest-rank: the
// ceil(q n)-th smallest value.
struct EventsMedium {
  std::uint64_t instance = 0;
  std::string medium;           // upper-cased: "GPU", "CPU", "DISK", or as the stream names it
  std::uint64_t stored = 0;     // blocks (hashes) of BlockStored events
  std::uint64_t removed = 0;    // blocks of BlockRemoved events (unmatched included)
  std::uint64_t cleared = 0;    // blocks dropped by AllBlocksCleared
  std::uint64_t cached = 0;     // after the last event
  std::uint64_t peak = 0;       // the most cached after any event
  double peak_ts = 0;           // the ts of the batch that first reached the peak
  std::optional<double> churn;  // (stored + removed) / the stream's span; none when it is 0
  // stored, removed / the stream's span (blocks per second); none when it is 0
  std::optional<double> stored_rate, removed_rate;
  std::uint64_t duplicate_stores = 0;  // blocks stored while their hash was cached
  // Key level: hashes whose count went 0 -> 1, 1 -> 0; cached at the end, the most.
  std::uint64_t keys_stored = 0, keys_removed = 0, keys_cached = 0, keys_peak = 0;
  // --mid-stream: BlockStored events whose parent was never stored (roots),
  // removed blocks that were not cached.
  std::uint64_t orphan_stores = 0, unmatched_removals = 0;
  std::vector<std::uint64_t> samples;  // cached at each of EventsSummary::sample_ts
  // Re-stores: a store of a hash stored before in this medium and not cached
  // since its removal (or a clear). Distance: the distinct other hashes stored
  // in this medium between its previous store and this one (the LRU stack
  // distance over store events). Time: from the removal to the re-store.
  std::uint64_t reuses = 0;
  std::uint64_t distance_p50 = 0, distance_p90 = 0, distance_p99 = 0, distance_max = 0;
  double time_p50 = 0, time_p99 = 0;
};

struct EventsSummary {
  std::uint64_t batches = 0;
  std::uint64_t stored_events = 0, removed_events = 0, cleared_events = 0;
  std::optional<double> first_ts, last_ts;  // over every batch; none without batches
  // Up to 10 evenly spaced points from first_ts to last_ts (one when they are
  // equal, none without batches); a sample is the count after the last batch of
  // that instance at or before the point.
  std::vector<double> sample_ts;
  std::vector<EventsMedium> media;  // by instance, then GPU, CPU, DISK, others by name
  bool unique = false, mid_stream = false;
  // Batches carrying "seq"; the jumps past the next number, the numbers
  // skipped; the first seq of each instance above 0 (--mid-stream).
  std::uint64_t seq_batches = 0, seq_gaps = 0, seq_missing = 0, late_starts = 0;
  // The longest time between two batches of an instance, and the ts it ended at.
  double max_interval = 0, max_interval_ts = 0;
};

class EventsChecker {
 public:
  // `file`: the name in messages ("<stdin>" for standard input).
  EventsChecker(std::string file, EventsOptions options);
  ~EventsChecker();
  EventsChecker(const EventsChecker&) = delete;
  EventsChecker& operator=(const EventsChecker&) = delete;

  // One line of the stream, without its newline, and its number (from 1). A
  // blank line is no batch. The first problem of the line; after a problem the
  // checker's state is undefined (the command stops there).
  InputStatus add_line(std::string_view text, std::uint64_t line);
  // Why a line of `bytes` bytes is not read on: longer than 64 MiB, or more
  // than the memory limit leaves room for (the line is held 4 times over:
  // read, copied, parsed); none when it may grow to that. Asked as the line
  // is read, so that a long one is refused before it is held.
  std::optional<std::string> line_problem(std::uint64_t bytes) const;
  EventsSummary summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The summary for people (stdout), headed by `name`.
std::string events_summary_text(const EventsSummary& summary, const std::string& name);
// The summary as JSON: keys sorted, so the same stream gives the same bytes.
nlohmann::json events_summary_json(const EventsSummary& summary, const std::string& name);

}  // namespace kvreplay
