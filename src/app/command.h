// A command of the command line. cli/main.cc holds the table of commands
// (name, one line for --help, a factory), in the spirit of Ninja's tool table;
// each command is one file of this folder that declares its options on CLI11
// (which does all the parsing), turns them into its request, runs, and owns its
// outputs. Exit codes: app/exit_codes.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace kvreplay {

class Command {
 public:
  virtual ~Command() = default;
  // Declares the command's arguments, options and --help footer on `app`, the
  // command's own CLI11 subcommand. The values land in this object.
  virtual void declare(CLI::App& app) = 0;
  // After a successful parse: resolves the options and runs. The exit code.
  virtual int run() = 0;
};

// The process's arguments, which main records before parsing, for a command
// that records its own command line (plan --shard, for plan-merge).
void set_process_arguments(int argc, char** argv);
// The arguments after the first one equal to `command`; empty when none is.
std::vector<std::string> arguments_after(std::string_view command);

struct CommandSpec {
  std::string_view name;
  std::string_view summary;  // the line --help shows
  std::unique_ptr<Command> (*make)();
};

// One factory per command, in app/NAME.cc.
std::unique_ptr<Command> make_replay_command();
std::unique_ptr<Command> make_validate_command();
std::unique_ptr<Command> make_convert_command();
std::unique_ptr<Command> make_simulate_command();
std::unique_ptr<Command> make_plan_command();
std::unique_ptr<Command> make_plan_merge_command();
std::unique_ptr<Command> make_compare_command();
std::unique_ptr<Command> make_events_command();
std::unique_ptr<Command> make_kernels_command();
std::unique_ptr<Command> make_calibrate_command();
std::unique_ptr<Command> make_capacity_command();

}  // namespace kvreplay
