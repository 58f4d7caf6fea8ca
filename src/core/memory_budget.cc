#include "core/memory_budget.h"

#include "core/config.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>

namespace kvreplay {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

// KVREPLAY_MEMORY_LIMIT and memory.max: sizes as --kv-memory takes them
// (8GiB, 512MiB, 2GB, bytes); nullopt when it does not parse.
std::optional<std::uint64_t> parse_limit(std::string_view text) {
  auto bytes = parse_memory_size(text);
  if (!bytes) return std::nullopt;
  return bytes.value();
}

MemoryLimit read_limit() {
  MemoryLimit limit{kMax, "no limit"};
  auto lower = [&limit](std::uint64_t bytes, const char* source) {
    if (bytes > 0 && bytes < limit.bytes) limit = {bytes, source};
  };
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    lower(mul_sat(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page)),
          "physical memory");
  }
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    lower(static_cast<std::uint64_t>(as.rlim_cur), "ulimit -v");
  }
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::string text;
  if (cgroup >> text && text != "max") {
    if (auto bytes = parse_limit(text)) lower(*bytes, "cgroup memory.max");
  }
  if (const char* env = std::getenv("KVREPLAY_MEMORY_LIMIT"); env != nullptr) {
    // One that does not parse (or is 0) is refused by check_memory().
    if (auto bytes = parse_limit(env)) lower(*bytes, "KVREPLAY_MEMORY_LIMIT");
  }
  return limit;
}

}  // namespace

MemoryLimit memory_limit() {
  static const MemoryLimit limit = read_limit();
  return limit;
}

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > kMax / a) return kMax;
  return a * b;
}

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  return b > kMax - a ? kMax : a + b;
}

std::string memory_text(std::uint64_t bytes) {
  if (bytes == kMax) return "more than 16 EiB";
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  if (b >= kKiB * kKiB * kKiB * kKiB)
    return fmt::format("{:.2f} TiB", b / (kKiB * kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB * kKiB) return fmt::format("{:.2f} GiB", b / (kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB) return fmt::format("{:.2f} MiB", b / (kKiB * kKiB));
  if (b >= kKiB) return fmt::format("{:.2f} KiB", b / kKiB);
  return fmt::format("{} bytes", bytes);
}

std::optional<std::string> check_memory(std::uint64_t need_bytes, std::string_view what,
                                        std::string_view formula) {
  // Set, it must be a size: empty or 0 is refused, never read as "no limit".
  if (const char* env = std::getenv("KVREPLAY_MEMORY_LIMIT"); env != nullptr) {
    const auto bytes = parse_limit(env);
    if (!bytes || *bytes == 0) {
      const std::string shown = std::string(env).substr(0, 40);
      return fmt::format(
          "KVREPLAY_MEMORY_LIMIT: '{}' is not a memory limit (a size above 0: 8GiB, 512MiB, 2GB "
          "or bytes; unset it for the machine's own limit)",
          shown);
    }
  }
  const MemoryLimit limit = memory_limit();
  if (need_bytes <= limit.bytes) return std::nullopt;
  return fmt::format("{} needs {} ({}), over the memory limit of {} ({})", what,
                     memory_text(need_bytes), formula, memory_text(limit.bytes), limit.source);
}

}  // namespace kvreplay
