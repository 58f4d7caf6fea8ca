// One GPU of a deployment: the GPU presets' datasheet figures, the share of
// KV heads and layers a GPU holds under --tp and --pp, weights, the
// activation reserve, and a run's configuration resolved from them, every
// figure worked out by hand.
#include "model/deployment.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

#include "model/gpu.h"
#include "model/presets.h"
#include "model/run_config.h"

namespace kvreplay {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

TEST_CASE("gpus: the presets carry their datasheets' dense figures and vLLM's class") {
  REQUIRE(gpu_presets().size() == 6u);
  struct Expected {
    const char* name;
    std::uint64_t memory_gib;
    std::uint64_t bandwidth;
    double bf16, fp8;  // fp8 0: none
    const char* gpu_class;
  };
  const Expected expected[] = {
      {"a100-80gb", 80, 2039000000000, 312, 0, "small"},
      {"b200", 180, 8000000000000, 2250, 4500, "large"},
      {"h100-80gb", 80, 3350000000000, 989.5, 1979, "large"},
      {"h200", 141, 4800000000000, 989.5, 1979, "large"},
      {"l40s", 48, 864000000000, 362.05, 733, "small"},
      {"mi300x", 192, 5300000000000, 1307.4, 2614.9, "large"},
  };
  for (const Expected& e : expected) {
    INFO(e.name);
    const GpuSpec* gpu = find_gpu_preset(e.name);
    REQUIRE(gpu != nullptr);
    CHECK(gpu->name == e.name);
    CHECK(gpu->memory_bytes == e.memory_gib * kGiB);
    CHECK(gpu->hbm_bandwidth_bytes_per_second == e.bandwidth);
    CHECK(gpu->bf16_dense_tflops == Approx(e.bf16));
    CHECK(gpu->fp8_dense_tflops.has_value() == (e.fp8 != 0));
    if (e.fp8 != 0) CHECK(*gpu->fp8_dense_tflops == Approx(e.fp8));
    CHECK(gpu->vllm_gpu_class == e.gpu_class);
    CHECK(gpu->source.find("http") != std::string::npos);  // cites its datasheet
  }
  CHECK(find_gpu_preset("h100") == nullptr);
  CHECK(gpu_preset_list() == "a100-80gb, b200, h100-80gb, h200, l40s, mi300x");
}

TEST_CASE("deployment: tp splits KV heads, replicates them past their count, and MLA always") {
  auto share = [](std::uint32_t kv_heads, std::uint32_t kv_tensors, std::uint32_t tp) {
    auto s = gpu_share(32, 32, kv_heads, 128, kv_tensors, tp, 1);
    REQUIRE(s);
    return s.value();
  };
  CHECK(share(8, 2, 1).kv_heads == 8);
  CHECK(share(8, 2, 2).kv_heads == 4);
  CHECK(share(8, 2, 8).kv_heads == 1);
  CHECK(share(8, 2, 16).kv_heads == 1);  // replicated: ceil(8 / 16)
  CHECK(share(1, 1, 8).kv_heads == 1);   // an MLA latent on every rank
  CHECK(share(1, 1, 8).kv_tensors == 1);
  CHECK(share(8, 2, 4).head_dim == 128);
  auto refused = [](std::uint32_t heads, std::uint32_t kv_heads, std::uint32_t tp) {
    auto s = gpu_share(28, heads, kv_heads, 128, 2, tp, 1);
    REQUIRE_FALSE(s);
    return s.error();
  };
  CHECK(refused(28, 4, 8) == "num_attention_heads 28 is not divisible by --tp 8 (vLLM refuses it)");
  CHECK(refused(0, 12, 8) ==
        "12 KV heads cannot be split evenly across --tp 8 nor replicated (vLLM refuses it)");
}

TEST_CASE("deployment: pp splits layers as vLLM's get_pp_indices, the fullest stage reported") {
  // 126 layers on 4 stages: 31 each, the remainder 2 on stages 2 and 1.
  CHECK(pipeline_stage(126, 4, 0) == std::pair<std::uint32_t, std::uint32_t>{0, 31});
  CHECK(pipeline_stage(126, 4, 1) == std::pair<std::uint32_t, std::uint32_t>{31, 32});
  CHECK(pipeline_stage(126, 4, 2) == std::pair<std::uint32_t, std::uint32_t>{63, 32});
  CHECK(pipeline_stage(126, 4, 3) == std::pair<std::uint32_t, std::uint32_t>{95, 31});
  CHECK(pipeline_stage(61, 2, 0) == std::pair<std::uint32_t, std::uint32_t>{0, 31});
  CHECK(pipeline_stage(61, 2, 1) == std::pair<std::uint32_t, std::uint32_t>{31, 30});
  auto share = gpu_share(126, 128, 8, 128, 2, 8, 4);
  REQUIRE(share);
  CHECK(share.value().layers == 32);
  CHECK(share.value().first_layer == 31);
  CHECK(share.value().kv_heads == 1);
  auto too_many = gpu_share(4, 8, 8, 128, 2, 1, 5);
  REQUIRE_FALSE(too_many);
  CHECK(too_many.error() == "--pp 5 is more stages than the 4 layers");
}

TEST_CASE("deployment: weights and the activation reserve per GPU") {
  const ModelSpec& llama = find_model_preset("llama-3.1-8b")->spec;
  CHECK(weights_bytes_per_gpu(llama, 1, 1) == 2 * llama.parameters.total);
  CHECK(weights_bytes_per_gpu(llama, 2, 2) == 2 * llama.parameters.total / 4);
  // 1 GiB + 8192 tokens * (4 * 4096 + 3 * 14336) * 2 bytes + 1024 seqs * 128256 * 4 bytes.
  CHECK(activation_reserve_bytes(llama, 1, 8192, 1024) ==
        kGiB + 8192ull * (4 * 4096 + 3 * 14336) * 2 + 1024ull * 128256 * 4);
  // tp splits the MLP's activations: 14336 / 4 = 3584.
  CHECK(activation_reserve_bytes(llama, 4, 2048, 256) ==
        kGiB + 2048ull * (4 * 4096 + 3 * 3584) * 2 + 256ull * 128256 * 4);
}

TEST_CASE("deployment: KV memory is the budget less weights and reserve, or an error naming both") {
  const GpuSpec& h100 = *find_gpu_preset("h100-80gb");
  auto memory = gpu_memory(h100, 0.9, 16 * kGiB, 2 * kGiB);
  REQUIRE(memory);
  CHECK(memory.value().budget == 77309411328ull);  // floor(0.9 * 80 GiB)
  CHECK(memory.value().kv == 77309411328ull - 18 * kGiB);
  auto too_big = gpu_memory(h100, 0.9, 71 * kGiB, 2 * kGiB);
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error() ==
        "the weights do not fit: 71.00 GiB of weights and 2.00 GiB of activation reserve per "
        "GPU, and --gpu-memory-utilization 0.9 of the 80.00 GiB of a h100-80gb is 72.00 GiB; "
        "give a larger --tp or --pp, or a GPU with more memory");
}

// resolve_run_config as simulate calls it: command-line options only.
InputResult<RunConfig> resolve(ConfigOverrides cli) {
  cli.context_default = true;
  cli.kv_groups = true;
  cli.max_batched_tokens = 8192;
  cli.max_seqs = 1024;
  return resolve_run_config(nlohmann::json::object(), cli, "command line", 0);
}

TEST_CASE("run config: --gpu sizes the pool from one GPU's memory, every figure per GPU") {
  ConfigOverrides cli;
  cli.model = "llama-3-8b";  // an alias: named as given, sourced from the preset
  cli.gpu = "h100-80gb";
  auto run = resolve(cli);
  REQUIRE(run);
  const RunConfig& c = run.value();
  CHECK(c.model == "llama-3-8b");
  CHECK(c.model_source == "preset:llama-3.1-8b");
  CHECK(c.kv.max_seq_tokens == 131072);  // the model's context length
  // vLLM's rule (model/capacity.h, 0.21), by hand: the rank's weights
  // (embedding and lm_head, 32 layers of q/k/v/o and gate/up/down, two norms
  // each, the final norm, the rotary cache); the profile run's sampler peak
  // (1024 requests x 128256 logits x 14.9 bytes, beside the hidden states of
  // 8192 tokens), larger than its forward peak; 0.25 GiB outside torch; the
  // CUDA-graph estimate of 32 layers at the 51 default capture sizes.
  const std::uint64_t per_layer =
      (48ull * 128 * 4096 + 4096ull * 4096 + 3ull * 14336 * 4096 + 2 * 4096) * 2;
  const std::uint64_t weights =
      2 * 128256ull * 4096 * 2 + 32 * per_layer + 4096 * 2 + 131072ull * 128 * 2;
  const auto sampler = static_cast<std::uint64_t>(1024.0 * 128256 * 14.9 + 8192.0 * 4096 * 2);
  CHECK(sampler > 8192ull * 2 * (3 * 14336 + 4 * 4096));  // the forward peak is smaller
  const auto graphs = static_cast<std::uint64_t>((0.376 + 0.0167 * 32) * kGiB);
  const std::uint64_t reserve = sampler + graphs + kGiB / 4;
  const std::uint64_t budget = 78227670303ull;          // ceil(0.92 x 85,030,076,416)
  const std::uint64_t kv = budget - weights - reserve;  // 58,863,635,754
  CHECK(*c.weights_bytes_per_gpu == weights);
  CHECK(*c.activation_reserve_bytes == reserve);
  CHECK(*c.kv_memory == kv);
  CHECK(c.kv.pool_blocks == kv / (131072ull * 16));  // 28,068 blocks of 2 MiB
  REQUIRE(c.capacity);
  // 0.21's words: int(max concurrency x max_model_len), the concurrency being
  // blocks over the 8192 blocks one request of 131072 tokens needs.
  CHECK(c.capacity->tokens == static_cast<std::uint64_t>(28068.0 / 8192 * 131072));
  CHECK(*c.gpu_memory_utilization == 0.92);  // vLLM's default from 0.21
  const nlohmann::json json = c.to_json();
  CHECK(json["per_gpu"] == true);
  CHECK(json["gpu"] == "h100-80gb");
  CHECK(json["tp"] == 1);
  CHECK(json["bytes_per_token"] == 131072);
  CHECK(json["weights_bytes_per_gpu"] == weights);

  cli.tp = 4;
  cli.gpu_memory_utilization = 0.5;
  run = resolve(cli);
  REQUIRE(run);
  CHECK(run.value().kv.kv_heads == 2);
  CHECK(run.value().kv.bytes_per_token() == 2ull * 32 * 2 * 128 * 2);
  // At tp 4 each rank holds a quarter of every split matrix, the norms and
  // the rotary cache whole; the sampler's logits are the whole vocabulary.
  const std::uint64_t per_layer4 =
      ((8ull + 2 * 2) * 128 * 4096 + 4096ull * 1024 + 3ull * 3584 * 4096) * 2 + 2 * 4096 * 2;
  const std::uint64_t weights4 =
      2 * 32064ull * 4096 * 2 + 32 * per_layer4 + 4096 * 2 + 131072ull * 128 * 2;
  CHECK(*run.value().weights_bytes_per_gpu == weights4);
  const std::uint64_t budget4 = 42515038208ull;  // ceil(0.5 x 85,030,076,416)
  // tp 4 over NVLink: 2.02 + 0.04 x 4 GiB outside torch; one graph doubling
  // less per tp doubling.
  const auto graphs4 = static_cast<std::uint64_t>((0.376 + 0.0167 * 32 - 0.12 * 2) * kGiB);
  const auto non_torch4 = static_cast<std::uint64_t>((2.02 + 0.04 * 4) * kGiB);
  CHECK(*run.value().kv_memory == budget4 - weights4 - (sampler + graphs4 + non_torch4));
}

TEST_CASE("run config: --kv-memory and --pool-blocks still set the pool, --gpu then only records") {
  ConfigOverrides cli;
  cli.model = "qwen3-8b";
  cli.gpu = "h200";
  cli.kv_memory = "1GiB";
  auto run = resolve(cli);
  REQUIRE(run);
  CHECK(*run.value().kv_memory == kGiB);
  CHECK(!run.value().activation_reserve_bytes);
  CHECK(run.value().gpu == "h200");
  CHECK(run.value().kv.max_seq_tokens == 40960);
  cli.max_seq_tokens = 1000;
  CHECK(resolve(cli).value().kv.max_seq_tokens == 1000);
  // replay keeps kvtrace's default of 32768 (SPEC 2.1).
  ConfigOverrides replay;
  replay.model = "qwen3-8b";
  replay.pool_blocks = 10;
  CHECK(resolve_run_config(nlohmann::json::object(), replay, "t", 1).value().kv.max_seq_tokens ==
        32768);
}

TEST_CASE("run config: MLA and hybrid models per GPU") {
  ConfigOverrides cli;
  cli.model = "deepseek-v3";
  cli.gpu = "h200";
  cli.tp = 8;
  auto run = resolve(cli);
  REQUIRE(run);
  CHECK(run.value().kv.kv_tensors == 1);
  CHECK(run.value().kv.bytes_per_token() == 61ull * 576 * 2);  // replicated on every rank
  cli.model = "gemma-3-27b";
  cli.tp = 2;
  cli.pp = 2;
  run = resolve(cli);
  REQUIRE(run);
  // 62 layers on 2 stages: 31 each; stage 0 holds layers 0-30: full at 5, 11, 17, 23, 29.
  CHECK(run.value().kv.layers == 31);
  CHECK(run.value().kv.kv_heads == 8);
  // vLLM's groups of the stage's 31 layers (26 sliding, 5 full): group_size 5,
  // ceil(26 / 5) = 6 sliding groups (layers[i::6]: 5, 5, 4, 4, 4, 4) and 1 full.
  using G = KvCacheGroupSpec;
  CHECK(run.value().kv_groups == std::vector<G>{{G::kSliding, 1024, 5},
                                                {G::kSliding, 1024, 5},
                                                {G::kSliding, 1024, 4},
                                                {G::kSliding, 1024, 4},
                                                {G::kSliding, 1024, 4},
                                                {G::kSliding, 1024, 4},
                                                {G::kFull, 0, 5}});
  CHECK(run.value().kv.block_layers == 5);
  // A block is a page of 5 layers: the pool holds 31 / 5 times the blocks.
  CHECK(run.value().kv.block_bytes() == run.value().kv.bytes_per_token() / 31 * 5 * 16);
  // A replay keeps every layer full: no groups, a block of every layer.
  cli.kv_groups = false;
  run = resolve_run_config(nlohmann::json::object(), cli, "command line", 0);
  REQUIRE(run);
  CHECK(run.value().kv_groups.empty());
  CHECK(run.value().kv.block_layers == 0);
}

TEST_CASE("run config: deployment errors name the option and the figures") {
  auto error = [](ConfigOverrides cli) {
    auto run = resolve(std::move(cli));
    REQUIRE_FALSE(run);
    return run.error().to_string();
  };
  ConfigOverrides cli;
  cli.model = "llama-3.1-70b";
  cli.gpu = "h100-80gb";
  CHECK(error(cli) ==
        "command line: --gpu: llama-3.1-70b at --tp 1 --pp 1: the weights (131.45 GiB a GPU), "
        "the profile run (1.95 GiB), memory outside torch (0.25 GiB) and CUDA graphs (1.71 GiB) "
        "under --gpu-memory-utilization 0.92 leave -62.50 GiB for the KV cache of a h100-80gb "
        "(135.36 GiB taken, 72.86 GiB granted); give a larger --tp or --pp, a larger memory "
        "fraction, or a GPU with more memory");
  cli.gpu = "h100";
  CHECK(error(cli).rfind("command line: --gpu: unknown GPU 'h100' (known: a100-80gb, ", 0) == 0);
  cli.gpu.reset();
  cli.gpu_memory_utilization = 0.8;
  CHECK(error(cli) ==
        "command line: --gpu-memory-utilization: needs --gpu (the GPU whose memory it divides)");
  cli.gpu = "h100-80gb";
  cli.gpu_memory_utilization = 1.5;
  CHECK(error(cli) == "command line: --gpu-memory-utilization: 1.5 is not in (0, 1]");
  cli.gpu_memory_utilization.reset();
  cli.model = "qwen2.5-7b";
  cli.tp = 8;
  CHECK(error(cli) ==
        "command line: --tp: num_attention_heads 28 is not divisible by --tp 8 (vLLM refuses it)");
  cli.tp.reset();
  cli.pp = 29;
  CHECK(error(cli) == "command line: --pp: --pp 29 is more stages than the 28 layers");
  ConfigOverrides by_hand;
  by_hand.layers = 4;
  by_hand.kv_heads = 2;
  by_hand.head_dim = 64;
  by_hand.gpu = "h100-80gb";
  CHECK(error(by_hand) ==
        "command line: --gpu: sizing the pool from the GPU's memory needs the model's weights: "
        "give --model or --model-config (a geometry given by hand has none), or --kv-memory");
  ConfigOverrides both;
  both.model = "qwen3-8b";
  both.model_config = "config.json";
  both.pool_blocks = 4;
  CHECK(error(both) ==
        "command line: --model-config: give one of --model or --model-config, not both");
}

TEST_CASE("run config: a preset with a dimension changed by hand is no longer that preset") {
  ConfigOverrides cli;
  cli.model = "gpt-oss-20b";
  cli.layers = 12;
  cli.pool_blocks = 100;
  auto run = resolve(cli);
  REQUIRE(run);
  CHECK(run.value().model.empty());
  CHECK(run.value().model_source.empty());
  CHECK(!run.value().weights_bytes_per_gpu);
  CHECK(run.value().kv_groups.empty());  // by hand: full attention in every layer
  CHECK(run.value().kv.max_seq_tokens == 32768);
}

}  // namespace
}  // namespace kvreplay
