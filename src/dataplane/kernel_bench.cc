#include "dataplane/kernel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "dataplane/arena.h"
#include "dataplane/content.h"
#include "dataplane/paged_batch.h"
#include "engine/replay/replayer.h"

namespace kvreplay {

namespace {

std::uint32_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return static_cast<std::uint32_t>((a + b - 1) / b);
}

// Copies the final tables of sequences 0 .. batch-1 at the end of the replay.
class TableCapture final : public ReplayObserver {
 public:
  TableCapture(std::uint32_t batch, std::uint32_t pages) : tables_(batch) {
    for (auto& table : tables_) table.reserve(pages);
  }
  void on_create(const TableKey&, const TableKey*, const SequenceBlockTable&,
                 const Event&) override {}
  void on_write(const TableKey&, const SequenceBlockTable&, std::uint32_t,
                std::span<const CopyOnWrite>, const Event&) override {}
  void on_release(const TableKey&, const Event&) override {}
  void on_event_end(const Event&) override {}
  std::optional<Violation> on_checkpoint(std::span<const LiveTable> live, const Event*) override {
    for (const LiveTable& table : live) {
      if (table.key.kind != TableKey::Kind::kSequence || table.key.seq >= tables_.size()) continue;
      auto entries = table.table->entries();
      tables_[table.key.seq].assign(entries.begin(), entries.end());
    }
    return std::nullopt;
  }
  std::vector<std::vector<BlockId>>& tables() { return tables_; }

 private:
  std::vector<std::vector<BlockId>> tables_;
};

template <class Launch>
KernelMeasure measure(KvBackend& backend, std::string_view kernel, int warmup, int iterations,
                      Launch&& launch) {
  for (int i = 0; i < warmup; ++i) launch();
  backend.synchronize();
  backend.stats().clear();
  for (int i = 0; i < iterations; ++i) launch();
  backend.synchronize();
  KernelMeasure out;
  if (const KernelTiming* timing = backend.stats().find(kernel); timing && timing->launches > 0) {
    out.median_us = timing->median_us();
    out.p99_us = timing->p99_us();
    out.bytes = timing->bytes / timing->launches;
    out.gbps = out.median_us > 0.0 ? static_cast<double>(out.bytes) / (out.median_us * 1e3) : 0.0;
  }
  backend.stats().clear();
  return out;
}

}  // namespace

std::uint64_t fragmented_pool_blocks(std::uint32_t batch, std::uint32_t context,
                                     std::uint32_t page_tokens) {
  const std::uint64_t pages = (std::uint64_t{context} + page_tokens - 1) / page_tokens;
  const std::uint64_t noise = std::max<std::uint32_t>(1, batch / 4);
  const std::uint64_t noise_cap = std::max<std::uint32_t>(1, context / 2);
  return std::uint64_t{batch} * pages + noise * ((noise_cap + page_tokens - 1) / page_tokens + 1) +
         batch;
}

FragmentedTables replay_fragmented_tables(const PagedKvConfig& geometry, std::uint32_t batch,
                                          std::uint32_t context, std::uint64_t seed) {
  const std::uint32_t page_tokens = geometry.page_tokens;
  const std::uint32_t pages = ceil_div(context, page_tokens);
  const std::uint32_t noise = std::max<std::uint32_t>(1, batch / 4);
  const std::uint32_t noise_cap = std::max<std::uint32_t>(1, context / 2);  // <= max_seq_tokens
  FragmentedTables out;
  out.reserved_from = batch * pages + noise * (ceil_div(noise_cap, page_tokens) + 1);
  out.pool_blocks = out.reserved_from + batch;

  RunConfig config;
  config.kv = geometry;
  config.kv.layers = 1;
  config.kv.pool_blocks = out.pool_blocks;
  config.kv.max_seq_tokens = context;
  Replayer replayer(config, CheckPolicy{CheckPolicy::Mode::kOff, 1}, OomPolicy::kFail);
  TableCapture capture(batch, pages);
  replayer.set_observer(&capture);

  std::mt19937_64 rng(seed);
  std::uint64_t index = 0;
  auto apply = [&](Event& event) {
    event.index = event.line = ++index;
    auto outcome = replayer.apply(event, "kernels");
    if (!outcome || outcome.value() != Replayer::Outcome::kApplied) {
      // The pool is sized for the trace and every event is valid by construction.
      std::fprintf(stderr,
                   "kvreplay kernels: internal error: the fragmenting replay failed at %s\n",
                   outcome ? "an exhausted pool" : outcome.error().to_string().c_str());
      std::abort();
    }
  };
  auto admit = [&](std::uint64_t seq) {
    Event event;
    event.op = Op::kAdmit;
    event.seq = seq;
    event.prompt = 0;
    apply(event);
  };
  auto free_seq = [&](std::uint64_t seq) {
    Event event;
    event.op = Op::kFree;
    event.seq = seq;
    apply(event);
  };
  for (std::uint32_t i = 0; i < batch; ++i) admit(i);
  struct Noise {
    std::uint64_t id;
    std::uint32_t length;
  };
  std::vector<Noise> noisy;
  std::uint64_t next_id = batch;
  for (std::uint32_t i = 0; i < noise; ++i) {
    noisy.push_back({next_id, 0});
    admit(next_id++);
  }
  std::uint32_t length = 0;
  Event decode;
  decode.op = Op::kDecode;
  while (length < context) {
    const auto tokens = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(context - length, 1 + rng() % page_tokens));
    for (Noise& n : noisy) {
      if (n.length + tokens > noise_cap || rng() % 8 == 0) {
        free_seq(n.id);
        n = {next_id, 0};
        admit(next_id++);
      }
    }
    decode.seqs.clear();
    for (std::uint32_t i = 0; i < batch; ++i) decode.seqs.push_back(i);
    for (const Noise& n : noisy) decode.seqs.push_back(n.id);
    std::shuffle(decode.seqs.begin(), decode.seqs.end(), rng);
    decode.tokens = tokens;
    apply(decode);
    for (Noise& n : noisy) n.length += tokens;
    length += tokens;
  }
  (void)replayer.finish();
  out.tables = std::move(capture.tables());
  return out;
}

PointTimings time_kernels(KvBackend& backend, const FragmentedTables& paged,
                          const SweepPoint& point) {
  const std::uint32_t batch = point.batch, context = point.context, page_tokens = point.page_tokens;
  const ArenaView& shape = backend.shape();
  const std::uint32_t pages = ceil_div(context, page_tokens);
  std::vector<std::vector<BlockId>> identity(batch);
  for (std::uint32_t i = 0; i < batch; ++i) {
    identity[i].resize(pages);
    std::iota(identity[i].begin(), identity[i].end(), i * pages);
  }
  const std::uint32_t q_heads = shape.kv_heads * point.group;
  std::vector<float> q(std::size_t{batch} * q_heads * shape.head_dim), out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    q[i] = content::query_value(point.seed, static_cast<std::uint32_t>(i), 0, 0, 0);
  }
  const std::vector<std::uint8_t> staging(std::size_t{batch} * shape.token_bytes(), 0);

  PointTimings timings;
  struct Mode {
    const std::vector<std::vector<BlockId>>* tables;
    std::array<KernelMeasure, kBenchKernels.size()>* measured;
  };
  const Mode modes[2] = {{&paged.tables, &timings.paged}, {&identity, &timings.identity}};
  for (const Mode& mode : modes) {
    PagedBatch whole;
    std::vector<std::int64_t> slots;
    std::vector<std::uint32_t> pairs;
    for (std::uint32_t i = 0; i < batch; ++i) {
      const auto& table = (*mode.tables)[i];
      whole.add(table, page_tokens, 0, context);
      const std::uint32_t last = context - 1;
      slots.push_back(static_cast<std::int64_t>(
          std::uint64_t{table[last / page_tokens]} * page_tokens + last % page_tokens));
      pairs.push_back(table[last / page_tokens]);
      pairs.push_back(paged.reserved_from + i);
    }
    const int w = point.warmup, n = point.iterations;
    (*mode.measured)[0] =
        measure(backend, kKernelAppend, w, n, [&] { backend.append(slots, staging); });
    (*mode.measured)[1] =
        measure(backend, kKernelCopyBlocks, w, n, [&] { backend.copy_blocks(pairs); });
    (*mode.measured)[2] = measure(backend, kKernelGather, w, n, [&] { backend.gather(whole); });
    (*mode.measured)[3] = measure(backend, kKernelAttention, w, n,
                                  [&] { backend.attention(whole, 0, point.group, q, out); });
  }
  return timings;
}

}  // namespace kvreplay
