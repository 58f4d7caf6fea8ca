// The memory a run may use, and the one check every command makes before it
// sizes anything from its input (SPEC §8): a run whose estimated need is over
// the limit is refused with exit 2, naming the figure and the limit, instead
// of aborting on bad_alloc half-way.
//
// The limit is the smallest of
//   - the machine's physical memory (sysconf _SC_PHYS_PAGES x _SC_PAGE_SIZE),
//   - the process's address-space limit (RLIMIT_AS, `ulimit -v`), when set,
//   - the cgroup's memory.max (cgroup v2, /sys/fs/cgroup/memory.max), when set,
//   - KVREPLAY_MEMORY_LIMIT (bytes, or with a suffix: 512MiB, 8GiB), when set,
// less nothing else: the estimates are upper bounds of what a run allocates,
// not of what the machine has free. Each command documents its own formula
// (README, "Memory bounds") and calls check_memory() with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvreplay {

struct MemoryLimit {
  std::uint64_t bytes = 0;
  std::string
      source;  // "physical memory", "ulimit -v", "cgroup memory.max", "KVREPLAY_MEMORY_LIMIT"
};

// The limit in force (read once per process). KVREPLAY_MEMORY_LIMIT that does
// not parse is ignored here and refused by check_memory().
MemoryLimit memory_limit();

// Saturating arithmetic for the estimates: a product or sum that overflows is
// UINT64_MAX, which no limit admits.
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b);
std::uint64_t add_sat(std::uint64_t a, std::uint64_t b);

// nullopt when `need_bytes` fits the limit; else the problem, in words:
//   "WHAT needs 5.50 GiB (FORMULA), over the memory limit of 4.00 GiB (physical memory)"
// `what` names the run ("the pool of 4294967294 blocks"), `formula` how the
// figure was reached ("79 bytes a block x 4294967294 blocks").
std::optional<std::string> check_memory(std::uint64_t need_bytes, std::string_view what,
                                        std::string_view formula);

// "1.50 GiB", "512.00 MiB", "900 bytes".
std::string memory_text(std::uint64_t bytes);

}  // namespace kvreplay
