// TrtBlockTree: TensorRT-LLM's reusable KV blocks over kvreplay's real pool,
// the trtllm engine's cache (engine/trtllm/trtllm_scheduler.h). It imitates
// cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp (WindowBlockManager,
// KVCacheBlock) and evictionPolicy.cpp (LRUEvictionPolicy).
//
// A block stored for reuse is a node of a tree keyed by its tokens
// (KVCacheBlock::addNextBlock, findMatchingBlock): a child of the block before
// it in its sequence, the root's child for a sequence's first block. A key
// may hold fewer tokens than a block (a sequence's partial last block,
// stored with it). Tokens are named by the trace (TokenRun, engine/token_runs.h, as the sglang
// engine names them), so a key is the runs covering its tokens.
//
// Free blocks are one queue (LRUEvictionPolicy's free queue at the default
// retention priority: kvreplay's requests carry no KvCacheRetentionConfig,
// so every block has priority 35 and "priority, then LRU" is LRU): a
// released block joins its back (releaseBlock), getFreeBlock takes its
// front. A free block is either stored in the tree (reusable: a match takes
// it off the queue) or not (its KV is of no use); the latter stand in the
// queue as anonymous places and take whichever block the pool hands out.
// Taking a stored block evicts it and its descendants from the tree
// (WindowBlockManager::getFreeBlock, freeChildren). Sequences are released
// tail first (releaseBlocks), so a block's descendants are ahead of it in
// the queue: leaves leave first.
//
// References: a block's pool refcount is its request references plus one
// while it is stored (the tree's hold).
//
// The host tier (enable_host: KvCacheConfig.host_cache_size, TensorRT-LLM's
// secondary pool) holds blocks of the tree in host slots, node ids from
// host_base() on, with a free queue of their own. Taking a stored GPU block
// moves it to the host queue's front slot instead of evicting it
// (WindowBlockManager::getFreeBlock with canOffload: every block has the
// default priority 35, at least the secondary offload minimum 30); a stored
// block in that slot is evicted first, with its descendants (freeChildren).
// The moved block keeps its place in the tree and joins the back of the host
// queue. A match on a host block brings it back (onboardBlock): it takes a
// GPU block as any allocation does, and its host slot joins the host queue's
// back as an empty place. A host block is never held (a holder onboards it
// first), so every host block is in the host queue.
//
// Invariants (check()):
//   T1 structure: a stored block's parent is the root or a stored block whose
//      children hold it once; its key starts where its parent's ends, spans
//      at most a block, and the index files it under (parent, last token, end).
//   T2 queue: the queue's stored entries are exactly the stored blocks no
//      request holds, each once; its anonymous places are the pool's free
//      blocks, as many.
//   T3 refcounts: a block's pool refcount is its request references plus one
//      when stored (the scheduler recounts the request references).
//   T4 host: a host block is held by no one and queued in the host queue,
//      whose empty places and stored blocks are as many as its slots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "engine/token_runs.h"

namespace kvreplay {

// A block's tokens [start, end) of a sequence: the runs covering them, each
// run's end clipped to `end` (BlockKey's uniqueTokens).
struct TrtBlockKey {
  std::uint32_t start = 0;
  std::uint32_t end = 0;
  TokenRuns runs;
  std::uint32_t size() const { return end - start; }
  std::uint64_t last_id() const { return runs.empty() ? 0 : runs.back().id; }
  bool operator==(const TrtBlockKey& o) const {
    return start == o.start && end == o.end &&
           std::equal(
               runs.begin(), runs.end(), o.runs.begin(), o.runs.end(),
               [](const TokenRun& a, const TokenRun& b) { return a.id == b.id && a.end == b.end; });
  }
};
// The key of tokens [start, end) of `seq` (REQUIRES runs cover them).
TrtBlockKey block_key_of(const TokenRuns& seq, std::uint32_t start, std::uint32_t end);
// BlockKey::partialMatch: the leading tokens two keys at one position share.
std::uint32_t shared_tokens(const TrtBlockKey& a, const TrtBlockKey& b);

class TrtBlockTree {
 public:
  static constexpr BlockId kRoot = kInvalidBlock - 1;
  // What findMatchingBlock found under a block.
  struct Match {
    BlockId block = kInvalidBlock;
    std::uint32_t tokens = 0;  // of the query key
    bool partial = false;      // fewer tokens than the block, or a partial block
  };
  // A stored block entering or leaving the tree (--kv-events), its hash
  // chained from its parent's.
  struct Change {
    std::uint64_t hash = 0;
    std::optional<std::uint64_t> parent;
    std::uint32_t tokens = 0;
    bool stored = false;
    bool host = false;  // the host tier's copy (a GPU block's move there is a removal and a store)
  };

  TrtBlockTree(BlockPool* pool, std::uint32_t tokens_per_block);
  // The host tier of `slots` blocks (before any other call).
  void enable_host(std::uint32_t slots);

  // KVCacheBlock::findMatchingBlock under `parent`: the child of the same
  // tokens (partial when that child is not full), else with partial reuse
  // the child sharing the most leading tokens (any child when copying on
  // partial reuse, else only a free leaf).
  std::optional<Match> find(BlockId parent, const TrtBlockKey& key, bool partial_reuse,
                            bool copy_on_partial) const;
  // find's exact match alone, by the key's end and its last token's id
  // (equal ids name equal tokens, their whole prefix: the formats' contract).
  std::optional<Match> find_exact(BlockId parent, std::uint32_t start, std::uint32_t end,
                                  std::uint64_t last_id) const;
  bool has_children(BlockId parent) const { return !children_of(parent).empty(); }
  // getFreeBlock: the queue's front, held once by the caller; a stored one
  // moves to the host tier when there is one, else leaves the tree with its
  // descendants. nullopt when nothing is free.
  std::optional<BlockId> take_free();
  // claimBlock + onboardBlock: a stored host block comes back to a GPU block
  // taken as take_free takes one, and is held once by the caller; its id
  // (the GPU block), or nullopt (nothing changed) when no GPU block is free.
  std::optional<BlockId> onboard(BlockId host_block);
  // claimLeafBlock + onboardBlock: a free stored leaf on the host leaves the
  // tree and its KV comes back in a GPU block the caller holds once.
  std::optional<BlockId> claim_host_leaf(BlockId host_block);
  // A host block's tokens copied into a GPU block (a partial match reused
  // by copy): counted as KV brought back, the host block unchanged.
  void read_host(BlockId host_block);
  // claimBlock + incRefCount: a stored block matched in full gains a holder
  // (off the queue when it had none).
  void hold(BlockId b);
  // claimLeafBlock: a free stored leaf leaves the tree and is the caller's.
  void claim_leaf(BlockId b);
  // decRefCount + releaseBlock: the caller drops a hold; a block held by no
  // one joins the queue's back.
  void release(BlockId b);
  // storeBlocks' insertion: `b` (held by the caller, not stored) becomes the
  // child of `parent` under `key`.
  void store(BlockId parent, const TrtBlockKey& key, BlockId b);

  bool stored(BlockId b) const { return b < nodes_.size() && nodes_[b].stored; }
  // Host slots are node ids from host_base() on.
  bool on_host(BlockId b) const { return b != kRoot && b >= host_base_; }
  BlockId host_base() const { return host_base_; }
  std::uint32_t host_slots() const { return host_slots_; }
  std::uint32_t host_used() const { return host_used_; }
  std::uint64_t host_evicted() const { return host_evicted_; }
  // The hashes of the blocks moved to the host and back since the last call.
  std::vector<std::uint64_t> take_offloaded() { return std::exchange(offloaded_, {}); }
  std::vector<std::uint64_t> take_onboarded() { return std::exchange(onboarded_, {}); }
  bool is_leaf(BlockId b) const { return nodes_[b].children.empty(); }
  std::uint32_t holders(BlockId b) const { return nodes_[b].refs; }
  std::uint32_t free_blocks() const { return static_cast<std::uint32_t>(queue_.size()); }
  std::uint32_t stored_blocks() const { return stored_; }            // GPU and host
  std::uint32_t free_stored_blocks() const { return free_stored_; }  // GPU only
  std::uint64_t evicted() const { return evicted_; }
  // Changes with every store and removal: a walk of the tree is still
  // valid while it is unchanged.
  std::uint64_t version() const { return version_; }
  std::uint64_t hash(BlockId b) const { return b == kRoot ? 0 : nodes_[b].hash; }
  const TrtBlockKey& key(BlockId b) const { return nodes_[b].key; }
  // The stored GPU blocks (T3's holds), any order.
  void stored_list(std::vector<BlockId>& out) const;
  // While set, stores and removals are appended to `log`.
  void log_changes(std::vector<Change>* log) { log_ = log; }
  // T1-T2 and T3 against `request_refs` (per block); a message or nullopt.
  std::optional<std::string> check(const std::vector<std::uint32_t>& request_refs) const;

 private:
  struct Node {
    bool stored = false;
    bool queued = false;
    BlockId parent = kInvalidBlock;
    std::uint32_t refs = 0;
    std::uint64_t hash = 0;
    TrtBlockKey key;
    std::vector<BlockId> children;
    std::uint32_t child_index = 0;  // its place among its parent's children
    std::list<BlockId>::iterator pos;
  };
  struct IndexKey {
    BlockId parent;
    std::uint32_t end;
    std::uint64_t last;
    bool operator==(const IndexKey&) const = default;
  };
  struct IndexHash {
    std::size_t operator()(const IndexKey& k) const;
  };
  std::vector<BlockId>& children_of(BlockId parent) {
    return parent == kRoot ? root_children_ : nodes_[parent].children;
  }
  const std::vector<BlockId>& children_of(BlockId parent) const {
    return parent == kRoot ? root_children_ : nodes_[parent].children;
  }
  void enqueue(BlockId b);  // back of the queue; kInvalidBlock: an anonymous place
  void dequeue(BlockId b);  // off its queue (the GPU's or the host's)
  void host_enqueue(BlockId b);
  // The node at `from` moves to the free id `to` (its tree place, its
  // children's parent and their index entries follow; queues do not).
  void relocate(BlockId from, BlockId to);
  // The host queue's front slot, made empty (a stored block there evicted
  // with its descendants) and taken off the queue.
  BlockId take_host_slot();
  // take_free's offloading (REQUIRES the queue's front stored, the host
  // queue not empty).
  BlockId offload_front();
  // A stored host block (its descendants gone) leaves the tree; its place in
  // the host queue becomes an empty one.
  void evict_host(BlockId b);
  // freeLeafBlock: b leaves the tree (its pool hold stays with the caller).
  void detach(BlockId b);
  // freeChildren: b's stored descendants leave the tree and the pool.
  void free_descendants(BlockId b);
  void log(BlockId b, bool stored);

  BlockPool* pool_;
  std::uint32_t tokens_per_block_;
  std::vector<Node> nodes_;
  std::vector<BlockId> root_children_;
  std::unordered_map<IndexKey, BlockId, IndexHash> index_;
  std::list<BlockId> queue_;
  std::list<BlockId> host_queue_;  // host slots: stored blocks, and kInvalidBlock for an empty one
  BlockId host_base_ = 0;
  std::uint32_t host_slots_ = 0;
  std::uint32_t host_used_ = 0;
  std::uint64_t host_evicted_ = 0;
  std::vector<BlockId> host_free_ids_;  // the empty host slots' ids, as many as empty places
  std::vector<std::uint64_t> offloaded_;
  std::vector<std::uint64_t> onboarded_;
  std::uint32_t stored_ = 0;
  std::uint32_t free_stored_ = 0;
  std::uint64_t evicted_ = 0;
  std::uint64_t version_ = 0;
  std::vector<Change>* log_ = nullptr;
};

}  // namespace kvreplay
