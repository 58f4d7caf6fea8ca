// The sglang engine's entry in the table of engines (engine/engine_registry.h):
// what it serves, its defaults and options as SGLang's ServerArgs has them
// (python/sglang/srt/server_args.py), its config keys and report section.
#include <nlohmann/json.hpp>

#include "engine/engine_registry.h"
#include "engine/sglang/sglang_scheduler.h"

namespace kvreplay {

namespace {

constexpr std::string_view kMedia[] = {"cpu"};
constexpr std::string_view kLruOnly[] = {"lru"};
constexpr std::string_view kRefused[] = {"--max-seqs", "--max-batched-tokens", "--watermark"};

const EngineOption kOptions[] = {
    {.name = "--schedule-policy",
     .help = "sglang: waiting-queue order, lpm (longest cached prefix first; default) or fcfs",
     .choices = schedule_policy_names,
     .choice_default = "lpm",
     .set_choice = [](SimOptions& o,
                      std::string_view name) { o.sglang.policy = *parse_schedule_policy(name); }},
    {.name = "--chunked-prefill-size",
     .help = "sglang: most prompt tokens a prefill batch computes; a longer prompt is prefilled in "
             "chunks; 0 for no chunking (default by --gpu's memory as SGLang: 8192 for 60-160 "
             "GiB, 16384 above, 4096 or 2048 below)",
     .whole = [](SimOptions& o) -> std::uint32_t& { return o.sglang.chunked_prefill_size; },
     .lo = 0,
     .hi = 1u << 30},
    {.name = "--max-prefill-tokens",
     .help = "sglang: the input budget of a prefill batch, all its requests (default 16384)",
     .whole = [](SimOptions& o) -> std::uint32_t& { return o.sglang.max_prefill_tokens; },
     .lo = 1,
     .hi = 1u << 30},
    {.name = "--max-running-requests",
     .help = "sglang: most requests running at once (default as SGLang, from the pool: pool "
             "tokens / --max-seq-tokens x 512, within 2048..4096)",
     .whole = [](SimOptions& o) -> std::uint32_t& { return o.sglang.max_running_requests; },
     .lo = 1,
     .hi = 1u << 20},
    {.name = "--schedule-conservativeness",
     .help = "sglang: scales the output reserved for running requests (new_token_ratio; default 1)",
     .real = [](SimOptions& o) -> double& { return o.sglang.schedule_conservativeness; },
     .lo = 0.0,
     .hi = 100.0},
};

// ServerArgs._handle_gpu_memory_settings: --chunked-prefill-size by the
// GPU's memory; the activation reserve (app/options.cc,
// set_activation_limits) is a prefill batch's tokens.
std::optional<std::string> resolve(SimOptions& out, const EngineSetup& setup) {
  if (!setup.given("--chunked-prefill-size")) {
    out.sglang.chunked_prefill_size =
        setup.gpu ? sglang_chunked_prefill_default(static_cast<double>(setup.gpu->memory_bytes) /
                                                   (1ull << 30))
                  : 8192;
  }
  out.max_batched_tokens = out.sglang.chunked_prefill_size > 0 ? out.sglang.chunked_prefill_size
                                                               : out.sglang.max_prefill_tokens;
  return std::nullopt;
}

// SGLang's budgets instead of vLLM's (no watermark, no max_num_seqs).
void config_json(const SimOptions& options, nlohmann::json& out) {
  for (const char* key : {"max_seqs", "max_batched_tokens", "watermark"}) out.erase(key);
  out["schedule_policy"] = std::string(to_string(options.sglang.policy));
  out["chunked_prefill_size"] = options.sglang.chunked_prefill_size;
  out["max_prefill_tokens"] = options.sglang.max_prefill_tokens;
  out["max_running_requests"] = options.sglang.max_running_requests;  // 0: from the pool
  out["schedule_conservativeness"] = options.sglang.schedule_conservativeness;
}

// The "sglang" section (SglangScheduler::add_figures), field by field.
constexpr SectionField kMerge[] = {
    {"schedule_policy", FigureMerge::kSame},
    {"page_size", FigureMerge::kSame},
    {"chunked_prefill_size", FigureMerge::kSame},
    {"max_prefill_tokens", FigureMerge::kSame},
    {"max_running_requests", FigureMerge::kSum},
    {"max_total_num_tokens", FigureMerge::kSum},
    {"retracted_requests", FigureMerge::kSum},
    {"prefill_batches", FigureMerge::kSum},
    {"decode_batches", FigureMerge::kSum},
    {"chunked_prefills", FigureMerge::kSum},
    {"prefill_out_of_memory", FigureMerge::kSum},
    {"cached_tokens", FigureMerge::kSum},
    {"token_usage/peak", FigureMerge::kMax},
    {"token_usage/mean", FigureMerge::kMean},
    {"new_token_ratio/init", FigureMerge::kSame},
    {"new_token_ratio/min", FigureMerge::kMin},
    {"new_token_ratio/final", FigureMerge::kMean},
    {"radix_nodes", FigureMerge::kSum},
    {"hicache/write_policy", FigureMerge::kSame},
    {"hicache/load_back_threshold", FigureMerge::kSame},
};

// ServerArgs._handle_data_parallelism under --enable-dp-attention: the
// limits are the deployment's (chunked_prefill_size //= dp_size and
// max_running_requests split per replica, so their sum is as given), and
// schedule_conservativeness *= 0.3.
void attention_replicas(SimOptions& out, std::uint32_t replicas) {
  if (replicas > 1) out.sglang.schedule_conservativeness *= 0.3;
}

std::unique_ptr<Scheduler> make(EngineShell& shell) {
  return std::make_unique<SglangScheduler>(shell);
}

}  // namespace

const EngineEntry& sglang_engine() {
  static const EngineEntry entry = {
      .kind = EngineKind::kSglang,
      .name = "sglang",
      .summary = "SGLang's scheduler and radix cache",
      .make = make,
      .can =
          {
              .kv_events = true,
              .emit_trace = true,
              // HiCache (engine/sglang/sglang_scheduler.h): one host pool, its
              // eviction the radix tree's. SGLang's storage layer
              // (--hicache-storage-backend) is not modelled.
              .offload_media = kMedia,
              .offload_media_why = "the sglang engine keeps one cpu tier (HiCache's host pool); "
                                   "its storage layer is not modelled (drop the disk tier)",
              .offload_policies = kLruOnly,
              .offload_policies_why =
                  "the sglang engine's host pool evicts the radix tree's leaves least recently "
                  "used (HiCache's evict_host): give lru",
              .evict_policies = kLruOnly,
              .evict_why = "radix tree evicts lru only",
          },
      .defaults =
          {
              // SGLang's --page-size defaults to 1, and its allocator
              // (TokenToKVPoolAllocator: alloc takes free_pages from the
              // front, free appends to the back) hands out the oldest free
              // page first.
              .page_tokens = 1,
              .alloc_order = "fifo",
              .refused_options = kRefused,
              .refused_why = "its budgets are --max-running-requests, --chunked-prefill-size and "
                             "--max-prefill-tokens",
              .capacity_rule = "sglang",
              .resolve = resolve,
              .attention_replicas = attention_replicas,
          },
      .options = kOptions,
      .config_json = config_json,
      .report_section = "sglang",
      .merge = kMerge,
      // HiCache's host pages live in the radix tree: a host-only node and its
      // keys, a page each at worst (README, "Memory bounds").
      .offload_slot_bytes = 32,
      .offload_slot = "page",
  };
  return entry;
}

}  // namespace kvreplay
