// Speculative decoding's options and draws (engine/speculative.h): the three
// ways to give the acceptance, and draws that follow the distribution and
// repeat exactly.
#include "engine/speculative.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>

namespace kvreplay {
namespace {

SpecDecode spec_of(const char* text) {
  auto spec = parse_speculative(text);
  REQUIRE(spec.ok());
  return spec.value();
}

TEST_CASE("speculative: METHOD:K parses, anything else is refused by name") {
  const SpecDecode eagle = spec_of("eagle3:3");
  CHECK(eagle.method == SpecMethod::kEagle3);
  CHECK(eagle.k == 3);
  CHECK(eagle.draft_layers() == 1);
  CHECK(spec_of("ngram:5").draft_layers() == 0);
  for (const char* bad : {"medusa:3", "eagle", "eagle:0", "eagle:17", "eagle:x", "eagle:3x"}) {
    INFO(bad);
    auto spec = parse_speculative(bad);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.error().find("--speculative") != std::string::npos);
  }
}

TEST_CASE("speculative: a rate, a mean length or a distribution gives the acceptance") {
  SpecDecode rate = spec_of("eagle:3");
  REQUIRE_FALSE(set_acceptance(rate, 0.5, std::nullopt, {}));
  // P(a = i) = 0.5^i * 0.5, and 0.5^3 for all three.
  CHECK(rate.accepted[0] == Approx(0.5));
  CHECK(rate.accepted[1] == Approx(0.25));
  CHECK(rate.accepted[3] == Approx(0.125));
  CHECK(rate.mean_length() == Approx(1 + 0.5 + 0.25 + 0.125));

  SpecDecode length = spec_of("eagle:3");
  REQUIRE_FALSE(set_acceptance(length, std::nullopt, 2.5, {}));
  CHECK(length.mean_length() == Approx(2.5).epsilon(1e-9));

  SpecDecode dist = spec_of("eagle:2");
  REQUIRE_FALSE(set_acceptance(dist, std::nullopt, std::nullopt, {0.2, 0.3, 0.5}));
  CHECK(dist.mean_length() == Approx(1 + 0.3 + 2 * 0.5));

  // mtp alone takes DeepSeek-V3's reported rate; the others need one.
  SpecDecode mtp = spec_of("mtp:1");
  REQUIRE_FALSE(set_acceptance(mtp, std::nullopt, std::nullopt, {}));
  CHECK(mtp.mean_length() == Approx(1 + kMtpAcceptance));
  SpecDecode none = spec_of("eagle:3");
  CHECK(set_acceptance(none, std::nullopt, std::nullopt, {}).has_value());
  CHECK(set_acceptance(none, 0.5, 2.0, {}).has_value());                            // two forms
  CHECK(set_acceptance(none, std::nullopt, 4.5, {}).has_value());                   // above K + 1
  CHECK(set_acceptance(none, std::nullopt, std::nullopt, {0.5, 0.5}).has_value());  // K + 1
  CHECK(set_acceptance(none, std::nullopt, std::nullopt, {0.5, 0.5, 0.5, 0.5}).has_value());
  SpecDecode off;
  CHECK(set_acceptance(off, 0.5, std::nullopt, {}).has_value());  // no --speculative
}

TEST_CASE("speculative: the draws follow the distribution and repeat exactly") {
  SpecDecode spec = spec_of("eagle:3");
  REQUIRE_FALSE(set_acceptance(spec, std::nullopt, std::nullopt, {0.1, 0.2, 0.3, 0.4}));
  std::array<double, 4> seen{};
  constexpr std::uint64_t kDraws = 200000;
  std::uint32_t most = 0;
  for (std::uint64_t i = 0; i < kDraws; ++i) {
    const std::uint32_t a = std::min<std::uint32_t>(spec.draw(i % 1000, i / 1000), 3);
    most = std::max(most, spec.draw(i % 1000, i / 1000));
    seen[a] += 1.0 / kDraws;
  }
  CHECK(most == 3);  // never past K
  for (std::size_t i = 0; i < 4; ++i) CHECK(seen[i] == Approx(spec.accepted[i]).margin(0.005));
  CHECK(spec.draw(42, 7) == spec.draw(42, 7));
  // Another seed, other draws.
  SpecDecode other = spec;
  other.seed = 1;
  int differ = 0;
  for (std::uint64_t i = 0; i < 100; ++i) differ += spec.draw(i, 0) != other.draw(i, 0) ? 1 : 0;
  CHECK(differ > 30);
}

}  // namespace
}  // namespace kvreplay
