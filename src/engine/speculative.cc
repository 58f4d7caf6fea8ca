#include "engine/speculative.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "core/mix64.h"

namespace kvreplay {

namespace {

struct MethodName {
  SpecMethod method;
  std::string_view name;
};
constexpr MethodName kMethods[] = {{SpecMethod::kEagle, "eagle"},
                                   {SpecMethod::kEagle3, "eagle3"},
                                   {SpecMethod::kMtp, "mtp"},
                                   {SpecMethod::kNgram, "ngram"}};
constexpr std::uint32_t kMaxDrafts = 16;

// P(a = i) when each draft is accepted with probability r after the one
// before it: r^i (1 - r), and r^k for all k.
std::vector<double> chain(double r, std::uint32_t k) {
  std::vector<double> p(k + 1);
  double reach = 1;
  for (std::uint32_t i = 0; i < k; ++i) {
    p[i] = reach * (1 - r);
    reach *= r;
  }
  p[k] = reach;
  return p;
}

double mean_of(const std::vector<double>& p) {
  double mean = 1;
  for (std::size_t i = 0; i < p.size(); ++i) mean += static_cast<double>(i) * p[i];
  return mean;
}

}  // namespace

std::string_view to_string(SpecMethod method) {
  for (const MethodName& m : kMethods) {
    if (m.method == method) return m.name;
  }
  return "none";
}

double SpecDecode::mean_length() const {
  return on() ? mean_of(accepted) : 1.0;
}

std::uint32_t SpecDecode::draw(std::uint64_t request, std::uint64_t position) const {
  if (!on()) return 0;
  const std::uint64_t bits =
      mix64_finalize(splitmix64(seed ^ splitmix64(request)) ^ splitmix64(position + kGoldenGamma));
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  for (std::uint32_t i = 0; i < k; ++i) {
    if (u < cumulative[i]) return i;
  }
  return k;
}

Result<SpecDecode, std::string> parse_speculative(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  SpecDecode spec;
  for (const MethodName& m : kMethods) {
    if (m.name == name) spec.method = m.method;
  }
  if (spec.method == SpecMethod::kNone) {
    return Unexpected{fmt::format(
        "--speculative {}: unknown method '{}' (expected eagle, eagle3, mtp or ngram, as "
        "METHOD:K)",
        text, name)};
  }
  if (colon == std::string_view::npos) {
    return Unexpected{fmt::format(
        "--speculative {}: give the drafts a step as METHOD:K (e.g. {}:3)", text, name)};
  }
  const std::string number(text.substr(colon + 1));
  std::uint32_t k = 0;
  std::size_t used = 0;
  try {
    const unsigned long value = std::stoul(number, &used);
    k = value > kMaxDrafts ? kMaxDrafts + 1 : static_cast<std::uint32_t>(value);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || number.empty() || k == 0 || k > kMaxDrafts) {
    return Unexpected{
        fmt::format("--speculative {}: K must be a whole number from 1 to {}", text, kMaxDrafts)};
  }
  spec.k = k;
  return spec;
}

std::optional<std::string> set_acceptance(SpecDecode& spec, std::optional<double> rate,
                                          std::optional<double> mean_length,
                                          const std::vector<double>& dist) {
  const int given = (rate ? 1 : 0) + (mean_length ? 1 : 0) + (dist.empty() ? 0 : 1);
  if (!spec.on()) {
    if (given > 0) {
      return std::string(
          "--spec-acceptance, --spec-acceptance-length and --spec-acceptance-dist need "
          "--speculative METHOD:K");
    }
    return std::nullopt;
  }
  if (given > 1) {
    return std::string(
        "give one of --spec-acceptance, --spec-acceptance-length and --spec-acceptance-dist");
  }
  if (given == 0) {
    if (spec.method != SpecMethod::kMtp) {
      return fmt::format(
          "--speculative {}:{} needs its acceptance: --spec-acceptance R (each draft), "
          "--spec-acceptance-length L (vLLM's mean acceptance length) or "
          "--spec-acceptance-dist P0,...,P{}",
          to_string(spec.method), spec.k, spec.k);
    }
    rate = kMtpAcceptance;
  }
  if (rate) {
    if (!(*rate >= 0 && *rate <= 1)) {
      return fmt::format("--spec-acceptance {}: a probability from 0 to 1", *rate);
    }
    spec.accepted = chain(*rate, spec.k);
  } else if (mean_length) {
    const double top = spec.k + 1.0;
    if (!(*mean_length >= 1 && *mean_length <= top)) {
      return fmt::format(
          "--spec-acceptance-length {}: the mean acceptance length lies from 1 (no draft "
          "accepted) to K + 1 = {}",
          *mean_length, top);
    }
    // The chain's mean grows with r: bisect for it.
    double lo = 0, hi = 1;
    for (int i = 0; i < 100; ++i) {
      const double mid = (lo + hi) / 2;
      (mean_of(chain(mid, spec.k)) < *mean_length ? lo : hi) = mid;
    }
    spec.accepted = chain((lo + hi) / 2, spec.k);
  } else {
    if (dist.size() != spec.k + 1) {
      return fmt::format(
          "--spec-acceptance-dist: {} probabilities given, K + 1 = {} expected (P0 for no "
          "draft accepted ... P{} for all)",
          dist.size(), spec.k + 1, spec.k);
    }
    double sum = 0;
    for (double p : dist) {
      if (!(p >= 0)) return std::string("--spec-acceptance-dist: probabilities are at least 0");
      sum += p;
    }
    if (std::abs(sum - 1) > 1e-6) {
      return fmt::format("--spec-acceptance-dist: the probabilities sum to {}, not 1", sum);
    }
    spec.accepted = dist;
  }
  spec.cumulative.assign(spec.k + 1, 0);
  std::partial_sum(spec.accepted.begin(), spec.accepted.end(), spec.cumulative.begin());
  return std::nullopt;
}

}  // namespace kvreplay
