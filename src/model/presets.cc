#include "model/presets.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>

#include "model/embedded_files.h"

namespace kvreplay {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> kPresets = [] {
    std::vector<ModelPreset> out;
    for (const EmbeddedFile& file : embedded_model_presets()) {
      const std::string name(file.name);
      auto spec = read_model_config(nlohmann::json::parse(file.bytes()), "preset " + name);
      if (!spec) {  // a defect of the repository's data, caught by the model tests
        std::fprintf(stderr, "kvreplay: %s\n", spec.error().to_string().c_str());
        std::abort();
      }
      out.push_back(ModelPreset{name, std::move(spec).value()});
    }
    return out;
  }();
  return kPresets;
}

const std::vector<std::pair<std::string, std::string>>& model_preset_aliases() {
  static const std::vector<std::pair<std::string, std::string>> kAliases = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const EmbeddedFile& file : embedded_model_data()) {
      if (file.name != "aliases") continue;
      const nlohmann::json aliases = nlohmann::json::parse(file.bytes());
      for (auto it = aliases.begin(); it != aliases.end(); ++it) {
        out.emplace_back(it.key(), it.value().get<std::string>());
      }
    }
    return out;
  }();
  return kAliases;
}

const ModelPreset* find_model_preset(std::string_view name) {
  for (const auto& [alias, target] : model_preset_aliases()) {
    if (alias == name) {
      name = target;
      break;
    }
  }
  for (const ModelPreset& preset : model_presets()) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

std::string model_preset_list() {
  std::string out;
  for (const ModelPreset& preset : model_presets()) {
    out += out.empty() ? "" : ", ";
    out += preset.name;
  }
  std::string aliases;
  for (const auto& [alias, target] : model_preset_aliases()) {
    aliases += aliases.empty() ? "" : ", ";
    aliases += fmt::format("{} = {}", alias, target);
  }
  if (!aliases.empty()) out += fmt::format(" (aliases: {})", aliases);
  return out;
}

}  // namespace kvreplay
