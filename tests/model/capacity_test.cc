// kvreplay capacity's rules (model/capacity.h) and a rank's weights
// (model/rank_weights.h), worked by hand from the engines' source.
#include <catch2/catch.hpp>

#include <cmath>

#include "model/capacity.h"
#include "model/gpu.h"
#include "model/presets.h"
#include "model/rank_weights.h"

namespace kvreplay {
namespace {

CapacityRequest on(const char* model, const char* gpu, CapacityEngine engine, std::uint32_t tp) {
  CapacityRequest r;
  r.engine = engine;
  r.model = &find_model_preset(model)->spec;
  const GpuSpec* g = find_gpu_preset(gpu);
  r.gpu_name = g->name;
  r.total_bytes = g->cuda_total_bytes;
  r.smi_mib = g->nvidia_smi_mib;
  r.tp = tp;
  r.kv_dtype = r.model->kv_dtype;
  return r;
}

}  // namespace

TEST_CASE("capacity: SGLang's default mem_fraction_static, by version, GPU and TP") {
  // server_args.py, _handle_gpu_memory_settings, 0.5.4 on: reserved = 512 +
  // 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + tp*pp/8 GiB,
  // at least 10 GiB above 60 GiB. H100 (81559 MiB), tp 1: 512 + 12288 + 512 +
  // 128 = 13440 -> round((81559 - 13440) / 81559, 3) = 0.835.
  auto r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kSglang, 1);
  CHECK(compute_capacity(r).value().fraction == Approx(0.835));
  r.tp = 8;  // 512 + 12288 + 1024 + 1024 = 14848 -> 0.818
  CHECK(compute_capacity(r).value().fraction == Approx(0.818));
  r = on("llama-3.1-8b", "h200", CapacityEngine::kSglang, 1);  // 143771 MiB -> 0.907
  CHECK(compute_capacity(r).value().fraction == Approx(0.907));
  // 0.4.6 - 0.5.3: (9.5 + tp*pp/2) GiB below 90 GiB -> H100 tp 1: 0.874.
  r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kSglang, 1);
  r.version = "0.5.0";
  CHECK(compute_capacity(r).value().fraction == Approx(0.874));
  // Up to 0.4.5: by TP size, tp 4 -> 0.85.
  r.version = "0.4.3";
  r.tp = 4;
  CHECK(compute_capacity(r).value().fraction == Approx(0.85));
  // A fraction given is used as given.
  r.fraction = 0.5;
  CHECK(compute_capacity(r).value().fraction == 0.5);
  CHECK_FALSE(compute_capacity(r).value().fraction_default);
}

TEST_CASE("capacity: SGLang's tokens are the KV bytes over the cell, down to the page") {
  auto r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kSglang, 1);
  r.fraction = 0.88;
  r.page_tokens = 64;
  const CapacityFigures f = compute_capacity(r).value();
  // rest = (total - context) - weights - (total - context) x 0.12
  const double pre = static_cast<double>(r.total_bytes) - static_cast<double>(f.non_torch_bytes);
  const double rest = pre - static_cast<double>(f.weights_bytes) - pre * (1 - 0.88);
  const std::uint64_t cell = 32ull * 8 * 128 * 2 * 2;
  CHECK(f.bytes_per_token == cell);
  CHECK(f.tokens == static_cast<std::uint64_t>(rest) / cell / 64 * 64);
  CHECK(f.tokens % 64 == 0);
}

TEST_CASE("capacity: SGLang's sliding-window pool gives the full layers' tokens") {
  // gpt-oss-20b: 12 full and 12 sliding layers; a sliding layer holds 0.8 of a
  // full layer's tokens from the same bytes (set_num_token_hybrid).
  auto r = on("gpt-oss-20b", "h100-80gb", CapacityEngine::kSglang, 1);
  r.fraction = 0.85;
  const CapacityFigures f = compute_capacity(r).value();
  const std::uint64_t cell = 24ull * 8 * 64 * 2 * 2;
  // A full-pool token costs a full layer's bytes and 0.8 of a sliding one's.
  CHECK(f.bytes_per_token == static_cast<std::uint64_t>(std::llround(2048.0 * (0.8 * 12 + 12))));
  const std::uint64_t uniform = f.kv_bytes / cell;  // page 1
  CHECK(f.tokens ==
        static_cast<std::uint64_t>(static_cast<double>(uniform) * 24 / (0.8 * 12 + 12)));
  CHECK(f.tokens > uniform);
}

TEST_CASE("capacity: vLLM's blocks, tokens and concurrency, the smallest rank deciding") {
  auto r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kVllm, 1);
  r.max_model_len = 32768;
  CapacityFigures f = compute_capacity(r).value();
  // blocks = floor(floor(KV / page) / layers), page = 16 tokens x 8 heads x 128 x 2 x 2 bytes.
  const std::uint64_t page = 16ull * 8 * 128 * 2 * 2;
  CHECK(f.blocks == f.kv_bytes / page / 32);
  CHECK(f.max_concurrency == Approx(static_cast<double>(f.blocks) / (32768 / 16)));
  // 0.21 on: int(concurrency x max_model_len); before: blocks x block_size.
  CHECK(f.tokens == static_cast<std::uint64_t>(f.max_concurrency * 32768));
  CHECK(f.cuda_graph_bytes > 0);
  r.version = "0.11.0";
  f = compute_capacity(r).value();
  CHECK(f.tokens == f.blocks * 16);
  CHECK(f.cuda_graph_bytes == 0);  // captured after the KV cache before 0.21
  r.version.clear();
  r.enforce_eager = true;
  CHECK(compute_capacity(r).value().cuda_graph_bytes == 0);

  // Pipeline stages: 126 layers on 2 stages (63 each); the last holds the
  // lm_head and the final norm, the first the embedding; the fewer blocks decide.
  r = on("llama-3.1-405b", "h200", CapacityEngine::kVllm, 8);
  r.pp = 2;
  f = compute_capacity(r).value();
  const RankWeights first = rank_weights(*r.model, 8, 2, 0);
  const RankWeights last = rank_weights(*r.model, 8, 2, 1);
  CHECK(first.embedding > 0);
  CHECK(first.lm_head == 0);
  CHECK(last.embedding == 0);
  CHECK(last.lm_head == first.embedding);  // untied, the same split
  // Both stages end with the same blocks here (the final norm is 32 KiB); the
  // first one found with the fewest decides.
  CHECK(f.weights_bytes == (f.deciding_stage == 0 ? first.total() : last.total()));
  CHECK(last.total() == first.total() + 16384 * 2);

  // MLA: one latent of kv_lora_rank + qk_rope_head_dim on every rank.
  r = on("deepseek-v3", "h200", CapacityEngine::kVllm, 8);
  f = compute_capacity(r).value();
  CHECK(f.bytes_per_token == 61ull * 576 * 2);
  CHECK(f.page_tokens == 64);
}

TEST_CASE("capacity: TensorRT-LLM's tokens round up to whole blocks of 32") {
  auto r = on("llama-3.1-8b-fp8", "h100-80gb", CapacityEngine::kTrtllm, 1);
  const CapacityFigures f = compute_capacity(r).value();
  CHECK(f.fraction == 0.9);
  const std::uint64_t peak = f.weights_bytes + f.activation_bytes + f.non_torch_bytes;
  CHECK(f.kv_bytes == static_cast<std::uint64_t>(0.9 * static_cast<double>(r.total_bytes - peak)));
  CHECK(f.bytes_per_token == 32ull * 8 * 128 * 2 * 1);  // the checkpoint's fp8 KV cache
  // 1.2 on: down to whole blocks; up to 1.1 (and 0.20), up.
  CHECK(f.tokens == f.kv_bytes / f.bytes_per_token / 32 * 32);
  CHECK(f.budget_bytes == r.total_bytes - peak);
  r.version = "0.20.0";
  const CapacityFigures up = compute_capacity(r).value();
  CHECK(up.tokens == (up.kv_bytes / up.bytes_per_token + 31) / 32 * 32);
  // No whole block: refused, as the engine cannot start.
  r.fraction = 1e-12;
  CHECK(compute_capacity(r).error().find("no block of 32 tokens fits") != std::string::npos);
}

TEST_CASE("capacity: a rank's weights, quantized layouts and the vocabulary's padding") {
  // Llama-3.1-8B, bf16, tp 1: every matrix, the norms and the rotary cache.
  const ModelSpec& llama = find_model_preset("llama-3.1-8b")->spec;
  RankWeights w = rank_weights(llama, 1, 1, 0);
  CHECK(w.embedding == 128256ull * 4096 * 2);
  CHECK(w.lm_head == w.embedding);
  CHECK(w.attention == 32 * (48ull * 128 * 4096 + 4096ull * 4096) * 2);
  CHECK(w.mlp == 32 * 3ull * 14336 * 4096 * 2);
  CHECK(w.buffers == 131072ull * 128 * 2);
  // tp 8 with 8 KV heads: one KV head a rank; the vocabulary split eight ways.
  w = rank_weights(llama, 8, 1, 0);
  CHECK(w.embedding == 16032ull * 4096 * 2);
  CHECK(w.attention == 32 * ((4 + 2) * 128ull * 4096 + 4096ull * 512) * 2);
  // FP8 (ModelOpt, one scale a tensor): the linear layers in one byte each.
  const ModelSpec& fp8 = find_model_preset("llama-3.1-8b-fp8")->spec;
  CHECK(rank_weights(fp8, 1, 1, 0).mlp == 32 * (3ull * 14336 * 4096 + 2 * 4));
  // gpt-oss's mxfp4 experts: 4-bit values and a scale a 32, the expert width
  // padded to 3072, bf16 biases, and the bf16 router.
  const ModelSpec& oss = find_model_preset("gpt-oss-20b")->spec;
  w = rank_weights(oss, 1, 1, 0);
  const std::uint64_t one = (2 * 3072ull * 2880 / 2 + 2 * 3072 * 90) +
                            (2880ull * 3072 / 2 + 2880ull * 96) + (2 * 3072 + 2880) * 2;
  CHECK(w.experts == 24 * (32 * one + 32ull * 2880 * 2 + 32 * 2));
}

TEST_CASE("capacity: impossible deployments are refused with the shortfall in GiB") {
  auto r = on("llama-3.1-70b", "h100-80gb", CapacityEngine::kVllm, 1);
  auto f = compute_capacity(r);
  REQUIRE_FALSE(f);
  CHECK(f.error().find("leave -62.50 GiB for the KV cache of a h100-80gb") != std::string::npos);
  r.engine = CapacityEngine::kSglang;
  REQUIRE_FALSE(compute_capacity(r));
  CHECK(compute_capacity(r).error().find("GiB for the KV cache") != std::string::npos);
  r.engine = CapacityEngine::kTrtllm;
  REQUIRE_FALSE(compute_capacity(r));
  r = on("qwen2.5-7b", "h100-80gb", CapacityEngine::kVllm, 8);  // 28 heads
  CHECK(compute_capacity(r).error() ==
        "num_attention_heads 28 is not divisible by --tp 8 (vLLM refuses it)");
  r.tp = 1;
  r.fraction = 1.5;
  CHECK(compute_capacity(r).error() == "the memory fraction 1.5 is outside (0, 1]");
  r.fraction = 0.0;
  CHECK(compute_capacity(r).error() == "the memory fraction 0 is outside (0, 1]");
  r.fraction = std::nan("");
  REQUIRE_FALSE(compute_capacity(r));
  // One request of max_model_len that does not fit: vLLM refuses to start.
  r = on("gpt-oss-120b", "h100-80gb", CapacityEngine::kVllm, 1);
  CHECK(compute_capacity(r).error().find("check_enough_kv_cache_memory") != std::string::npos);
  r.refuse_short_context = false;
  CHECK(compute_capacity(r));
  r.version = "zero";
  CHECK(compute_capacity(r).error() == "'zero' is not a version (A.B or A.B.C, e.g. 0.21)");
  r.version = "1.0";
  CHECK(compute_capacity(r).error() ==
        "--engine-version 1.0: vllm's rules are modelled for 0.7 - 0.31");
  // What the engines refuse at startup.
  r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kVllm, 1);
  r.max_model_len = 200000;
  CHECK(compute_capacity(r).error() ==
        "--max-model-len 200000 is past the model's max_position_embeddings 131072 (vLLM "
        "refuses it without an override)");
  r.max_model_len = 0;
  r.max_num_seqs = 9000;
  CHECK(compute_capacity(r).error() ==
        "--max-num-seqs 9000 is more than --max-num-batched-tokens 8192 (vLLM's SchedulerConfig "
        "refuses it)");
  r = on("llama-3.1-8b", "h100-80gb", CapacityEngine::kSglang, 3);
  CHECK(compute_capacity(r).error() ==
        "num_attention_heads 32 is not divisible by --tp 3 (SGLang refuses it)");
  // SGLang's default fraction past zero: the reserve for a huge chunked prefill.
  r.tp = 1;
  r.max_num_batched_tokens = 60000;
  CHECK(compute_capacity(r).error().find("SGLang's default mem_fraction_static comes to -0.118") ==
        0);
}

}  // namespace kvreplay
