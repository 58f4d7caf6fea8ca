#include "dataplane/kernel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <unordered_set>

#include "dataplane/arena.h"
#include "io/output.h"
#include "io/standard_output.h"
#include "replay/replayer.h"
#include "replay/run_replay.h"
#include "report/report.h"

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

struct Measured {
  double median_us = 0.0;
  double p99_us = 0.0;
  double gbps = 0.0;
  std::uint64_t bytes = 0;  // per launch
};

template <class Launch>
Measured measure(KvBackend& backend, std::string_view kernel, int warmup, int iterations,
                 Launch&& launch) {
  for (int i = 0; i < warmup; ++i) launch();
  backend.synchronize();
  backend.stats().clear();
  for (int i = 0; i < iterations; ++i) launch();
  backend.synchronize();
  Measured out;
  if (const KernelTiming* timing = backend.stats().find(kernel); timing && timing->launches > 0) {
    out.median_us = timing->median_us();
    out.p99_us = timing->p99_us();
    out.bytes = timing->bytes / timing->launches;
    out.gbps = out.median_us > 0.0 ? static_cast<double>(out.bytes) / (out.median_us * 1e3) : 0.0;
  }
  backend.stats().clear();
  return out;
}

nlohmann::json to_json(const Measured& m, double roof) {
  return {{"median_us", m.median_us},
          {"p99_us", m.p99_us},
          {"gbps", m.gbps},
          {"roof_fraction", roof > 0.0 ? m.gbps / roof : 0.0}};
}

}  // namespace

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

int run_kernels(const KernelBenchRequest& request) {
  const bool cuda = request.backend == BackendKind::kCuda;
  auto or_default = [](const std::vector<std::uint32_t>& given,
                       std::vector<std::uint32_t> fallback) {
    return given.empty() ? fallback : given;
  };
  const auto batches = or_default(request.batches, cuda ? std::vector<std::uint32_t>{1, 8, 32, 128}
                                                        : std::vector<std::uint32_t>{1, 8, 32});
  const auto contexts =
      or_default(request.contexts, cuda ? std::vector<std::uint32_t>{512, 4096, 16384}
                                        : std::vector<std::uint32_t>{256, 1024});
  const auto page_sizes = or_default(request.page_tokens, cuda ? std::vector<std::uint32_t>{16, 64}
                                                               : std::vector<std::uint32_t>{16});
  PagedKvConfig geometry;
  geometry.layers = 1;
  geometry.kv_heads = request.kv_heads;
  geometry.head_dim = request.head_dim;
  geometry.dtype = request.dtype;
  geometry.page_tokens = 16;
  geometry.pool_blocks = 1;
  geometry.max_seq_tokens = 1;
  if (auto problem = geometry.validate()) {
    fmt::print(stderr, "command line: kernels: {}\n", *problem);
    return kExitInput;
  }

  // Opened before the sweep, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  if (!request.report_path.empty() &&
      (report_out = outputs.open("the report", request.report_path)) == nullptr) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  // The table never mixes with a report on stdout.
  std::FILE* table_stream = outputs.writes_stdout() ? stderr : stdout;
  auto print_row = [table_stream](const std::string& text) { put_text(table_stream, text); };

  // The copy roof, on a one-block arena of the same backend.
  auto roof_backend = make_backend(request.backend, geometry, request.arena_limit);
  if (!roof_backend) {
    fmt::print(stderr, "command line: --backend: {}: {}\n", to_string(request.backend),
               roof_backend.error());
    return kExitInput;
  }
  const std::uint64_t roof_bytes = cuda ? (std::uint64_t{512} << 20) : (std::uint64_t{64} << 20);
  double roof = 0.0;
  try {
    roof = roof_backend.value()->measure_copy_roof(roof_bytes, request.iterations);
  } catch (const BackendError& error) {
    fmt::print(stderr, "kvreplay kernels: the copy roof failed: {}\n", error.what());
    return kExitInput;
  }
  const std::string description = roof_backend.value()->description();
  const char* clock = cuda ? "CUDA events" : "wall clock";
  roof_backend.value().reset();

  if (!request.quiet) {
    print_row(fmt::format(
        "kvreplay kernels: {}, one layer of {} KV heads x head_dim {} {}, {} query heads "
        "per KV head\n",
        description, request.kv_heads, request.head_dim, to_string(request.dtype), request.group));
    print_row(fmt::format("copy roof: {:.1f} GB/s ({} of {}, read plus write bytes; {})\n", roof,
                          cuda ? "device-to-device copy" : "memcpy", size_text(roof_bytes), clock));
    print_row(fmt::format("{} warm-up + {} timed launches per point; latency = median\n\n",
                          request.warmup, request.iterations));
    print_row(fmt::format("{:>5} {:>6} {:>8}  {:<12} {:>11} {:>11} {:>8} {:>10} {:>7}\n", "page",
                          "batch", "context", "kernel", "paged us", "ident. us", "ratio", "GB/s",
                          "roof"));
  }
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json skipped = nlohmann::json::array();
  for (std::uint32_t page_tokens : page_sizes) {
    for (std::uint32_t batch : batches) {
      for (std::uint32_t context : contexts) {
        PagedKvConfig config = geometry;
        config.page_tokens = page_tokens;
        config.max_seq_tokens = context;
        FragmentedTables paged = replay_fragmented_tables(config, batch, context, request.seed);
        config.pool_blocks = paged.pool_blocks;
        auto made = make_backend(request.backend, config, request.arena_limit);
        if (!made) {
          if (!request.quiet) {
            print_row(fmt::format("{:>5} {:>6} {:>8}  skipped: {}\n", page_tokens, batch, context,
                                  made.error()));
          }
          skipped.push_back({{"page_tokens", page_tokens},
                             {"batch", batch},
                             {"context", context},
                             {"reason", made.error()}});
          continue;
        }
        try {
          KvBackend& backend = *made.value();
          const ArenaView& shape = backend.shape();
          const std::uint32_t pages = ceil_div(context, page_tokens);
          std::vector<std::vector<BlockId>> identity(batch);
          for (std::uint32_t i = 0; i < batch; ++i) {
            identity[i].resize(pages);
            std::iota(identity[i].begin(), identity[i].end(), i * pages);
          }
          const std::uint32_t q_heads = shape.kv_heads * request.group;
          std::vector<float> q(std::size_t{batch} * q_heads * shape.head_dim), out(q.size());
          for (std::size_t i = 0; i < q.size(); ++i) {
            q[i] = content::query_value(request.seed, static_cast<std::uint32_t>(i), 0, 0, 0);
          }
          const std::vector<std::uint8_t> staging(std::size_t{batch} * shape.token_bytes(), 0);

          struct Mode {
            const char* name;
            const std::vector<std::vector<BlockId>>* tables;
            std::map<std::string, Measured> measured;
          };
          Mode modes[2] = {{"paged", &paged.tables, {}}, {"identity", &identity, {}}};
          for (Mode& mode : modes) {
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
            const int w = request.warmup, n = request.iterations;
            mode.measured["append"] =
                measure(backend, kKernelAppend, w, n, [&] { backend.append(slots, staging); });
            mode.measured["copy_blocks"] =
                measure(backend, kKernelCopyBlocks, w, n, [&] { backend.copy_blocks(pairs); });
            mode.measured["gather"] =
                measure(backend, kKernelGather, w, n, [&] { backend.gather(whole); });
            mode.measured["attention"] = measure(backend, kKernelAttention, w, n, [&] {
              backend.attention(whole, 0, request.group, q, out);
            });
          }
          for (const char* kernel : {"append", "copy_blocks", "gather", "attention"}) {
            const Measured& p = modes[0].measured[kernel];
            const Measured& id = modes[1].measured[kernel];
            const double ratio = id.median_us > 0.0 ? p.median_us / id.median_us : 0.0;
            if (!request.quiet) {
              print_row(fmt::format(
                  "{:>5} {:>6} {:>8}  {:<12} {:>11.2f} {:>11.2f} {:>8.3f} {:>10.1f} {:>6.1f}%\n",
                  page_tokens, batch, context, kernel, p.median_us, id.median_us, ratio, p.gbps,
                  roof > 0.0 ? 100.0 * p.gbps / roof : 0.0));
            }
            results.push_back({{"page_tokens", page_tokens},
                               {"batch", batch},
                               {"context", context},
                               {"kernel", kernel},
                               {"bytes", p.bytes},
                               {"paged", to_json(p, roof)},
                               {"identity", to_json(id, roof)},
                               {"paged_over_identity", ratio}});
          }
        } catch (const BackendError& error) {
          // Out of device memory for the gather buffer, say: skip the point.
          if (!request.quiet) {
            print_row(fmt::format("{:>5} {:>6} {:>8}  skipped: {}\n", page_tokens, batch, context,
                                  error.what()));
          }
          skipped.push_back({{"page_tokens", page_tokens},
                             {"batch", batch},
                             {"context", context},
                             {"reason", error.what()}});
        }
      }
    }
  }
  if (report_out != nullptr) {
    nlohmann::json report;
    report["kvreplay_kernels"] = 1;
    report["backend"] = description;
    report["clock"] = clock;
    report["geometry"] = {{"layers", 1},
                          {"kv_heads", request.kv_heads},
                          {"head_dim", request.head_dim},
                          {"dtype", std::string(to_string(request.dtype))},
                          {"group", request.group}};
    report["copy_roof"] = {{"bytes", roof_bytes}, {"gbps", roof}};
    report["iterations"] = request.iterations;
    report["warmup"] = request.warmup;
    report["results"] = std::move(results);
    report["skipped"] = std::move(skipped);
    report_out->write(report.dump(2) + "\n");
  }
  if (!outputs.commit()) {
    fmt::print(stderr, "{}\n", outputs.error());
    return kExitInput;
  }
  return kExitOk;
}

}  // namespace kvreplay
