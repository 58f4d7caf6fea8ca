#include "dataplane/arena.h"

#include <fmt/format.h>

#include <limits>

namespace kvreplay {

static_assert(static_cast<int>(ElemType::kFp32) == static_cast<int>(Dtype::kFp32));
static_assert(static_cast<int>(ElemType::kFp16) == static_cast<int>(Dtype::kFp16));
static_assert(static_cast<int>(ElemType::kBf16) == static_cast<int>(Dtype::kBf16));
static_assert(static_cast<int>(ElemType::kFp8) == static_cast<int>(Dtype::kFp8));

ElemType elem_type(Dtype dtype) {
  return static_cast<ElemType>(dtype);
}

ArenaView arena_shape(const PagedKvConfig& config) {
  ArenaView shape;
  shape.layers = config.layers;
  shape.pool_blocks = config.pool_blocks;
  shape.page_tokens = config.page_tokens;
  shape.kv_heads = config.kv_heads;
  shape.head_dim = config.head_dim;
  shape.kv_tensors = config.kv_tensors;
  shape.dtype = elem_type(config.dtype);
  shape.elem_bytes = elem_bytes(shape.dtype);
  return shape;
}

std::string size_text(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::optional<std::string> arena_size_problem(const ArenaView& shape, std::uint64_t limit,
                                              std::string_view backend) {
  // PagedKvConfig::validate() has already ruled out 64-bit overflow.
  const std::uint64_t bytes = shape.bytes();
  if (bytes <= limit && bytes <= std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return fmt::format(
      "the {} arena would need {} ({} blocks of {}), above --arena-limit {}; "
      "lower --kv-memory / --pool-blocks or raise --arena-limit",
      backend, size_text(bytes), shape.pool_blocks,
      size_text(shape.layer_block_bytes() * shape.layers), size_text(limit));
}

Result<HostArena, std::string> HostArena::allocate(const ArenaView& shape) {
  const std::uint64_t bytes = shape.bytes();
  void* data = std::calloc(static_cast<std::size_t>(bytes == 0 ? 1 : bytes), 1);
  if (data == nullptr) {
    return Unexpected{fmt::format("cannot allocate the {} host arena", size_text(bytes))};
  }
  return HostArena(shape, static_cast<std::uint8_t*>(data));
}

ArenaView HostArena::view() const {
  ArenaView view = shape_;
  view.data = data_.get();
  return view;
}

}  // namespace kvreplay
