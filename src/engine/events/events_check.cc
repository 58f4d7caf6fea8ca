#include "engine/events/events_check.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/memory_budget.h"
#include "engine/events/events_store_stack.h"
#include "engine/events/events_usage.h"
#include "engine/offload/offload_media.h"
#include "io/byte_source.h"
#include "io/json_cursor.h"
#include "io/json_object.h"

namespace kvreplay {

namespace {

// ---------------------------------------------------------------------------
// Parsing one line into a batch (vLLM's KVEventBatch, kv_events.py). Every
// field is read and type-checked before any event is applied, as an object's
// keys come in any order (kvreplay's writer puts them in vLLM's order).

struct Problem {
  std::string field;
  std::string message;
};
using Status = Result<void, Problem>;

Unexpected<Problem> fail(std::string field, std::string message) {
  return Unexpected{Problem{std::move(field), std::move(message)}};
}

// A block hash (vLLM's ExternalBlockHash: bytes or int): an unsigned 64-bit
// integer, or a string compared as it is.
struct Hash {
  bool is_string = false;
  std::uint64_t value = 0;
  std::string text;
  std::string shown() const {
    return is_string ? fmt::format("\"{}\"", text) : fmt::format("{}", value);
  }
};

enum class Kind { kStored, kRemoved, kCleared };

struct ParsedEvent {
  Kind kind = Kind::kCleared;
  std::vector<Hash> hashes;
  std::optional<Hash> parent;
  std::string medium = "GPU";  // upper-cased
};

struct ParsedBatch {
  double ts = 0;
  std::uint64_t instance = 0;
  std::optional<std::uint64_t> seq;  // the ZMQ frame's sequence number, when recorded
  std::vector<ParsedEvent> events;
};

std::string upper(std::string text) {
  for (char& c : text) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return text;
}

class BatchParser {
 public:
  BatchParser(JsonCursor& in, EventsUsage& usage) : in_(in), usage_(usage) {}

  // False: a blank line.
  Result<bool, Problem> parse(ParsedBatch& out) {
    const int c = in_.peek();
    if (c < 0) return false;
    Status status;
    if (c == '{') {
      in_.skip();
      status = parse_object(out);
    } else if (c == '[') {
      status = parse_array(out);
    } else {
      return fail("json", fmt::format("expected a batch (an object or an array), got {}",
                                      describe_value(in_)));
    }
    if (!status) return Unexpected{status.error()};
    if (in_.peek() >= 0) {
      return fail("json",
                  fmt::format("unexpected {} after the batch (one a line)", in_.describe_next()));
    }
    return true;
  }

 private:
  static constexpr int kDepth = 4;  // of an event's values, for skip_value

  Status expected(const std::string& field, std::string_view what) {
    return fail(field, fmt::format("expected {}, got {}", what, describe_value(in_)));
  }
  bool at_null() { return in_.peek() == 'n'; }

  // The items of an array, item(i) reading the i-th value whole.
  template <class F>
  Status read_array(const std::string& field, F&& item) {
    if (in_.peek() != '[') return expected(field, "an array");
    in_.skip();
    if (in_.peek() == ']') {
      in_.skip();
      return {};
    }
    for (std::size_t i = 0;; ++i) {
      if (auto r = item(i); !r) return r;
      const int c = in_.peek();
      if (c == ',') {
        in_.skip();
        continue;
      }
      if (c == ']') {
        in_.skip();
        return {};
      }
      if (c < 0) return fail("json", fmt::format("unexpected end of input inside {}", field));
      return fail("json",
                  fmt::format("expected ',' or ']' in {}, got {}", field, in_.describe_next()));
    }
  }

  Status skip(const std::string& field) {
    if (auto r = in_.skip_value(kDepth); !r) return fail(field, r.error());
    return {};
  }

  Status read_ts(double& out) {
    const int c = in_.peek();
    if (c != '-' && (c < '0' || c > '9')) return expected("ts", "a number");
    if (auto r = in_.read_number(scratch_); !r) return fail("ts", r.error());
    const char* end = scratch_.data() + scratch_.size();
    auto [ptr, ec] = std::from_chars(scratch_.data(), end, out);
    if (ec != std::errc{} || ptr != end || !std::isfinite(out)) {
      return fail("ts", fmt::format("{} is out of range", scratch_));
    }
    return {};
  }

  Status read_uint(const std::string& field, std::uint64_t& out) {
    auto r = read_json_uint(in_, scratch_, 0, std::numeric_limits<std::uint64_t>::max(),
                            BelowMin::kParenthesised);
    if (!r) return fail(field, r.error().message);
    out = r.value();
    return {};
  }

  // An integer or null (data_parallel_rank, lora_id).
  Status read_optional_uint(const std::string& field, std::optional<std::uint64_t>& out) {
    out.reset();
    if (at_null()) return skip(field);
    std::uint64_t value = 0;
    if (auto r = read_uint(field, value); !r) return r;
    out = value;
    return {};
  }

  Status read_hash(const std::string& field, Hash& out) {
    const int c = in_.peek();
    if (c == '"') {
      out.is_string = true;
      if (auto r = in_.read_string(out.text); !r) return fail(field, r.error());
      return {};
    }
    if (c != '-' && (c < '0' || c > '9')) {
      return expected(field, "a block hash (an integer or a string)");
    }
    out.is_string = false;
    return read_uint(field, out.value);
  }

  Status read_hashes(const std::string& field, std::vector<Hash>& out) {
    out.clear();
    return read_array(field, [&](std::size_t i) -> Status {
      out.emplace_back();
      const std::string where = fmt::format("{}[{}]", field, i);
      if (auto r = read_hash(where, out.back()); !r) return r;
      return grow(where,
                  EventsUsage::kParsedHash + (out.back().is_string ? out.back().text.size() : 0));
    });
  }

  Status read_parent(const std::string& field, std::optional<Hash>& out) {
    out.reset();
    if (at_null()) return skip(field);
    Hash hash;
    if (auto r = read_hash(field, hash); !r) return r;
    out = std::move(hash);
    return grow(field, out->text.size());
  }

  // token_ids: integers, checked and dropped (the checks need hashes only).
  Status read_token_ids(const std::string& field) {
    return read_array(field, [&](std::size_t i) {
      std::uint64_t ignored = 0;
      return read_uint(fmt::format("{}[{}]", field, i), ignored);
    });
  }

  Status read_medium(const std::string& field, std::string& out) {
    out = "GPU";
    if (at_null()) return skip(field);
    if (in_.peek() != '"') return expected(field, "a string or null");
    if (auto r = in_.read_string(scratch_); !r) return fail(field, r.error());
    out = upper(scratch_);
    return grow(field, out.size());
  }

  Status read_type(const std::string& field, Kind& out) {
    if (in_.peek() != '"') return expected(field, "a string");
    if (auto r = in_.read_string(scratch_); !r) return fail(field, r.error());
    if (scratch_ == "BlockStored") {
      out = Kind::kStored;
    } else if (scratch_ == "BlockRemoved") {
      out = Kind::kRemoved;
    } else if (scratch_ == "AllBlocksCleared") {
      out = Kind::kCleared;
    } else {
      return fail(field, fmt::format("unknown event type \"{}\" (BlockStored, BlockRemoved or "
                                     "AllBlocksCleared)",
                                     scratch_));
    }
    return {};
  }

  // The fields an event may have, as the bits of `seen` (duplicate keys).
  enum Field : unsigned {
    kType = 1,
    kHashes = 2,
    kParent = 4,
    kTokens = 8,
    kBlockSize = 16,
    kLora = 32,
    kMedium = 64
  };

  // {"type": ..., ...}: every known key type-checked whatever the type, the
  // rest skipped (lora_name, group_idx, extra_keys, ...).
  Status read_event_object(const std::string& where, ParsedEvent& out) {
    in_.skip();  // '{'
    unsigned seen = 0;
    std::string key;
    JsonMembers members(in_, key, "an event", "the event");
    while (members.next()) {
      const std::string field = fmt::format("{}.{}", where, key);
      unsigned bit = 0;
      Status status;
      std::uint64_t ignored = 0;
      std::optional<std::uint64_t> lora;
      if (key == "type") {
        bit = kType;
        status = read_type(field, out.kind);
      } else if (key == "block_hashes") {
        bit = kHashes;
        status = read_hashes(field, out.hashes);
      } else if (key == "parent_block_hash") {
        bit = kParent;
        status = read_parent(field, out.parent);
      } else if (key == "token_ids") {
        bit = kTokens;
        status = read_token_ids(field);
      } else if (key == "block_size") {
        bit = kBlockSize;
        status = read_uint(field, ignored);
      } else if (key == "lora_id") {
        bit = kLora;
        status = read_optional_uint(field, lora);
      } else if (key == "medium") {
        bit = kMedium;
        status = read_medium(field, out.medium);
      } else {
        status = skip(field);
      }
      if (!status) return status;
      if ((seen & bit) != 0) return fail(field, "duplicate key");
      seen |= bit;
    }
    if (members.failed()) return fail(members.problem().field, members.problem().message);
    if ((seen & kType) == 0) return fail(where + ".type", "missing");
    if (out.kind != Kind::kCleared && (seen & kHashes) == 0) {
      return fail(where + ".block_hashes", out.kind == Kind::kStored
                                               ? "missing (BlockStored needs it)"
                                               : "missing (BlockRemoved needs it)");
    }
    return {};
  }

  // ["BlockStored", block_hashes, parent, token_ids, block_size, lora_id,
  // medium], ["BlockRemoved", block_hashes, medium], ["AllBlocksCleared"]:
  // msgspec's array_like encoding with the tag first.
  Status read_event_array(const std::string& where, ParsedEvent& out) {
    std::size_t items = 0;
    auto status = read_array(where, [&](std::size_t i) -> Status {
      items = i + 1;
      if (i == 0) return read_type(where + ".type", out.kind);
      if (out.kind == Kind::kStored) {
        std::uint64_t ignored = 0;
        std::optional<std::uint64_t> lora;
        switch (i) {
          case 1: return read_hashes(where + ".block_hashes", out.hashes);
          case 2: return read_parent(where + ".parent_block_hash", out.parent);
          case 3: return read_token_ids(where + ".token_ids");
          case 4: return read_uint(where + ".block_size", ignored);
          case 5: return read_optional_uint(where + ".lora_id", lora);
          case 6: return read_medium(where + ".medium", out.medium);
          default: break;
        }
      } else if (out.kind == Kind::kRemoved) {
        if (i == 1) return read_hashes(where + ".block_hashes", out.hashes);
        if (i == 2) return read_medium(where + ".medium", out.medium);
      }
      return skip(fmt::format("{}[{}]", where, i));  // a later version's fields
    });
    if (!status) return status;
    if (items == 0) return fail(where + ".type", "missing (an array event starts with its type)");
    if (out.kind != Kind::kCleared && items < 2) {
      return fail(where + ".block_hashes", out.kind == Kind::kStored
                                               ? "missing (BlockStored needs it)"
                                               : "missing (BlockRemoved needs it)");
    }
    return {};
  }

  Status read_events(std::vector<ParsedEvent>& out) {
    out.clear();
    return read_array("events", [&](std::size_t i) -> Status {
      const std::string where = fmt::format("events[{}]", i);
      out.emplace_back();
      if (auto r = grow(where, EventsUsage::kParsedEvent); !r) return r;
      const int c = in_.peek();
      if (c == '{') return read_event_object(where, out.back());
      if (c == '[') return read_event_array(where, out.back());
      return expected(where, "an event (an object or an array)");
    });
  }

  // {"ts": ..., "events": [...], "instance": ..., "data_parallel_rank": ...}
  Status parse_object(ParsedBatch& out) {
    bool has_ts = false, has_events = false, has_instance = false, has_rank = false;
    bool has_seq = false;
    out.seq.reset();
    std::optional<std::uint64_t> instance, rank;
    std::string key;
    JsonMembers members(in_, key, "a batch", "the batch");
    while (members.next()) {
      bool* seen = nullptr;
      Status status;
      if (key == "ts") {
        seen = &has_ts;
        status = read_ts(out.ts);
      } else if (key == "events") {
        seen = &has_events;
        status = read_events(out.events);
      } else if (key == "instance") {
        seen = &has_instance;
        std::uint64_t value = 0;
        status = read_uint(key, value);
        instance = value;
      } else if (key == "data_parallel_rank") {
        seen = &has_rank;
        status = read_optional_uint(key, rank);
      } else if (key == "seq") {
        seen = &has_seq;
        std::uint64_t value = 0;
        status = read_uint(key, value);
        out.seq = value;
      } else {
        status = skip(key);
      }
      if (!status) return status;
      if (seen != nullptr) {
        if (*seen) return fail(key, "duplicate key");
        *seen = true;
      }
    }
    if (members.failed()) return fail(members.problem().field, members.problem().message);
    if (!has_ts) return fail("ts", "missing");
    if (!has_events) return fail("events", "missing");
    out.instance = instance.value_or(rank.value_or(0));
    return {};
  }

  // [ts, [events...], data_parallel_rank]: the array_like encoding.
  Status parse_array(ParsedBatch& out) {
    std::size_t items = 0;
    std::optional<std::uint64_t> rank;
    auto status = read_array("the batch", [&](std::size_t i) -> Status {
      items = i + 1;
      if (i == 0) return read_ts(out.ts);
      if (i == 1) return read_events(out.events);
      if (i == 2) return read_optional_uint("data_parallel_rank", rank);
      return skip(fmt::format("batch[{}]", i));
    });
    if (!status) return status;
    if (items == 0) return fail("ts", "missing");
    if (items == 1) return fail("events", "missing");
    out.instance = rank.value_or(0);
    return {};
  }

  // The line's parsed events and hashes grow by `bytes`; over the limit: the
  // field's problem.
  Status grow(const std::string& field, std::uint64_t bytes) {
    usage_.parsed += bytes;
    if (usage_.over()) return fail(field, usage_.problem());
    return {};
  }

  JsonCursor& in_;
  EventsUsage& usage_;
  std::string scratch_;
};

struct HashState {
  std::uint64_t line = 0;      // of its last store
  double removed_ts = 0;       // when it last stopped being cached
  std::uint32_t count = 0;     // copies cached (1 at most with --unique)
  std::uint32_t position = 0;  // of its last store in the medium's StoreStack
  std::uint32_t epoch = 0;     // the medium's clears it has seen
};

struct MediumState {
  std::unordered_map<std::uint32_t, HashState> hashes;  // every hash ever stored here
  StoreStack stack;
  std::uint64_t stored = 0, removed = 0, cleared = 0, cached = 0, peak = 0;
  double peak_ts = 0;
  std::uint64_t duplicate_stores = 0, keys_stored = 0, keys_removed = 0, keys_cached = 0;
  std::uint64_t keys_peak = 0, orphan_stores = 0, unmatched_removals = 0;
  std::uint64_t reuses = 0;
  // distance_counts[d]: the re-stores at LRU stack distance d (d is below the
  // hashes of the medium, so it is as long as they are at most).
  std::vector<std::uint64_t> distance_counts;
  std::vector<double> reuse_times;
  std::vector<std::pair<double, std::uint64_t>> history;  // (ts, cached) where it changed
  // AllBlocksCleared is O(1): a hash cached in an earlier epoch was cleared at
  // clear_ts[its epoch] (see current()).
  std::uint32_t epoch = 0;
  std::vector<double> clear_ts;
  std::uint64_t touched = 0;  // the last batch (from 1) that changed it

  // The hash's state, brought up to the medium's epoch.
  HashState& current(HashState& state) {
    if (state.epoch != epoch) {
      if (state.count > 0) {
        state.removed_ts = clear_ts[state.epoch];
        state.count = 0;
      }
      state.epoch = epoch;
    }
    return state;
  }
  void clear(double ts) {
    cleared += cached;
    cached = 0;
    keys_cached = 0;
    clear_ts.push_back(ts);
    ++epoch;
  }
  // True when the history grew.
  bool after_batch(double ts) {
    if (!history.empty() && history.back().first == ts) {
      history.back().second = cached;
    } else if (history.empty() ? cached != 0 : history.back().second != cached) {
      history.emplace_back(ts, cached);
      return true;
    }
    return false;
  }
  std::uint64_t cached_at(double ts) const {
    auto it = std::upper_bound(history.begin(), history.end(), ts,
                               [](double t, const auto& entry) { return t < entry.first; });
    return it == history.begin() ? 0 : std::prev(it)->second;
  }
};

// The nearest-rank percentile (p in 1..100) of sorted values: the
// ceil(p n / 100)-th smallest.
template <class T>
T percentile(const std::vector<T>& sorted, std::uint64_t p) {
  const std::uint64_t n = sorted.size();
  const std::uint64_t rank = std::max<std::uint64_t>((p * n + 99) / 100, 1);
  return sorted[rank - 1];
}

// The same of the values counted in `counts` (counts[v]: how many are v), `n` in all.
std::uint64_t percentile_of_counts(const std::vector<std::uint64_t>& counts, std::uint64_t n,
                                   std::uint64_t p) {
  const std::uint64_t rank = std::max<std::uint64_t>((p * n + 99) / 100, 1);
  std::uint64_t seen = 0;
  for (std::size_t v = 0; v < counts.size(); ++v) {
    seen += counts[v];
    if (seen >= rank) return v;
  }
  return counts.empty() ? 0 : counts.size() - 1;
}

// GPU, then the offload media in lookup order, then others (by name).
int medium_rank(const std::string& medium) {
  if (medium == "GPU") return 0;
  int rank = 1;
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    if (medium == row.event_name) return rank;
    ++rank;
  }
  return rank;
}

}  // namespace

struct EventsChecker::Impl {
  std::string file;
  EventsOptions options;
  std::map<std::pair<std::uint64_t, std::string>, MediumState> media;
  struct LastBatch {
    double ts = 0;
    std::uint64_t line = 0;
    std::optional<std::uint64_t> seq;
  };
  std::map<std::uint64_t, LastBatch> instances;
  // Hash interning: each distinct hash of the stream gets an id.
  std::unordered_map<std::uint64_t, std::uint32_t> int_ids;
  std::unordered_map<std::string, std::uint32_t> string_ids;
  std::uint32_t next_id = 0;
  EventsSummary totals;
  ParsedBatch batch;
  std::vector<MediumState*> touched;
  EventsUsage usage;

  // Over the memory limit: the problem of `field`.
  Status check(const std::string& field) const {
    if (usage.over()) return fail(field, usage.problem());
    return {};
  }

  std::optional<std::uint32_t> find_id(const Hash& hash) const {
    if (hash.is_string) {
      auto it = string_ids.find(hash.text);
      if (it == string_ids.end()) return std::nullopt;
      return it->second;
    }
    auto it = int_ids.find(hash.value);
    if (it == int_ids.end()) return std::nullopt;
    return it->second;
  }
  std::uint32_t intern(const Hash& hash) {
    auto take = [this, &hash](auto& ids, const auto& key) {
      auto [it, fresh] = ids.try_emplace(key, next_id);
      if (fresh) {
        ++next_id;
        ++usage.ids;
        if (hash.is_string) usage.names += EventsUsage::kStringId + hash.text.size();
      }
      return it->second;
    };
    return hash.is_string ? take(string_ids, hash.text) : take(int_ids, hash.value);
  }

  MediumState& medium(std::uint64_t instance, const std::string& name) {
    auto [it, fresh] = media.try_emplace({instance, name});
    if (fresh) {
      ++usage.media;
      usage.names += name.size();
    }
    touch(it->second);
    return it->second;
  }
  void touch(MediumState& state) {
    if (state.touched != totals.batches) {
      state.touched = totals.batches;
      touched.push_back(&state);
    }
  }

  // vLLM's ZmqEventPublisher numbers an instance's batches 0, 1, ... (its
  // _seq_gen): an instance's first seq above 0 is a capture begun mid-run,
  // a jump a gap (batches the subscriber missed), no rise an error.
  Status first_seq() {
    if (!batch.seq) return {};
    ++totals.seq_batches;
    if (*batch.seq == 0) return {};
    if (!options.mid_stream) {
      return fail("seq", fmt::format("instance {} starts at {}, not 0 (a stream captured mid-run: "
                                     "--mid-stream)",
                                     batch.instance, *batch.seq));
    }
    ++totals.late_starts;
    return {};
  }
  Status next_seq(const LastBatch& last) {
    if (!batch.seq) return {};
    ++totals.seq_batches;
    if (!last.seq) return {};
    if (*batch.seq <= *last.seq) {
      return fail("seq", fmt::format("{} does not follow {} (line {}, instance {})", *batch.seq,
                                     *last.seq, last.line, batch.instance));
    }
    if (*batch.seq > *last.seq + 1) {
      ++totals.seq_gaps;
      totals.seq_missing += *batch.seq - *last.seq - 1;
    }
    return {};
  }
  Status store(const ParsedEvent& event, const std::string& where, std::uint64_t line);
  Status remove(const ParsedEvent& event, const std::string& where);
  Status apply(std::uint64_t line);
};

Status EventsChecker::Impl::store(const ParsedEvent& event, const std::string& where,
                                  std::uint64_t line) {
  const double ts = batch.ts;
  MediumState& state = medium(batch.instance, event.medium);
  const std::string place = fmt::format("instance {}'s {}", batch.instance, event.medium);
  if (event.parent) {
    auto id = find_id(*event.parent);
    if (!id || state.hashes.count(*id) == 0) {
      // Stored before the capture began: a root, as Dynamo's indexer would
      // have it had it seen the run from its start.
      if (!options.mid_stream) {
        return fail(where + ".parent_block_hash",
                    fmt::format("{} was never stored in {} (a stream captured mid-run: "
                                "--mid-stream)",
                                event.parent->shown(), place));
      }
      ++state.orphan_stores;
    }
  }
  ++totals.stored_events;
  for (std::size_t i = 0; i < event.hashes.size(); ++i) {
    const Hash& hash = event.hashes[i];
    if (next_id == StoreStack::kNone && !find_id(hash)) {
      return fail(fmt::format("{}.block_hashes[{}]", where, i), "more than 2^32-1 distinct hashes");
    }
    const std::uint32_t id = intern(hash);
    auto [it, fresh] = state.hashes.try_emplace(id);
    HashState& entry = state.current(it->second);
    if (!fresh && entry.count > 0) {
      if (options.unique) {
        return fail(fmt::format("{}.block_hashes[{}]", where, i),
                    fmt::format("{} is already cached in {} (stored on line {}; without "
                                "--unique a medium holds a hash in several blocks)",
                                hash.shown(), place, entry.line));
      }
      ++state.duplicate_stores;  // another block under the hash (BlockHashToBlockMap)
    }
    if (state.stack.sparse()) {
      usage.positions -= state.stack.positions();
      state.stack.compact([&](std::uint32_t owner, std::uint32_t position) {
        state.hashes[owner].position = position;
      });
      usage.positions += state.stack.positions();
    }
    std::uint64_t distance = 0;
    entry.position = state.stack.store(id, fresh ? StoreStack::kNone : entry.position, distance);
    ++usage.positions;
    if (fresh) ++usage.entries;
    if (!fresh && entry.count == 0) {
      if (distance >= state.distance_counts.size()) state.distance_counts.resize(distance + 1);
      ++state.distance_counts[distance];
      ++state.reuses;
      state.reuse_times.push_back(ts - entry.removed_ts);
      ++usage.reuses;
    }
    if (entry.count++ == 0) {
      ++state.keys_stored;
      state.keys_peak = std::max(state.keys_peak, ++state.keys_cached);
    }
    entry.line = line;
    ++state.stored;
    if (++state.cached > state.peak) {
      state.peak = state.cached;
      state.peak_ts = ts;
    }
    if (auto r = check(fmt::format("{}.block_hashes[{}]", where, i)); !r) return r;
  }
  return {};
}

Status EventsChecker::Impl::remove(const ParsedEvent& event, const std::string& where) {
  MediumState& state = medium(batch.instance, event.medium);
  ++totals.removed_events;
  for (std::size_t i = 0; i < event.hashes.size(); ++i) {
    const Hash& hash = event.hashes[i];
    auto id = find_id(hash);
    auto it = id ? state.hashes.find(*id) : state.hashes.end();
    if (it == state.hashes.end() || state.current(it->second).count == 0) {
      // Stored before the capture began (Dynamo's EventDedupFilter passes an
      // untracked removal on): counted, the cached figures untouched.
      if (!options.mid_stream) {
        return fail(fmt::format("{}.block_hashes[{}]", where, i),
                    fmt::format("{} is not cached in instance {}'s {} (a stream captured "
                                "mid-run: --mid-stream)",
                                hash.shown(), batch.instance, event.medium));
      }
      ++state.unmatched_removals;
      ++state.removed;
      continue;
    }
    HashState& entry = it->second;
    if (--entry.count == 0) {
      entry.removed_ts = batch.ts;
      --state.keys_cached;
      ++state.keys_removed;
    }
    --state.cached;
    ++state.removed;
  }
  return {};
}

Status EventsChecker::Impl::apply(std::uint64_t line) {
  auto [last, first] = instances.try_emplace(batch.instance, LastBatch{batch.ts, line, batch.seq});
  if (first) {
    ++usage.instances;
    if (auto r = check("ts"); !r) return r;
    if (auto r = first_seq(); !r) return r;
  } else {
    if (batch.ts < last->second.ts) {
      return fail("ts", fmt::format("{} goes back from {} (line {}, instance {})", batch.ts,
                                    last->second.ts, last->second.line, batch.instance));
    }
    if (auto r = next_seq(last->second); !r) return r;
    if (batch.ts - last->second.ts > totals.max_interval) {
      totals.max_interval = batch.ts - last->second.ts;
      totals.max_interval_ts = batch.ts;
    }
    last->second = LastBatch{batch.ts, line, batch.seq ? batch.seq : last->second.seq};
  }
  ++totals.batches;
  totals.first_ts = std::min(totals.first_ts.value_or(batch.ts), batch.ts);
  totals.last_ts = std::max(totals.last_ts.value_or(batch.ts), batch.ts);
  touched.clear();
  for (std::size_t i = 0; i < batch.events.size(); ++i) {
    const ParsedEvent& event = batch.events[i];
    const std::string where = fmt::format("events[{}]", i);
    Status status;
    if (event.kind == Kind::kStored) {
      status = store(event, where, line);
    } else if (event.kind == Kind::kRemoved) {
      status = remove(event, where);
    } else {
      // vLLM's BlockPool.reset_prefix_cache: every medium of the instance.
      ++totals.cleared_events;
      for (auto it = media.lower_bound({batch.instance, std::string()});
           it != media.end() && it->first.first == batch.instance; ++it) {
        it->second.clear(batch.ts);
        ++usage.changes;
        touch(it->second);
      }
      status = check(where);
    }
    if (!status) return status;
  }
  for (MediumState* state : touched) usage.changes += state->after_batch(batch.ts) ? 1 : 0;
  return check("events");
}

EventsChecker::EventsChecker(std::string file, EventsOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->file = std::move(file);
  impl_->options = options;
  impl_->totals.unique = options.unique;
  impl_->totals.mid_stream = options.mid_stream;
  impl_->usage.limit = options.memory_limit.value_or(memory_limit().bytes);
}

std::optional<std::string> EventsChecker::line_problem(std::uint64_t bytes) const {
  if (bytes > EventsUsage::kLineMax)
    return fmt::format("line longer than {} MiB", EventsUsage::kLineMax >> 20);
  EventsUsage usage = impl_->usage;
  usage.line = bytes;
  usage.parsed = 0;
  if (usage.over()) return usage.problem();
  return std::nullopt;
}

EventsChecker::~EventsChecker() = default;

InputStatus EventsChecker::add_line(std::string_view text, std::uint64_t line) {
  auto source = ByteSource::from_string(std::string(text));
  JsonCursor in(*source);
  if (line == 1) in.skip_byte_order_mark();
  Impl& impl = *impl_;
  impl.batch.events.clear();
  if (impl.batch.events.capacity() > 4096) impl.batch.events.shrink_to_fit();  // a long line's
  impl.batch.instance = 0;
  impl.batch.seq.reset();
  impl.usage.line = text.size();
  impl.usage.parsed = 0;
  BatchParser parser(in, impl.usage);
  auto parsed = parser.parse(impl.batch);
  Status status;
  if (!parsed) {
    status = Unexpected{parsed.error()};
  } else if (parsed.value()) {
    status = impl.apply(line);
  }
  if (!status) {
    return Unexpected{InputError{impl.file, line, status.error().field, status.error().message}};
  }
  return {};
}

EventsSummary EventsChecker::summary() const {
  EventsSummary out = impl_->totals;
  if (out.first_ts) {
    const double first = *out.first_ts, last = *out.last_ts;
    const int points = first == last ? 1 : 10;
    for (int k = 0; k < points; ++k) {
      out.sample_ts.push_back(k == points - 1 ? last : first + (last - first) * k / (points - 1));
    }
  }
  const double span = out.first_ts ? *out.last_ts - *out.first_ts : 0;
  for (const auto& [key, state] : impl_->media) {
    EventsMedium m;
    m.instance = key.first;
    m.medium = key.second;
    m.stored = state.stored;
    m.removed = state.removed;
    m.cleared = state.cleared;
    m.cached = state.cached;
    m.peak = state.peak;
    m.peak_ts = state.peak_ts;
    if (span > 0) {
      m.churn = static_cast<double>(state.stored + state.removed) / span;
      m.stored_rate = static_cast<double>(state.stored) / span;
      m.removed_rate = static_cast<double>(state.removed) / span;
    }
    m.duplicate_stores = state.duplicate_stores;
    m.keys_stored = state.keys_stored;
    m.keys_removed = state.keys_removed;
    m.keys_cached = state.keys_cached;
    m.keys_peak = state.keys_peak;
    m.orphan_stores = state.orphan_stores;
    m.unmatched_removals = state.unmatched_removals;
    for (double ts : out.sample_ts) m.samples.push_back(state.cached_at(ts));
    m.reuses = state.reuses;
    if (m.reuses > 0) {
      const auto& counts = state.distance_counts;
      m.distance_p50 = percentile_of_counts(counts, m.reuses, 50);
      m.distance_p90 = percentile_of_counts(counts, m.reuses, 90);
      m.distance_p99 = percentile_of_counts(counts, m.reuses, 99);
      m.distance_max = counts.size() - 1;
      std::vector<double> times = state.reuse_times;
      std::sort(times.begin(), times.end());
      m.time_p50 = percentile(times, 50);
      m.time_p99 = percentile(times, 99);
    }
    out.media.push_back(std::move(m));
  }
  std::stable_sort(out.media.begin(), out.media.end(), [](const auto& a, const auto& b) {
    return std::tuple(a.instance, medium_rank(a.medium), a.medium) <
           std::tuple(b.instance, medium_rank(b.medium), b.medium);
  });
  return out;
}

}  // namespace kvreplay
