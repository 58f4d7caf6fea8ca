#include "engine/radix_cache.h"

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
    log_->push_back(RadixPageChange{hash, stored ? before : std::nullopt, stored});
    before = hash;
  }
}

void RadixCache::log_changes(std::vector<RadixPageChange>* log) {
  assert(root_->children.empty());
  log_ = log;
}

void RadixCache::page_hashes(std::vector<std::uint64_t>& out) const {
  for_each_node(
      [&out](const Node& node) { out.insert(out.end(), node.hashes.begin(), node.hashes.end()); });
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
  // _split_node: the child's pages removed, then both parts' stored.
  if (log_ != nullptr) log_pages(*child, /*stored=*/false);
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
    log_pages(*out, /*stored=*/true);
    log_pages(*child, /*stored=*/true);
  }
  return out;
}

std::uint32_t RadixCache::match_prefix(const TokenRuns& seq, std::uint32_t max_tokens,
                                       std::vector<BlockId>* pages, Node*& last) {
  // _match_prefix_helper: down the children while the key matches, touching
  // each node; a match ending inside a node splits it there.
  const std::uint32_t limit = floor_page(max_tokens);
  Node* node = root_.get();
  node->last_access = touch();
  std::uint32_t pos = 0;
  std::size_t j = 0;
  while (pos < limit) {
    Node* child = child_at(*node, seq, pos);
    if (child == nullptr) break;
    child->last_access = touch();
    const std::uint32_t matched =
        floor_page(first_difference(*child, seq, j, pos, std::min(child->end, limit)));
    if (matched < child->end) {
      // The first page matched (its id did), so a split leaves both parts whole.
      if (matched > pos) {
        Node* mid = split(child, matched);
        if (pages != nullptr) pages->insert(pages->end(), mid->pages.begin(), mid->pages.end());
        node = mid;
        pos = matched;
      }
      break;
    }
    if (pages != nullptr) pages->insert(pages->end(), child->pages.begin(), child->pages.end());
    node = child;
    pos = child->end;
  }
  last = node;
  return pos;
}

std::uint32_t RadixCache::peek_prefix(const TokenRuns& seq, std::uint32_t max_tokens) const {
  const std::uint32_t limit = floor_page(max_tokens);
  // child_at only reads the node; it is declared on mutable nodes for match_prefix.
  Node* node = root_.get();
  std::uint32_t pos = 0;
  std::size_t j = 0;
  while (pos < limit) {
    const Node* child = child_at(*node, seq, pos);
    if (child == nullptr) break;
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
  tokens = floor_page(tokens);
  Node* node = root_.get();
  node->last_access = touch();
  std::uint32_t pos = 0;
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
      node->children.emplace(id, std::move(leaf));
      ++nodes_;
      return pos;
    }
    child->last_access = touch();
    const std::uint32_t matched =
        floor_page(first_difference(*child, seq, j, pos, std::min(child->end, tokens)));
    if (matched < child->end) {
      assert(matched > pos);
      child = split(child, matched);
    }
    node = child;
    pos = child->end;
  }
  return tokens;
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
  // left without children, and unlocked, joins it.
  using Entry = std::pair<std::uint64_t, Node*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (node->children.empty()) {
      if (node != root_.get() && node->lock_ref == 0) heap.emplace(node->last_access, node);
      continue;
    }
    for (auto& [id, child] : node->children) stack.push_back(child.get());
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
    parent->children.erase(slot_of(leaf));  // deletes the leaf
    --nodes_;
    if (parent != root_.get() && parent->children.empty() && parent->lock_ref == 0) {
      heap.emplace(parent->last_access, parent);
    }
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
      if (pool_ != nullptr && c.pages.size() != (c.end - c.start) / page_) {
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
      (c.lock_ref == 0 ? evictable : locked_tokens) += c.tokens();
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
  return std::nullopt;
}

}  // namespace kvreplay
