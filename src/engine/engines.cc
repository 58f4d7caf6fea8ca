// The table of engines (SPEC 3.1): --engine's names, in table order, and how
// each is made. A new engine is its files and one line here.
#include <memory>

#include "engine/generic/generic_scheduler.h"
#include "engine/scheduler.h"
#include "engine/sglang/sglang_scheduler.h"
#include "engine/trtllm/trtllm_scheduler.h"
#include "engine/vllm/vllm_scheduler.h"

namespace kvreplay {

namespace {

template <class Engine>
std::unique_ptr<Scheduler> make(EngineShell& shell) {
  return std::make_unique<Engine>(shell);
}

constexpr EngineEntry kEngines[] = {
    {EngineKind::kGeneric, "generic", make<GenericScheduler>},
    {EngineKind::kVllm, "vllm", make<VllmScheduler>},
    {EngineKind::kSglang, "sglang", make<SglangScheduler>},
    {EngineKind::kTrtllm, "trtllm", make<TrtllmScheduler>},
};

}  // namespace

std::span<const EngineEntry> engine_table() {
  return kEngines;
}

std::unique_ptr<Scheduler> make_scheduler(EngineKind kind, EngineShell& shell) {
  // The contiguous baselines are the generic engine's allocators under any
  // engine's name (an engine's rules are those of a paged pool).
  if (shell.options.allocator != AllocatorKind::kPaged) return make<GenericScheduler>(shell);
  for (const EngineEntry& entry : kEngines) {
    if (entry.kind == kind) return entry.make(shell);
  }
  return make<GenericScheduler>(shell);
}

}  // namespace kvreplay

namespace kvreplay {

std::string_view to_string(EngineKind kind) {
  for (const EngineEntry& entry : engine_table()) {
    if (entry.kind == kind) return entry.name;
  }
  return "?";
}

std::optional<EngineKind> parse_engine(std::string_view name) {
  for (const EngineEntry& entry : engine_table()) {
    if (entry.name == name) return entry.kind;
  }
  return std::nullopt;
}

std::vector<std::string> engine_names() {
  std::vector<std::string> names;
  for (const EngineEntry& entry : engine_table()) names.emplace_back(entry.name);
  return names;
}

}  // namespace kvreplay
