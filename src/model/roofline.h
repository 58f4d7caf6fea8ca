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
//                    keys (min(q + 1, window) in a sliding layer); d_qk = d_v = head_dim.
//                    MLA decodes in its absorbed form, d_qk = kv_lora_rank +
//                    qk_rope_head_dim, d_v = kv_lora_rank, and prefills in its MHA
//                    form, d_qk = qk_nope + qk_rope, d_v = v_head, plus kv_b_proj's
//                    2 * heads * kv_lora_rank * (qk_nope + v_head) FLOPs a key of each
//                    prefill chunk (its context and its tokens), at the linear peak
//   weight bytes     weight_bytes, less the routed experts no token of the step picks
//                    (a MoE layer's E experts, each token picking k, are all read with
//                    probability 1 - (1 - k/E)^tokens each), and less an untied input
//                    embedding table, of which a step reads one row a token
//   KV bytes         per layer, every chunk reads its context (the window's, in a
//                    sliding layer) and writes its tokens, at the per-GPU bytes of a
//                    token in one layer
//
// and per GPU (tensor parallelism divides FLOPs, weights and KV heads; a KV head
// replicated across ranks is read on each):
//
//   compute_ms  = prefill FLOPs / tp / (peak * prefill_efficiency)
//               + decode FLOPs / tp / (peak * decode_efficiency)
//                 (a request's logits row goes with its chunk; peak is the linear
//                 layers' peak times fp8_efficiency for W8A8, attention's bf16 peak)
//   memory_ms   = (weight bytes / tp + KV bytes per GPU) / (hbm_bandwidth * bandwidth_efficiency)
//                 + routed experts' bytes / tp / (hbm_bandwidth * bandwidth_efficiency
//                 * expert_efficiency) (fused MoE's grouped GEMM pads each expert's
//                 tokens to its block, moe_align_block_size, and reads its weights in
//                 small tiles: below the dense layers' share of the bandwidth)
//   comm_ms     = tp > 1: 2 all-reduces a layer of tokens * hidden * dtype bytes, each
//                 by its size (vLLM's custom all-reduce): one-shot at 2 GPUs or
//                 below 512 KiB (256 KiB past 4 GPUs), allreduce_latency_us
//                 + (tp - 1) * bytes / (link * link_efficiency); above, two-shot,
//                 2 * allreduce_latency_us + 2 (tp - 1) / tp * bytes / (link * ...)
//               Attention replicas (ParallelLayout::dp_attention, SGLang's
//               dp_attention.py): the attention's all-reduce within a replica of
//               tp / dp GPUs over its tokens; the MLP's a gather and a
//               reduce-scatter of every token over tp (two latencies, 2 (tp - 1)
//               / tp of the bytes); with expert parallelism (ParallelLayout::ep)
//               a MoE layer's are DeepEP's dispatch and combine instead
//               (add_collectives). Not overlapped with compute.
//   step_ms     = max(compute_ms, memory_ms) + comm_ms + step_overhead_ms
//                 + prefill_pass_ms when the step runs any prompt tokens
//                 + layers * layer_overhead_us
//
// Two fixed costs outside the GPU's arithmetic. prefill_pass_ms: a step that
// prefills runs outside the decode CUDA graphs (vLLM captures graphs for
// decode-sized batches, `CudagraphDispatcher`; SGLang's `CudaGraphRunner.can_run`
// takes decode batches only), so it pays the kernels' launch and the attention
// metadata's build on the host. request_overhead_ms: what a request spends in
// the server outside the engine's steps (HTTP, tokenization, the hand-off to
// the engine core, detokenization of the first chunk): the engine sees a
// request that long after the client sent it, so its TTFT and end-to-end
// latency include it (Simulator::submit).
// layer_overhead_us: what a layer's kernels cost beyond their arithmetic and
// traffic at a small batch, each a few microseconds at least however little
// it computes (a decoder layer launches a dozen: norms, rotary, attention,
// the all-reduces' and the MoE's routing kernels); it makes a deep model's
// step slower than its bytes alone say.
//
// The linear layers' peak is the GPU's dense bf16 figure, or its fp8 one for a
// W8A8 model (8-bit weights and activations; attention stays at bf16).
// Activations and the sampler are left out: a documented approximation, fitted
// through the constants (README: "Calibrating the cost model").
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/gpu.h"
#include "model/model_config.h"

namespace kvreplay {

// The efficiency constants, in one place. These are the built-in values, from
// first principles; a cost profile (model/cost_profile.h) replaces them, and
// the shipped profile's fitted values are what a run uses unless told
// otherwise. A prefill chunk's FLOPs run at prefill_efficiency of the dense
// peak, a decode's at decode_efficiency; a W8A8 model's linear layers at the
// GPU's fp8 peak times fp8_efficiency as well. Weights and KV stream at
// bandwidth_efficiency of HBM bandwidth, NCCL's all-reduce at link_efficiency
// of the link; the fixed cost is the scheduler, sampling and the launch of a
// CUDA-graph step.
struct RooflineConstants {
  double prefill_efficiency = 0.6;
  double decode_efficiency = 0.6;
  double fp8_efficiency = 1.0;
  double bandwidth_efficiency = 0.8;
  double link_efficiency = 0.7;
  double allreduce_latency_us = 5.0;
  double step_overhead_ms = 0.5;
  double prefill_pass_ms = 0.0;
  double request_overhead_ms = 0.0;
  double expert_efficiency = 1.0;
  double layer_overhead_us = 0.0;
  bool operator==(const RooflineConstants&) const = default;
};

// The work of one step, summed over its scheduled chunks.
class StepWork {
 public:
  // `window`: the sliding window of the model's sliding layers (0: none).
  explicit StepWork(std::uint32_t window = 0) : window_(window) {}

  void clear() {
    tokens_ = requests_ = prefill_tokens_ = decode_requests_ = 0;
    full_pairs_ = window_pairs_ = decode_full_pairs_ = decode_window_pairs_ = 0.0;
    full_read_ = window_read_ = context_read_ = prefill_keys_ = 0.0;
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
      prefill_keys_ += p + c;
    } else {
      ++decode_requests_;
    }
    const double full = attention_pairs(p, c, 0);
    full_pairs_ += full;
    full_read_ += p + c;
    context_read_ += p + c;
    if (!prefill) decode_full_pairs_ += full;
    if (window_ > 0) {
      const double w = window_;
      const double sliding = attention_pairs(p, c, w);
      window_pairs_ += sliding;
      window_read_ += std::min(p, w - 1) + c;
      if (!prefill) decode_window_pairs_ += sliding;
    }
  }

  std::uint64_t tokens() const { return tokens_; }
  std::uint64_t requests() const { return requests_; }
  std::uint64_t prefill_tokens() const { return prefill_tokens_; }
  std::uint64_t decode_requests() const { return decode_requests_; }
  double full_pairs() const { return full_pairs_; }                // per full-attention layer
  double window_pairs() const { return window_pairs_; }            // per sliding layer
  double decode_full_pairs() const { return decode_full_pairs_; }  // the decodes' share
  double decode_window_pairs() const { return decode_window_pairs_; }
  double full_read() const { return full_read_; }        // KV tokens read + written, per full layer
  double window_read() const { return window_read_; }    // per sliding layer
  double context_read() const { return context_read_; }  // context + tokens, the linear model's
  double prefill_keys() const { return prefill_keys_; }  // context + tokens of the prefill chunks

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
  double prefill_keys_ = 0;
  double decode_full_pairs_ = 0, decode_window_pairs_ = 0;
};

// A step's cost, by part.
struct StepCost {
  double compute_ms = 0;
  double memory_ms = 0;
  double comm_ms = 0;
  double overhead_ms = 0;
  double total_ms() const { return std::max(compute_ms, memory_ms) + comm_ms + overhead_ms; }
};

// A step's cost before the constants: each part at efficiency 1 (ms), and the
// all-reduces' count and transfer. at() prices it under any constants, which
// is how Roofline::cost prices every step, and how calibrate re-prices a
// recorded schedule.
struct StepTerms {
  double prefill_linear_ms = 0, prefill_attention_ms = 0;
  double decode_linear_ms = 0, decode_attention_ms = 0;
  double memory_ms = 0;
  double expert_memory_ms = 0;  // the routed experts' weights, apart (expert_efficiency)
  double allreduces = 0, allreduce_transfer_ms = 0;  // allreduces: in latencies
  bool fp8 = false;      // the linear layers at the fp8 peak (fp8_efficiency applies)
  bool prefill = false;  // the step runs prompt tokens (prefill_pass_ms applies)
  double layers = 0;     // the layers a step passes through (layer_overhead_us applies)
  StepCost at(const RooflineConstants& c) const {
    const double f = fp8 ? c.fp8_efficiency : 1.0;
    StepCost out;
    out.compute_ms = (prefill_linear_ms / f + prefill_attention_ms) / c.prefill_efficiency +
                     (decode_linear_ms / f + decode_attention_ms) / c.decode_efficiency;
    out.memory_ms = memory_ms / c.bandwidth_efficiency +
                    expert_memory_ms / (c.bandwidth_efficiency * c.expert_efficiency);
    out.comm_ms =
        allreduces * c.allreduce_latency_us * 1e-3 + allreduce_transfer_ms / c.link_efficiency;
    out.overhead_ms = c.step_overhead_ms + (prefill ? c.prefill_pass_ms : 0.0) +
                      layers * c.layer_overhead_us * 1e-3;
    return out;
  }
};

// How a deployment spreads the model beyond --tp (RunConfig::dp_attention, ::ep).
struct ParallelLayout {
  std::uint32_t dp_attention = 1;
  std::uint32_t ep = 1;
};

class Roofline {
 public:
  // `kv_bytes_per_token_layer`: KV bytes of one token in one layer on one GPU
  // (the run's bytes_per_token / its layers). Errors: no parameter count.
  static Result<Roofline, std::string> make(const ModelSpec& model, const GpuSpec& gpu,
                                            std::uint32_t tp, std::uint32_t pp,
                                            double kv_bytes_per_token_layer,
                                            const RooflineConstants& constants,
                                            const ParallelLayout& layout = {});

  StepTerms terms(const StepWork& work) const;
  StepCost cost(const StepWork& work) const { return terms(work).at(constants_); }
  double step_ms(const StepWork& work) const { return cost(work).total_ms(); }

  // Speculative decoding's draft (engine/speculative.h): `k` passes a step of
  // `layers` decoder layers like the model's, plus `extra_params` of its own
  // (EAGLE's fc, MTP's eh_proj), each pass with the lm_head; the first over
  // the step's tokens, the others over one token a request; each reads its
  // layers' KV. A verify's logits are a row a token.
  void set_draft(std::uint32_t k, std::uint32_t layers, double extra_params) {
    draft_k_ = k;
    draft_layers_ = layers;
    draft_extra_params_ = extra_params;
  }

  const RooflineConstants& constants() const { return constants_; }
  // The same model and GPU under other constants (what calibrate fits).
  Roofline with_constants(const RooflineConstants& constants) const {
    Roofline out = *this;
    out.constants_ = constants;
    return out;
  }
  const std::string& gpu() const { return gpu_; }
  double peak_flops() const { return peak_flops_; }  // per GPU, the linear layers'
  std::uint32_t sliding_window() const { return window_; }

 private:
  RooflineConstants constants_;
  std::string gpu_;
  std::uint32_t tp_ = 1;
  double peak_flops_ = 0, attention_peak_flops_ = 0, bandwidth_ = 0, link_ = 0;
  double linear_params_ = 0;                    // active parameters less the lm_head
  bool fp8_ = false;                            // W8A8 on a GPU with an fp8 rate
  double lm_head_params_ = 0;                   // vocab * hidden
  double weight_bytes_ = 0, routed_bytes_ = 0;  // weight_bytes_ less an untied input table
  double embedding_row_bytes_ = 0;              // one row of the input table
  double routed_experts_ = 0, experts_per_token_ = 0;
  double full_layers_ = 0, window_layers_ = 0;
  double attention_flops_per_pair_ = 0;  // per layer; MLA: the absorbed form's (decode)
  // MLA's prefill form (per head, K of qk_nope + qk_rope, V of v_head): a
  // pair's FLOPs, and each key's up-projection from the latent, per layer.
  double prefill_flops_per_pair_ = 0, prefill_flops_per_key_ = 0;
  double kv_bytes_per_token_layer_ = 0;
  double layers_ = 0, hidden_bytes_ = 0;  // for the all-reduces
  std::uint32_t window_ = 0;
  // Attention data parallelism and expert parallelism (ParallelLayout).
  std::uint32_t dp_ = 1, ep_ = 1;
  double attention_bytes_ = 0;                     // the attention's weights, the whole model's
  double moe_layers_ = 0;                          // layers with routed experts
  double dispatch_bytes_ = 0, combine_bytes_ = 0;  // a (token, expert) pair's all-to-all

  // Speculative decoding's draft (set_draft).
  std::uint32_t draft_k_ = 0, draft_layers_ = 0;
  double draft_extra_params_ = 0, bytes_per_parameter_ = 0;

  // Per-layer collectives of a step of `tokens` tokens (comm_ms's rules).
  void add_collectives(double tokens, StepTerms& out) const;
  // The draft's passes (set_draft), at the decode's rates.
  void add_draft(const StepWork& work, double layer_weight_bytes, StepTerms& out) const;
};

}  // namespace kvreplay
