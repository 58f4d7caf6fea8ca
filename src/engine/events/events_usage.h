// EventsUsage: the memory `kvreplay events` (engine/events/events_check.h) holds
// (README, "Memory bounds").
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/memory_budget.h"

namespace kvreplay {

// What the check holds, counted as it grows at an upper bound of each
// structure's bytes: a node's allocation and its share of a hash table's
// buckets (old and new while it rehashes); a vector's element three times
// over (its doubled capacity, and the old buffer while it grows). Passing the
// limit is the problem of the field being read or applied.
struct EventsUsage {
  static constexpr std::uint64_t kLineMax = std::uint64_t{64} << 20;
  static constexpr std::uint64_t kBase = std::uint64_t{16} << 20;  // the program, the reader
  static constexpr std::uint64_t kLineCopies = 4;  // read, copied, parsed (a string of it)
  static constexpr std::uint64_t kParsedEvent = 256, kParsedHash = 96;
  static constexpr std::uint64_t kId = 64, kStringId = 48;  // + the string's length
  static constexpr std::uint64_t kEntry = 112;  // a hash of a medium, its share of the distances
  static constexpr std::uint64_t kPosition = 24, kReuse = 32, kChange = 48;
  static constexpr std::uint64_t kMedium = 4096, kInstance = 96;  // the summary's share too

  std::uint64_t limit = 0;
  std::uint64_t line = 0;    // the line's length
  std::uint64_t parsed = 0;  // the line's parsed events and hashes, in bytes
  // names: the bytes of string hashes and media kept, with their allocations
  std::uint64_t ids = 0, names = 0, entries = 0, positions = 0, reuses = 0, changes = 0;
  std::uint64_t media = 0, instances = 0;

  std::uint64_t bytes() const {
    std::uint64_t sum = add_sat(kBase, mul_sat(kLineCopies, line));
    for (const auto& [per, count] : terms()) sum = add_sat(sum, mul_sat(per, count));
    return add_sat(sum, add_sat(parsed, names));
  }
  bool over() const { return bytes() > limit; }
  std::array<std::pair<std::uint64_t, std::uint64_t>, 7> terms() const {
    return {{{kId, ids},
             {kEntry, entries},
             {kPosition, positions},
             {kReuse, reuses},
             {kChange, changes},
             {kMedium, media},
             {kInstance, instances}}};
  }
  std::string problem() const {
    std::string formula = fmt::format("16 MiB + {} x {} bytes of the line", kLineCopies, line);
    if (parsed > 0) formula += fmt::format(" + {} bytes of its events", parsed);
    const char* labels[] = {"distinct hashes", "hashes of a medium",        "stores",
                            "re-stores",       "changes of a cached count", "media",
                            "instances"};
    const auto all = terms();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i].second > 0) {
        formula += fmt::format(" + {} bytes x {} {}", all[i].first, all[i].second, labels[i]);
      }
    }
    if (names > 0) formula += fmt::format(" + {} bytes of names (string hashes, media)", names);
    constexpr std::string_view what = "checking the stream up to here";
    if (auto text = check_memory(bytes(), what, formula)) return *text;
    return fmt::format("{} needs {} ({}), over the memory limit of {} (EventsOptions)", what,
                       memory_text(bytes()), formula, memory_text(limit));
  }
};

}  // namespace kvreplay
