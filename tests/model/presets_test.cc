// Model presets: the published geometry of each, and lookups by exact name.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "model/presets.h"

namespace kvreplay {
namespace {

TEST_CASE("presets: the four model presets have their published geometry") {
  struct Expected {
    const char* name;
    std::uint32_t layers, kv_heads, head_dim;
  };
  const Expected expected[] = {{"llama-3-8b", 32, 8, 128},
                               {"llama-3-70b", 80, 8, 128},
                               {"mistral-7b", 32, 8, 128},
                               {"qwen2.5-7b", 28, 4, 128}};
  for (const Expected& e : expected) {
    INFO(e.name);
    const auto preset = find_model_preset(e.name);
    REQUIRE(preset.has_value());
    CHECK(preset->name == e.name);
    CHECK(preset->layers == e.layers);
    CHECK(preset->kv_heads == e.kv_heads);
    CHECK(preset->head_dim == e.head_dim);
    bool listed = false;
    for (const ModelPreset& p : model_presets()) listed = listed || p.name == e.name;
    CHECK(listed);
  }
  CHECK(model_presets().size() >= 4u);
  CHECK_FALSE(find_model_preset("llama-3-8B").has_value());
  CHECK_FALSE(find_model_preset("gpt-5").has_value());
  CHECK_FALSE(find_model_preset("").has_value());
}

TEST_CASE("presets: llama-3-70b bf16 derives 320 KiB per token") {
  const auto preset = find_model_preset("llama-3-70b");
  REQUIRE(preset.has_value());
  PagedKvConfig config{.layers = 32,
                       .kv_heads = 8,
                       .head_dim = 128,
                       .dtype = Dtype::kBf16,
                       .page_tokens = 16,
                       .pool_blocks = 1000,
                       .max_seq_tokens = 4096};
  config.layers = preset->layers;
  config.kv_heads = preset->kv_heads;
  config.head_dim = preset->head_dim;
  CHECK(config.bytes_per_token() == 327680u);  // 2 * 80 * 8 * 128 * 2
  CHECK(config.block_bytes() == 5u * 1024u * 1024u);
}

}  // namespace
}  // namespace kvreplay
