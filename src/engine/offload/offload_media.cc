#include "engine/offload/offload_media.h"

#include "engine/sim_types.h"

namespace kvreplay {

double pcie_link_gbps(std::string_view gpu) {
  if (gpu.empty()) gpu = kDefaultCostGpu;
  // PCIe Gen5 x16 on the Hopper and Blackwell boards and MI300X; Gen4 x16 on the others.
  for (std::string_view gen5 : {"h100", "h200", "b200", "mi300x"}) {
    if (gpu.starts_with(gen5)) return 64.0;
  }
  return 32.0;
}

double nvme_link_gbps(std::string_view /*gpu*/) {
  return 7.0;
}

std::optional<OffloadMedium> parse_offload_medium(std::string_view name) {
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    if (row.name == name) return row.medium;
  }
  return std::nullopt;
}

std::vector<std::string> offload_medium_names() {
  std::vector<std::string> names;
  for (const OffloadMediumInfo& row : kOffloadMedia) names.emplace_back(row.name);
  return names;
}

OffloadMedium host_memory_medium() {
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    if (row.host_memory) return row.medium;
  }
  return kOffloadMedia[0].medium;
}

double default_offload_gbps(OffloadMedium medium, std::string_view gpu) {
  return medium_info(medium).default_gbps(gpu);
}

double default_offload_latency_us(OffloadMedium medium) {
  return medium_info(medium).default_latency_us;
}

}  // namespace kvreplay
