// CpuBackend: the KV arena in host memory and the reference kernels of
// cpu_kernels.h, timed with the wall clock (steady_clock around each call).
#pragma once

#include <memory>
#include <vector>

#include "dataplane/arena.h"
#include "dataplane/backend.h"

namespace kvreplay {

class CpuBackend final : public KvBackend {
 public:
  // REQUIRES: shape within the caller's arena limit. Error: the allocation failed.
  static Result<std::unique_ptr<KvBackend>, std::string> create(const ArenaView& shape);

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string description() const override { return "cpu (host memory)"; }
  void append(std::span<const std::int64_t> slots, std::span<const std::uint8_t> staging) override;
  void copy_blocks(std::span<const std::uint32_t> pairs) override;
  void gather(const PagedBatch& batch) override;
  void read_gathered(std::span<std::uint8_t> out) override;
  void attention(const PagedBatch& batch, std::uint32_t layer, std::uint32_t group,
                 std::span<const float> q, std::span<float> out) override;
  void read_block(std::uint32_t block, std::span<std::uint8_t> block_bytes) override;
  void write_block(std::uint32_t block, std::span<const std::uint8_t> block_bytes) override;
  void read_arena(std::span<std::uint8_t> out) override;
  void synchronize() override {}
  double measure_copy_roof(std::uint64_t bytes, int iterations) override;

 private:
  explicit CpuBackend(HostArena arena);

  HostArena arena_;
  std::vector<std::uint8_t> gathered_;  // [layers][rows][2][kv_heads][head_dim]
};

}  // namespace kvreplay
