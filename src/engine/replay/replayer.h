// Replayer: applies kvtrace events to the real pool and tables (SPEC 2.1) and
// keeps the figures the report needs.
//
// Contract:
//   - apply() validates an event against the current state first; bad input
//     (unknown seq, duplicate id, length past max_seq_tokens, ...) is an
//     InputError naming the event's line and field, and changes nothing.
//   - Pool exhaustion is not bad input: the failing operation has no effect
//     (failure-atomic) and apply() reports kOom; under --on-oom skip the caller
//     goes on and later events of a sequence whose admit/fork was skipped are
//     skipped too. Each sequence of a decode is its own operation.
//   - Invariant checks (I1-I3 by recount, I4 on every write, I5 on every copy)
//     run as the CheckPolicy says; the first violation is kept and apply()
//     reports kViolation, after which the caller stops.
//   - An observer (set_observer, replay_observer.h) is told of every successful
//     operation and asked to verify at `check` events and in finish(); what it
//     finds is a violation like any other. Without one nothing else changes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/invariants.h"
#include "engine/replay/replay_observer.h"
#include "formats/kvtrace_reader.h"
#include "model/run_config.h"

namespace kvreplay {

struct CheckPolicy {
  enum class Mode : std::uint8_t { kEvery, kEveryN, kEnd, kOff };
  Mode mode = Mode::kEnd;
  std::uint64_t every = 1;  // kEveryN only

  // "every", "end", "off" or a positive integer N.
  static std::optional<CheckPolicy> parse(std::string_view text);
  std::string name() const;
};

enum class OomPolicy : std::uint8_t { kFail, kSkip };

// Figures after the most recent event.
struct ReplayState {
  std::uint32_t used = 0;
  std::uint64_t waste_slots = 0;
  double waste_ratio = 0.0;
  std::uint64_t logical_tokens = 0;
  std::uint64_t physical_tokens = 0;
  std::uint64_t table_entries = 0;  // valid entries of all sequence and prefix tables
  std::uint64_t live_sequences = 0;
  // Block layout of the sequence tables (prefix tables apart): their pages, the
  // pages that continue their predecessor's block, and the tables with a page.
  std::uint64_t seq_pages = 0;
  std::uint64_t seq_continued = 0;
  std::uint64_t seq_tables = 0;
};

// Adds (sign +1) or takes out (sign -1) one sequence table's layout in `state`.
inline void count_layout(ReplayState& state, const SequenceBlockTable& table, int sign) {
  const std::uint64_t pages = table.entries().size();
  if (pages == 0) return;
  if (sign > 0) {
    state.seq_pages += pages;
    state.seq_continued += table.continued_pages();
    ++state.seq_tables;
  } else {
    state.seq_pages -= pages;
    state.seq_continued -= table.continued_pages();
    --state.seq_tables;
  }
}

struct ReplayTotals {
  std::uint64_t events = 0;
  std::uint32_t peak_used = 0;
  std::uint64_t peak_logical = 0;
  std::uint64_t peak_physical = 0;
  std::uint64_t tokens_appended = 0;
  double waste_ratio_at_peak = 0.0;
  std::uint64_t waste_slots_at_peak = 0;
  std::int64_t saved_blocks_at_peak = 0;
  double waste_ratio_sum = 0.0;  // over events after which used > 0
  std::uint64_t waste_ratio_events = 0;
  double waste_ratio_max = 0.0;
  std::uint64_t forks = 0;
  std::uint64_t prefix_installs = 0;
  std::uint64_t shared_pages_installed = 0;
  std::uint64_t cow_copies = 0;
  std::uint64_t cow_bytes = 0;
  std::uint64_t checks = 0;
  std::uint64_t oom_events = 0;
  std::optional<std::uint64_t> oom_first_event;
  std::uint64_t skipped_events = 0;  // events of sequences whose admit/fork was skipped
  // Layout, after each event (step) with a sequence holding a page: physically
  // contiguous runs per sequence table, and the share of pages (after a
  // table's first) that continue their predecessor's block; at the peak_used event too.
  double runs_per_seq_sum = 0.0;
  std::uint64_t runs_events = 0;
  double continued_share_sum = 0.0;
  std::uint64_t continued_events = 0;  // events with a page that has a predecessor
  double runs_per_seq_at_peak = 0.0;
  double continued_share_at_peak = 0.0;
  // The prefix cache and the offload tiers (cache, uncache, store, load, drop,
  // admit's hits): operations applied, per tier for the tier operations.
  std::uint64_t cache_holds = 0;
  std::uint64_t cache_drops = 0;
  std::uint64_t hit_pages = 0;  // pages admits took from the cache
  std::uint64_t peak_cached = 0;
  std::array<std::uint64_t, kTraceTiers> tier_stores{};
  std::array<std::uint64_t, kTraceTiers> tier_loads{};
  std::array<std::uint64_t, kTraceTiers> tier_drops{};
  std::array<std::uint64_t, kTraceTiers> tier_peak{};  // most copies held at once
  bool used_cache_ops() const {
    return cache_holds + hit_pages > 0 ||
           std::any_of(tier_stores.begin(), tier_stores.end(), [](auto n) { return n > 0; });
  }
  // The report names the offload tiers whenever it names cache ops, and the
  // link (disaggregated serving's staged KV) only when the trace used it.
  bool used_tier(std::uint8_t t) const { return t != kLinkTier || tier_stores[t] > 0; }

  double runs_per_seq_mean() const {
    return runs_events == 0 ? 0.0 : runs_per_seq_sum / static_cast<double>(runs_events);
  }
  double continued_share_mean() const {
    return continued_events == 0 ? 0.0
                                 : continued_share_sum / static_cast<double>(continued_events);
  }
  double waste_ratio_mean() const {
    return waste_ratio_events == 0 ? 0.0
                                   : waste_ratio_sum / static_cast<double>(waste_ratio_events);
  }
};

// Updates `state` (used, physical, waste) from the pool-level figures already
// set in it, then folds the event into `totals`. Shared by replay and simulate.
void record_event(ReplayState& state, ReplayTotals& totals, std::uint32_t used,
                  std::uint64_t physical_tokens, std::uint32_t page_tokens);

class Replayer {
 public:
  enum class Outcome : std::uint8_t { kApplied, kOom, kViolation };

  Replayer(const RunConfig& config, CheckPolicy check, OomPolicy on_oom);

  // Applies one event (see the contract above). `file` names the trace in errors.
  InputResult<Outcome> apply(const Event& event, const std::string& file);
  // The end-of-trace check (unless the policy is off), then the observer's
  // checkpoint. Returns kViolation on failure.
  Outcome finish();
  // Blocks the cache holds (cache, load, not yet uncache).
  std::size_t cached_pages() const { return cached_.size(); }
  // The observer of every successful operation (nullptr: none). Not owned; it
  // must outlive the Replayer's use of it. Set it before the first event.
  void set_observer(ReplayObserver* observer) { observer_ = observer; }

  const ReplayState& state() const { return state_; }
  const ReplayTotals& totals() const { return totals_; }
  const std::optional<Violation>& violation() const { return violation_; }
  const BlockPool& pool() const { return pool_; }
  const RunConfig& config() const { return config_; }
  const CheckPolicy& check_policy() const { return check_; }
  std::uint64_t cow_copies() const { return totals_.cow_copies; }
  // 1 under --alloc-order vllm (block 0 held as vLLM's null block), else 0.
  std::uint32_t null_blocks() const { return null_block_ ? 1 : 0; }

 private:
  struct Sequence {
    SequenceBlockTable table;
    std::string label;
    std::uint64_t decode_stamp = 0;  // last decode event that listed it
    std::uint64_t id = 0;            // its seq id, for the observer
  };
  struct Prefix {
    SequenceBlockTable table;
    std::string label;
  };
  enum class Step : std::uint8_t { kDone, kOom, kViolation };

  // The handler of the event's operation.
  InputResult<Step> handle(const Event& event, const std::string& file);
  // One handler per operation: validation (bad input is an error) and then the step.
  InputResult<Step> on_prefix(const Event& event, const std::string& file);
  InputResult<Step> on_drop_prefix(const Event& event, const std::string& file);
  InputResult<Step> on_admit(const Event& event, const std::string& file);
  InputResult<Step> on_append(const Event& event, const std::string& file);
  InputResult<Step> on_decode(const Event& event, const std::string& file);
  InputResult<Step> on_fork(const Event& event, const std::string& file);
  InputResult<Step> on_free(const Event& event, const std::string& file);
  InputResult<Step> on_cache(const Event& event, const std::string& file);
  InputResult<Step> on_uncache(const Event& event, const std::string& file);
  InputResult<Step> on_store(const Event& event, const std::string& file);
  InputResult<Step> on_load(const Event& event, const std::string& file);
  InputResult<Step> on_drop(const Event& event, const std::string& file);
  // Validates an admit's hits (live cached names, each at its page). Returns
  // false when one of them was skipped (the admit is skipped too).
  InputResult<bool> check_hits(const Event& event, const std::string& file) const;
  // A seq's page that the cache or a tier may take: a full page of a live
  // sequence. nullptr, nothing wrong, when the sequence was skipped.
  InputResult<const Sequence*> full_page(const Event& event, const std::string& file) const;

  Step admit(const Event& event);
  Step append_to(Sequence& sequence, std::uint32_t tokens, const Event& event);
  Step prefix(const Event& event);
  Step fork(const Event& event);
  // Releases every page of a table and takes its tokens and pages out of state_.
  Step release(SequenceBlockTable& table, const Event& event);
  Step oom(const Event& event);
  Step core_failure(const Event& event, CoreError error, std::string_view what);
  bool run_check(const Event* event);
  bool run_observer_checkpoint(const Event* event);
  void record(const Event& event);
  SequenceBlockTable new_table() const;

  RunConfig config_;
  CheckPolicy check_;
  OomPolicy on_oom_;
  BlockPool pool_;
  std::optional<BlockId> null_block_;  // --alloc-order vllm: block 0, held for the life of the pool
  InvariantChecker checker_;
  std::vector<TableRef> table_refs_;     // scratch for checks
  std::vector<Sequence*> decode_batch_;  // scratch: the live sequences of a decode
  std::unordered_map<std::uint64_t, Sequence> sequences_;
  std::unordered_map<std::string, Prefix> prefixes_;
  std::unordered_set<std::uint64_t> skipped_sequences_;
  std::unordered_set<std::string> skipped_prefixes_;
  // The prefix cache's named pages (cache, load): the block it holds a
  // reference on and the page index the block holds.
  struct CachedPage {
    BlockId block = kInvalidBlock;
    std::uint32_t page = 0;
  };
  std::unordered_map<std::uint64_t, CachedPage> cached_;
  std::unordered_set<std::uint64_t> skipped_cached_;
  // The offload tiers' copies: key -> the page index the copy holds.
  std::array<std::unordered_map<std::uint64_t, std::uint32_t>, kTraceTiers> tiers_;
  std::array<std::unordered_set<std::uint64_t>, kTraceTiers> skipped_copies_;
  std::vector<BlockId> cache_holds_;  // scratch for checks: the cache's references
  ReplayState state_;
  ReplayTotals totals_;
  std::optional<Violation> violation_;
  ReplayObserver* observer_ = nullptr;
  std::vector<LiveTable> live_tables_;  // scratch for observer checkpoints
};

}  // namespace kvreplay
