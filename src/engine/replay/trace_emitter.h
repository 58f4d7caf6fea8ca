// simulate --emit-trace (SPEC 3.7, item 3 of the offload work): the schedule
// a simulation ran, written as a kvtrace v1 event trace (traces/README.md),
// so that `kvreplay replay --backend cpu|cuda --verify` can prove that every
// sequence of the run reads exactly the bytes it wrote, shared or loaded.
//
// The engines call a TraceEmitter where their tables and caches change
// (engine/paged/paged_scheduler.h; the sglang engine's radix tree and rows of
// pages in engine/sglang/sglang_scheduler.h): a sample's first growth is an `admit` (its
// prefix-cache hits as `hits`), later growth an `append` (one-token appends
// of a step batched into one `decode`), a released sample a `free`, a page
// the prefix cache takes a `cache`, an eviction an `uncache`, an offload
// store, load and tier eviction a `store`, `load` and `drop`; the generic
// engine's n > 1 samples are `fork`s.
//
// Names: a trace's sequence ids are numbered in order of admission (a
// preempted request that comes back is a new sequence); a cached block is
// named by its block id in the simulator's pool (plus the instance's base in a
// fleet); a tier's keys are numbered as first stored. So the pool the replay
// needs is the simulator's: every block a table or the cache holds in the run
// is one in the replay, and an eviction's `uncache` comes before the op that
// reuses the block.
//
// A fleet's instances write into one trace through one TraceSink: their
// sequences, names and keys are disjoint, and the header's pool is the sum of
// their pools (the replay checks the union of their schedules). The KV a
// disaggregated fleet moves from a prefill to a decode instance crosses the
// trace's `link` tier (stage, receive, unstage below).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/block_pool.h"
#include "core/config.h"

namespace kvreplay {

// Where the instances' events go, in order: one line each.
class TraceSink {
 public:
  explicit TraceSink(std::function<void(std::string_view line)> write) : write_(std::move(write)) {}
  // The header: the geometry of `kv` (an MLA latent as a K and a V half of
  // it), its page size and longest sequence, and a pool of `pool_blocks`
  // handing blocks out in the simulator's `order` (vllm's as lifo: the
  // header's pool leaves the null block out). Empty when written; else why
  // kv cannot be written as a kvtrace header.
  std::string header(const PagedKvConfig& kv, std::uint64_t pool_blocks, AllocOrder order);
  void line(std::string&& text) {
    ++events_;
    write_(text);
  }
  std::uint64_t next_seq() { return seqs_++; }
  std::uint64_t next_key() { return keys_++; }
  std::uint64_t events() const { return events_; }
  // Disaggregated serving: the link tier's keys of the prompt pages a prefill
  // instance staged for request `tag`, in page order (TraceEmitter::stage).
  std::vector<std::uint64_t>& staged(std::uint64_t tag) { return staged_[tag]; }
  const std::vector<std::uint64_t>* find_staged(std::uint64_t tag) const {
    auto it = staged_.find(tag);
    return it == staged_.end() ? nullptr : &it->second;
  }
  void forget_staged(std::uint64_t tag) { staged_.erase(tag); }
  // `t` on events, never going backwards: a time before the last one written
  // is left off (a fleet's instances step in turn).
  bool stamp(double t) {
    if (t < last_t_) return false;
    last_t_ = t;
    return true;
  }

 private:
  std::function<void(std::string_view)> write_;
  std::uint64_t seqs_ = 0;
  std::uint64_t keys_ = 0;
  std::uint64_t events_ = 0;
  double last_t_ = -1e300;
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> staged_;
};

// One engine instance's events.
class TraceEmitter {
 public:
  static constexpr std::uint64_t kNoSeq = ~std::uint64_t{0};
  // Blocks of instance i are named i * kInstanceNames + block id.
  static constexpr std::uint64_t kInstanceNames = std::uint64_t{1} << 32;

  TraceEmitter(TraceSink& sink, std::uint32_t instance)
      : sink_(sink), base_(instance * kInstanceNames) {}

  // The prefix cache logs its evictions here (PrefixCache::log_evictions);
  // each named one is written as an `uncache` before the next event.
  std::vector<BlockId>& evictions() { return evicted_; }
  // The time of the step being run, put on the events that follow.
  void at(double t);

  // A new sequence of `prompt` tokens whose first pages are the cached `hits`.
  std::uint64_t admit(std::uint32_t prompt, std::span<const BlockId> hits);
  // `tokens` more tokens to `seq` (one token: into the step's decode batch).
  void append(std::uint64_t seq, std::uint32_t tokens);
  // A new sequence sharing every page of `parent`.
  std::uint64_t fork(std::uint64_t parent);
  void free(std::uint64_t seq);
  // Whether the trace's cache holds block b now (the evictions so far written).
  bool named(BlockId b) {
    drain();
    return names_.contains(b);
  }
  // The cache takes full page `page` of `seq`, block b.
  void cache(std::uint64_t seq, std::uint32_t page, BlockId b);
  // The cache lets b go without the prefix cache evicting it (a loaded block
  // the cache never took): an `uncache`, if b is named.
  void uncache(BlockId b);
  // Offload tier `tier` (0 cpu, 1 disk) keeps page `page` of `seq` under the
  // simulator's key `key` (nothing when it holds the key already); evicts
  // `key`; loads `key` into block b, which the cache then holds.
  void store(std::uint64_t seq, std::uint32_t page, std::size_t tier, std::uint64_t key);
  void drop(std::size_t tier, std::uint64_t key);
  void load(std::size_t tier, std::uint64_t key, BlockId b);

  // Disaggregated serving (SPEC 3.6): the KV a prefill instance hands to a
  // decode instance crosses the trace's `link` tier. A prefill instance's
  // emitter stages (hand_off_prompts) the full pages a finished prompt's
  // decode side may receive, `pages` of them, before its `free`: a `store`
  // each into the link tier, keyed for request `tag`. The decode side's
  // emitter loads page `page` into block b, which its cache then holds, when
  // its engine receives it (receive: nothing when the page was not staged),
  // and drops the request's copies once the transfer is set up (unstage).
  void hand_off_prompts() { hands_off_ = true; }
  bool hands_off() const { return hands_off_; }
  void stage(std::uint64_t tag, std::uint64_t seq, std::uint32_t pages);
  void receive(std::uint64_t tag, std::uint32_t page, BlockId b);
  void unstage(std::uint64_t tag);
  // Writes the pending decode batch (at the end of the run).
  void flush();

 private:
  // Before every event but a decode's: the batch written, evictions as uncaches.
  void begin();
  void drain();
  std::string start(std::string_view op);
  // One line of a tier op, the tier's trace key given (store, drop, load and
  // the link tier's stage, unstage, receive).
  void write_store(std::uint64_t seq, std::uint32_t page, std::size_t tier, std::uint64_t key);
  void write_drop(std::size_t tier, std::uint64_t key);
  void write_load(std::size_t tier, std::uint64_t key, BlockId b);
  std::uint64_t name(BlockId b) const { return base_ + b; }

  TraceSink& sink_;
  std::uint64_t base_;
  double t_ = 0.0;
  bool stamped_ = false;
  std::vector<BlockId> evicted_;
  std::unordered_set<BlockId> names_;
  std::array<std::unordered_map<std::uint64_t, std::uint64_t>, 2> tier_keys_;
  std::vector<std::uint64_t> batch_;  // the decode batch: one token each
  bool hands_off_ = false;            // a prefill instance's (stage)
};

}  // namespace kvreplay
