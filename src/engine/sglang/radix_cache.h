// RadixCache: SGLang's radix tree of cached KV (python/sglang/srt/mem_cache/
// radix_cache.py, RadixCache), over kvreplay's real pool. The sglang engine's
// prefix cache (engine/sglang/sglang_scheduler.h).
//
// A node holds a run of tokens (its key) and the pool's pages that hold their
// KV, one page per `page_tokens` tokens (SGLang's --page-size; 1 by default
// under this engine, so a page is a token). Every node starts and ends on a
// page boundary: matches and inserts are page-aligned (RadixCache.match_prefix
// and insert cut the key to whole pages). A node's children are keyed by their
// first page; a match that ends inside a node splits it (_split_node).
//
// Tokens are named by the trace: a token's identity is the id of the run that
// covers it (TokenRun), a hash id of the trace's blocks, a named prefix, or an
// id of the request's own, so comparing two sequences walks their runs, not
// their tokens. Children are filed under their first page's last token id;
// a trace that breaks the formats' contract (equal ids mean an equal prefix,
// formats/requests/request.h) can file two children under one id, so a
// lookup compares the whole first page.
//
// Nodes are locked while a request uses them (inc_lock_ref / dec_lock_ref lock
// the path to the root); evict() frees unlocked leaves least recently used
// first, and a parent that becomes a leaf joins the candidates
// (RadixCache.evict). Sizes are in tokens, as SGLang's evictable_size_ and
// protected_size_.
//
// Invariants (check()):
//   R1 structure: a child starts where its parent ends, spans whole pages
//      (at least one), holds one page per page_tokens tokens, its key's runs
//      cover it in order, and it is filed under its first page's id.
//   R2 sizes: evictable_size() is the tokens of unlocked nodes,
//      protected_size() of locked ones; a node is locked at least as often as
//      any child.
//   R3 locks: each node's lock count is the number of holders (the requests
//      given to check) whose locked node is it or below it.
//   R4 hashes (with log_changes): each node holds one hash per page, each
//      the chain of its path's tokens (PageChange).
//   R5 host (with enable_host): an evicted node holds one host page per page
//      and no device page, is unlocked, and is below evicted nodes only; a
//      node on the device has a device parent (the root counts); each host
//      page is held by one node, and the pages held are host_used(), at most
//      the capacity.
//
// HiCache (enable_host; SGLang's HiRadixCache, mem_cache/hiradix_cache.py,
// under --hicache-write-policy write_through): a node may also hold a copy of
// its pages in a host pool of a fixed number of pages.
//   - write_backup: a node whose pages have no host copy gets one when it is
//     inserted or matched (inc_hit_count: write_through's threshold is one
//     hit), evicting host-only leaves first (evict_host) when the host pool
//     is short, and nothing when it stays short. The node is locked until
//     its write lands (writing_check: write_done).
//   - evict: a device leaf (no child on the device) with a host copy leaves
//     the device and stays in the tree on the host alone (_evict_backuped,
//     "evicted"); one without is deleted (_evict_regular). Where such a node
//     has host-only children (their copy was written, its own was refused),
//     kvreplay frees their host pages with it (SGLang's _delete_leaf would
//     lose them).
//   - evict_host: host-only leaves, least recently used first.
//   - match_prefix goes on past the device into host-only nodes
//     (host_hit_length); load_back brings such a chain back all or nothing,
//     not under kLoadBackThreshold tokens, evicting device pages for it, and
//     locks its last node until the load lands (loading_check: load_done).
//   - insert over a host-only node gives it the inserted pages again.
// The pool's side (each page held exactly once, by the tree or by one
// request) is the scheduler's check (engine/sglang/sglang_scheduler.cc, S1-S3).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "engine/token_runs.h"

namespace kvreplay {

// The id of the token at `pos` (REQUIRES a run covers it).
std::uint64_t token_id(const TokenRuns& runs, std::uint32_t pos);

class RadixCache {
 public:
  struct Node {
    Node* parent = nullptr;
    std::uint32_t start = 0;  // tokens before the node on its path
    std::uint32_t end = 0;
    TokenRuns key;               // runs covering [start, end)
    std::vector<BlockId> pages;  // (end - start) / page_tokens (none when keys only)
    // By the id of their first page's last token (several under one id only
    // when a trace breaks the ids' contract).
    std::unordered_multimap<std::uint64_t, std::unique_ptr<Node>> children;
    std::uint32_t lock_ref = 0;
    std::uint64_t last_access = 0;  // the cache's clock at the last touch
    // --kv-events (log_changes): each page's chained hash (PageChange).
    std::vector<std::uint64_t> hashes;
    // HiCache: the host pages holding a copy of `pages` (none: no copy), and
    // whether the node is on the host alone (`pages` empty).
    std::vector<std::uint64_t> host;
    bool evicted = false;
    std::uint32_t tokens() const { return end - start; }
  };

  // HiRadixCache.load_back_threshold: a shorter host hit is recomputed.
  static constexpr std::uint32_t kLoadBackThreshold = 10;
  // A host write issued by write_backup: the node (locked until write_done),
  // its host pages and the device pages they copy.
  struct HostWrite {
    Node* node = nullptr;
    std::vector<std::uint64_t> host;
    std::vector<BlockId> pages;
  };

  // `pool` receives evicted pages; nullptr keeps keys only (SGLang's
  // RadixCache.create_simulated, the waiting queue's tree).
  RadixCache(BlockPool* pool, std::uint32_t page_tokens);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  Node* root() { return root_.get(); }
  const Node* root() const { return root_.get(); }
  std::uint32_t page_tokens() const { return page_; }

  // RadixCache.match_prefix: the longest cached prefix of `seq` within its
  // first `max_tokens` tokens, cut to whole pages. Appends its pages to
  // `pages` (unless null) and sets `last` to the node it ends in, splitting a
  // node it ends inside. Touches the nodes on the path. Returns its tokens.
  // With `host` (HiCache), the match goes on into host-only nodes: `host`
  // gets the tokens matched there (host_hit_length) and the node it ends in
  // (last_host_node; `last` when none).
  struct HostMatch {
    std::uint32_t tokens = 0;
    Node* node = nullptr;
  };
  std::uint32_t match_prefix(const TokenRuns& seq, std::uint32_t max_tokens,
                             std::vector<BlockId>* pages, Node*& last, HostMatch* host = nullptr);
  // The tokens match_prefix would return, without touching, splitting or
  // locking anything: what a router's index of the tree's KV events sees.
  std::uint32_t peek_prefix(const TokenRuns& seq, std::uint32_t max_tokens) const;
  // RadixCache.insert: the first `tokens` tokens of `seq` (whole pages) with
  // their pages. Returns the tokens already in the tree (the pages given for
  // them are not taken: the caller frees those it owns); the tree takes the
  // pages from there on.
  std::uint32_t insert(const TokenRuns& seq, std::uint32_t tokens, std::span<const BlockId> pages);
  void inc_lock_ref(Node* node);
  void dec_lock_ref(Node* node);
  // RadixCache.evict: frees unlocked leaves, least recently used first, until
  // `tokens` tokens are freed or none is left. Returns the tokens freed.
  std::uint32_t evict(std::uint32_t tokens);
  // HiCache (see the top of this file): a host pool of `capacity` pages.
  // REQUIRES an empty tree with a pool.
  void enable_host(std::uint32_t capacity);
  bool host_enabled() const { return host_capacity_ > 0; }
  std::uint32_t host_capacity() const { return host_capacity_; }
  std::uint32_t host_used() const { return host_used_; }
  // Host pages evicted so far (evict_host, and those freed by evict).
  std::uint64_t host_evicted() const { return host_evicted_; }
  // The writes issued since the last call (the engine times them).
  std::vector<HostWrite> take_host_writes() { return std::exchange(host_writes_, {}); }
  // writing_check: node's write of host pages `host` landed: the lock goes.
  void write_done(Node* node, std::span<const std::uint64_t> host);
  // HiRadixCache.load_back (no memory quota) of the host-only chain ending
  // at `last`: its tokens, or 0 when not loaded. Sets `host` to the host
  // pages read and `pages` to the device pages they land in, in order;
  // `last` stays locked until load_done(last).
  std::uint32_t load_back(Node* last, std::vector<std::uint64_t>& host,
                          std::vector<BlockId>& pages);
  void load_done(Node* last) { dec_lock_ref(last); }
  // HiRadixCache.evict_host: frees host-only leaves, least recently used
  // first, until `pages` host pages are freed or none is left.
  std::uint32_t evict_host(std::uint32_t pages);
  // --emit-trace: host pages dropped are appended to `out` (written as drops).
  void log_host_drops(std::vector<std::uint64_t>* out) { host_drops_ = out; }
  // The hashes of every host page (with log_changes), in no order.
  void host_page_hashes(std::vector<std::uint64_t>& out) const;
  // Empties the tree (keys-only trees: the waiting queue's, per round).
  // REQUIRES no log_changes: a tree whose changes are logged is never reset.
  void reset();
  // --kv-events (SGLang's KVCacheEventMixin): from now on each page the tree
  // caches or frees is appended to `log`, in the order it happens: a new
  // leaf's pages stored (_insert_helper), a split node's pages removed and
  // both parts' stored again (_split_node), an evicted leaf's removed
  // (evict). REQUIRES an empty tree.
  void log_changes(std::vector<PageChange>* log);
  // --emit-trace: from now on the pages evict() frees are appended to `out`
  // (TraceEmitter::evictions, written as `uncache`s).
  void log_evictions(std::vector<BlockId>* out) { evictions_ = out; }
  // The hashes of every device page the tree holds (with log_changes), in no order.
  void page_hashes(std::vector<std::uint64_t>& out) const;

  std::uint64_t evictable_size() const { return evictable_; }
  std::uint64_t protected_size() const { return protected_; }
  std::uint64_t total_size() const { return evictable_ + protected_; }
  std::uint64_t nodes() const { return nodes_; }
  std::uint64_t evicted_pages() const { return evicted_pages_; }
  // Every page the tree holds (for the scheduler's ownership check).
  void pages(std::vector<BlockId>& out) const;

  struct Problem {
    std::string invariant;
    std::string message;
  };
  // R1-R5; `locked` lists each holder's locked node (a node once per holder).
  std::optional<Problem> check(std::span<const Node* const> locked) const;

 private:
  friend struct RadixCacheFaults;  // tests plant faults
  std::uint64_t touch() { return ++clock_; }
  // The first position in [from, to) where `node`'s key and `seq` differ
  // (to when none); `j` is the run of `seq` covering `from`, moved along.
  static std::uint32_t first_difference(const Node& node, const TokenRuns& seq, std::size_t& j,
                                        std::uint32_t from, std::uint32_t to);
  // The child of `node` whose first page is seq's page at `pos`, or null.
  Node* child_at(Node& node, const TokenRuns& seq, std::uint32_t pos) const;
  // `child`'s entry in its parent's children.
  auto slot_of(const Node* child) const -> decltype(child->parent->children.begin());
  // RadixCache._split_node: `child` becomes [at, end) under a new node
  // [start, at) that takes its place; returns the new node.
  Node* split(Node* child, std::uint32_t at);
  std::uint64_t page_id(const Node& node) const {
    return token_id(node.key, node.start + page_ - 1);
  }
  std::uint32_t floor_page(std::uint32_t tokens) const { return tokens / page_ * page_; }
  // --kv-events: the hash of the page before `node`'s first (none under the
  // root), its pages' hashes set from it, and a node's pages logged.
  std::optional<std::uint64_t> hash_before(const Node& node) const {
    if (node.parent == nullptr || node.parent == root_.get()) return std::nullopt;
    return node.parent->hashes.back();
  }
  void set_hashes(Node& node) const;
  void log_pages(const Node& node, bool stored);
  void log_host(std::span<const std::uint64_t> hashes, bool stored);
  // HiCache: a host copy of node's pages (write_through's inc_hit_count).
  void write_backup(Node* node);
  // Deletes leaf `node` from its parent; its host pages (and those of the
  // host-only nodes below it, deleted with it) go back to the host pool.
  void delete_node(Node* node);
  bool device_leaf(const Node& node) const;
  // R5 for child `c` of `parent`; `seen` collects its host pages.
  std::optional<Problem> check_host(const Node& c, const Node& parent,
                                    std::vector<std::uint64_t>& seen) const;
  // Calls visit(node) on every node, the root first, depth first.
  template <class Visit>
  void for_each_node(Visit&& visit) const {
    std::vector<const Node*> stack{root_.get()};
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      visit(*node);
      for (const auto& [id, child] : node->children) stack.push_back(child.get());
    }
  }

  BlockPool* pool_;
  std::uint32_t page_;
  std::unique_ptr<Node> root_;
  std::uint64_t evictable_ = 0;
  std::uint64_t protected_ = 0;
  std::uint64_t nodes_ = 0;
  std::uint64_t clock_ = 0;
  std::uint64_t evicted_pages_ = 0;
  std::vector<PageChange>* log_ = nullptr;     // see log_changes
  std::vector<BlockId>* evictions_ = nullptr;  // see log_evictions
  // HiCache (enable_host).
  std::uint32_t host_capacity_ = 0;
  std::uint32_t host_used_ = 0;
  std::uint64_t host_next_ = 0;  // the next host page's name
  std::uint64_t host_evicted_ = 0;
  std::vector<HostWrite> host_writes_;
  std::vector<std::uint64_t>* host_drops_ = nullptr;  // see log_host_drops
  // With log_changes: each host page's hash, for its event when it lands.
  std::unordered_map<std::uint64_t, std::uint64_t> host_hash_;     // landed
  std::unordered_map<std::uint64_t, std::uint64_t> pending_hash_;  // writes in flight
};

}  // namespace kvreplay
