// Data files of src/model/ embedded into the binary at build time
// (cmake/embed_asset.cmake, tables written by src/CMakeLists.txt), so that an
// installed kvreplay needs nothing beside it: the model presets
// (presets/NAME.json, Hugging Face config.json files), the GPU presets
// (gpus/NAME.json), the preset aliases (aliases.json) and the model-type
// defaults the config reader falls back on (model_type_defaults.json).
// Edit the data files, never generated code.
#pragma once

#include <span>
#include <string_view>

namespace kvreplay {

struct EmbeddedFile {
  std::string_view name;        // the file name without ".json"
  std::string_view (*bytes)();  // the file's bytes, exactly
};

std::span<const EmbeddedFile> embedded_model_presets();  // presets/*.json, by name
std::span<const EmbeddedFile> embedded_gpu_presets();    // gpus/*.json, by name
std::span<const EmbeddedFile> embedded_model_data();     // aliases, model_type_defaults

}  // namespace kvreplay
