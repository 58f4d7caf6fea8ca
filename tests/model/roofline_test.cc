// The roofline step cost (model/roofline.h) against figures worked out from
// first principles: a lone decode of a dense model reads its weights once, a
// long prefill is compute-bound at 2 FLOPs a parameter a token plus causal
// attention, tensor parallelism divides both and adds its all-reduces, a MoE
// decode reads only the experts it picks, an fp8 checkpoint runs at fp8 rate.
#include "model/roofline.h"

#include <catch2/catch.hpp>

#include <cmath>

#include "model/gpu.h"
#include "model/presets.h"
#include "model/rank_weights.h"

namespace kvreplay {
namespace {

const ModelSpec& preset(const char* name) {
  const ModelPreset* found = find_model_preset(name);
  REQUIRE(found != nullptr);
  return found->spec;
}

const GpuSpec& gpu(const char* name) {
  const GpuSpec* found = find_gpu_preset(name);
  REQUIRE(found != nullptr);
  return *found;
}

// Every efficiency 1 and no fixed cost: the raw roofline.
RooflineConstants ideal() {
  RooflineConstants c;
  c.prefill_efficiency = c.decode_efficiency = c.fp8_efficiency = 1.0;
  c.bandwidth_efficiency = c.link_efficiency = 1.0;
  c.allreduce_latency_us = 0;
  c.step_overhead_ms = 0;
  return c;
}

// KV bytes of one token in one layer on one GPU of `tp` (no MLA).
double kv_layer_bytes(const ModelSpec& m, std::uint32_t tp) {
  const std::uint32_t heads = m.kv_heads >= tp ? m.kv_heads / tp : 1;
  return 2.0 * heads * m.head_dim * 2;  // K and V, bf16
}

Roofline make(const ModelSpec& m, const char* gpu_name, std::uint32_t tp = 1,
              RooflineConstants c = ideal()) {
  auto made = Roofline::make(m, gpu(gpu_name), tp, 1, kv_layer_bytes(m, tp), c);
  REQUIRE(made.ok());
  return made.value();
}

TEST_CASE("roofline: a lone decode of a dense model reads its weights once per token") {
  const ModelSpec& m = preset("llama-3.1-8b");
  const Roofline r = make(m, "h100-80gb");
  StepWork work;
  work.add(0, 1, false);  // the first decode: one token, no context
  const StepCost cost = r.cost(work);
  // 8.03e9 parameters in bf16 over 3.35 TB/s, less the untied input table
  // (128256 x 4096, 1.05 GB) of which one row is read, plus one token's K and V
  // in 32 layers.
  const double table = 128256.0 * 4096 * 2;
  REQUIRE(static_cast<double>(m.input_embedding_bytes) == table);
  const double weights_ms =
      (static_cast<double>(m.weight_bytes) - table + 4096 * 2) / 3.35e12 * 1e3;
  const double kv_ms = 32 * kv_layer_bytes(m, 1) / 3.35e12 * 1e3;
  CHECK(cost.memory_ms == Approx(weights_ms + kv_ms).epsilon(1e-9));
  CHECK(weights_ms == Approx(4.48).epsilon(0.01));  // 15.01 GB / 3.35 TB/s
  CHECK(cost.compute_ms < cost.memory_ms / 100);    // memory-bound by far
  CHECK(cost.comm_ms == 0);
  CHECK(r.step_ms(work) == Approx(cost.memory_ms));

  // The defaults: 80% of HBM bandwidth and 0.5 ms a step.
  const Roofline real = make(m, "h100-80gb", 1, RooflineConstants{});
  CHECK(real.step_ms(work) == Approx((weights_ms + kv_ms) / 0.8 + 0.5).epsilon(1e-9));
  // The same decode on an H200 (4.8 TB/s) is 3.35 / 4.8 as long.
  CHECK(make(m, "h200").cost(work).memory_ms == Approx(cost.memory_ms * 3.35 / 4.8).epsilon(1e-9));
}

TEST_CASE(
    "roofline: a long prefill is compute-bound: 2 FLOPs a parameter a token, plus attention") {
  const ModelSpec& m = preset("llama-3.1-8b");
  const Roofline r = make(m, "h100-80gb");
  StepWork work;
  work.add(0, 8192, true);
  const StepCost cost = r.cost(work);
  const double lm_head = 128256.0 * 4096;
  const double linear = 2 * (static_cast<double>(m.parameters.active) - lm_head) * 8192 +
                        2 * lm_head;  // logits for the chunk's last token only
  // Causal: token q attends to q + 1 keys, 8192 * 8193 / 2 pairs; 4 * heads * head_dim a pair
  // (QK^T and PV), 32 heads of 128, 32 layers.
  const double attention = 4.0 * 32 * 128 * (8192.0 * 8193 / 2) * 32;
  CHECK(cost.compute_ms == Approx((linear + attention) / 989.5e12 * 1e3).epsilon(1e-9));
  CHECK(cost.compute_ms > 10 * cost.memory_ms);
  // 7.0e9 parameters besides the embedding and lm_head: 1.14e14 FLOPs, and 1.8e13 of
  // attention, at 989.5 TFLOPS.
  CHECK(cost.compute_ms == Approx(133).epsilon(0.01));

  // A chunk after 8192 cached tokens: 8192 * 8192 more pairs than from scratch.
  StepWork later;
  later.add(8192, 8192, true);
  const double more = 4.0 * 32 * 128 * (8192.0 * 8192) * 32 / 989.5e12 * 1e3;
  CHECK(r.cost(later).compute_ms == Approx(cost.compute_ms + more).epsilon(1e-9));
}

TEST_CASE("roofline: a decode batch reads weights once and every sequence's KV") {
  const ModelSpec& m = preset("llama-3.1-8b");
  const Roofline r = make(m, "h100-80gb");
  StepWork one, batch;
  one.add(4095, 1, false);
  for (int i = 0; i < 64; ++i) batch.add(4095, 1, false);
  const double kv_seq = 4096 * 32 * kv_layer_bytes(m, 1);  // 512 MiB... per 4096-token sequence
  const double weights =
      static_cast<double>(m.weight_bytes) - static_cast<double>(m.input_embedding_bytes);
  const double row = 4096 * 2;  // the input table's row a token
  CHECK(r.cost(one).memory_ms == Approx((weights + row + kv_seq) / 3.35e12 * 1e3).epsilon(1e-9));
  CHECK(r.cost(batch).memory_ms ==
        Approx((weights + 64 * (row + kv_seq)) / 3.35e12 * 1e3).epsilon(1e-9));
  // 64 decodes cost far less than 64 lone ones: the weights are read once.
  CHECK(r.step_ms(batch) < 4 * r.step_ms(one));
}

TEST_CASE("roofline: tensor parallelism divides the work and adds two all-reduces a layer") {
  const ModelSpec& m = preset("llama-3.1-70b");
  RooflineConstants c = ideal();
  c.allreduce_latency_us = 5;
  const Roofline tp1 = make(m, "h100-80gb", 1, c);
  const Roofline tp4 = make(m, "h100-80gb", 4, c);
  StepWork work;
  work.add(0, 2048, true);
  const StepCost one = tp1.cost(work), four = tp4.cost(work);
  CHECK(four.compute_ms == Approx(one.compute_ms / 4).epsilon(1e-9));
  CHECK(one.comm_ms == 0);
  // 80 layers, 2 all-reduces each of 2048 tokens * 8192 * 2 bytes, ring: 2 * 3/4 of it over
  // 450 GB/s, plus 5 us for each of log2(4) = 2 rounds.
  const double bytes = 2048.0 * 8192 * 2;
  CHECK(four.comm_ms == Approx(2 * 80 * (2 * 5e-3 + 1.5 * bytes / 450e9 * 1e3)).epsilon(1e-9));
  // At TP 2 the latency is the constant's: one round.
  const Roofline tp2 = make(m, "h100-80gb", 2, c);
  CHECK(tp2.cost(work).comm_ms ==
        Approx(2 * 80 * (5e-3 + 1.0 * bytes / 450e9 * 1e3)).epsilon(1e-9));
  // Over PCIe (L40S, 32 GB/s each way) the same all-reduces take 14x as long.
  const Roofline l40s = make(m, "l40s", 4, c);
  CHECK(l40s.cost(work).comm_ms > 10 * four.comm_ms);
}

TEST_CASE("roofline: a MoE decode reads the experts its tokens pick, a large batch all of them") {
  const ModelSpec& m = preset("qwen3-235b-a22b");
  REQUIRE(m.routed_experts == 128);
  REQUIRE(m.experts_per_token == 8);
  REQUIRE(m.routed_expert_bytes > 0);
  const Roofline r = make(m, "h200", 8);
  StepWork one, many;
  one.add(0, 1, false);
  for (int i = 0; i < 1024; ++i) many.add(0, 1, false);
  // Less the untied input table, of which each token reads a row (4096 x bf16).
  const double rest =
      static_cast<double>(m.weight_bytes - m.routed_expert_bytes - m.input_embedding_bytes);
  const double row = 4096.0 * 2;
  const double routed = static_cast<double>(m.routed_expert_bytes);
  const double kv1 = 94 * kv_layer_bytes(m, 8);
  // One token picks 8 of 128 experts a layer: 1/16 of the routed weights.
  CHECK(r.cost(one).memory_ms ==
        Approx(((rest + row + routed * 8 / 128) / 8 + kv1) / 4.8e12 * 1e3).epsilon(1e-9));
  // 1024 tokens leave an expert unread with probability (120/128)^1024, about 1e-29.
  CHECK(r.cost(many).memory_ms ==
        Approx(((rest + 1024 * row + routed) / 8 + 1024 * kv1) / 4.8e12 * 1e3).epsilon(1e-6));
}

TEST_CASE("roofline: prefill and decode FLOPs run at their own efficiencies") {
  const ModelSpec& m = preset("llama-3.1-8b");
  RooflineConstants c = ideal();
  c.prefill_efficiency = 0.5;
  c.decode_efficiency = 0.25;
  const Roofline r = make(m, "h100-80gb", 1, c);
  const Roofline raw = make(m, "h100-80gb");
  StepWork prefill, decode, mixed;
  prefill.add(0, 2048, true);
  for (int i = 0; i < 256; ++i) decode.add(1000, 1, false);
  mixed.add(0, 2048, true);
  for (int i = 0; i < 256; ++i) mixed.add(1000, 1, false);
  CHECK(r.cost(prefill).compute_ms == Approx(raw.cost(prefill).compute_ms / 0.5).epsilon(1e-12));
  CHECK(r.cost(decode).compute_ms == Approx(raw.cost(decode).compute_ms / 0.25).epsilon(1e-12));
  // A mixed step: each part at its own rate, summed.
  CHECK(r.cost(mixed).compute_ms ==
        Approx(raw.cost(prefill).compute_ms / 0.5 + raw.cost(decode).compute_ms / 0.25)
            .epsilon(1e-12));
  // The decodes' pairs are kept apart: 256 tokens seeing 1001 keys each.
  CHECK(mixed.decode_full_pairs() == Approx(256.0 * 1001));
  CHECK(mixed.full_pairs() == Approx(256.0 * 1001 + 2048.0 * 2049 / 2));
  // with_constants changes the constants only.
  CHECK(raw.with_constants(c).cost(mixed).compute_ms == Approx(r.cost(mixed).compute_ms));
}

TEST_CASE("roofline: an fp8 checkpoint's linear layers run at the GPU's fp8 rate") {
  const ModelSpec& m = preset("deepseek-v3");
  REQUIRE(m.fp8_linear);
  REQUIRE(m.mla);
  StepWork work;
  work.add(0, 4096, true);
  const double latent = 576;  // kv_lora_rank 512 + qk_rope_head_dim 64, one per token per layer
  auto h200 = Roofline::make(m, gpu("h200"), 8, 1, latent * 2, ideal());
  auto a100 = Roofline::make(m, gpu("a100-80gb"), 8, 1, latent * 2, ideal());
  REQUIRE(h200.ok());
  REQUIRE(a100.ok());
  CHECK(h200.value().peak_flops() == 1979e12);
  CHECK(a100.value().peak_flops() == 312e12);  // no fp8 tensor cores: bf16
  // A prefill runs MLA in its MHA form: 2 * heads * (128 + 64 + 128) FLOPs a pair,
  // 128 heads, 61 layers; kv_b_proj expands each of the 4096 keys' latents,
  // 2 * 128 * 512 * (128 + 128) FLOPs a key a layer, at the linear (fp8) rate.
  const double lm_head = 129280.0 * 7168;
  const double linear = 2 * (static_cast<double>(m.parameters.active) - lm_head) * 4096 +
                        2 * lm_head + 2.0 * 128 * 512 * 256 * 4096 * 61;
  const double attention = 2.0 * 128 * (128 + 64 + 128) * (4096.0 * 4097 / 2) * 61;
  CHECK(h200.value().cost(work).compute_ms ==
        Approx((linear / 1979e12 + attention / 989.5e12) / 8 * 1e3).epsilon(1e-9));
  // fp8_efficiency scales the linear layers' fp8 rate only, not attention's.
  RooflineConstants c = ideal();
  c.fp8_efficiency = 0.5;
  CHECK(h200.value().with_constants(c).cost(work).compute_ms ==
        Approx((linear / (0.5 * 1979e12) + attention / 989.5e12) / 8 * 1e3).epsilon(1e-9));
  // On an A100 (no fp8 rate) it changes nothing.
  CHECK(a100.value().with_constants(c).cost(work).compute_ms ==
        Approx(a100.value().cost(work).compute_ms).epsilon(1e-12));
}

TEST_CASE("roofline: MLA decodes in its absorbed form") {
  const ModelSpec& m = preset("deepseek-v3");
  auto made = Roofline::make(m, gpu("h200"), 8, 1, 576 * 2, ideal());
  REQUIRE(made.ok());
  StepWork work;
  for (int i = 0; i < 64; ++i) work.add(4095, 1, false);
  // 64 decodes of 4096 keys: 2 * heads * (2 * kv_lora_rank + qk_rope) a pair,
  // 3.4x the prefill form's; no expansion of the cached latents.
  const StepTerms t = made.value().terms(work);
  CHECK(t.decode_attention_ms ==
        Approx(2.0 * 128 * (2 * 512 + 64) * 64 * 4096 * 61 / 989.5e12 / 8 * 1e3).epsilon(1e-9));
  CHECK(t.prefill_attention_ms == 0);
  CHECK(t.prefill_linear_ms == 0);
}

TEST_CASE("roofline: an all-reduce runs one-shot while small, two-shot past the threshold") {
  const ModelSpec& m = preset("llama-3.1-70b");
  RooflineConstants c = ideal();
  c.allreduce_latency_us = 10;
  const Roofline tp8 = make(m, "h100-80gb", 8, c);
  // 8 decodes: 8 * 8192 * 2 = 128 KiB a message, below 256 KiB at 8 GPUs:
  // one latency, 7 peers' buffers read.
  StepWork small;
  for (int i = 0; i < 8; ++i) small.add(100, 1, false);
  const double b8 = 8.0 * 8192 * 2;
  CHECK(tp8.cost(small).comm_ms == Approx(2 * 80 * (10e-3 + 7 * b8 / 450e9 * 1e3)).epsilon(1e-9));
  // 64 decodes: 1 MiB, two-shot: two latencies, 2 * 7/8 of the buffer.
  StepWork large;
  for (int i = 0; i < 64; ++i) large.add(100, 1, false);
  const double b64 = 64.0 * 8192 * 2;
  CHECK(tp8.cost(large).comm_ms ==
        Approx(2 * 80 * (20e-3 + 1.75 * b64 / 450e9 * 1e3)).epsilon(1e-9));
  // At 4 GPUs the threshold is 512 KiB: 16 decodes (256 KiB) still one-shot.
  const Roofline tp4 = make(m, "h100-80gb", 4, c);
  StepWork sixteen;
  for (int i = 0; i < 16; ++i) sixteen.add(100, 1, false);
  CHECK(tp4.terms(sixteen).allreduces == Approx(2 * 80));
  CHECK(tp8.terms(sixteen).allreduces == Approx(2 * 80 * 2));
}

TEST_CASE("roofline: the fixed costs: a prefill pass, a layer's kernels, the experts' bandwidth") {
  const ModelSpec& m = preset("llama-3.1-8b");
  RooflineConstants c = ideal();
  c.prefill_pass_ms = 3;
  c.layer_overhead_us = 10;
  const Roofline r = make(m, "h100-80gb", 1, c);
  StepWork decode, prefill;
  decode.add(100, 1, false);
  prefill.add(0, 100, true);
  // 32 layers of 10 us on every step; 3 ms more on one that prefills.
  CHECK(r.cost(decode).overhead_ms == Approx(32 * 10e-3));
  CHECK(r.cost(prefill).overhead_ms == Approx(3 + 32 * 10e-3));
  // expert_efficiency slows the routed experts' read alone: a dense model's
  // steps do not move, a MoE's decode does by the experts' share.
  RooflineConstants slow = ideal();
  slow.expert_efficiency = 0.5;
  CHECK(make(m, "h100-80gb", 1, slow).cost(decode).memory_ms ==
        Approx(make(m, "h100-80gb").cost(decode).memory_ms));
  const ModelSpec& moe = preset("qwen3-235b-a22b");
  const Roofline fast_moe = make(moe, "h200", 8), slow_moe = make(moe, "h200", 8, slow);
  StepWork one;
  one.add(0, 1, false);
  const double experts = fast_moe.terms(one).expert_memory_ms;
  CHECK(experts > 0);
  CHECK(slow_moe.cost(one).memory_ms == Approx(fast_moe.cost(one).memory_ms + experts));
}

TEST_CASE("roofline: sliding layers attend to their window only") {
  const ModelSpec& m = preset("gemma-3-27b");
  REQUIRE(m.sliding_window == 1024);
  StepWork work(1024);
  work.add(0, 512, true);  // within the window: the same pairs as full attention
  CHECK(work.window_pairs() == Approx(512.0 * 513 / 2));
  CHECK(work.full_pairs() == Approx(512.0 * 513 / 2));
  StepWork past(1024);
  past.add(10000, 100, true);  // past the window: every token sees 1024 keys
  CHECK(past.window_pairs() == Approx(100.0 * 1024));
  CHECK(past.window_read() == Approx(1023.0 + 100));
  CHECK(past.full_read() == Approx(10100.0));
  StepWork across(1024);
  across.add(1000, 48, true);  // positions 1000..1047: q + 1 from 1001 to 1024, then 1024
  double expected = 0;
  for (int q = 1000; q < 1048; ++q) expected += std::min(q + 1, 1024);
  CHECK(across.window_pairs() == Approx(expected));

  // 52 sliding and 10 full layers of 32 heads of 128: the full layers dominate a long prefill.
  auto r = Roofline::make(m, gpu("h100-80gb"), 1, 1, 2.0 * 16 * 128 * 2, ideal());
  REQUIRE(r.ok());
  CHECK(r.value().sliding_window() == 1024);
}

TEST_CASE("roofline: a model without a parameter count has none") {
  ModelSpec m;
  m.layers = 32;
  auto made = Roofline::make(m, gpu("h100-80gb"), 1, 1, 4096, RooflineConstants{});
  REQUIRE_FALSE(made.ok());
  CHECK(made.error().find("--cost-model linear") != std::string::npos);
}

}  // namespace
}  // namespace kvreplay

namespace kvreplay {
namespace {

TEST_CASE("roofline: attention replicas hold their attention whole and read their own KV") {
  const ModelSpec& m = preset("deepseek-v3");
  const double latent = 576 * 2;  // one token's MLA latent in one layer, bf16
  auto tp8 = Roofline::make(m, gpu("h200"), 8, 1, latent, ideal());
  auto dp8 = Roofline::make(m, gpu("h200"), 8, 1, latent, ideal(), ParallelLayout{8, 1});
  REQUIRE(tp8.ok());
  REQUIRE(dp8.ok());
  StepWork work;
  for (int i = 0; i < 64; ++i) work.add(4095, 1, false);
  const StepTerms a = tp8.value().terms(work), b = dp8.value().terms(work);
  // The FLOPs are the same (the replicas split the tokens as tp split the heads).
  CHECK(b.decode_linear_ms == Approx(a.decode_linear_ms));
  CHECK(b.decode_attention_ms == Approx(a.decode_attention_ms));
  // Memory: 7/8 of the attention's weights more on each GPU, 1/8 of the KV.
  const double attention = static_cast<double>(rank_weights(m, 1, 1, 0).attention);
  const double kv = latent * 61 * 64 * 4096;
  const double hbm = static_cast<double>(gpu("h200").hbm_bandwidth_bytes_per_second);
  CHECK(b.memory_ms - a.memory_ms ==
        Approx((attention * 7 / 8 - kv * 7 / 8) / hbm * 1e3).epsilon(1e-6));
  // No all-reduce inside a replica of one GPU: the MLP's gather and
  // reduce-scatter of every token, two latencies and 2 * 7/8 of the step's
  // hidden states a layer (the same bytes as tp's two-shot all-reduces, one
  // collective a layer fewer).
  CHECK(b.allreduces == Approx(2 * 61));
  CHECK(b.allreduce_transfer_ms == Approx(a.allreduce_transfer_ms / 2).epsilon(1e-9));
}

TEST_CASE("roofline: expert parallelism over replicas sends tokens to experts and back") {
  const ModelSpec& m = preset("deepseek-v3");
  auto dp8 = Roofline::make(m, gpu("h200"), 8, 1, 576 * 2, ideal(), ParallelLayout{8, 1});
  auto ep8 = Roofline::make(m, gpu("h200"), 8, 1, 576 * 2, ideal(), ParallelLayout{8, 8});
  REQUIRE(dp8.ok());
  REQUIRE(ep8.ok());
  StepWork work;
  for (int i = 0; i < 256; ++i) work.add(1000, 1, false);
  const StepTerms g = dp8.value().terms(work), a = ep8.value().terms(work);
  // 58 MoE layers of 61: each a dispatch and a combine of 256 / 8 tokens a GPU
  // to 8 experts, 7/8 of them away, at 7168 + 7168 / 32 + 16 bytes out and
  // 2 * 7168 back; the 3 dense layers keep the gather.
  const double pairs = 256.0 / 8 * 8 * 7 / 8;
  const double link = static_cast<double>(gpu("h200").interconnect_bytes_per_second);
  const double a2a = 58 * pairs * (7168 + 224 + 16 + 2 * 7168) / link * 1e3;
  const double per_gather = g.allreduce_transfer_ms / 61;
  CHECK(a.allreduce_transfer_ms == Approx(3 * per_gather + a2a).epsilon(1e-9));
  CHECK(a.allreduces == Approx(g.allreduces));  // two latencies a layer either way
  // Without attention replicas every GPU holds every token: the all-reduces stay.
  auto tp_ep = Roofline::make(m, gpu("h200"), 8, 1, 576 * 2, ideal(), ParallelLayout{1, 8});
  auto tp = Roofline::make(m, gpu("h200"), 8, 1, 576 * 2, ideal());
  CHECK(tp_ep.value().terms(work).allreduce_transfer_ms ==
        Approx(tp.value().terms(work).allreduce_transfer_ms));
}

TEST_CASE("roofline: a speculative verify and its draft") {
  const ModelSpec& m = preset("llama-3.1-8b");
  Roofline r = make(m, "h100-80gb");
  StepWork plain, verify;
  for (int i = 0; i < 8; ++i) {
    plain.add(1000, 1, false);
    verify.add(1000, 4, false);  // 1 + K = 4 tokens
  }
  // A verify's 4 tokens each have linear FLOPs and a logits row.
  const double lm_head = 128256.0 * 4096;
  const double linear = static_cast<double>(m.parameters.active) - lm_head;
  CHECK(r.terms(verify).decode_linear_ms ==
        Approx(2 * (linear + lm_head) * 32 / 989.5e12 * 1e3).epsilon(1e-9));
  const StepTerms before = r.terms(verify);
  r.set_draft(3, 1, 3.0 * 4096 * 4096);
  const StepTerms after = r.terms(verify);
  // Three passes: the first over the 32 tokens, two over the 8 requests; one
  // layer's FLOPs and the fc each, and 3 lm_head rows a request.
  const double layer = linear / 32;
  const double flops = 2 * (layer + 3.0 * 4096 * 4096) * (32 + 2 * 8) + 2 * lm_head * 3 * 8;
  CHECK(after.decode_linear_ms - before.decode_linear_ms ==
        Approx(flops / 989.5e12 * 1e3).epsilon(1e-9));
  CHECK(after.memory_ms > before.memory_ms);
  CHECK(after.layers == Approx(before.layers + 3));
}

}  // namespace
}  // namespace kvreplay
