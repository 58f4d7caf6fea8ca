#include "model/roofline.h"

#include "model/rank_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvreplay {

Result<Roofline, std::string> Roofline::make(const ModelSpec& model, const GpuSpec& gpu,
                                             std::uint32_t tp, std::uint32_t pp,
                                             double kv_bytes_per_token_layer,
                                             const RooflineConstants& constants,
                                             const ParallelLayout& layout) {
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
  if (model.parameters.total > 0) {
    r.bytes_per_parameter_ =
        static_cast<double>(model.weight_bytes) / static_cast<double>(model.parameters.total);
  }
  r.dp_ = std::max<std::uint32_t>(layout.dp_attention, 1);
  r.ep_ = std::max<std::uint32_t>(layout.ep, 1);
  if (r.dp_ > 1) r.attention_bytes_ = static_cast<double>(rank_weights(model, 1, 1, 0).attention);
  for (bool moe : model.shape.moe_layer) r.moe_layers_ += moe ? 1 : 0;
  // DeepEP's low-latency layout (csrc/legacy/config.hpp, LowLatencyLayout):
  // a token sent to an expert carries its hidden state in FP8 with one float
  // scale per 128 channels and a 16-byte header (hidden + hidden / 32 + 16
  // bytes; SGLang's default, SGLANG_DEEPEP_BF16_DISPATCH off), and comes back
  // in bf16 (2 * hidden).
  const double hidden = model.hidden_size;
  r.dispatch_bytes_ = hidden + hidden / 32 + 16;
  r.combine_bytes_ = 2 * hidden;
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
  // A decode's logits: a row a token (1 + K under speculative decoding's verify).
  out.decode_linear_ms = linear_ms(tokens - prefill_tokens, tokens - prefill_tokens);
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
  // Attention data parallelism: each GPU holds its replica's attention whole
  // over tp / dp GPUs (more weight bytes than tp's split) and reads its
  // replica's KV only (the replicas balanced: 1 / dp of the step's).
  const double attention_tp = tp / dp_;
  const double replicated = dp_ > 1 ? attention_bytes_ * (1 / attention_tp - 1 / tp) : 0.0;
  out.memory_ms = (weights / tp + replicated + kv / dp_) / bandwidth_ * 1e3;
  out.expert_memory_ms = experts / tp / bandwidth_ * 1e3;
  if (tp_ > 1) add_collectives(tokens, out);
  if (draft_k_ > 0) {
    // One layer's weights as the step read them (its experts' share included).
    const double lm_head_bytes = lm_head_params_ * bytes_per_parameter_;
    add_draft(work, (weights + experts - lm_head_bytes) / layers_, out);
  }
  return out;
}

void Roofline::add_draft(const StepWork& work, double layer_weight_bytes, StepTerms& out) const {
  const double tp = tp_;
  const double k = draft_k_, layers = draft_layers_;
  const double requests = static_cast<double>(work.requests());
  // The first pass runs over every token the step scheduled, the other K - 1
  // over one token a request (EagleProposer.propose); K lm_head rows a request.
  const double passes_tokens = static_cast<double>(work.tokens()) + (k - 1) * requests;
  const double layer_params = linear_params_ / layers_;
  const double flops = 2 * (layer_params * layers + draft_extra_params_) * passes_tokens +
                       2 * lm_head_params_ * k * requests;
  out.decode_linear_ms += flops / peak_flops_ / tp * 1e3;
  // Each pass reads the draft's weights, the lm_head and its layers' KV.
  const double lm_head_bytes = lm_head_params_ * bytes_per_parameter_;
  const double weights = k * (layer_weight_bytes * layers +
                              draft_extra_params_ * bytes_per_parameter_ + lm_head_bytes);
  const double kv = k * layers * kv_bytes_per_token_layer_ * work.full_read();
  out.memory_ms += (weights / tp + kv / dp_) / bandwidth_ * 1e3;
  out.layers += k * layers;
}

void Roofline::add_collectives(double tokens, StepTerms& out) const {
  // An all-reduce of `bytes` over `n` GPUs, `count` times. vLLM's custom
  // all-reduce (CustomAllreduce::allreduce, csrc/custom_all_reduce.cuh) runs
  // one-shot at 2 GPUs, and below 512 KiB up to 4 GPUs or 256 KiB at more:
  // one latency, each GPU reading its n - 1 peers' whole buffers. Above,
  // two-shot (a reduce-scatter and an all-gather, as NCCL's ring): two
  // latencies and 2 (n - 1) / n of the buffer each way.
  auto all_reduce = [&](double bytes, double n, double count) {
    if (n <= 1 || count <= 0) return;
    const bool one_shot = n == 2 || bytes < (n <= 4 ? 512.0 : 256.0) * 1024;
    out.allreduces += count * (one_shot ? 1 : 2);
    out.allreduce_transfer_ms += count * (one_shot ? n - 1 : 2 * (n - 1) / n) * bytes / link_ * 1e3;
  };
  const double tp = tp_;
  const double bytes = tokens * hidden_bytes_;
  if (dp_ == 1) {
    // Tensor parallelism: two all-reduces a layer (after the attention and
    // after the MLP) of the step's tokens. Expert parallelism without
    // attention replicas keeps them: every GPU holds every token, computes its
    // own experts and the MLP's all-reduce sums them.
    all_reduce(bytes, tp, 2 * layers_);
    return;
  }
  // Attention data parallelism (SGLang's dp_attention.py): the attention's
  // all-reduce stays within a replica, over its tokens; the MLP runs over every
  // replica's tokens, gathered before it (dp_gather) and reduce-scattered back
  // after it (dp_reduce_scatter_tensor): a reduce-scatter and an all-gather of
  // the step's tokens over tp GPUs, as a two-shot all-reduce.
  all_reduce(bytes / dp_, tp / dp_, layers_);
  const bool all_to_all = ep_ > 1 && moe_layers_ > 0;
  const double gathered_layers = all_to_all ? layers_ - moe_layers_ : layers_;
  out.allreduces += 2 * gathered_layers;
  out.allreduce_transfer_ms += gathered_layers * 2 * (tp - 1) / tp * bytes / link_ * 1e3;
  if (all_to_all) {
    // Expert parallelism over replicas (DeepEP): each GPU sends its share of
    // the tokens, each to its k experts, (ep - 1) / ep of them to other GPUs,
    // and takes their results back: a dispatch and a combine a MoE layer,
    // each a latency.
    const double ep = ep_;
    const double pairs = tokens / tp * experts_per_token_ * (ep - 1) / ep;
    out.allreduces += 2 * moe_layers_;
    out.allreduce_transfer_ms +=
        moe_layers_ * pairs * (dispatch_bytes_ + combine_bytes_) / link_ * 1e3;
  }
}

}  // namespace kvreplay
