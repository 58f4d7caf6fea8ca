#include "model/roofline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvreplay {

Result<Roofline, std::string> Roofline::make(const ModelSpec& model, const GpuSpec& gpu,
                                             std::uint32_t tp, std::uint32_t pp,
                                             double kv_bytes_per_token_layer,
                                             const RooflineConstants& constants) {
  (void)pp;  // stages run in turn: the sum over them is the whole model (file comment)
  if (model.parameters.active == 0 || model.hidden_size == 0 || model.layers == 0) {
    return Unexpected{
        std::string("the roofline cost model needs the model's parameter count (--model or "
                    "--model-config); give --cost-model linear for hand-set geometry")};
  }
  Roofline r;
  r.constants_ = constants;
  r.gpu_ = gpu.name;
  r.tp_ = std::max<std::uint32_t>(tp, 1);
  const double bf16 = gpu.bf16_dense_tflops * 1e12;
  r.attention_peak_flops_ = bf16;
  r.peak_flops_ = model.fp8_linear && gpu.fp8_dense_tflops ? *gpu.fp8_dense_tflops * 1e12 : bf16;
  r.bandwidth_ = static_cast<double>(gpu.hbm_bandwidth_bytes_per_second);
  r.link_ = static_cast<double>(gpu.interconnect_bytes_per_second);
  r.lm_head_params_ = static_cast<double>(model.vocab_size) * model.hidden_size;
  r.linear_params_ =
      std::max(0.0, static_cast<double>(model.parameters.active) - r.lm_head_params_);
  r.weight_bytes_ = static_cast<double>(model.weight_bytes);
  r.routed_bytes_ = static_cast<double>(model.routed_expert_bytes);
  r.routed_experts_ = model.routed_experts;
  r.experts_per_token_ = model.experts_per_token;
  for (AttentionKind kind : model.layer_attention) {
    (kind == AttentionKind::kSliding ? r.window_layers_ : r.full_layers_) += 1;
  }
  if (model.layer_attention.empty()) r.full_layers_ = model.layers;
  r.window_ = r.window_layers_ > 0 ? model.sliding_window : 0;
  const double heads = model.attention_heads;
  r.attention_flops_per_pair_ =
      model.mla ? 2 * heads * (2.0 * model.kv_lora_rank + model.qk_rope_head_dim)
                : 2 * heads * 2.0 * model.head_dim;
  r.kv_bytes_per_token_layer_ = kv_bytes_per_token_layer;
  r.layers_ = model.layers;
  r.hidden_bytes_ = static_cast<double>(model.hidden_size) * dtype_bytes(model.dtype);
  return r;
}

StepCost Roofline::cost(const StepWork& work) const {
  StepCost out;
  out.overhead_ms = constants_.step_overhead_ms;
  if (work.tokens() == 0) return out;
  const double tp = tp_;
  const double tokens = static_cast<double>(work.tokens());
  const double linear =
      2 * linear_params_ * tokens + 2 * lm_head_params_ * static_cast<double>(work.requests());
  const double attention = attention_flops_per_pair_ * (full_layers_ * work.full_pairs() +
                                                        window_layers_ * work.window_pairs());
  out.compute_ms = (linear / (peak_flops_ * constants_.compute_efficiency) +
                    attention / (attention_peak_flops_ * constants_.compute_efficiency)) /
                   tp * 1e3;
  double weights = weight_bytes_;
  if (routed_experts_ > 0 && routed_bytes_ > 0) {
    const double untouched = std::pow(1 - experts_per_token_ / routed_experts_, tokens);
    weights -= routed_bytes_ * untouched;
  }
  const double kv = kv_bytes_per_token_layer_ *
                    (full_layers_ * work.full_read() + window_layers_ * work.window_read());
  out.memory_ms = (weights / tp + kv) / (bandwidth_ * constants_.bandwidth_efficiency) * 1e3;
  if (tp_ > 1) {
    const double bytes = tokens * hidden_bytes_;
    const double one = constants_.allreduce_latency_us * 1e-3 +
                       2 * (tp - 1) / tp * bytes / (link_ * constants_.link_efficiency) * 1e3;
    out.comm_ms = 2 * layers_ * one;
  }
  return out;
}

}  // namespace kvreplay
