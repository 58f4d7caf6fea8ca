#include "cli/suggest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace kvreplay {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: the distance between a[0, i) and b[0, j); three rows suffice.
  const std::size_t n = b.size();
  std::vector<std::size_t> before(n + 1), previous(n + 1), current(n + 1);
  for (std::size_t j = 0; j <= n; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const std::size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[n];
}

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 3;  // more than any accepted distance
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance <= 2 && 2 * distance <= word.size() && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (best || word.size() < 3) return best;
  std::optional<std::string> only;
  for (const std::string& candidate : candidates) {
    if (candidate.size() > word.size() && candidate.compare(0, word.size(), word) == 0) {
      if (only) return std::nullopt;  // ambiguous
      only = candidate;
    }
  }
  return only;
}

namespace {

// "-5", "-0.5": a value, not an option.
bool looks_like_number(std::string_view arg) {
  return arg.size() > 1 && (std::isdigit(static_cast<unsigned char>(arg[1])) != 0 || arg[1] == '.');
}

// Every name of the options of `command`, dashes included, in declaration order.
std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// closest_match on the names without their leading dashes; the candidate as given.
std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  auto bare = [](std::string_view name) {
    return name.substr(std::min(name.find_first_not_of('-'), name.size()));
  };
  std::vector<std::string> bare_candidates;
  for (const std::string& candidate : candidates) bare_candidates.emplace_back(bare(candidate));
  auto match = closest_match(bare(word), bare_candidates);
  if (!match) return std::nullopt;
  const auto at = static_cast<std::size_t>(
      std::find(bare_candidates.begin(), bare_candidates.end(), *match) - bare_candidates.begin());
  return candidates[at];
}

}  // namespace

std::optional<std::string> unknown_name_message(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* command = &app;
  for (CLI::App* sub : app.get_subcommands()) command = sub;  // at most one is allowed
  const std::vector<std::string> left = app.remaining(true);
  const std::set<std::string> leftover(left.begin(), left.end());
  const std::vector<std::string> options = option_names(*command);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;  // positional arguments from here on
    if (leftover.count(std::string(arg)) == 0) continue;
    if (command == &app && !arg.empty() && arg[0] != '-') {
      std::vector<std::string> commands;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        commands.push_back(sub->get_name());
      }
      if (auto match = closest_name(arg, commands)) {
        return fmt::format("command line: unknown command '{}'; did you mean '{}'?", arg, *match);
      }
      return fmt::format("command line: unknown command '{}' (commands: '{}')", arg,
                         fmt::join(commands, "', '"));
    }
    if (arg.size() < 2 || arg[0] != '-' || looks_like_number(arg)) continue;
    const std::string_view name = arg.substr(0, arg.find('='));
    if (std::find(options.begin(), options.end(), name) != options.end()) continue;  // misplaced
    const std::string where =
        command == &app ? std::string("kvreplay") : fmt::format("kvreplay {}", command->get_name());
    if (auto match = closest_name(name, options)) {
      return fmt::format("command line: unknown option '{}' of '{}'; did you mean '{}'?", name,
                         where, *match);
    }
    return fmt::format("command line: unknown option '{}' of '{}' (see {} --help)", name, where,
                       where);
  }
  return std::nullopt;
}

}  // namespace kvreplay
