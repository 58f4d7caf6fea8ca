#include "engine/calibrate/calibrate_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/parallel.h"
#include "model/cost_profile.h"

namespace kvreplay {

namespace {

// The order constants are fitted in: the first ones matter at most points.
constexpr const char* kFitOrder[] = {
    "bandwidth_efficiency", "decode_efficiency",    "step_overhead_ms",    "prefill_efficiency",
    "layer_overhead_us",    "prefill_pass_ms",      "request_overhead_ms", "expert_efficiency",
    "fp8_efficiency",       "allreduce_latency_us", "link_efficiency"};

std::size_t info_index(const char* name) {
  const auto& infos = roofline_constant_infos();
  for (std::size_t i = 0; i < infos.size(); ++i) {
    if (std::string_view(infos[i].name) == name) return i;
  }
  return infos.size();
}

// The figures of each distinct schedule once, `jobs` at a time.
std::vector<double> errors(const std::vector<FitPoint>& points, const RooflineConstants& c,
                           unsigned jobs) {
  std::vector<const Schedule*> schedules;
  for (const FitPoint& p : points) schedules.push_back(p.schedule);
  std::sort(schedules.begin(), schedules.end());
  schedules.erase(std::unique(schedules.begin(), schedules.end()), schedules.end());
  // Percentiles only for the schedules a percentile's row prices.
  std::vector<char> percentiles(schedules.size(), 0);
  for (const FitPoint& p : points) {
    if (!is_percentile(p.row->metric)) continue;
    const auto at = std::lower_bound(schedules.begin(), schedules.end(), p.schedule);
    percentiles[static_cast<std::size_t>(at - schedules.begin())] = 1;
  }
  std::vector<Figures> figures(schedules.size());
  parallel_for(schedules.size(), jobs,
               [&](std::size_t i) { figures[i] = schedules[i]->figures(c, percentiles[i] != 0); });
  std::vector<double> out;
  out.reserve(points.size());
  for (const FitPoint& p : points) {
    const auto at = std::lower_bound(schedules.begin(), schedules.end(), p.schedule);
    const Figures& f = figures[static_cast<std::size_t>(at - schedules.begin())];
    out.push_back(relative_error(f.of(p.row->metric), p.row->value));
  }
  return out;
}

double objective(const std::vector<FitPoint>& points, const RooflineConstants& c, unsigned jobs) {
  const std::vector<double> e = errors(points, c, jobs);
  const double mean = std::accumulate(e.begin(), e.end(), 0.0) / static_cast<double>(e.size());
  return median(e) + 0.01 * mean;
}

// A constant's value from its coordinate, within its range (a fixed cost of 0
// is reached as 1e-6 of its unit).
double value_of(const RooflineConstantInfo& info, double x) {
  return std::clamp(std::exp(x), std::max(info.lo, 1e-6), info.hi);
}
double coordinate_of(const RooflineConstantInfo& info, double value) {
  return std::log(std::max({value, info.lo, 1e-6}));
}

// Nelder-Mead, minimizing f over R^d from x0.
template <class F>
std::vector<double> nelder_mead(F f, std::vector<double> x0, double step, int iterations) {
  const std::size_t d = x0.size();
  std::vector<std::vector<double>> simplex(d + 1, x0);
  for (std::size_t i = 0; i < d; ++i) simplex[i + 1][i] += step;
  std::vector<double> value(d + 1);
  for (std::size_t i = 0; i <= d; ++i) value[i] = f(simplex[i]);
  auto along = [&](const std::vector<double>& centre, const std::vector<double>& from, double t) {
    std::vector<double> out(d);
    for (std::size_t k = 0; k < d; ++k) out[k] = centre[k] + t * (from[k] - centre[k]);
    return out;
  };
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::size_t> order(d + 1);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return value[a] < value[b]; });
    const std::size_t best = order.front(), worst = order.back(), second = order[d - 1];
    if (std::abs(value[worst] - value[best]) < 1e-10) break;
    std::vector<double> centre(d, 0.0);
    for (std::size_t i : order) {
      if (i == worst) continue;
      for (std::size_t k = 0; k < d; ++k) centre[k] += simplex[i][k] / static_cast<double>(d);
    }
    const auto reflected = along(centre, simplex[worst], -1.0);
    const double fr = f(reflected);
    if (fr < value[best]) {
      const auto expanded = along(centre, simplex[worst], -2.0);
      const double fe = f(expanded);
      simplex[worst] = fe < fr ? expanded : reflected;
      value[worst] = std::min(fe, fr);
    } else if (fr < value[second]) {
      simplex[worst] = reflected;
      value[worst] = fr;
    } else {
      const auto contracted = along(centre, simplex[worst], 0.5);
      const double fc = f(contracted);
      if (fc < value[worst]) {
        simplex[worst] = contracted;
        value[worst] = fc;
      } else {
        for (std::size_t i = 0; i <= d; ++i) {  // shrink towards the best
          if (i == best) continue;
          simplex[i] = along(simplex[best], simplex[i], 0.5);
          value[i] = f(simplex[i]);
        }
      }
    }
  }
  const auto best = std::min_element(value.begin(), value.end()) - value.begin();
  return simplex[static_cast<std::size_t>(best)];
}

}  // namespace

double relative_error(double predicted, double measured) {
  return std::abs(predicted - measured) / measured;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

FitResult fit_constants(const std::vector<FitPoint>& points, const RooflineConstants& start,
                        std::uint32_t held, unsigned jobs) {
  const auto& infos = roofline_constant_infos();
  FitResult out;
  out.constants = start;
  out.median_before = median(errors(points, start, jobs));
  // Which constants to fit: not held, and some row moves when it does.
  std::vector<double> base;
  for (const FitPoint& p : points) base.push_back(p.schedule->figures(start).of(p.row->metric));
  for (const char* name : kFitOrder) {
    const std::size_t i = info_index(name);
    if (held == ~0u) {
      out.kept.emplace_back(i, "--no-fit");
      continue;
    }
    if (held & (1u << i)) {
      out.kept.emplace_back(i, fmt::format("held by {}", infos[i].option));
      continue;
    }
    RooflineConstants moved = start;
    double& v = moved.*infos[i].field;
    v = v > 0 ? std::clamp(v * 0.5, infos[i].lo, infos[i].hi) : 1.0;
    bool matters = false;
    for (std::size_t k = 0; k < points.size() && !matters; ++k) {
      const double x = points[k].schedule->figures(moved).of(points[k].row->metric);
      matters = relative_error(x, base[k]) > 1e-6;
    }
    if (!matters) {
      out.kept.emplace_back(i, "no row depends on it");
    } else if (out.fitted.size() >= points.size()) {
      out.kept.emplace_back(i, fmt::format("fewer rows ({}) than constants", points.size()));
    } else {
      out.fitted.push_back(i);
    }
  }
  if (out.fitted.empty()) {
    out.median_after = out.median_before;
    return out;
  }
  auto constants_at = [&](const std::vector<double>& x) {
    RooflineConstants c = start;
    for (std::size_t k = 0; k < out.fitted.size(); ++k) {
      const RooflineConstantInfo& info = infos[out.fitted[k]];
      c.*info.field = value_of(info, x[k]);
    }
    return c;
  };
  std::vector<double> x;
  for (std::size_t i : out.fitted) x.push_back(coordinate_of(infos[i], start.*infos[i].field));
  auto f = [&](const std::vector<double>& at) { return objective(points, constants_at(at), jobs); };
  double best = f(x);
  for (int round = 0; round < 6; ++round) {  // restarts from the best, smaller steps
    x = nelder_mead(f, x, round == 0 ? 0.5 : 0.2, 200 * static_cast<int>(x.size()));
    const double now = f(x);
    if (now > best - 1e-7) {
      best = std::min(best, now);
      break;
    }
    best = now;
  }
  out.constants = constants_at(x);
  if (objective(points, out.constants, jobs) > objective(points, start, jobs)) {
    out.constants = start;
  }
  out.median_after = median(errors(points, out.constants, jobs));
  for (std::size_t i : out.fitted) {
    const RooflineConstantInfo& info = infos[i];
    const double v = out.constants.*info.field;
    if (v <= std::max(info.lo, 1e-6) * (1 + 1e-3) || v >= info.hi * (1 - 1e-3)) {
      out.at_bound.push_back(i);
    }
  }
  return out;
}

}  // namespace kvreplay
