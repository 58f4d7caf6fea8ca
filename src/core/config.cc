#include "core/config.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/enum_names.h"

namespace kvreplay {

namespace {

// a * b, or nullopt when it overflows 64 bits.
std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

}  // namespace

std::uint32_t dtype_bytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp32: return 4;
    case Dtype::kFp16: return 2;
    case Dtype::kBf16: return 2;
    case Dtype::kFp8: return 1;
  }
  return 0;
}

namespace {

constexpr EnumName<Dtype> kDtypeNames[] = {
    {Dtype::kFp32, "fp32"},
    {Dtype::kFp16, "fp16"},
    {Dtype::kBf16, "bf16"},
    {Dtype::kFp8, "fp8"},
};
static_assert(enum_names_unique(kDtypeNames));

constexpr EnumName<AllocOrder> kAllocOrderNames[] = {
    {AllocOrder::kLifo, "lifo"},
    {AllocOrder::kFifo, "fifo"},
    {AllocOrder::kLowest, "lowest"},
    {AllocOrder::kVllm, "vllm"},
};
static_assert(enum_names_unique(kAllocOrderNames));

}  // namespace

std::string_view to_string(Dtype dtype) {
  return enum_name(kDtypeNames, dtype);
}

std::optional<Dtype> parse_dtype(std::string_view name) {
  return enum_parse(kDtypeNames, name);
}

std::vector<std::string> dtype_names() {
  return enum_names(kDtypeNames);
}

std::string_view to_string(AllocOrder order) {
  return enum_name(kAllocOrderNames, order);
}

std::optional<AllocOrder> parse_alloc_order(std::string_view name) {
  return enum_parse(kAllocOrderNames, name);
}

std::optional<std::string> PagedKvConfig::validate() const {
  if (layers == 0) return "layers must be >= 1";
  if (kv_heads == 0) return "kv_heads must be >= 1";
  if (head_dim == 0) return "head_dim must be >= 1";
  if (dtype_bytes(dtype) == 0) return "dtype is not one of fp32, fp16, bf16, fp8";
  if (page_tokens == 0) return "page_tokens must be >= 1";
  if (pool_blocks == 0) return "pool_blocks must be >= 1";
  if (pool_blocks >= kInvalidBlock) return "pool_blocks must be below 4294967295";
  if (max_seq_tokens == 0) return "max_seq_tokens must be >= 1";
  if (kv_tensors != 1 && kv_tensors != 2) return "kv_tensors must be 1 (MLA) or 2 (K and V)";
  if (block_layers > layers) return "block_layers must be at most layers";
  auto per_token = checked_mul(std::uint64_t{kv_tensors} * layers, kv_heads);
  if (per_token) per_token = checked_mul(*per_token, head_dim);
  if (per_token) per_token = checked_mul(*per_token, dtype_bytes(dtype));
  if (!per_token) return "bytes_per_token overflows 64 bits";
  auto block = checked_mul(*per_token, page_tokens);
  if (!block) return "block_bytes overflows 64 bits";
  if (!checked_mul(*block, pool_blocks)) return "pool bytes overflow 64 bits";
  if (!checked_mul(layers, pages_per_seq())) return "layers * pages_per_seq overflows 64 bits";
  return std::nullopt;
}

std::uint64_t PagedKvConfig::bytes_per_token() const {
  return std::uint64_t{kv_tensors} * layers * kv_heads * head_dim * dtype_bytes(dtype);
}

std::uint64_t PagedKvConfig::block_bytes() const {
  if (block_layers == 0) return bytes_per_token() * page_tokens;
  return bytes_per_token() / layers * block_layers * page_tokens;
}

std::uint64_t PagedKvConfig::pool_bytes() const {
  return block_bytes() * pool_blocks;
}

std::uint32_t PagedKvConfig::pages_per_seq() const {
  if (page_tokens == 0) return 0;
  return max_seq_tokens / page_tokens + (max_seq_tokens % page_tokens != 0 ? 1 : 0);
}

std::uint64_t PagedKvConfig::required_single_sequence_blocks() const {
  return std::uint64_t{layers} * pages_per_seq();
}

Result<std::uint64_t, std::string> parse_memory_size(std::string_view text) {
  using Error = Unexpected<std::string>;
  std::size_t digits_end = 0;
  while (digits_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits_end])) || text[digits_end] == '.')) {
    ++digits_end;
  }
  std::string_view number = text.substr(0, digits_end);
  std::string_view unit = text.substr(digits_end);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (number.empty() || number.front() == '.' || number.back() == '.' ||
      number.find('.') != number.rfind('.')) {
    return Error{
        fmt::format("'{}' is not a size (expected e.g. 80GiB, 512MiB or a byte count)", text)};
  }
  struct Unit {
    std::string_view name;
    std::uint64_t scale;
  };
  constexpr std::array<Unit, 10> kUnits{{{"", 1},
                                         {"B", 1},
                                         {"KiB", 1ull << 10},
                                         {"MiB", 1ull << 20},
                                         {"GiB", 1ull << 30},
                                         {"TiB", 1ull << 40},
                                         {"KB", 1000ull},
                                         {"MB", 1000ull * 1000},
                                         {"GB", 1000ull * 1000 * 1000},
                                         {"TB", 1000ull * 1000 * 1000 * 1000}}};
  std::optional<std::uint64_t> scale;
  for (const Unit& candidate : kUnits) {
    if (candidate.name == unit) scale = candidate.scale;
  }
  if (!scale) {
    return Error{fmt::format(
        "unknown unit '{}' in '{}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", unit, text)};
  }
  std::size_t dot = number.find('.');
  std::string_view whole = number.substr(0, dot);
  std::uint64_t integer = 0;
  auto [ptr, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), integer);
  if (ec != std::errc{} || ptr != whole.data() + whole.size()) {
    return Error{fmt::format("'{}' is too large", text)};
  }
  auto bytes = checked_mul(integer, *scale);
  if (!bytes) return Error{fmt::format("'{}' is too large", text)};
  if (dot != std::string_view::npos) {
    // Up to 9 fraction digits, exact in integers: bytes += floor(0.ddd * scale).
    std::string_view fraction = number.substr(dot + 1);
    std::uint64_t numerator = 0;
    std::uint64_t denominator = 1;
    for (char c : fraction.substr(0, 9)) {
      numerator = numerator * 10 + static_cast<std::uint64_t>(c - '0');
      denominator *= 10;
    }
    // numerator, denominator <= 10^9, so neither product below overflows.
    std::uint64_t part =
        *scale / denominator * numerator + *scale % denominator * numerator / denominator;
    if (*bytes + part < *bytes) return Error{fmt::format("'{}' is too large", text)};
    *bytes += part;
  }
  return *bytes;
}

Result<std::uint32_t, std::string> pool_blocks_for_memory(const PagedKvConfig& config,
                                                          std::uint64_t kv_memory) {
  using Error = Unexpected<std::string>;
  std::uint64_t block = config.block_bytes();
  if (block == 0) return Error{std::string("block size is 0")};
  std::uint64_t blocks = kv_memory / block;
  if (blocks == 0) {
    return Error{fmt::format("{} bytes of KV memory hold no block of {} bytes", kv_memory, block)};
  }
  if (blocks >= kInvalidBlock) {
    return Error{fmt::format("{} bytes of KV memory make {} blocks, more than 4294967294",
                             kv_memory, blocks)};
  }
  return static_cast<std::uint32_t>(blocks);
}

}  // namespace kvreplay
