// The generic engine's entry in the table of engines (engine/engine_registry.h):
// the engine-neutral scheduler, and the one that runs the contiguous
// allocators.
#include "engine/engine_registry.h"
#include "engine/generic/generic_scheduler.h"

namespace kvreplay {

namespace {

std::unique_ptr<Scheduler> make(EngineShell& shell) {
  return std::make_unique<GenericScheduler>(shell);
}

}  // namespace

const EngineEntry& generic_engine() {
  static const EngineEntry entry = {
      .kind = EngineKind::kGeneric,
      .name = "generic",
      .make = make,
      .can =
          {
              .kv_events = true,
              .emit_trace = true,
              .receives_kv = true,
              .contiguous_allocators = true,
          },
  };
  return entry;
}

}  // namespace kvreplay
