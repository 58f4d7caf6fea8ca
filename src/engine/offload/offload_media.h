// The media an offload tier sits on (SPEC 3.7), as data: one row of
// kOffloadMedia per medium, in lookup order (the faster first). A new medium
// is one value of OffloadMedium and its row below; everything else (the
// --offload grammar, the --offload-NAME-gbps/-latency-us options and their
// help, the reports' and KV events' names, the kvtrace tier, the default
// link) reads the row. Outside src/engine/offload/ no code names a value of
// OffloadMedium or asks which one a tier has: it reads the tier's row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

enum class OffloadMedium : std::uint8_t { kCpu, kDisk };  // kOffloadMedia's rows, in order

// Default links, GB/s each way, by the --gpu preset's name (empty: the cost
// model's default GPU).
double pcie_link_gbps(std::string_view gpu);  // host memory over the GPU's PCIe
double nvme_link_gbps(std::string_view gpu);  // one NVMe Gen4 x4 drive, sequential

struct OffloadMediumInfo {
  OffloadMedium medium;
  std::string_view name;        // --offload's TIER, the reports' and timeline's name
  std::string_view event_name;  // vLLM's KV events' medium (BlockStored.medium)
  std::uint8_t trace_tier;      // its tier in a kvtrace (formats/kvtrace_reader.h)
  bool host_memory;             // host DRAM: where SGLang's HiCache keeps its host pool
  double (*default_gbps)(std::string_view gpu);
  double default_latency_us;      // per transfer
  std::string_view example_size;  // --offload's example: NAME:SIZE
  std::string_view gbps_help;     // --offload-NAME-gbps
  std::string_view latency_help;  // --offload-NAME-latency-us
};

inline constexpr OffloadMediumInfo kOffloadMedia[] = {
    {OffloadMedium::kCpu, "cpu", "CPU", 0, true, pcie_link_gbps, 10.0, "64GiB",
     "GB/s each way between a GPU and host memory (default: its PCIe, 64 Gen5, 32 Gen4)",
     "fixed cost of one host transfer, us (default 10)"},
    {OffloadMedium::kDisk, "disk", "DISK", 1, false, nvme_link_gbps, 80.0, "1TiB",
     "GB/s each way to the disk tier (default 7)",
     "fixed cost of one disk transfer, us (default 80)"},
};
inline constexpr std::size_t kMaxOffloadTiers = std::size(kOffloadMedia);  // one of each medium

constexpr bool offload_media_in_order() {
  for (std::size_t i = 0; i < kMaxOffloadTiers; ++i) {
    if (static_cast<std::size_t>(kOffloadMedia[i].medium) != i) return false;
  }
  return true;
}
static_assert(offload_media_in_order(), "kOffloadMedia lists OffloadMedium's values in order");

// The medium's row.
inline const OffloadMediumInfo& medium_info(OffloadMedium medium) {
  return kOffloadMedia[static_cast<std::size_t>(medium)];
}
inline std::string_view to_string(OffloadMedium medium) {
  return medium_info(medium).name;
}
// The medium's name in vLLM's KV events: "CPU", "DISK".
inline std::string_view event_medium(OffloadMedium medium) {
  return medium_info(medium).event_name;
}
std::optional<OffloadMedium> parse_offload_medium(std::string_view name);
std::vector<std::string> offload_medium_names();  // in lookup order
// The first host-memory medium (SGLang's HiCache host pool).
OffloadMedium host_memory_medium();
double default_offload_gbps(OffloadMedium medium, std::string_view gpu);
double default_offload_latency_us(OffloadMedium medium);

}  // namespace kvreplay
