// The table of engines (engine/engine_registry.h): every entry is well
// formed, and the option checks read the capabilities the entries declare
// (sim_options_error), whatever engine asks.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "engine/engine_registry.h"
#include "engine/micro_config.h"
#include "engine/simulator.h"

namespace kvreplay {
namespace {

TEST_CASE("every engine's entry is well formed and found by its name") {
  std::set<std::string> names, options;
  std::size_t contiguous = 0;
  for (const EngineEntry& entry : engine_table()) {
    CHECK(names.insert(std::string(entry.name)).second);
    REQUIRE(parse_engine(entry.name));
    CHECK(*parse_engine(entry.name) == entry.kind);
    CHECK(to_string(entry.kind) == entry.name);
    CHECK(&engine_entry(entry.kind) == &entry);
    CHECK(entry.make != nullptr);
    if (entry.can.contiguous_allocators) ++contiguous;
    for (const EngineOption& option : entry.options) {
      CHECK(options.insert(std::string(option.name)).second);  // one engine's each
      const int kinds = (option.whole != nullptr) + (option.real != nullptr) +
                        (option.flag != nullptr) +
                        (option.choices != nullptr && option.set_choice != nullptr);
      CHECK(kinds == 1);
      CHECK(option.lo <= option.hi);
    }
    // A report section comes with its fields' merge rules, and only then.
    CHECK(entry.report_section.empty() == entry.merge.empty());
  }
  CHECK(contiguous == 1);  // the engine the contiguous allocators fall back to
  CHECK(engine_names().size() == engine_table().size());
  CHECK_FALSE(parse_engine("no-such-engine"));
}

TEST_CASE("engines_with lists the engines that declare a capability, in table order") {
  std::string expected;
  std::size_t with = 0;
  for (const EngineEntry& entry : engine_table()) with += entry.can.receives_kv ? 1 : 0;
  const std::string listed = engines_with(&EngineCapabilities::receives_kv, " and ");
  for (const EngineEntry& entry : engine_table()) {
    if (entry.can.receives_kv) CHECK(listed.find(entry.name) != std::string::npos);
  }
  CHECK((with < 2 || listed.find(" and ") != std::string::npos));
  CHECK(declared({}, "anything"));
}

// The option checks, engine by engine, against what each entry declares.
TEST_CASE("sim_options_error refuses what an engine's entry does not declare") {
  const RunConfig config = micro_config(64);
  for (const EngineEntry& entry : engine_table()) {
    CAPTURE(entry.name);
    SimOptions options;
    options.engine = entry.kind;
    CHECK_FALSE(sim_options_error(config, options));

    // A sliding-window group: a hybrid model.
    SimOptions hybrid = options;
    hybrid.kv_groups = {KvCacheGroupSpec{KvCacheGroupSpec::kSliding, 8, 1}};
    const auto hybrid_error = sim_options_error(config, hybrid);
    if (entry.can.hybrid_models) {
      CHECK((!hybrid_error || hybrid_error->option != "--engine"));
    } else {
      REQUIRE(hybrid_error);
      CHECK(hybrid_error->option == "--engine");
      CHECK(hybrid_error->problem.find(engines_with(&EngineCapabilities::hybrid_models, " or ")) !=
            std::string::npos);
    }

    // Every medium and policy of the offload seam, one at a time.
    for (const OffloadMedium medium : {OffloadMedium{0}, OffloadMedium{1}}) {
      SimOptions offload = options;
      offload.offload.tiers = {OffloadTierOptions{medium, 1 << 20, 10.0, 1.0}};
      const auto error = sim_options_error(config, offload);
      CAPTURE(to_string(medium));
      CHECK(bool(error) ==
            (!entry.can.offload || !declared(entry.can.offload_media, to_string(medium))));
      if (error) CHECK(error->option == "--offload");
    }
    for (const OffloadPolicy policy : {OffloadPolicy{0}, OffloadPolicy{1}}) {
      SimOptions offload = options;
      offload.offload.tiers = {OffloadTierOptions{OffloadMedium{0}, 1 << 20, 10.0, 1.0}};
      offload.offload.policy = policy;
      const auto error = sim_options_error(config, offload);
      CAPTURE(to_string(policy));
      if (entry.can.offload && declared(entry.can.offload_media, to_string(OffloadMedium{0}))) {
        CHECK(bool(error) == !declared(entry.can.offload_policies, to_string(policy)));
        if (error) CHECK(error->option == "--offload-policy");
      }
    }
  }
}

}  // namespace
}  // namespace kvreplay
