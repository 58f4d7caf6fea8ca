// Error values of the core (pool, tables, plans). Printable with fmt.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

#include "core/result.h"

namespace kvreplay {

enum class CoreError : std::uint8_t {
  kPoolExhausted,     // no free block left
  kBlockOutOfRange,   // block id >= pool size (or kInvalidBlock where a block is needed)
  kBlockNotLive,      // block has refcount 0 (stale page, double free)
  kRefcountOverflow,  // retain would pass the pool's refcount limit
  kInvalidConfig,     // PagedKvConfig::is_valid() is false
  kOutputTooSmall,    // caller's buffer cannot hold the result
  kPageOutOfRange,    // logical page >= table capacity
  kTargetNotEmpty,    // fork/prefix target already holds pages
  kSizeMismatch,      // tables of different capacity or page size
  kLengthExceeded,    // append would pass max_seq_tokens
};

std::string_view to_string(CoreError error);

template <class T>
using CoreResult = Result<T, CoreError>;
using CoreStatus = Result<void, CoreError>;

}  // namespace kvreplay

template <>
struct fmt::formatter<kvreplay::CoreError> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(kvreplay::CoreError error, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(kvreplay::to_string(error), ctx);
  }
};
