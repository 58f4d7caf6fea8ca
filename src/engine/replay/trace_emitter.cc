#include "engine/replay/trace_emitter.h"

#include <fmt/format.h>

#include <algorithm>

#include "formats/kvtrace_reader.h"

namespace kvreplay {

namespace {

void append_ids(std::string& out, std::span<const std::uint64_t> ids) {
  out += '[';
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", ids[i]);
  }
  out += ']';
}

}  // namespace

std::string TraceSink::header(const PagedKvConfig& kv, std::uint64_t pool_blocks,
                              AllocOrder order) {
  if (pool_blocks == 0 || pool_blocks >= kInvalidBlock) {
    return fmt::format("a pool of {} blocks cannot be written in a kvtrace header (1 to {})",
                       pool_blocks, kInvalidBlock - 1);
  }
  if (kv.block_layers != 0 && kv.block_layers != kv.layers) {
    return "a pool of KV-cache groups' blocks cannot be written as a kvtrace";
  }
  // A kvtrace token holds a K and a V of kv_heads * head_dim each; an MLA
  // latent (one vector) is written as two halves, the same bytes a token.
  std::uint32_t head_dim = kv.head_dim;
  std::uint32_t kv_heads = kv.kv_heads;
  if (kv.kv_tensors == 1) {
    if (head_dim % 2 == 0) {
      head_dim /= 2;
    } else if (kv_heads % 2 == 0) {
      kv_heads /= 2;
    } else {
      return fmt::format("a latent of {} values cannot be written as a K and a V half",
                         std::uint64_t{kv_heads} * head_dim);
    }
  }
  std::string text = fmt::format(
      "{{\"kvtrace\":1,\"config\":{{\"layers\":{},\"kv_heads\":{},\"head_dim\":{},"
      "\"dtype\":\"{}\",\"page_tokens\":{},\"pool_blocks\":{},\"max_seq_tokens\":{},"
      "\"alloc_order\":\"{}\"}},\"meta\":{{\"written_by\":\"kvreplay simulate "
      "--emit-trace\"}}}}\n",
      kv.layers, kv_heads, head_dim, to_string(kv.dtype), kv.page_tokens, pool_blocks,
      kv.max_seq_tokens, to_string(order == AllocOrder::kVllm ? AllocOrder::kLifo : order));
  write_(text);
  return {};
}

void TraceEmitter::at(double t) {
  if (t == t_ && stamped_) return;
  flush();  // a step's decode batch ends with it
  t_ = t;
  stamped_ = true;
}

std::string TraceEmitter::start(std::string_view op) {
  std::string text;
  if (stamped_ && sink_.stamp(t_)) {
    text = fmt::format("{{\"t\":{},\"op\":\"{}\"", t_, op);
  } else {
    text = fmt::format("{{\"op\":\"{}\"", op);
  }
  return text;
}

void TraceEmitter::drain() {
  if (evicted_.empty()) return;
  // Swapped out first: writing may not evict, but the log is the cache's.
  std::vector<BlockId> evicted;
  evicted.swap(evicted_);
  for (BlockId b : evicted) uncache(b);
  evicted.clear();
  if (evicted_.empty()) evicted_.swap(evicted);
}

void TraceEmitter::begin() {
  flush();
  drain();
}

void TraceEmitter::flush() {
  if (batch_.empty()) return;
  std::string text = start("decode");
  text += ",\"seqs\":";
  append_ids(text, batch_);
  text += "}\n";
  batch_.clear();
  sink_.line(std::move(text));
}

std::uint64_t TraceEmitter::admit(std::uint32_t prompt, std::span<const BlockId> hits) {
  begin();
  const std::uint64_t seq = sink_.next_seq();
  std::string text = start("admit");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{},\"prompt\":{}", seq, prompt);
  if (!hits.empty()) {
    text += ",\"hits\":[";
    for (std::size_t i = 0; i < hits.size(); ++i) {
      if (i > 0) text += ',';
      fmt::format_to(std::back_inserter(text), "{}", name(hits[i]));
    }
    text += ']';
  }
  text += "}\n";
  sink_.line(std::move(text));
  return seq;
}

void TraceEmitter::append(std::uint64_t seq, std::uint32_t tokens) {
  if (tokens == 1 && evicted_.empty() &&
      std::find(batch_.begin(), batch_.end(), seq) == batch_.end()) {
    batch_.push_back(seq);
    return;
  }
  begin();
  if (tokens == 1) {
    batch_.push_back(seq);
    return;
  }
  std::string text = start("append");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{},\"tokens\":{}}}\n", seq, tokens);
  sink_.line(std::move(text));
}

std::uint64_t TraceEmitter::fork(std::uint64_t parent) {
  begin();
  const std::uint64_t child = sink_.next_seq();
  std::string text = start("fork");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{},\"child\":{}}}\n", parent, child);
  sink_.line(std::move(text));
  return child;
}

void TraceEmitter::free(std::uint64_t seq) {
  begin();
  std::string text = start("free");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{}}}\n", seq);
  sink_.line(std::move(text));
}

void TraceEmitter::cache(std::uint64_t seq, std::uint32_t page, BlockId b) {
  begin();
  if (!names_.insert(b).second) return;
  std::string text = start("cache");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{},\"page\":{},\"block\":{}}}\n", seq, page,
                 name(b));
  sink_.line(std::move(text));
}

void TraceEmitter::uncache(BlockId b) {
  if (names_.erase(b) == 0) return;
  flush();
  std::string text = start("uncache");
  fmt::format_to(std::back_inserter(text), ",\"block\":{}}}\n", name(b));
  sink_.line(std::move(text));
}

void TraceEmitter::write_store(std::uint64_t seq, std::uint32_t page, std::size_t tier,
                               std::uint64_t key) {
  std::string text = start("store");
  fmt::format_to(std::back_inserter(text), ",\"seq\":{},\"page\":{},\"tier\":\"{}\",\"key\":{}}}\n",
                 seq, page, trace_tier_name(static_cast<std::uint8_t>(tier)), key);
  sink_.line(std::move(text));
}

void TraceEmitter::write_drop(std::size_t tier, std::uint64_t key) {
  std::string text = start("drop");
  fmt::format_to(std::back_inserter(text), ",\"tier\":\"{}\",\"key\":{}}}\n",
                 trace_tier_name(static_cast<std::uint8_t>(tier)), key);
  sink_.line(std::move(text));
}

void TraceEmitter::write_load(std::size_t tier, std::uint64_t key, BlockId b) {
  std::string text = start("load");
  fmt::format_to(std::back_inserter(text), ",\"tier\":\"{}\",\"key\":{},\"block\":{}}}\n",
                 trace_tier_name(static_cast<std::uint8_t>(tier)), key, name(b));
  sink_.line(std::move(text));
}

void TraceEmitter::store(std::uint64_t seq, std::uint32_t page, std::size_t tier,
                         std::uint64_t key) {
  begin();
  auto [it, fresh] = tier_keys_.at(tier).try_emplace(key, 0);
  if (!fresh) return;
  it->second = sink_.next_key();
  write_store(seq, page, tier, it->second);
}

void TraceEmitter::drop(std::size_t tier, std::uint64_t key) {
  begin();
  auto it = tier_keys_.at(tier).find(key);
  if (it == tier_keys_[tier].end()) return;
  write_drop(tier, it->second);
  tier_keys_[tier].erase(it);
}

void TraceEmitter::load(std::size_t tier, std::uint64_t key, BlockId b) {
  begin();
  auto it = tier_keys_.at(tier).find(key);
  if (it == tier_keys_[tier].end() || !names_.insert(b).second) return;
  write_load(tier, it->second, b);
}

void TraceEmitter::stage(std::uint64_t tag, std::uint64_t seq, std::uint32_t pages) {
  begin();
  std::vector<std::uint64_t>& keys = sink_.staged(tag);
  keys.clear();
  for (std::uint32_t page = 0; page < pages; ++page) {
    keys.push_back(sink_.next_key());
    write_store(seq, page, kLinkTier, keys.back());
  }
}

void TraceEmitter::receive(std::uint64_t tag, std::uint32_t page, BlockId b) {
  begin();
  const std::vector<std::uint64_t>* keys = sink_.find_staged(tag);
  if (keys == nullptr || page >= keys->size() || !names_.insert(b).second) return;
  write_load(kLinkTier, (*keys)[page], b);
}

void TraceEmitter::unstage(std::uint64_t tag) {
  const std::vector<std::uint64_t>* keys = sink_.find_staged(tag);
  if (keys == nullptr) return;
  begin();
  for (std::uint64_t key : *keys) write_drop(kLinkTier, key);
  sink_.forget_staged(tag);
}

}  // namespace kvreplay
