#include <cuda_runtime.h>

#include "gpu/device.h"

namespace kvreplay {

GpuProbe probe_gpu() {
  GpuProbe probe;
  probe.built_with_cuda = true;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    probe.reason = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    return probe;
  }
  if (count == 0) {
    probe.reason = "no CUDA device found";
    return probe;
  }
  probe.devices = count;
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) == cudaSuccess) probe.name = props.name;
  return probe;
}

}  // namespace kvreplay
