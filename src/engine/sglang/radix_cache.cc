#include "engine/sglang/radix_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <map>
#include <queue>
#include <tuple>
#include <utility>

#include "core/mix64.h"

namespace kvreplay {

namespace {

// The index of the run covering `pos`.
std::size_t run_at(const TokenRuns& runs, std::uint32_t pos) {
  auto it = std::upper_bound(runs.begin(), runs.end(), pos,
                             [](std::uint32_t p, const TokenRun& run) { return p < run.end; });
  return static_cast<std::size_t>(it - runs.begin());
}

// The runs of `seq` over [from, to).
TokenRuns clip(const TokenRuns& seq, std::uint32_t from, std::uint32_t to) {
  TokenRuns out;
  for (std::size_t j = run_at(seq, from); j < seq.size(); ++j) {
    out.push_back(TokenRun{seq[j].id, std::min(seq[j].end, to)});
    if (seq[j].end >= to) break;
  }
  return out;
}

// The chained hash of the page [from, to) of a node whose key is `key`: the
// previous page's hash (a fixed seed for a path's first page) mixed with each
// run over the page, its id and where it ends within the page.
std::uint64_t page_hash(std::optional<std::uint64_t> before, const TokenRuns& key,
                        std::uint32_t from, std::uint32_t to) {
  std::uint64_t h =
      before ? mix64_finalize(*before ^ 0x6a09e667f3bcc909ULL) : 0x510e527fade682d1ULL;
  for (std::size_t j = run_at(key, from); j < key.size(); ++j) {
    const std::uint32_t end = std::min(key[j].end, to);
    h = mix64_finalize(h ^ splitmix64(key[j].id));
    h = mix64_finalize(h + end - from);
    if (end >= to) break;
  }
  return h;
}

}  // namespace

void RadixCache::set_hashes(Node& node) const {
  node.hashes.clear();
  std::optional<std::uint64_t> before = hash_before(node);
  for (std::uint32_t p = node.start; p < node.end; p += page_) {
    before = page_hash(before, node.key, p, p + page_);
    node.hashes.push_back(*before);
  }
}

void RadixCache::log_pages(const Node& node, bool stored) {
  // KVCacheEventMixin: one event a page, each chained to the one before it.
  std::optional<std::uint64_t> before = hash_before(node);
  for (std::uint64_t hash : node.hashes) {
    log_->push_back(PageChange{hash, stored ? before : std::nullopt, stored});
    before = hash;
  }
}

void RadixCache::log_host(std::span<const std::uint64_t> hashes, bool stored) {
  for (std::uint64_t hash : hashes) log_->push_back(PageChange{hash, std::nullopt, stored, true});
}

void RadixCache::log_changes(std::vector<PageChange>* log) {
  assert(root_->children.empty());
  log_ = log;
}

void RadixCache::page_hashes(std::vector<std::uint64_t>& out) const {
  for_each_node([&out](const Node& node) {
    if (!node.evicted) out.insert(out.end(), node.hashes.begin(), node.hashes.end());
  });
}

void RadixCache::host_page_hashes(std::vector<std::uint64_t>& out) const {
  for (const auto& [page, hash] : host_hash_) out.push_back(hash);
}

void RadixCache::enable_host(std::uint32_t capacity) {
  assert(root_->children.empty() && pool_ != nullptr);
  host_capacity_ = capacity;
}

bool RadixCache::device_leaf(const Node& node) const {
  if (node.evicted || &node == root_.get()) return false;
  return std::all_of(node.children.begin(), node.children.end(),
                     [](const auto& child) { return child.second->evicted; });
}

void RadixCache::write_backup(Node* node) {
  // HiRadixCache.write_backup: host pages for the node's, evicting host-only
  // leaves when too few are free; the node stays locked until the write lands.
  const auto n = static_cast<std::uint32_t>(node->pages.size());
  if (n == 0) return;
  if (host_capacity_ - host_used_ < n) evict_host(n);
  if (host_capacity_ - host_used_ < n) return;
  node->host.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t page = host_next_++;
    node->host.push_back(page);
    if (log_ != nullptr) pending_hash_.emplace(page, node->hashes[i]);
  }
  host_used_ += n;
  inc_lock_ref(node);
  host_writes_.push_back(HostWrite{node, node->host, node->pages});
}

void RadixCache::write_done(Node* node, std::span<const std::uint64_t> host) {
  if (log_ != nullptr) {
    std::vector<std::uint64_t> hashes;
    for (std::uint64_t page : host) {
      auto it = pending_hash_.find(page);
      assert(it != pending_hash_.end());
      hashes.push_back(it->second);
      host_hash_.emplace(page, it->second);
      pending_hash_.erase(it);
    }
    log_host(hashes, /*stored=*/true);
  }
  dec_lock_ref(node);
}

void RadixCache::delete_node(Node* node) {
  // The node and the host-only nodes below it (all evicted: no lock, no
  // device page) leave the tree; their host pages are freed.
  std::vector<Node*> stack{node};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (!n->host.empty()) {
      host_used_ -= static_cast<std::uint32_t>(n->host.size());
      host_evicted_ += n->host.size();
      if (log_ != nullptr) {
        log_host(n->hashes, /*stored=*/false);
        for (std::uint64_t page : n->host) host_hash_.erase(page);
      }
      if (host_drops_ != nullptr)
        host_drops_->insert(host_drops_->end(), n->host.begin(), n->host.end());
    }
    for (auto& [id, child] : n->children) stack.push_back(child.get());
    --nodes_;
  }
  node->parent->children.erase(slot_of(node));
}

std::uint32_t RadixCache::evict_host(std::uint32_t pages) {
  // HiRadixCache.evict_host: a heap of the leaves by last access; only
  // host-only ones are freed, and a host-only parent left without children
  // joins the heap.
  using Entry = std::pair<std::uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for_each_node([&heap](const Node& node) {
    if (node.evicted && node.children.empty()) {
      heap.emplace(node.last_access, const_cast<Node*>(&node));
    }
  });
  std::uint32_t freed = 0;
  while (freed < pages && !heap.empty()) {
    Node* leaf = heap.top().second;
    heap.pop();
    freed += static_cast<std::uint32_t>(leaf->host.size());
    Node* parent = leaf->parent;
    delete_node(leaf);
    if (parent->evicted && parent->children.empty()) heap.emplace(parent->last_access, parent);
  }
  return freed;
}

std::uint32_t RadixCache::load_back(Node* last, std::vector<std::uint64_t>& host,
                                    std::vector<BlockId>& pages) {
  // HiRadixCache.load_back: the host-only chain above `last` comes back all
  // or nothing, its device ancestor locked meanwhile; device pages are
  // evicted for it when too few are free.
  std::vector<Node*> chain;
  Node* ancestor = last;
  std::uint32_t tokens = 0;
  for (; ancestor->evicted; ancestor = ancestor->parent) {
    chain.push_back(ancestor);
    tokens += ancestor->tokens();
  }
  if (chain.empty() || tokens < kLoadBackThreshold) return 0;
  std::reverse(chain.begin(), chain.end());
  const std::uint32_t count = tokens / page_;
  inc_lock_ref(ancestor);
  if (pool_->free_count() < count) evict(tokens);
  dec_lock_ref(ancestor);
  if (pool_->free_count() < count) return 0;
  pages.clear();
  host.clear();
  pool_->take_free_filled(count, count * page_, page_, pages);
  std::size_t at = 0;
  for (Node* node : chain) {
    const auto n = static_cast<std::ptrdiff_t>(node->host.size());
    node->pages.assign(pages.begin() + static_cast<std::ptrdiff_t>(at),
                       pages.begin() + static_cast<std::ptrdiff_t>(at) + n);
    at += node->host.size();
    node->evicted = false;
    evictable_ += node->tokens();
    host.insert(host.end(), node->host.begin(), node->host.end());
    if (log_ != nullptr) log_pages(*node, /*stored=*/true);
  }
  inc_lock_ref(last);
  return tokens;
}

std::uint64_t token_id(const TokenRuns& runs, std::uint32_t pos) {
  const std::size_t j = run_at(runs, pos);
  return j < runs.size() ? runs[j].id : ~std::uint64_t{0};
}

RadixCache::RadixCache(BlockPool* pool, std::uint32_t page_tokens)
    : pool_(pool), page_(std::max<std::uint32_t>(page_tokens, 1)), root_(std::make_unique<Node>()) {
  // The root is locked for good (RadixCache.reset: root_node.lock_ref = 1):
  // it holds no tokens and is never evicted.
  root_->lock_ref = 1;
}

RadixCache::~RadixCache() = default;

void RadixCache::reset() {
  assert(log_ == nullptr);  // only keys-only trees are reset: nothing to log
  std::vector<BlockId> held;
  pages(held);
  if (pool_ != nullptr) {
    for (BlockId b : held) (void)pool_->release(b);
  }
  root_ = std::make_unique<Node>();
  root_->lock_ref = 1;
  evictable_ = protected_ = nodes_ = 0;
}

std::uint32_t RadixCache::first_difference(const Node& node, const TokenRuns& seq, std::size_t& j,
                                           std::uint32_t from, std::uint32_t to) {
  std::size_t i = 0;
  std::uint32_t pos = from;
  while (pos < to) {
    while (node.key[i].end <= pos) ++i;
    while (j < seq.size() && seq[j].end <= pos) ++j;
    if (j == seq.size() || node.key[i].id != seq[j].id) return pos;
    pos = std::min({node.key[i].end, seq[j].end, to});
  }
  return to;
}

RadixCache::Node* RadixCache::child_at(Node& node, const TokenRuns& seq, std::uint32_t pos) const {
  auto [lo, hi] = node.children.equal_range(token_id(seq, pos + page_ - 1));
  for (auto it = lo; it != hi; ++it) {
    // One token a page: the id is the page. Else the whole page must match.
    if (page_ == 1) return it->second.get();
    std::size_t j = run_at(seq, pos);
    if (first_difference(*it->second, seq, j, pos, pos + page_) == pos + page_) {
      return it->second.get();
    }
  }
  return nullptr;
}

auto RadixCache::slot_of(const Node* child) const -> decltype(child->parent->children.begin()) {
  auto [lo, hi] = child->parent->children.equal_range(page_id(*child));
  for (auto it = lo; it != hi; ++it) {
    if (it->second.get() == child) return it;
  }
  assert(false && "a node is filed in its parent");
  return child->parent->children.end();
}

RadixCache::Node* RadixCache::split(Node* child, std::uint32_t at) {
  // _split_node: the new node takes the child's place under its parent, with
  // the key's first part and its pages, the child's locks and a fresh touch.
  Node* parent = child->parent;
  const auto slot = slot_of(child);
  // _split_node: the child's pages removed, then both parts' stored (on the
  // device: a host-only node's host pages keep their hashes, no event).
  const bool logged = log_ != nullptr && !child->evicted;
  if (logged) log_pages(*child, /*stored=*/false);
  std::unique_ptr<Node> owned = std::move(slot->second);
  auto mid = std::make_unique<Node>();
  mid->parent = parent;
  mid->start = child->start;
  mid->end = at;
  mid->key = clip(child->key, child->start, at);
  if (!child->pages.empty()) {
    const auto n = static_cast<std::ptrdiff_t>((at - child->start) / page_);
    mid->pages.assign(child->pages.begin(), child->pages.begin() + n);
    child->pages.erase(child->pages.begin(), child->pages.begin() + n);
  }
  if (!child->host.empty()) {
    const auto n = static_cast<std::ptrdiff_t>((at - child->start) / page_);
    mid->host.assign(child->host.begin(), child->host.begin() + n);
    child->host.erase(child->host.begin(), child->host.begin() + n);
  }
  mid->evicted = child->evicted;
  mid->lock_ref = child->lock_ref;
  mid->last_access = touch();
  child->start = at;
  child->key = clip(child->key, at, child->end);
  child->parent = mid.get();
  Node* out = mid.get();
  mid->children.emplace(page_id(*child), std::move(owned));
  slot->second = std::move(mid);  // the same first page, the same id
  ++nodes_;
  if (log_ != nullptr) {
    // The chain runs through the same tokens: each page keeps its hash.
    const auto n = static_cast<std::ptrdiff_t>((at - out->start) / page_);
    out->hashes.assign(child->hashes.begin(), child->hashes.begin() + n);
    child->hashes.erase(child->hashes.begin(), child->hashes.begin() + n);
    if (logged) {
      log_pages(*out, /*stored=*/true);
      log_pages(*child, /*stored=*/true);
    }
  }
  return out;
}

std::uint32_t RadixCache::match_prefix(const TokenRuns& seq, std::uint32_t max_tokens,
                                       std::vector<BlockId>* pages, Node*& last, HostMatch* host) {
  // _match_prefix_helper: down the children while the key matches, touching
  // each node; a match ending inside a node splits it there. HiCache: each
  // node matched on the device gets a host copy if it has none
  // (inc_hit_count), and the match goes on into host-only nodes when asked.
  const std::uint32_t limit = floor_page(max_tokens);
  Node* node = root_.get();
  node->last_access = touch();
  std::uint32_t pos = 0;
  std::uint32_t device = 0;
  Node* device_node = node;
  std::size_t j = 0;
  auto reached = [&](Node* n) {
    if (n->evicted) return;
    if (pages != nullptr) pages->insert(pages->end(), n->pages.begin(), n->pages.end());
    device = n->end;
    device_node = n;
    if (host_enabled() && n->host.empty()) write_backup(n);
  };
  while (pos < limit) {
    Node* child = child_at(*node, seq, pos);
    if (child == nullptr || (child->evicted && host == nullptr)) break;
    child->last_access = touch();
    const std::uint32_t matched =
        floor_page(first_difference(*child, seq, j, pos, std::min(child->end, limit)));
    if (matched < child->end) {
      // The first page matched (its id did), so a split leaves both parts whole.
      if (matched > pos) {
        Node* mid = split(child, matched);
        reached(mid);
        node = mid;
        pos = matched;
      }
      break;
    }
    reached(child);
    node = child;
    pos = child->end;
  }
  last = device_node;
  if (host != nullptr) *host = HostMatch{pos - device, node};
  return device;
}

std::uint32_t RadixCache::peek_prefix(const TokenRuns& seq, std::uint32_t max_tokens) const {
  const std::uint32_t limit = floor_page(max_tokens);
  // child_at only reads the node; it is declared on mutable nodes for match_prefix.
  Node* node = root_.get();
  std::uint32_t pos = 0;
  std::size_t j = 0;
  while (pos < limit) {
    const Node* child = child_at(*node, seq, pos);
    if (child == nullptr || child->evicted) break;
    const std::uint32_t matched =
        floor_page(first_difference(*child, seq, j, pos, std::min(child->end, limit)));
    if (matched < child->end) return std::max(pos, matched);
    node = const_cast<Node*>(child);
    pos = child->end;
  }
  return pos;
}

std::uint32_t RadixCache::insert(const TokenRuns& seq, std::uint32_t tokens,
                                 std::span<const BlockId> pages) {
  // _insert_helper: down the matching children (touching them, splitting at a
  // partial match), then a new leaf for the rest.
  // HiCache: a host-only node on the way takes the inserted pages again, and
  // the pages are the tree's from there on; a device node without a host
  // copy, or the new leaf, gets one (inc_hit_count).
  tokens = floor_page(tokens);
  Node* node = root_.get();
  node->last_access = touch();
  std::uint32_t pos = 0;
  std::optional<std::uint32_t> taken;
  std::size_t j = 0;
  while (pos < tokens) {
    Node* child = child_at(*node, seq, pos);
    if (child == nullptr) {
      auto leaf = std::make_unique<Node>();
      leaf->parent = node;
      leaf->start = pos;
      leaf->end = tokens;
      leaf->key = clip(seq, pos, tokens);
      if (pool_ != nullptr) {
        leaf->pages.assign(pages.begin() + pos / page_, pages.begin() + tokens / page_);
      }
      leaf->last_access = touch();
      evictable_ += tokens - pos;
      if (log_ != nullptr) {
        set_hashes(*leaf);
        log_pages(*leaf, /*stored=*/true);
      }
      const std::uint64_t id = page_id(*leaf);
      Node* made = leaf.get();
      node->children.emplace(id, std::move(leaf));
      ++nodes_;
      if (host_enabled()) write_backup(made);
      return taken.value_or(pos);
    }
    child->last_access = touch();
    const std::uint32_t matched =
        floor_page(first_difference(*child, seq, j, pos, std::min(child->end, tokens)));
    if (matched < child->end) {
      assert(matched > pos);
      child = split(child, matched);
    }
    if (child->evicted) {
      if (!taken) taken = pos;
      child->pages.assign(pages.begin() + pos / page_, pages.begin() + child->end / page_);
      child->evicted = false;
      evictable_ += child->tokens();
      if (log_ != nullptr) log_pages(*child, /*stored=*/true);
    } else if (host_enabled() && child->host.empty()) {
      write_backup(child);
    }
    node = child;
    pos = child->end;
  }
  return taken.value_or(tokens);
}

void RadixCache::inc_lock_ref(Node* node) {
  for (; node != root_.get(); node = node->parent) {
    if (node->lock_ref == 0) {
      evictable_ -= node->tokens();
      protected_ += node->tokens();
    }
    ++node->lock_ref;
  }
}

void RadixCache::dec_lock_ref(Node* node) {
  for (; node != root_.get(); node = node->parent) {
    assert(node->lock_ref > 0);
    if (node->lock_ref == 1) {
      evictable_ += node->tokens();
      protected_ -= node->tokens();
    }
    --node->lock_ref;
  }
}

std::uint32_t RadixCache::evict(std::uint32_t tokens) {
  // RadixCache.evict: a heap of the unlocked leaves by last access; a parent
  // left without children, and unlocked, joins it. HiCache
  // (HiRadixCache.evict): a leaf is a node without a child on the device; one
  // with a host copy stays in the tree on the host (_evict_backuped), one
  // without is deleted (_evict_regular).
  using Entry = std::pair<std::uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (device_leaf(*node)) {
      if (node->lock_ref == 0) heap.emplace(node->last_access, node);
      continue;
    }
    for (auto& [id, child] : node->children) {
      if (!child->evicted) stack.push_back(child.get());
    }
  }
  std::uint32_t freed = 0;
  while (freed < tokens && !heap.empty()) {
    Node* leaf = heap.top().second;
    heap.pop();
    (void)pool_->release_each(leaf->pages);  // the tree's pages are live, held once
    if (log_ != nullptr) log_pages(*leaf, /*stored=*/false);
    if (evictions_ != nullptr) {
      evictions_->insert(evictions_->end(), leaf->pages.begin(), leaf->pages.end());
    }
    evicted_pages_ += leaf->pages.size();
    freed += leaf->tokens();
    evictable_ -= leaf->tokens();
    Node* parent = leaf->parent;
    if (!leaf->host.empty()) {
      leaf->pages.clear();
      leaf->evicted = true;
    } else {
      delete_node(leaf);
    }
    if (parent->lock_ref == 0 && device_leaf(*parent)) heap.emplace(parent->last_access, parent);
  }
  return freed;
}

void RadixCache::pages(std::vector<BlockId>& out) const {
  for_each_node(
      [&out](const Node& node) { out.insert(out.end(), node.pages.begin(), node.pages.end()); });
}

std::optional<RadixCache::Problem> RadixCache::check(std::span<const Node* const> locked) const {
  // R3's counts: each holder locks its node's path.
  std::unordered_map<const Node*, std::uint32_t> expected;
  for (const Node* node : locked) {
    for (; node != nullptr && node != root_.get(); node = node->parent) ++expected[node];
  }
  std::uint64_t evictable = 0;
  std::uint64_t locked_tokens = 0;
  std::uint64_t count = 0;
  std::vector<std::uint64_t> host_pages;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& [id, owned] : node->children) {
      const Node& c = *owned;
      ++count;
      auto where = [&] { return fmt::format("node [{}, {})", c.start, c.end); };
      if (c.parent != node || c.start != node->end || c.end <= c.start ||
          (c.end - c.start) % page_ != 0) {
        return Problem{
            "R1", fmt::format("{}: not whole pages after its parent's end {}", where(), node->end)};
      }
      if (pool_ != nullptr && !c.evicted && c.pages.size() != (c.end - c.start) / page_) {
        return Problem{"R1", fmt::format("{}: {} pages for {} tokens of {}-token pages", where(),
                                         c.pages.size(), c.tokens(), page_)};
      }
      std::uint32_t prev = c.start;
      for (const TokenRun& run : c.key) {
        if (run.end <= prev) {
          return Problem{"R1", fmt::format("{}: its key's runs are out of order", where())};
        }
        prev = run.end;
      }
      if (c.key.empty() || prev < c.end) {
        return Problem{"R1", fmt::format("{}: its key covers tokens up to {} only", where(),
                                         c.key.empty() ? c.start : prev)};
      }
      if (page_id(c) != id) {
        return Problem{"R1", fmt::format("{}: filed under id {}, its first page is {}", where(), id,
                                         page_id(c))};
      }
      if (log_ != nullptr) {
        Node again;
        again.parent = c.parent;
        again.start = c.start;
        again.end = c.end;
        again.key = c.key;
        set_hashes(again);
        if (again.hashes != c.hashes) {
          return Problem{"R4", fmt::format("{}: its {} page hashes are not the chain of its "
                                           "path's tokens",
                                           where(), c.hashes.size())};
        }
      }
      if (node != root_.get() && c.lock_ref > node->lock_ref) {
        return Problem{"R2", fmt::format("{}: locked {} times, its parent {}", where(), c.lock_ref,
                                         node->lock_ref)};
      }
      const auto want = expected.find(&c);
      const std::uint32_t holders = want == expected.end() ? 0 : want->second;
      if (c.lock_ref != holders) {
        return Problem{"R3", fmt::format("{}: locked {} times, {} holders use it", where(),
                                         c.lock_ref, holders)};
      }
      if (auto problem = check_host(c, *node, host_pages)) return problem;
      if (!c.evicted) (c.lock_ref == 0 ? evictable : locked_tokens) += c.tokens();
      stack.push_back(&c);
    }
  }
  if (evictable != evictable_ || locked_tokens != protected_) {
    return Problem{"R2", fmt::format("evictable {} and protected {} tokens counted, {} and {} "
                                     "recounted",
                                     evictable_, protected_, evictable, locked_tokens)};
  }
  if (count != nodes_) {
    return Problem{"R1", fmt::format("{} nodes counted, {} in the tree", nodes_, count)};
  }
  std::sort(host_pages.begin(), host_pages.end());
  if (auto twice = std::adjacent_find(host_pages.begin(), host_pages.end());
      twice != host_pages.end()) {
    return Problem{"R5", fmt::format("host page {} held twice", *twice)};
  }
  if (host_pages.size() != host_used_ || host_used_ > host_capacity_) {
    return Problem{"R5", fmt::format("{} host pages counted, {} held by the tree; {} fit",
                                     host_used_, host_pages.size(), host_capacity_)};
  }
  return std::nullopt;
}

std::optional<RadixCache::Problem> RadixCache::check_host(const Node& c, const Node& parent,
                                                          std::vector<std::uint64_t>& seen) const {
  auto fail = [&](std::string_view what) {
    return Problem{"R5", fmt::format("node [{}, {}): {}", c.start, c.end, what)};
  };
  const std::uint32_t want = c.tokens() / page_;
  if (c.evicted) {
    if (!c.pages.empty() || c.host.size() != want) {
      return fail(fmt::format("on the host alone with {} device and {} host pages for {}",
                              c.pages.size(), c.host.size(), want));
    }
    if (c.lock_ref != 0) return fail("on the host alone, and locked");
  } else if (parent.evicted) {
    return fail("on the device, under a node on the host alone");
  }
  if (!c.host.empty() && c.host.size() != want) {
    return fail(fmt::format("{} host pages for {}", c.host.size(), want));
  }
  seen.insert(seen.end(), c.host.begin(), c.host.end());
  return std::nullopt;
}

}  // namespace kvreplay
