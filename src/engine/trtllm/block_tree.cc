// The trtllm engine's block tree (engine/trtllm/block_tree.h). Each rule
// names the function of cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp or
// evictionPolicy.cpp it comes from.
#include "engine/trtllm/block_tree.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvreplay {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// BlockKeyHasher::hash's role: a block's hash from its parent's and its
// tokens (kvreplay's own function of the key's runs).
std::uint64_t chain_hash(std::uint64_t parent, const TrtBlockKey& key) {
  std::uint64_t h = mix(parent ^ mix(key.size()));
  for (const TokenRun& run : key.runs) h = mix(h ^ mix(run.id) ^ (std::uint64_t{run.end} << 32));
  return h;
}

}  // namespace

TrtBlockKey block_key_of(const TokenRuns& seq, std::uint32_t start, std::uint32_t end) {
  TrtBlockKey key{start, end, {}};
  auto it = std::upper_bound(seq.begin(), seq.end(), start,
                             [](std::uint32_t pos, const TokenRun& r) { return pos < r.end; });
  for (; it != seq.end() && start < end; ++it) {
    key.runs.push_back(TokenRun{it->id, std::min(it->end, end)});
    start = it->end;
  }
  return key;
}

std::uint32_t shared_tokens(const TrtBlockKey& a, const TrtBlockKey& b) {
  // Equal run ids name equal tokens: walk both keys' runs while they agree.
  const std::uint32_t end = std::min(a.end, b.end);
  std::uint32_t pos = a.start;
  std::size_t i = 0;
  std::size_t j = 0;
  while (pos < end && i < a.runs.size() && j < b.runs.size()) {
    if (a.runs[i].id != b.runs[j].id) break;
    pos = std::min({a.runs[i].end, b.runs[j].end, end});
    if (a.runs[i].end <= pos) ++i;
    if (b.runs[j].end <= pos) ++j;
  }
  return pos - a.start;
}

std::size_t TrtBlockTree::IndexHash::operator()(const IndexKey& k) const {
  return static_cast<std::size_t>(mix(k.last ^ mix((std::uint64_t{k.parent} << 32) | k.end)));
}

TrtBlockTree::TrtBlockTree(BlockPool* pool, std::uint32_t tokens_per_block)
    : pool_(pool),
      tokens_per_block_(tokens_per_block),
      nodes_(pool->total()),
      host_base_(pool->total()) {
  // LRUEvictionPolicy::initialize: every block free, at the default priority.
  for (std::uint32_t i = pool->free_count(); i > 0; --i) queue_.push_back(kInvalidBlock);
}

void TrtBlockTree::enable_host(std::uint32_t slots) {
  // LRUEvictionPolicy::initialize: the secondary blocks free in a queue of
  // their own.
  host_slots_ = slots;
  nodes_.resize(std::size_t{host_base_} + slots);
  for (std::uint32_t i = slots; i > 0; --i) {
    host_queue_.push_back(kInvalidBlock);
    host_free_ids_.push_back(host_base_ + i - 1);
  }
}

std::optional<TrtBlockTree::Match> TrtBlockTree::find_exact(BlockId parent, std::uint32_t start,
                                                            std::uint32_t end,
                                                            std::uint64_t last_id) const {
  if (end <= start) return std::nullopt;
  auto it = index_.find(IndexKey{parent, end, last_id});
  if (it == index_.end()) return std::nullopt;
  return Match{it->second, end - start, nodes_[it->second].key.size() != tokens_per_block_};
}

std::optional<TrtBlockTree::Match> TrtBlockTree::find(BlockId parent, const TrtBlockKey& key,
                                                      bool partial_reuse,
                                                      bool copy_on_partial) const {
  const std::vector<BlockId>& children = children_of(parent);
  if (key.size() == 0 || children.empty()) return std::nullopt;
  auto it = index_.find(IndexKey{parent, key.end, key.last_id()});
  if (it != index_.end()) {
    // Equal last token ids under one parent name equal tokens (the formats'
    // contract: an id names its whole prefix).
    const Node& n = nodes_[it->second];
    return Match{it->second, key.size(), n.key.size() != tokens_per_block_};
  }
  if (!partial_reuse) return std::nullopt;
  Match best;
  for (BlockId c : children) {
    const Node& n = nodes_[c];
    if (!copy_on_partial && (n.refs > 0 || !n.children.empty())) continue;
    const std::uint32_t shared = shared_tokens(n.key, key);
    if (shared > best.tokens) best = Match{c, shared, true};
  }
  if (best.tokens == 0) return std::nullopt;
  return best;
}

void TrtBlockTree::enqueue(BlockId b) {
  queue_.push_back(b);
  if (b == kInvalidBlock) return;
  nodes_[b].queued = true;
  nodes_[b].pos = std::prev(queue_.end());
  ++free_stored_;
}

void TrtBlockTree::dequeue(BlockId b) {
  Node& n = nodes_[b];
  if (!n.queued) return;
  n.queued = false;
  if (on_host(b)) {
    host_queue_.erase(n.pos);
    return;
  }
  queue_.erase(n.pos);
  --free_stored_;
}

void TrtBlockTree::host_enqueue(BlockId b) {
  host_queue_.push_back(b);
  nodes_[b].queued = true;
  nodes_[b].pos = std::prev(host_queue_.end());
}

void TrtBlockTree::relocate(BlockId from, BlockId to) {
  // KVCacheBlock::swapMemoryPoolBlockOffset: the block keeps its place in the
  // tree while its KV moves; kvreplay names a node by where its KV is, so
  // the node moves to the new id.
  Node& src = nodes_[from];
  Node& dst = nodes_[to];
  dst.stored = src.stored;
  dst.parent = src.parent;
  dst.hash = src.hash;
  dst.key = std::move(src.key);
  dst.children = std::move(src.children);
  dst.child_index = src.child_index;
  dst.refs = 0;
  dst.queued = false;
  children_of(dst.parent)[dst.child_index] = to;
  index_[IndexKey{dst.parent, dst.key.end, dst.key.last_id()}] = to;
  for (BlockId c : dst.children) {
    Node& child = nodes_[c];
    child.parent = to;
    auto entry = index_.extract(IndexKey{from, child.key.end, child.key.last_id()});
    entry.key() = IndexKey{to, child.key.end, child.key.last_id()};
    index_.insert(std::move(entry));
  }
  src = Node{};
}

BlockId TrtBlockTree::take_host_slot() {
  // getFreeBlock(kSecondaryLevel): the host queue's front; a stored block
  // there leaves the tree with its descendants (freeChildren).
  const BlockId front = host_queue_.front();
  if (front != kInvalidBlock) {
    free_descendants(front);
    evict_host(front);
  }
  host_queue_.pop_front();
  const BlockId slot = host_free_ids_.back();
  host_free_ids_.pop_back();
  return slot;
}

void TrtBlockTree::evict_host(BlockId b) {
  // Its place in the host queue stays, empty (the block object stays in
  // the secondary free queue, its tokens gone).
  Node& n = nodes_[b];
  *n.pos = kInvalidBlock;
  n.queued = false;
  detach(b);
  --host_used_;
  ++host_evicted_;
  host_free_ids_.push_back(b);
  n = Node{};
}

void TrtBlockTree::log(BlockId b, bool stored) {
  if (log_ == nullptr) return;
  const Node& n = nodes_[b];
  // A host block is the host medium's, without a parent (as the offload
  // tiers' blocks are reported).
  std::optional<std::uint64_t> parent;
  if (stored && n.parent != kRoot && !on_host(b)) parent = nodes_[n.parent].hash;
  log_->push_back(Change{n.hash, parent, n.key.size(), stored, on_host(b)});
}

void TrtBlockTree::detach(BlockId b) {
  Node& n = nodes_[b];
  log(b, false);
  // The children are a set (TensorRT-LLM keeps them in a hash map): the
  // last takes the leaving one's place.
  auto& siblings = children_of(n.parent);
  const BlockId moved = siblings.back();
  siblings[n.child_index] = moved;
  nodes_[moved].child_index = n.child_index;
  siblings.pop_back();
  index_.erase(IndexKey{n.parent, n.key.end, n.key.last_id()});
  n.stored = false;
  n.parent = kInvalidBlock;
  --stored_;
  ++version_;
}

void TrtBlockTree::free_descendants(BlockId b) {
  // freeChildren: every stored descendant is freed with the block. A holder
  // of a descendant holds its ancestors, so these are free; they leave the
  // tree and give their place in the queue to the pool.
  while (!nodes_[b].children.empty()) {
    const BlockId c = nodes_[b].children.back();
    free_descendants(c);
    if (on_host(c)) {
      evict_host(c);
      continue;
    }
    dequeue(c);
    detach(c);
    ++evicted_;
    (void)pool_->release(c);  // the tree's hold
    if (nodes_[c].refs == 0) enqueue(kInvalidBlock);
  }
}

std::optional<BlockId> TrtBlockTree::take_free() {
  if (queue_.empty()) return std::nullopt;
  const BlockId front = queue_.front();
  if (front == kInvalidBlock) {
    auto b = pool_->allocate();
    if (!b) return std::nullopt;
    queue_.pop_front();
    nodes_[b.value()].refs = 1;
    return b.value();
  }
  // getNumFreeBlocks(kSecondaryLevel) > 0: a host block being onboarded is
  // off the host queue, and with it the queue may be empty.
  if (!host_queue_.empty()) return offload_front();
  // LRUEvictionPolicy::getFreeBlock, WindowBlockManager::getFreeBlock: the
  // stored block leaves the tree with its descendants; the tree's hold on
  // it becomes the caller's.
  dequeue(front);
  free_descendants(front);
  detach(front);
  ++evicted_;
  nodes_[front].refs = 1;
  return front;
}

BlockId TrtBlockTree::offload_front() {
  // WindowBlockManager::getFreeBlock, offloading: the front block's KV moves
  // to the host queue's front slot (evicting what was stored there), the
  // block stays in the tree as a host block at the host queue's back, and
  // its GPU block is the caller's.
  const BlockId front = queue_.front();
  const BlockId slot = take_host_slot();
  if (!nodes_[front].stored) {
    // The front was a descendant of the host block just evicted, and left
    // the tree with it (its place at the queue's back, its pool block
    // free): the slot stays empty, and the caller gets a free GPU block
    // (TensorRT-LLM hands over the evicted host block's, now on the GPU).
    host_queue_.push_back(kInvalidBlock);
    host_free_ids_.push_back(slot);
    queue_.pop_back();
    const BlockId b = pool_->allocate().value();  // front's block was released
    nodes_[b].refs = 1;
    return b;
  }
  dequeue(front);
  log(front, false);
  relocate(front, slot);
  host_enqueue(slot);
  ++host_used_;
  log(slot, true);
  offloaded_.push_back(nodes_[slot].hash);
  ++evicted_;
  nodes_[front].refs = 1;  // the tree's pool hold on it is the caller's
  return front;
}

std::optional<BlockId> TrtBlockTree::onboard(BlockId host_block) {
  if (queue_.empty()) return std::nullopt;
  // claimBlock, then onboardBlock: a GPU block as getFreeBlock gives one, the
  // KV copied in, the node on the GPU; the host slot joins the host queue's
  // back, empty.
  dequeue(host_block);
  const BlockId b = take_free().value();
  log(host_block, false);
  relocate(host_block, b);
  nodes_[b].refs = 1;
  (void)pool_->retain(b);  // the tree's hold, beside the caller's
  log(b, true);
  onboarded_.push_back(nodes_[b].hash);
  --host_used_;
  host_queue_.push_back(kInvalidBlock);
  host_free_ids_.push_back(host_block);
  return b;
}

std::optional<BlockId> TrtBlockTree::claim_host_leaf(BlockId host_block) {
  if (queue_.empty()) return std::nullopt;
  // claimLeafBlock (the leaf leaves the tree), then onboardBlock.
  dequeue(host_block);
  detach(host_block);
  onboarded_.push_back(nodes_[host_block].hash);
  nodes_[host_block] = Node{};
  --host_used_;
  const BlockId b = take_free().value();
  host_queue_.push_back(kInvalidBlock);
  host_free_ids_.push_back(host_block);
  return b;
}

void TrtBlockTree::read_host(BlockId host_block) {
  onboarded_.push_back(nodes_[host_block].hash);
}

void TrtBlockTree::hold(BlockId b) {
  Node& n = nodes_[b];
  if (n.refs == 0) dequeue(b);
  ++n.refs;
  (void)pool_->retain(b);
}

void TrtBlockTree::claim_leaf(BlockId b) {
  dequeue(b);
  detach(b);
  nodes_[b].refs = 1;
}

void TrtBlockTree::release(BlockId b) {
  Node& n = nodes_[b];
  --n.refs;
  if (n.stored) {
    (void)pool_->release(b);
    if (n.refs == 0) enqueue(b);
    return;
  }
  (void)pool_->release(b);
  if (n.refs == 0) enqueue(kInvalidBlock);
}

void TrtBlockTree::store(BlockId parent, const TrtBlockKey& key, BlockId b) {
  Node& n = nodes_[b];
  n.stored = true;
  n.parent = parent;
  n.key = key;
  n.hash = chain_hash(hash(parent), key);
  n.child_index = static_cast<std::uint32_t>(children_of(parent).size());
  children_of(parent).push_back(b);
  index_[IndexKey{parent, key.end, key.last_id()}] = b;
  ++stored_;
  ++version_;
  (void)pool_->retain(b);
  log(b, true);
}

void TrtBlockTree::stored_list(std::vector<BlockId>& out) const {
  for (BlockId b = 0; b < host_base_; ++b) {
    if (nodes_[b].stored) out.push_back(b);
  }
}

std::optional<std::string> TrtBlockTree::check(
    const std::vector<std::uint32_t>& request_refs) const {
  std::uint32_t stored = 0;
  std::uint32_t free_stored = 0;
  std::uint32_t host_stored = 0;
  for (BlockId b = 0; b < nodes_.size(); ++b) {
    const Node& n = nodes_[b];
    if (on_host(b)) {
      if (n.refs != 0)
        return fmt::format("T4: host block {} has {} holders", b - host_base_, n.refs);
      if (!n.stored && (n.queued || !n.children.empty()))
        return fmt::format("T4: empty host slot {} is queued or a parent", b - host_base_);
      if (n.stored && !n.queued)
        return fmt::format("T4: host block {} is not in the host queue", b - host_base_);
      if (!n.stored) continue;
      ++host_stored;
    } else if (n.refs != request_refs[b]) {
      return fmt::format("T3: block {} counts {} request references, the tables hold {}", b, n.refs,
                         request_refs[b]);
    }
    if (!n.stored) {
      if (n.queued || !n.children.empty())
        return fmt::format("T1: block {} is not stored but queued or a parent", b);
      if (pool_->refcount(b) != n.refs)
        return fmt::format("T3: block {}: refcount {}, {} holders", b, pool_->refcount(b), n.refs);
      continue;
    }
    ++stored;
    if (!on_host(b) && pool_->refcount(b) != n.refs + 1) {
      return fmt::format("T3: stored block {}: refcount {}, {} holders and the tree", b,
                         pool_->refcount(b), n.refs);
    }
    const std::uint32_t start = n.parent == kRoot ? 0 : nodes_[n.parent].key.end;
    const auto& siblings = children_of(n.parent);
    if ((n.parent != kRoot && !nodes_[n.parent].stored) || n.key.start != start ||
        n.key.size() == 0 || n.key.size() > tokens_per_block_ || n.child_index >= siblings.size() ||
        siblings[n.child_index] != b) {
      return fmt::format("T1: stored block {} is not its parent's child at tokens {}", b, start);
    }
    auto it = index_.find(IndexKey{n.parent, n.key.end, n.key.last_id()});
    if (it == index_.end() || it->second != b)
      return fmt::format("T1: stored block {} is not indexed", b);
    if (on_host(b)) continue;
    if (n.refs == 0) {
      ++free_stored;
      if (!n.queued) return fmt::format("T2: free stored block {} is not queued", b);
    } else if (n.queued) {
      return fmt::format("T2: held block {} is queued", b);
    }
  }
  std::uint32_t anonymous = 0;
  std::uint32_t named = 0;
  for (BlockId b : queue_) (b == kInvalidBlock ? anonymous : named) += 1;
  if (stored != stored_ || free_stored != free_stored_ || named != free_stored ||
      anonymous != pool_->free_count() || index_.size() != stored) {
    return fmt::format(
        "T2: {} stored blocks ({} counted), {} free ({} counted, {} queued), {} anonymous "
        "places for {} free pool blocks, {} indexed",
        stored, stored_, free_stored, free_stored_, named, anonymous, pool_->free_count(),
        index_.size());
  }
  std::uint32_t host_empty = 0;
  std::uint32_t host_named = 0;
  for (BlockId b : host_queue_) {
    if (b == kInvalidBlock) {
      ++host_empty;
    } else if (!on_host(b) || !nodes_[b].stored || *nodes_[b].pos != b) {
      return fmt::format("T4: the host queue holds block {}, not a stored host block", b);
    } else {
      ++host_named;
    }
  }
  if (host_named != host_stored || host_stored != host_used_ ||
      host_empty + host_named != host_slots_ || host_free_ids_.size() != host_empty) {
    return fmt::format(
        "T4: {} host blocks stored ({} counted, {} queued), {} empty places and {} empty slots "
        "for {} slots",
        host_stored, host_used_, host_named, host_empty, host_free_ids_.size(), host_slots_);
  }
  return std::nullopt;
}

}  // namespace kvreplay
