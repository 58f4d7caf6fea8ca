// The CUDA backend's factory (cuda_backend.cc; built only with CUDA). The
// backend keeps the arena in device memory on device 0, runs the kernels of
// kernels.cuh through launchers.h on one stream, checks every CUDA call (a
// failure throws BackendError naming the call), and times every launch with a
// pair of CUDA events, after one untimed warm-up launch of each kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dataplane/backend.h"

namespace kvreplay {

// Errors: no usable CUDA device (the runtime's reason), an arena above the
// limit (explicit, or the device's free memory less 1 GiB), out of memory.
Result<std::unique_ptr<KvBackend>, std::string> make_cuda_backend(
    const ArenaView& shape, std::optional<std::uint64_t> arena_limit);

}  // namespace kvreplay
