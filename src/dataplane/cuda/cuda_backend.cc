#include "dataplane/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "dataplane/arena.h"
#include "dataplane/cuda/launchers.h"
#include "gpu/device.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kHeadroomBytes = std::uint64_t{1} << 30;  // left free for buffers
constexpr std::size_t kMaxPendingTimings = 1024;

[[noreturn]] void fail(cudaError_t status, const char* what) {
  throw BackendError(fmt::format("{} failed: {} ({})", what, cudaGetErrorName(status),
                                 cudaGetErrorString(status)));
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(status, what);
}

// A device buffer that grows on demand (contents are not kept when it grows).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  // REQUIRES: the stream is idle when the buffer has to grow (the caller syncs).
  T* ensure(std::size_t count, cudaStream_t stream) {
    if (count <= capacity_ && data_ != nullptr) return data_;
    const std::size_t grown = std::max(count, std::max<std::size_t>(capacity_ * 2, 64));
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (data_ != nullptr) check(cudaFree(data_), "cudaFree");
    data_ = nullptr;
    capacity_ = 0;
    void* data = nullptr;
    check(cudaMalloc(&data, std::max<std::size_t>(grown, 1) * sizeof(T)), "cudaMalloc");
    data_ = static_cast<T*>(data);
    capacity_ = grown;
    return data_;
  }
  // Copies host data in (asynchronously: the host span may be reused on return).
  T* upload(std::span<const T> host, cudaStream_t stream) {
    T* device = ensure(host.size(), stream);
    if (!host.empty()) {
      check(cudaMemcpyAsync(device, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (host to device)");
    }
    return device;
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class CudaBackend final : public KvBackend {
 public:
  CudaBackend(const ArenaView& shape, std::string device_name, int sm_count,
              std::uint64_t shared_limit)
      : KvBackend(shape),
        device_name_(std::move(device_name)),
        sm_count_(sm_count),
        shared_limit_(shared_limit) {}

  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (auto& timing : pending_) free_events_.push_back({timing.start, timing.stop});
    for (auto& [start, stop] : free_events_) {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    if (shape_.data != nullptr) cudaFree(shape_.data);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Allocates and zeroes the arena, then warms every kernel up.
  void start() {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    void* arena = nullptr;
    check(cudaMalloc(&arena, std::max<std::uint64_t>(shape_.bytes(), 1)), "cudaMalloc (arena)");
    shape_.data = static_cast<std::uint8_t*>(arena);
    check(cudaMemsetAsync(arena, 0, shape_.bytes(), stream_), "cudaMemsetAsync (arena)");
    warm_up();
  }

  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string description() const override { return fmt::format("cuda ({})", device_name_); }

  void append(std::span<const std::int64_t> slots, std::span<const std::uint8_t> staging) override {
    if (slots.empty()) return;
    assert(staging.size() == slots.size() * shape_.token_bytes() * shape_.layers);
    AppendParams params{staging_.upload(staging, stream_), slots_.upload(slots, stream_),
                        static_cast<std::uint32_t>(slots.size())};
    timed(
        kKernelAppend, append_bytes(shape_, slots.size()),
        [&] { return cuda::launch_append(shape_, params, stream_); }, "append kernel");
  }

  void copy_blocks(std::span<const std::uint32_t> pairs) override {
    if (pairs.empty()) return;
    CopyBlocksParams params{pairs_.upload(pairs, stream_),
                            static_cast<std::uint32_t>(pairs.size() / 2)};
    timed(
        kKernelCopyBlocks, copy_blocks_bytes(shape_, params.copies),
        [&] { return cuda::launch_copy_blocks(shape_, params, stream_); }, "copy_blocks kernel");
  }

  void gather(const PagedBatch& batch) override {
    gathered_rows_ = batch.rows();
    std::uint8_t* out = gathered_.ensure(
        std::max<std::uint64_t>(1, batch.rows() * shape_.token_bytes() * shape_.layers), stream_);
    if (batch.rows() == 0) return;
    const PagedBatchView view = upload(batch);
    GatherParams params{out, batch.rows()};
    timed(
        kKernelGather, gather_bytes(shape_, batch.rows()),
        [&] { return cuda::launch_gather(shape_, view, params, stream_); }, "gather kernel");
  }

  void read_gathered(std::span<std::uint8_t> out) override {
    assert(out.size() <= gathered_rows_ * shape_.token_bytes() * shape_.layers);
    if (out.empty()) return;
    check(
        cudaMemcpyAsync(out.data(), gathered_.data(), out.size(), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync (gathered rows to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void attention(const PagedBatch& batch, std::uint32_t layer, std::uint32_t group,
                 std::span<const float> q, std::span<float> out) override {
    if (batch.empty()) return;
    assert(q.size() == std::size_t{batch.size()} * shape_.kv_heads * group * shape_.head_dim);
    assert(out.size() == q.size());
    if (shape_.kv_heads > 65535 || std::uint64_t{shape_.kv_heads} * group > 65535) {
      throw BackendError(
          fmt::format("attention: {} KV heads x {} query heads each is beyond the "
                      "65535 CUDA grid rows this kernel uses",
                      shape_.kv_heads, group));
    }
    const cuda::AttentionPlan plan =
        cuda::plan_attention(shape_, batch.size(), batch.max_length(), group, sm_count_);
    if (plan.shared_bytes > shared_limit_) {
      throw BackendError(fmt::format(
          "attention: needs {} of shared memory per block (head_dim {}, {} query heads per KV "
          "head), more than the device's {}",
          size_text(plan.shared_bytes), shape_.head_dim, group, size_text(shared_limit_)));
    }
    const PagedBatchView view = upload(batch);
    AttentionParams params{q_.upload(q, stream_), out_.ensure(out.size(), stream_), layer, group};
    float* workspace =
        plan.workspace_floats > 0 ? workspace_.ensure(plan.workspace_floats, stream_) : nullptr;
    timed(
        kKernelAttention, attention_bytes(shape_, batch, group),
        [&] { return cuda::launch_attention(shape_, view, params, plan, workspace, stream_); },
        "attention kernel");
    check(
        cudaMemcpyAsync(out.data(), params.out, out.size_bytes(), cudaMemcpyDeviceToHost, stream_),
        "cudaMemcpyAsync (attention output to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // One 2D copy per block: a row per layer, layer_bytes() apart in the arena.
  void read_block(std::uint32_t block, std::span<std::uint8_t> block_bytes) override {
    const std::uint64_t part = shape_.layer_block_bytes();
    assert(block < shape_.pool_blocks && block_bytes.size() == part * shape_.layers);
    const std::uint8_t* source =
        shape_.data + shape_.offset(0, std::uint64_t{block} * shape_.page_tokens);
    timed(
        kKernelTierStore, 2 * block_bytes.size(),
        [&] {
          return cudaMemcpy2DAsync(block_bytes.data(), part, source, shape_.layer_bytes(), part,
                                   shape_.layers, cudaMemcpyDeviceToHost, stream_);
        },
        "cudaMemcpy2DAsync (block to an offload tier)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void write_block(std::uint32_t block, std::span<const std::uint8_t> block_bytes) override {
    const std::uint64_t part = shape_.layer_block_bytes();
    assert(block < shape_.pool_blocks && block_bytes.size() == part * shape_.layers);
    std::uint8_t* target =
        shape_.data + shape_.offset(0, std::uint64_t{block} * shape_.page_tokens);
    timed(
        kKernelTierLoad, 2 * block_bytes.size(),
        [&] {
          return cudaMemcpy2DAsync(target, shape_.layer_bytes(), block_bytes.data(), part, part,
                                   shape_.layers, cudaMemcpyHostToDevice, stream_);
        },
        "cudaMemcpy2DAsync (block from an offload tier)");
    // Pageable host memory: the copy is staged, but the caller may reuse the
    // buffer at once only after the copy has read it.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void read_arena(std::span<std::uint8_t> out) override {
    assert(out.size() == shape_.bytes());
    check(cudaMemcpyAsync(out.data(), shape_.data, out.size(), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (arena to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void synchronize() override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    resolve_timings();
  }

  double measure_copy_roof(std::uint64_t bytes, int iterations) override {
    synchronize();
    DeviceBuffer<std::uint8_t> source, destination;
    source.ensure(bytes, stream_);
    destination.ensure(bytes, stream_);
    check(cudaMemsetAsync(source.data(), 1, bytes, stream_), "cudaMemsetAsync");
    cudaEvent_t start = nullptr, stop = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<float> samples;
    for (int i = -2; i < iterations; ++i) {  // two warm-up copies
      check(cudaEventRecord(start, stream_), "cudaEventRecord");
      check(cudaMemcpyAsync(destination.data(), source.data(), bytes, cudaMemcpyDeviceToDevice,
                            stream_),
            "cudaMemcpyAsync (device to device)");
      check(cudaEventRecord(stop, stream_), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (i >= 0) samples.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(samples.begin(), samples.end());
    const double median_ms = samples.empty() ? 0.0 : samples[samples.size() / 2];
    return median_ms <= 0.0 ? 0.0 : 2.0 * static_cast<double>(bytes) / (median_ms * 1e6);
  }

 private:
  struct PendingTiming {
    std::string_view kernel;
    cudaEvent_t start;
    cudaEvent_t stop;
    std::uint64_t bytes;
  };

  PagedBatchView upload(const PagedBatch& batch) {
    PagedBatchView view;
    view.indptr = indptr_.upload(batch.indptr(), stream_);
    view.indices = indices_.upload(batch.indices(), stream_);
    view.starts = starts_.upload(batch.starts(), stream_);
    view.lengths = lengths_.upload(batch.lengths(), stream_);
    view.out_indptr = out_indptr_.upload(batch.out_indptr(), stream_);
    view.batch = batch.size();
    view.max_length = batch.max_length();
    return view;
  }

  // Launches between a pair of events; the sample is read back later.
  template <class Launch>
  void timed(std::string_view kernel, std::uint64_t bytes, Launch&& launch, const char* what) {
    std::pair<cudaEvent_t, cudaEvent_t> events{nullptr, nullptr};
    if (free_events_.empty()) {
      check(cudaEventCreate(&events.first), "cudaEventCreate");
      check(cudaEventCreate(&events.second), "cudaEventCreate");
    } else {
      events = free_events_.back();
      free_events_.pop_back();
    }
    pending_.push_back({kernel, events.first, events.second, bytes});
    check(cudaEventRecord(events.first, stream_), "cudaEventRecord");
    check(launch(), what);
    check(cudaEventRecord(events.second, stream_), "cudaEventRecord");
    if (pending_.size() >= kMaxPendingTimings) resolve_timings();
  }

  void resolve_timings() {
    if (pending_.empty()) return;
    check(cudaEventSynchronize(pending_.back().stop), "cudaEventSynchronize");
    for (const PendingTiming& timing : pending_) {
      float ms = 0.0f;
      check(cudaEventElapsedTime(&ms, timing.start, timing.stop), "cudaEventElapsedTime");
      stats_.record(timing.kernel, static_cast<double>(ms) * 1e3, timing.bytes);
      free_events_.push_back({timing.start, timing.stop});
    }
    pending_.clear();
  }

  // One untimed launch of each kernel on block 0 (and 1) of the zeroed arena:
  // they read and write zeros, so the arena stays all zero.
  void warm_up() {
    const std::vector<std::int64_t> slots{0};
    const std::vector<std::uint8_t> staging(shape_.token_bytes() * shape_.layers, 0);
    AppendParams append{staging_.upload(std::span<const std::uint8_t>(staging), stream_),
                        slots_.upload(std::span<const std::int64_t>(slots), stream_), 1};
    check(cuda::launch_append(shape_, append, stream_), "append kernel (warm-up)");
    const std::vector<std::uint32_t> pairs{0, shape_.pool_blocks > 1 ? 1u : 0u};
    CopyBlocksParams copy{pairs_.upload(std::span<const std::uint32_t>(pairs), stream_), 1};
    check(cuda::launch_copy_blocks(shape_, copy, stream_), "copy_blocks kernel (warm-up)");
    PagedBatch batch;
    const std::vector<BlockId> table{0};
    batch.add(table, shape_.page_tokens, 0, 1);
    const PagedBatchView view = upload(batch);
    GatherParams gather{gathered_.ensure(shape_.token_bytes() * shape_.layers, stream_), 1};
    check(cuda::launch_gather(shape_, view, gather, stream_), "gather kernel (warm-up)");
    const std::uint32_t group = 1;
    const cuda::AttentionPlan plan = cuda::plan_attention(shape_, 1, 1, group, sm_count_);
    if (plan.shared_bytes <= shared_limit_ && shape_.kv_heads <= 65535) {
      const std::vector<float> q(std::size_t{shape_.kv_heads} * shape_.head_dim, 0.0f);
      AttentionParams attention{q_.upload(std::span<const float>(q), stream_),
                                out_.ensure(q.size(), stream_), 0, group};
      check(cuda::launch_attention(shape_, view, attention, plan, nullptr, stream_),
            "attention kernel (warm-up)");
    }
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (warm-up)");
  }

  std::string device_name_;
  int sm_count_;
  std::uint64_t shared_limit_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<std::uint8_t> staging_, gathered_;
  DeviceBuffer<std::int64_t> slots_;
  DeviceBuffer<std::uint32_t> pairs_, indptr_, indices_, starts_, lengths_;
  DeviceBuffer<std::uint64_t> out_indptr_;
  DeviceBuffer<float> q_, out_, workspace_;
  std::uint64_t gathered_rows_ = 0;
  std::vector<PendingTiming> pending_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> free_events_;
};

}  // namespace

Result<std::unique_ptr<KvBackend>, std::string> make_cuda_backend(
    const ArenaView& shape, std::optional<std::uint64_t> arena_limit) {
  const GpuProbe probe = probe_gpu();
  if (probe.devices == 0) {
    return Unexpected{fmt::format("{}; use --backend cpu on this machine", probe.reason)};
  }
  auto error = [](cudaError_t status, const char* what) {
    return Unexpected{fmt::format("{} failed: {}", what, cudaGetErrorString(status))};
  };
  if (cudaError_t status = cudaSetDevice(0); status != cudaSuccess) {
    return error(status, "cudaSetDevice");
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes); status != cudaSuccess) {
    return error(status, "cudaMemGetInfo");
  }
  if (arena_limit) {
    if (auto problem = arena_size_problem(shape, *arena_limit, "device"))
      return Unexpected{*problem};
  } else {
    const std::uint64_t limit = free_bytes > kHeadroomBytes ? free_bytes - kHeadroomBytes : 0;
    if (shape.bytes() > limit) {
      return Unexpected{fmt::format(
          "the device arena would need {} ({} blocks of {}), more than {} free on {} less 1 GiB "
          "for buffers; lower --kv-memory / --pool-blocks",
          size_text(shape.bytes()), shape.pool_blocks,
          size_text(shape.layer_block_bytes() * shape.layers), size_text(free_bytes), probe.name)};
    }
  }
  int sm_count = 0, shared_optin = 0;
  if (cudaError_t status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0);
      status != cudaSuccess) {
    return error(status, "cudaDeviceGetAttribute");
  }
  if (cudaError_t status =
          cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
      status != cudaSuccess) {
    return error(status, "cudaDeviceGetAttribute");
  }
  auto backend = std::make_unique<CudaBackend>(shape, probe.name, sm_count,
                                               static_cast<std::uint64_t>(shared_optin));
  try {
    backend->start();
  } catch (const BackendError& failure) {
    return Unexpected{std::string(failure.what())};
  }
  return std::unique_ptr<KvBackend>(std::move(backend));
}

}  // namespace kvreplay
