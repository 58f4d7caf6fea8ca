// The trtllm engine's entry in the table of engines (engine/engine_registry.h):
// what it serves, its defaults and options as TensorRT-LLM's LLM API has them
// (tensorrt_llm/llmapi/llm_args.py: KvCacheConfig, SchedulerConfig,
// TorchLlmArgs), its config keys and report section, and why it skips a
// request in TensorRT-LLM's terms.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/engine_registry.h"
#include "engine/trtllm/trtllm_scheduler.h"

namespace kvreplay {

namespace {

constexpr std::string_view kMedia[] = {"cpu"};
constexpr std::string_view kLruOnly[] = {"lru"};
constexpr std::string_view kRefused[] = {"--watermark"};

const EngineOption kOptions[] = {
    {.name = "--capacity-policy",
     .help = "trtllm: capacity scheduler, guaranteed-no-evict (default: admit while every "
             "request's blocks to completion fit) or max-utilization (pause the newest)",
     .choices = capacity_policy_names,
     .choice_default = "guaranteed-no-evict",
     .set_choice =
         [](SimOptions& o, std::string_view name) {
           o.trtllm.capacity_policy = *parse_capacity_policy(name);
         }},
    // TensorRT-LLM's names of the shared batch limits (resolve refuses both
    // names of one limit).
    {.name = "--max-batch-size",
     .help = "trtllm: --max-seqs under TensorRT-LLM's name (default 2048)",
     .whole = [](SimOptions& o) -> std::uint32_t& { return o.max_seqs; },
     .lo = 1,
     .hi = 1u << 20},
    {.name = "--max-num-tokens",
     .help = "trtllm: --max-batched-tokens under TensorRT-LLM's name (default 8192)",
     .whole = [](SimOptions& o) -> std::uint32_t& { return o.max_batched_tokens; },
     .lo = 1,
     .hi = 1u << 30},
    {.name = "--no-partial-reuse",
     .help = "trtllm: reuse only fully matched blocks (enable_partial_reuse off)",
     .flag = [](SimOptions& o) -> bool& { return o.trtllm.no_partial_reuse; }},
    {.name = "--enable-chunked-prefill",
     .help = "trtllm: chunked context (off by default, as TensorRT-LLM: a prompt above "
             "--max-num-tokens is then skipped)",
     .flag = [](SimOptions& o) -> bool& { return o.trtllm.enable_chunked_context; }},
};

// BuildConfig's max_batch_size and max_num_tokens where neither name of a
// limit was given; one limit under both names is refused.
std::optional<std::string> resolve(SimOptions& out, const EngineSetup& setup) {
  for (auto [shared, own] : {std::pair{"--max-seqs", "--max-batch-size"},
                             std::pair{"--max-batched-tokens", "--max-num-tokens"}}) {
    if (setup.given(shared) && setup.given(own)) {
      return fmt::format("{} and {} are one option: give one", shared, own);
    }
  }
  if (!setup.given("--max-seqs") && !setup.given("--max-batch-size")) {
    out.max_seqs = kTrtllmMaxBatchSize;
  }
  if (!setup.given("--max-batched-tokens") && !setup.given("--max-num-tokens")) {
    out.max_batched_tokens = kTrtllmMaxNumTokens;
  }
  out.trtllm.enable_partial_reuse = !out.trtllm.no_partial_reuse;
  return std::nullopt;
}

// TensorRT-LLM's names for the batch limits, and no watermark.
void config_json(const SimOptions& options, nlohmann::json& out) {
  for (const char* key : {"max_seqs", "max_batched_tokens", "watermark"}) out.erase(key);
  out["max_batch_size"] = options.max_seqs;
  out["max_num_tokens"] = options.max_batched_tokens;
  out["capacity_scheduler_policy"] = std::string(to_string(options.trtllm.capacity_policy));
  out["enable_partial_reuse"] = options.trtllm.enable_partial_reuse;
  out["enable_chunked_prefill"] = options.trtllm.enable_chunked_context;
}

// The "trtllm" section (TrtllmScheduler::add_figures), field by field.
constexpr SectionField kMerge[] = {
    {"capacity_scheduler_policy", FigureMerge::kSame},
    {"tokens_per_block", FigureMerge::kSame},
    {"max_batch_size", FigureMerge::kSame},
    {"max_num_tokens", FigureMerge::kSame},
    {"enable_block_reuse", FigureMerge::kSame},
    {"enable_partial_reuse", FigureMerge::kSame},
    {"copy_on_partial_reuse", FigureMerge::kSame},
    {"enable_chunked_context", FigureMerge::kSame},
    {"max_active_requests", FigureMerge::kMax},
    {"paused_requests", FigureMerge::kSum},
    {"context_chunks", FigureMerge::kSum},
    {"reused_blocks", FigureMerge::kSum},
    {"missed_blocks", FigureMerge::kSum},
    {"partial_reuse_copies", FigureMerge::kSum},
    {"partial_reuse_taken", FigureMerge::kSum},
    {"skipped_for_reuse", FigureMerge::kSum},
    {"reused_tokens", FigureMerge::kSum},
    {"stored_blocks", FigureMerge::kSum},
    {"evicted_blocks", FigureMerge::kSum},
};

std::unique_ptr<Scheduler> make(EngineShell& shell) {
  return std::make_unique<TrtllmScheduler>(shell);
}

}  // namespace

const EngineEntry& trtllm_engine() {
  static const EngineEntry entry = {
      .kind = EngineKind::kTrtllm,
      .name = "trtllm",
      .summary = "TensorRT-LLM's KV cache manager and scheduler",
      .make = make,
      .can =
          {
              .kv_events = true,
              // TensorRT-LLM's host tier (KvCacheConfig.host_cache_size:
              // secondary blocks offloaded on eviction, onboarded on reuse,
              // engine/trtllm/block_tree.h). Its disk transfer mode
              // (KvCacheTransferMode::GDS) is not modelled.
              .offload_media = kMedia,
              .offload_media_why = "the trtllm engine keeps one cpu tier (KvCacheConfig."
                                   "host_cache_size): drop the disk tier",
              .offload_policies = kLruOnly,
              .offload_policies_why = "the trtllm engine's host tier frees its blocks least "
                                      "recently released first (LRUEvictionPolicy): give lru",
              .evict_policies = kLruOnly,
              .evict_why = "free queue evicts lru only",
          },
      .defaults =
          {
              // KvCacheConfig.tokens_per_block defaults to 32; the free
              // queue hands out the block released first (LRUEvictionPolicy).
              .page_tokens = kTrtllmTokensPerBlock,
              .alloc_order = "fifo",
              .watermark = 0.0,
              .refused_options = kRefused,
              .refused_why = "GUARANTEED_NO_EVICT reserves each request's blocks to completion "
                             "instead",
              .free_gpu_memory_fraction = kTrtllmFreeGpuMemoryFraction,
              .capacity_rule = "trtllm",
              .resolve = resolve,
          },
      .options = kOptions,
      .config_json = config_json,
      .report_section = "trtllm",
      .merge = kMerge,
      // A host block is a node of the block tree (its key, children, index
      // entry and queue place), beside the offload connector's slot.
      .offload_slot_bytes = 224,
  };
  return entry;
}

std::optional<std::string> TrtllmScheduler::skip_rule(SkipReason reason,
                                                      const SkippedRequest& first) const {
  switch (reason) {
    case SkipReason::kTooLong:
      return fmt::format(
          "prompt + output tokens above --max-seq-tokens {} (TensorRT-LLM's max_seq_len){} "
          "(first: line {}, {} tokens)",
          config_.kv.max_seq_tokens,
          options_.enable_chunked_context
              ? ""
              : fmt::format(", or a prompt above --max-num-tokens {} without "
                            "--enable-chunked-prefill",
                            max_num_tokens_),
          first.line, first.need);
    case SkipReason::kPoolTooSmall:
      // GUARANTEED_NO_EVICT admits a request once its blocks to completion fit.
      return fmt::format(
          "prompt and output need more blocks than the pool of {} (first: line {}, {} blocks; "
          "give a larger --kv-memory or --pool-blocks)",
          config_.kv.pool_blocks, first.line, first.need);
    default: return std::nullopt;
  }
}

}  // namespace kvreplay
