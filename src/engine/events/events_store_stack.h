// StoreStack: the LRU stack distances of `kvreplay events` (engine/events/events_check.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace kvreplay {

// LRU stack distances over store events (Mattson et al., 1970), counted with a
// Fenwick tree over store positions (Bennett and Kruskal, 1975): a position
// holds 1 while it is the latest store of its hash, so the distinct hashes
// stored since a hash's previous store are the ones after that position.
// O(log n) a store; positions are renumbered when fewer than half are latest,
// so memory follows the distinct hashes, not the stores.
class StoreStack {
 public:
  // A store of `id`, whose previous store is at `previous` (kNone: none). Its
  // new position; `distance`: the distinct other ids stored since `previous`.
  std::uint32_t store(std::uint32_t id, std::uint32_t previous, std::uint64_t& distance) {
    const auto end = static_cast<std::uint32_t>(owner_.size());
    distance = 0;
    if (previous != kNone) {
      distance = prefix(end) - prefix(previous + 1);
      add(previous, -1);
      owner_[previous] = kNone;
      --live_;
    }
    push(id);
    return end;
  }
  std::size_t positions() const { return owner_.size(); }
  bool sparse() const { return owner_.size() >= 4096 && owner_.size() >= 2 * live_; }
  // Renumbers the latest stores 0, 1, ... in order; relocate(id, position) for each.
  template <class F>
  void compact(F&& relocate) {
    std::vector<std::uint32_t> owners;
    owners.reserve(live_);
    for (std::uint32_t id : owner_) {
      if (id != kNone) owners.push_back(id);
    }
    owner_ = std::move(owners);
    // Every position holds 1: node i (1-based) covers lowbit(i) positions.
    tree_.assign(owner_.size(), 0);
    for (std::size_t i = 1; i <= tree_.size(); ++i) {
      tree_[i - 1] = static_cast<std::uint32_t>(i & (~i + 1));
      relocate(owner_[i - 1], static_cast<std::uint32_t>(i - 1));
    }
  }

  static constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

 private:
  // The marks at positions [0, n).
  std::uint64_t prefix(std::size_t n) const {
    std::uint64_t sum = 0;
    for (std::size_t i = n; i > 0; i &= i - 1) sum += tree_[i - 1];
    return sum;
  }
  void add(std::size_t position, int delta) {
    for (std::size_t i = position + 1; i <= tree_.size(); i += i & (~i + 1)) {
      tree_[i - 1] = static_cast<std::uint32_t>(static_cast<std::int64_t>(tree_[i - 1]) + delta);
    }
  }
  // Appends a marked position: node i covers (i - lowbit(i), i].
  void push(std::uint32_t id) {
    const std::size_t i = tree_.size() + 1;
    const std::size_t low = i & (~i + 1);
    tree_.push_back(static_cast<std::uint32_t>(1 + prefix(i - 1) - prefix(i - low)));
    owner_.push_back(id);
    ++live_;
  }

  std::vector<std::uint32_t> tree_;   // Fenwick nodes, node i at tree_[i - 1]
  std::vector<std::uint32_t> owner_;  // the id stored at each position, kNone once stored again
  std::uint64_t live_ = 0;
};

}  // namespace kvreplay
