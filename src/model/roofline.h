// The roofline cost of one scheduler step (SPEC 3.3): virtual time from the
// model and the GPU, every constant in RooflineConstants.
//
// A step runs the model once over the tokens it schedules: each scheduled
// request contributes a chunk of `tokens` tokens after `context` tokens already
// in its KV cache (a decode is a chunk of one). Per step, for the whole model
// (every pipeline stage in turn: a synchronous step passes through the stages
// one after the other, so --pp divides memory, not time):
//
//   linear FLOPs     2 * (active_parameters - vocab * hidden) * tokens
//                    + 2 * vocab * hidden * requests          (logits: one row a request)
//   attention FLOPs  2 * heads * (d_qk + d_v) * pairs, per layer, where pairs counts
//                    (query, key) pairs: a chunk's token at position q attends to q + 1
//                    keys (min(q + 1, window) in a sliding layer); d_qk = d_v = head_dim,
//                    MLA in its absorbed form d_qk = kv_lora_rank + qk_rope_head_dim,
//                    d_v = kv_lora_rank
//   weight bytes     weight_bytes, less the routed experts no token of the step picks:
//                    a MoE layer's E experts, each token picking k, are all read with
//                    probability 1 - (1 - k/E)^tokens each
//   KV bytes         per layer, every chunk reads its context (the window's, in a
//                    sliding layer) and writes its tokens, at the per-GPU bytes of a
//                    token in one layer
//
// and per GPU (tensor parallelism divides FLOPs, weights and KV heads; a KV head
// replicated across ranks is read on each):
//
//   compute_ms  = FLOPs / tp / (peak_flops * compute_efficiency)
//   memory_ms   = (weight bytes / tp + KV bytes per GPU) / (hbm_bandwidth * bandwidth_efficiency)
//   comm_ms     = tp > 1: 2 all-reduces a layer of tokens * hidden * dtype bytes, each
//                 allreduce_latency_us + 2 (tp - 1) / tp * bytes / (link * link_efficiency)
//   step_ms     = max(compute_ms, memory_ms) + comm_ms + step_overhead_ms
//
// peak_flops is the GPU's dense bf16 figure, or its fp8 one for a model whose
// linear layers are stored in fp8 (attention stays at bf16). Activations and
// the sampler are left out: a documented approximation, calibrated through the
// constants (README: "Calibrating the cost model").
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/gpu.h"
#include "model/model_config.h"

namespace kvreplay {

// The efficiency constants, in one place. Defaults: a large prefill reaches
// about 60% of a Hopper GPU's dense peak, a decode streams weights at about 80%
// of HBM bandwidth, NCCL's all-reduce about 70% of the link; the fixed cost is
// the scheduler, sampling and the launch of a CUDA-graph step.
struct RooflineConstants {
  double compute_efficiency = 0.6;
  double bandwidth_efficiency = 0.8;
  double link_efficiency = 0.7;
  double allreduce_latency_us = 5.0;
  double step_overhead_ms = 0.5;
};

// The work of one step, summed over its scheduled chunks.
class StepWork {
 public:
  // `window`: the sliding window of the model's sliding layers (0: none).
  explicit StepWork(std::uint32_t window = 0) : window_(window) {}

  void clear() {
    tokens_ = requests_ = prefill_tokens_ = decode_requests_ = 0;
    full_pairs_ = window_pairs_ = 0.0;
    full_read_ = window_read_ = context_read_ = 0.0;
  }
  // A request's chunk: `tokens` computed after `context` already cached;
  // `prefill` when they are prompt (or recomputed) tokens, not one decode.
  // Inline: called once per request per step.
  void add(std::uint64_t context, std::uint64_t tokens, bool prefill) {
    if (tokens == 0) return;
    const double p = static_cast<double>(context), c = static_cast<double>(tokens);
    tokens_ += tokens;
    ++requests_;
    if (prefill) {
      prefill_tokens_ += tokens;
    } else {
      ++decode_requests_;
    }
    full_pairs_ += attention_pairs(p, c, 0);
    full_read_ += p + c;
    context_read_ += p + c;
    if (window_ > 0) {
      const double w = window_;
      window_pairs_ += attention_pairs(p, c, w);
      window_read_ += std::min(p, w - 1) + c;
    }
  }

  std::uint64_t tokens() const { return tokens_; }
  std::uint64_t requests() const { return requests_; }
  std::uint64_t prefill_tokens() const { return prefill_tokens_; }
  std::uint64_t decode_requests() const { return decode_requests_; }
  double full_pairs() const { return full_pairs_; }      // per full-attention layer
  double window_pairs() const { return window_pairs_; }  // per sliding layer
  double full_read() const { return full_read_; }        // KV tokens read + written, per full layer
  double window_read() const { return window_read_; }    // per sliding layer
  double context_read() const { return context_read_; }  // context + tokens, the linear model's

 private:
  // Keys the tokens at positions [context, context + tokens) attend to,
  // summed, in a layer whose window is `window` (0: full attention):
  // position q sees min(q + 1, window) keys.
  static double attention_pairs(double context, double tokens, double window) {
    const double first = context + 1, last = context + tokens;  // q + 1 over the chunk
    if (window <= 0 || last <= window) return tokens * context + tokens * (tokens + 1) / 2;
    if (first >= window) return tokens * window;
    // first..window grow, the rest see the whole window.
    return (window * (window + 1) - context * (context + 1)) / 2 + (last - window) * window;
  }

  std::uint32_t window_;
  std::uint64_t tokens_ = 0, requests_ = 0, prefill_tokens_ = 0, decode_requests_ = 0;
  double full_pairs_ = 0, window_pairs_ = 0, full_read_ = 0, window_read_ = 0, context_read_ = 0;
};

// A step's cost, by part.
struct StepCost {
  double compute_ms = 0;
  double memory_ms = 0;
  double comm_ms = 0;
  double overhead_ms = 0;
  double total_ms() const { return std::max(compute_ms, memory_ms) + comm_ms + overhead_ms; }
};

class Roofline {
 public:
  // `kv_bytes_per_token_layer`: KV bytes of one token in one layer on one GPU
  // (the run's bytes_per_token / its layers). Errors: no parameter count.
  static Result<Roofline, std::string> make(const ModelSpec& model, const GpuSpec& gpu,
                                            std::uint32_t tp, std::uint32_t pp,
                                            double kv_bytes_per_token_layer,
                                            const RooflineConstants& constants);

  StepCost cost(const StepWork& work) const;
  double step_ms(const StepWork& work) const { return cost(work).total_ms(); }

  const RooflineConstants& constants() const { return constants_; }
  const std::string& gpu() const { return gpu_; }
  double peak_flops() const { return peak_flops_; }  // per GPU, the linear layers'
  std::uint32_t sliding_window() const { return window_; }

 private:
  RooflineConstants constants_;
  std::string gpu_;
  std::uint32_t tp_ = 1;
  double peak_flops_ = 0, attention_peak_flops_ = 0, bandwidth_ = 0, link_ = 0;
  double linear_params_ = 0;   // active parameters less the lm_head
  double lm_head_params_ = 0;  // vocab * hidden
  double weight_bytes_ = 0, routed_bytes_ = 0;
  double routed_experts_ = 0, experts_per_token_ = 0;
  double full_layers_ = 0, window_layers_ = 0;
  double attention_flops_per_pair_ = 0;  // per layer
  double kv_bytes_per_token_layer_ = 0;
  double layers_ = 0, hidden_bytes_ = 0;  // for the all-reduces
  std::uint32_t window_ = 0;
};

}  // namespace kvreplay
