// HashedPages: the keys of a request's prompt pages inside its trace's hash
// blocks, walked page by page instead of divided for each (the generic and
// vllm engines cache a chain's pages with it, a hash block's at once).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "engine/paged/prefix_cache.h"
#include "formats/requests/request.h"

namespace kvreplay {

// The trace's hash block of consecutive pages from a given one on, walked
// instead of divided for each page: while hashed(), the page's vllm_key is
// key(), as it is page_key's (the same key: checked in debug builds).
class HashedPages {
 public:
  HashedPages(const Request& request, std::uint32_t page_tokens, std::uint32_t page)
      : hash_ids_(request.hash_ids),
        page_tokens_(page_tokens),
        hash_block_(request.hash_block_tokens),
        hashed_end_(std::min<std::uint64_t>(request.prompt, hash_ids_.size() * hash_block_)),
        end_((std::uint64_t{page} + 1) * page_tokens) {
    if (!hash_ids_.empty()) k_ = (end_ - 1) / hash_block_;
    k_start_ = k_ * hash_block_;
    k_end_ = k_start_ + hash_block_;
    if (hashed()) chain_ = hash_ids_[k_];
  }
  // Whether the page is a prompt page inside the trace's hash blocks.
  bool hashed() const { return end_ <= hashed_end_; }
  // REQUIRES hashed().
  PageKey key() const { return PageKey{chain_, static_cast<std::uint32_t>(end_ - k_start_)}; }
  void next() {
    end_ += page_tokens_;
    if (end_ > k_end_) advance();  // past the hash block: once in hash_block / page_tokens pages
  }
  // REQUIRES hashed(). The pages from this one on that end in its hash block
  // (and in the prompt): their keys share key()'s chain, their offsets step
  // by the page size.
  std::uint64_t pages_in_block() const {
    return (std::min(k_end_, hashed_end_) - end_) / page_tokens_ + 1;
  }
  // The key `pages` pages on, REQUIRES pages < pages_in_block().
  PageKey key_after(std::uint64_t pages) const {
    return PageKey{chain_, static_cast<std::uint32_t>(end_ + pages * page_tokens_ - k_start_)};
  }
  // next(), `pages` times.
  void skip(std::uint64_t pages) {
    end_ += pages * page_tokens_;
    if (end_ > k_end_) advance();
  }

 private:
  void advance() {
    while (k_end_ < end_ && end_ <= hashed_end_) {
      ++k_;
      k_start_ = k_end_;
      k_end_ += hash_block_;
    }
    if (hashed()) chain_ = hash_ids_[k_];
  }

  std::span<const std::uint64_t> hash_ids_;
  std::uint64_t page_tokens_;
  std::uint64_t hash_block_;
  std::uint64_t hashed_end_;
  std::uint64_t end_;          // the page's end, in tokens
  std::uint64_t k_ = 0;        // hash block holding the page's last token
  std::uint64_t k_start_ = 0;  // its first token
  std::uint64_t k_end_ = 0;    // its end: k_start_ + hash_block_
  std::uint64_t chain_ = 0;    // while hashed(): hash_ids_[k_]
};

}  // namespace kvreplay
