// The KV arena: its shape for a pool configuration, its host-memory storage, and
// the size bound that keeps a replay from asking for more memory than is sane.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"
#include "core/result.h"
#include "dataplane/kernel_params.h"

namespace kvreplay {

// Largest arena a backend allocates unless told otherwise (--arena-limit).
inline constexpr std::uint64_t kDefaultArenaLimit = std::uint64_t{4} << 30;

ElemType elem_type(Dtype dtype);

// The arena of `config` (data == nullptr). REQUIRES: config.is_valid().
// bytes() == config.pool_bytes().
ArenaView arena_shape(const PagedKvConfig& config);

// Why an arena of `shape` may not be allocated under `limit` bytes, naming the
// options that size it; nullopt when it may. `backend` names the memory ("cpu").
std::optional<std::string> arena_size_problem(const ArenaView& shape, std::uint64_t limit,
                                              std::string_view backend);

// "12.3 MiB", "512 B".
std::string size_text(std::uint64_t bytes);

// A zero-filled arena in host memory (calloc, so untouched pages cost nothing).
class HostArena {
 public:
  // Error: the allocation failed (the message says how much was asked for).
  static Result<HostArena, std::string> allocate(const ArenaView& shape);

  ArenaView view() const;
  std::uint8_t* data() const { return data_.get(); }
  std::uint64_t bytes() const { return shape_.bytes(); }

 private:
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  HostArena(const ArenaView& shape, std::uint8_t* data) : shape_(shape), data_(data) {}

  ArenaView shape_;
  std::unique_ptr<std::uint8_t, Free> data_;
};

}  // namespace kvreplay
