#include "model/presets.h"

#include <array>

namespace kvreplay {

namespace {

constexpr std::array<ModelPreset, 4> kPresets{{
    {"llama-3-8b", 32, 8, 128},
    {"llama-3-70b", 80, 8, 128},
    {"mistral-7b", 32, 8, 128},
    {"qwen2.5-7b", 28, 4, 128},
}};

}  // namespace

std::span<const ModelPreset> model_presets() {
  return kPresets;
}

std::optional<ModelPreset> find_model_preset(std::string_view name) {
  for (const ModelPreset& preset : kPresets) {
    if (preset.name == name) return preset;
  }
  return std::nullopt;
}

}  // namespace kvreplay
