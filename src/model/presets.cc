#include "model/presets.h"

#include <cctype>

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

namespace {

// A Hugging Face repository id (OWNER/NAME) names the same repository
// whatever its case, as the hub resolves it.
bool same_alias(std::string_view alias, std::string_view name) {
  if (alias == name) return true;
  if (alias.find('/') == std::string_view::npos || alias.size() != name.size()) return false;
  for (std::size_t i = 0; i < alias.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(alias[i])) !=
        std::tolower(static_cast<unsigned char>(name[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const ModelPreset* find_model_preset(std::string_view name) {
  for (const auto& [alias, target] : model_preset_aliases()) {
    if (same_alias(alias, name)) {
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
  bool hub_ids = false;
  for (const auto& [alias, target] : model_preset_aliases()) {
    if (alias.find('/') != std::string::npos) {
      hub_ids = true;  // listed in src/model/aliases.json, too many to name here
      continue;
    }
    aliases += aliases.empty() ? "" : ", ";
    aliases += fmt::format("{} = {}", alias, target);
  }
  if (!aliases.empty()) out += fmt::format(" (aliases: {})", aliases);
  if (hub_ids) {
    out +=
        "; Hugging Face ids of the same checkpoints resolve too (e.g. "
        "meta-llama/Llama-3.1-8B-Instruct)";
  }
  return out;
}

}  // namespace kvreplay
