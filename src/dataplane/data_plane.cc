#include "dataplane/data_plane.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <tuple>

#include "dataplane/arena.h"

namespace kvreplay {

namespace {

// The verification batch never asks the mismatch search for more than this
// many bytes of candidate rows.
constexpr std::uint64_t kSearchBudgetBytes = 256ull << 20;

bool key_less(const LiveTable& a, const LiveTable& b) {
  return std::tie(a.key.kind, a.key.seq, a.key.prefix) <
         std::tie(b.key.kind, b.key.seq, b.key.prefix);
}

std::string hex_bits(const std::uint8_t* element, std::uint32_t bytes) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, element, bytes);  // little-endian: the low bytes
  return fmt::format("0x{:0{}x}", bits, 2 * bytes);
}

}  // namespace

DataPlane::DataPlane(std::unique_ptr<KvBackend> backend, DataPlaneOptions options,
                     DataPlaneFaults faults)
    : backend_(std::move(backend)),
      shape_(backend_->shape()),
      options_(options),
      faults_(faults),
      block_bytes_(shape_.layer_block_bytes() * shape_.layers) {}

std::string DataPlane::label_of(const TableKey& key) {
  return key.kind == TableKey::Kind::kSequence ? fmt::format("seq {}", key.seq)
                                               : fmt::format("prefix '{}'", key.prefix);
}

Lineage* DataPlane::find(const TableKey& key) {
  if (key.kind == TableKey::Kind::kSequence) {
    auto it = sequences_.find(key.seq);
    return it == sequences_.end() ? nullptr : &it->second;
  }
  auto it = prefixes_.find(key.prefix);
  return it == prefixes_.end() ? nullptr : &it->second;
}

std::string DataPlane::writer_text(std::uint32_t writer) const {
  if (writer == 0 || writer > writers_.size()) return fmt::format("writer {}", writer);
  const WriterInfo& info = writers_[writer - 1];
  return fmt::format("{} ({} at event {}, line {})", info.label, info.how, info.event, info.line);
}

void DataPlane::on_create(const TableKey& key, const TableKey* source,
                          const SequenceBlockTable& table, const Event& event) {
  (void)table;
  std::string how;
  switch (event.op) {
    case Op::kPrefix: how = "prefix"; break;
    case Op::kAdmit:
      how = source != nullptr ? fmt::format("admit on {}", label_of(*source)) : "admit";
      break;
    case Op::kFork: how = fmt::format("fork of {}", source ? label_of(*source) : "?"); break;
    default: how = std::string(to_string(event.op)); break;
  }
  const std::uint32_t writer = new_writer(key, std::move(how), event);
  const Lineage* parent = source != nullptr ? find(*source) : nullptr;
  assert(source == nullptr || parent != nullptr);
  Lineage lineage =
      parent != nullptr ? Lineage(*parent, parent->length(), writer) : Lineage(writer);
  if (key.kind == TableKey::Kind::kSequence) {
    sequences_.insert_or_assign(key.seq, std::move(lineage));
  } else {
    prefixes_.insert_or_assign(std::string(key.prefix), std::move(lineage));
  }
}

std::uint32_t DataPlane::new_writer(const TableKey& key, std::string how, const Event& event) {
  writers_.push_back({label_of(key), std::move(how), event.index, event.line});
  return static_cast<std::uint32_t>(writers_.size());
}

void DataPlane::on_create_on_hits(const TableKey& key, std::span<const std::uint64_t> hits,
                                  const SequenceBlockTable& table, const Event& event) {
  (void)table;
  const std::uint32_t writer =
      new_writer(key, fmt::format("admit on {} cached pages", hits.size()), event);
  Lineage lineage(writer);
  for (std::uint64_t name : hits) {
    auto it = cached_.find(name);
    assert(it != cached_.end());
    lineage.adopt(it->second.runs);
  }
  sequences_.insert_or_assign(key.seq, std::move(lineage));
}

void DataPlane::on_cache(std::uint64_t name, const TableKey& key, std::uint32_t page, BlockId block,
                         const Event& event) {
  (void)event;
  const Lineage* lineage = find(key);
  assert(lineage != nullptr);
  const std::uint32_t begin = page * shape_.page_tokens;
  cached_.insert_or_assign(
      name, CachedBlock{block, page, lineage->runs_between(begin, begin + shape_.page_tokens)});
}

void DataPlane::on_uncache(std::uint64_t name, const Event& event) {
  (void)event;
  cached_.erase(name);
}

void DataPlane::on_store(std::uint8_t tier_index, std::uint64_t copy, const TableKey& key,
                         std::uint32_t page, BlockId block, const Event& event) {
  (void)event;
  flush();  // the page's bytes are all written before they are read
  HostTier& tier = tiers_[tier_index];
  if (tier.free_slots.empty()) {
    const std::uint64_t held = tier.chunks.size() * kSlotsPerChunk * block_bytes_;
    if (held + kSlotsPerChunk * block_bytes_ > options_.tier_limit_bytes) {
      throw BackendError(fmt::format(
          "the {} tier would take more than {} of host memory ({} copies held; --arena-limit "
          "bounds each tier)",
          trace_tier_name(tier_index), size_text(options_.tier_limit_bytes), tier.copies.size()));
    }
    const auto first = static_cast<std::uint32_t>(tier.chunks.size() * kSlotsPerChunk);
    tier.chunks.push_back(std::make_unique<std::uint8_t[]>(kSlotsPerChunk * block_bytes_));
    for (std::uint32_t i = kSlotsPerChunk; i > 0; --i) tier.free_slots.push_back(first + i - 1);
  }
  const std::uint32_t slot = tier.free_slots.back();
  tier.free_slots.pop_back();
  std::uint8_t* data = slot_data(tier, slot);
  backend_->read_block(block, std::span<std::uint8_t>(data, block_bytes_));
  if (++stores_seen_ == faults_.corrupt_store) data[0] ^= 0xFF;
  const Lineage* lineage = find(key);
  assert(lineage != nullptr);
  const std::uint32_t begin = page * shape_.page_tokens;
  tier.copies.insert_or_assign(
      copy, TierCopy{slot, page, lineage->runs_between(begin, begin + shape_.page_tokens)});
}

void DataPlane::on_load(std::uint8_t tier_index, std::uint64_t copy, std::uint64_t name,
                        BlockId block, const Event& event) {
  (void)event;
  HostTier& tier = tiers_[tier_index];
  auto it = tier.copies.find(copy);
  assert(it != tier.copies.end());
  if (++loads_seen_ != faults_.skip_load) {
    backend_->write_block(
        block, std::span<const std::uint8_t>(slot_data(tier, it->second.slot), block_bytes_));
  }
  cached_.insert_or_assign(name, CachedBlock{block, it->second.page, it->second.runs});
}

void DataPlane::on_drop(std::uint8_t tier_index, std::uint64_t copy, const Event& event) {
  (void)event;
  HostTier& tier = tiers_[tier_index];
  auto it = tier.copies.find(copy);
  if (it == tier.copies.end()) return;
  tier.free_slots.push_back(it->second.slot);
  tier.copies.erase(it);
}

std::optional<std::string> DataPlane::compare_block(const std::uint8_t* bytes,
                                                    std::uint64_t layer_stride,
                                                    std::uint64_t row_stride, std::uint32_t page,
                                                    std::span<const WriterRun> runs,
                                                    std::string_view what) {
  const std::uint64_t token_bytes = shape_.token_bytes();
  expected_.resize(token_bytes);
  for (const WriterRun& run : runs) {
    for (std::uint32_t position = run.begin; position < run.end; ++position) {
      const std::uint32_t t = position - page * shape_.page_tokens;
      for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
        const std::uint8_t* read = bytes + layer * layer_stride + t * row_stride;
        content::fill_token_row(expected_.data(), shape_.dtype, run.writer, position, layer,
                                shape_.kv_heads, shape_.head_dim, shape_.kv_tensors);
        if (std::memcmp(read, expected_.data(), token_bytes) == 0) continue;
        std::uint64_t byte = 0;
        while (byte < token_bytes && read[byte] == expected_[byte]) ++byte;
        return fmt::format(
            "{} (page {}) position {}: layer {} byte {} reads {}, expected {}, the "
            "token of {}",
            what, page, position, layer, byte, hex_bits(read + byte, 1),
            hex_bits(expected_.data() + byte, 1), writer_text(run.writer));
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> DataPlane::verify_cached() {
  if (cached_.empty()) return std::nullopt;
  std::vector<std::uint64_t> names;
  names.reserve(cached_.size());
  for (const auto& [name, cached] : cached_) names.push_back(name);
  std::sort(names.begin(), names.end());
  const std::uint64_t token_bytes = shape_.token_bytes();
  const std::uint64_t per_gather = std::max<std::uint64_t>(
      1, options_.verify_chunk_bytes / (token_bytes * shape_.layers * shape_.page_tokens));
  for (std::size_t first = 0; first < names.size(); first += per_gather) {
    const std::size_t last = std::min<std::size_t>(names.size(), first + per_gather);
    verify_batch_.clear();
    for (std::size_t i = first; i < last; ++i) {
      const CachedBlock& cached = cached_.at(names[i]);
      verify_batch_.add(std::span<const BlockId>(&cached.block, 1), shape_.page_tokens, 0,
                        shape_.page_tokens);
    }
    const std::uint64_t rows = verify_batch_.rows();
    backend_->gather(verify_batch_);
    gathered_.resize(rows * token_bytes * shape_.layers);
    backend_->read_gathered(gathered_);
    verify_batch_.clear();
    for (std::size_t i = first; i < last; ++i) {
      const CachedBlock& cached = cached_.at(names[i]);
      ++summary_.cached;
      const std::uint8_t* base = gathered_.data() + (i - first) * shape_.page_tokens * token_bytes;
      if (auto found =
              compare_block(base, rows * token_bytes, token_bytes, cached.page, cached.runs,
                            fmt::format("cached block {} (block {})", names[i], cached.block))) {
        return found;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> DataPlane::verify_copies() {
  for (std::uint8_t t = 0; t < kTraceTiers; ++t) {
    HostTier& tier = tiers_[t];
    std::vector<std::uint64_t> keys;
    keys.reserve(tier.copies.size());
    for (const auto& [key, copy] : tier.copies) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    for (std::uint64_t key : keys) {
      const TierCopy& copy = tier.copies.at(key);
      ++summary_.copies;
      if (auto found = compare_block(slot_data(tier, copy.slot), shape_.layer_block_bytes(),
                                     shape_.token_bytes(), copy.page, copy.runs,
                                     fmt::format("{} tier copy {}", trace_tier_name(t), key))) {
        return found;
      }
    }
  }
  return std::nullopt;
}

void DataPlane::on_write(const TableKey& key, const SequenceBlockTable& table,
                         std::uint32_t old_length, std::span<const CopyOnWrite> copies,
                         const Event& event) {
  Lineage* lineage = find(key);
  assert(lineage != nullptr && lineage->length() == old_length);
  BlockId redirect_from = kInvalidBlock, redirect_to = kInvalidBlock;
  for (const CopyOnWrite& copy : copies) {
    if (copy.kind != CopyOnWrite::Kind::kCopy) continue;
    ++copies_seen_;
    if (copies_seen_ == faults_.skip_copy) continue;
    if (copies_seen_ == faults_.write_shared) {
      redirect_from = copy.block;
      redirect_to = copy.source;
      continue;
    }
    pending_copies_.push_back(copy.source);
    pending_copies_.push_back(copy.block);
  }
  const std::uint32_t new_length = table.length();
  lineage->append(new_length - old_length);
  const std::uint32_t writer = lineage->own_writer();
  const std::uint32_t page_tokens = shape_.page_tokens;
  const std::uint64_t row_bytes = shape_.token_bytes() * shape_.layers;
  const std::uint64_t max_rows = std::max<std::uint64_t>(1, options_.staging_bytes / row_bytes);
  auto entries = table.entries();
  for (std::uint32_t position = old_length; position < new_length; ++position) {
    BlockId block = entries[position / page_tokens];
    if (block == redirect_from) block = redirect_to;
    pending_tokens_.push_back(
        {static_cast<std::int64_t>(std::uint64_t{block} * page_tokens + position % page_tokens),
         writer, position});
    if (pending_tokens_.size() >= max_rows) flush();
  }
  if (options_.attention && event.op == Op::kDecode) {
    decode_batch_.add(entries, page_tokens, 0, new_length);
  }
}

void DataPlane::on_release(const TableKey& key, const Event& event) {
  (void)event;
  if (key.kind == TableKey::Kind::kSequence) {
    sequences_.erase(key.seq);
  } else {
    auto it = prefixes_.find(key.prefix);
    if (it != prefixes_.end()) prefixes_.erase(it);
  }
}

void DataPlane::flush() {
  if (!pending_copies_.empty()) {
    backend_->copy_blocks(pending_copies_);
    pending_copies_.clear();
  }
  if (pending_tokens_.empty()) return;
  const std::size_t rows = pending_tokens_.size();
  const std::uint64_t token_bytes = shape_.token_bytes();
  slots_.resize(rows);
  staging_.resize(rows * token_bytes * shape_.layers);
  for (std::size_t r = 0; r < rows; ++r) slots_[r] = pending_tokens_[r].slot;
  std::uint8_t* out = staging_.data();
  for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
    for (const PendingToken& token : pending_tokens_) {
      content::fill_token_row(out, shape_.dtype, token.writer, token.position, layer,
                              shape_.kv_heads, shape_.head_dim, shape_.kv_tensors);
      out += token_bytes;
    }
  }
  backend_->append(slots_, staging_);
  pending_tokens_.clear();
}

void DataPlane::run_attention() {
  // The output is not checked here (tests compare the kernels with references),
  // so the queries are one deterministic pattern, made once per batch size.
  const std::uint32_t group = options_.attention_group;
  const std::size_t size =
      std::size_t{decode_batch_.size()} * shape_.kv_heads * group * shape_.head_dim;
  if (queries_.size() < size) {
    const std::size_t made = queries_.size();
    queries_.resize(size);
    for (std::size_t i = made; i < size; ++i) {
      queries_[i] = content::query_value(0, static_cast<std::uint32_t>(i), 0, 0, 0);
    }
  }
  outputs_.resize(size);
  const std::span<const float> q(queries_.data(), size);
  for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
    backend_->attention(decode_batch_, layer, group, q, outputs_);
  }
}

void DataPlane::on_event_end(const Event& event) {
  flush();
  if (!decode_batch_.empty()) {
    run_attention();
    decode_batch_.clear();
  }
  last_event_ = event.index;
}

std::optional<Violation> DataPlane::on_checkpoint(std::span<const LiveTable> live,
                                                  const Event* event) {
  flush();
  if (!options_.verify) return std::nullopt;
  ++summary_.checkpoints;
  auto violation = [&](std::string message) {
    return Violation{event ? event->index : 0, event ? event->line : 0, "D1", std::move(message)};
  };
  std::vector<LiveTable> tables(live.begin(), live.end());
  std::sort(tables.begin(), tables.end(), key_less);
  for (const LiveTable& table : tables) {
    const Lineage* lineage = find(table.key);
    if (lineage == nullptr) {
      return violation(fmt::format("{}: the data plane never saw it created", label_of(table.key)));
    }
    if (lineage->length() != table.table->length()) {
      return violation(fmt::format("{}: {} tokens in its table but {} written", label_of(table.key),
                                   table.table->length(), lineage->length()));
    }
  }
  const std::uint64_t row_bytes = shape_.token_bytes() * shape_.layers;
  const std::uint64_t max_rows =
      std::max<std::uint64_t>(1, options_.verify_chunk_bytes / row_bytes);
  std::vector<std::size_t> table_of_item;
  verify_batch_.clear();
  verify_begin_.clear();
  for (std::size_t index = 0; index < tables.size(); ++index) {
    const SequenceBlockTable& table = *tables[index].table;
    ++summary_.tables;
    summary_.tokens += table.length();
    summary_.bytes += table.length() * row_bytes;
    std::uint32_t position = 0;
    while (position < table.length()) {
      const std::uint64_t room = max_rows - verify_batch_.rows();
      if (room == 0) {
        if (auto found = verify_batch(tables, table_of_item)) return violation(std::move(*found));
        continue;
      }
      const auto take =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(room, table.length() - position));
      verify_batch_.add(table.entries(), shape_.page_tokens, position, position + take);
      verify_begin_.push_back(position);
      table_of_item.push_back(index);
      position += take;
    }
  }
  if (auto found = verify_batch(tables, table_of_item)) return violation(std::move(*found));
  if (auto found = verify_cached()) return violation(std::move(*found));
  if (auto found = verify_copies()) return violation(std::move(*found));
  return std::nullopt;
}

std::optional<std::string> DataPlane::verify_batch(const std::vector<LiveTable>& tables,
                                                   std::vector<std::size_t>& table_of_item) {
  // On return (either way) the batch is empty again.
  struct Reset {
    DataPlane* self;
    std::vector<std::size_t>& items;
    ~Reset() {
      self->verify_batch_.clear();
      self->verify_begin_.clear();
      items.clear();
    }
  } reset{this, table_of_item};
  if (verify_batch_.empty()) return std::nullopt;
  const std::uint64_t rows = verify_batch_.rows();
  const std::uint64_t token_bytes = shape_.token_bytes();
  backend_->gather(verify_batch_);
  gathered_.resize(rows * token_bytes * shape_.layers);
  backend_->read_gathered(gathered_);
  expected_.resize(token_bytes);
  auto out_indptr = verify_batch_.out_indptr();
  for (std::uint32_t item = 0; item < verify_batch_.size(); ++item) {
    const LiveTable& live = tables[table_of_item[item]];
    const Lineage& lineage = *find(live.key);
    auto runs = lineage.runs();
    std::size_t run = 0;
    const std::uint32_t begin = verify_begin_[item];
    const std::uint32_t length = verify_batch_.lengths()[item];
    for (std::uint32_t t = 0; t < length; ++t) {
      const std::uint32_t position = begin + t;
      while (runs[run].end <= position) ++run;
      for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
        const std::uint8_t* read =
            gathered_.data() + (layer * rows + out_indptr[item] + t) * token_bytes;
        content::fill_token_row(expected_.data(), shape_.dtype, runs[run].writer, position, layer,
                                shape_.kv_heads, shape_.head_dim, shape_.kv_tensors);
        if (std::memcmp(read, expected_.data(), token_bytes) != 0) {
          return describe_mismatch(live, lineage, position, layer, read);
        }
      }
    }
  }
  return std::nullopt;
}

std::string DataPlane::describe_mismatch(const LiveTable& live, const Lineage& lineage,
                                         std::uint32_t position, std::uint32_t layer,
                                         const std::uint8_t* read_row) {
  const std::uint64_t token_bytes = shape_.token_bytes();
  const std::uint32_t expected_writer = lineage.writer_at(position);
  content::fill_token_row(expected_.data(), shape_.dtype, expected_writer, position, layer,
                          shape_.kv_heads, shape_.head_dim, shape_.kv_tensors);
  std::uint64_t byte = 0;
  while (byte < token_bytes && read_row[byte] == expected_[byte]) ++byte;
  const std::uint64_t element = byte / shape_.elem_bytes;
  const std::uint64_t per_half = std::uint64_t{shape_.kv_heads} * shape_.head_dim;
  const char* half = shape_.kv_tensors == 1 ? "latent" : element < per_half ? "K" : "V";
  const std::uint64_t head = (element % per_half) / shape_.head_dim;
  const std::uint64_t dim = element % shape_.head_dim;
  const std::uint64_t at = element * shape_.elem_bytes;

  // Whose bytes were read instead? Try every writer at this position.
  std::string found;
  if (std::all_of(read_row, read_row + token_bytes, [](std::uint8_t b) { return b == 0; })) {
    found = "zero bytes (never written)";
  } else if (writers_.size() * token_bytes <= kSearchBudgetBytes) {
    std::vector<std::uint8_t> candidate(token_bytes);
    for (std::uint32_t writer = 1; writer <= writers_.size(); ++writer) {
      content::fill_token_row(candidate.data(), shape_.dtype, writer, position, layer,
                              shape_.kv_heads, shape_.head_dim, shape_.kv_tensors);
      if (std::memcmp(candidate.data(), read_row, token_bytes) == 0) {
        found = fmt::format("the token of {}", writer_text(writer));
        break;
      }
    }
  }
  if (found.empty()) found = "bytes no table wrote at this position";
  const std::uint32_t page = position / shape_.page_tokens;
  return fmt::format(
      "{} position {}: layer {} {} head {} dim {} reads {} through page {} (block {}), expected "
      "{}, the token of {}; found {}",
      label_of(live.key), position, layer, half, head, dim,
      hex_bits(read_row + at, shape_.elem_bytes), page, live.table->entries()[page],
      hex_bits(expected_.data() + at, shape_.elem_bytes), writer_text(expected_writer), found);
}

nlohmann::json DataPlane::kernels_json() {
  backend_->synchronize();
  return backend_->stats().to_json();
}

std::string DataPlane::summary_text() {
  backend_->synchronize();
  std::string out = "data plane\n";
  auto line = [&out](std::string_view label, const std::string& value) {
    out += fmt::format("  {:<26} {}\n", label, value);
  };
  line("backend", fmt::format("{}, arena {}", backend_->description(), size_text(shape_.bytes())));
  if (options_.verify) {
    line("verified",
         fmt::format("{} checkpoints: {} tables, {} tokens, {} compared", summary_.checkpoints,
                     summary_.tables, summary_.tokens, size_text(summary_.bytes)));
    if (summary_.cached + summary_.copies > 0) {
      line("verified (cache, tiers)",
           fmt::format("{} cached pages, {} tier copies", summary_.cached, summary_.copies));
    }
  } else {
    line("verified", "no (--verify not given)");
  }
  const char* clock = backend_->kind() == BackendKind::kCuda ? "CUDA events" : "wall clock";
  if (backend_->stats().empty()) {
    line("kernels", "none launched");
    return out;
  }
  out += fmt::format("  {:<12} {:>9} {:>11} {:>11} {:>12} {:>9}   ({})\n", "kernel", "launches",
                     "median us", "p99 us", "bytes", "GB/s", clock);
  for (const auto& [name, timing] : backend_->stats().kernels()) {
    out +=
        fmt::format("  {:<12} {:>9} {:>11.2f} {:>11.2f} {:>12} {:>9.2f}\n", name, timing.launches,
                    timing.median_us(), timing.p99_us(), size_text(timing.bytes), timing.gbps());
  }
  return out;
}

}  // namespace kvreplay
