// ModelSpec: what kvreplay needs to know of a model, derived from its Hugging
// Face config.json (SPEC 3.2): the KV geometry of every layer, the context
// length, and the parameter count and weight bytes.
//
// The reader takes the fields transformers writes (config.json of the model's
// Hugging Face repository); a multimodal config's language model is read from
// its "text_config" object. Fields used, and what each gives:
//
//   num_hidden_layers                      layers
//   num_key_value_heads                    KV heads (absent: num_attention_heads, as in
//                                          transformers)
//   head_dim                               head dimension (absent or null:
//                                          hidden_size / num_attention_heads)
//   torch_dtype | dtype                    the weights' and the KV cache's dtype
//                                          (float32, or none, is served as bf16, as vLLM's
//                                          --dtype auto does)
//   kv_lora_rank, qk_rope_head_dim         MLA (DeepSeek): one latent of kv_lora_rank +
//                                          qk_rope_head_dim values per token per layer,
//                                          in place of a K and a V per head
//   sliding_window with layer_types, or with sliding_window_pattern (Gemma 3: every
//   N-th layer full), or alone (Mistral: every layer); use_sliding_window false
//   (Qwen) and max_window_layers (Qwen: the layers below it stay full) honoured
//   max_position_embeddings                the context length (simulate's and plan's
//                                          default --max-seq-tokens)
//   hidden_size, num_attention_heads, intermediate_size, vocab_size,
//   tie_word_embeddings (absent: true, transformers' PretrainedConfig default),
//   q_lora_rank, qk_nope_head_dim, v_head_dim (MLA projections),
//   n_routed_experts | num_experts | num_local_experts, num_experts_per_tok |
//   experts_per_token, moe_intermediate_size, n_shared_experts,
//   shared_expert_intermediate_size, first_k_dense_replace, moe_layer_freq,
//   decoder_sparse_step, mlp_only_layers   the parameter count
//   quantization_config.quant_method       fp8, modelopt (quant_algo FP8) or
//                                          compressed-tensors (8-bit weights): linear
//                                          layers 1 byte, run at the fp8 rate when the
//                                          activations are 8-bit too; mxfp4 (routed
//                                          experts 4.25 bits): the weights' bytes;
//   quantization_config.kv_cache_quant_algo FP8 (ModelOpt) or kv_cache_scheme
//                                          8-bit float (compressed-tensors): an fp8
//                                          KV cache unless --dtype
//
// transformers leaves a field out of config.json when it equals the model
// class's default; model_type_defaults.json holds those defaults for the model
// types whose published configs rely on them (gemma3_text). Fields the reader
// does not know are ignored; a field it needs that is missing, null where a
// value is needed, of the wrong type or out of range is an InputError naming
// the file and the field ("config.json: text_config.num_hidden_layers:
// missing"), as is a feature it cannot model (chunked attention, an attention
// kind other than full and sliding, a quantization method other than those
// above).
//
// Parameter count (matrices only; norms, biases and attention sinks are under
// 0.1% of every preset and left out):
//   embeddings   vocab * hidden, and as much again for lm_head unless tied
//   attention    q, k, v, o: hidden * (heads + 2 * kv_heads) * head_dim
//                + heads * head_dim * hidden;
//                MLA: hidden * q_lora + q_lora * heads * (nope + rope) (or hidden * heads *
//                (nope + rope) without q_lora_rank) + hidden * (kv_lora + rope)
//                + kv_lora * heads * (nope + v_head) + heads * v_head * hidden
//   dense MLP    3 * hidden * intermediate_size (gate, up, down)
//   MoE layer    hidden * experts (router) + (experts + shared) * 3 * hidden * moe_intermediate
// Active parameters are those one token's forward pass multiplies by: every
// parameter but the input embedding table (a lookup; tied, it is the lm_head
// and counts) and the routed experts not chosen (experts - experts_per_token
// per MoE layer). That is the count OpenAI's gpt-oss model card gives; vendors
// who count the input embedding as active (Qwen) publish the sum.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "io/input_error.h"

namespace kvreplay {

enum class AttentionKind : std::uint8_t { kFull, kSliding };
std::string_view to_string(AttentionKind kind);

// Layers that share one kind of attention and window: what one block table per
// group (vLLM's KV-cache groups, HybridKVCacheCoordinator) would serve.
struct KvCacheGroup {
  AttentionKind attention = AttentionKind::kFull;
  std::uint32_t window_tokens = 0;  // sliding: the window; full: 0
  std::uint32_t layers = 0;         // layers of the group

  bool operator==(const KvCacheGroup&) const = default;
};

struct ParameterCount {
  std::uint64_t total = 0;
  std::uint64_t active = 0;  // per token: see the file comment
};

// How quantization_config stores the linear layers' weights (what
// model/rank_weights.h sizes per rank): none, fp8 with one scale per tensor,
// per output channel or per block, gpt-oss's mxfp4 experts, or 4-bit integers
// in groups (AWQ, GPTQ).
enum class WeightQuant : std::uint8_t {
  kNone,
  kFp8Tensor,
  kFp8Channel,
  kFp8Block,
  kMxfp4Experts,
  kInt4Awq,
  kInt4Gptq,
};
std::string_view to_string(WeightQuant quant);

// The shapes of the checkpoint's matrices, all ranks together, as config.json
// gives them: what a rank's share of the weights is computed from.
struct WeightShape {
  std::uint64_t hidden = 0;
  std::uint64_t vocab = 0;
  bool tied = true;  // lm_head is the input embedding table
  std::uint64_t heads = 0;
  std::uint64_t kv_heads = 0;   // GQA
  std::uint64_t head_dim = 0;   // GQA
  bool attention_bias = false;  // q, k, v biases (Qwen2, gpt-oss)
  bool qk_norm = false;         // a norm of head_dim on q and on k (Qwen3)
  // MLA (DeepSeek): q_lora 0 when q is projected directly.
  bool mla = false;
  std::uint64_t q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  std::uint64_t intermediate = 0;  // a dense layer's MLP width
  std::uint64_t experts = 0;       // routed experts of a MoE layer
  std::uint64_t moe_intermediate = 0;
  std::uint64_t shared_experts = 0;
  std::uint64_t shared_intermediate = 0;  // a shared expert given by width (Qwen2-MoE)
  bool expert_bias = false;               // gpt-oss: biases on every expert's projections
  std::vector<bool> moe_layer;            // one per layer: a mixture of experts
  WeightQuant quant = WeightQuant::kNone;
  std::uint32_t block_n = 128, block_k = 128;  // kFp8Block: the scale's block
  std::uint32_t group_size = 128;              // int4: inputs per scale
  bool quant_lm_head = false;                  // int4 or fp8 lm_head (rare)
  bool quant_attention = true;                 // kMxfp4Experts: attention stays bf16
};

struct ModelSpec {
  std::string model_type;  // as the config says ("llama", "gemma3_text"); may be empty
  std::uint32_t layers = 0;
  std::uint32_t attention_heads = 0;
  std::uint32_t kv_heads = 0;  // MLA: 1 (the latent serves every head)
  std::uint32_t head_dim = 0;  // MLA: kv_lora_rank + qk_rope_head_dim
  bool mla = false;
  std::uint32_t kv_lora_rank = 0;      // MLA only
  std::uint32_t qk_rope_head_dim = 0;  // MLA only
  Dtype dtype = Dtype::kBf16;          // the weights'
  // The KV cache's (unless --dtype): the weights', or fp8 when
  // quantization_config quantizes it (kv_cache_quant_algo FP8, kv_cache_scheme).
  Dtype kv_dtype = Dtype::kBf16;
  std::uint32_t max_position_embeddings = 0;
  std::uint32_t hidden_size = 0;
  std::uint32_t vocab_size = 0;
  // Widest MLP of a token in one layer, all ranks together: intermediate_size,
  // or experts_per_token * moe_intermediate plus the shared experts (for the
  // activation reserve, model/deployment.h).
  std::uint64_t mlp_width = 0;
  // One entry per layer, in layer order; every sliding layer has `sliding_window`.
  std::vector<AttentionKind> layer_attention;
  std::uint32_t sliding_window = 0;  // 0 when no layer slides
  ParameterCount parameters;
  // The checkpoint's weights as stored: parameters at dtype, less what
  // quantization_config quantizes (see the file comment). Rounded up.
  std::uint64_t weight_bytes = 0;
  // What the roofline cost model (model/roofline.h) reads besides the counts:
  // the routed experts of each MoE layer and how many a token picks (0 for a
  // dense model), the bytes of every routed expert as stored (weights a step
  // reads only for the experts its tokens pick), and whether the linear layers
  // are stored in 8 bits, and whether their activations are too (W8A8: they
  // run at the GPU's fp8 rate; W8A16 dequantizes to bf16).
  std::uint32_t routed_experts = 0;
  std::uint32_t experts_per_token = 0;
  std::uint64_t routed_expert_bytes = 0;
  bool fp8_linear = false;
  bool fp8_activations = false;
  // The input embedding table's bytes when it is not the lm_head (untied): a
  // step looks up a row a token and never reads it whole (0 when tied).
  std::uint64_t input_embedding_bytes = 0;
  // The matrices' shapes and how they are stored (model/rank_weights.h).
  WeightShape shape;

  // KV bytes of one token in every layer of [first_layer, first_layer + count),
  // as if every layer were full attention (what a replay writes per token):
  // MLA 1, else 2 (K and V), times kv_heads * head_dim * dtype_bytes(kv_dtype) per layer.
  std::uint64_t full_attention_bytes_per_token(Dtype kv_dtype) const;

  // The KV-cache groups of layers [first_layer, first_layer + count), in the
  // order of their first layer. REQUIRES: the range lies within the layers.
  std::vector<KvCacheGroup> kv_cache_groups(std::uint32_t first_layer, std::uint32_t count) const;
  std::vector<KvCacheGroup> kv_cache_groups() const { return kv_cache_groups(0, layers); }
};

// Derives a ModelSpec from a parsed config.json. `file` names it in errors
// (a path, or "preset NAME").
InputResult<ModelSpec> read_model_config(const nlohmann::json& config, const std::string& file);

// Reads and derives a config.json from a file (or "-"), at most 4 MiB.
InputResult<ModelSpec> load_model_config(const std::string& path);

}  // namespace kvreplay
