// The table of engines (SPEC 3.1): --engine's names, in table order, and each
// engine's entry, which its own folder defines. A new engine is its folder and
// one line here.
#include "engine/engine_registry.h"

#include <algorithm>
#include <functional>

#include "engine/generic/generic_scheduler.h"
#include "engine/sglang/sglang_scheduler.h"
#include "engine/trtllm/trtllm_scheduler.h"
#include "engine/vllm/vllm_scheduler.h"

namespace kvreplay {

namespace {

const std::vector<EngineEntry>& entries() {
  static const std::vector<EngineEntry> table = {
      vllm_engine(),
      sglang_engine(),
      trtllm_engine(),
      generic_engine(),
  };
  return table;
}

}  // namespace

std::span<const EngineEntry> engine_table() {
  return entries();
}

const EngineEntry& engine_entry(EngineKind kind) {
  for (const EngineEntry& entry : engine_table()) {
    if (entry.kind == kind) return entry;
  }
  return engine_table().front();
}

std::unique_ptr<Scheduler> make_scheduler(EngineKind kind, EngineShell& shell) {
  // The contiguous baselines are one engine's allocators under any engine's
  // name (an engine's rules are those of a paged pool).
  if (shell.options.allocator != AllocatorKind::kPaged &&
      !engine_entry(kind).can.contiguous_allocators) {
    for (const EngineEntry& entry : engine_table()) {
      if (entry.can.contiguous_allocators) return entry.make(shell);
    }
  }
  return engine_entry(kind).make(shell);
}

std::string engines_with(bool EngineCapabilities::*capability, std::string_view conjunction) {
  std::vector<std::string_view> names;
  for (const EngineEntry& entry : engine_table()) {
    if (entry.can.*capability) names.push_back(entry.name);
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? std::string(conjunction) : std::string(", ");
    out += names[i];
  }
  return out;
}

bool declared(std::span<const std::string_view> names, std::string_view name) {
  return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
}

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
