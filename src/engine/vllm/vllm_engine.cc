// The vllm engine's entry in the table of engines (engine/engine_registry.h):
// what it serves and its defaults, as `vllm serve` sets them.
#include <nlohmann/json.hpp>

#include "engine/engine_registry.h"
#include "engine/vllm/vllm_scheduler.h"

namespace kvreplay {

namespace {

void config_json(const SimOptions& options, nlohmann::json& out) {
  out["gpu_class"] = std::string(to_string(options.gpu_class));
}

std::unique_ptr<Scheduler> make(EngineShell& shell) {
  return std::make_unique<VllmScheduler>(shell);
}

}  // namespace

const EngineEntry& vllm_engine() {
  static const EngineEntry entry = {
      .kind = EngineKind::kVllm,
      .name = "vllm",
      .summary = "vLLM v1's rules, README",
      .make = make,
      .can =
          {
              // One KV-cache manager per group (engine/vllm/vllm_kv_managers.h).
              .hybrid_models = true,
              .kv_events = true,
              .emit_trace = true,
              .receives_kv = true,
              // Every offload medium and policy: vLLM's OffloadingConnector
              // (engine/paged/paged_offload.cc) takes any.
          },
      .defaults =
          {
              // No watermark unless one is asked for (SPEC 3.1), and the batch
              // limits `vllm serve` picks for the GPU class.
              .watermark = 0.0,
              .batch = vllm_serve_batch_defaults,
          },
      .config_json = config_json,
  };
  return entry;
}

}  // namespace kvreplay
