#include "dataplane/cpu_backend.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>

#include "dataplane/cpu_kernels.h"

namespace kvreplay {

namespace {

template <class Fn>
double timed_micros(Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

Result<std::unique_ptr<KvBackend>, std::string> CpuBackend::create(const ArenaView& shape) {
  auto arena = HostArena::allocate(shape);
  if (!arena) return Unexpected{arena.error()};
  return std::unique_ptr<KvBackend>(new CpuBackend(std::move(arena).value()));
}

CpuBackend::CpuBackend(HostArena arena) : KvBackend(arena.view()), arena_(std::move(arena)) {}

void CpuBackend::append(std::span<const std::int64_t> slots,
                        std::span<const std::uint8_t> staging) {
  if (slots.empty()) return;
  assert(staging.size() == slots.size() * shape_.token_bytes() * shape_.layers);
  AppendParams params{staging.data(), slots.data(), static_cast<std::uint32_t>(slots.size())};
  double micros = timed_micros([&] { cpu_append(shape_, params); });
  stats_.record(kKernelAppend, micros, append_bytes(shape_, slots.size()));
}

void CpuBackend::copy_blocks(std::span<const std::uint32_t> pairs) {
  if (pairs.empty()) return;
  CopyBlocksParams params{pairs.data(), static_cast<std::uint32_t>(pairs.size() / 2)};
  double micros = timed_micros([&] { cpu_copy_blocks(shape_, params); });
  stats_.record(kKernelCopyBlocks, micros, copy_blocks_bytes(shape_, params.copies));
}

void CpuBackend::gather(const PagedBatch& batch) {
  const std::uint64_t bytes = batch.rows() * shape_.token_bytes() * shape_.layers;
  if (gathered_.size() < bytes) gathered_.resize(bytes);
  if (batch.rows() == 0) return;
  GatherParams params{gathered_.data(), batch.rows()};
  PagedBatchView view = batch.view();
  double micros = timed_micros([&] { cpu_gather(shape_, view, params); });
  stats_.record(kKernelGather, micros, gather_bytes(shape_, batch.rows()));
}

void CpuBackend::read_gathered(std::span<std::uint8_t> out) {
  assert(out.size() <= gathered_.size());
  if (!out.empty()) std::memcpy(out.data(), gathered_.data(), out.size());
}

void CpuBackend::attention(const PagedBatch& batch, std::uint32_t layer, std::uint32_t group,
                           std::span<const float> q, std::span<float> out) {
  if (batch.empty()) return;
  assert(q.size() == std::size_t{batch.size()} * shape_.kv_heads * group * shape_.head_dim);
  assert(out.size() == q.size());
  AttentionParams params{q.data(), out.data(), layer, group};
  PagedBatchView view = batch.view();
  double micros = timed_micros([&] { cpu_attention(shape_, view, params); });
  stats_.record(kKernelAttention, micros, attention_bytes(shape_, batch, group));
}

void CpuBackend::read_block(std::uint32_t block, std::span<std::uint8_t> block_bytes) {
  const std::uint64_t part = shape_.layer_block_bytes();
  assert(block < shape_.pool_blocks && block_bytes.size() == part * shape_.layers);
  double micros = timed_micros([&] {
    for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
      std::memcpy(block_bytes.data() + layer * part,
                  arena_.data() + shape_.offset(layer, std::uint64_t{block} * shape_.page_tokens),
                  part);
    }
  });
  stats_.record(kKernelTierStore, micros, 2 * block_bytes.size());
}

void CpuBackend::write_block(std::uint32_t block, std::span<const std::uint8_t> block_bytes) {
  const std::uint64_t part = shape_.layer_block_bytes();
  assert(block < shape_.pool_blocks && block_bytes.size() == part * shape_.layers);
  double micros = timed_micros([&] {
    for (std::uint32_t layer = 0; layer < shape_.layers; ++layer) {
      std::memcpy(arena_.data() + shape_.offset(layer, std::uint64_t{block} * shape_.page_tokens),
                  block_bytes.data() + layer * part, part);
    }
  });
  stats_.record(kKernelTierLoad, micros, 2 * block_bytes.size());
}

void CpuBackend::read_arena(std::span<std::uint8_t> out) {
  assert(out.size() == shape_.bytes());
  std::memcpy(out.data(), arena_.data(), out.size());
}

double CpuBackend::measure_copy_roof(std::uint64_t bytes, int iterations) {
  std::vector<std::uint8_t> source(bytes, 1), destination(bytes, 0);
  std::vector<float> samples;
  for (int i = -1; i < iterations; ++i) {  // i == -1: warm-up
    double micros =
        timed_micros([&] { std::memcpy(destination.data(), source.data(), source.size()); });
    if (i >= 0) samples.push_back(static_cast<float>(micros));
  }
  std::sort(samples.begin(), samples.end());
  const double median = samples.empty() ? 0.0 : samples[samples.size() / 2];
  return median <= 0.0 ? 0.0 : 2.0 * static_cast<double>(bytes) / (median * 1e3);
}

}  // namespace kvreplay
