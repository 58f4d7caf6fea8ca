// What the CUDA runtime can offer this process.
#pragma once

#include <string>

namespace kvreplay {

struct GpuProbe {
  bool built_with_cuda = false;
  int devices = 0;
  std::string name;    // device 0, when there is one
  std::string reason;  // why no device can be used, when devices == 0
};

// Never fails: a binary built with CUDA on a machine without a GPU reports
// devices == 0 and the runtime's reason.
GpuProbe probe_gpu();

}  // namespace kvreplay
