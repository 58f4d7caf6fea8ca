// The generic engine (SPEC 3.1): an engine-neutral continuous-batching
// scheduler that turns a request trace into work on the real pool and tables,
// with a prefix cache, or into per-request contiguous reservations for the
// baselines (every engine's --allocator contiguous-* runs here: vLLM has no
// contiguous allocator).
//
// Each step, in virtual time:
//   1. requests whose arrival has come join the waiting queue (FCFS);
//   2. running requests advance in admission order within --max-batched-tokens:
//      a prefilling request takes its next prompt chunk (chunked prefill), a
//      decoding one one token per live sample; the step that ends a prefill
//      yields the first output token, and n > 1 forks the other samples then;
//   3. waiting requests are admitted FCFS while the budget lasts, the running
//      samples stay within --max-seqs, and free (plus evictable) blocks stay
//      above the watermark after the first chunk (prefix-cache hits are
//      installed first and need no new block);
//   4. a paged append that cannot get a block, even after evicting the prefix
//      cache, preempts the most recently admitted request by recompute: its
//      blocks are released and it rejoins the front of the queue, to start over;
//   5. a sample finishes after `output` tokens (its KV holds prompt + output - 1
//      tokens); virtual time advances by the cost model (see CostModel).
// Requests that can never fit (longer than max_seq_tokens, more samples than
// max_seqs, or more blocks than the pool minus the watermark) are skipped and
// counted: admission would wait for them forever. Every other request is
// admitted once nothing else runs (its first chunk then fits), so a run ends.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

#include "engine/paged/paged_scheduler.h"

namespace kvreplay {

class GenericScheduler final : public PagedScheduler {
 public:
  explicit GenericScheduler(EngineShell& shell);

  std::optional<SkipReason> never_fits(const Request& request, std::uint64_t& need) const override;
  void add_request(Request request) override;
  bool step() override;
  void record() override;

 private:
  bool admit_next(std::uint32_t& budget, bool& stop);
  // `stopped`: the flight goes no further this step, preempted (itself, by
  // an append that found no block) or held back (held_back_).
  bool run_flight(Flight& flight, std::uint32_t& budget, std::size_t index, bool& stopped);
  bool append(Flight& flight, Sample& sample, std::uint32_t tokens, std::size_t index,
              bool& stopped);
  void preempt_last();
  // A sample's KV given back: its tables to the pool, or its region.
  void release(Sample& sample);
  void finish_sample(const Flight& flight, Sample& sample);
  // A sample produced its `generated`-th token: counted unless it is recomputed.
  void count_output(Flight& flight, std::size_t sample);
  void offer_to_cache(Flight& flight);
  std::uint32_t reservation_tokens(const Request& request) const;
  // --offload (engine/paged/paged_offload.cc, the generic engine's rules in
  // generic_scheduler.cc): the waiting head's KV landed from the tiers, and it
  // is admitted on its table as loaded, without a lookup.
  bool admit_loaded(std::uint32_t& budget, bool& stop);
  // Runs a flight just admitted (run_flight), and takes it off the running
  // requests if that finished it.
  bool run_admitted(std::uint32_t& budget, bool& stop);
  bool kv_landed(Flight& flight) override;
  bool allocate_loaded(Flight& flight, std::uint32_t tokens) override;
  // Why a table grows: an append, or the blocks taken for KV loaded from the
  // offload tiers (what an I1 violation says failed).
  enum class Growth : std::uint8_t { kAppend, kLoad };
  // The sample's table grown by `tokens` (REQUIRES the blocks free), its
  // copies and entries counted; a failure is an I1 violation.
  bool grow_table(const Flight& flight, Sample& sample, std::uint32_t tokens, Growth why);
  bool table_failed(const Flight& flight, std::uint32_t tokens, Growth why, CoreError error);
  // Contiguous first-fit arena over pool_blocks * page_tokens slots.
  std::optional<std::uint64_t> reserve_region(std::uint64_t slots);
  void free_region(std::uint64_t start, std::uint64_t slots);

  std::map<std::uint64_t, std::uint64_t> free_ranges_;  // contiguous: start -> length
  std::uint64_t reserved_slots_ = 0;
  // --offload: the one request running waits this step for a transfer's
  // landing to give it blocks (append), and nothing is admitted.
  bool held_back_ = false;
};

// The engine's entry in the table of engines (engine/generic/generic_engine.cc).
struct EngineEntry;
const EngineEntry& generic_engine();

}  // namespace kvreplay
