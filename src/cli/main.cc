// kvreplay: the command line. A thin main: an options struct per subcommand,
// and each subcommand is a function (src/replay/run_replay.h, ...).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "gpu/device.h"
#include "replay/run_replay.h"

namespace {

using kvreplay::ConfigOverrides;

std::string version_text() {
  kvreplay::GpuProbe gpu = kvreplay::probe_gpu();
  std::string cuda;
  if (!gpu.built_with_cuda) {
    cuda = "built without CUDA";
  } else if (gpu.devices > 0) {
    cuda = fmt::format("CUDA, {} device(s): {}", gpu.devices, gpu.name);
  } else {
    cuda = fmt::format("CUDA, {}", gpu.reason);
  }
  return fmt::format("kvreplay {} ({})", KVREPLAY_VERSION, cuda);
}

// Raw option storage; copied into ConfigOverrides for the options actually given.
struct ConfigOptions {
  std::string model, dtype, kv_memory, alloc_order;
  std::uint32_t layers = 0, kv_heads = 0, head_dim = 0, page_tokens = 0, pool_blocks = 0,
                max_seq_tokens = 0;
  std::vector<CLI::Option*> options;

  void add_to(CLI::App& app) {
    auto positive = CLI::Range(1u, 0xFFFFFFFFu);
    std::string models;
    for (const auto& preset : kvreplay::model_presets()) {
      models += models.empty() ? "" : ", ";
      models += preset.name;
    }
    options = {
        app.add_option("--model", model, "model preset: " + models)->group("Configuration"),
        app.add_option("--layers", layers, "layers (overrides the model)")
            ->check(positive)
            ->group("Configuration"),
        app.add_option("--kv-heads", kv_heads, "KV heads (overrides the model)")
            ->check(positive)
            ->group("Configuration"),
        app.add_option("--head-dim", head_dim, "head dimension (overrides the model)")
            ->check(positive)
            ->group("Configuration"),
        app.add_option("--dtype", dtype, "fp32, fp16, bf16 (default) or fp8")
            ->group("Configuration"),
        app.add_option("--page-tokens", page_tokens, "tokens per page (block); default 16")
            ->check(positive)
            ->group("Configuration"),
        app.add_option("--pool-blocks", pool_blocks, "pool size in blocks")
            ->check(CLI::Range(1u, 0xFFFFFFFEu))
            ->group("Configuration"),
        app.add_option("--kv-memory", kv_memory, "pool size in memory: 80GiB, 512MiB, or bytes")
            ->group("Configuration"),
        app.add_option("--max-seq-tokens", max_seq_tokens, "longest sequence; default 32768")
            ->check(positive)
            ->group("Configuration"),
        app.add_option("--alloc-order", alloc_order,
                       "free-block order: lifo (default), fifo, lowest")
            ->group("Configuration"),
    };
  }

  ConfigOverrides overrides() const {
    ConfigOverrides out;
    auto given = [this](std::size_t i) { return options[i]->count() > 0; };
    if (given(0)) out.model = model;
    if (given(1)) out.layers = layers;
    if (given(2)) out.kv_heads = kv_heads;
    if (given(3)) out.head_dim = head_dim;
    if (given(4)) out.dtype = dtype;
    if (given(5)) out.page_tokens = page_tokens;
    if (given(6)) out.pool_blocks = pool_blocks;
    if (given(7)) out.kv_memory = kv_memory;
    if (given(8)) out.max_seq_tokens = max_seq_tokens;
    if (given(9)) out.alloc_order = alloc_order;
    return out;
  }
};

const CLI::Validator kCheckValidator(
    [](std::string& value) -> std::string {
      return kvreplay::CheckPolicy::parse(value)
                 ? std::string()
                 : "must be every, end, off or a positive integer N";
    },
    "every|N|end|off");

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvreplay: replay and simulate paged KV-cache traces against a real block pool"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.footer(
      "Examples:\n"
      "  kvreplay replay traces/fork_cow.jsonl\n"
      "  kvreplay replay --help\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage or input error, 3 pool exhausted.");
  app.require_subcommand(0, 1);

  // replay
  kvreplay::ReplayRequest replay;
  ConfigOptions replay_config;
  std::string replay_check = "end", replay_oom = "fail";
  CLI::App* replay_cmd =
      app.add_subcommand("replay", "replay a kvtrace event trace against the real pool and tables");
  replay_cmd
      ->add_option("TRACE", replay.trace_path,
                   "kvtrace file (.jsonl, .json, gzip by content; - for stdin)")
      ->required();
  replay_config.add_to(*replay_cmd);
  replay_cmd
      ->add_option(
          "--check", replay_check,
          "invariant checks: after every event, every N events, at the end (default), or off")
      ->check(kCheckValidator);
  replay_cmd
      ->add_option("--on-oom", replay_oom,
                   "pool exhaustion: fail (exit 3, default) or skip the operation and go on")
      ->check(CLI::IsMember({"fail", "skip"}));
  replay_cmd->add_option("--report", replay.report_path, "write the JSON report here");
  replay_cmd->add_option("--timeline", replay.timeline_path, "write one CSV row per event here");
  replay_cmd->add_flag("-q,--quiet", replay.quiet, "print no summary");
  replay_cmd->footer(
      "Example:\n"
      "  kvreplay replay traces/prefix_partial.jsonl --check every --report out.json\n"
      "  zcat big.jsonl.gz | kvreplay replay - --kv-memory 8GiB --on-oom skip --check off");

  // validate
  std::string validate_path;
  ConfigOptions validate_config;
  CLI::App* validate_cmd =
      app.add_subcommand("validate", "check that a kvtrace is well formed and consistent");
  validate_cmd->add_option("TRACE", validate_path, "kvtrace file (- for stdin)")->required();
  validate_config.add_to(*validate_cmd);
  validate_cmd->footer("Example:\n  kvreplay validate traces/fork_cow.jsonl");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? kvreplay::kExitOk : kvreplay::kExitInput;
  }
  if (replay_cmd->parsed()) {
    replay.overrides = replay_config.overrides();
    replay.check = *kvreplay::CheckPolicy::parse(replay_check);
    replay.on_oom = replay_oom == "skip" ? kvreplay::OomPolicy::kSkip : kvreplay::OomPolicy::kFail;
    return kvreplay::run_replay(replay);
  }
  if (validate_cmd->parsed()) {
    return kvreplay::run_validate(validate_path, validate_config.overrides());
  }
  fmt::print("{}", app.help());
  return kvreplay::kExitOk;
}
