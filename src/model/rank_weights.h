// The bytes of weights one GPU of a deployment really holds (SPEC 3.11): each
// matrix split or replicated as vLLM's parallel layers do, in the layout its
// quantization stores, for the pipeline stage it serves. What
// `kvreplay capacity` subtracts from a GPU's memory; not parameters / (tp * pp).
//
// Per rank of tensor-parallel size tp (vLLM's layers, vllm/model_executor/layers/):
//   embedding   VocabParallelEmbedding: vocab padded to a multiple of 64
//               (DEFAULT_VOCAB_PADDING_SIZE), split by tp; on the first stage.
//   lm_head     ParallelLMHead, the same split; on the last stage; none when tied
//               and on the same stage as the embedding (one tensor).
//   q, k, v     QKVParallelLinear: heads / tp query heads and ceil(kv_heads / tp) KV
//               heads (replicated when kv_heads < tp); o_proj RowParallelLinear.
//   MLA         the q_a / kv_a projections replicated (ReplicatedLinear), q_b,
//               kv_b and o split by heads (DeepseekV2MLAAttention).
//   MLP         MergedColumnParallelLinear gate_up, RowParallelLinear down: the
//               width split by tp.
//   experts     FusedMoE: every expert on every rank, its width split by tp; with
//               expert parallelism (--ep N) experts / N whole experts a rank.
//               The router (gate) is replicated and never quantized.
//   norms       two of hidden a layer, the final one on the last stage; Qwen3's
//               q and k norms.
//   buffers     the rotary embedding's cos/sin cache, max_position_embeddings x
//               rotary dim in the dtype (RotaryEmbedding, one a model, get_rope).
// Layouts of a linear weight [out, in] (what each quantization method's
// create_weights allocates):
//   none        out * in * dtype bytes
//   fp8         out * in bytes, plus float32 scales: one a tensor, one an output
//               channel, or one a [block_n, block_k] block (Fp8LinearMethod,
//               CompressedTensorsW8A8Fp8)
//   int4 AWQ    out * in / 2 bytes, fp16 scales and 4-bit zeros a group of
//               group_size inputs (AWQLinearMethod)
//   int4 GPTQ   as AWQ, plus an int32 group index an input (GPTQLinearMethod)
//   mxfp4       routed experts only: out * in / 2 bytes and one 8-bit scale a
//               32 inputs, bf16 biases, each rank's expert width padded to a
//               multiple of 256 (gpt-oss, Mxfp4MoEMethod); attention,
//               embeddings and router stay in the dtype
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace kvreplay {

struct RankWeights {
  std::uint64_t embedding = 0;  // input table
  std::uint64_t lm_head = 0;
  std::uint64_t attention = 0;
  std::uint64_t mlp = 0;      // dense MLPs and shared experts
  std::uint64_t experts = 0;  // routed experts and routers
  std::uint64_t norms = 0;
  std::uint64_t buffers = 0;  // the rotary embedding's cos/sin cache
  std::uint64_t total() const {
    return embedding + lm_head + attention + mlp + experts + norms + buffers;
  }
};

// One rank of pipeline stage `stage` (of `pp`); every tensor-parallel rank of a
// stage holds the same bytes. `ep` 1: experts split by width; else by count.
// `attention_tp`: the GPUs one attention replica spans under attention data
// parallelism (tp / --dp-attention; SGLang's attn_tp_size), which split the
// attention's weights (each replica holds them whole; the embedding and
// lm_head stay vocab-parallel over tp, SGLang's default without
// --enable-dp-lm-head); 0: tp.
// REQUIRES: tp, pp, ep >= 1, stage < pp <= layers, attention_tp divides tp.
RankWeights rank_weights(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp,
                         std::uint32_t stage, std::uint32_t ep = 1, std::uint32_t attention_tp = 0);

// The stage that holds the most, and its bytes.
struct HeaviestStage {
  std::uint32_t stage = 0;
  RankWeights weights;
};
HeaviestStage heaviest_stage(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp,
                             std::uint32_t ep = 1, std::uint32_t attention_tp = 0);

}  // namespace kvreplay
