// Model presets: the Hugging Face config.json files of src/model/presets/
// (embedded at build time; their sources in presets/README.md), read once by
// model/model_config.h, and the aliases of aliases.json (the names of
// kvreplay's first presets: llama-3-8b is llama-3.1-8b, whose geometry it
// had). A run names one with --model or a trace header's "model".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/model_config.h"

namespace kvreplay {

struct ModelPreset {
  std::string name;  // the preset's own name, never an alias
  ModelSpec spec;
};

// Every preset, by name. A preset that does not read is a build defect: the
// model tests read them all.
const std::vector<ModelPreset>& model_presets();

// Aliases and the preset each names, by alias.
const std::vector<std::pair<std::string, std::string>>& model_preset_aliases();

// The preset a name or an alias names (exact spelling), or nullptr.
const ModelPreset* find_model_preset(std::string_view name);

// "llama-3.1-8b, ..., qwen3-8b (aliases: llama-3-8b = llama-3.1-8b, ...)", for
// messages and --help.
std::string model_preset_list();

}  // namespace kvreplay
