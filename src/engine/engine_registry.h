// The registry of engines (SPEC 3.1): one entry per engine declares, as data,
// what it can serve, its defaults, its own command-line options, its config
// keys and report section, and how a fleet merges that section. The command
// line (app/options.cc), the option checks (sim_options_error) and the
// reports read the entry; none of them asks which engine runs.
//
// A new engine: its folder (a Scheduler subclass and its EngineEntry, named
// by a function its header declares) and one line in the table of
// engine/engine_registry.cc, with the EngineKind value it is chosen by.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/scheduler.h"
#include "engine/sim_types.h"
#include "model/gpu.h"

namespace kvreplay {

// What an engine can serve. sim_options_error (and, for receives_kv,
// disaggregation_problem) refuses the rest, naming the option at fault.
struct EngineCapabilities {
  bool hybrid_models = false;  // several KV-cache groups, or a sliding window (model/kv_groups.h)
  bool kv_events = false;      // --kv-events (EngineShell::events)
  bool emit_trace = false;     // --emit-trace (Scheduler::attach_trace)
  bool receives_kv = false;    // the decode side of disaggregated serving (Scheduler::receive_kv)
  // --allocator contiguous-*: the whole-request baselines. Another engine
  // given one is refused when --engine was given, else the run falls back to
  // the engine that has them (make_scheduler).
  bool contiguous_allocators = false;
  // --offload at all; false: refused with offload_media_why.
  bool offload = true;
  // --offload: the media and tier policies it keeps, by name (to_string of
  // OffloadMedium and OffloadPolicy); empty: every one the offload seam has.
  // The why: the problem when one is refused (empty: a sentence made up).
  std::span<const std::string_view> offload_media{};
  std::string_view offload_media_why{};
  std::span<const std::string_view> offload_policies{};
  std::string_view offload_policies_why{};
  // --evict: the prefix-cache eviction policies it takes, by name; empty:
  // every one. The why ends "--evict P: the NAME engine's ...".
  std::span<const std::string_view> evict_policies{};
  std::string_view evict_why{};
};

// What an engine's defaults may depend on, when the command line is resolved.
struct EngineSetup {
  const GpuSpec* gpu = nullptr;                 // --gpu's preset, if any
  std::function<bool(std::string_view)> given;  // whether the command line gave an option
};

// Defaults that differ per engine, each applied only where the option was
// not given.
struct EngineDefaults {
  std::uint32_t page_tokens = 0;      // --page-tokens; 0: the run config's (16)
  std::string_view alloc_order{};     // --alloc-order; empty: the pool's (lifo)
  std::optional<double> watermark{};  // --watermark; none: SimOptions's
  // --max-seqs and --max-batched-tokens by --gpu-class (and the config's
  // "gpu_class" key); null: SimOptions's.
  BatchDefaults (*batch)(GpuClass gpu_class) = nullptr;
  // Shared options the engine does not take (refused when given), and why:
  // "OPTION is not an option of --engine NAME (WHY)".
  std::span<const std::string_view> refused_options{};
  std::string_view refused_why{};
  // The share of the GPU memory free after the weights and the activations
  // that the KV cache takes when no --kv-memory is given (TensorRT-LLM's
  // free_gpu_memory_fraction); none: the run config's rule (vLLM's
  // --gpu-memory-utilization of the whole memory).
  std::optional<double> free_gpu_memory_fraction{};
  // Whose startup rule sizes the KV memory from --gpu (model/capacity.h):
  // "vllm", "sglang" or "trtllm".
  std::string_view capacity_rule = "vllm";
  // The rest of the engine's resolution, after its own options are read
  // (defaults that depend on the GPU, shared figures its own set); a problem
  // with the command line, or nullopt.
  std::optional<std::string> (*resolve)(SimOptions& out, const EngineSetup& setup) = nullptr;
  // Under --dp-attention N the scheduler runs the N attention replicas as one
  // (RunConfig::dp_attention): how the engine's limits read then. Null: each
  // replica has the limits (vLLM's engine cores under --data-parallel-size,
  // TensorRT-LLM's ranks under enable_attention_dp), so --max-seqs and
  // --max-batched-tokens count N times.
  void (*attention_replicas)(SimOptions& out, std::uint32_t replicas) = nullptr;
};

// One of the engine's own command-line options ("OPTION is an option of
// --engine NAME" under another engine). Its value goes to one SimOptions
// field: a whole number, a real one, a flag, or one of a set of names.
struct EngineOption {
  std::string_view name{};  // "--schedule-policy"
  std::string_view help{};  // shown in --help, in the "Simulation" group
  std::uint32_t& (*whole)(SimOptions& options) = nullptr;
  double& (*real)(SimOptions& options) = nullptr;
  bool& (*flag)(SimOptions& options) = nullptr;  // a flag: given sets it true
  // A choice: its names and the default, and how a name is set.
  std::vector<std::string> (*choices)() = nullptr;
  std::string_view choice_default{};
  void (*set_choice)(SimOptions& options, std::string_view name) = nullptr;
  double lo = 0, hi = 0;  // a number's range, both included
};

// How a fleet merges one field of an engine's report section across its
// instances (the instances run the same engine and options).
enum class FigureMerge : std::uint8_t {
  kSame,  // a setting: every instance's value
  kSum,   // a count
  kMax,   // a peak
  kMin,
  kMean,  // a ratio or a mean: the mean over the instances
};
struct SectionField {
  std::string_view path{};  // "retracted_requests", "token_usage/peak"
  FigureMerge merge{};
};

// The table of engines: what --engine accepts and how each is made.
struct EngineEntry {
  EngineKind kind{};
  std::string_view name{};     // --engine's value, the config's "engine"
  std::string_view summary{};  // what it imitates, for --engine's help ("" for none)
  std::unique_ptr<Scheduler> (*make)(EngineShell& shell) = nullptr;
  EngineCapabilities can{};
  EngineDefaults defaults{};
  std::span<const EngineOption> options{};
  // The config's keys ("config" of the report: sim_options_json): the
  // engine's own added to, or taken from, the shared ones; null: none.
  void (*config_json)(const SimOptions& options, nlohmann::json& config) = nullptr;
  // The report section its Scheduler::add_figures writes ("sglang"), empty:
  // none; a fleet lists it per instance, and merges each field as `merge` says.
  std::string_view report_section{};
  std::span<const SectionField> merge{};
  // The bytes one offload tier slot costs beyond the offload connector's
  // (app/simulation: the run's memory bound), and what a slot is called;
  // 0: the connector's, per block.
  std::uint64_t offload_slot_bytes = 0;
  std::string_view offload_slot = "block";
};

std::span<const EngineEntry> engine_table();
// The entry of `kind` (one of the table's).
const EngineEntry& engine_entry(EngineKind kind);
// The engine of `kind`; under a contiguous allocator, the engine that has them.
std::unique_ptr<Scheduler> make_scheduler(EngineKind kind, EngineShell& shell);
// The names of the engines that have a capability, in table order, joined
// with `conjunction` ("vllm", "generic and vllm").
std::string engines_with(bool EngineCapabilities::*capability, std::string_view conjunction);
// Whether `name` is one of the table's list `names` (empty: every name).
bool declared(std::span<const std::string_view> names, std::string_view name);

}  // namespace kvreplay
