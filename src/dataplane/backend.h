// KvBackend: a KV arena and the four kernels that work on it (SPEC 5), on the
// CPU (reference loops in host memory) or on a CUDA device.
//
// Contract:
//   - Kernels run in call order, one after another (one stream): a kernel sees
//     everything earlier calls wrote. Host arguments may be reused on return.
//   - Every launch is timed into stats(): CUDA events on cuda (after a warm-up
//     launch of each kernel at creation), the wall clock on cpu. Samples may be
//     pending until synchronize().
//   - Device failures (a CUDA error) throw BackendError: they are neither input
//     errors nor check failures, and the run cannot go on. Creation failures
//     (no device, arena too large, allocation failed) are error values.
//   - A fresh arena is all zero bytes on every backend, so after the same calls
//     every backend's arena is byte-identical (attention only writes `out`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/result.h"
#include "dataplane/kernel_params.h"
#include "dataplane/kernel_stats.h"
#include "dataplane/paged_batch.h"

namespace kvreplay {

enum class BackendKind : std::uint8_t { kNone, kCpu, kCuda };

std::optional<BackendKind> parse_backend(std::string_view name);  // none, cpu, cuda
std::vector<std::string> backend_names();  // in table order, for the command line
std::string_view to_string(BackendKind kind);

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes read plus written by one launch, as KernelStats counts them: the KV
// bytes moved (plus queries and outputs for attention), not table entries.
std::uint64_t append_bytes(const ArenaView& shape, std::uint64_t rows);
std::uint64_t copy_blocks_bytes(const ArenaView& shape, std::uint64_t copies);
std::uint64_t gather_bytes(const ArenaView& shape, std::uint64_t rows);
std::uint64_t attention_bytes(const ArenaView& shape, const PagedBatch& batch, std::uint32_t group);

class KvBackend {
 public:
  virtual ~KvBackend() = default;

  virtual BackendKind kind() const = 0;
  // "cpu (host memory)", "cuda (NVIDIA H200)".
  virtual std::string description() const = 0;
  // The arena's shape (data is not dereferenceable on the host for cuda).
  const ArenaView& shape() const { return shape_; }

  // Writes staging row r to slots[r] in every layer (negative slots are skipped).
  // staging: [layers][slots.size()][2][kv_heads][head_dim].
  virtual void append(std::span<const std::int64_t> slots,
                      std::span<const std::uint8_t> staging) = 0;
  // Copies whole blocks, every layer, in one launch. pairs: [copies][2]
  // (source, destination). REQUIRES: see CopyBlocksParams.
  virtual void copy_blocks(std::span<const std::uint32_t> pairs) = 0;
  // Paged -> dense into the backend's gather buffer ([layers][batch.rows()]
  // [2][kv_heads][head_dim]); read_gathered copies that buffer to the host.
  virtual void gather(const PagedBatch& batch) = 0;
  virtual void read_gathered(std::span<std::uint8_t> out) = 0;
  // Paged decode attention of one layer (AttentionParams): q and out are
  // [batch][kv_heads * group][head_dim]. REQUIRES: every start is 0.
  virtual void attention(const PagedBatch& batch, std::uint32_t layer, std::uint32_t group,
                         std::span<const float> q, std::span<float> out) = 0;
  // Offload tiers: one block's bytes, every layer, to host memory and back.
  // block_bytes: [layers][page_tokens][kv_tensors][kv_heads][head_dim], that is
  // shape().layers * shape().layer_block_bytes() bytes. Both are done on return
  // (the host buffer may be reused) and are counted as tier_store / tier_load.
  virtual void read_block(std::uint32_t block, std::span<std::uint8_t> block_bytes) = 0;
  virtual void write_block(std::uint32_t block, std::span<const std::uint8_t> block_bytes) = 0;
  // The whole arena, for differential tests. out: shape().bytes() bytes.
  virtual void read_arena(std::span<std::uint8_t> out) = 0;
  // Waits for every launch and resolves pending timing samples.
  virtual void synchronize() = 0;
  // The copy roof: GB/s (read plus write bytes) of a plain device-to-device copy
  // (memcpy on cpu) of `bytes` bytes, the median of `iterations` after a warm-up.
  virtual double measure_copy_roof(std::uint64_t bytes, int iterations) = 0;

  KernelStats& stats() { return stats_; }
  const KernelStats& stats() const { return stats_; }

 protected:
  explicit KvBackend(const ArenaView& shape) : shape_(shape) {}

  ArenaView shape_;  // data: the arena (host or device memory)
  KernelStats stats_;
};

// Creates a backend with a zero-filled arena for `config`. The arena may not
// exceed `arena_limit` bytes; without one the limit is kDefaultArenaLimit on
// cpu (host memory) and the device's free memory less 1 GiB on cuda.
// Errors, one line each: kNone, a build without CUDA, no CUDA device, an arena
// too large (naming --kv-memory / --pool-blocks / --arena-limit), out of memory.
Result<std::unique_ptr<KvBackend>, std::string> make_backend(
    BackendKind kind, const PagedKvConfig& config, std::optional<std::uint64_t> arena_limit);

}  // namespace kvreplay
