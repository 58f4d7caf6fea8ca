// The config.json reader: what each field gives, the Hugging Face conventions
// it follows (absent and null fields, text_config, model-type defaults), and
// every refusal with its exact message.
#include "model/model_config.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvreplay {
namespace {

// A small Llama-shaped config: 4 layers, hidden 64, 8 heads of 8, 2 KV heads.
nlohmann::json llama_like() {
  return nlohmann::json{
      {"model_type", "llama"},    {"num_hidden_layers", 4},          {"hidden_size", 64},
      {"num_attention_heads", 8}, {"num_key_value_heads", 2},        {"intermediate_size", 128},
      {"vocab_size", 1000},       {"max_position_embeddings", 2048}, {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"}};
}

ModelSpec read_ok(const nlohmann::json& config) {
  auto spec = read_model_config(config, "m.json");
  if (!spec) FAIL("read failed: " << spec.error().to_string());
  return std::move(spec).value();
}

std::string read_error(const nlohmann::json& config) {
  auto spec = read_model_config(config, "m.json");
  if (spec) FAIL("read succeeded: expected an error");
  return spec.error().to_string();
}

TEST_CASE("model config: a Llama-shaped config derives geometry, context and parameters") {
  const ModelSpec m = read_ok(llama_like());
  CHECK(m.layers == 4);
  CHECK(m.kv_heads == 2);
  CHECK(m.head_dim == 8);  // 64 / 8
  CHECK(m.max_position_embeddings == 2048);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 4 * 2 * 8 * 2);
  CHECK(m.full_attention_bytes_per_token(Dtype::kFp8) == 2ull * 4 * 2 * 8 * 1);
  // 2 * 1000*64 embeddings; per layer q,o 64x64, k,v 64x16, MLP 3 * 64 * 128.
  const std::uint64_t per_layer = 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 128;
  CHECK(m.parameters.total == 2 * 1000 * 64 + 4 * per_layer);
  CHECK(m.parameters.active == 1000 * 64 + 4 * per_layer);
  CHECK(m.weight_bytes == 2 * m.parameters.total);
  CHECK(m.mlp_width == 128);
}

TEST_CASE("model config: absent and null fields follow transformers' defaults") {
  nlohmann::json config = llama_like();
  config.erase("num_key_value_heads");  // absent: as many as the attention heads
  config["head_dim"] = nullptr;         // null: hidden_size / num_attention_heads
  config.erase("tie_word_embeddings");  // absent: tied (PretrainedConfig's default)
  config.erase("torch_dtype");          // absent: float32, which vLLM serves in bf16
  const ModelSpec m = read_ok(config);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 8);
  CHECK(m.dtype == Dtype::kBf16);
  const std::uint64_t per_layer = 4 * 64 * 64 + 3 * 64 * 128;
  CHECK(m.parameters.total == 1000 * 64 + 4 * per_layer);  // one tied table
  CHECK(m.parameters.active == m.parameters.total);
  config["torch_dtype"] = "float16";
  CHECK(read_ok(config).dtype == Dtype::kFp16);
  config.erase("torch_dtype");
  config["dtype"] = "float32";  // newer transformers write "dtype"
  CHECK(read_ok(config).dtype == Dtype::kBf16);
  config["head_dim"] = 16;  // given: it wins over hidden / heads
  CHECK(read_ok(config).head_dim == 16);
}

TEST_CASE("model config: a nested text_config holds the language model") {
  nlohmann::json text = llama_like();
  text.erase("torch_dtype");
  nlohmann::json config = {{"model_type", "some_vlm"},
                           {"torch_dtype", "float16"},
                           {"text_config", text},
                           {"vision_config", {{"hidden_size", 12}}}};
  const ModelSpec m = read_ok(config);
  CHECK(m.layers == 4);
  CHECK(m.dtype == Dtype::kFp16);  // from the top level
  config["text_config"].erase("num_hidden_layers");
  config["num_hidden_layers"] = 99;  // the top level's is not the language model's
  CHECK(read_error(config) == "m.json: text_config.num_hidden_layers: missing");
}

TEST_CASE("model config: missing, mistyped and out-of-range fields name the field") {
  auto without = [](const char* key) {
    nlohmann::json config = llama_like();
    config.erase(key);
    return read_error(config);
  };
  CHECK(without("num_hidden_layers") == "m.json: num_hidden_layers: missing");
  CHECK(without("hidden_size") == "m.json: hidden_size: missing");
  CHECK(without("num_attention_heads") == "m.json: num_attention_heads: missing");
  CHECK(without("vocab_size") == "m.json: vocab_size: missing");
  CHECK(without("max_position_embeddings") == "m.json: max_position_embeddings: missing");
  CHECK(without("intermediate_size") ==
        "m.json: intermediate_size: missing, and 4 of 4 layers have a dense MLP");
  auto with = [](const char* key, nlohmann::json value) {
    nlohmann::json config = llama_like();
    config[key] = std::move(value);
    return read_error(config);
  };
  CHECK(with("num_hidden_layers", "32") ==
        "m.json: num_hidden_layers: expected an integer, got \"32\"");
  CHECK(with("num_hidden_layers", 32.0) ==
        "m.json: num_hidden_layers: expected an integer, got 32.0");
  CHECK(with("num_hidden_layers", 0) == "m.json: num_hidden_layers: 0 must be >= 1");
  CHECK(with("num_hidden_layers", -3) == "m.json: num_hidden_layers: -3 must be >= 1");
  CHECK(with("num_hidden_layers", 1 << 20) ==
        "m.json: num_hidden_layers: 1048576 is too large (at most 65536)");
  CHECK(with("num_hidden_layers", nullptr) == "m.json: num_hidden_layers: missing");
  CHECK(with("tie_word_embeddings", "no") ==
        "m.json: tie_word_embeddings: expected true or false, got \"no\"");
  CHECK(with("torch_dtype", "int8") ==
        "m.json: torch_dtype: 'int8' is not a dtype kvreplay serves (bfloat16, float16, float32)");
  CHECK(with("torch_dtype", 16) == "m.json: torch_dtype: expected a string, got 16");
  CHECK(with("hidden_size", 65) ==
        "m.json: head_dim: missing, and hidden_size 65 is not a multiple of num_attention_heads 8");
  CHECK(read_error(nlohmann::json::array()) == "m.json: json: expected an object, got []");
}

TEST_CASE("model config: sliding windows from layer_types, a pattern, or the window alone") {
  nlohmann::json config = llama_like();
  config["sliding_window"] = 128;
  config["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                           "full_attention"};
  ModelSpec m = read_ok(config);
  CHECK(m.sliding_window == 128);
  CHECK(m.kv_cache_groups() ==
        std::vector<KvCacheGroup>{{AttentionKind::kSliding, 128, 2}, {AttentionKind::kFull, 0, 2}});
  CHECK(m.kv_cache_groups(1, 2) ==
        std::vector<KvCacheGroup>{{AttentionKind::kFull, 0, 1}, {AttentionKind::kSliding, 128, 1}});
  // bytes per token stay full attention's in every layer: what a replay writes.
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 2ull * 4 * 2 * 8 * 2);

  config.erase("layer_types");
  config["sliding_window_pattern"] = 2;  // Gemma: every 2nd layer full
  CHECK(read_ok(config).kv_cache_groups() ==
        std::vector<KvCacheGroup>{{AttentionKind::kSliding, 128, 2}, {AttentionKind::kFull, 0, 2}});
  config.erase("sliding_window_pattern");  // Mistral v0.1: the window alone, every layer
  CHECK(read_ok(config).kv_cache_groups() ==
        std::vector<KvCacheGroup>{{AttentionKind::kSliding, 128, 4}});
  config["use_sliding_window"] = true;  // Qwen: max_window_layers stay full
  config["max_window_layers"] = 3;
  CHECK(read_ok(config).kv_cache_groups() ==
        std::vector<KvCacheGroup>{{AttentionKind::kFull, 0, 3}, {AttentionKind::kSliding, 128, 1}});
  config["use_sliding_window"] = false;  // Qwen2.5: the window is off
  m = read_ok(config);
  CHECK(m.sliding_window == 0);
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kFull, 0, 4}});
}

TEST_CASE("model config: attention it cannot model is refused, naming the field") {
  nlohmann::json config = llama_like();
  config["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  CHECK(read_error(config) == "m.json: layer_types: 3 entries for 4 layers (num_hidden_layers)");
  config["layer_types"] = {"full_attention", "linear_attention", "full_attention",
                           "full_attention"};
  CHECK(read_error(config) ==
        "m.json: layer_types[1]: 'linear_attention' is not modelled "
        "(full_attention, sliding_attention)");
  config["layer_types"] = {"full_attention", "sliding_attention", "full_attention",
                           "full_attention"};
  CHECK(read_error(config) ==
        "m.json: sliding_window: missing, 0 or turned off "
        "(use_sliding_window), while layer_types names sliding layers");
  config["layer_types"] = "full_attention";
  CHECK(read_error(config) == "m.json: layer_types: expected an array, got \"full_attention\"");
  config.erase("layer_types");
  config["attention_chunk_size"] = 8192;
  CHECK(read_error(config) == "m.json: attention_chunk_size: chunked attention is not modelled");
}

TEST_CASE("model config: MLA keeps one latent per token per layer") {
  nlohmann::json config = llama_like();
  config["kv_lora_rank"] = 32;
  config["qk_rope_head_dim"] = 8;
  config["qk_nope_head_dim"] = 16;
  config["v_head_dim"] = 16;
  config["q_lora_rank"] = nullptr;  // DeepSeek-V2-Lite: q projected directly
  const ModelSpec m = read_ok(config);
  CHECK(m.mla);
  CHECK(m.kv_heads == 1);
  CHECK(m.head_dim == 40);
  CHECK(m.full_attention_bytes_per_token(Dtype::kBf16) == 4ull * 40 * 2);  // 1 latent, no K/V
  // q 64 x 8*(16+8), kv_a 64 x (32+8), kv_b 32 x 8*(16+16), o 8*16 x 64.
  const std::uint64_t attention = 64 * 8 * 24 + 64 * 40 + 32 * 8 * 32 + 8 * 16 * 64;
  CHECK(m.parameters.total == 2 * 1000 * 64 + 4 * (attention + 3 * 64 * 128));
  config.erase("v_head_dim");
  CHECK(read_error(config) == "m.json: v_head_dim: missing");
}

TEST_CASE("model config: mixtures of experts, by each family's field names") {
  nlohmann::json config = llama_like();
  config["n_routed_experts"] = 8;  // DeepSeek
  config["num_experts_per_tok"] = 2;
  config["n_shared_experts"] = 1;
  config["moe_intermediate_size"] = 32;
  config["first_k_dense_replace"] = 1;
  ModelSpec m = read_ok(config);
  const std::uint64_t attention = 2 * 64 * 64 + 2 * 64 * 16;
  const std::uint64_t expert = 3 * 64 * 32;
  const std::uint64_t embedding = 1000 * 64;
  CHECK(m.parameters.total ==
        2 * embedding + 4 * attention + 3 * 64 * 128 + 3 * (64 * 8 + 9 * expert));
  CHECK(m.parameters.active ==
        embedding + 4 * attention + 3 * 64 * 128 + 3 * (64 * 8 + 3 * expert));
  CHECK(m.mlp_width == 128);  // the dense layer's 128 is wider than 3 * 32

  config = llama_like();
  config["num_experts"] = 4;  // Qwen3-MoE
  config["num_experts_per_tok"] = 1;
  config["moe_intermediate_size"] = 32;
  config["mlp_only_layers"] = {0};
  config["decoder_sparse_step"] = 1;
  m = read_ok(config);
  CHECK(m.parameters.total ==
        2 * embedding + 4 * attention + 3 * 64 * 128 + 3 * (64 * 4 + 4 * expert));

  config = llama_like();
  config["num_local_experts"] = 4;  // gpt-oss, Mixtral: experts of intermediate_size
  config["experts_per_token"] = 2;
  m = read_ok(config);
  CHECK(m.parameters.total == 2 * embedding + 4 * (attention + 64 * 4 + 4 * 3 * 64 * 128));
  CHECK(m.mlp_width == 2 * 128);

  config.erase("experts_per_token");
  CHECK(read_error(config) ==
        "m.json: num_experts_per_tok: missing (nor is there experts_per_token)");
  config["num_experts_per_tok"] = 5;
  CHECK(read_error(config) == "m.json: num_experts_per_tok: 5 is too large (at most 4)");
  config["num_experts_per_tok"] = 1;
  config["mlp_only_layers"] = {7};
  CHECK(read_error(config) == "m.json: mlp_only_layers[0]: 7 is too large (at most 3)");
}

TEST_CASE("model config: quantization_config sets the weights' bytes") {
  nlohmann::json config = llama_like();
  config["num_local_experts"] = 4;
  config["num_experts_per_tok"] = 1;
  const std::uint64_t embedding = 1000 * 64;
  const std::uint64_t attention = 4 * (2 * 64 * 64 + 2 * 64 * 16);
  const std::uint64_t router = 4 * 64 * 4;
  const std::uint64_t experts = 4 * 4 * 3 * 64 * 128;
  config["quantization_config"] = {{"quant_method", "fp8"}};
  CHECK(read_ok(config).weight_bytes == (2 * embedding + router) * 2 + attention + experts);
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  CHECK(read_ok(config).weight_bytes ==
        (2 * embedding + router + attention) * 2 + (experts * 17 + 31) / 32);
  // AWQ: 4-bit linear layers; its group size and bits are required.
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}};
  CHECK(read_ok(config).weight_bytes == (2 * embedding + router) * 2 + (attention + experts) / 2);
  CHECK(read_ok(config).shape.quant == WeightQuant::kInt4Awq);
  config["quantization_config"] = {{"quant_method", "awq"}};
  CHECK(read_error(config) ==
        "m.json: quantization_config.bits: awq: only 4-bit weights are modelled, got none");
  config["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 128}};
  CHECK(read_error(config) ==
        "m.json: quantization_config.bits: gptq: only 4-bit weights are modelled, got 8");
  config["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  CHECK(read_error(config) ==
        "m.json: quantization_config.quant_method: 'bitsandbytes' is not modelled (fp8, "
        "modelopt, compressed-tensors, mxfp4, awq, gptq)");
  config["quantization_config"] = nlohmann::json::object();
  CHECK(read_error(config) == "m.json: quantization_config.quant_method: missing");
}

TEST_CASE("model config: ModelOpt and compressed-tensors FP8 checkpoints, W8A8 or W8A16") {
  nlohmann::json config = llama_like();
  const std::uint64_t fp8_bytes = read_ok([&] {
                                    nlohmann::json c = config;
                                    c["quantization_config"] = {{"quant_method", "fp8"}};
                                    return c;
                                  }())
                                      .weight_bytes;
  // NVIDIA's ModelOpt FP8 (nvidia/Llama-3.1-8B-Instruct-FP8): per-tensor W8A8.
  config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}};
  ModelSpec m = read_ok(config);
  CHECK(m.weight_bytes == fp8_bytes);
  CHECK(m.fp8_linear);
  CHECK(m.fp8_activations);
  CHECK(m.kv_dtype == m.dtype);  // no kv_cache_quant_algo: the KV cache as the weights
  config["quantization_config"]["kv_cache_quant_algo"] = "FP8";
  CHECK(read_ok(config).kv_dtype == Dtype::kFp8);
  config["quantization_config"].erase("kv_cache_quant_algo");
  config["quantization_config"]["quant_algo"] = "NVFP4";
  CHECK(read_error(config) ==
        "m.json: quantization_config.quant_algo: 'NVFP4' is not modelled (FP8)");
  config["quantization_config"].erase("quant_algo");
  CHECK(read_error(config) == "m.json: quantization_config.quant_algo: missing");

  // compressed-tensors: 8-bit float weights and inputs (W8A8), or weights only (W8A16).
  nlohmann::json group = {{"targets", {"Linear"}},
                          {"weights", {{"num_bits", 8}, {"type", "float"}}},
                          {"input_activations", {{"num_bits", 8}, {"type", "float"}}}};
  config["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                   {"config_groups", {{"group_0", group}}}};
  m = read_ok(config);
  CHECK(m.weight_bytes == fp8_bytes);
  CHECK(m.fp8_activations);
  config["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
  CHECK(read_ok(config).kv_dtype == Dtype::kFp8);
  config["quantization_config"].erase("kv_cache_scheme");
  config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = nullptr;
  m = read_ok(config);
  CHECK(m.weight_bytes == fp8_bytes);
  CHECK(m.fp8_linear);
  CHECK_FALSE(m.fp8_activations);
  config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  CHECK(read_error(config) ==
        "m.json: quantization_config.config_groups: group_0: 4-bit weights with 16-bit "
        "activations are not modelled (8-bit weights, 8- or 16-bit activations)");
  config["quantization_config"].erase("config_groups");
  CHECK(read_error(config) == "m.json: quantization_config.config_groups: missing or empty");
}

TEST_CASE("model config: a model type's defaults fill what its config.json leaves out") {
  // Gemma 3's published text_config has neither vocab_size nor
  // max_position_embeddings nor sliding_window_pattern: Gemma3TextConfig's defaults.
  nlohmann::json text = llama_like();
  text["model_type"] = "gemma3_text";
  text["num_hidden_layers"] = 12;
  text["sliding_window"] = 1024;
  for (const char* key : {"vocab_size", "max_position_embeddings", "tie_word_embeddings"}) {
    text.erase(key);
  }
  const ModelSpec m = read_ok(nlohmann::json{{"text_config", text}, {"torch_dtype", "bfloat16"}});
  CHECK(m.vocab_size == 262208);
  CHECK(m.max_position_embeddings == 131072);
  CHECK(m.kv_cache_groups() == std::vector<KvCacheGroup>{{AttentionKind::kSliding, 1024, 10},
                                                         {AttentionKind::kFull, 0, 2}});
  text["model_type"] = "llama";  // no defaults for this type
  CHECK(read_error(nlohmann::json{{"text_config", text}}) ==
        "m.json: text_config.vocab_size: missing");
}

TEST_CASE("model config: files: bad JSON names its line, a missing file says so") {
  const auto dir = std::filesystem::temp_directory_path() / "kvreplay_model_config_test";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "config.json").string();
  std::ofstream(good) << llama_like().dump(2);
  auto spec = load_model_config(good);
  REQUIRE(spec);
  CHECK(spec.value().layers == 4);

  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\n  \"num_hidden_layers\": 4,\n  oops\n}\n";
  auto broken = load_model_config(bad);
  REQUIRE_FALSE(broken);
  CHECK(broken.error().line == 3);
  CHECK(broken.error().field == "json");
  CHECK(broken.error().to_string().rfind(bad + ":3: json: not valid JSON: ", 0) == 0);

  const std::string missing = (dir / "absent.json").string();
  auto absent = load_model_config(missing);
  REQUIRE_FALSE(absent);
  CHECK(absent.error().to_string().rfind(missing + ": file: cannot open", 0) == 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvreplay
