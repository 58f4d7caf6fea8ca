// Differential tests of the reference kernels: a paged arena (identity or
// fragmented tables) against a dense [layer][token][K|V] arena, byte for byte;
// attention against an fp64 reference. Odd sizes throughout: pages of 1, 3, 7
// and 17 tokens, batches of 1 to 91, head_dim 1 to 64.
#include "dataplane/cpu_kernels.h"

#include <catch2/catch.hpp>

#include <numeric>
#include <random>

#include "core/identity_plan.h"
#include "dataplane/arena.h"
#include "dataplane/paged_batch.h"
#include "support.h"

using namespace kvreplay;
using kvreplay::test::geometry;

namespace {

constexpr std::uint32_t kPageSizes[] = {1, 3, 7, 17};

HostArena make_arena(const PagedKvConfig& config) {
  auto arena = HostArena::allocate(arena_shape(config));
  REQUIRE(arena);
  return std::move(arena).value();
}

// Sequences with fragmented tables over a shuffled pool, written round by round
// (one append launch per round, like decode steps), with dense references.
struct Batch {
  PagedKvConfig config;
  std::vector<std::uint32_t> lengths;
  std::vector<std::vector<BlockId>> tables;
  std::vector<std::vector<std::uint8_t>> dense;  // [seq][layers][length][token_bytes]
};

Batch make_batch(std::mt19937_64& rng, std::uint32_t batch, std::uint32_t page_tokens,
                 std::uint32_t max_length, std::uint32_t layers, std::uint32_t kv_heads,
                 std::uint32_t head_dim, Dtype dtype, HostArena* arena_out,
                 std::uint32_t kv_tensors = 2) {
  Batch out;
  std::uint32_t total_pages = 0;
  for (std::uint32_t i = 0; i < batch; ++i) {
    out.lengths.push_back(static_cast<std::uint32_t>(rng() % (max_length + 1)));
    total_pages += (out.lengths.back() + page_tokens - 1) / page_tokens;
  }
  out.config = geometry(layers, kv_heads, head_dim, dtype, page_tokens, total_pages + 3, 1 << 16);
  out.config.kv_tensors = kv_tensors;
  std::vector<BlockId> blocks(out.config.pool_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::size_t next = 0;
  for (std::uint32_t i = 0; i < batch; ++i) {
    const std::uint32_t pages = (out.lengths[i] + page_tokens - 1) / page_tokens;
    out.tables.emplace_back(blocks.begin() + static_cast<std::ptrdiff_t>(next),
                            blocks.begin() + static_cast<std::ptrdiff_t>(next + pages));
    next += pages;
  }
  *arena_out = make_arena(out.config);
  const ArenaView shape = arena_out->view();
  const std::uint64_t token_bytes = shape.token_bytes();
  for (std::uint32_t i = 0; i < batch; ++i) {
    out.dense.emplace_back(std::uint64_t{layers} * out.lengths[i] * token_bytes);
  }
  std::vector<std::uint32_t> written(batch, 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<std::int64_t> slots;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> rows;  // (seq, position)
    for (std::uint32_t i = 0; i < batch; ++i) {
      const std::uint32_t take = std::min<std::uint32_t>(out.lengths[i] - written[i],
                                                         1 + static_cast<std::uint32_t>(rng() % 5));
      for (std::uint32_t p = written[i]; p < written[i] + take; ++p) {
        slots.push_back(std::int64_t{out.tables[i][p / page_tokens]} * page_tokens +
                        p % page_tokens);
        rows.push_back({i, p});
      }
      written[i] += take;
      more = more || written[i] < out.lengths[i];
    }
    if (rows.empty()) continue;
    // A padding row (slot -1) must be skipped.
    slots.push_back(-1);
    rows.push_back({0, 0});
    std::vector<std::uint8_t> staging(std::uint64_t{layers} * rows.size() * token_bytes, 0xAB);
    for (std::uint32_t layer = 0; layer < layers; ++layer) {
      for (std::size_t r = 0; r + 1 < rows.size(); ++r) {
        content::fill_token_row(staging.data() + (layer * rows.size() + r) * token_bytes,
                                shape.dtype, rows[r].first + 1, rows[r].second, layer, kv_heads,
                                head_dim, kv_tensors);
      }
    }
    cpu_append(shape,
               AppendParams{staging.data(), slots.data(), static_cast<std::uint32_t>(rows.size())});
    for (std::size_t r = 0; r + 1 < rows.size(); ++r) {
      test::write_dense(out.dense[rows[r].first].data(), shape, out.lengths[rows[r].first],
                        rows[r].first + 1, rows[r].second);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("identity tables make the paged arena a dense layer-by-token-by-K/V arena", "[kernels]") {
  std::mt19937_64 rng(11);
  const std::uint32_t kShapes[][3] = {{1, 1, 1}, {2, 3, 5}, {3, 2, 8}};
  for (std::uint32_t page_tokens : kPageSizes) {
    for (Dtype dtype : test::kAllDtypes) {
      for (const auto& s : kShapes) {
        CAPTURE(page_tokens, to_string(dtype), s[0], s[1], s[2]);
        const std::uint32_t length = 50;
        PagedKvConfig config = geometry(s[0], s[1], s[2], dtype, page_tokens, 1, length);
        config.pool_blocks = config.pages_per_seq();
        auto plan = GpuBlockTablePlan::identity(config);
        REQUIRE(plan);
        const std::uint32_t pages = plan.value().pages_per_layer();
        // Entry [layer][page] is the flat layer-block layer * pages + page: the
        // arena's [layers][pool_blocks] with pool_blocks == pages.
        for (std::uint32_t layer = 0; layer < config.layers; ++layer) {
          for (std::uint32_t page = 0; page < pages; ++page) {
            REQUIRE(plan.value().entries()[layer * pages + page] == layer * pages + page);
          }
        }
        std::span<const BlockId> table = plan.value().entries().first(pages);
        HostArena arena = make_arena(config);
        const ArenaView shape = arena.view();
        const std::uint64_t capacity = std::uint64_t{pages} * page_tokens;
        std::vector<std::uint8_t> dense(shape.layers * capacity * shape.token_bytes(), 0);
        REQUIRE(dense.size() == shape.bytes());
        std::uint32_t position = 0;
        for (std::uint32_t chunk = 0; position < length; ++chunk) {
          const std::uint32_t n =
              std::min<std::uint32_t>(length - position, 1 + static_cast<std::uint32_t>(rng() % 9));
          const std::uint32_t writer = 1 + chunk % 3;
          std::vector<std::int64_t> slots;
          std::vector<std::uint8_t> staging(shape.layers * n * shape.token_bytes());
          for (std::uint32_t t = 0; t < n; ++t) {
            const std::uint32_t p = position + t;
            slots.push_back(std::int64_t{table[p / page_tokens]} * page_tokens + p % page_tokens);
            for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
              content::fill_token_row(staging.data() + (layer * n + t) * shape.token_bytes(),
                                      shape.dtype, writer, p, layer, shape.kv_heads,
                                      shape.head_dim);
            }
            test::write_dense(dense.data(), shape, capacity, writer, p);
          }
          cpu_append(shape, AppendParams{staging.data(), slots.data(), n});
          position += n;
        }
        REQUIRE(test::bytes_compare(arena.data(), dense.data(), dense.size()) == 0);

        // Gathering the sequence back gives the dense arena's first `length` tokens.
        PagedBatch batch;
        batch.add(table, page_tokens, 0, length);
        std::vector<std::uint8_t> gathered(shape.layers * length * shape.token_bytes());
        cpu_gather(shape, batch.view(), GatherParams{gathered.data(), length});
        for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
          REQUIRE(test::bytes_compare(gathered.data() + layer * length * shape.token_bytes(),
                                      dense.data() + layer * capacity * shape.token_bytes(),
                                      length * shape.token_bytes()) == 0);
        }
      }
    }
  }
}

TEST_CASE("gather through fragmented tables equals the dense reference", "[kernels]") {
  std::mt19937_64 rng(5);
  const std::uint32_t kBatches[] = {1, 2, 7, 33, 91};
  std::size_t round = 0;
  for (std::uint32_t page_tokens : kPageSizes) {
    for (std::uint32_t batch_size : kBatches) {
      const Dtype dtype = test::kAllDtypes[round++ % 4];
      CAPTURE(page_tokens, batch_size, to_string(dtype));
      HostArena arena = make_arena(geometry(1, 1, 1, Dtype::kFp32, 1, 1));
      Batch batch = make_batch(rng, batch_size, page_tokens, 40, 2, 2, 3, dtype, &arena);
      const ArenaView shape = arena.view();
      const std::uint64_t token_bytes = shape.token_bytes();
      // Whole sequences.
      PagedBatch whole;
      for (std::uint32_t i = 0; i < batch_size; ++i) {
        whole.add(batch.tables[i], page_tokens, 0, batch.lengths[i]);
      }
      std::vector<std::uint8_t> out(shape.layers * whole.rows() * token_bytes);
      cpu_gather(shape, whole.view(), GatherParams{out.data(), whole.rows()});
      for (std::uint32_t i = 0; i < batch_size; ++i) {
        for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
          REQUIRE(test::bytes_compare(
                      out.data() + (layer * whole.rows() + whole.out_indptr()[i]) * token_bytes,
                      batch.dense[i].data() + layer * batch.lengths[i] * token_bytes,
                      batch.lengths[i] * token_bytes) == 0);
        }
      }
      // Sub-ranges starting mid-page.
      PagedBatch parts;
      std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
      for (std::uint32_t i = 0; i < batch_size; ++i) {
        const std::uint32_t begin =
            batch.lengths[i] == 0 ? 0 : static_cast<std::uint32_t>(rng() % batch.lengths[i]);
        const std::uint32_t end =
            begin + static_cast<std::uint32_t>(rng() % (batch.lengths[i] - begin + 1));
        parts.add(batch.tables[i], page_tokens, begin, end);
        ranges.push_back({begin, end});
      }
      std::vector<std::uint8_t> part_out(shape.layers * parts.rows() * token_bytes);
      cpu_gather(shape, parts.view(), GatherParams{part_out.data(), parts.rows()});
      for (std::uint32_t i = 0; i < batch_size; ++i) {
        const auto [begin, end] = ranges[i];
        for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
          REQUIRE(
              test::bytes_compare(
                  part_out.data() + (layer * parts.rows() + parts.out_indptr()[i]) * token_bytes,
                  batch.dense[i].data() + (layer * batch.lengths[i] + begin) * token_bytes,
                  (end - begin) * token_bytes) == 0);
        }
      }
    }
  }
}

TEST_CASE("an MLA arena keeps one latent a token, and gathers like the dense reference",
          "[kernels]") {
  // DeepSeek-V3's latent shape scaled down: kv_lora_rank + qk_rope_head_dim
  // values as one "head" of 9 (odd, so no wide vector divides the row), no V.
  std::mt19937_64 rng(11);
  for (std::uint32_t page_tokens : kPageSizes) {
    const Dtype dtype = test::kAllDtypes[page_tokens % 4];
    CAPTURE(page_tokens, to_string(dtype));
    HostArena arena = make_arena(geometry(1, 1, 1, Dtype::kFp32, 1, 1));
    Batch batch = make_batch(rng, 7, page_tokens, 30, 3, 1, 9, dtype, &arena, /*kv_tensors=*/1);
    const ArenaView shape = arena.view();
    CHECK(shape.kv_tensors == 1u);
    CHECK(shape.token_bytes() == 9u * elem_bytes(shape.dtype));  // one row, not a K and a V
    CHECK(shape.bytes() == batch.config.pool_bytes());
    CHECK(batch.config.bytes_per_token() == 3u * 9u * dtype_bytes(dtype));
    PagedBatch whole;
    for (std::uint32_t i = 0; i < batch.tables.size(); ++i) {
      whole.add(batch.tables[i], page_tokens, 0, batch.lengths[i]);
    }
    std::vector<std::uint8_t> out(shape.layers * whole.rows() * shape.token_bytes());
    cpu_gather(shape, whole.view(), GatherParams{out.data(), whole.rows()});
    for (std::uint32_t i = 0; i < batch.tables.size(); ++i) {
      for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
        REQUIRE(
            test::bytes_compare(
                out.data() + (layer * whole.rows() + whole.out_indptr()[i]) * shape.token_bytes(),
                batch.dense[i].data() + layer * batch.lengths[i] * shape.token_bytes(),
                batch.lengths[i] * shape.token_bytes()) == 0);
      }
    }
    // The latent row is the K row of the same token: a K+V writer fills the
    // same first bytes, then a V row the latent arena has no room for.
    std::vector<std::uint8_t> latent(shape.token_bytes()), kv(2 * shape.token_bytes());
    content::fill_token_row(latent.data(), shape.dtype, 3, 5, 1, 1, 9, 1);
    content::fill_token_row(kv.data(), shape.dtype, 3, 5, 1, 1, 9, 2);
    CHECK(test::bytes_compare(latent.data(), kv.data(), latent.size()) == 0);
    CHECK(test::bytes_compare(latent.data(), kv.data() + latent.size(), latent.size()) != 0);
  }
}

TEST_CASE("copy_blocks copies whole blocks in every layer", "[kernels]") {
  std::mt19937_64 rng(3);
  for (std::uint32_t page_tokens : kPageSizes) {
    const PagedKvConfig config = geometry(3, 2, 5, Dtype::kFp16, page_tokens, 40);
    HostArena arena = make_arena(config);
    const ArenaView shape = arena.view();
    for (std::uint64_t i = 0; i < shape.bytes(); ++i)
      arena.data()[i] = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> expected(arena.data(), arena.data() + shape.bytes());
    std::vector<BlockId> blocks(40);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<std::uint32_t> pairs;
    for (std::uint32_t c = 0; c < 13; ++c) {
      pairs.push_back(blocks[c]);       // sources: the first 13 (never destinations)
      pairs.push_back(blocks[20 + c]);  // destinations: distinct
    }
    const std::uint64_t block_bytes = shape.layer_block_bytes();
    for (std::size_t c = 0; c < pairs.size(); c += 2) {
      for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
        std::memcpy(expected.data() + layer * shape.layer_bytes() + pairs[c + 1] * block_bytes,
                    expected.data() + layer * shape.layer_bytes() + pairs[c] * block_bytes,
                    block_bytes);
      }
    }
    cpu_copy_blocks(shape, CopyBlocksParams{pairs.data(), 13});
    REQUIRE(test::bytes_compare(arena.data(), expected.data(), expected.size()) == 0);
  }
}

TEST_CASE("paged decode attention matches an fp64 reference within dtype tolerance", "[kernels]") {
  std::mt19937_64 rng(17);
  struct Case {
    std::uint32_t batch, page_tokens, group, kv_heads, head_dim, max_length;
  };
  const Case kCases[] = {{1, 1, 1, 1, 1, 30},   {1, 17, 4, 2, 64, 1500}, {7, 3, 7, 1, 5, 300},
                         {7, 7, 4, 2, 16, 200}, {33, 17, 1, 3, 8, 100},  {91, 1, 2, 1, 3, 40},
                         {91, 7, 4, 2, 4, 60}};
  std::size_t round = 0;
  for (const Case& c : kCases) {
    for (Dtype dtype : test::kAllDtypes) {
      CAPTURE(c.batch, c.page_tokens, c.group, c.kv_heads, c.head_dim, to_string(dtype));
      HostArena arena = make_arena(geometry(1, 1, 1, Dtype::kFp32, 1, 1));
      Batch batch = make_batch(rng, c.batch, c.page_tokens, c.max_length, 2, c.kv_heads, c.head_dim,
                               dtype, &arena);
      const ArenaView shape = arena.view();
      const std::uint32_t q_heads = c.kv_heads * c.group;
      PagedBatch paged;
      for (std::uint32_t i = 0; i < c.batch; ++i)
        paged.add(batch.tables[i], c.page_tokens, 0, batch.lengths[i]);
      std::vector<float> q(std::size_t{c.batch} * q_heads * c.head_dim), out(q.size());
      for (std::size_t i = 0; i < q.size(); ++i)
        q[i] = content::query_value(round, static_cast<std::uint32_t>(i), 0, 0, 0);
      ++round;
      const std::uint32_t layer = 1;
      cpu_attention(shape, paged.view(), AttentionParams{q.data(), out.data(), layer, c.group});
      std::vector<double> ref(std::size_t{q_heads} * c.head_dim);
      double worst = 0.0;
      for (std::uint32_t i = 0; i < c.batch; ++i) {
        const std::size_t at = std::size_t{i} * q_heads * c.head_dim;
        test::reference_attention(shape, batch.dense[i].data(), batch.lengths[i], batch.lengths[i],
                                  layer, c.group, q.data() + at, ref.data());
        worst = std::max(worst, test::max_relative_error(out.data() + at, ref.data(), ref.size()));
      }
      CHECK(worst <= test::attention_tolerance(shape.dtype));
      CHECK(worst <= 1e-4);  // fp32 accumulation of exactly decoded inputs, whatever the dtype
    }
  }
}

TEST_CASE("the attention tolerance catches a dropped token", "[kernels]") {
  std::mt19937_64 rng(23);
  HostArena arena = make_arena(geometry(1, 1, 1, Dtype::kFp32, 1, 1));
  Batch batch = make_batch(rng, 1, 3, 16, 1, 2, 64, Dtype::kFp32, &arena);
  while (batch.lengths[0] < 8) batch = make_batch(rng, 1, 3, 16, 1, 2, 64, Dtype::kFp32, &arena);
  const ArenaView shape = arena.view();
  PagedBatch paged;
  paged.add(batch.tables[0], 3, 0, batch.lengths[0]);
  std::vector<float> q(2 * 4 * 64), out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = content::query_value(1, static_cast<std::uint32_t>(i), 0, 0, 0);
  cpu_attention(shape, paged.view(), AttentionParams{q.data(), out.data(), 0, 4});
  std::vector<double> ref(q.size());
  test::reference_attention(shape, batch.dense[0].data(), batch.lengths[0], batch.lengths[0] - 1, 0,
                            4, q.data(), ref.data());
  CHECK(test::max_relative_error(out.data(), ref.data(), ref.size()) >
        test::attention_tolerance(ElemType::kFp32));
}

TEST_CASE("attention on paged and identity tables is bit-identical on the CPU", "[kernels]") {
  std::mt19937_64 rng(29);
  HostArena paged_arena = make_arena(geometry(1, 1, 1, Dtype::kFp32, 1, 1));
  Batch batch = make_batch(rng, 9, 7, 90, 1, 2, 8, Dtype::kBf16, &paged_arena);
  // The same contents, laid out with each sequence's pages contiguous.
  HostArena identity_arena = make_arena(batch.config);
  const ArenaView shape = identity_arena.view();
  PagedBatch paged, identity;
  BlockId next = 0;
  for (std::uint32_t i = 0; i < 9; ++i) {
    paged.add(batch.tables[i], 7, 0, batch.lengths[i]);
    std::vector<BlockId> table(batch.tables[i].size());
    std::iota(table.begin(), table.end(), next);
    next += static_cast<BlockId>(table.size());
    for (std::size_t page = 0; page < table.size(); ++page) {
      std::memcpy(identity_arena.data() + table[page] * shape.layer_block_bytes(),
                  paged_arena.data() + batch.tables[i][page] * shape.layer_block_bytes(),
                  shape.layer_block_bytes());
    }
    identity.add(table, 7, 0, batch.lengths[i]);
  }
  std::vector<float> q(9 * 2 * 3 * 8), a(q.size()), b(q.size());
  for (std::size_t i = 0; i < q.size(); ++i)
    q[i] = content::query_value(2, static_cast<std::uint32_t>(i), 0, 0, 0);
  cpu_attention(paged_arena.view(), paged.view(), AttentionParams{q.data(), a.data(), 0, 3});
  cpu_attention(shape, identity.view(), AttentionParams{q.data(), b.data(), 0, 3});
  CHECK(test::bytes_compare(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}
