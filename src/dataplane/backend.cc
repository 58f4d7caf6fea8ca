#include "dataplane/backend.h"

#include <fmt/format.h>

#include "core/enum_names.h"
#include "dataplane/arena.h"
#include "dataplane/cpu_backend.h"
#if defined(KVREPLAY_WITH_CUDA)
#include "dataplane/cuda/cuda_backend.h"
#endif

namespace kvreplay {

namespace {

constexpr EnumName<BackendKind> kBackendNames[] = {
    {BackendKind::kNone, "none"},
    {BackendKind::kCpu, "cpu"},
    {BackendKind::kCuda, "cuda"},
};
static_assert(enum_names_unique(kBackendNames));

}  // namespace

std::optional<BackendKind> parse_backend(std::string_view name) {
  return enum_parse(kBackendNames, name);
}

std::vector<std::string> backend_names() {
  return enum_names(kBackendNames);
}

std::string_view to_string(BackendKind kind) {
  return enum_name(kBackendNames, kind);
}

std::uint64_t append_bytes(const ArenaView& shape, std::uint64_t rows) {
  return 2 * rows * shape.layers * shape.token_bytes();
}

std::uint64_t copy_blocks_bytes(const ArenaView& shape, std::uint64_t copies) {
  return 2 * copies * shape.layers * shape.layer_block_bytes();
}

std::uint64_t gather_bytes(const ArenaView& shape, std::uint64_t rows) {
  return 2 * rows * shape.layers * shape.token_bytes();
}

std::uint64_t attention_bytes(const ArenaView& shape, const PagedBatch& batch,
                              std::uint32_t group) {
  std::uint64_t tokens = 0;
  for (std::uint32_t length : batch.lengths()) tokens += length;
  const std::uint64_t queries =
      std::uint64_t{batch.size()} * shape.kv_heads * group * shape.head_dim * sizeof(float);
  return tokens * shape.token_bytes() + 2 * queries;
}

Result<std::unique_ptr<KvBackend>, std::string> make_backend(
    BackendKind kind, const PagedKvConfig& config, std::optional<std::uint64_t> arena_limit) {
  const ArenaView shape = arena_shape(config);
  switch (kind) {
    case BackendKind::kNone: return Unexpected{std::string("backend 'none' keeps no arena")};
    case BackendKind::kCpu:
      if (auto problem =
              arena_size_problem(shape, arena_limit.value_or(kDefaultArenaLimit), "host")) {
        return Unexpected{*problem};
      }
      return CpuBackend::create(shape);
    case BackendKind::kCuda:
#if defined(KVREPLAY_WITH_CUDA)
      return make_cuda_backend(shape, arena_limit);
#else
      return Unexpected{
          std::string("this kvreplay was built without CUDA; rebuild with -DKVREPLAY_CUDA=ON (nvcc "
                      "required) for --backend cuda, or use --backend cpu")};
#endif
  }
  return Unexpected{std::string("unknown backend")};
}

}  // namespace kvreplay
