// "Did you mean ...?": the closest command or option to a misspelled one.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

// The optimal string alignment distance: the fewest insertions, deletions,
// substitutions and swaps of two adjacent characters that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is close enough to be what was
// meant: at most 2 edits, and at most one per two characters of `word` (so
// "x" suggests nothing); failing that, the one candidate `word` (3 characters
// or more) begins. Ties go to the earlier candidate. nullopt when none is close.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// After `app.parse(argc, argv)` failed: one line naming the first argument the
// parser left over that is no command (at the top level) or no option of the
// command given, with the closest name when one is close:
//   command line: unknown command 'replai'; did you mean 'replay'?
//   command line: unknown option '--reprot' of 'kvreplay replay'; did you mean '--report'?
// nullopt when no such argument is left (the parser's own message says more).
std::optional<std::string> unknown_name_message(CLI::App& app, int argc, const char* const* argv);

}  // namespace kvreplay
