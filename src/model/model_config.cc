#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>

#include "core/enum_names.h"
#include "io/json_file.h"
#include "io/read_once.h"
#include "model/embedded_files.h"

namespace kvreplay {

namespace {

constexpr EnumName<AttentionKind> kAttentionNames[] = {
    {AttentionKind::kFull, "full"},
    {AttentionKind::kSliding, "sliding"},
};
static_assert(enum_names_unique(kAttentionNames));

constexpr std::uint64_t kU32 = 0xFFFFFFFFull;
constexpr std::uint64_t kMaxConfigBytes = 4ull << 20;

// The defaults transformers leaves out of a model type's config.json
// (model_type_defaults.json), or null for a type without any.
const nlohmann::json& model_type_defaults(const std::string& model_type) {
  static const nlohmann::json kDefaults = [] {
    for (const EmbeddedFile& file : embedded_model_data()) {
      if (file.name == "model_type_defaults") return nlohmann::json::parse(file.bytes());
    }
    return nlohmann::json::object();
  }();
  static const nlohmann::json kNone;
  auto it = kDefaults.find(model_type);
  return it == kDefaults.end() ? kNone : *it;
}

// Sums and products of parameter counts, remembering an overflow of 64 bits.
class Count {
 public:
  Count() = default;
  Count(std::uint64_t value) : value_(value) {}  // NOLINT

  friend Count operator+(Count a, Count b) {
    Count out;
    out.overflow_ =
        a.overflow_ || b.overflow_ || __builtin_add_overflow(a.value_, b.value_, &out.value_);
    return out;
  }
  friend Count operator*(Count a, Count b) {
    Count out;
    out.overflow_ =
        a.overflow_ || b.overflow_ || __builtin_mul_overflow(a.value_, b.value_, &out.value_);
    return out;
  }
  Count& operator+=(Count other) { return *this = *this + other; }
  // ceil(value / divisor). REQUIRES: divisor > 0.
  Count divided_up(std::uint64_t divisor) const {
    Count out = *this + Count(divisor - 1);
    out.value_ /= divisor;
    return out;
  }

  std::uint64_t value() const { return value_; }
  bool overflow() const { return overflow_; }

 private:
  std::uint64_t value_ = 0;
  bool overflow_ = false;
};

// The fields of one config.json: the language model's object (text_config when
// there is one) and the top level, with the model type's defaults behind them.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& root, const std::string& file) : root_(root), file_(file) {
    auto text = root.find("text_config");
    if (text != root.end() && text->is_object()) {
      text_ = &*text;
      prefix_ = "text_config.";
    } else {
      text_ = &root;
    }
    auto type = text_->find("model_type");
    if (type != text_->end() && type->is_string()) model_type_ = type->get<std::string>();
    defaults_ = &model_type_defaults(model_type_);
  }

  const std::string& model_type() const { return model_type_; }
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

  // The value of `key` in the language model's object, else the model type's
  // default; null counts as absent (transformers writes null for "not set").
  // `top_level`: the top level too (dtype, tie_word_embeddings and
  // quantization_config sit there in multimodal configs).
  const nlohmann::json* find(std::string_view key, bool top_level = false) const {
    for (const nlohmann::json* object : {text_, top_level ? &root_ : nullptr, defaults_}) {
      if (object == nullptr || !object->is_object()) continue;
      auto it = object->find(key);
      if (it != object->end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }

  Unexpected<InputError> fail(std::string_view key, std::string problem) const {
    return Unexpected{InputError{file_, 0, name(key), std::move(problem)}};
  }

  // An unsigned integer in [min, max], or nullopt when absent.
  InputResult<std::optional<std::uint64_t>> uint(std::string_view key, std::uint64_t min = 1,
                                                 std::uint64_t max = kU32,
                                                 bool top_level = false) const {
    const nlohmann::json* value = find(key, top_level);
    if (value == nullptr) return std::optional<std::uint64_t>{};
    auto checked = check_uint(key, *value, min, max);
    if (!checked) return Unexpected{checked.error()};
    return std::optional<std::uint64_t>{checked.value()};
  }

  InputResult<std::uint64_t> required_uint(std::string_view key, std::uint64_t min = 1,
                                           std::uint64_t max = kU32) const {
    auto value = uint(key, min, max);
    if (!value) return Unexpected{value.error()};
    if (!value.value()) return fail(key, "missing");
    return *value.value();
  }

  InputResult<std::optional<bool>> boolean(std::string_view key, bool top_level = false) const {
    const nlohmann::json* value = find(key, top_level);
    if (value == nullptr) return std::optional<bool>{};
    if (!value->is_boolean())
      return fail(key, fmt::format("expected true or false, got {}", value->dump()));
    return std::optional<bool>{value->get<bool>()};
  }

  InputResult<std::uint64_t> check_uint(std::string_view key, const nlohmann::json& value,
                                        std::uint64_t min, std::uint64_t max) const {
    if (!value.is_number_integer())
      return fail(key, fmt::format("expected an integer, got {}", value.dump()));
    if (value.is_number_unsigned() ? value.get<std::uint64_t>() < min
                                   : value.get<std::int64_t>() < static_cast<std::int64_t>(min)) {
      return fail(key, fmt::format("{} must be >= {}", value.dump(), min));
    }
    if (value.get<std::uint64_t>() > max)
      return fail(key, fmt::format("{} is too large (at most {})", value.dump(), max));
    return value.get<std::uint64_t>();
  }

 private:
  const nlohmann::json& root_;
  const nlohmann::json* text_ = nullptr;
  const nlohmann::json* defaults_ = nullptr;
  const std::string& file_;
  std::string prefix_;
  std::string model_type_;
};

#define KVREPLAY_TRY(target, expr)                                  \
  auto target##_result = (expr);                                    \
  if (!target##_result) return Unexpected{target##_result.error()}; \
  auto target = std::move(target##_result).value()

InputResult<Dtype> read_dtype(const ConfigFields& fields) {
  std::string_view key = "torch_dtype";
  const nlohmann::json* value = fields.find(key, /*top_level=*/true);
  if (value == nullptr) {
    key = "dtype";
    value = fields.find(key, /*top_level=*/true);
  }
  // Absent, transformers loads float32, which vLLM's --dtype auto serves in bf16
  // (gpt-oss's config.json names none).
  if (value == nullptr) return Dtype::kBf16;
  if (!value->is_string())
    return fields.fail(key, fmt::format("expected a string, got {}", value->dump()));
  const std::string name = value->get<std::string>();
  // vLLM's --dtype auto serves a float32 checkpoint in bf16 (_get_and_verify_dtype).
  if (name == "bfloat16" || name == "float32" || name == "float") return Dtype::kBf16;
  if (name == "float16" || name == "half") return Dtype::kFp16;
  return fields.fail(key, fmt::format("'{}' is not a dtype kvreplay serves (bfloat16, float16, "
                                      "float32)",
                                      name));
}

// Which layers slide, and the window (see the header).
InputStatus read_attention(const ConfigFields& fields, ModelSpec& spec) {
  spec.layer_attention.assign(spec.layers, AttentionKind::kFull);
  KVREPLAY_TRY(chunk, fields.uint("attention_chunk_size", 0, kU32));
  if (chunk && *chunk > 0)
    return fields.fail("attention_chunk_size", "chunked attention is not modelled");
  KVREPLAY_TRY(window, fields.uint("sliding_window", 0, kU32));
  KVREPLAY_TRY(use_sliding, fields.boolean("use_sliding_window"));
  const bool slides = window && *window > 0 && use_sliding.value_or(true);
  if (const nlohmann::json* types = fields.find("layer_types")) {
    if (!types->is_array())
      return fields.fail("layer_types", fmt::format("expected an array, got {}", types->dump()));
    if (types->size() != spec.layers) {
      return fields.fail("layer_types", fmt::format("{} entries for {} layers (num_hidden_layers)",
                                                    types->size(), spec.layers));
    }
    for (std::uint32_t i = 0; i < spec.layers; ++i) {
      const nlohmann::json& type = (*types)[i];
      const std::string key = fmt::format("layer_types[{}]", i);
      if (!type.is_string())
        return fields.fail(key, fmt::format("expected a string, got {}", type.dump()));
      if (type == "full_attention") continue;
      if (type != "sliding_attention") {
        return fields.fail(key, fmt::format("'{}' is not modelled (full_attention, "
                                            "sliding_attention)",
                                            type.get<std::string>()));
      }
      if (!slides) {
        return fields.fail("sliding_window",
                           "missing, 0 or turned off (use_sliding_window), while layer_types "
                           "names sliding layers");
      }
      spec.layer_attention[i] = AttentionKind::kSliding;
    }
  } else if (slides) {
    KVREPLAY_TRY(pattern, fields.uint("sliding_window_pattern"));
    KVREPLAY_TRY(max_window_layers, fields.uint("max_window_layers", 0, kU32));
    for (std::uint32_t i = 0; i < spec.layers; ++i) {
      bool sliding = true;  // Mistral: sliding_window alone slides every layer
      if (pattern) {
        sliding = (i + 1) % *pattern != 0;  // Gemma 3: every pattern-th layer is full
      } else if (max_window_layers) {
        sliding = i >= *max_window_layers;  // Qwen: the layers below it stay full
      }
      if (sliding) spec.layer_attention[i] = AttentionKind::kSliding;
    }
  }
  if (std::find(spec.layer_attention.begin(), spec.layer_attention.end(),
                AttentionKind::kSliding) != spec.layer_attention.end()) {
    spec.sliding_window = static_cast<std::uint32_t>(*window);
  }
  return {};
}

// The attention's KV geometry (into `spec`) and its parameters per layer:
// multi-head latent attention when there is a kv_lora_rank, else grouped-query
// attention of `kv_heads` heads of `head_dim`.
InputResult<Count> read_attention_parameters(const ConfigFields& fields, ModelSpec& spec,
                                             std::uint64_t hidden, std::uint64_t heads,
                                             std::uint64_t kv_heads, std::uint64_t head_dim) {
  KVREPLAY_TRY(kv_lora, fields.uint("kv_lora_rank", 1, 1u << 20));
  if (kv_lora) {
    KVREPLAY_TRY(rope, fields.required_uint("qk_rope_head_dim", 1, 1u << 20));
    KVREPLAY_TRY(nope, fields.required_uint("qk_nope_head_dim", 0, 1u << 20));
    KVREPLAY_TRY(v_head, fields.required_uint("v_head_dim", 1, 1u << 20));
    KVREPLAY_TRY(q_lora, fields.uint("q_lora_rank", 1, 1u << 20));
    spec.mla = true;
    spec.shape.mla = true;
    spec.shape.q_lora = q_lora.value_or(0);
    spec.shape.kv_lora = *kv_lora;
    spec.shape.qk_nope = nope;
    spec.shape.qk_rope = rope;
    spec.shape.v_head = v_head;
    spec.kv_lora_rank = static_cast<std::uint32_t>(*kv_lora);
    spec.qk_rope_head_dim = static_cast<std::uint32_t>(rope);
    spec.kv_heads = 1;
    spec.head_dim = static_cast<std::uint32_t>(*kv_lora + rope);
    const Count q_width = Count(heads) * (nope + rope);
    const Count q =
        q_lora ? Count(hidden) * *q_lora + Count(*q_lora) * q_width : Count(hidden) * q_width;
    return q + Count(hidden) * (*kv_lora + rope) + Count(*kv_lora) * heads * (nope + v_head) +
           Count(heads) * v_head * hidden;
  }
  spec.kv_heads = static_cast<std::uint32_t>(kv_heads);
  spec.head_dim = static_cast<std::uint32_t>(head_dim);
  spec.shape.kv_heads = kv_heads;
  spec.shape.head_dim = head_dim;
  return Count(hidden) * (heads + 2 * kv_heads) * head_dim + Count(heads) * head_dim * hidden;
}

// The MLP of each layer: dense, or a mixture of experts.
struct MlpShape {
  std::uint64_t experts = 0;                  // routed experts (0: dense layers only)
  std::uint64_t per_token = 0;                // experts a token is routed to
  std::uint64_t moe_intermediate = 0;         // one expert's width
  std::uint64_t shared = 0;                   // shared experts
  std::uint64_t shared_intermediate = 0;      // the shared expert's width, when given so
  std::optional<std::uint64_t> intermediate;  // a dense layer's width
  std::uint64_t moe_layers = 0;               // layers with a mixture of experts
  std::vector<bool> moe_layer;                // one per layer
};

InputResult<MlpShape> read_mlp(const ConfigFields& fields, std::uint64_t layers) {
  std::string_view experts_key = "n_routed_experts";
  KVREPLAY_TRY(experts_given, fields.uint(experts_key, 0, 1u << 16));
  for (std::string_view key : {"num_experts", "num_local_experts"}) {
    if (experts_given) break;
    experts_key = key;
    auto value = fields.uint(key, 0, 1u << 16);
    if (!value) return Unexpected{value.error()};
    experts_given = value.value();
  }
  const std::uint64_t experts = experts_given.value_or(0);
  KVREPLAY_TRY(intermediate, fields.uint("intermediate_size", 1, 1u << 24));
  KVREPLAY_TRY(moe_intermediate_given, fields.uint("moe_intermediate_size", 1, 1u << 24));
  std::uint64_t per_token = 0, moe_intermediate = 0, shared = 0, shared_intermediate = 0;
  std::uint64_t first_dense = 0, moe_freq = 1, sparse_step = 1;
  std::vector<std::uint64_t> mlp_only;
  if (experts > 0) {
    KVREPLAY_TRY(k, fields.uint("num_experts_per_tok", 1, experts));
    if (!k) {
      auto alternative = fields.uint("experts_per_token", 1, experts);
      if (!alternative) return Unexpected{alternative.error()};
      k = alternative.value();
    }
    if (!k) return fields.fail("num_experts_per_tok", "missing (nor is there experts_per_token)");
    per_token = *k;
    moe_intermediate = moe_intermediate_given.value_or(intermediate.value_or(0));
    if (moe_intermediate == 0) {
      return fields.fail("moe_intermediate_size",
                         fmt::format("missing (nor is there intermediate_size), with {} {}",
                                     experts_key, experts));
    }
    KVREPLAY_TRY(shared_given, fields.uint("n_shared_experts", 0, 1u << 16));
    KVREPLAY_TRY(shared_width, fields.uint("shared_expert_intermediate_size", 0, 1u << 24));
    KVREPLAY_TRY(first_given, fields.uint("first_k_dense_replace", 0, layers));
    KVREPLAY_TRY(freq_given, fields.uint("moe_layer_freq", 1, 1u << 16));
    KVREPLAY_TRY(step_given, fields.uint("decoder_sparse_step", 1, 1u << 16));
    shared = shared_given.value_or(0);
    shared_intermediate = shared_width.value_or(0);
    first_dense = first_given.value_or(0);
    moe_freq = freq_given.value_or(1);
    sparse_step = step_given.value_or(1);
    if (const nlohmann::json* only = fields.find("mlp_only_layers")) {
      if (!only->is_array()) {
        return fields.fail("mlp_only_layers",
                           fmt::format("expected an array, got {}", only->dump()));
      }
      for (std::size_t i = 0; i < only->size(); ++i) {
        auto layer =
            fields.check_uint(fmt::format("mlp_only_layers[{}]", i), (*only)[i], 0, layers - 1);
        if (!layer) return Unexpected{layer.error()};
        mlp_only.push_back(layer.value());
      }
    }
  }
  auto is_moe = [&](std::uint64_t layer) {
    return experts > 0 && layer >= first_dense && layer % moe_freq == 0 &&
           (layer + 1) % sparse_step == 0 &&
           std::find(mlp_only.begin(), mlp_only.end(), layer) == mlp_only.end();
  };
  std::uint64_t moe_layers = 0;
  std::vector<bool> moe_layer(layers, false);
  for (std::uint64_t i = 0; i < layers; ++i) {
    moe_layer[i] = is_moe(i);
    moe_layers += is_moe(i) ? 1 : 0;
  }
  if (moe_layers < layers && !intermediate) {
    return fields.fail(
        "intermediate_size",
        fmt::format("missing, and {} of {} layers have a dense MLP", layers - moe_layers, layers));
  }
  return MlpShape{experts,      per_token,  moe_intermediate,    shared, shared_intermediate,
                  intermediate, moe_layers, std::move(moe_layer)};
}

// How quantization_config stores the linear layers: 8-bit weights with 8-bit
// activations (the GEMMs run at the GPU's fp8 rate), 8-bit weights with 16-bit
// activations (weights dequantized: bf16 rate), or gpt-oss's mxfp4 experts.
enum class QuantScheme { kW8A8, kW8A16, kMxfp4, kW4A16 };

// The bits of one compressed-tensors quantization argument ("weights",
// "input_activations"): 0 when null or absent.
InputResult<std::uint64_t> quant_bits(const ConfigFields& fields, const nlohmann::json& group,
                                      const std::string& key) {
  auto it = group.find(key);
  if (it == group.end() || it->is_null()) return std::uint64_t{0};
  auto bits = it->is_object() ? it->find("num_bits") : it->end();
  if (bits == it->end() || !bits->is_number_integer() || bits->get<std::int64_t>() < 0) {
    return fields.fail("quantization_config.config_groups",
                       fmt::format("{}.num_bits: expected an integer", key));
  }
  return bits->get<std::uint64_t>();
}

// Whether quantization_config stores the KV cache in fp8: ModelOpt's
// kv_cache_quant_algo FP8, or compressed-tensors' kv_cache_scheme of 8-bit
// floats (vLLM then serves an fp8 KV cache with the checkpoint's scales).
bool fp8_kv_cache(const nlohmann::json& quantization) {
  auto algo = quantization.find("kv_cache_quant_algo");
  if (algo != quantization.end() && *algo == "FP8") return true;
  auto scheme = quantization.find("kv_cache_scheme");
  return scheme != quantization.end() && scheme->is_object() &&
         scheme->value("num_bits", nlohmann::json()) == 8 &&
         scheme->value("type", nlohmann::json()) == "float";
}

// What quantization_config says: the scheme (what the roofline runs at) and
// the layout (what each rank stores, model/rank_weights.h).
struct Quantization {
  QuantScheme scheme = QuantScheme::kW8A8;
  WeightQuant layout = WeightQuant::kFp8Tensor;
  std::uint32_t block_n = 128, block_k = 128;
  std::uint32_t group_size = 128;
};

// A [N, K] weight_block_size, or nullopt when absent (fp8: one scale a tensor).
InputResult<std::optional<std::pair<std::uint32_t, std::uint32_t>>> read_block(
    const ConfigFields& fields, const nlohmann::json& block, const std::string& key) {
  using Block = std::optional<std::pair<std::uint32_t, std::uint32_t>>;
  if (block.is_null()) return Block{};
  if (!block.is_array() || block.size() != 2 || !block[0].is_number_unsigned() ||
      !block[1].is_number_unsigned() || block[0].get<std::uint64_t>() == 0 ||
      block[1].get<std::uint64_t>() == 0 || block[0].get<std::uint64_t>() > (1u << 20) ||
      block[1].get<std::uint64_t>() > (1u << 20)) {
    return fields.fail(key, fmt::format("expected two positive integers, got {}", block.dump()));
  }
  return Block{std::pair{block[0].get<std::uint32_t>(), block[1].get<std::uint32_t>()}};
}

// Reads quantization_config's method (vLLM's quantization configs of the same
// names: Fp8Config, ModelOptFp8Config, CompressedTensorsConfig, Mxfp4Config,
// AWQConfig, GPTQConfig).
InputResult<Quantization> read_quantization(const ConfigFields& fields,
                                            const nlohmann::json& quantization) {
  if (!quantization.is_object()) {
    return fields.fail("quantization_config",
                       fmt::format("expected an object, got {}", quantization.dump()));
  }
  auto text = [&](const nlohmann::json& object, const char* key) {
    auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  Quantization out;
  const std::string method = text(quantization, "quant_method");
  if (method == "fp8") {
    // Dynamic activation scales; weight_block_size [N, K]: one float32 scale a
    // block (DeepSeek, Qwen3 FP8), else one a tensor.
    auto block = quantization.find("weight_block_size");
    if (block != quantization.end()) {
      KVREPLAY_TRY(given, read_block(fields, *block, "quantization_config.weight_block_size"));
      if (given) {
        out.layout = WeightQuant::kFp8Block;
        out.block_n = given->first;
        out.block_k = given->second;
      }
    }
    return out;
  }
  if (method == "mxfp4") {
    out.scheme = QuantScheme::kMxfp4;
    out.layout = WeightQuant::kMxfp4Experts;
    return out;
  }
  if (method == "awq" || method == "gptq") {
    // 4-bit integer weights in groups of group_size inputs, fp16 scales and
    // packed zero points (model/rank_weights.h).
    auto bits = quantization.find(method == "awq" ? "w_bit" : "bits");
    if (bits == quantization.end()) bits = quantization.find("bits");
    if (bits == quantization.end() || *bits != 4) {
      return fields.fail("quantization_config.bits",
                         fmt::format("{}: only 4-bit weights are modelled, got {}", method,
                                     bits == quantization.end() ? "none" : bits->dump()));
    }
    auto group = quantization.find(method == "awq" ? "q_group_size" : "group_size");
    if (group == quantization.end()) group = quantization.find("group_size");
    if (group == quantization.end() || !group->is_number_integer() ||
        group->get<std::int64_t>() < 1 || group->get<std::int64_t>() > (1 << 20)) {
      return fields.fail("quantization_config.group_size",
                         fmt::format("expected a positive integer, got {}",
                                     group == quantization.end() ? "none" : group->dump()));
    }
    out.scheme = QuantScheme::kW4A16;
    out.layout = method == "awq" ? WeightQuant::kInt4Awq : WeightQuant::kInt4Gptq;
    out.group_size = group->get<std::uint32_t>();
    return out;
  }
  if (method == "modelopt") {
    // NVIDIA's ModelOpt checkpoints: quant_algo FP8 is per-tensor W8A8.
    const std::string algo = text(quantization, "quant_algo");
    if (algo == "FP8") return out;
    return fields.fail(
        "quantization_config.quant_algo",
        algo.empty() ? std::string("missing") : fmt::format("'{}' is not modelled (FP8)", algo));
  }
  if (method == "compressed-tensors") {
    // Every group 8-bit weights; W8A8 when every group's inputs are 8-bit too.
    auto groups = quantization.find("config_groups");
    if (groups == quantization.end() || !groups->is_object() || groups->empty()) {
      return fields.fail("quantization_config.config_groups", "missing or empty");
    }
    bool activations = true;
    for (const auto& [name, group] : groups->items()) {
      if (!group.is_object()) {
        return fields.fail("quantization_config.config_groups", name + ": expected an object");
      }
      KVREPLAY_TRY(weights, quant_bits(fields, group, "weights"));
      KVREPLAY_TRY(inputs, quant_bits(fields, group, "input_activations"));
      if (weights != 8 || (inputs != 0 && inputs != 8)) {
        return fields.fail(
            "quantization_config.config_groups",
            fmt::format("{}: {}-bit weights with {}-bit activations are not modelled (8-bit "
                        "weights, 8- or 16-bit activations)",
                        name, weights, inputs == 0 ? 16 : inputs));
      }
      activations = activations && inputs == 8;
      // The weights' scale: one a tensor, one an output channel, or one a block.
      const nlohmann::json& w = group["weights"];
      const std::string strategy = text(w, "strategy");
      if (strategy == "channel") {
        out.layout = WeightQuant::kFp8Channel;
      } else if (strategy == "block") {
        auto block = w.find("block_structure");
        KVREPLAY_TRY(given, read_block(fields, block == w.end() ? nlohmann::json() : *block,
                                       "quantization_config.config_groups." + name +
                                           ".weights.block_structure"));
        out.layout = WeightQuant::kFp8Block;
        if (given) {
          out.block_n = given->first;
          out.block_k = given->second;
        }
      }
    }
    out.scheme = activations ? QuantScheme::kW8A8 : QuantScheme::kW8A16;
    return out;
  }
  return fields.fail("quantization_config.quant_method",
                     method.empty() ? std::string("missing")
                                    : fmt::format("'{}' is not modelled (fp8, modelopt, "
                                                  "compressed-tensors, mxfp4, awq, gptq)",
                                                  method));
}

}  // namespace

std::string_view to_string(AttentionKind kind) {
  return enum_name(kAttentionNames, kind);
}

std::string_view to_string(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::kNone: return "none";
    case WeightQuant::kFp8Tensor: return "fp8 (per tensor)";
    case WeightQuant::kFp8Channel: return "fp8 (per channel)";
    case WeightQuant::kFp8Block: return "fp8 (per block)";
    case WeightQuant::kMxfp4Experts: return "mxfp4 experts";
    case WeightQuant::kInt4Awq: return "int4 awq";
    case WeightQuant::kInt4Gptq: return "int4 gptq";
  }
  return "none";
}

std::uint64_t ModelSpec::full_attention_bytes_per_token(Dtype cache_dtype) const {
  return std::uint64_t{mla ? 1u : 2u} * layers * kv_heads * head_dim * dtype_bytes(cache_dtype);
}

std::vector<KvCacheGroup> ModelSpec::kv_cache_groups(std::uint32_t first_layer,
                                                     std::uint32_t count) const {
  std::vector<KvCacheGroup> groups;
  for (std::uint32_t i = first_layer; i < first_layer + count && i < layer_attention.size(); ++i) {
    const AttentionKind kind = layer_attention[i];
    const std::uint32_t window = kind == AttentionKind::kSliding ? sliding_window : 0;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const KvCacheGroup& g) {
      return g.attention == kind && g.window_tokens == window;
    });
    if (it == groups.end()) {
      groups.push_back(KvCacheGroup{kind, window, 1});
    } else {
      ++it->layers;
    }
  }
  return groups;
}

InputResult<ModelSpec> read_model_config(const nlohmann::json& config, const std::string& file) {
  if (!config.is_object()) {
    return Unexpected{
        InputError{file, 0, "json", fmt::format("expected an object, got {}", config.dump())}};
  }
  const ConfigFields fields(config, file);
  ModelSpec spec;
  spec.model_type = fields.model_type();

  KVREPLAY_TRY(layers, fields.required_uint("num_hidden_layers", 1, 1u << 16));
  KVREPLAY_TRY(hidden, fields.required_uint("hidden_size", 1, 1u << 24));
  KVREPLAY_TRY(heads, fields.required_uint("num_attention_heads", 1, 1u << 16));
  KVREPLAY_TRY(kv_heads_given, fields.uint("num_key_value_heads", 1, 1u << 16));
  KVREPLAY_TRY(head_dim_given, fields.uint("head_dim", 1, 1u << 20));
  KVREPLAY_TRY(vocab, fields.required_uint("vocab_size", 1, 1u << 28));
  KVREPLAY_TRY(context, fields.required_uint("max_position_embeddings"));
  KVREPLAY_TRY(tied, fields.boolean("tie_word_embeddings", /*top_level=*/true));
  KVREPLAY_TRY(dtype, read_dtype(fields));
  spec.layers = static_cast<std::uint32_t>(layers);
  spec.hidden_size = static_cast<std::uint32_t>(hidden);
  spec.attention_heads = static_cast<std::uint32_t>(heads);
  spec.vocab_size = static_cast<std::uint32_t>(vocab);
  spec.max_position_embeddings = static_cast<std::uint32_t>(context);
  spec.dtype = dtype;
  const std::uint64_t kv_heads = kv_heads_given.value_or(heads);
  // Grouped-query attention shares each KV head among heads / kv_heads query
  // heads: a count that does not divide is no model anyone serves.
  if (heads % kv_heads != 0) {
    return fields.fail("num_key_value_heads",
                       fmt::format("{} does not divide num_attention_heads {} (each KV head "
                                   "serves a whole group of query heads)",
                                   kv_heads, heads));
  }
  std::uint64_t head_dim = 0;
  if (head_dim_given) {
    head_dim = *head_dim_given;
  } else if (hidden % heads != 0) {
    return fields.fail("head_dim", fmt::format("missing, and hidden_size {} is not a multiple of "
                                               "num_attention_heads {}",
                                               hidden, heads));
  } else {
    head_dim = hidden / heads;
  }

  // Attention: its KV geometry and its parameters per layer.
  KVREPLAY_TRY(attention,
               read_attention_parameters(fields, spec, hidden, heads, kv_heads, head_dim));
  if (auto status = read_attention(fields, spec); !status) return Unexpected{status.error()};

  // The MLP of each layer.
  KVREPLAY_TRY(mlp, read_mlp(fields, layers));
  const Count expert = Count(3) * hidden * mlp.moe_intermediate;
  const Count dense_mlp = Count(3) * hidden * mlp.intermediate.value_or(0);
  const Count shared_mlp = Count(mlp.shared) * expert + Count(3) * hidden * mlp.shared_intermediate;
  const Count router = Count(hidden) * mlp.experts;

  // Parameters by kind, and the bytes each kind is stored in.
  const Count embedding = Count(vocab) * hidden;
  const Count lm_head = tied.value_or(true) ? Count(0) : embedding;
  const Count attention_all = attention * layers;
  const Count dense_all = dense_mlp * (layers - mlp.moe_layers);
  const Count routed_all = expert * mlp.experts * mlp.moe_layers;
  const Count shared_all = shared_mlp * mlp.moe_layers;
  const Count router_all = router * mlp.moe_layers;
  const Count total =
      embedding + lm_head + attention_all + dense_all + routed_all + shared_all + router_all;
  const Count inactive = expert * (mlp.experts - mlp.per_token) * mlp.moe_layers;
  if (total.overflow() || inactive.overflow()) {
    return fields.fail("num_hidden_layers", "the parameter count overflows 64 bits");
  }
  spec.parameters.total = total.value();
  spec.parameters.active =
      total.value() - inactive.value() - (tied.value_or(true) ? 0 : embedding.value());
  spec.mlp_width = std::max<std::uint64_t>(
      mlp.moe_layers < layers ? mlp.intermediate.value_or(0) : 0,
      mlp.moe_layers > 0 ? mlp.per_token * mlp.moe_intermediate +
                               mlp.shared * mlp.moe_intermediate + mlp.shared_intermediate
                         : 0);

  spec.shape.hidden = hidden;
  spec.shape.vocab = vocab;
  spec.shape.tied = tied.value_or(true);
  spec.shape.heads = heads;
  spec.shape.intermediate = mlp.intermediate.value_or(0);
  spec.shape.experts = mlp.experts;
  spec.shape.moe_intermediate = mlp.moe_intermediate;
  spec.shape.shared_experts = mlp.shared;
  spec.shape.shared_intermediate = mlp.shared_intermediate;
  spec.shape.moe_layer = mlp.moe_layer;
  {
    // q, k, v biases: attention_bias where the config says, always in Qwen2's
    // families; q and k norms in Qwen3's (their modelling files).
    KVREPLAY_TRY(bias, fields.boolean("attention_bias"));
    const std::string& type = spec.model_type;
    spec.shape.attention_bias =
        bias.value_or(type == "qwen2" || type == "qwen2_moe" || type == "qwen2_vl");
    spec.shape.qk_norm = type == "qwen3" || type == "qwen3_moe";
    spec.shape.expert_bias = type == "gpt_oss";
  }

  const std::uint64_t element = dtype_bytes(dtype);
  Count weights = total * element;
  Count routed_bytes = routed_all * element;
  spec.routed_experts = static_cast<std::uint32_t>(mlp.moe_layers > 0 ? mlp.experts : 0);
  spec.experts_per_token = static_cast<std::uint32_t>(mlp.moe_layers > 0 ? mlp.per_token : 0);
  spec.kv_dtype = dtype;
  if (const nlohmann::json* quantization = fields.find("quantization_config", true)) {
    KVREPLAY_TRY(quant, read_quantization(fields, *quantization));
    if (fp8_kv_cache(*quantization)) spec.kv_dtype = Dtype::kFp8;
    spec.shape.quant = quant.layout;
    spec.shape.block_n = quant.block_n;
    spec.shape.block_k = quant.block_k;
    spec.shape.group_size = quant.group_size;
    if (quant.scheme == QuantScheme::kMxfp4) {
      // Routed experts in 4-bit values with one 8-bit scale per 32 (17/32 byte each).
      weights =
          (embedding + lm_head + attention_all + dense_all + shared_all + router_all) * element +
          (routed_all * 17).divided_up(32);
      routed_bytes = (routed_all * 17).divided_up(32);
      spec.shape.quant_attention = false;
    } else if (quant.scheme == QuantScheme::kW4A16) {
      // Linear layers in half a byte (scales left out here; model/rank_weights.h
      // counts them); embeddings, lm_head and the router keep the dtype.
      weights = (embedding + lm_head + router_all) * element +
                (attention_all + dense_all + routed_all + shared_all).divided_up(2);
      routed_bytes = routed_all.divided_up(2);
    } else {
      // Linear layers in 1 byte (block or tensor scales left out); embeddings,
      // lm_head and the router keep the checkpoint's dtype.
      weights = (embedding + lm_head + router_all) * element + attention_all + dense_all +
                routed_all + shared_all;
      routed_bytes = routed_all;
      spec.fp8_linear = true;
      spec.fp8_activations = quant.scheme == QuantScheme::kW8A8;
    }
  }
  if (weights.overflow()) {
    return fields.fail("num_hidden_layers", "the weights' bytes overflow 64 bits");
  }
  spec.weight_bytes = weights.value();
  spec.routed_expert_bytes = routed_bytes.value();
  // An untied input table is looked up, a row a token, never read whole.
  spec.input_embedding_bytes = tied.value_or(true) ? 0 : (embedding * element).value();
  return spec;
}

namespace {

InputResult<ModelSpec> read_model_config_file(const std::string& path) {
  auto document = read_json_file(path, kMaxConfigBytes, "not a config.json");
  if (!document) {
    // read_json_file's message starts with the path: "PATH:LINE: not valid JSON: ...".
    // Its message is "PATH:LINE: not valid JSON: WHAT" or "PATH: WHY".
    std::string_view rest = document.error();
    if (rest.substr(0, path.size()) == path) rest.remove_prefix(path.size());
    std::uint64_t line = 0;
    if (rest.size() > 1 && rest[0] == ':') {
      rest.remove_prefix(1);
      auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), line);
      if (ec == std::errc{} && end < rest.data() + rest.size() && *end == ':') {
        rest.remove_prefix(static_cast<std::size_t>(end - rest.data()) + 1);
      } else {
        line = 0;
      }
    }
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    constexpr std::string_view kNotJson = "not valid JSON: ";
    if (rest.substr(0, kNotJson.size()) == kNotJson) {
      rest.remove_prefix(kNotJson.size());
      return Unexpected{InputError{path, line, "json", fmt::format("not valid JSON: {}", rest)}};
    }
    return Unexpected{InputError{path, 0, "file", std::string(rest)}};
  }
  return read_model_config(document.value(), path);
}

}  // namespace

InputResult<ModelSpec> load_model_config(const std::string& path) {
  // Each path is read once a run (plan resolves it for every cell).
  struct Tag;
  return read_once<Tag>(path, read_model_config_file);
}

#undef KVREPLAY_TRY

}  // namespace kvreplay
