// The engine tests' driver: submits each request at its arrival, runs the
// simulator to the end and requires that no invariant failed (the options'
// --check decides how often they are checked).
#pragma once

#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/simulator.h"

namespace kvreplay {

inline void run_to_end(Simulator& sim, std::vector<Request> requests) {
  for (Request& r : requests) {
    if (!sim.run_until(r.arrival)) {
      FAIL_CHECK((sim.violation() ? sim.violation()->invariant + ": " + sim.violation()->message
                                  : std::string("run_until failed")));
      REQUIRE(false);
    }
    sim.submit(std::move(r));
  }
  REQUIRE(sim.run_until(std::numeric_limits<double>::infinity()));
  REQUIRE(sim.finish());
  INFO((sim.violation() ? sim.violation()->message : std::string()));
  REQUIRE_FALSE(sim.violation());
}

}  // namespace kvreplay
