#include "engine/replay/replayer.h"

#include <fmt/format.h>

#include <charconv>

namespace kvreplay {

std::optional<CheckPolicy> CheckPolicy::parse(std::string_view text) {
  if (text == "every") return CheckPolicy{Mode::kEvery, 1};
  if (text == "end") return CheckPolicy{Mode::kEnd, 1};
  if (text == "off") return CheckPolicy{Mode::kOff, 1};
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || ptr != text.data() + text.size() || n == 0) return std::nullopt;
  if (n == 1) return CheckPolicy{Mode::kEvery, 1};
  return CheckPolicy{Mode::kEveryN, n};
}

std::string CheckPolicy::name() const {
  switch (mode) {
    case Mode::kEvery: return "every";
    case Mode::kEveryN: return std::to_string(every);
    case Mode::kEnd: return "end";
    case Mode::kOff: return "off";
  }
  return "?";
}

Replayer::Replayer(const RunConfig& config, CheckPolicy check, OomPolicy on_oom)
    : config_(config),
      check_(check),
      on_oom_(on_oom),
      pool_(config.kv.pool_blocks, config.alloc_order) {
  if (config.alloc_order == AllocOrder::kVllm) {
    // vLLM's BlockPool takes block 0 off the free queue as the null block.
    if (auto null_block = pool_.allocate()) null_block_ = null_block.value();
  }
}

SequenceBlockTable Replayer::new_table() const {
  return SequenceBlockTable(config_.kv.pages_per_seq(), config_.kv.page_tokens);
}

namespace {

// Bad input at `event`: FILE:LINE: FIELD: problem.
Unexpected<InputError> bad(const Event& event, const std::string& file, std::string_view field,
                           std::string problem) {
  return Unexpected{InputError{file, event.line, std::string(field), std::move(problem)}};
}

Unexpected<InputError> too_long(const Event& event, const std::string& file, std::uint64_t seq,
                                std::uint64_t length, std::uint32_t max_tokens) {
  return bad(event, file, "tokens",
             fmt::format("{} more tokens make seq {} {} tokens long, past max_seq_tokens {}",
                         event.tokens, seq, length + event.tokens, max_tokens));
}

}  // namespace

// Each handler validates its event against the current state (bad input: an
// error, nothing changed), then applies it: kDone, kOom (nothing changed) or
// kViolation. An event about a skipped sequence or prefix counts as skipped.

InputResult<Replayer::Step> Replayer::on_prefix(const Event& event, const std::string& file) {
  if (prefixes_.contains(event.id) || skipped_prefixes_.contains(event.id)) {
    return bad(event, file, "id", fmt::format("prefix '{}' already exists", event.id));
  }
  const std::uint32_t max_tokens = config_.kv.max_seq_tokens;
  if (event.tokens > max_tokens) {
    return bad(event, file, "tokens",
               fmt::format("{} exceeds max_seq_tokens {}", event.tokens, max_tokens));
  }
  return prefix(event);
}

InputResult<Replayer::Step> Replayer::on_drop_prefix(const Event& event, const std::string& file) {
  auto it = prefixes_.find(event.id);
  if (it == prefixes_.end()) {
    if (skipped_prefixes_.erase(event.id) > 0) {
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "id", fmt::format("'{}' is not a live prefix", event.id));
  }
  const Step step = release(it->second.table, event);
  if (step == Step::kDone) {
    if (observer_) observer_->on_release(TableKey::prefix_of(event.id), event);
    prefixes_.erase(it);
  }
  return step;
}

InputResult<Replayer::Step> Replayer::on_admit(const Event& event, const std::string& file) {
  if (sequences_.contains(event.seq) || skipped_sequences_.contains(event.seq)) {
    return bad(event, file, "seq", fmt::format("{} is already admitted", event.seq));
  }
  const std::uint32_t max_tokens = config_.kv.max_seq_tokens;
  if (event.prompt > max_tokens) {
    return bad(event, file, "prompt",
               fmt::format("{} exceeds max_seq_tokens {}", event.prompt, max_tokens));
  }
  if (!event.hits.empty()) {
    auto live = check_hits(event, file);
    if (!live) return Unexpected{live.error()};
    if (!live.value()) {
      skipped_sequences_.insert(event.seq);
      ++totals_.skipped_events;
      return Step::kDone;
    }
  }
  if (event.has_prefix) {
    auto it = prefixes_.find(event.id);
    if (it == prefixes_.end()) {
      if (skipped_prefixes_.contains(event.id)) {
        skipped_sequences_.insert(event.seq);
        ++totals_.skipped_events;
        return Step::kDone;
      }
      return bad(event, file, "prefix", fmt::format("'{}' is not a live prefix", event.id));
    }
    if (event.prompt < it->second.table.length()) {
      return bad(event, file, "prompt",
                 fmt::format("{} is shorter than its prefix '{}' ({} tokens)", event.prompt,
                             event.id, it->second.table.length()));
    }
  }
  return admit(event);
}

InputResult<Replayer::Step> Replayer::on_append(const Event& event, const std::string& file) {
  auto it = sequences_.find(event.seq);
  if (it == sequences_.end()) {
    if (skipped_sequences_.contains(event.seq)) {
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "seq", fmt::format("{} is not admitted", event.seq));
  }
  const std::uint32_t max_tokens = config_.kv.max_seq_tokens;
  if (std::uint64_t{it->second.table.length()} + event.tokens > max_tokens) {
    return too_long(event, file, event.seq, it->second.table.length(), max_tokens);
  }
  return append_to(it->second, event.tokens, event);
}

InputResult<Replayer::Step> Replayer::on_decode(const Event& event, const std::string& file) {
  // Validate the whole batch before any sequence advances.
  const std::uint32_t max_tokens = config_.kv.max_seq_tokens;
  std::unordered_set<std::uint64_t> skipped;  // listed skipped sequences (no stamp)
  decode_batch_.clear();
  for (std::uint64_t seq : event.seqs) {
    auto it = sequences_.find(seq);
    if (it == sequences_.end()) {
      if (skipped_sequences_.contains(seq)) {
        if (!skipped.insert(seq).second) {
          return bad(event, file, "seqs", fmt::format("{} appears twice", seq));
        }
        continue;
      }
      return bad(event, file, "seqs", fmt::format("{} is not admitted", seq));
    }
    if (it->second.decode_stamp == event.index) {
      return bad(event, file, "seqs", fmt::format("{} appears twice", seq));
    }
    it->second.decode_stamp = event.index;
    decode_batch_.push_back(&it->second);
    if (std::uint64_t{it->second.table.length()} + event.tokens > max_tokens) {
      return too_long(event, file, seq, it->second.table.length(), max_tokens);
    }
  }
  if (!skipped.empty()) ++totals_.skipped_events;
  Step step = Step::kDone;
  for (Sequence* sequence : decode_batch_) {
    const Step one = append_to(*sequence, event.tokens, event);
    if (one == Step::kViolation) return one;
    if (one == Step::kOom) {
      step = one;
      if (on_oom_ == OomPolicy::kFail) break;
    }
  }
  return step;
}

InputResult<Replayer::Step> Replayer::on_fork(const Event& event, const std::string& file) {
  if (sequences_.contains(event.child) || skipped_sequences_.contains(event.child)) {
    return bad(event, file, "child", fmt::format("{} is already admitted", event.child));
  }
  if (!sequences_.contains(event.seq)) {
    if (skipped_sequences_.contains(event.seq)) {
      skipped_sequences_.insert(event.child);
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "seq", fmt::format("{} is not admitted", event.seq));
  }
  return fork(event);
}

InputResult<Replayer::Step> Replayer::on_free(const Event& event, const std::string& file) {
  auto it = sequences_.find(event.seq);
  if (it == sequences_.end()) {
    if (skipped_sequences_.erase(event.seq) > 0) {
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "seq", fmt::format("{} is not admitted", event.seq));
  }
  count_layout(state_, it->second.table, -1);
  const Step step = release(it->second.table, event);
  if (step != Step::kDone) count_layout(state_, it->second.table, +1);
  if (step == Step::kDone) {
    if (observer_) observer_->on_release(TableKey::sequence(event.seq), event);
    sequences_.erase(it);
  }
  return step;
}

InputResult<Replayer::Step> Replayer::handle(const Event& event, const std::string& file) {
  switch (event.op) {
    case Op::kPrefix: return on_prefix(event, file);
    case Op::kDropPrefix: return on_drop_prefix(event, file);
    case Op::kAdmit: return on_admit(event, file);
    case Op::kAppend: return on_append(event, file);
    case Op::kDecode: return on_decode(event, file);
    case Op::kFork: return on_fork(event, file);
    case Op::kFree: return on_free(event, file);
    case Op::kCheck: return Step::kDone;  // only the checks apply() runs after every event
    case Op::kCache: return on_cache(event, file);
    case Op::kUncache: return on_uncache(event, file);
    case Op::kStore: return on_store(event, file);
    case Op::kLoad: return on_load(event, file);
    case Op::kDrop: return on_drop(event, file);
  }
  return Step::kDone;
}

InputResult<Replayer::Outcome> Replayer::apply(const Event& event, const std::string& file) {
  auto handled = handle(event, file);
  if (!handled) return Unexpected{handled.error()};
  const Step step = handled.value();

  if (observer_ && step != Step::kViolation) observer_->on_event_end(event);
  record(event);
  if (step == Step::kViolation) return Outcome::kViolation;
  bool due = false;
  switch (check_.mode) {
    case CheckPolicy::Mode::kEvery: due = true; break;
    case CheckPolicy::Mode::kEveryN: due = event.index % check_.every == 0; break;
    case CheckPolicy::Mode::kEnd: break;
    case CheckPolicy::Mode::kOff: break;
  }
  if (event.op == Op::kCheck && check_.mode != CheckPolicy::Mode::kOff) due = true;
  if (due && !run_check(&event)) return Outcome::kViolation;
  if (observer_ && (due || event.op == Op::kCheck) && !run_observer_checkpoint(&event)) {
    return Outcome::kViolation;
  }
  return step == Step::kOom ? Outcome::kOom : Outcome::kApplied;
}

// The prefix cache's names and the offload tiers (SPEC 2.1). A name or copy
// whose cache/store/load was skipped (an OOM, or a skipped sequence) is
// remembered, so that the events naming it later are skipped too.

InputResult<bool> Replayer::check_hits(const Event& event, const std::string& file) const {
  if (event.hits.size() * std::uint64_t{config_.kv.page_tokens} > event.prompt) {
    return bad(event, file, "hits",
               fmt::format("{} pages of {} tokens are more than the prompt of {} tokens",
                           event.hits.size(), config_.kv.page_tokens, event.prompt));
  }
  bool live = true;
  for (std::size_t i = 0; i < event.hits.size(); ++i) {
    const std::uint64_t name = event.hits[i];
    auto it = cached_.find(name);
    if (it == cached_.end()) {
      if (skipped_cached_.contains(name)) {
        live = false;
        continue;
      }
      return bad(event, file, "hits", fmt::format("block {} is not cached", name));
    }
    if (it->second.page != i) {
      return bad(event, file, "hits",
                 fmt::format("block {} holds page {}, not page {}", name, it->second.page, i));
    }
  }
  return live;
}

InputResult<const Replayer::Sequence*> Replayer::full_page(const Event& event,
                                                           const std::string& file) const {
  auto it = sequences_.find(event.seq);
  if (it == sequences_.end()) {
    if (skipped_sequences_.contains(event.seq)) return nullptr;
    return bad(event, file, "seq", fmt::format("{} is not admitted", event.seq));
  }
  const SequenceBlockTable& table = it->second.table;
  if (std::uint64_t{event.page + 1} * config_.kv.page_tokens > table.length()) {
    return bad(event, file, "page",
               fmt::format("page {} of seq {} is not full ({} tokens, {} per page)", event.page,
                           event.seq, table.length(), config_.kv.page_tokens));
  }
  return &it->second;
}

InputResult<Replayer::Step> Replayer::on_cache(const Event& event, const std::string& file) {
  if (cached_.contains(event.block) || skipped_cached_.contains(event.block)) {
    return bad(event, file, "block", fmt::format("{} is already cached", event.block));
  }
  auto sequence = full_page(event, file);
  if (!sequence) return Unexpected{sequence.error()};
  if (sequence.value() == nullptr) {
    skipped_cached_.insert(event.block);
    ++totals_.skipped_events;
    return Step::kDone;
  }
  const BlockId b = sequence.value()->table.entries()[event.page];
  if (auto retained = pool_.retain(b); !retained) {
    return core_failure(event, retained.error(), "cache");
  }
  cached_.emplace(event.block, CachedPage{b, event.page});
  ++totals_.cache_holds;
  totals_.peak_cached = std::max<std::uint64_t>(totals_.peak_cached, cached_.size());
  if (observer_) {
    observer_->on_cache(event.block, TableKey::sequence(event.seq), event.page, b, event);
  }
  return Step::kDone;
}

InputResult<Replayer::Step> Replayer::on_uncache(const Event& event, const std::string& file) {
  auto it = cached_.find(event.block);
  if (it == cached_.end()) {
    if (skipped_cached_.erase(event.block) > 0) {
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "block", fmt::format("{} is not cached", event.block));
  }
  if (auto released = pool_.release(it->second.block); !released) {
    return core_failure(event, released.error(), "uncache");
  }
  cached_.erase(it);
  ++totals_.cache_drops;
  if (observer_) observer_->on_uncache(event.block, event);
  return Step::kDone;
}

InputResult<Replayer::Step> Replayer::on_store(const Event& event, const std::string& file) {
  auto& tier = tiers_[event.tier];
  auto& skipped = skipped_copies_[event.tier];
  if (tier.contains(event.key) || skipped.contains(event.key)) {
    return bad(event, file, "key",
               fmt::format("{} is already in the {} tier", event.key, trace_tier_name(event.tier)));
  }
  auto sequence = full_page(event, file);
  if (!sequence) return Unexpected{sequence.error()};
  if (sequence.value() == nullptr) {
    skipped.insert(event.key);
    ++totals_.skipped_events;
    return Step::kDone;
  }
  tier.emplace(event.key, event.page);
  ++totals_.tier_stores[event.tier];
  totals_.tier_peak[event.tier] =
      std::max<std::uint64_t>(totals_.tier_peak[event.tier], tier.size());
  if (observer_) {
    observer_->on_store(event.tier, event.key, TableKey::sequence(event.seq), event.page,
                        sequence.value()->table.entries()[event.page], event);
  }
  return Step::kDone;
}

InputResult<Replayer::Step> Replayer::on_load(const Event& event, const std::string& file) {
  if (cached_.contains(event.block) || skipped_cached_.contains(event.block)) {
    return bad(event, file, "block", fmt::format("{} is already cached", event.block));
  }
  auto& tier = tiers_[event.tier];
  auto it = tier.find(event.key);
  if (it == tier.end()) {
    if (!skipped_copies_[event.tier].contains(event.key)) {
      return bad(event, file, "key",
                 fmt::format("{} is not in the {} tier", event.key, trace_tier_name(event.tier)));
    }
    skipped_cached_.insert(event.block);
    ++totals_.skipped_events;
    return Step::kDone;
  }
  if (pool_.free_count() == 0) {
    skipped_cached_.insert(event.block);
    return oom(event);
  }
  std::vector<BlockId> fresh;
  pool_.take_free_filled(1, config_.kv.page_tokens, config_.kv.page_tokens, fresh);
  cached_.emplace(event.block, CachedPage{fresh[0], it->second});
  ++totals_.tier_loads[event.tier];
  totals_.peak_cached = std::max<std::uint64_t>(totals_.peak_cached, cached_.size());
  if (observer_) observer_->on_load(event.tier, event.key, event.block, fresh[0], event);
  return Step::kDone;
}

InputResult<Replayer::Step> Replayer::on_drop(const Event& event, const std::string& file) {
  auto& tier = tiers_[event.tier];
  if (tier.erase(event.key) == 0) {
    if (skipped_copies_[event.tier].erase(event.key) > 0) {
      ++totals_.skipped_events;
      return Step::kDone;
    }
    return bad(event, file, "key",
               fmt::format("{} is not in the {} tier", event.key, trace_tier_name(event.tier)));
  }
  ++totals_.tier_drops[event.tier];
  if (observer_) observer_->on_drop(event.tier, event.key, event);
  return Step::kDone;
}

Replayer::Step Replayer::prefix(const Event& event) {
  Prefix record{new_table(), fmt::format("prefix '{}'", event.id)};
  auto appended = record.table.append(event.tokens, pool_);
  if (!appended) {
    if (appended.error() != CoreError::kPoolExhausted) {
      return core_failure(event, appended.error(), "prefix");
    }
    skipped_prefixes_.insert(event.id);
    return oom(event);
  }
  totals_.tokens_appended += event.tokens;
  state_.logical_tokens += event.tokens;
  state_.table_entries += record.table.entries().size();
  auto [it, inserted] = prefixes_.emplace(event.id, std::move(record));
  (void)inserted;
  if (observer_) {
    const TableKey key = TableKey::prefix_of(event.id);
    observer_->on_create(key, nullptr, it->second.table, event);
    observer_->on_write(key, it->second.table, 0, appended.value().copies, event);
  }
  return Step::kDone;
}

Replayer::Step Replayer::admit(const Event& event) {
  Sequence record{new_table(), fmt::format("seq {}", event.seq), 0, event.seq};
  std::uint32_t shared_tokens = 0;
  if (event.has_prefix) {
    const Prefix& shared = prefixes_.at(event.id);
    shared_tokens = shared.table.length();
    auto installed =
        record.table.install_shared_prefix(shared.table.entries(), shared_tokens, pool_);
    if (!installed) return core_failure(event, installed.error(), "install_shared_prefix");
  }
  if (!event.hits.empty()) {
    std::vector<BlockId> pages;
    pages.reserve(event.hits.size());
    for (std::uint64_t name : event.hits) pages.push_back(cached_.at(name).block);
    shared_tokens = static_cast<std::uint32_t>(pages.size()) * config_.kv.page_tokens;
    auto installed = record.table.install_shared_prefix(pages, shared_tokens, pool_);
    if (!installed) return core_failure(event, installed.error(), "install_shared_prefix");
  }
  std::uint32_t fresh = event.prompt - shared_tokens;
  auto appended = record.table.append(fresh, pool_);
  if (!appended) {
    // Undo the install: release_all drops exactly the references it retained.
    if (auto undone = record.table.release_all(pool_); !undone) {
      return core_failure(event, undone.error(), "release_all");
    }
    if (appended.error() != CoreError::kPoolExhausted) {
      return core_failure(event, appended.error(), "append");
    }
    skipped_sequences_.insert(event.seq);
    return oom(event);
  }
  if (event.has_prefix) {
    ++totals_.prefix_installs;
    totals_.shared_pages_installed += prefixes_.at(event.id).table.entries().size();
  }
  totals_.hit_pages += event.hits.size();
  totals_.tokens_appended += fresh;
  state_.logical_tokens += event.prompt;
  state_.table_entries += record.table.entries().size();
  count_layout(state_, record.table, +1);
  // The copy check (I4/I5) runs on the sequence's table once it is in place.
  auto [it, inserted] = sequences_.emplace(event.seq, std::move(record));
  (void)inserted;
  for (const CopyOnWrite& copy : appended.value().copies) {
    ++totals_.cow_copies;
    totals_.cow_bytes += std::uint64_t{pool_.filled(copy.source)} * config_.kv.bytes_per_token();
  }
  if (check_.mode != CheckPolicy::Mode::kOff) {
    for (const CopyOnWrite& copy : appended.value().copies) {
      if (!pool_.is_live(copy.source)) {
        violation_ = Violation{
            event.index, event.line, "I5",
            fmt::format("seq {}: copy source block {} is not live", event.seq, copy.source)};
        return Step::kViolation;
      }
    }
    auto entries = it->second.table.entries();
    for (std::size_t page = appended.value().first_page; fresh > 0 && page < entries.size();
         ++page) {
      if (pool_.refcount(entries[page]) != 1) {
        violation_ =
            Violation{event.index, event.line, "I4",
                      fmt::format("seq {} page {}: write into block {} with refcount {}", event.seq,
                                  page, entries[page], pool_.refcount(entries[page]))};
        return Step::kViolation;
      }
    }
  }
  if (observer_) {
    const TableKey key = TableKey::sequence(event.seq);
    const TableKey source = TableKey::prefix_of(event.id);
    if (event.hits.empty()) {
      observer_->on_create(key, event.has_prefix ? &source : nullptr, it->second.table, event);
    } else {
      observer_->on_create_on_hits(key, event.hits, it->second.table, event);
    }
    observer_->on_write(key, it->second.table, shared_tokens, appended.value().copies, event);
  }
  return Step::kDone;
}

Replayer::Step Replayer::append_to(Sequence& sequence, std::uint32_t tokens, const Event& event) {
  const std::uint32_t old_length = sequence.table.length();
  // The common decode step: in place in an exclusively held partial page (I4
  // holds by construction: the fast path requires refcount 1).
  if (sequence.table.append_in_place(tokens, pool_)) {
    totals_.tokens_appended += tokens;
    state_.logical_tokens += tokens;
    if (observer_) {
      observer_->on_write(TableKey::sequence(sequence.id), sequence.table, old_length, {}, event);
    }
    return Step::kDone;
  }
  std::size_t pages_before = sequence.table.entries().size();
  count_layout(state_, sequence.table, -1);
  auto appended = sequence.table.append(tokens, pool_);
  count_layout(state_, sequence.table, +1);
  if (!appended) {
    if (appended.error() != CoreError::kPoolExhausted) {
      return core_failure(event, appended.error(), sequence.label);
    }
    return oom(event);
  }
  totals_.tokens_appended += tokens;
  state_.logical_tokens += tokens;
  state_.table_entries += sequence.table.entries().size() - pages_before;
  for (const CopyOnWrite& copy : appended.value().copies) {
    ++totals_.cow_copies;
    totals_.cow_bytes += std::uint64_t{pool_.filled(copy.source)} * config_.kv.bytes_per_token();
    if (check_.mode != CheckPolicy::Mode::kOff && !pool_.is_live(copy.source)) {
      violation_ = Violation{
          event.index, event.line, "I5",
          fmt::format("{}: copy source block {} is not live", sequence.label, copy.source)};
      return Step::kViolation;
    }
  }
  if (check_.mode != CheckPolicy::Mode::kOff) {
    auto entries = sequence.table.entries();
    for (std::size_t page = appended.value().first_page; page < entries.size(); ++page) {
      if (pool_.refcount(entries[page]) != 1) {
        violation_ = Violation{
            event.index, event.line, "I4",
            fmt::format("{} page {}: write into block {} with refcount {}", sequence.label, page,
                        entries[page], pool_.refcount(entries[page]))};
        return Step::kViolation;
      }
    }
  }
  if (observer_) {
    observer_->on_write(TableKey::sequence(sequence.id), sequence.table, old_length,
                        appended.value().copies, event);
  }
  return Step::kDone;
}

Replayer::Step Replayer::fork(const Event& event) {
  const Sequence& parent = sequences_.at(event.seq);
  Sequence child{new_table(), fmt::format("seq {}", event.child), 0, event.child};
  if (auto forked = parent.table.fork_into(child.table, pool_); !forked) {
    return core_failure(event, forked.error(), "fork_into");
  }
  ++totals_.forks;
  state_.logical_tokens += child.table.length();
  state_.table_entries += child.table.entries().size();
  count_layout(state_, child.table, +1);
  auto [it, inserted] = sequences_.emplace(event.child, std::move(child));
  (void)inserted;
  if (observer_) {
    const TableKey parent_key = TableKey::sequence(event.seq);
    observer_->on_create(TableKey::sequence(event.child), &parent_key, it->second.table, event);
  }
  return Step::kDone;
}

Replayer::Step Replayer::release(SequenceBlockTable& table, const Event& event) {
  const std::uint32_t length = table.length();
  const std::size_t pages = table.entries().size();
  if (auto released = table.release_all(pool_); !released) {
    return core_failure(event, released.error(), "release_all");
  }
  state_.logical_tokens -= length;
  state_.table_entries -= pages;
  return Step::kDone;
}

Replayer::Step Replayer::oom(const Event& event) {
  ++totals_.oom_events;
  if (!totals_.oom_first_event) totals_.oom_first_event = event.index;
  return Step::kOom;
}

Replayer::Step Replayer::core_failure(const Event& event, CoreError error, std::string_view what) {
  // A stale page or refcount overflow here means the state is already corrupt.
  violation_ = Violation{event.index, event.line, "I1", fmt::format("{} failed: {}", what, error)};
  return Step::kViolation;
}

void record_event(ReplayState& state, ReplayTotals& totals, std::uint32_t used,
                  std::uint64_t physical_tokens, std::uint32_t page_tokens) {
  ++totals.events;
  const std::uint64_t slots = std::uint64_t{used} * page_tokens;
  state.used = used;
  state.physical_tokens = physical_tokens;
  state.waste_slots = slots - physical_tokens;
  state.waste_ratio =
      used == 0 ? 0.0 : static_cast<double>(state.waste_slots) / static_cast<double>(slots);
  if (used > 0) {
    totals.waste_ratio_sum += state.waste_ratio;
    ++totals.waste_ratio_events;
    totals.waste_ratio_max = std::max(totals.waste_ratio_max, state.waste_ratio);
  }
  double runs = 0.0, continued = 0.0;
  if (state.seq_tables > 0) {
    runs = static_cast<double>(state.seq_pages - state.seq_continued) /
           static_cast<double>(state.seq_tables);
    totals.runs_per_seq_sum += runs;
    ++totals.runs_events;
    if (state.seq_pages > state.seq_tables) {
      continued = static_cast<double>(state.seq_continued) /
                  static_cast<double>(state.seq_pages - state.seq_tables);
      totals.continued_share_sum += continued;
      ++totals.continued_events;
    }
  }
  if (used > totals.peak_used) {
    totals.peak_used = used;
    totals.runs_per_seq_at_peak = runs;
    totals.continued_share_at_peak = continued;
    totals.waste_ratio_at_peak = state.waste_ratio;
    totals.waste_slots_at_peak = state.waste_slots;
    totals.saved_blocks_at_peak =
        static_cast<std::int64_t>(state.table_entries) - static_cast<std::int64_t>(used);
  }
  totals.peak_logical = std::max(totals.peak_logical, state.logical_tokens);
  totals.peak_physical = std::max(totals.peak_physical, state.physical_tokens);
}

void Replayer::record(const Event& event) {
  (void)event;
  state_.live_sequences = sequences_.size();
  // --alloc-order vllm: the null block is held, never used, in use nor wasted
  // (vLLM's BlockPool.get_usage counts num_gpu_blocks - 1), so it is left out
  // of every figure; the invariant checks still see it held (run_check).
  const std::uint32_t used = pool_.used_count() - (null_block_ ? 1 : 0);
  record_event(state_, totals_, used, pool_.filled_total(), config_.kv.page_tokens);
}

bool Replayer::run_check(const Event* event) {
  table_refs_.clear();
  for (const auto& [id, sequence] : sequences_)
    table_refs_.push_back({&sequence.table, sequence.label});
  for (const auto& [id, shared] : prefixes_) table_refs_.push_back({&shared.table, shared.label});
  ++totals_.checks;
  cache_holds_.clear();
  if (null_block_) cache_holds_.push_back(*null_block_);
  for (const auto& [name, cached] : cached_) cache_holds_.push_back(cached.block);
  auto found = checker_.check(pool_, config_.kv.page_tokens, table_refs_, cache_holds_);
  if (!found) return true;
  violation_ = Violation{event ? event->index : 0, event ? event->line : 0, found->invariant,
                         found->message};
  return false;
}

bool Replayer::run_observer_checkpoint(const Event* event) {
  live_tables_.clear();
  for (const auto& [id, sequence] : sequences_) {
    live_tables_.push_back({TableKey::sequence(id), &sequence.table});
  }
  for (const auto& [id, shared] : prefixes_) {
    live_tables_.push_back({TableKey::prefix_of(id), &shared.table});
  }
  auto found = observer_->on_checkpoint(live_tables_, event);
  if (!found) return true;
  violation_ = std::move(*found);
  return false;
}

Replayer::Outcome Replayer::finish() {
  if (check_.mode != CheckPolicy::Mode::kOff && !run_check(nullptr)) return Outcome::kViolation;
  if (observer_ && !run_observer_checkpoint(nullptr)) return Outcome::kViolation;
  return Outcome::kApplied;
}

}  // namespace kvreplay
