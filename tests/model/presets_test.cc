// Model presets, one case each: the geometry the preset's config.json gives,
// bytes per token worked out by hand from its fields, and the parameter count
// worked out by hand and held to within 1% of the published size. Counts are
// of weight matrices (model/model_config.h): norms and biases are left out.
// "active" excludes the input embedding table (see model_config.h); where a
// vendor's published active count includes it, the test adds it back first.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>

#include "core/config.h"
#include "model/presets.h"

namespace kvreplay {
namespace {

const ModelSpec& spec_of(const char* name) {
  const ModelPreset* preset = find_model_preset(name);
  REQUIRE(preset != nullptr);
  return preset->spec;
}

// |count - published| <= 1% of published.
bool within_1_percent(std::uint64_t count, double published) {
  return std::abs(static_cast<double>(count) - published) <= 0.01 * published;
}

// Parameters of one standard (GQA) attention layer: q and o are hidden x
// heads*head_dim, k and v hidden x kv_heads*head_dim.
constexpr std::uint64_t gqa_attention(std::uint64_t hidden, std::uint64_t heads,
                                      std::uint64_t kv_heads, std::uint64_t head_dim) {
  return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim;
}

TEST_CASE("presets: every preset is listed once, reads, and every alias names a preset") {
  CHECK(model_presets().size() == 15u);
  for (const char* name :
       {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.1-8b-fp8", "llama-3.1-70b-fp8",
        "llama-3.1-405b-fp8", "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-v3",
        "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "mistral-7b", "qwen2.5-7b"}) {
    INFO(name);
    const ModelPreset* preset = find_model_preset(name);
    REQUIRE(preset != nullptr);
    CHECK(preset->name == name);
    CHECK(preset->spec.layer_attention.size() == preset->spec.layers);
  }
  // kvreplay's first presets are aliases now, of the models with their geometry.
  CHECK(find_model_preset("llama-3-8b") == find_model_preset("llama-3.1-8b"));
  CHECK(find_model_preset("llama-3-70b") == find_model_preset("llama-3.1-70b"));
  CHECK(find_model_preset("llama-3-8B") == nullptr);
  CHECK(find_model_preset("gpt-5") == nullptr);
  CHECK(find_model_preset("") == nullptr);
  CHECK(model_preset_list().find("gemma-3-27b") != std::string::npos);
  CHECK(model_preset_list().find("llama-3-8b = llama-3.1-8b") != std::string::npos);
}

TEST_CASE("presets: Hugging Face ids resolve to the preset of the same checkpoint") {
  // Every alias with an owner names a preset that exists.
  std::size_t hub_ids = 0;
  for (const auto& [alias, target] : model_preset_aliases()) {
    INFO(alias);
    CHECK(find_model_preset(target) != nullptr);
    hub_ids += alias.find('/') != std::string::npos ? 1 : 0;
  }
  CHECK(hub_ids >= 15);
  CHECK(find_model_preset("meta-llama/Llama-3.1-8B-Instruct") == find_model_preset("llama-3.1-8b"));
  // The hub's ids are case-insensitive; kvreplay's own names are not.
  CHECK(find_model_preset("META-LLAMA/llama-3.1-8b-instruct") == find_model_preset("llama-3.1-8b"));
  CHECK(find_model_preset("deepseek-ai/DeepSeek-R1") == find_model_preset("deepseek-v3"));
  CHECK(find_model_preset("nvidia/Llama-3.3-70B-Instruct-FP8") ==
        find_model_preset("llama-3.1-70b-fp8"));
  CHECK(find_model_preset("meta-llama/Llama-3.1-8B-Instruct-x") == nullptr);
  CHECK(find_model_preset("Llama-3.1-8B") == nullptr);
  // The message lists the short aliases and says the hub's ids resolve.
  CHECK(model_preset_list().find("meta-llama/Llama-3.1-8B-Instruct)") != std::string::npos);
  CHECK(model_preset_list().find("Qwen/Qwen3-32B") == std::string::npos);
}

TEST_CASE("presets: llama-3.1-8b") {
  const ModelSpec& m = spec_of("llama-3.1-8b");
  CHECK(m.layers == 32);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 128);  // hidden 4096 / 32 heads: no head_dim field
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.dtype == Dtype::kBf16);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 32 * 8 * 128 * 2);  // 131072
  // embed + lm_head 2 * 128256 * 4096; per layer attention + MLP 3 * 4096 * 14336.
  const std::uint64_t total =
      2ull * 128256 * 4096 + 32 * (gqa_attention(4096, 32, 8, 128) + 3ull * 4096 * 14336);
  CHECK(m.parameters.total == total);  // 8,029,995,008
  CHECK(m.parameters.active == total - 128256ull * 4096);
  CHECK(within_1_percent(m.parameters.total, 8.03e9));  // model card: 8.03B
  CHECK(m.weight_bytes == 2 * total);
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kFull, 0, 32}});
}

TEST_CASE("presets: the ModelOpt FP8 Llamas: 1-byte linear layers, W8A8") {
  for (const char* name : {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b"}) {
    INFO(name);
    const ModelSpec& bf16 = spec_of(name);
    const ModelSpec& fp8 = spec_of((std::string(name) + "-fp8").c_str());
    CHECK(fp8.parameters.total == bf16.parameters.total);
    CHECK(fp8.full_attention_bytes_per_token(Dtype::kBf16) ==
          bf16.full_attention_bytes_per_token(Dtype::kBf16));
    // The embedding and the untied lm_head stay bf16; every other parameter is 1 byte.
    const std::uint64_t tables = 2ull * bf16.vocab_size * bf16.hidden_size;
    CHECK(fp8.weight_bytes == 2 * tables + (bf16.parameters.total - tables));
    CHECK(fp8.fp8_linear);
    CHECK(fp8.fp8_activations);
    CHECK_FALSE(bf16.fp8_activations);
    CHECK(fp8.kv_dtype == Dtype::kFp8);  // kv_cache_quant_algo FP8
    CHECK(bf16.kv_dtype == Dtype::kBf16);
  }
}

TEST_CASE("presets: llama-3.1-70b") {
  const ModelSpec& m = spec_of("llama-3.1-70b");
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 80 * 8 * 128 * 2);  // 327680
  const std::uint64_t total =
      2ull * 128256 * 8192 + 80 * (gqa_attention(8192, 64, 8, 128) + 3ull * 8192 * 28672);
  CHECK(m.parameters.total == total);                   // 70,552,387,584
  CHECK(within_1_percent(m.parameters.total, 70.6e9));  // model card: 70.6B
  CHECK(m.max_position_embeddings == 131072);
}

TEST_CASE("presets: llama-3.1-405b") {
  const ModelSpec& m = spec_of("llama-3.1-405b");
  CHECK(m.layers == 126);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 126 * 8 * 128 * 2);  // 516096
  const std::uint64_t total =
      2ull * 128256 * 16384 + 126 * (gqa_attention(16384, 128, 8, 128) + 3ull * 16384 * 53248);
  CHECK(m.parameters.total == total);                    // 405,849,243,648
  CHECK(within_1_percent(m.parameters.total, 405.9e9));  // model card: 405.9B (406B)
}

TEST_CASE("presets: qwen3-8b") {
  const ModelSpec& m = spec_of("qwen3-8b");
  CHECK(m.layers == 36);
  CHECK(m.head_dim == 128);
  CHECK(m.max_position_embeddings == 40960);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 36 * 8 * 128 * 2);  // 147456
  const std::uint64_t non_embedding = 36 * (gqa_attention(4096, 32, 8, 128) + 3ull * 4096 * 12288);
  CHECK(m.parameters.total == 2ull * 151936 * 4096 + non_embedding);  // 8,190,427,136
  CHECK(within_1_percent(m.parameters.total, 8.2e9));                 // model card: 8.2B
  CHECK(within_1_percent(non_embedding, 6.95e9));  // model card: 6.95B non-embedding
  // sliding_window is null and use_sliding_window false: every layer is full.
  CHECK(m.sliding_window == 0);
}

TEST_CASE("presets: qwen3-32b") {
  const ModelSpec& m = spec_of("qwen3-32b");
  // head_dim 128 is given: 64 heads * 128 = 8192, not hidden_size 5120.
  CHECK(m.head_dim == 128);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 64 * 8 * 128 * 2);  // 262144
  const std::uint64_t non_embedding = 64 * (gqa_attention(5120, 64, 8, 128) + 3ull * 5120 * 25600);
  CHECK(m.parameters.total == 2ull * 151936 * 5120 + non_embedding);  // 32,761,446,400
  CHECK(within_1_percent(m.parameters.total, 32.8e9));                // model card: 32.8B
  CHECK(within_1_percent(non_embedding, 31.2e9));  // model card: 31.2B non-embedding
}

TEST_CASE("presets: qwen3-235b-a22b (MoE)") {
  const ModelSpec& m = spec_of("qwen3-235b-a22b");
  CHECK(m.layers == 94);
  CHECK(m.kv_heads == 4);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 94 * 4 * 128 * 2);  // 192512
  // Every layer is MoE (decoder_sparse_step 1, mlp_only_layers []): a router of
  // 4096 x 128 and 128 experts of 3 * 4096 * 1536, 8 of them per token.
  const std::uint64_t expert = 3ull * 4096 * 1536;
  const std::uint64_t per_layer = gqa_attention(4096, 64, 4, 128) + 4096ull * 128;
  const std::uint64_t embedding = 151936ull * 4096;
  const std::uint64_t total = 2 * embedding + 94 * (per_layer + 128 * expert);
  const std::uint64_t active = embedding + 94 * (per_layer + 8 * expert);
  CHECK(m.parameters.total == total);                  // 235,092,836,352
  CHECK(m.parameters.active == active);                // 21,567,635,456
  CHECK(within_1_percent(m.parameters.total, 235e9));  // model card: 235B total
  // Qwen's 22B activated counts the input embedding too: 22,189,965,312.
  CHECK(within_1_percent(m.parameters.active + embedding, 22e9));
  CHECK(m.mlp_width == 8ull * 1536);
}

TEST_CASE("presets: deepseek-v3 (MLA, MoE, fp8 weights)") {
  const ModelSpec& m = spec_of("deepseek-v3");
  CHECK(m.mla);
  CHECK(m.layers == 61);
  CHECK(m.kv_heads == 1);         // one latent, whatever num_key_value_heads (128) says
  CHECK(m.head_dim == 512 + 64);  // kv_lora_rank + qk_rope_head_dim
  CHECK(m.max_position_embeddings == 163840);
  // One latent per token per layer, no separate K and V: 61 * 576 * 2 = 70,272.
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 61ull * (512 + 64) * 2);
  // MLA projections: q_a 7168x1536, q_b 1536 x 128*(128+64), kv_a 7168 x (512+64),
  // kv_b 512 x 128*(128+128), o 128*128 x 7168.
  const std::uint64_t attention = 7168ull * 1536 + 1536ull * 128 * (128 + 64) +
                                  7168ull * (512 + 64) + 512ull * 128 * (128 + 128) +
                                  128ull * 128 * 7168;
  const std::uint64_t dense = 3ull * 7168 * 18432;  // the first 3 layers (first_k_dense_replace)
  const std::uint64_t expert = 3ull * 7168 * 2048;  // moe_intermediate_size 2048
  const std::uint64_t router = 7168ull * 256;
  const std::uint64_t embedding = 129280ull * 7168;
  const std::uint64_t total = 2 * embedding + 61 * attention + 3 * dense +
                              58 * (router + (256 + 1) * expert);  // 256 routed, 1 shared
  const std::uint64_t active = embedding + 61 * attention + 3 * dense +
                               58 * (router + (8 + 1) * expert);  // 8 routed, 1 shared
  CHECK(m.parameters.total == total);                             // 671,025,397,760
  CHECK(m.parameters.active == active);                           // 36,624,596,992
  CHECK(within_1_percent(m.parameters.total, 671e9));  // paper and README_WEIGHTS.md: 671B
  // README_WEIGHTS.md: 36.7B activated (the paper rounds to 37B; counting the
  // input embedding as well would make 37.55B).
  CHECK(within_1_percent(m.parameters.active, 36.7e9));
  // quantization_config fp8: linear layers 1 byte, embeddings and routers bf16.
  CHECK(m.weight_bytes ==
        (2 * embedding + 58 * router) * 2 + (61 * attention + 3 * dense + 58 * 257 * expert));
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kFull, 0, 61}});
}

TEST_CASE("presets: gpt-oss-20b (sliding window every other layer, mxfp4 experts)") {
  const ModelSpec& m = spec_of("gpt-oss-20b");
  CHECK(m.layers == 24);
  CHECK(m.head_dim == 64);
  CHECK(m.dtype == Dtype::kBf16);  // the config names no dtype: vLLM serves bf16
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 24 * 8 * 64 * 2);  // 49152
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kSliding, 128, 12},
                                                         {AttentionKind::kFull, 0, 12}});
  CHECK(m.layer_attention[0] == AttentionKind::kSliding);
  CHECK(m.layer_attention[1] == AttentionKind::kFull);
  // 32 experts of gate_up 2880 x 2*2880 and down 2880 x 2880, 4 per token.
  const std::uint64_t expert = 3ull * 2880 * 2880;
  const std::uint64_t per_layer = gqa_attention(2880, 64, 8, 64) + 2880ull * 32;
  const std::uint64_t embedding = 201088ull * 2880;
  const std::uint64_t total = 2 * embedding + 24 * (per_layer + 32 * expert);
  const std::uint64_t active = embedding + 24 * (per_layer + 4 * expert);
  CHECK(m.parameters.total == total);    // 20,907,786,240
  CHECK(m.parameters.active == active);  // 3,607,142,400
  // OpenAI's model card: 20.91B total, 3.61B active (unembedding counted, embedding not).
  CHECK(within_1_percent(m.parameters.total, 20.91e9));
  CHECK(within_1_percent(m.parameters.active, 3.61e9));
  // mxfp4: experts in 17/32 byte (4-bit values, an 8-bit scale per 32), the rest bf16.
  CHECK(m.weight_bytes ==
        (2 * embedding + 24 * per_layer) * 2 + (24ull * 32 * expert * 17 + 31) / 32);
}

TEST_CASE("presets: gpt-oss-120b") {
  const ModelSpec& m = spec_of("gpt-oss-120b");
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 36 * 8 * 64 * 2);  // 73728
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kSliding, 128, 18},
                                                         {AttentionKind::kFull, 0, 18}});
  const std::uint64_t expert = 3ull * 2880 * 2880;
  const std::uint64_t per_layer = gqa_attention(2880, 64, 8, 64) + 2880ull * 128;
  const std::uint64_t embedding = 201088ull * 2880;
  CHECK(m.parameters.total == 2 * embedding + 36 * (per_layer + 128 * expert));  // 116.79B
  CHECK(m.parameters.active == embedding + 36 * (per_layer + 4 * expert));       // 5.13B
  CHECK(within_1_percent(m.parameters.total, 116.83e9));  // model card: 116.83B
  CHECK(within_1_percent(m.parameters.active, 5.13e9));   // model card: 5.13B
  // The weights fit one 80 GB GPU, as OpenAI says: about 60.7 GiB.
  CHECK(m.weight_bytes < 64ull << 30);
}

TEST_CASE("presets: gemma-3-27b (text_config, five of six layers sliding)") {
  const ModelSpec& m = spec_of("gemma-3-27b");
  CHECK(m.model_type == "gemma3_text");
  CHECK(m.layers == 62);
  CHECK(m.kv_heads == 16);
  CHECK(m.head_dim == 128);
  // Left out of the published text_config: Gemma3TextConfig's defaults
  // (model_type_defaults.json).
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.vocab_size == 262208);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 62 * 16 * 128 * 2);  // 507904
  // sliding_window_pattern 6: layers 5, 11, ..., 59 full (10), the other 52 slide.
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kSliding, 1024, 52},
                                                         {AttentionKind::kFull, 0, 10}});
  CHECK(m.layer_attention[5] == AttentionKind::kFull);
  CHECK(m.layer_attention[61] == AttentionKind::kSliding);
  // The language model only: the SigLIP vision encoder (417M) is not counted.
  // Embeddings are tied (tie_word_embeddings absent: transformers' default).
  const std::uint64_t embedding = 262208ull * 5376;
  const std::uint64_t non_embedding = 62 * (gqa_attention(5376, 32, 16, 128) + 3ull * 5376 * 21504);
  CHECK(m.parameters.total == embedding + non_embedding);  // 27,007,991,808
  CHECK(m.parameters.active == m.parameters.total);        // the tied table is the lm_head
  // Gemma 3 report, Table 1: 1,416M embedding + 25,600M non-embedding = 27.0B
  // (27.4B with the vision encoder).
  CHECK(within_1_percent(non_embedding, 25.6e9));
  CHECK(within_1_percent(m.parameters.total, 27.016e9));
}

TEST_CASE("presets: mistral-7b") {
  const ModelSpec& m = spec_of("mistral-7b");
  CHECK(m.max_position_embeddings == 32768);
  CHECK(m.sliding_window == 0);  // v0.3: sliding_window null
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 32 * 8 * 128 * 2);  // 131072
  const std::uint64_t total =
      2ull * 32768 * 4096 + 32 * (gqa_attention(4096, 32, 8, 128) + 3ull * 4096 * 14336);
  CHECK(m.parameters.total == total);                   // 7,247,757,312
  CHECK(within_1_percent(m.parameters.total, 7.25e9));  // model card (v0.3): 7.25B
}

TEST_CASE("presets: qwen2.5-7b") {
  const ModelSpec& m = spec_of("qwen2.5-7b");
  CHECK(m.kv_heads == 4);
  CHECK(m.head_dim == 128);  // hidden 3584 / 28 heads
  CHECK(m.max_position_embeddings == 32768);
  // sliding_window 131072 but use_sliding_window false: every layer is full.
  CHECK(m.sliding_window == 0);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 28 * 4 * 128 * 2);  // 57344
  const std::uint64_t non_embedding = 28 * (gqa_attention(3584, 28, 4, 128) + 3ull * 3584 * 18944);
  CHECK(m.parameters.total == 2ull * 152064 * 3584 + non_embedding);  // 7,615,283,200
  CHECK(within_1_percent(m.parameters.total, 7.61e9));                // model card: 7.61B
  CHECK(within_1_percent(non_embedding, 6.53e9));  // model card: 6.53B non-embedding
}

TEST_CASE("presets: llama-3-70b, an alias, derives 320 KiB per token") {
  const ModelSpec& m = spec_of("llama-3-70b");
  PagedKvConfig config{.layers = m.layers,
                       .kv_heads = m.kv_heads,
                       .head_dim = m.head_dim,
                       .dtype = Dtype::kBf16,
                       .page_tokens = 16,
                       .pool_blocks = 1000,
                       .max_seq_tokens = 4096};
  CHECK(config.bytes_per_token() == 327680u);  // 2 * 80 * 8 * 128 * 2
  CHECK(config.block_bytes() == 5u * 1024u * 1024u);
}

}  // namespace
}  // namespace kvreplay
