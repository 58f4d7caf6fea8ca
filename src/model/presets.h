// Model presets: the KV geometry (layers, KV heads, head dimension) of models a
// run can name with --model or a trace header's "model".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvreplay {

struct ModelPreset {
  std::string_view name;
  std::uint32_t layers;
  std::uint32_t kv_heads;
  std::uint32_t head_dim;
};

std::span<const ModelPreset> model_presets();
std::optional<ModelPreset> find_model_preset(std::string_view name);

}  // namespace kvreplay
