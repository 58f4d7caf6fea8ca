#include "app/kernels.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string_view>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "core/memory_budget.h"
#include "dataplane/arena.h"
#include "io/output.h"
#include "io/standard_output.h"
#include "model/presets.h"
#include "model/run_config.h"

namespace kvreplay {

namespace {

nlohmann::json to_json(const KernelMeasure& m, double roof) {
  return {{"median_us", m.median_us},
          {"p99_us", m.p99_us},
          {"gbps", m.gbps},
          {"roof_fraction", roof > 0.0 ? m.gbps / roof : 0.0}};
}

// Whether every point of the sweep fits, saying why on stderr when one does not.
// Every point's pool is bounded before anything runs (SPEC §8): the
// fragmenting replay keeps kKernelBytesPerBlock a block on the host, and its
// pool is at most kMaxSupportedPoolBlocks, as a replay's; arenas are bounded
// by --arena-limit, point by point, and skipped past it.
bool sweep_fits(const std::vector<std::uint32_t>& page_sizes,
                const std::vector<std::uint32_t>& batches,
                const std::vector<std::uint32_t>& contexts) {
  for (std::uint32_t page_tokens : page_sizes) {
    for (std::uint32_t batch : batches) {
      for (std::uint32_t context : contexts) {
        const std::uint64_t blocks = fragmented_pool_blocks(batch, context, page_tokens);
        const std::string point =
            fmt::format("--batch {} --context {} --page-tokens {}", batch, context, page_tokens);
        if (blocks > kMaxSupportedPoolBlocks) {
          eprint(
              "command line: {}: the point needs a pool of {} blocks, more than kvreplay "
              "keeps in memory (at most {}); give a smaller batch or context, or larger "
              "pages\n",
              point, blocks, kMaxSupportedPoolBlocks);
          return false;
        }
        if (auto problem = check_memory(
                mul_sat(blocks, kKernelBytesPerBlock), "the point " + point,
                fmt::format("{} bytes a block x {} blocks", kKernelBytesPerBlock, blocks))) {
          eprint("command line: {}\n", *problem);
          return false;
        }
      }
    }
  }
  return true;
}

// The --report document of a sweep.
nlohmann::json kernels_report(const KernelBenchRequest& request, const std::string& description,
                              const char* clock, std::uint64_t roof_bytes, double roof,
                              nlohmann::json results, nlohmann::json skipped) {
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
  return report;
}

}  // namespace

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
    eprint("command line: kernels: {}\n", *problem);
    return kExitInput;
  }

  if (!sweep_fits(page_sizes, batches, contexts)) {
    return kExitInput;
  }

  // Opened before the sweep, so a path that cannot be written fails at once.
  OutputSet outputs;
  OutputFile* report_out = nullptr;
  if (!request.report_path.empty() &&
      (report_out = outputs.open("the report", request.report_path, OutputFile::Flow::kWhole,
                                 "--report")) == nullptr) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  // The table never mixes with a report on stdout.
  std::FILE* table_stream = outputs.writes_stdout() ? stderr : stdout;
  auto print_row = [table_stream](const std::string& text) { put_text(table_stream, text); };

  // The copy roof, on a one-block arena of the same backend.
  auto roof_backend = make_backend(request.backend, geometry, request.arena_limit);
  if (!roof_backend) {
    eprint("command line: --backend: {}: {}\n", to_string(request.backend), roof_backend.error());
    return kExitInput;
  }
  const std::uint64_t roof_bytes = cuda ? (std::uint64_t{512} << 20) : (std::uint64_t{64} << 20);
  double roof = 0.0;
  try {
    roof = roof_backend.value()->measure_copy_roof(roof_bytes, request.iterations);
  } catch (const BackendError& error) {
    eprint("kvreplay kernels: the copy roof failed: {}\n", error.what());
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
          const PointTimings timings =
              time_kernels(*made.value(), paged,
                           SweepPoint{batch, context, page_tokens, request.group, request.seed,
                                      request.warmup, request.iterations});
          for (std::size_t k = 0; k < kBenchKernels.size(); ++k) {
            const std::string_view kernel = kBenchKernels[k];
            const KernelMeasure& p = timings.paged[k];
            const KernelMeasure& id = timings.identity[k];
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
    report_out->write(kernels_report(request, description, clock, roof_bytes, roof,
                                     std::move(results), std::move(skipped))
                          .dump(2) +
                      "\n");
  }
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  return kExitOk;
}

namespace {

class KernelsCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("--backend", backend_, "cuda (default) or cpu")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    app.add_option("--model", model_, "geometry of one layer: a model preset (llama-3-8b)");
    app.add_option("--kv-heads", kv_heads_, "KV heads (overrides the model)")
        ->check(CLI::Range(1u, 0xFFFFFFFFu));
    app.add_option("--head-dim", head_dim_, "head dimension (overrides the model)")
        ->check(CLI::Range(1u, 0xFFFFFFFFu));
    app.add_option("--dtype", dtype_, "fp32, fp16, bf16 (default) or fp8")
        ->check(CLI::IsMember(dtype_names()));
    app.add_option("--group", request_.group, "query heads per KV head (default 4)")
        ->check(CLI::Range(1u, 1024u));
    app.add_option("--batch", request_.batches, "batch sizes (default 1,8,32,128; cpu 1,8,32)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 20));
    app.add_option("--context", request_.contexts,
                   "context lengths (default 512,4096,16384; cpu 256,1024)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 24));
    app.add_option("--page-tokens", request_.page_tokens, "page sizes (default 16,64; cpu 16)")
        ->delimiter(',')
        ->check(CLI::Range(1u, 1u << 16));
    app.add_option("--iters", request_.iterations, "timed launches per point (default 20)")
        ->check(CLI::Range(1, 100000));
    app.add_option("--warmup", request_.warmup, "untimed launches first (default 3)")
        ->check(CLI::Range(0, 100000));
    app.add_option("--arena-limit", arena_limit_, "largest arena of a sweep point");
    app.add_option("--seed", request_.seed, "seed of the fragmenting trace (default 1)");
    app.add_option("--report", request_.report_path,
                   "write the results as JSON here (- for stdout; the table then goes to stderr)");
    app.add_flag("-q,--quiet", request_.quiet, "print no table");
    app.footer(
        "Examples:\n"
        "  kvreplay kernels --report kernels.json\n"
        "  kvreplay kernels --batch 8,64 --context 2048,32768 --page-tokens 16 --dtype fp16\n"
        "  kvreplay kernels --backend cpu --batch 1,4 --context 256 --iters 5");
  }

  int run() override {
    request_.backend = *parse_backend(backend_);
    const ModelPreset* preset = find_model_preset(model_);
    if (preset == nullptr) {
      return usage_error(
          fmt::format("--model: unknown model '{}' (known: {})", model_, model_preset_list()));
    }
    if (preset->spec.mla && (kv_heads_ == 0 || head_dim_ == 0)) {
      return usage_error(fmt::format(
          "--model: {} keeps one MLA latent per token, not the K and V heads the kernels "
          "move; give --kv-heads and --head-dim",
          model_));
    }
    request_.kv_heads = kv_heads_ != 0 ? kv_heads_ : preset->spec.kv_heads;
    request_.head_dim = head_dim_ != 0 ? head_dim_ : preset->spec.head_dim;
    request_.dtype = *parse_dtype(dtype_);
    if (!arena_limit_.empty()) {
      auto bytes = parse_memory_size(arena_limit_);
      if (!bytes) return usage_error(fmt::format("--arena-limit: {}", bytes.error()));
      request_.arena_limit = bytes.value();
    }
    return run_kernels(request_);
  }

 private:
  KernelBenchRequest request_;
  std::string backend_ = "cuda", model_ = "llama-3-8b", dtype_ = "bf16", arena_limit_;
  std::uint32_t kv_heads_ = 0, head_dim_ = 0;
};

}  // namespace

std::unique_ptr<Command> make_kernels_command() {
  return std::make_unique<KernelsCommand>();
}

}  // namespace kvreplay
