// The table of offload media (engine/offload/offload_media.h): names both ways,
// each medium's kvtrace tier named as the medium is, and the default links
// the table gives (SPEC 3.7: PCIe Gen5 x16 64 GB/s on H100, Gen4 32 GB/s on
// A100, an NVMe drive 7 GB/s).
#include "engine/offload/offload_media.h"

#include <catch2/catch.hpp>

#include "formats/kvtrace_reader.h"

namespace {

using namespace kvreplay;

}  // namespace

TEST_CASE("offload media: each row's name parses to its medium, its kvtrace tier has its name") {
  std::vector<std::string> names;
  for (const OffloadMediumInfo& row : kOffloadMedia) {
    INFO(row.name);
    CHECK(parse_offload_medium(row.name) == row.medium);
    CHECK(to_string(row.medium) == row.name);
    CHECK(event_medium(row.medium) == row.event_name);
    CHECK(trace_tier_name(row.trace_tier) == row.name);
    CHECK(row.default_gbps("") > 0);
    CHECK(row.default_latency_us >= 0);
    names.emplace_back(row.name);
  }
  CHECK(offload_medium_names() == names);
  CHECK_FALSE(parse_offload_medium("link").has_value());
  CHECK(medium_info(host_memory_medium()).host_memory);
}

TEST_CASE("offload media: the default links") {
  CHECK(default_offload_gbps(OffloadMedium::kCpu, "h100-80gb") == 64.0);
  CHECK(default_offload_gbps(OffloadMedium::kCpu, "a100-80gb") == 32.0);
  CHECK(default_offload_gbps(OffloadMedium::kCpu, "") == 64.0);  // the cost model's default GPU
  CHECK(default_offload_gbps(OffloadMedium::kDisk, "h100-80gb") == 7.0);
  CHECK(default_offload_latency_us(OffloadMedium::kCpu) == 10.0);
  CHECK(default_offload_latency_us(OffloadMedium::kDisk) == 80.0);
  CHECK(event_medium(OffloadMedium::kCpu) == "CPU");
  CHECK(event_medium(OffloadMedium::kDisk) == "DISK");
}
