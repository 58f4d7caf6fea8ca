// GPU differential tests (CTest label "gpu"): the CUDA backend against the CPU
// reference, byte for byte for append, copy_blocks and gather, within the dtype
// tolerance for attention; and replays verified on the device. Without a
// usable CUDA device (or in a build without CUDA) the binary prints why and
// exits 77, which CTest reports as skipped (each case is its own CTest entry).
#include "catch_main.h"

#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "dataplane/backend.h"
#include "support.h"

using namespace kvreplay;
using kvreplay::test::geometry;

namespace {

constexpr int kSkipped = 77;

std::unique_ptr<KvBackend> backend_for(BackendKind kind, const PagedKvConfig& config) {
  auto made = make_backend(kind, config, std::nullopt);
  REQUIRE(made);
  return std::move(made).value();
}

struct Workload {
  PagedKvConfig config;
  std::vector<std::uint32_t> lengths;
  std::vector<std::vector<BlockId>> tables;
};

// Fragmented tables over a shuffled pool (3 spare blocks for copies).
Workload make_workload(std::mt19937_64& rng, std::uint32_t batch, std::uint32_t max_length,
                       std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim,
                       Dtype dtype, std::uint32_t page_tokens) {
  Workload w;
  std::uint32_t pages = 0;
  for (std::uint32_t i = 0; i < batch; ++i) {
    w.lengths.push_back(static_cast<std::uint32_t>(rng() % (max_length + 1)));
    pages += (w.lengths.back() + page_tokens - 1) / page_tokens;
  }
  w.config = geometry(layers, kv_heads, head_dim, dtype, page_tokens, pages + 3, 1 << 20);
  std::vector<BlockId> blocks(w.config.pool_blocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::size_t next = 0;
  for (std::uint32_t i = 0; i < batch; ++i) {
    const std::uint32_t n = (w.lengths[i] + page_tokens - 1) / page_tokens;
    w.tables.emplace_back(blocks.begin() + static_cast<std::ptrdiff_t>(next),
                          blocks.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += n;
  }
  return w;
}

// Writes every sequence, round by round, into every given backend.
void write_all(std::mt19937_64& rng, const Workload& w,
               std::initializer_list<KvBackend*> backends) {
  const ArenaView& shape = (*backends.begin())->shape();
  const std::uint64_t token_bytes = shape.token_bytes();
  std::vector<std::uint32_t> written(w.lengths.size(), 0);
  for (bool more = true; more;) {
    more = false;
    std::vector<std::int64_t> slots;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> rows;
    for (std::uint32_t i = 0; i < w.lengths.size(); ++i) {
      const std::uint32_t take = std::min<std::uint32_t>(w.lengths[i] - written[i],
                                                         1 + static_cast<std::uint32_t>(rng() % 9));
      for (std::uint32_t p = written[i]; p < written[i] + take; ++p) {
        slots.push_back(std::int64_t{w.tables[i][p / shape.page_tokens]} * shape.page_tokens +
                        p % shape.page_tokens);
        rows.push_back({i + 1, p});
      }
      written[i] += take;
      more = more || written[i] < w.lengths[i];
    }
    if (rows.empty()) continue;
    std::vector<std::uint8_t> staging(shape.layers * rows.size() * token_bytes);
    for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
      for (std::size_t r = 0; r < rows.size(); ++r) {
        content::fill_token_row(staging.data() + (layer * rows.size() + r) * token_bytes,
                                shape.dtype, rows[r].first, rows[r].second, layer, shape.kv_heads,
                                shape.head_dim);
      }
    }
    for (KvBackend* backend : backends) backend->append(slots, staging);
  }
}

std::vector<std::uint8_t> arena_of(KvBackend& backend) {
  std::vector<std::uint8_t> bytes(backend.shape().bytes());
  backend.read_arena(bytes);
  return bytes;
}

std::vector<std::uint8_t> gathered_of(KvBackend& backend, const PagedBatch& batch) {
  backend.gather(batch);
  std::vector<std::uint8_t> bytes(batch.rows() * backend.shape().token_bytes() *
                                  backend.shape().layers);
  backend.read_gathered(bytes);
  return bytes;
}

}  // namespace

TEST_CASE("CUDA append, copy_blocks and gather are byte-identical to the CPU", "[gpu]") {
  struct Shape {
    std::uint32_t layers, kv_heads, head_dim;
    Dtype dtype;
    std::uint32_t page_tokens, batch, max_length;
  };
  const Shape kShapes[] = {
      {1, 1, 1, Dtype::kFp8, 1, 1, 30},     {2, 3, 5, Dtype::kFp8, 3, 7, 100},
      {3, 2, 7, Dtype::kFp16, 7, 33, 80},   {2, 8, 128, Dtype::kBf16, 16, 91, 300},
      {1, 1, 3, Dtype::kFp32, 17, 91, 200}, {2, 4, 64, Dtype::kFp32, 1, 5, 64},
  };
  std::mt19937_64 rng(7);
  for (const Shape& s : kShapes) {
    CAPTURE(s.layers, s.kv_heads, s.head_dim, to_string(s.dtype), s.page_tokens, s.batch);
    Workload w = make_workload(rng, s.batch, s.max_length, s.layers, s.kv_heads, s.head_dim,
                               s.dtype, s.page_tokens);
    auto cpu = backend_for(BackendKind::kCpu, w.config);
    auto gpu = backend_for(BackendKind::kCuda, w.config);
    write_all(rng, w, {cpu.get(), gpu.get()});
    REQUIRE(arena_of(*cpu) == arena_of(*gpu));

    // Copy the last page of up to 3 sequences into the spare blocks, one launch.
    std::vector<std::uint32_t> pairs;
    const BlockId spare = w.config.pool_blocks - 3;
    for (std::uint32_t i = 0, made = 0; i < s.batch && made < 3; ++i) {
      if (w.tables[i].empty()) continue;
      pairs.push_back(w.tables[i].back());
      pairs.push_back(spare + made++);
    }
    cpu->copy_blocks(pairs);
    gpu->copy_blocks(pairs);
    REQUIRE(arena_of(*cpu) == arena_of(*gpu));

    PagedBatch whole, parts;
    for (std::uint32_t i = 0; i < s.batch; ++i) {
      whole.add(w.tables[i], s.page_tokens, 0, w.lengths[i]);
      const std::uint32_t begin =
          w.lengths[i] == 0 ? 0 : static_cast<std::uint32_t>(rng() % w.lengths[i]);
      parts.add(w.tables[i], s.page_tokens, begin, w.lengths[i]);
    }
    REQUIRE(gathered_of(*cpu, whole) == gathered_of(*gpu, whole));
    REQUIRE(gathered_of(*cpu, parts) == gathered_of(*gpu, parts));
  }
}

TEST_CASE("CUDA attention matches the CPU and fp64 within dtype tolerance", "[gpu]") {
  struct Case {
    std::uint32_t batch, max_length, kv_heads, head_dim, group, page_tokens;
    Dtype dtype;
  };
  const Case kCases[] = {
      {1, 1, 1, 1, 1, 1, Dtype::kFp32},
      {1, 9000, 2, 128, 4, 16, Dtype::kBf16},  // split-K
      {3, 5000, 1, 64, 7, 3, Dtype::kFp16},
      {91, 60, 2, 5, 4, 7, Dtype::kFp8},
      {33, 700, 8, 128, 4, 17, Dtype::kBf16},
      {2, 300, 1, 256, 8, 16, Dtype::kFp32},  // > 48 KiB smem
      {7, 2000, 4, 3, 2, 1, Dtype::kFp32},
  };
  std::mt19937_64 rng(13);
  std::size_t round = 0;
  for (const Case& c : kCases) {
    CAPTURE(c.batch, c.max_length, c.kv_heads, c.head_dim, c.group, c.page_tokens,
            to_string(c.dtype));
    Workload w = make_workload(rng, c.batch, c.max_length, 2, c.kv_heads, c.head_dim, c.dtype,
                               c.page_tokens);
    auto cpu = backend_for(BackendKind::kCpu, w.config);
    auto gpu = backend_for(BackendKind::kCuda, w.config);
    write_all(rng, w, {cpu.get(), gpu.get()});
    PagedBatch batch;
    for (std::uint32_t i = 0; i < c.batch; ++i)
      batch.add(w.tables[i], c.page_tokens, 0, w.lengths[i]);
    const std::uint32_t q_heads = c.kv_heads * c.group;
    std::vector<float> q(std::size_t{c.batch} * q_heads * c.head_dim), cpu_out(q.size()),
        gpu_out(q.size());
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = content::query_value(round, static_cast<std::uint32_t>(i), 0, 0, 0);
    ++round;
    cpu->attention(batch, 1, c.group, q, cpu_out);
    gpu->attention(batch, 1, c.group, q, gpu_out);
    const ArenaView& shape = cpu->shape();
    const double tolerance = test::attention_tolerance(shape.dtype);
    std::vector<double> as_double(cpu_out.begin(), cpu_out.end());
    CHECK(test::max_relative_error(gpu_out.data(), as_double.data(), as_double.size()) <=
          tolerance);
    // Against fp64, from the gathered dense copy.
    std::vector<std::uint8_t> dense = gathered_of(*cpu, batch);
    std::vector<double> ref(std::size_t{q_heads} * c.head_dim);
    double worst = 0.0;
    for (std::uint32_t i = 0; i < c.batch; ++i) {
      // gathered layout: [layers][rows][token]; reference_attention wants one sequence
      // as [layers][length][token]: copy it out.
      const std::uint64_t token_bytes = shape.token_bytes();
      std::vector<std::uint8_t> one(shape.layers * std::uint64_t{w.lengths[i]} * token_bytes);
      for (std::uint32_t layer = 0; layer < shape.layers && w.lengths[i] > 0; ++layer) {
        std::memcpy(one.data() + layer * w.lengths[i] * token_bytes,
                    dense.data() + (layer * batch.rows() + batch.out_indptr()[i]) * token_bytes,
                    w.lengths[i] * token_bytes);
      }
      const std::size_t at = std::size_t{i} * q_heads * c.head_dim;
      test::reference_attention(shape, one.data(), w.lengths[i], w.lengths[i], 1, c.group,
                                q.data() + at, ref.data());
      worst =
          std::max(worst, test::max_relative_error(gpu_out.data() + at, ref.data(), ref.size()));
    }
    CHECK(worst <= tolerance);
  }
}

TEST_CASE("replays verify on the device, and a planted missing copy is caught", "[gpu]") {
  for (const char* name : {"fork_cow.jsonl", "prefix_partial.jsonl", "quickstart.jsonl",
                           "document.json", "offload_tiers.jsonl"}) {
    CAPTURE(name);
    std::ifstream in(std::string(KVREPLAY_SOURCE_DIR) + "/traces/" + name, std::ios::binary);
    REQUIRE(in);
    std::ostringstream text;
    text << in.rdbuf();
    DataPlaneOptions options;
    options.verify = true;
    options.attention = true;
    auto clean = test::replay_text(text.str(), BackendKind::kCuda, options);
    REQUIRE_FALSE(clean.input_error);
    INFO((clean.violation ? clean.violation->message : std::string()));
    CHECK_FALSE(clean.violated);
    if (clean.totals.cow_copies > 0) {
      DataPlaneFaults faults;
      faults.skip_copy = 1;
      CHECK(test::replay_text(text.str(), BackendKind::kCuda, options, faults).violated);
    }
    if (clean.totals.tier_loads[0] > 0) {
      // The tiers' copies pass through host memory: a corrupted one is caught.
      CHECK(clean.verify.copies > 0);
      DataPlaneFaults faults;
      faults.corrupt_store = 1;
      CHECK(test::replay_text(text.str(), BackendKind::kCuda, options, faults).violated);
    }
  }
}

// Listing (CTest discovers one entry per case) needs no device; running does.
int main(int argc, char** argv) {
  return kvreplay::test::catch_main(argc, argv, [] {
    auto probe =
        make_backend(BackendKind::kCuda, geometry(1, 1, 8, Dtype::kFp32, 16, 1), std::nullopt);
    if (probe) return 0;
    std::printf("SKIPPED: GPU tests need a CUDA device: %s\n", probe.error().c_str());
    return kSkipped;
  });
}
