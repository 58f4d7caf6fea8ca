#include "app/command.h"

#include <algorithm>

namespace kvreplay {

namespace {

std::vector<std::string>& process_arguments() {
  static std::vector<std::string> arguments;
  return arguments;
}

}  // namespace

void set_process_arguments(int argc, char** argv) {
  process_arguments().assign(argv, argv + argc);
}

std::vector<std::string> arguments_after(std::string_view command) {
  const std::vector<std::string>& all = process_arguments();
  auto it = std::find(all.begin(), all.end(), command);
  if (it == all.end()) return {};
  return {it + 1, all.end()};
}

}  // namespace kvreplay
