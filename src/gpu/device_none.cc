#include "gpu/device.h"

namespace kvreplay {

GpuProbe probe_gpu() {
  GpuProbe probe;
  probe.reason = "this kvreplay was built without CUDA (configure with -DKVREPLAY_CUDA=ON)";
  return probe;
}

}  // namespace kvreplay
