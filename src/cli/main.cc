// kvreplay: the command line. main is the table of commands; each command is
// one file of src/app/ (app/command.h) that declares its options and runs.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "app/command.h"
#include "app/exit_codes.h"
#include "app/options.h"
#include "cli/suggest.h"
#include "core/memory_budget.h"
#include "gpu/device.h"
#include "io/standard_output.h"

namespace {

// The commands, in the order --help lists them.
constexpr kvreplay::CommandSpec kCommands[] = {
    {"replay", "replay a kvtrace event trace against the real pool and tables",
     kvreplay::make_replay_command},
    {"validate", "check that a kvtrace is well formed and consistent",
     kvreplay::make_validate_command},
    {"convert", "convert a request trace (native, Mooncake, Azure, BurstGPT) to native JSON Lines",
     kvreplay::make_convert_command},
    {"simulate", "schedule a request trace (native, Mooncake, Azure, BurstGPT) over the real pool",
     kvreplay::make_simulate_command},
    {"plan",
     "sweep models, KV memory and page sizes over a request trace; find the smallest KV memory",
     kvreplay::make_plan_command},
    {"plan-merge",
     "assemble the parts of a sharded plan (plan --shard I/N) into the plan's report, table and "
     "HTML",
     kvreplay::make_plan_merge_command},
    {"calibrate",
     "fit the cost model's constants to measured benchmark figures (TTFT, TPOT, throughput)",
     kvreplay::make_calibrate_command},
    {"capacity",
     "the KV capacity an engine (vLLM, SGLang, TensorRT-LLM) allocates at startup, as it logs it",
     kvreplay::make_capacity_command},
    {"compare", "compare two reports of the same trace metric by metric (exit 1 on a regression)",
     kvreplay::make_compare_command},
    {"events", "check and summarize a KV-event stream (vLLM's KVEventBatch JSON Lines)",
     kvreplay::make_events_command},
    {"kernels",
     "time the data-plane kernels against the device copy roof, on paged and identity tables",
     kvreplay::make_kernels_command},
};

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

// Parses the command line. Returns the exit code when the run ends here: 0
// after --help or --version; 2 after a usage error, with one line on stderr
// (the closest name to a misspelled command or option).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() != 0) {
      if (auto message = kvreplay::unknown_name_message(app, argc, argv)) {
        kvreplay::eprint("{}\n", *message);
        return kvreplay::kExitInput;
      }
    }
    if (error.get_exit_code() == 0) {  // --help, --version
      app.exit(error);
      return kvreplay::kExitOk;
    }
    // One line, in the house style, whatever CLI11 would have said.
    std::string what = error.what();
    while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
    for (char& c : what) {
      if (c == '\n') c = ' ';
    }
    kvreplay::put_text(stderr, fmt::format("command line: {}\n", what));
    return kvreplay::kExitInput;
  }
  return std::nullopt;
}

// Runs the parsed command. What escapes it is an environment failure (memory,
// a stream that cannot be written), never a reason to abort: the outputs'
// destructors remove every temporary on the way out, and the exit code stays
// below 128 (SPEC §8).
int run_command(kvreplay::Command& command) {
  if (auto problem =
          kvreplay::check_memory(0, "", "")) {  // a KVREPLAY_MEMORY_LIMIT that is no size
    kvreplay::put_text(stderr, fmt::format("environment: {}\n", *problem));
    return kvreplay::kExitInput;
  }
  try {
    return command.run();
  } catch (const std::bad_alloc&) {
    kvreplay::put_text(stderr,
                       "kvreplay: out of memory (nothing written); see the README's "
                       "\"Memory bounds\" for what a run needs\n");
  } catch (const std::length_error& error) {
    kvreplay::put_text(
        stderr, fmt::format("kvreplay: out of memory: {} (nothing written)\n", error.what()));
  } catch (const std::system_error& error) {
    kvreplay::put_text(stderr, fmt::format("kvreplay: {} (nothing written)\n", error.what()));
  } catch (const std::exception& error) {
    kvreplay::put_text(stderr, fmt::format("kvreplay: {} (nothing written)\n", error.what()));
  }
  return kvreplay::kExitInput;
}

}  // namespace

int main(int argc, char** argv) {
  // Temporaries removed on SIGINT/SIGTERM/SIGHUP/SIGPIPE; a stdout write error exits 2.
  kvreplay::install_output_guards(kvreplay::kExitInput);
  kvreplay::set_process_arguments(argc, argv);
  CLI::App app{"kvreplay: replay and simulate paged KV-cache traces against a real block pool"};
  app.set_version_flag("--version", [] { return version_text(); });
  app.footer(
      "Examples:\n"
      "  kvreplay replay traces/quickstart.jsonl\n"
      "  kvreplay simulate traces/requests/azure_conv.csv --kv-memory 8GiB\n"
      "  kvreplay replay --help\n"
      "Exit codes: 0 ok, 1 a check failed, 2 usage or input error, 3 pool exhausted.");
  app.require_subcommand(0, 1);

  struct Declared {
    CLI::App* subcommand;
    std::unique_ptr<kvreplay::Command> command;
  };
  std::vector<Declared> declared;
  for (const kvreplay::CommandSpec& spec : kCommands) {
    CLI::App* subcommand = app.add_subcommand(std::string(spec.name), std::string(spec.summary));
    declared.push_back({subcommand, spec.make()});
    declared.back().command->declare(*subcommand);
  }

  kvreplay::add_value_checks(app);
  if (auto code = parse_command_line(app, argc, argv)) return *code;
  for (Declared& entry : declared) {
    if (entry.subcommand->parsed()) return run_command(*entry.command);
  }
  kvreplay::put_text(stdout, app.help());
  return kvreplay::kExitOk;
}
