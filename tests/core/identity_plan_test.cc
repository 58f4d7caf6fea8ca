// The identity block-table plan, and the byte compatibility it promises: with
// identity pages, a paged arena addressed [layer][page] is a dense
// [layer][token][K|V][kv_heads][head_dim] arena.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/identity_plan.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

// 4 layers, 40 tokens in 16-token pages -> 3 pages per layer, 12 entries.
PagedKvConfig small_config() {
  return PagedKvConfig{.layers = 4,
                       .kv_heads = 2,
                       .head_dim = 8,
                       .dtype = Dtype::kFp16,
                       .page_tokens = 16,
                       .pool_blocks = 64,
                       .max_seq_tokens = 40};
}

TEST_CASE("identity plan: fill_identity_block_table writes 0..n-1 for layers * pages_per_seq") {
  const PagedKvConfig config = small_config();
  std::vector<BlockId> out(15, 777);
  const auto written = fill_identity_block_table(config, out);
  REQUIRE(written.ok());
  CHECK(written.value() == 12u);
  for (std::size_t i = 0; i < 12; ++i) CHECK(out[i] == i);
  // Past n the buffer is untouched.
  CHECK(out[12] == 777u);
  CHECK(out[13] == 777u);
  CHECK(out[14] == 777u);
}

TEST_CASE("identity plan: an exactly sized buffer is enough") {
  PagedKvConfig config = small_config();
  config.layers = 1;
  config.max_seq_tokens = 1;
  std::vector<BlockId> out(1, 777);
  const auto written = fill_identity_block_table(config, out);
  REQUIRE(written.ok());
  CHECK(written.value() == 1u);
  CHECK(out[0] == 0u);
}

TEST_CASE("identity plan: a short buffer is kOutputTooSmall and left untouched") {
  const PagedKvConfig config = small_config();
  for (std::size_t size : {0u, 1u, 11u}) {
    INFO("buffer of " << size);
    std::vector<BlockId> out(size, 777);
    const auto written = fill_identity_block_table(config, out);
    REQUIRE_FALSE(written.ok());
    CHECK(written.error() == CoreError::kOutputTooSmall);
    CHECK(std::all_of(out.begin(), out.end(), [](BlockId b) { return b == 777; }));
  }
}

TEST_CASE("identity plan: an invalid config is kInvalidConfig") {
  PagedKvConfig config = small_config();
  config.layers = 0;
  std::vector<BlockId> out(64, 777);
  const auto written = fill_identity_block_table(config, out);
  REQUIRE_FALSE(written.ok());
  CHECK(written.error() == CoreError::kInvalidConfig);
  CHECK(out[0] == 777u);
  const auto plan = GpuBlockTablePlan::identity(config);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error() == CoreError::kInvalidConfig);

  config = small_config();
  config.page_tokens = 0;
  const auto no_pages = GpuBlockTablePlan::identity(config);
  REQUIRE_FALSE(no_pages.ok());
  CHECK(no_pages.error() == CoreError::kInvalidConfig);
}

TEST_CASE("identity plan: a plan of 2^32-1 entries or more is kOutputTooSmall") {
  // 2^16 layers * 2^17 one-token pages = 2^33 entries; nothing is allocated.
  PagedKvConfig config = small_config();
  config.layers = 1u << 16;
  config.kv_heads = 1;
  config.head_dim = 1;
  config.page_tokens = 1;
  config.max_seq_tokens = 1u << 17;
  REQUIRE(config.is_valid());
  REQUIRE(config.required_single_sequence_blocks() == 1ull << 33);
  std::vector<BlockId> out(4, 777);
  const auto written = fill_identity_block_table(config, out);
  REQUIRE_FALSE(written.ok());
  CHECK(written.error() == CoreError::kOutputTooSmall);
  const auto plan = GpuBlockTablePlan::identity(config);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error() == CoreError::kOutputTooSmall);
}

TEST_CASE("identity plan: GpuBlockTablePlan::identity holds entry i = i for every layer and page") {
  const PagedKvConfig config = small_config();
  const auto plan = GpuBlockTablePlan::identity(config);
  REQUIRE(plan.ok());
  CHECK(plan.value().config() == config);
  CHECK(plan.value().pages_per_layer() == 3u);
  const auto entries = plan.value().entries();
  REQUIRE(entries.size() == 12u);
  for (std::uint32_t layer = 0; layer < 4; ++layer) {
    for (std::uint32_t page = 0; page < 3; ++page) {
      CHECK(entries[layer * 3 + page] == layer * 3 + page);
    }
  }
}

// Byte compatibility. A paged arena of layers * pages_per_seq blocks, each
// [page_tokens][K|V][kv_heads][head_dim], addressed through a plan, against a
// dense [layer][token][K|V][kv_heads][head_dim] arena of pages_per_seq *
// page_tokens tokens per layer. Every element gets a distinct byte pattern.
struct Geometry {
  std::uint32_t layers, kv_heads, head_dim, elem_bytes, page_tokens, pages;
  std::uint64_t token_bytes() const { return 2ull * kv_heads * head_dim * elem_bytes; }  // K|V
  std::uint64_t block_bytes() const { return token_bytes() * page_tokens; }
  std::uint64_t tokens_per_layer() const { return std::uint64_t{pages} * page_tokens; }
};

std::uint8_t pattern(std::uint32_t layer, std::uint32_t token, std::uint32_t kv, std::uint32_t head,
                     std::uint32_t dim, std::uint32_t byte) {
  return static_cast<std::uint8_t>(layer * 131 + token * 31 + kv * 17 + head * 7 + dim * 3 + byte +
                                   1);
}

// Writes every element of every token through the plan; returns the arena.
// Requires the plan to hit every byte of the arena exactly once.
std::vector<std::uint8_t> write_paged(const Geometry& g, std::span<const BlockId> plan) {
  std::vector<std::uint8_t> arena(g.layers * g.pages * g.block_bytes(), 0);
  std::vector<std::uint8_t> writes(arena.size(), 0);
  for (std::uint32_t layer = 0; layer < g.layers; ++layer) {
    for (std::uint32_t token = 0; token < g.tokens_per_layer(); ++token) {
      const BlockId block = plan[layer * g.pages + token / g.page_tokens];
      const std::uint64_t base =
          block * g.block_bytes() + (token % g.page_tokens) * g.token_bytes();
      for (std::uint32_t kv = 0; kv < 2; ++kv) {
        for (std::uint32_t head = 0; head < g.kv_heads; ++head) {
          for (std::uint32_t dim = 0; dim < g.head_dim; ++dim) {
            for (std::uint32_t byte = 0; byte < g.elem_bytes; ++byte) {
              const std::uint64_t offset =
                  base + ((kv * g.kv_heads + head) * g.head_dim + dim) * g.elem_bytes + byte;
              arena.at(offset) = pattern(layer, token, kv, head, dim, byte);
              ++writes.at(offset);
            }
          }
        }
      }
    }
  }
  REQUIRE(std::all_of(writes.begin(), writes.end(), [](std::uint8_t n) { return n == 1; }));
  return arena;
}

// The same elements written at their dense offsets, computed independently.
std::vector<std::uint8_t> write_dense(const Geometry& g) {
  std::vector<std::uint8_t> arena(g.layers * g.tokens_per_layer() * g.token_bytes(), 0);
  std::size_t offset = 0;  // walks [layer][token][K|V][head][dim][byte] in order
  for (std::uint32_t layer = 0; layer < g.layers; ++layer) {
    for (std::uint32_t token = 0; token < g.tokens_per_layer(); ++token) {
      for (std::uint32_t kv = 0; kv < 2; ++kv) {
        for (std::uint32_t head = 0; head < g.kv_heads; ++head) {
          for (std::uint32_t dim = 0; dim < g.head_dim; ++dim) {
            for (std::uint32_t byte = 0; byte < g.elem_bytes; ++byte) {
              arena.at(offset++) = pattern(layer, token, kv, head, dim, byte);
            }
          }
        }
      }
    }
  }
  REQUIRE(offset == arena.size());
  return arena;
}

TEST_CASE("identity plan: a paged arena addressed through the identity plan is the dense arena") {
  for (const PagedKvConfig config :
       {PagedKvConfig{.layers = 3,
       .kv_heads = 2,
       .head_dim = 4,
       .dtype = Dtype::kFp16,
       .page_tokens = 4,
       .pool_blocks = 9,
       .max_seq_tokens = 12},
        PagedKvConfig{.layers = 2,
        .kv_heads = 1,
        .head_dim = 3,
        .dtype = Dtype::kFp32,
        .page_tokens = 1,
        .pool_blocks = 10,
        .max_seq_tokens = 5},
        PagedKvConfig{.layers = 2,
        .kv_heads = 3,
        .head_dim = 2,
        .dtype = Dtype::kFp8,
        .page_tokens = 3,
        .pool_blocks = 6,
        .max_seq_tokens = 7}}) {  // 7 tokens in 3 pages: the last page padded
    INFO(config.layers << " layers, page_tokens " << config.page_tokens);
    const auto plan = GpuBlockTablePlan::identity(config);
    REQUIRE(plan.ok());
    const Geometry g{config.layers,      config.kv_heads,
                     config.head_dim,    dtype_bytes(config.dtype),
                     config.page_tokens, config.pages_per_seq()};
    // The per-layer token size times the layers is the config's bytes_per_token.
    CHECK(g.token_bytes() * config.layers == config.bytes_per_token());
    const std::vector<std::uint8_t> paged = write_paged(g, plan.value().entries());
    const std::vector<std::uint8_t> dense = write_dense(g);
    REQUIRE(paged.size() == dense.size());
    CHECK(paged == dense);
  }
}

TEST_CASE("identity plan: token t of layer l lands at the dense byte offset") {
  const PagedKvConfig config{.layers = 3,
                             .kv_heads = 2,
                             .head_dim = 4,
                             .dtype = Dtype::kBf16,
                             .page_tokens = 4,
                             .pool_blocks = 9,
                             .max_seq_tokens = 12};
  const auto plan = GpuBlockTablePlan::identity(config);
  REQUIRE(plan.ok());
  const std::uint64_t token_bytes = 2 * 2 * 4 * 2;  // K|V * heads * dim * bf16
  const std::uint64_t block_bytes = token_bytes * 4;
  for (std::uint32_t layer = 0; layer < 3; ++layer) {
    for (std::uint32_t token = 0; token < 12; ++token) {
      const BlockId block = plan.value().entries()[layer * 3 + token / 4];
      const std::uint64_t paged = block * block_bytes + (token % 4) * token_bytes;
      const std::uint64_t dense = (std::uint64_t{layer} * 12 + token) * token_bytes;
      CHECK(paged == dense);
    }
  }
}

TEST_CASE("identity plan: a permuted plan is not byte compatible (the comparison has teeth)") {
  const PagedKvConfig config{.layers = 2,
                             .kv_heads = 1,
                             .head_dim = 2,
                             .dtype = Dtype::kFp16,
                             .page_tokens = 2,
                             .pool_blocks = 4,
                             .max_seq_tokens = 4};
  const auto plan = GpuBlockTablePlan::identity(config);
  REQUIRE(plan.ok());
  std::vector<BlockId> swapped(plan.value().entries().begin(), plan.value().entries().end());
  std::swap(swapped[0], swapped[1]);
  const Geometry g{2, 1, 2, 2, 2, 2};
  CHECK(write_paged(g, plan.value().entries()) == write_dense(g));
  CHECK_FALSE(write_paged(g, swapped) == write_dense(g));
}

}  // namespace
}  // namespace kvreplay
