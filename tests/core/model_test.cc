// Model-based randomized test: random workloads of sequences, forks,
// copy-on-write writes, shared prefixes and releases run against the real pool
// and tables and, side by side, against a trivially correct reference model
// kept in plain containers. After every operation the two must agree exactly
// (refcounts, filled counts, free list, counters, every table), the invariant
// checker must be silent, the data written through the tables must read back
// as the model says, and a failed operation must have changed nothing.
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/block_table.h"
#include "core/invariants.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

// ---------------------------------------------------------------------------
// The reference model.

// A sequence or a prefix as the model sees it.
struct ModelTable {
  std::uint32_t length = 0;
  std::vector<BlockId> pages;         // the physical block of each logical page
  std::vector<std::uint64_t> tokens;  // the content: one value per token written
};

// What the model predicts an operation does.
struct Prediction {
  std::optional<CoreError> error;
  std::uint32_t needed = 0;  // free blocks the append takes (or would take)
  std::size_t copies = 0;
  std::uint32_t new_pages = 0;
  std::uint32_t first_page = 0;
};

class Reference {
 public:
  Reference(std::uint32_t total, AllocOrder order, std::uint32_t page_tokens,
            std::uint32_t capacity_pages, std::uint32_t max_refcount)
      : order_(order),
        page_tokens_(page_tokens),
        capacity_pages_(capacity_pages),
        max_refcount_(max_refcount),
        filled_(total, 0) {
    for (BlockId b = 0; b < total; ++b) free_.push_back(b);
  }

  // A block's refcount is the number of table pages pointing at it.
  std::vector<std::uint32_t> refcounts() const {
    std::vector<std::uint32_t> out(filled_.size(), 0);
    for (const auto* tables : {&seqs, &prefixes}) {
      for (const auto& [id, table] : *tables) {
        for (BlockId b : table.pages) ++out.at(b);
      }
    }
    return out;
  }

  // Appends `count` new token values to `table` (which lives in seqs or prefixes).
  Prediction append(ModelTable& table, std::uint32_t count, std::uint64_t& next_value) {
    const std::uint64_t new_length = std::uint64_t{table.length} + count;
    if (new_length > std::uint64_t{capacity_pages_} * page_tokens_) {
      return {CoreError::kLengthExceeded};
    }
    Prediction p;
    if (count == 0) return p;
    const std::uint32_t first = table.length / page_tokens_;
    const auto last = static_cast<std::uint32_t>((new_length - 1) / page_tokens_);
    const std::vector<std::uint32_t> rc = refcounts();
    std::uint32_t needed = 0;
    for (std::uint32_t page = first; page <= last; ++page) {
      if (page >= table.pages.size() || rc[table.pages[page]] > 1) ++needed;
    }
    p.needed = needed;
    if (needed > free_.size()) {
      p.error = CoreError::kPoolExhausted;
      return p;
    }
    p.first_page = first;
    for (std::uint32_t page = first; page <= last; ++page) {
      if (page >= table.pages.size()) {
        table.pages.push_back(take());
        ++p.new_pages;
      } else if (rc[table.pages[page]] > 1) {
        const BlockId source = table.pages[page];
        const BlockId destination = take();
        filled_[destination] = filled_[source];
        table.pages[page] = destination;
        ++p.copies;
      }
      const std::uint64_t page_start = std::uint64_t{page} * page_tokens_;
      filled_[table.pages[page]] = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(page_start + page_tokens_, new_length) - page_start);
    }
    for (std::uint32_t i = 0; i < count; ++i) table.tokens.push_back(next_value++);
    table.length = static_cast<std::uint32_t>(new_length);
    return p;
  }

  // Whether `source`'s pages can all take one more reference.
  std::optional<CoreError> can_share(const ModelTable& source) const {
    const std::vector<std::uint32_t> rc = refcounts();
    for (BlockId b : source.pages) {
      if (rc[b] >= max_refcount_) return CoreError::kRefcountOverflow;
    }
    return std::nullopt;
  }

  // Drops a table; blocks left without references return to the free list in
  // page order (release_all releases its entries first to last).
  void release(std::map<int, ModelTable>& tables, int id) {
    std::vector<BlockId> pages = tables.at(id).pages;
    tables.erase(id);
    const std::vector<std::uint32_t> rc = refcounts();
    for (BlockId b : pages) {
      if (rc[b] == 0) give(b);
    }
  }

  std::vector<BlockId> free_list() const { return {free_.begin(), free_.end()}; }
  const std::vector<std::uint32_t>& filled() const { return filled_; }
  std::uint64_t allocations() const { return allocations_; }
  std::uint64_t frees() const { return frees_; }

  std::map<int, ModelTable> seqs;
  std::map<int, ModelTable> prefixes;

 private:
  BlockId take() {
    const BlockId b = free_.front();
    free_.pop_front();
    filled_[b] = 0;
    ++allocations_;
    return b;
  }

  void give(BlockId b) {
    filled_[b] = 0;
    ++frees_;
    switch (order_) {
      case AllocOrder::kLifo:
      case AllocOrder::kVllm: free_.push_front(b); break;
      case AllocOrder::kFifo: free_.push_back(b); break;
      case AllocOrder::kLowest:
        free_.insert(std::lower_bound(free_.begin(), free_.end(), b), b);
        break;
    }
  }

  AllocOrder order_;
  std::uint32_t page_tokens_;
  std::uint32_t capacity_pages_;
  std::uint32_t max_refcount_;
  std::deque<BlockId> free_;  // in allocation order: take() pops the front
  std::vector<std::uint32_t> filled_;
  std::uint64_t allocations_ = 0;
  std::uint64_t frees_ = 0;
};

// ---------------------------------------------------------------------------
// The operations and their statistics.

enum class Op : std::uint8_t {
  kNewSequence,  // allocate a sequence: append its prompt to an empty table
  kFork,
  kCowWrite,  // append to a sequence whose partial last page is shared
  kNewPrefix,
  kAdmit,  // a new sequence sharing a prefix (install_shared_prefix)
  kDropPrefix,
  kAppend,
  kRelease,
};
constexpr std::size_t kOpCount = 8;
constexpr std::array<const char*, kOpCount> kOpNames{
    "new sequence", "fork", "cow write", "new prefix", "admit", "drop prefix", "append", "release"};

struct Stats {
  std::uint64_t ops = 0;
  std::array<std::uint64_t, kOpCount> succeeded{};
  std::array<std::uint64_t, kOpCount> failed{};
  std::uint64_t exhausted = 0;
  std::uint64_t overflowed = 0;
  std::uint64_t length_exceeded = 0;
  std::uint64_t copies = 0;
};

struct RunConfig {
  std::uint64_t seed;
  AllocOrder order;
  std::uint32_t page_tokens;
  std::uint32_t pool_blocks;
  std::uint32_t capacity_pages;
  std::uint32_t max_refcount;
  std::uint32_t ops;
};

std::uint32_t uniform(std::mt19937_64& rng, std::uint32_t lo, std::uint32_t hi) {
  return lo + static_cast<std::uint32_t>(rng() % (std::uint64_t{hi} - lo + 1));
}

template <class Map>
int pick_key(std::mt19937_64& rng, const Map& map) {
  auto it = map.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(rng() % map.size()));
  return it->first;
}

// ---------------------------------------------------------------------------
// One randomized run: the real pool and tables against the reference.

class Run {
 public:
  Run(const RunConfig& config, Stats& stats)
      : c_(config),
        stats_(stats),
        rng_(config.seed),
        pool_(config.pool_blocks, config.order, config.max_refcount),
        model_(config.pool_blocks, config.order, config.page_tokens, config.capacity_pages,
               config.max_refcount),
        arena_(std::size_t{config.pool_blocks} * config.page_tokens, 0) {}

  void run() {
    for (std::uint32_t i = 0; i < c_.ops; ++i) {
      Op op = choose();
      const std::string problem = step(op);  // may turn a cow write into an append
      ++stats_.ops;
      if (!problem.empty()) {
        FAIL(fmt::format(
            "seed {:#x} ({}, page_tokens {}, pool {}, capacity {} pages, "
            "max_refcount {}), op {} ({}): {}",
            c_.seed, to_string(c_.order), c_.page_tokens, c_.pool_blocks, c_.capacity_pages,
            c_.max_refcount, i, kOpNames[static_cast<std::size_t>(op)], problem));
      }
    }
  }

 private:
  struct Live {
    SequenceBlockTable table;
    std::string label;
  };
  using LiveMap = std::map<int, Live>;

  static constexpr std::size_t kMaxSequences = 16;
  static constexpr std::size_t kMaxPrefixes = 4;

  std::uint32_t capacity_tokens() const { return c_.capacity_pages * c_.page_tokens; }

  Op choose() {
    // Weights: creation and removal roughly balance, appends dominate.
    static constexpr std::array<std::uint32_t, kOpCount> kWeights{14, 12, 12, 5, 12, 4, 25, 16};
    std::uint32_t roll = uniform(rng_, 0, 99);
    std::size_t index = 0;
    while (roll >= kWeights[index]) roll -= kWeights[index++];
    Op op = static_cast<Op>(index);
    const bool creates = op == Op::kNewSequence || op == Op::kFork || op == Op::kAdmit;
    if (creates && model_.seqs.size() >= kMaxSequences) op = Op::kRelease;
    if (op == Op::kNewPrefix && model_.prefixes.size() >= kMaxPrefixes) op = Op::kDropPrefix;
    const bool needs_sequence =
        op == Op::kFork || op == Op::kCowWrite || op == Op::kAppend || op == Op::kRelease;
    if (needs_sequence && model_.seqs.empty()) op = Op::kNewSequence;
    // A full pool mostly frees something first, so that work keeps flowing.
    if (pool_.free_count() == 0 && !model_.seqs.empty() && rng_() % 2 == 0) op = Op::kRelease;
    if ((op == Op::kAdmit || op == Op::kDropPrefix) && model_.prefixes.empty()) {
      op = Op::kNewPrefix;
    }
    return op;
  }

  SequenceBlockTable new_table() const {
    return SequenceBlockTable(c_.capacity_pages, c_.page_tokens);
  }

  void add(LiveMap& map, int id, SequenceBlockTable table, const char* kind) {
    map.emplace(id, Live{std::move(table), fmt::format("{} {}", kind, id)});
  }

  // Runs one operation on both sides and returns the first disagreement.
  std::string step(Op& op) {
    const PoolSnapshot pool_before = pool_.snapshot();
    const std::map<int, SequenceBlockTable> seqs_before = tables_of(seqs_);
    const std::map<int, SequenceBlockTable> prefixes_before = tables_of(prefixes_);

    Prediction predicted;
    std::optional<CoreError> actual;
    std::optional<AppendEffect> effect;
    std::uint32_t old_length = 0;
    const SequenceBlockTable* written = nullptr;  // the table an append wrote
    const ModelTable* written_model = nullptr;    // and its model
    bool new_table_untouched = true;              // a failed creation left its table empty

    switch (op) {
      case Op::kNewSequence:
      case Op::kNewPrefix: {
        const bool prefix = op == Op::kNewPrefix;
        // Mostly fitting prompts, sometimes past the capacity.
        const std::uint32_t tokens = rng_() % 8 == 0
                                         ? uniform(rng_, 0, capacity_tokens() + c_.page_tokens)
                                         : uniform(rng_, 0, capacity_tokens());
        const int id = next_id_++;
        auto& model_map = prefix ? model_.prefixes : model_.seqs;
        ModelTable& model_table = model_map[id];
        predicted = model_.append(model_table, tokens, next_value_);
        SequenceBlockTable table = new_table();
        if (std::string problem = check_blocks_needed(table, tokens, predicted); !problem.empty()) {
          return problem;
        }
        auto result = table.append(tokens, pool_);
        if (result.ok()) {
          effect = std::move(result).value();
          LiveMap& live = prefix ? prefixes_ : seqs_;
          add(live, id, std::move(table), prefix ? "prefix" : "seq");
          written = &live.at(id).table;
          written_model = &model_map.at(id);
        } else {
          actual = result.error();
          new_table_untouched = table == new_table();
          model_map.erase(id);
        }
        break;
      }
      case Op::kFork:
      case Op::kAdmit: {
        const bool admit = op == Op::kAdmit;
        const int source_id = admit ? pick_key(rng_, model_.prefixes) : pick_key(rng_, model_.seqs);
        const ModelTable& model_source =
            admit ? model_.prefixes.at(source_id) : model_.seqs.at(source_id);
        predicted.error = model_.can_share(model_source);
        const int id = next_id_++;
        if (!predicted.error) model_.seqs[id] = model_source;
        const SequenceBlockTable& source =
            admit ? prefixes_.at(source_id).table : seqs_.at(source_id).table;
        SequenceBlockTable table = new_table();
        const auto status =
            admit ? table.install_shared_prefix(source.entries(), source.length(), pool_)
                  : source.fork_into(table, pool_);
        if (status.ok()) {
          add(seqs_, id, std::move(table), "seq");
        } else {
          actual = status.error();
          new_table_untouched = table == new_table();
        }
        break;
      }
      case Op::kCowWrite:
      case Op::kAppend: {
        int id = pick_key(rng_, model_.seqs);
        std::uint32_t tokens = 0;
        if (op == Op::kCowWrite) {
          // A sequence whose partial last page is shared, if there is one.
          const std::vector<std::uint32_t> rc = model_.refcounts();
          std::vector<int> candidates;
          for (const auto& [key, table] : model_.seqs) {
            if (table.length % c_.page_tokens != 0 && rc[table.pages.back()] > 1) {
              candidates.push_back(key);
            }
          }
          if (candidates.empty()) {
            op = Op::kAppend;  // nothing shared to write into: a plain append
          } else {
            id = candidates[rng_() % candidates.size()];
          }
          tokens = uniform(rng_, 1, 2 * c_.page_tokens);
        } else {
          // Mostly small appends that fit, sometimes past the capacity.
          const std::uint32_t room = capacity_tokens() - model_.seqs.at(id).length;
          tokens = rng_() % 16 == 0 ? uniform(rng_, 0, capacity_tokens() + 1)
                                    : uniform(rng_, 0, std::min(room, 2 * c_.page_tokens + 1));
        }
        ModelTable& model_table = model_.seqs.at(id);
        old_length = model_table.length;
        predicted = model_.append(model_table, tokens, next_value_);
        if (op == Op::kCowWrite && !predicted.error && predicted.copies != 1) {
          return fmt::format("the model predicts {} copies for a cow write", predicted.copies);
        }
        SequenceBlockTable& table = seqs_.at(id).table;
        if (std::string problem = check_blocks_needed(table, tokens, predicted); !problem.empty()) {
          return problem;
        }
        auto result = table.append(tokens, pool_);
        if (result.ok()) {
          effect = std::move(result).value();
          written = &table;
          written_model = &model_table;
        } else {
          actual = result.error();
        }
        break;
      }
      case Op::kDropPrefix:
      case Op::kRelease: {
        const bool prefix = op == Op::kDropPrefix;
        auto& model_map = prefix ? model_.prefixes : model_.seqs;
        LiveMap& live = prefix ? prefixes_ : seqs_;
        const int id = pick_key(rng_, model_map);
        model_.release(model_map, id);
        const auto status = live.at(id).table.release_all(pool_);
        if (status.ok()) {
          if (!live.at(id).table.empty()) return "release_all left a non-empty table";
          live.erase(id);
        } else {
          actual = status.error();
        }
        break;
      }
    }

    // Outcome: success or the predicted error.
    const auto index = static_cast<std::size_t>(op);
    if (predicted.error != actual) {
      return fmt::format("predicted {}, got {}",
                         predicted.error ? to_string(*predicted.error) : "success",
                         actual ? to_string(*actual) : "success");
    }
    if (actual) {
      ++stats_.failed[index];
      if (*actual == CoreError::kPoolExhausted) ++stats_.exhausted;
      if (*actual == CoreError::kRefcountOverflow) ++stats_.overflowed;
      if (*actual == CoreError::kLengthExceeded) ++stats_.length_exceeded;
      if (!new_table_untouched) return "a failed operation wrote into its new table";
      if (!(pool_.snapshot() == pool_before)) return "a failed operation changed the pool";
      if (tables_of(seqs_) != seqs_before || tables_of(prefixes_) != prefixes_before) {
        return "a failed operation changed a table";
      }
    } else {
      ++stats_.succeeded[index];
    }

    if (effect) {
      if (effect->copies.size() != predicted.copies || effect->new_pages != predicted.new_pages ||
          effect->first_page != predicted.first_page) {
        return fmt::format(
            "append effect: {} copies, {} new pages, first page {}; predicted {}, {}, {}",
            effect->copies.size(), effect->new_pages, effect->first_page, predicted.copies,
            predicted.new_pages, predicted.first_page);
      }
      stats_.copies += effect->copies.size();
      if (op == Op::kNewSequence || op == Op::kNewPrefix) old_length = 0;
      if (std::string problem = write_data(*written, *written_model, *effect, old_length);
          !problem.empty()) {
        return problem;
      }
    }
    return compare();
  }

  // blocks_needed must predict what the model predicts, without side effects.
  std::string check_blocks_needed(const SequenceBlockTable& table, std::uint32_t tokens,
                                  const Prediction& predicted) const {
    const PoolSnapshot before = pool_.snapshot();
    const auto needed = table.blocks_needed(tokens, pool_);
    if (!(pool_.snapshot() == before)) return "blocks_needed changed the pool";
    if (predicted.error == CoreError::kLengthExceeded) {
      if (needed.ok() || needed.error() != CoreError::kLengthExceeded) {
        return "blocks_needed missed kLengthExceeded";
      }
      return {};
    }
    if (!needed.ok()) return fmt::format("blocks_needed failed: {}", needed.error());
    if (needed.value() != predicted.needed) {
      return fmt::format("blocks_needed {}, model {}", needed.value(), predicted.needed);
    }
    return {};
  }

  static std::map<int, SequenceBlockTable> tables_of(const LiveMap& live) {
    std::map<int, SequenceBlockTable> out;
    for (const auto& [id, entry] : live) out.emplace(id, entry.table);
    return out;
  }

  // The data plane: executes the copies, then writes the new tokens through
  // the table, checking I5 (a copy's source is live) and I4 (no write into a
  // shared block).
  std::string write_data(const SequenceBlockTable& table, const ModelTable& model_table,
                         const AppendEffect& effect, std::uint32_t old_length) {
    const std::uint32_t pt = c_.page_tokens;
    for (const CopyOnWrite& copy : effect.copies) {
      if (copy.kind != CopyOnWrite::Kind::kCopy) return "a copy that is not kCopy";
      if (!pool_.is_live(copy.source)) {
        return fmt::format("I5: copy source {} is not live", copy.source);
      }
      if (copy.source == copy.block) return "a copy onto itself";
      std::copy_n(arena_.begin() + std::ptrdiff_t{copy.source} * pt, pt,
                  arena_.begin() + std::ptrdiff_t{copy.block} * pt);
    }
    // The model holds the token values; those from old_length on are new.
    if (model_table.length != table.length()) return "the written table's length differs";
    for (std::uint32_t position = old_length; position < table.length(); ++position) {
      const auto block = table.get(position / pt);
      if (!block) return fmt::format("token {} has no page", position);
      if (pool_.refcount(*block) != 1) {
        return fmt::format("I4: token {} would land in block {} with refcount {}", position, *block,
                           pool_.refcount(*block));
      }
      arena_[std::size_t{*block} * pt + position % pt] = model_table.tokens[position];
    }
    return {};
  }

  std::string compare_table(const ModelTable& model, const Live& live) const {
    const SequenceBlockTable& table = live.table;
    if (table.length() != model.length) {
      return fmt::format("{}: length {}, model {}", live.label, table.length(), model.length);
    }
    if (!std::equal(table.entries().begin(), table.entries().end(), model.pages.begin(),
                    model.pages.end())) {
      return fmt::format("{}: entries [{}], model [{}]", live.label,
                         fmt::join(table.entries(), ","), fmt::join(model.pages, ","));
    }
    // The kept count of pages that continue their predecessor's block, recounted.
    std::uint32_t continued = 0;
    for (std::size_t page = 1; page < model.pages.size(); ++page) {
      continued += model.pages[page] == model.pages[page - 1] + 1 ? 1 : 0;
    }
    if (table.continued_pages() != continued) {
      return fmt::format("{}: continued_pages {}, recounted {} over [{}]", live.label,
                         table.continued_pages(), continued, fmt::join(model.pages, ","));
    }
    for (std::uint32_t position = 0; position < model.length; ++position) {
      const BlockId b = model.pages[position / c_.page_tokens];
      const std::uint64_t value =
          arena_[std::size_t{b} * c_.page_tokens + position % c_.page_tokens];
      if (value != model.tokens[position]) {
        return fmt::format("{}: token {} reads {}, model {}", live.label, position, value,
                           model.tokens[position]);
      }
    }
    return {};
  }

  // Everything the model predicts, against the pool and the tables.
  std::string compare() {
    refs_.clear();
    for (const auto* live : {&seqs_, &prefixes_}) {
      for (const auto& [id, entry] : *live) refs_.push_back(TableRef{&entry.table, entry.label});
    }
    if (auto violation = checker_.check(pool_, c_.page_tokens, refs_)) {
      return fmt::format("invariant {}: {}", violation->invariant, violation->message);
    }
    const std::vector<std::uint32_t> rc = model_.refcounts();
    std::uint64_t filled_total = 0;
    for (std::uint32_t n : model_.filled()) filled_total += n;
    if (pool_.filled_total() != filled_total) {
      return fmt::format("filled_total {}, model {}", pool_.filled_total(), filled_total);
    }
    for (BlockId b = 0; b < pool_.total(); ++b) {
      if (pool_.refcount(b) != rc[b] || pool_.filled(b) != model_.filled()[b]) {
        return fmt::format("block {}: refcount {} filled {}, model {} and {}", b, pool_.refcount(b),
                           pool_.filled(b), rc[b], model_.filled()[b]);
      }
    }
    const std::vector<BlockId> free_list = model_.free_list();
    if (pool_.free_list() != free_list) {
      return fmt::format("free list [{}], model [{}]", fmt::join(pool_.free_list(), ","),
                         fmt::join(free_list, ","));
    }
    if (pool_.free_count() != free_list.size() ||
        pool_.used_count() != pool_.total() - free_list.size()) {
      return fmt::format("used {} free {}, model free {}", pool_.used_count(), pool_.free_count(),
                         free_list.size());
    }
    if (pool_.allocations() != model_.allocations() || pool_.frees() != model_.frees()) {
      return fmt::format("allocations {} frees {}, model {} and {}", pool_.allocations(),
                         pool_.frees(), model_.allocations(), model_.frees());
    }
    for (const auto& [model_map, live] :
         {std::pair{&model_.seqs, &seqs_}, std::pair{&model_.prefixes, &prefixes_}}) {
      if (model_map->size() != live->size()) return "table count differs from the model";
      for (const auto& [id, model_table] : *model_map) {
        const auto it = live->find(id);
        if (it == live->end()) return fmt::format("table {} missing", id);
        if (std::string problem = compare_table(model_table, it->second); !problem.empty()) {
          return problem;
        }
      }
    }
    return {};
  }

  RunConfig c_;
  Stats& stats_;
  std::mt19937_64 rng_;
  BlockPool pool_;
  Reference model_;
  LiveMap seqs_;
  LiveMap prefixes_;
  std::vector<std::uint64_t> arena_;  // [block][slot] token values
  InvariantChecker checker_;
  std::vector<TableRef> refs_;
  int next_id_ = 0;
  std::uint64_t next_value_ = 1;
};

TEST_CASE("model: random workloads agree with the reference model after every operation") {
  constexpr std::array<std::uint64_t, 6> kSeeds{0x5EED0001ull, 0xC0FFEEull,           0xDEADBEEFull,
                                                42ull,         0x9E3779B97F4A7C15ull, 20240611ull};
  constexpr std::array<std::uint32_t, 6> kMaxRefcounts{BlockPool::kMaxRefcount, 2, 3,
                                                       BlockPool::kMaxRefcount, 4, 2};
  constexpr std::uint32_t kOpsPerRun = 3000;  // 6 seeds * 3 orders * 3 page sizes * 3000 = 162000
  Stats stats;
  std::uint32_t smallest_pool = 0xFFFFFFFFu;
  std::uint32_t largest_pool = 0;
  for (std::size_t s = 0; s < kSeeds.size(); ++s) {
    for (AllocOrder order : test::kAllOrders) {
      for (std::uint32_t page_tokens : test::kPageSizes) {
        // Pool size and table capacity come from the seed; the first two seeds
        // pin the extremes of 1 and 64 blocks.
        std::mt19937_64 shape(kSeeds[s] ^ (std::uint64_t{page_tokens} << 32) ^
                              static_cast<std::uint64_t>(order));
        std::uint32_t pool_blocks = uniform(shape, 1, 64);
        const std::uint32_t capacity_pages = uniform(shape, 2, 8);
        if (s == 0) pool_blocks = 1;
        if (s == 1) pool_blocks = 64;
        const RunConfig config{kSeeds[s] + 977 * static_cast<std::uint64_t>(order) + page_tokens,
                               order,
                               page_tokens,
                               pool_blocks,
                               capacity_pages,
                               kMaxRefcounts[s],
                               kOpsPerRun};
        smallest_pool = std::min(smallest_pool, pool_blocks);
        largest_pool = std::max(largest_pool, pool_blocks);
        Run(config, stats).run();
      }
    }
  }

  INFO(fmt::format("{} operations, {} copies, {} exhausted, {} overflowed, {} too long", stats.ops,
                   stats.copies, stats.exhausted, stats.overflowed, stats.length_exceeded));
  REQUIRE(stats.ops >= 100000u);
  CHECK(smallest_pool == 1u);
  CHECK(largest_pool == 64u);
  // The workload exercised every operation, both ways where both can happen.
  for (std::size_t op = 0; op < kOpCount; ++op) {
    INFO(kOpNames[op] << ": " << stats.succeeded[op] << " succeeded, " << stats.failed[op]
                      << " failed");
    CHECK(stats.succeeded[op] > 100u);
  }
  for (Op op :
       {Op::kNewSequence, Op::kFork, Op::kCowWrite, Op::kNewPrefix, Op::kAdmit, Op::kAppend}) {
    INFO(kOpNames[static_cast<std::size_t>(op)]);
    CHECK(stats.failed[static_cast<std::size_t>(op)] > 0u);
  }
  CHECK(stats.exhausted > 1000u);
  CHECK(stats.overflowed > 100u);
  CHECK(stats.length_exceeded > 100u);
  CHECK(stats.copies > 1000u);
}

}  // namespace
}  // namespace kvreplay
