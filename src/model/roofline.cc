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
  const bool fp8 = model.fp8_activations && gpu.fp8_dense_tflops;
  r.peak_flops_ = fp8 ? *gpu.fp8_dense_tflops * 1e12 : bf16;
  r.fp8_ = fp8;
  r.bandwidth_ = static_cast<double>(gpu.hbm_bandwidth_bytes_per_second);
  r.link_ = static_cast<double>(gpu.interconnect_bytes_per_second);
  r.lm_head_params_ = static_cast<double>(model.vocab_size) * model.hidden_size;
  r.linear_params_ =
      std::max(0.0, static_cast<double>(model.parameters.active) - r.lm_head_params_);
  r.weight_bytes_ =
      static_cast<double>(model.weight_bytes) - static_cast<double>(model.input_embedding_bytes);
  if (model.input_embedding_bytes > 0) {
    r.embedding_row_bytes_ = static_cast<double>(model.input_embedding_bytes) / model.vocab_size;
  }
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
  r.prefill_flops_per_pair_ = r.attention_flops_per_pair_;
  if (model.mla && model.shape.v_head > 0) {
    // Prefill runs MLA in its MHA form (vLLM's MLACommonImpl._forward_prefill,
    // SGLang's forward_normal): each head's K of qk_nope + qk_rope and V of
    // v_head, after kv_b_proj expands every key's latent to them.
    const double nope = static_cast<double>(model.shape.qk_nope);
    const double v = static_cast<double>(model.shape.v_head);
    r.prefill_flops_per_pair_ = 2 * heads * (nope + model.qk_rope_head_dim + v);
    r.prefill_flops_per_key_ = 2 * heads * model.kv_lora_rank * (nope + v);
  }
  r.kv_bytes_per_token_layer_ = kv_bytes_per_token_layer;
  r.layers_ = model.layers;
  r.hidden_bytes_ = static_cast<double>(model.hidden_size) * dtype_bytes(model.dtype);
  return r;
}

StepTerms Roofline::terms(const StepWork& work) const {
  StepTerms out;
  out.fp8 = fp8_;
  if (work.tokens() == 0) return out;
  out.prefill = work.prefill_tokens() > 0;
  out.layers = layers_;
  const double tp = tp_;
  const double tokens = static_cast<double>(work.tokens());
  // Prefill and decode apart: each token's linear FLOPs and its request's
  // logits row, and the attention pairs of its chunk.
  const double decode_requests = static_cast<double>(work.decode_requests());
  const double prefill_tokens = static_cast<double>(work.prefill_tokens());
  const double prefill_requests = static_cast<double>(work.requests()) - decode_requests;
  const double decode_pairs =
      full_layers_ * work.decode_full_pairs() + window_layers_ * work.decode_window_pairs();
  const double all_pairs = full_layers_ * work.full_pairs() + window_layers_ * work.window_pairs();
  auto linear_ms = [&](double tokens_in, double requests_in) {
    return (2 * linear_params_ * tokens_in + 2 * lm_head_params_ * requests_in) / peak_flops_ / tp *
           1e3;
  };
  auto attention_ms = [&](double pairs) {
    return attention_flops_per_pair_ * pairs / attention_peak_flops_ / tp * 1e3;
  };
  out.prefill_linear_ms =
      linear_ms(prefill_tokens, prefill_requests) +
      prefill_flops_per_key_ * full_layers_ * work.prefill_keys() / peak_flops_ / tp * 1e3;
  out.prefill_attention_ms =
      prefill_flops_per_pair_ * (all_pairs - decode_pairs) / attention_peak_flops_ / tp * 1e3;
  out.decode_linear_ms = linear_ms(tokens - prefill_tokens, decode_requests);
  out.decode_attention_ms = attention_ms(decode_pairs);
  double weights = weight_bytes_ + embedding_row_bytes_ * tokens;
  double experts = 0;  // the routed experts' bytes the step reads
  if (routed_experts_ > 0 && routed_bytes_ > 0) {
    const double untouched = std::pow(1 - experts_per_token_ / routed_experts_, tokens);
    experts = routed_bytes_ * (1 - untouched);
    weights -= routed_bytes_;
  }
  const double kv = kv_bytes_per_token_layer_ *
                    (full_layers_ * work.full_read() + window_layers_ * work.window_read());
  out.memory_ms = (weights / tp + kv) / bandwidth_ * 1e3;
  out.expert_memory_ms = experts / tp / bandwidth_ * 1e3;
  if (tp_ > 1) {
    // Two all-reduces a layer of tokens * hidden values. vLLM's custom
    // all-reduce (CustomAllreduce::allreduce, csrc/custom_all_reduce.cuh)
    // runs one-shot at 2 GPUs, and below 512 KiB up to 4 GPUs or 256 KiB at
    // more: one latency, each GPU reading its tp - 1 peers' whole buffers.
    // Above, two-shot (a reduce-scatter and an all-gather, as NCCL's ring):
    // two latencies and 2 (tp - 1) / tp of the buffer each way.
    const double bytes = tokens * hidden_bytes_;
    const bool one_shot = tp_ == 2 || bytes < (tp_ <= 4 ? 512.0 : 256.0) * 1024;
    const double count = 2 * layers_;
    out.allreduces = count * (one_shot ? 1 : 2);
    out.allreduce_transfer_ms =
        count * (one_shot ? tp - 1 : 2 * (tp - 1) / tp) * bytes / link_ * 1e3;
  }
  return out;
}

}  // namespace kvreplay
