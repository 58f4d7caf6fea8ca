#include "report/compare.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cmath>

#include "report/paint.h"

namespace kvreplay {

namespace {

constexpr Threshold absolute(double value) {
  return Threshold{Threshold::Kind::kAbsolute, value};
}
constexpr Threshold relative(double fraction) {
  return Threshold{Threshold::Kind::kRelative, fraction};
}
constexpr std::optional<Threshold> kInformational = std::nullopt;

// The defaults (README "Comparing reports"). Reports are deterministic, so a
// threshold is not a noise margin: it is how much worse a change may make a
// metric before a gate fails. Ratios get absolute slack (0.001 = 0.1 point),
// counts relative slack (1% of the base); oom.events may not grow at all.
constexpr std::array<CompareMetric, 48> kMetrics = {{
    {"blocks.peak_used", false, relative(0.01)},
    // What requests hold: peak_used reaches the pool once a prefix cache
    // fills it, so this is the figure that moves (simulate).
    {"blocks.peak_in_use", false, relative(0.01)},
    {"blocks.final_used", false, kInformational},
    {"blocks.allocations", false, kInformational},
    {"fragmentation.waste_ratio_mean", false, absolute(0.001)},
    {"fragmentation.waste_ratio_at_peak", false, absolute(0.001)},
    {"fragmentation.waste_ratio_max", false, absolute(0.001)},
    {"fragmentation.waste_slots_at_peak", false, kInformational},
    {"tokens.peak_physical", false, kInformational},
    // Placement: what an allocator change moves (a paged kernel's locality, the
    // size of KV transfers between tiers).
    {"layout.runs_per_seq_mean", false, relative(0.05)},
    {"layout.continued_share_mean", true, absolute(0.01)},
    {"layout.runs_per_seq_at_peak", false, kInformational},
    {"layout.continued_share_at_peak", true, kInformational},
    {"sharing.saved_blocks_at_peak", true, kInformational},
    {"cow.copies", false, relative(0.01)},
    {"cow.bytes", false, kInformational},
    {"oom.events", false, absolute(0)},
    {"requests.finished", true, kInformational},
    {"requests.skipped", false, kInformational},
    {"prefix_cache.hit_rate", true, absolute(0.001)},
    {"prefix_cache.hit_rate_with_tiers", true, absolute(0.001), true},  // with --offload
    {"prefix_cache.hit_blocks", true, kInformational},
    {"prefix_cache.hits", true, kInformational},
    {"prefix_cache.evictions", false, kInformational},
    {"scheduler.preemptions", false, relative(0.01)},
    {"scheduler.steps", false, kInformational},
    {"scheduler.virtual_seconds", false, kInformational},
    {"scheduler.output_tokens_per_second", true, kInformational},
    {"scheduler.requests_per_second", true, kInformational},
    // Latency in virtual time (a cost model or scheduler change moves it).
    {"latency.ttft_ms.p99", false, relative(0.05)},
    {"latency.tpot_ms.p99", false, relative(0.05)},
    {"latency.e2e_ms.p99", false, relative(0.05)},
    {"latency.ttft_ms.p90", false, relative(0.05)},
    {"latency.tpot_ms.p90", false, relative(0.05)},
    {"latency.e2e_ms.p90", false, relative(0.05)},
    {"latency.ttft_ms.p95", false, relative(0.05), true},  // reports since p95
    {"latency.tpot_ms.p95", false, relative(0.05), true},
    {"latency.e2e_ms.p95", false, relative(0.05), true},
    {"latency.ttft_ms.p50", false, kInformational},
    {"latency.tpot_ms.p50", false, kInformational},
    {"latency.e2e_ms.p50", false, kInformational},
    {"latency.queue_ms.p99", false, kInformational},
    {"slo.attainment", true, absolute(0.01)},  // when the runs had SLOs
    {"slo.goodput_rps", true, kInformational},
    // Cost, when the runs were given a price (--gpu-hour-usd, --gpu-prices).
    {"cost_usd.usd_per_million_output_tokens", false, relative(0.01), true},
    {"cost_usd.usd_per_hour", false, kInformational, true},
    {"cost_usd.usd_run", false, kInformational, true},
    {"cost_usd.gpus", false, kInformational, true},
}};

const CompareMetric* find_metric(std::string_view path) {
  for (const CompareMetric& metric : kMetrics) {
    if (metric.path == path) return &metric;
  }
  return nullptr;
}

std::string_view leaf(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// A metric path from a user's name: the full path, or an unambiguous last part.
Result<std::string, std::string> resolve_name(std::string_view name) {
  if (find_metric(name) != nullptr) return std::string(name);
  const CompareMetric* found = nullptr;
  for (const CompareMetric& metric : kMetrics) {
    if (leaf(metric.path) != name) continue;
    if (found != nullptr) {
      return Unexpected{fmt::format("'{}' is ambiguous ({} or {}): give the full name", name,
                                    found->path, metric.path)};
    }
    found = &metric;
  }
  if (found != nullptr) return std::string(found->path);
  if (name == "status" || name == "violations" || name == "invariants.violations") {
    return Unexpected{fmt::format("'{}' is always checked and has no threshold", name)};
  }
  std::string known;
  for (const CompareMetric& metric : kMetrics) {
    known += known.empty() ? "" : ", ";
    known += metric.path;
  }
  return Unexpected{fmt::format("unknown metric '{}' (known: {})", name, known)};
}

const nlohmann::json* at_path(const nlohmann::json& report, std::string_view path) {
  const nlohmann::json* node = &report;
  while (!path.empty()) {
    auto dot = path.find('.');
    std::string key(path.substr(0, dot));
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node;
}

// A count that may be written as a number or as a list of items.
std::optional<std::uint64_t> count_at(const nlohmann::json& report, std::string_view path) {
  const nlohmann::json* node = at_path(report, path);
  if (node == nullptr) return std::nullopt;
  if (node->is_array()) return node->size();
  if (node->is_number_unsigned()) return node->get<std::uint64_t>();
  if (node->is_number_integer())
    return static_cast<std::uint64_t>(std::max<std::int64_t>(0, *node));
  return std::nullopt;
}

struct Number {
  double value = 0.0;
  bool integer = false;  // then `exact` holds it
  std::int64_t exact = 0;
  std::string text;
};

std::optional<Number> number_at(const nlohmann::json& report, std::string_view path) {
  const nlohmann::json* node = at_path(report, path);
  if (node == nullptr || !node->is_number()) return std::nullopt;
  Number out;
  out.value = node->get<double>();
  if (node->is_number_unsigned()) {
    out.integer = node->get<std::uint64_t>() <= std::uint64_t{INT64_MAX};
    out.exact = out.integer ? node->get<std::int64_t>() : 0;
  } else if (node->is_number_integer()) {
    out.integer = true;
    out.exact = node->get<std::int64_t>();
  }
  out.text = node->is_number_integer() ? node->dump() : fmt::format("{:.6f}", out.value);
  return out;
}

// now - base, exactly for integers (counts are far below 2^62).
double difference(const Number& base, const Number& now) {
  if (base.integer && now.integer) return static_cast<double>(now.exact - base.exact);
  return now.value - base.value;
}

std::string change_text(const Number& base, const Number& now) {
  double diff = difference(base, now);
  if (diff == 0.0) return "";
  std::string text = base.integer && now.integer ? fmt::format("{:+}", now.exact - base.exact)
                                                 : fmt::format("{:+.6f}", diff);
  if (base.value != 0.0) text += fmt::format(" ({:+.2f}%)", diff / std::fabs(base.value) * 100.0);
  return text;
}

// Flattens a config object into "a.b" -> compact JSON text.
void flatten(const nlohmann::json& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.is_object() && !node.empty()) {
    for (const auto& [key, value] : node.items()) {
      flatten(value, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  out[prefix] = node.dump();
}

std::vector<std::string> config_changes(const nlohmann::json& base, const nlohmann::json& now) {
  std::map<std::string, std::string> before, after;
  if (const nlohmann::json* config = at_path(base, "config")) flatten(*config, "", before);
  if (const nlohmann::json* config = at_path(now, "config")) flatten(*config, "", after);
  std::map<std::string, std::string> keys;
  for (const auto& [key, value] : before) keys[key];
  for (const auto& [key, value] : after) keys[key];
  std::vector<std::string> changes;
  for (const auto& [key, unused] : keys) {
    auto b = before.find(key);
    auto a = after.find(key);
    std::string from = b == before.end() ? "(absent)" : b->second;
    std::string to = a == after.end() ? "(absent)" : a->second;
    if (from != to) changes.push_back(fmt::format("{}: {} -> {}", key, from, to));
  }
  return changes;
}

// The identity checks: both are reports of one version, of the same trace.
Result<void, std::string> check_comparable(const nlohmann::json& base, const nlohmann::json& now,
                                           std::string_view base_name, std::string_view new_name) {
  for (auto [report, name] : {std::pair{&base, base_name}, std::pair{&now, new_name}}) {
    if (!report->is_object()) return Unexpected{fmt::format("{}: not a JSON object", name)};
    if (!report->contains("kvreplay_report")) {
      if (report->contains("kvreplay_plan")) {
        return Unexpected{fmt::format(
            "{}: a plan (kvreplay_plan), not a report: compare replay or simulate reports", name)};
      }
      return Unexpected{fmt::format("{}: not a kvreplay report (no kvreplay_report key)", name)};
    }
  }
  for (auto [report, name] : {std::pair{&base, base_name}, std::pair{&now, new_name}}) {
    const nlohmann::json& version = (*report)["kvreplay_report"];
    if (!version.is_number_integer()) {
      return Unexpected{fmt::format("{}: kvreplay_report: expected an integer, got {}", name,
                                    version.type_name())};
    }
  }
  if (base["kvreplay_report"] != now["kvreplay_report"]) {
    return Unexpected{fmt::format(
        "{} and {} are reports of different versions (kvreplay_report {} and {}): make both "
        "with the same kvreplay",
        base_name, new_name, base["kvreplay_report"].dump(), now["kvreplay_report"].dump())};
  }
  for (auto [report, name] : {std::pair{&base, base_name}, std::pair{&now, new_name}}) {
    const nlohmann::json* hash = at_path(*report, "trace.sha256");
    if (hash == nullptr || !hash->is_string() || hash->get<std::string>().size() != 64) {
      return Unexpected{fmt::format(
          "{}: no trace.sha256 (a report of an older kvreplay?): reports are matched by their "
          "trace's content hash; replay the trace again to get one",
          name)};
    }
  }
  const std::string base_hash = base["trace"]["sha256"].get<std::string>();
  const std::string new_hash = now["trace"]["sha256"].get<std::string>();
  if (base_hash != new_hash) {
    auto path_of = [](const nlohmann::json& report) {
      const nlohmann::json* path = at_path(report, "trace.path");
      return path != nullptr && path->is_string() ? path->get<std::string>() : std::string("?");
    };
    return Unexpected{fmt::format(
        "{} and {} are reports of different traces: trace.sha256 {}... ({}) and {}... ({})",
        base_name, new_name, base_hash.substr(0, 16), path_of(base), new_hash.substr(0, 16),
        path_of(now))};
  }
  return {};
}

std::string kind_of(const nlohmann::json& report) {
  const bool simulate = report.contains("scheduler") || report.contains("requests") ||
                        report.contains("prefix_cache") ||
                        at_path(report, "config.simulation") != nullptr;
  return simulate ? "simulate" : "replay";
}

// Metrics only simulate reports carry.
bool simulate_only(std::string_view path) {
  return path.starts_with("requests.") || path.starts_with("prefix_cache.") ||
         path.starts_with("scheduler.") || path.starts_with("latency.") ||
         path.starts_with("slo.") || path.starts_with("cost_usd.") || path == "blocks.peak_in_use";
}

// The node at `path`: nullptr when absent; an error when a parent on the way
// is not an object (naming it).
Result<const nlohmann::json*, std::string> walk(const nlohmann::json& report, std::string_view path,
                                                std::string_view name) {
  const nlohmann::json* node = &report;
  std::size_t done = 0;
  while (done < path.size()) {
    auto dot = path.find('.', done);
    if (dot == std::string_view::npos) dot = path.size();
    if (!node->is_object()) {
      return Unexpected{fmt::format("{}: {}: expected an object, got {}", name,
                                    path.substr(0, done - 1), node->type_name())};
    }
    auto it = node->find(std::string(path.substr(done, dot - done)));
    if (it == node->end()) return nullptr;
    node = &*it;
    done = dot + 1;
  }
  return node;
}

// What compare reads must be there with its type: status (a string),
// invariants.violations (a list of objects) and every gated metric of the
// report's kind (a number); a metric it knows, present, is a number too.
// Error: one line naming the file and the key.
Result<void, std::string> check_shape(const nlohmann::json& report, std::string_view kind,
                                      const Thresholds& thresholds, std::string_view name) {
  auto required = [&](std::string_view path, bool (nlohmann::json::*is)() const noexcept,
                      std::string_view type, std::string_view why) -> Result<void, std::string> {
    auto node = walk(report, path, name);
    if (!node) return Unexpected{node.error()};
    if (node.value() == nullptr) {
      return Unexpected{
          fmt::format("{}: {}: missing ({}): not a complete kvreplay report", name, path, why)};
    }
    if (!(node.value()->*is)()) {
      return Unexpected{
          fmt::format("{}: {}: expected {}, got {}", name, path, type, node.value()->type_name())};
    }
    return {};
  };
  if (auto ok = required("status", &nlohmann::json::is_string, "a string",
                         "always checked: leaving \"ok\" is a regression");
      !ok)
    return ok;
  if (auto ok = required("invariants.violations", &nlohmann::json::is_array, "a list",
                         "always checked: a violation in NEW is a regression");
      !ok)
    return ok;
  const nlohmann::json& violations = report["invariants"]["violations"];
  for (std::size_t i = 0; i < violations.size(); ++i) {
    const nlohmann::json& v = violations[i];
    const std::string where = fmt::format("invariants.violations[{}]", i);
    if (!v.is_object()) {
      return Unexpected{
          fmt::format("{}: {}: expected an object, got {}", name, where, v.type_name())};
    }
    for (const char* key : {"invariant", "message"}) {
      if (v.contains(key) && !v[key].is_string()) {
        return Unexpected{fmt::format("{}: {}.{}: expected a string, got {}", name, where, key,
                                      v[key].type_name())};
      }
    }
    if (v.contains("event") && !v["event"].is_number() && !v["event"].is_null()) {
      return Unexpected{fmt::format("{}: {}.event: expected a number, got {}", name, where,
                                    v["event"].type_name())};
    }
  }
  // The contiguous baselines reserve regions, not tables: no layout to gate.
  const nlohmann::json* allocator = at_path(report, "config.simulation.allocator");
  const bool regions = allocator != nullptr && allocator->is_string() && *allocator != "paged";
  for (const CompareMetric& metric : kMetrics) {
    if (kind == "replay" && simulate_only(metric.path)) continue;
    if (regions && metric.path.starts_with("layout.")) continue;
    // slo exists only for runs given SLOs, latency since reports had it: a
    // report without the section has nothing to gate there (the row is left out).
    if ((metric.path.starts_with("slo.") && !report.contains("slo")) ||
        (metric.path.starts_with("latency.") && !report.contains("latency"))) {
      continue;
    }
    if (metric.optional && at_path(report, metric.path) == nullptr) continue;
    if (thresholds.find(metric.path)) {
      if (auto ok = required(metric.path, &nlohmann::json::is_number, "a number", "a gated metric");
          !ok)
        return ok;
      continue;
    }
    auto node = walk(report, metric.path, name);
    if (!node) return Unexpected{node.error()};
    if (node.value() != nullptr && !node.value()->is_number()) {
      return Unexpected{fmt::format("{}: {}: expected a number, got {}", name, metric.path,
                                    node.value()->type_name())};
    }
  }
  // A figure gated by its path must be there, a number, in both reports.
  for (const AdHocGate& gate : thresholds.ad_hoc()) {
    if (gate.threshold.kind == Threshold::Kind::kOff) continue;
    if (auto ok = required(gate.path, &nlohmann::json::is_number, "a number",
                           "given a threshold by --threshold");
        !ok)
      return ok;
  }
  return {};
}

// An always-checked count: any in NEW is a regression.
void add_always_row(Comparison& out, std::string_view path, std::optional<std::uint64_t> base,
                    std::uint64_t now, const std::string& detail) {
  CompareRow row;
  row.metric = std::string(path);
  row.base = base ? std::to_string(*base) : std::string("-");
  row.now = std::to_string(now);
  row.threshold = "always";
  if (now > 0) {
    row.verdict = CompareRow::Verdict::kRegressed;
    if (base && *base != now)
      row.change = fmt::format("{:+}", static_cast<double>(now) - static_cast<double>(*base));
    out.regressions.push_back(fmt::format("{}: {} in NEW{}", path, now, detail));
  } else {
    row.verdict = base && *base > 0 ? CompareRow::Verdict::kBetter : CompareRow::Verdict::kSame;
    if (base && *base > 0) row.change = fmt::format("-{}", *base);
  }
  out.rows.push_back(std::move(row));
}

}  // namespace

Result<Threshold, std::string> Threshold::parse(std::string_view text) {
  if (text == "off" || text == "none") return Threshold{Kind::kOff, 0.0};
  bool percent = !text.empty() && text.back() == '%';
  std::string_view digits = percent ? text.substr(0, text.size() - 1) : text;
  double value = 0.0;
  auto [end, code] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || code != std::errc() || end != digits.data() + digits.size() ||
      !std::isfinite(value) || value < 0.0) {
    return Unexpected{
        fmt::format("'{}' is not a threshold: expected a number >= 0 (absolute, e.g. 0.005), a "
                    "percentage (relative to the base, e.g. 2%) or off",
                    text)};
  }
  return percent ? Threshold{Kind::kRelative, value / 100.0} : Threshold{Kind::kAbsolute, value};
}

std::string Threshold::to_string() const {
  switch (kind) {
    case Kind::kOff: return "off";
    case Kind::kRelative: return fmt::format("{:g}%", value * 100.0);
    case Kind::kAbsolute: return fmt::format("{:g}", value);
  }
  return "?";
}

std::span<const CompareMetric> compare_metrics() {
  return kMetrics;
}

Thresholds::Thresholds() {
  for (const CompareMetric& metric : kMetrics) {
    if (metric.gate) by_path_[std::string(metric.path)] = *metric.gate;
  }
}

Result<void, std::string> Thresholds::set(std::string_view assignment) {
  auto equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    return Unexpected{fmt::format("'{}': expected NAME=VALUE (e.g. peak_used=2%)", assignment)};
  }
  const std::string_view name = assignment.substr(0, equals);
  std::string_view value = assignment.substr(equals + 1);
  auto path = resolve_name(name);
  if (!path) {
    // Any figure of the report by its dotted path: an increase is worse, or
    // a decrease with a leading '-'.
    const bool dotted = name.find('.') != std::string_view::npos && name.front() != '.' &&
                        name.back() != '.' && name.find("..") == std::string_view::npos;
    if (path.error().find("ambiguous") != std::string::npos ||
        path.error().find("always checked") != std::string::npos) {
      return Unexpected{path.error()};
    }
    if (!dotted) {
      return Unexpected{path.error() + "; or any number of the report by its dotted path"};
    }
    const bool decrease = value.starts_with('-');
    if (decrease) value.remove_prefix(1);
    auto threshold = Threshold::parse(value);
    if (!threshold) return Unexpected{fmt::format("{}: {}", name, threshold.error())};
    for (AdHocGate& gate : ad_hoc_) {
      if (gate.path == name) {
        gate = AdHocGate{std::string(name), decrease, threshold.value()};
        return {};
      }
    }
    ad_hoc_.push_back(AdHocGate{std::string(name), decrease, threshold.value()});
    return {};
  }
  auto threshold = Threshold::parse(value);
  if (!threshold) return Unexpected{fmt::format("{}: {}", path.value(), threshold.error())};
  by_path_[path.value()] = threshold.value();
  return {};
}

Result<void, std::string> Thresholds::set_all(const nlohmann::json& object) {
  if (!object.is_object()) {
    return Unexpected{std::string(
        "expected an object of thresholds, e.g. {\"waste_ratio_mean\": 0.005, \"peak_used\": "
        "\"2%\"}")};
  }
  for (const auto& [key, value] : object.items()) {
    std::string text;
    if (value.is_number()) {
      text = value.dump();
    } else if (value.is_string()) {
      text = value.get<std::string>();
    } else {
      return Unexpected{
          fmt::format("{}: expected a number or a string such as \"2%\" or \"off\"", key)};
    }
    if (auto done = set(key + "=" + text); !done) {
      return Unexpected{fmt::format("{}: {}", key, done.error())};
    }
  }
  return {};
}

std::optional<Threshold> Thresholds::find(std::string_view path) const {
  auto it = by_path_.find(path);
  if (it == by_path_.end() || it->second.kind == Threshold::Kind::kOff) return std::nullopt;
  return it->second;
}

namespace {
// One row of a number both reports carry (none when either lacks it).
void add_metric_row(Comparison& out, const nlohmann::json& base, const nlohmann::json& now,
                    std::string_view path, bool higher_is_better, std::optional<Threshold> gate);
}  // namespace

Result<Comparison, std::string> compare_reports(const nlohmann::json& base,
                                                const nlohmann::json& now,
                                                const Thresholds& thresholds,
                                                std::string_view base_name,
                                                std::string_view new_name) {
  if (auto ok = check_comparable(base, now, base_name, new_name); !ok) {
    return Unexpected{ok.error()};
  }
  const std::string kind = kind_of(base);
  if (kind_of(now) != kind) {
    return Unexpected{
        fmt::format("{} is a {} report and {} a {} report of the same trace: one of "
                    "them is not a complete kvreplay report",
                    base_name, kind, new_name, kind_of(now))};
  }
  for (auto [report, name] : {std::pair{&base, base_name}, std::pair{&now, new_name}}) {
    if (auto ok = check_shape(*report, kind, thresholds, name); !ok) return Unexpected{ok.error()};
  }
  Comparison out;
  out.kind = kind;
  out.sha256 = base["trace"]["sha256"].get<std::string>();
  auto path_of = [](const nlohmann::json& report) {
    const nlohmann::json* path = at_path(report, "trace.path");
    return path != nullptr && path->is_string() ? path->get<std::string>() : std::string();
  };
  out.base_trace_path = path_of(base);
  out.new_trace_path = path_of(now);
  out.config_changes = config_changes(base, now);

  // status: leaving "ok" is a regression.
  const nlohmann::json* base_status = at_path(base, "status");
  const nlohmann::json* new_status = at_path(now, "status");
  {  // both strings (check_shape)
    CompareRow row;
    row.metric = "status";
    row.base = base_status->get<std::string>();
    row.now = new_status->get<std::string>();
    row.threshold = "always";
    if (row.base == row.now) {
      row.verdict = CompareRow::Verdict::kSame;
    } else if (row.base == "ok") {
      row.verdict = CompareRow::Verdict::kRegressed;
      out.regressions.push_back(fmt::format("status: {} -> {}", row.base, row.now));
    } else {
      row.verdict = row.now == "ok" ? CompareRow::Verdict::kBetter : CompareRow::Verdict::kWorse;
    }
    out.rows.push_back(std::move(row));
  }

  // Invariant violations in NEW always fail.
  if (auto new_violations = count_at(now, "invariants.violations")) {
    std::string detail;
    const nlohmann::json* list = at_path(now, "invariants.violations");
    if (list->is_array() && !list->empty() && (*list)[0].is_object()) {
      const nlohmann::json& first = (*list)[0];
      std::string invariant = first.value("invariant", std::string("?"));
      std::string message = first.value("message", std::string());
      detail = fmt::format(" (first: {} {}{})", invariant,
                           first.contains("event") && first["event"].is_number()
                               ? fmt::format("at event {}", first["event"].dump())
                               : std::string("at the end"),
                           message.empty() ? std::string() : ": " + message);
    }
    add_always_row(out, "invariants.violations", count_at(base, "invariants.violations"),
                   *new_violations, detail);
  }

  for (const CompareMetric& metric : kMetrics) {
    add_metric_row(out, base, now, metric.path, metric.higher_is_better,
                   thresholds.find(metric.path));
  }
  for (const AdHocGate& gate : thresholds.ad_hoc()) {
    if (find_metric(gate.path) != nullptr) continue;
    add_metric_row(out, base, now, gate.path, gate.higher_is_better,
                   gate.threshold.kind == Threshold::Kind::kOff
                       ? std::nullopt
                       : std::optional<Threshold>(gate.threshold));
  }
  return out;
}

namespace {

void add_metric_row(Comparison& out, const nlohmann::json& base, const nlohmann::json& now,
                    std::string_view path, bool higher_is_better, std::optional<Threshold> gate) {
  auto b = number_at(base, path);
  auto n = number_at(now, path);
  if (!b || !n) return;  // e.g. simulate-only keys in replay reports
  CompareRow row;
  row.metric = std::string(path);
  row.base = b->text;
  row.now = n->text;
  row.change = change_text(*b, *n);
  row.threshold = gate ? gate->to_string() : std::string();
  if (gate && higher_is_better && find_metric(path) == nullptr) row.threshold = "-" + row.threshold;
  const double worse_by = higher_is_better ? -difference(*b, *n) : difference(*b, *n);
  // Floating-point reports: differences below rounding are not changes.
  const double epsilon = b->integer && n->integer
                             ? 0.0
                             : 1e-12 * std::max({1.0, std::fabs(b->value), std::fabs(n->value)});
  if (std::fabs(worse_by) <= epsilon) {
    row.verdict = CompareRow::Verdict::kSame;
  } else if (worse_by < 0) {
    row.verdict = CompareRow::Verdict::kBetter;
  } else if (!gate) {
    row.verdict = CompareRow::Verdict::kWorse;
  } else {
    const double allowed =
        gate->kind == Threshold::Kind::kRelative ? gate->value * std::fabs(b->value) : gate->value;
    if (worse_by > allowed + epsilon) {
      row.verdict = CompareRow::Verdict::kRegressed;
      out.regressions.push_back(fmt::format("{}: {} -> {} ({}; threshold {})", row.metric, row.base,
                                            row.now, row.change, row.threshold));
    } else {
      row.verdict = CompareRow::Verdict::kWithin;
    }
  }
  out.rows.push_back(std::move(row));
}

}  // namespace

std::string comparison_text(const Comparison& comparison, std::string_view base_name,
                            std::string_view new_name, bool color) {
  const Paint paint{color};
  std::string out;
  out += fmt::format("compare {} -> {}: {} reports of one trace (sha256 {}...)\n", base_name,
                     new_name, comparison.kind, comparison.sha256.substr(0, 16));
  if (comparison.base_trace_path == comparison.new_trace_path) {
    out += fmt::format("trace: {}\n", comparison.base_trace_path);
  } else {
    out += fmt::format("trace: {} -> {}\n", comparison.base_trace_path, comparison.new_trace_path);
  }
  for (const std::string& change : comparison.config_changes) {
    out += fmt::format("config: {}\n", change);
  }
  out += paint.bold(fmt::format("{:<35} {:>14} {:>14} {:>22} {:>9}  {}", "metric", "base", "new",
                                "change", "threshold", "verdict")) +
         "\n";
  for (const CompareRow& row : comparison.rows) {
    std::string verdict;
    switch (row.verdict) {
      case CompareRow::Verdict::kSame: verdict = "="; break;
      case CompareRow::Verdict::kBetter: verdict = paint.green("better"); break;
      case CompareRow::Verdict::kWorse: verdict = paint.dim("worse (not gated)"); break;
      case CompareRow::Verdict::kWithin: verdict = paint.yellow("worse, within threshold"); break;
      case CompareRow::Verdict::kRegressed: verdict = paint.red("REGRESSED"); break;
    }
    out += fmt::format("{:<35} {:>14} {:>14} {:>22} {:>9}  {}\n", row.metric, row.base, row.now,
                       row.change, row.threshold.empty() ? "-" : row.threshold, verdict);
  }
  if (comparison.regressed()) {
    std::string names;
    for (const CompareRow& row : comparison.rows) {
      if (row.verdict != CompareRow::Verdict::kRegressed) continue;
      names += names.empty() ? "" : ", ";
      names += row.metric;
    }
    out += paint.red(fmt::format("regression: {} of {} metrics ({})", comparison.regressions.size(),
                                 comparison.rows.size(), names)) +
           "\n";
  } else {
    out += paint.green(fmt::format("no regression ({} metrics)", comparison.rows.size())) + "\n";
  }
  return out;
}

namespace {

std::string_view verdict_name(CompareRow::Verdict verdict) {
  switch (verdict) {
    case CompareRow::Verdict::kSame: return "same";
    case CompareRow::Verdict::kBetter: return "better";
    case CompareRow::Verdict::kWorse: return "worse";
    case CompareRow::Verdict::kWithin: return "within";
    case CompareRow::Verdict::kRegressed: return "regressed";
  }
  return "?";
}

std::string xml_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows no control characters but tab, newline and return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

// GitHub's workflow commands: a property (title) escapes ',' and ':' too.
std::string github_escaped(std::string_view text, bool property) {
  std::string out;
  for (char c : text) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\r') {
      out += "%0D";
    } else if (c == '\n') {
      out += "%0A";
    } else if (property && c == ':') {
      out += "%3A";
    } else if (property && c == ',') {
      out += "%2C";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string comparison_json(const Comparison& comparison, std::string_view base_name,
                            std::string_view new_name) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CompareRow& row : comparison.rows) {
    rows.push_back({{"metric", row.metric},
                    {"base", row.base},
                    {"new", row.now},
                    {"change", row.change},
                    {"threshold", row.threshold},
                    {"verdict", std::string(verdict_name(row.verdict))}});
  }
  nlohmann::json out = {{"kvreplay_compare", 1},
                        {"base", std::string(base_name)},
                        {"new", std::string(new_name)},
                        {"kind", comparison.kind},
                        {"trace_sha256", comparison.sha256},
                        {"config_changes", comparison.config_changes},
                        {"rows", std::move(rows)},
                        {"regressions", comparison.regressions},
                        {"regressed", comparison.regressed()}};
  return out.dump(2) + "\n";
}

std::string comparison_junit(const Comparison& comparison, std::string_view name) {
  std::size_t failures = 0;
  for (const CompareRow& row : comparison.rows) {
    failures += row.verdict == CompareRow::Verdict::kRegressed ? 1 : 0;
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"kvreplay compare\" tests=\"{}\" failures=\"{}\">\n",
                     comparison.rows.size(), failures);
  out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n",
                     xml_escaped(name), comparison.rows.size(), failures);
  for (const CompareRow& row : comparison.rows) {
    out += fmt::format("    <testcase classname=\"{}\" name=\"{}\"", xml_escaped(name),
                       xml_escaped(row.metric));
    const std::string detail =
        fmt::format("{}: {} -> {}{}{}", row.metric, row.base, row.now,
                    row.change.empty() ? std::string() : " (" + row.change + ")",
                    row.threshold.empty() ? std::string() : "; threshold " + row.threshold);
    if (row.verdict == CompareRow::Verdict::kRegressed) {
      out +=
          fmt::format(">\n      <failure message=\"{}\" type=\"regression\"/>\n    </testcase>\n",
                      xml_escaped(detail));
    } else {
      out += fmt::format(">\n      <system-out>{} ({})</system-out>\n    </testcase>\n",
                         xml_escaped(detail), verdict_name(row.verdict));
    }
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string comparison_github(const Comparison& comparison, std::string_view name) {
  std::string out;
  for (const CompareRow& row : comparison.rows) {
    if (row.verdict != CompareRow::Verdict::kRegressed) continue;
    out += fmt::format("::error title={}::{}\n",
                       github_escaped(fmt::format("{}: {} regressed", name, row.metric), true),
                       github_escaped(fmt::format("{}: {} -> {} ({}; threshold {})", row.metric,
                                                  row.base, row.now, row.change, row.threshold),
                                      false));
  }
  out += fmt::format(
      "::notice title={}::{}\n", github_escaped(fmt::format("{}: kvreplay compare", name), true),
      github_escaped(comparison.regressed()
                         ? fmt::format("{} of {} metrics regressed", comparison.regressions.size(),
                                       comparison.rows.size())
                         : fmt::format("no regression ({} metrics)", comparison.rows.size()),
                     false));
  return out;
}

}  // namespace kvreplay
