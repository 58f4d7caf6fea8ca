// GPU presets: the datasheet figures of the GPUs a deployment names with
// --gpu, one data file each in src/model/gpus/ (embedded at build time), each
// citing its datasheet. Dense figures only: where a datasheet prints figures
// "with sparsity", the file says so and halves them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

struct GpuSpec {
  std::string name;                // "h100-80gb", the file's name
  std::string description;         // "NVIDIA H100 SXM5 80GB"
  std::string memory;              // the datasheet's words: "80GB HBM3"
  std::uint64_t memory_bytes = 0;  // the datasheet's memory (GB read as GiB)
  // What CUDA reports as the device's total (torch.cuda.mem_get_info, the
  // total vLLM's startup log prints), and nvidia-smi's memory.total in MiB
  // (SGLang's gpu_mem): what `kvreplay capacity` starts from.
  std::uint64_t cuda_total_bytes = 0;
  std::uint64_t nvidia_smi_mib = 0;
  std::uint64_t hbm_bandwidth_bytes_per_second = 0;
  double bf16_dense_tflops = 0;
  std::optional<double> fp8_dense_tflops;  // none without FP8 tensor cores (A100)
  // The GPU-to-GPU link tensor parallelism all-reduces over, each way (half the
  // datasheet's bidirectional figure), and the datasheet's words for it.
  std::uint64_t interconnect_bytes_per_second = 0;
  std::string interconnect;
  // vLLM's batch defaults by GPU ("large": at least 70 GiB and not an A100;
  // "small" otherwise): what --gpu-class names.
  std::string vllm_gpu_class;
  std::string source;  // the datasheet, with its URL
};

// Every preset, by name. A preset that does not read is a build defect (the
// model tests read them all).
const std::vector<GpuSpec>& gpu_presets();
const GpuSpec* find_gpu_preset(std::string_view name);
std::string gpu_preset_list();  // "a100-80gb, b200, ..."

}  // namespace kvreplay
