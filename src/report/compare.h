// Compare: two JSON reports of the same trace, metric by metric, for CI
// regression gates (`kvreplay compare BASE.json NEW.json`).
//
// Contract:
//   - Reports are comparable when both carry the same kvreplay_report version
//     and the same trace.sha256 (the trace's content, not its path); otherwise
//     compare_reports() returns an error (exit code 2). Replay and simulate
//     reports both work: an informational metric missing from either report
//     is skipped, but status, invariants.violations and every gated metric of
//     the report's kind must be there with their type, or it is refused (exit 2).
//   - Files are read like traces (io/json_file.h): streamed, at most
//     kMaxReportBytes (kMaxThresholdsBytes for --thresholds), strict JSON
//     (duplicate keys, numbers past a double's range, trailing bytes refused);
//     an error names the file and its line.
//   - Always a regression, whatever the thresholds: NEW has an invariant
//     violation (a --verify data mismatch is one too: invariant D1); status was
//     "ok" and is not.
//   - A gated metric regresses when it moves in its worse direction by more
//     than its threshold: absolute ("0.005", in the metric's own units) or
//     relative ("2%", of the base value; a base of 0 then allows no increase),
//     or "off". Moving the other way, or by at most the threshold, passes.
//   - Informational metrics are shown, never gated, unless given a threshold.
//   - Output is deterministic: a fixed metric order, fixed number formats.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace kvreplay {

inline constexpr std::uint64_t kMaxReportBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxThresholdsBytes = 1ull << 20;

struct Threshold {
  enum class Kind : std::uint8_t { kAbsolute, kRelative, kOff };
  Kind kind = Kind::kAbsolute;
  double value = 0.0;  // absolute: metric units; relative: a fraction (0.02 for "2%")

  // "0.005", "2%", "off". Error: what is wrong with `text`.
  static Result<Threshold, std::string> parse(std::string_view text);
  std::string to_string() const;
};

struct CompareMetric {
  std::string_view path;          // "fragmentation.waste_ratio_mean"
  bool higher_is_better = false;  // false: an increase is worse
  std::optional<Threshold> gate;  // the default; nullopt: informational
  // Present only in some runs (tiers, prices): a report without it has
  // nothing to gate there, and the row is left out.
  bool optional = false;
};

// A threshold on a figure outside compare_metrics(): any number of the report
// by its dotted path ("offload.tiers.cpu.hit_tokens"). An increase is worse,
// or a decrease when the threshold was written with a leading '-' ("-2%").
struct AdHocGate {
  std::string path;
  bool higher_is_better = false;
  Threshold threshold;
};

// Every metric compare knows, in table order (the always-checked status and
// violations rows come first and are not in this list).
std::span<const CompareMetric> compare_metrics();

// Thresholds by metric path, starting from the defaults.
class Thresholds {
 public:
  Thresholds();
  // "NAME=VALUE": NAME a metric path ("blocks.peak_used") or its last part when
  // that is unambiguous ("peak_used"); VALUE as Threshold::parse. Error: why not.
  Result<void, std::string> set(std::string_view assignment);
  // A JSON object {"NAME": VALUE, ...}; VALUE a number (absolute) or a string
  // as Threshold::parse. Error: why not (naming the key).
  Result<void, std::string> set_all(const nlohmann::json& object);
  // nullopt: the metric is not gated.
  std::optional<Threshold> find(std::string_view path) const;
  // The thresholds on figures outside compare_metrics(), in the order given.
  const std::vector<AdHocGate>& ad_hoc() const { return ad_hoc_; }

 private:
  std::map<std::string, Threshold, std::less<>> by_path_;
  std::vector<AdHocGate> ad_hoc_;
};

struct CompareRow {
  // kWorse: an informational metric got worse (not gated); kWithin: a gated
  // one got worse by at most its threshold.
  enum class Verdict : std::uint8_t { kSame, kBetter, kWorse, kWithin, kRegressed };
  std::string metric;
  std::string base;  // the values as shown
  std::string now;
  std::string change;     // "+3 (+5.36%)", "" when equal
  std::string threshold;  // "1%", "0.001", "always", "" (informational)
  Verdict verdict = Verdict::kSame;
};

struct Comparison {
  std::string kind;    // "replay" or "simulate"
  std::string sha256;  // of the trace
  std::string base_trace_path, new_trace_path;
  std::vector<std::string> config_changes;  // "alloc_order: \"lifo\" -> \"fifo\""
  std::vector<CompareRow> rows;
  std::vector<std::string> regressions;  // one line each: "blocks.peak_used 56 -> 60 (...)"
  bool regressed() const { return !regressions.empty(); }
};

// Error: the two reports cannot be compared (not reports, different versions,
// no trace.sha256, different traces), one line naming `base_name`/`new_name`.
Result<Comparison, std::string> compare_reports(const nlohmann::json& base,
                                                const nlohmann::json& now,
                                                const Thresholds& thresholds,
                                                std::string_view base_name = "BASE",
                                                std::string_view new_name = "NEW");

// The table printed on stdout, coloured when `color`.
std::string comparison_text(const Comparison& comparison, std::string_view base_name,
                            std::string_view new_name, bool color);

// The comparison for machines (compare --format): `json`, one object with
// every row and the regressions; `junit`, a JUnit XML test suite named
// `name` with a test case a row (a regression is a failure), for CI
// dashboards; `github`, one workflow command a regression
// (`::error title=...::...`) and a notice line at the end.
std::string comparison_json(const Comparison& comparison, std::string_view base_name,
                            std::string_view new_name);
std::string comparison_junit(const Comparison& comparison, std::string_view name);
std::string comparison_github(const Comparison& comparison, std::string_view name);

}  // namespace kvreplay
