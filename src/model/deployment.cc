#include "model/deployment.h"

#include <fmt/format.h>

#include <cmath>

namespace kvreplay {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
}

}  // namespace

std::pair<std::uint32_t, std::uint32_t> pipeline_stage(std::uint32_t layers, std::uint32_t pp,
                                                       std::uint32_t stage) {
  // vLLM's get_pp_indices: layers / pp each; the remainder adds one layer to
  // each of the stages pp-2, pp-3, ... (never the last, which holds the lm_head).
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  const std::uint32_t remainder = layers % pp;
  for (std::uint32_t s = 0; s <= stage; ++s) {
    first += count;
    count = layers / pp + (s + 2 <= pp && pp - s - 2 < remainder ? 1 : 0);
  }
  return {first, count};
}

Result<GpuShare, std::string> gpu_share(std::uint32_t layers, std::uint32_t attention_heads,
                                        std::uint32_t kv_heads, std::uint32_t head_dim,
                                        std::uint32_t kv_tensors, std::uint32_t tp,
                                        std::uint32_t pp) {
  using Error = Unexpected<std::string>;
  if (tp == 0 || pp == 0) return Error{std::string("tp and pp must be >= 1")};
  if (attention_heads != 0 && attention_heads % tp != 0) {
    return Error{fmt::format("num_attention_heads {} is not divisible by --tp {} (vLLM refuses it)",
                             attention_heads, tp)};
  }
  if (kv_tensors == 2 && kv_heads % tp != 0 && tp % kv_heads != 0) {
    return Error{fmt::format(
        "{} KV heads cannot be split evenly across --tp {} nor replicated (vLLM refuses it)",
        kv_heads, tp)};
  }
  if (pp > layers) {
    return Error{fmt::format("--pp {} is more stages than the {} layers", pp, layers)};
  }
  GpuShare share;
  for (std::uint32_t stage = 0; stage < pp; ++stage) {
    auto [first, count] = pipeline_stage(layers, pp, stage);
    if (count > share.layers) {
      share.first_layer = first;
      share.layers = count;
    }
  }
  share.kv_heads = kv_tensors == 1 ? kv_heads : static_cast<std::uint32_t>(ceil_div(kv_heads, tp));
  share.head_dim = head_dim;
  share.kv_tensors = kv_tensors;
  return share;
}

std::uint64_t weights_bytes_per_gpu(const ModelSpec& model, std::uint32_t tp, std::uint32_t pp) {
  return ceil_div(model.weight_bytes, std::uint64_t{tp} * pp);
}

std::uint64_t activation_reserve_bytes(const ModelSpec& model, std::uint32_t tp,
                                       std::uint32_t max_batched_tokens, std::uint32_t max_seqs) {
  const std::uint64_t per_token =
      (4ull * model.hidden_size + 3 * ceil_div(model.mlp_width, tp)) * dtype_bytes(model.dtype);
  return kActivationReserveFixedBytes + std::uint64_t{max_batched_tokens} * per_token +
         std::uint64_t{max_seqs} * model.vocab_size * 4;
}

Result<GpuMemory, std::string> gpu_memory(const GpuSpec& gpu, double utilization,
                                          std::uint64_t weights, std::uint64_t activation_reserve) {
  GpuMemory memory;
  memory.budget =
      static_cast<std::uint64_t>(std::floor(utilization * static_cast<double>(gpu.memory_bytes)));
  memory.weights = weights;
  memory.activation_reserve = activation_reserve;
  if (weights >= memory.budget || memory.budget - weights <= activation_reserve) {
    return Unexpected{fmt::format(
        "the weights do not fit: {} of weights and {} of activation reserve per GPU, and "
        "--gpu-memory-utilization {} of the {} of a {} is {}; give a larger --tp or --pp, "
        "or a GPU with more memory",
        gib(weights), gib(activation_reserve), utilization, gib(gpu.memory_bytes), gpu.name,
        gib(memory.budget))};
  }
  memory.kv = memory.budget - weights - activation_reserve;
  return memory;
}

Result<GpuMemory, std::string> trtllm_gpu_memory(const GpuSpec& gpu, double fraction,
                                                 std::uint64_t weights,
                                                 std::uint64_t activation_reserve) {
  GpuMemory memory;
  memory.budget = gpu.memory_bytes;
  memory.weights = weights;
  memory.activation_reserve = activation_reserve;
  if (weights >= gpu.memory_bytes || gpu.memory_bytes - weights <= activation_reserve) {
    return Unexpected{fmt::format(
        "the weights do not fit: {} of weights and {} of activation reserve per GPU, and a {} "
        "has {}; give a larger --tp or --pp, or a GPU with more memory",
        gib(weights), gib(activation_reserve), gpu.name, gib(gpu.memory_bytes))};
  }
  memory.kv = static_cast<std::uint64_t>(
      std::floor(fraction * static_cast<double>(gpu.memory_bytes - weights - activation_reserve)));
  return memory;
}

}  // namespace kvreplay
