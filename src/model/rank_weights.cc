#include "model/rank_weights.h"

#include <algorithm>

#include "model/deployment.h"

namespace kvreplay {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

std::uint64_t round_up(std::uint64_t a, std::uint64_t multiple) {
  return ceil_div(a, multiple) * multiple;
}

// A linear layer's weight of `out` x `in` (this rank's share) as `quant` stores it.
std::uint64_t linear_bytes(std::uint64_t out, std::uint64_t in, WeightQuant quant,
                           const WeightShape& shape, std::uint64_t element) {
  switch (quant) {
    case WeightQuant::kNone:
    case WeightQuant::kMxfp4Experts:  // only the experts are mxfp4 (expert_bytes)
      return out * in * element;
    case WeightQuant::kFp8Tensor: return out * in + 4;
    case WeightQuant::kFp8Channel: return out * in + out * 4;
    case WeightQuant::kFp8Block:
      return out * in + ceil_div(out, shape.block_n) * ceil_div(in, shape.block_k) * 4;
    case WeightQuant::kInt4Awq:
    case WeightQuant::kInt4Gptq: {
      const std::uint64_t groups = ceil_div(in, shape.group_size);
      std::uint64_t bytes = ceil_div(out * in, 2)            // packed 4-bit values
                            + groups * out * 2               // fp16 scales
                            + ceil_div(groups * out, 2);     // packed 4-bit zeros
      if (quant == WeightQuant::kInt4Gptq) bytes += in * 4;  // g_idx
      return bytes;
    }
  }
  return out * in * element;
}

// One routed expert's projection of `out` x `in` on this rank.
std::uint64_t expert_bytes(std::uint64_t out, std::uint64_t in, const WeightShape& shape,
                           std::uint64_t element) {
  if (shape.quant == WeightQuant::kMxfp4Experts) {
    return ceil_div(out * in, 2) + out * ceil_div(in, 32);
  }
  return linear_bytes(out, in, shape.quant, shape, element);
}

}  // namespace

RankWeights rank_weights(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp,
                         std::uint32_t stage, std::uint32_t ep, std::uint32_t attention_tp) {
  // Attention splits within an attention replica.
  const std::uint32_t atp = attention_tp == 0 ? tp : attention_tp;
  const WeightShape& s = model.shape;
  const std::uint64_t e = dtype_bytes(model.dtype);
  const WeightQuant attention_quant = s.quant_attention ? s.quant : WeightQuant::kNone;
  // Dense MLPs and shared experts: MXFP4 quantizes only the routed experts.
  const WeightQuant mlp_quant =
      s.quant == WeightQuant::kMxfp4Experts ? WeightQuant::kNone : s.quant;
  RankWeights w;
  const auto [first, count] = pipeline_stage(model.layers, pp, stage);
  const bool first_stage = stage == 0;
  const bool last_stage = stage + 1 == pp;

  const std::uint64_t vocab_rows = ceil_div(round_up(s.vocab, 64), tp);
  if (first_stage) w.embedding = vocab_rows * s.hidden * e;
  if (last_stage && (!s.tied || !first_stage)) {
    w.lm_head = s.quant_lm_head ? linear_bytes(vocab_rows, s.hidden, s.quant, s, e)
                                : vocab_rows * s.hidden * e;
  }
  if (last_stage) w.norms += s.hidden * e;

  w.buffers = std::uint64_t{model.max_position_embeddings} * (s.mla ? s.qk_rope : s.head_dim) * e;
  const std::uint64_t heads = ceil_div(s.heads, atp);
  for (std::uint32_t layer = first; layer < first + count; ++layer) {
    w.norms += 2 * s.hidden * e;
    // Attention.
    if (s.mla) {
      const std::uint64_t q_width = heads * (s.qk_nope + s.qk_rope);
      if (s.q_lora > 0) {
        w.attention +=
            linear_bytes(s.q_lora + s.kv_lora + s.qk_rope, s.hidden, attention_quant, s, e) +
            linear_bytes(q_width, s.q_lora, attention_quant, s, e);
        w.norms += s.q_lora * e;
      } else {
        w.attention += linear_bytes(q_width, s.hidden, attention_quant, s, e) +
                       linear_bytes(s.kv_lora + s.qk_rope, s.hidden, attention_quant, s, e);
      }
      w.attention +=
          linear_bytes(heads * (s.qk_nope + s.v_head), s.kv_lora, attention_quant, s, e) +
          linear_bytes(s.hidden, heads * s.v_head, attention_quant, s, e);
      w.norms += s.kv_lora * e;
    } else {
      const std::uint64_t kv = ceil_div(s.kv_heads, atp);
      const std::uint64_t qkv = (heads + 2 * kv) * s.head_dim;
      w.attention += linear_bytes(qkv, s.hidden, attention_quant, s, e) +
                     linear_bytes(s.hidden, heads * s.head_dim, attention_quant, s, e);
      if (s.attention_bias) w.attention += qkv * e;
      if (s.qk_norm) w.norms += 2 * s.head_dim * e;
    }
    // MLP.
    const bool moe = layer < s.moe_layer.size() && s.moe_layer[layer];
    if (!moe) {
      const std::uint64_t width = ceil_div(s.intermediate, tp);
      w.mlp += linear_bytes(2 * width, s.hidden, mlp_quant, s, e) +
               linear_bytes(s.hidden, width, mlp_quant, s, e);
      continue;
    }
    const std::uint64_t local_experts = ep > 1 ? ceil_div(s.experts, ep) : s.experts;
    std::uint64_t width = ep > 1 ? s.moe_intermediate : ceil_div(s.moe_intermediate, tp);
    // Mxfp4MoEMethod.create_weights pads each rank's expert width to a multiple
    // of 256 for its kernels (gpt-oss's 2880 is held as 3072).
    if (s.quant == WeightQuant::kMxfp4Experts) width = round_up(width, 256);
    std::uint64_t one =
        expert_bytes(2 * width, s.hidden, s, e) + expert_bytes(s.hidden, width, s, e);
    if (s.expert_bias) one += (2 * width + s.hidden) * e;
    w.experts += local_experts * one + s.experts * s.hidden * e;  // + the router
    if (s.expert_bias) w.experts += s.experts * e;
    const std::uint64_t shared_width =
        ceil_div(s.shared_experts * s.moe_intermediate + s.shared_intermediate, tp);
    if (shared_width > 0) {
      w.mlp += linear_bytes(2 * shared_width, s.hidden, mlp_quant, s, e) +
               linear_bytes(s.hidden, shared_width, mlp_quant, s, e);
      if (s.shared_intermediate > 0) w.mlp += s.hidden * e;  // Qwen2-MoE's shared_expert_gate
    }
  }
  return w;
}

HeaviestStage heaviest_stage(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp,
                             std::uint32_t ep, std::uint32_t attention_tp) {
  HeaviestStage out;
  for (std::uint32_t stage = 0; stage < pp; ++stage) {
    RankWeights w = rank_weights(model, tp, pp, stage, ep, attention_tp);
    if (stage == 0 || w.total() > out.weights.total()) out = HeaviestStage{stage, w};
  }
  return out;
}

}  // namespace kvreplay
