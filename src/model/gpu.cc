#include "model/gpu.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model/embedded_files.h"

namespace kvreplay {

namespace {

// A GPU file's fields; a missing or mistyped one is a defect of the data.
GpuSpec read_gpu(const EmbeddedFile& file) {
  try {
    const nlohmann::json json = nlohmann::json::parse(file.bytes());
    GpuSpec gpu;
    gpu.name = json.at("name").get<std::string>();
    gpu.description = json.at("description").get<std::string>();
    gpu.memory = json.at("memory").get<std::string>();
    gpu.memory_bytes = json.at("memory_bytes").get<std::uint64_t>();
    gpu.cuda_total_bytes = json.at("cuda_total_bytes").get<std::uint64_t>();
    gpu.nvidia_smi_mib = json.at("nvidia_smi_mib").get<std::uint64_t>();
    gpu.hbm_bandwidth_bytes_per_second =
        json.at("hbm_bandwidth_bytes_per_second").get<std::uint64_t>();
    gpu.bf16_dense_tflops = json.at("bf16_dense_tflops").get<double>();
    if (!json.at("fp8_dense_tflops").is_null())
      gpu.fp8_dense_tflops = json.at("fp8_dense_tflops").get<double>();
    gpu.interconnect = json.at("interconnect").get<std::string>();
    gpu.interconnect_bytes_per_second =
        json.at("interconnect_bytes_per_second").get<std::uint64_t>();
    gpu.vllm_gpu_class = json.at("vllm_gpu_class").get<std::string>();
    gpu.source = json.at("source").get<std::string>();
    const auto positive = [](double value) { return std::isfinite(value) && value > 0.0; };
    if (!positive(gpu.bf16_dense_tflops) ||
        (gpu.fp8_dense_tflops && !positive(*gpu.fp8_dense_tflops))) {
      throw std::runtime_error("a dense TFLOPS figure is not a finite positive number");
    }
    if (gpu.name != file.name || gpu.memory_bytes == 0 || gpu.interconnect_bytes_per_second == 0 ||
        (gpu.vllm_gpu_class != "large" && gpu.vllm_gpu_class != "small")) {
      throw std::runtime_error("name, memory_bytes or vllm_gpu_class is wrong");
    }
    return gpu;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvreplay: GPU preset %.*s: %s\n", static_cast<int>(file.name.size()),
                 file.name.data(), e.what());
    std::abort();
  }
}

}  // namespace

const std::vector<GpuSpec>& gpu_presets() {
  static const std::vector<GpuSpec> kGpus = [] {
    std::vector<GpuSpec> out;
    for (const EmbeddedFile& file : embedded_gpu_presets()) out.push_back(read_gpu(file));
    return out;
  }();
  return kGpus;
}

const GpuSpec* find_gpu_preset(std::string_view name) {
  for (const GpuSpec& gpu : gpu_presets()) {
    if (gpu.name == name) return &gpu;
  }
  return nullptr;
}

std::string gpu_preset_list() {
  std::string out;
  for (const GpuSpec& gpu : gpu_presets()) {
    out += out.empty() ? "" : ", ";
    out += gpu.name;
  }
  return out;
}

}  // namespace kvreplay
