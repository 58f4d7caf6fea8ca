#include "report/compare.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace kvreplay {
namespace {

using Verdict = CompareRow::Verdict;
using nlohmann::json;

const std::string kHash(64, 'a');

// A replay report as kvreplay writes it (the keys compare reads).
json replay_report() {
  return json::parse(R"({
    "kvreplay_report": 1,
    "trace": {"path": "traces/quickstart.jsonl", "format": "kvtrace-jsonl", "events": 30,
              "sha256": ")" +
                     kHash + R"("},
    "config": {"alloc_order": "lifo", "page_tokens": 16, "pool_blocks": 64},
    "status": "ok",
    "blocks": {"total": 64, "peak_used": 100, "final_used": 0, "allocations": 58, "frees": 58},
    "tokens": {"appended": 797, "peak_logical": 1601, "peak_physical": 817},
    "fragmentation": {"waste_ratio_at_peak": 0.08817, "waste_ratio_mean": 0.09719,
                      "waste_ratio_max": 0.169271, "waste_slots_at_peak": 79},
    "layout": {"runs_per_seq_mean": 2.27, "runs_per_seq_at_peak": 2.44,
               "continued_share_mean": 0.8697, "continued_share_at_peak": 0.854},
    "sharing": {"forks": 2, "prefix_installs": 7, "shared_pages_installed": 49,
                "saved_blocks_at_peak": 49},
    "cow": {"copies": 9, "bytes": 6291456},
    "invariants": {"mode": "end", "checks": 2, "violations": []},
    "oom": {"events": 0, "first_event": null},
    "timing": {"wall_seconds": 0.001, "kernels": {}}
  })");
}

json simulate_report() {
  json report = replay_report();
  report["requests"] = {{"total", 10}, {"finished", 10}, {"skipped", 0}};
  report["blocks"]["peak_in_use"] = 40;  // simulate's: what requests hold
  report["prefix_cache"] = {{"query_tokens", 1000},        {"hit_tokens", 500}, {"hit_rate", 0.5},
                            {"hit_rate_per_request", 0.4}, {"hit_blocks", 30},  {"evictions", 0}};
  report["scheduler"] = {{"steps", 100},
                         {"preemptions", 0},
                         {"max_running", 4},
                         {"virtual_seconds", 1.5},
                         {"output_tokens", 200},
                         {"prompt_tokens_computed", 500},
                         {"output_tokens_per_second", 133.3},
                         {"requests_per_second", 6.6}};
  return report;
}

Comparison compare(const json& base, const json& now, const Thresholds& thresholds = {}) {
  auto result = compare_reports(base, now, thresholds);
  REQUIRE(result.ok());
  return result.value();
}

const CompareRow& row(const Comparison& comparison, const std::string& metric) {
  for (const CompareRow& r : comparison.rows) {
    if (r.metric == metric) return r;
  }
  FAIL("no row " << metric);
  return comparison.rows.front();
}

bool has_row(const Comparison& comparison, const std::string& metric) {
  for (const CompareRow& r : comparison.rows) {
    if (r.metric == metric) return true;
  }
  return false;
}

TEST_CASE("compare: identical reports do not regress, timing aside") {
  json base = replay_report();
  json now = base;
  now["timing"]["wall_seconds"] = 99.0;
  now["trace"]["path"] = "-";  // the same trace read from stdin
  Comparison c = compare(base, now);
  CHECK_FALSE(c.regressed());
  CHECK(c.kind == "replay");
  CHECK(c.sha256 == kHash);
  for (const CompareRow& r : c.rows) {
    INFO(r.metric);
    CHECK(r.verdict == Verdict::kSame);
    CHECK(r.change.empty());
  }
  // Replay reports have no simulation keys: those rows are skipped.
  CHECK_FALSE(has_row(c, "scheduler.preemptions"));
  CHECK(has_row(c, "blocks.peak_used"));
  CHECK(row(c, "status").base == "ok");
}

TEST_CASE("compare: waste ratios regress past an absolute threshold") {
  json base = replay_report();
  json now = base;
  now["fragmentation"]["waste_ratio_mean"] = 0.09719 + 0.0005;
  Comparison within = compare(base, now);
  CHECK_FALSE(within.regressed());
  CHECK(row(within, "fragmentation.waste_ratio_mean").verdict == Verdict::kWithin);
  CHECK(row(within, "fragmentation.waste_ratio_mean").threshold == "0.001");

  now["fragmentation"]["waste_ratio_mean"] = 0.09719 + 0.002;
  Comparison regressed = compare(base, now);
  REQUIRE(regressed.regressed());
  CHECK(row(regressed, "fragmentation.waste_ratio_mean").verdict == Verdict::kRegressed);
  CHECK(row(regressed, "fragmentation.waste_ratio_mean").change == "+0.002000 (+2.06%)");
  REQUIRE(regressed.regressions.size() == 1);
  CHECK(regressed.regressions[0] ==
        "fragmentation.waste_ratio_mean: 0.097190 -> 0.099190 (+0.002000 (+2.06%); threshold "
        "0.001)");

  Thresholds loose;
  REQUIRE(loose.set("waste_ratio_mean=0.005").ok());
  CHECK_FALSE(compare(base, now, loose).regressed());

  now["fragmentation"]["waste_ratio_mean"] = 0.05;  // better
  Comparison better = compare(base, now);
  CHECK_FALSE(better.regressed());
  CHECK(row(better, "fragmentation.waste_ratio_mean").verdict == Verdict::kBetter);
}

TEST_CASE("compare: counts regress past a relative threshold") {
  json base = replay_report();
  json now = base;
  now["blocks"]["peak_used"] = 101;  // +1%: at the threshold, not past it
  CHECK(row(compare(base, now), "blocks.peak_used").verdict == Verdict::kWithin);
  now["blocks"]["peak_used"] = 102;
  Comparison c = compare(base, now);
  CHECK(row(c, "blocks.peak_used").verdict == Verdict::kRegressed);
  CHECK(row(c, "blocks.peak_used").change == "+2 (+2.00%)");
  CHECK(row(c, "blocks.peak_used").threshold == "1%");

  Thresholds loose;
  REQUIRE(loose.set("blocks.peak_used=5%").ok());
  CHECK_FALSE(compare(base, now, loose).regressed());
  Thresholds absolute;
  REQUIRE(absolute.set("peak_used=1").ok());  // absolute: one block more at most
  CHECK(compare(base, now, absolute).regressed());
  Thresholds off;
  REQUIRE(off.set("peak_used=off").ok());
  Comparison ungated = compare(base, now, off);
  CHECK_FALSE(ungated.regressed());
  CHECK(row(ungated, "blocks.peak_used").verdict == Verdict::kWorse);
  CHECK(row(ungated, "blocks.peak_used").threshold.empty());
}

TEST_CASE("compare: from zero, a relative threshold allows no increase") {
  json base = simulate_report();
  json now = base;
  now["scheduler"]["preemptions"] = 1;
  Comparison c = compare(base, now);
  CHECK(c.kind == "simulate");
  CHECK(row(c, "scheduler.preemptions").verdict == Verdict::kRegressed);
  CHECK(row(c, "scheduler.preemptions").change == "+1");
}

TEST_CASE("compare: the prefix-cache hit rate regresses when it falls") {
  json base = simulate_report();
  json now = base;
  now["prefix_cache"]["hit_rate"] = 0.498;
  CHECK(row(compare(base, now), "prefix_cache.hit_rate").verdict == Verdict::kRegressed);
  now["prefix_cache"]["hit_rate"] = 0.6;
  CHECK(row(compare(base, now), "prefix_cache.hit_rate").verdict == Verdict::kBetter);
}

TEST_CASE("compare: copy-on-write copies and oom events") {
  json base = replay_report();
  json now = base;
  now["cow"]["copies"] = 10;  // +11%
  CHECK(row(compare(base, now), "cow.copies").verdict == Verdict::kRegressed);
  now = base;
  now["oom"]["events"] = 1;
  CHECK(row(compare(base, now), "oom.events").verdict == Verdict::kRegressed);
  // Informational metrics never fail by default.
  now = base;
  now["blocks"]["allocations"] = 1000;
  Comparison c = compare(base, now);
  CHECK_FALSE(c.regressed());
  CHECK(row(c, "blocks.allocations").verdict == Verdict::kWorse);
}

TEST_CASE("compare: leaving status ok always fails, returning to it is better") {
  json base = replay_report();
  json now = base;
  now["status"] = "oom";
  Thresholds off;
  Comparison c = compare(base, now, off);
  CHECK(row(c, "status").verdict == Verdict::kRegressed);
  CHECK(c.regressions == std::vector<std::string>{"status: ok -> oom"});
  Comparison back = compare(now, base);
  CHECK_FALSE(back.regressed());
  CHECK(row(back, "status").verdict == Verdict::kBetter);
}

TEST_CASE("compare: a violation in NEW always fails, whatever the thresholds") {
  json base = replay_report();
  json now = base;
  now["status"] = "violation";
  now["invariants"]["violations"] = json::array(
      {{{"event", 5}, {"line", 6}, {"invariant", "I1"}, {"message", "refcount 2, found 1"}}});
  Thresholds all_off;
  for (const CompareMetric& metric : compare_metrics()) {
    REQUIRE(all_off.set(std::string(metric.path) + "=off").ok());
  }
  Comparison c = compare(base, now, all_off);
  REQUIRE(c.regressed());
  CHECK(row(c, "invariants.violations").verdict == Verdict::kRegressed);
  CHECK(row(c, "invariants.violations").threshold == "always");
  CHECK(c.regressions.back() ==
        "invariants.violations: 1 in NEW (first: I1 at event 5: refcount 2, found 1)");
  // Even when BASE had the same violation: a violation is never acceptable.
  CHECK(compare(now, now).regressed());
}

TEST_CASE("compare: reports of different versions or traces are refused") {
  json base = replay_report();
  json now = base;
  now["kvreplay_report"] = 2;
  auto versions = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(versions.ok());
  CHECK(versions.error() ==
        "a.json and b.json are reports of different versions (kvreplay_report 1 and 2): make "
        "both with the same kvreplay");

  now = base;
  now["trace"]["sha256"] = std::string(64, 'b');
  now["trace"]["path"] = "traces/other.jsonl";
  auto traces = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(traces.ok());
  CHECK(traces.error() ==
        "a.json and b.json are reports of different traces: trace.sha256 aaaaaaaaaaaaaaaa... "
        "(traces/quickstart.jsonl) and bbbbbbbbbbbbbbbb... (traces/other.jsonl)");

  // The same path is no proof of the same trace: only the hash counts.
  now["trace"]["path"] = base["trace"]["path"];
  CHECK_FALSE(compare_reports(base, now, Thresholds{}).ok());

  now = base;
  now["trace"].erase("sha256");
  auto missing = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().rfind("b.json: no trace.sha256", 0) == 0);

  now = base;
  now["kvreplay_report"] = "1";
  auto text_version = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(text_version.ok());
  CHECK(text_version.error() == "b.json: kvreplay_report: expected an integer, got string");

  auto plan = compare_reports(base, json{{"kvreplay_plan", 1}}, Thresholds{}, "a", "b");
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error() ==
        "b: a plan (kvreplay_plan), not a report: compare replay or simulate "
        "reports");
  CHECK_FALSE(compare_reports(base, json::array(), Thresholds{}).ok());
  CHECK_FALSE(compare_reports(json{{"x", 1}}, base, Thresholds{}).ok());
}

TEST_CASE("compare: a report without a gated metric, or with one of another type, is refused") {
  // Each of these used to compare as "no regression".
  struct Case {
    const char* pointer;  // what is removed or replaced in NEW
    json replacement;     // null: removed
    const char* error;
  };
  const Case cases[] = {
      {"/status", nullptr,
       "b.json: status: missing (always checked: leaving \"ok\" is a regression): not a "
       "complete kvreplay report"},
      {"/status", 0, "b.json: status: expected a string, got number"},
      {"/invariants", nullptr,
       "b.json: invariants.violations: missing (always checked: a violation in NEW is a "
       "regression): not a complete kvreplay report"},
      {"/invariants", "none", "b.json: invariants: expected an object, got string"},
      {"/invariants/violations", 0, "b.json: invariants.violations: expected a list, got number"},
      {"/invariants/violations", json::array({"I1"}),
       "b.json: invariants.violations[0]: expected an object, got string"},
      {"/invariants/violations", json::array({{{"invariant", 1}}}),
       "b.json: invariants.violations[0].invariant: expected a string, got number"},
      {"/blocks", nullptr,
       "b.json: blocks.peak_used: missing (a gated metric): not a complete kvreplay report"},
      {"/blocks", json::array(), "b.json: blocks: expected an object, got array"},
      {"/blocks/peak_used", "100", "b.json: blocks.peak_used: expected a number, got string"},
      {"/oom/events", nullptr,
       "b.json: oom.events: missing (a gated metric): not a complete kvreplay report"},
      {"/cow/bytes", true, "b.json: cow.bytes: expected a number, got boolean"},
  };
  for (const Case& c : cases) {
    INFO(c.pointer << " -> " << c.replacement.dump());
    json base = replay_report();
    json now = base;
    json::json_pointer pointer(c.pointer);
    if (c.replacement.is_null()) {
      now[pointer.parent_pointer()].erase(pointer.back());
    } else {
      now[pointer] = c.replacement;
    }
    auto result = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
    REQUIRE_FALSE(result.ok());
    CHECK(result.error() == c.error);
    // Refused as BASE too.
    auto swapped = compare_reports(now, base, Thresholds{}, "b.json", "a.json");
    REQUIRE_FALSE(swapped.ok());
    CHECK(swapped.error() == c.error);
  }

  // An informational metric may be missing (reports of older or other kinds);
  // a metric turned off is not gated.
  json base = replay_report();
  json now = base;
  now["cow"].erase("bytes");
  CHECK(compare_reports(base, now, Thresholds{}).ok());
  now = base;
  now["blocks"].erase("peak_used");
  Thresholds off;
  REQUIRE(off.set("peak_used=off").ok());
  CHECK(compare_reports(base, now, off).ok());
  // A metric given a threshold is gated: then it must be there.
  now = base;
  now["cow"].erase("bytes");
  Thresholds bytes;
  REQUIRE(bytes.set("cow.bytes=1%").ok());
  CHECK_FALSE(compare_reports(base, now, bytes).ok());
}

TEST_CASE("compare: simulate reports must carry their gated metrics") {
  json base = simulate_report();
  json now = base;
  now["scheduler"].erase("preemptions");
  auto result = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(result.ok());
  CHECK(result.error() ==
        "b.json: scheduler.preemptions: missing (a gated metric): not a complete kvreplay report");
  now = base;
  now["prefix_cache"]["hit_rate"] = nullptr;
  result = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(result.ok());
  CHECK(result.error() == "b.json: prefix_cache.hit_rate: expected a number, got null");
  // Without its simulation objects a simulate report reads as a replay report:
  // the two kinds of one trace cannot be compared.
  now = base;
  for (const char* key : {"requests", "prefix_cache", "scheduler"}) now.erase(key);
  result = compare_reports(base, now, Thresholds{}, "a.json", "b.json");
  REQUIRE_FALSE(result.ok());
  CHECK(result.error() ==
        "a.json is a simulate report and b.json a replay report of the same trace: one of them "
        "is not a complete kvreplay report");
  // Replay reports need no simulation metrics.
  CHECK(compare_reports(replay_report(), replay_report(), Thresholds{}).ok());
}

TEST_CASE("compare: config changes are listed") {
  json base = replay_report();
  json now = base;
  now["config"]["alloc_order"] = "fifo";
  Comparison c = compare(base, now);
  CHECK(c.config_changes == std::vector<std::string>{"alloc_order: \"lifo\" -> \"fifo\""});
}

TEST_CASE("compare: threshold syntax") {
  auto relative = Threshold::parse("2%");
  REQUIRE(relative.ok());
  CHECK(relative.value().kind == Threshold::Kind::kRelative);
  CHECK(relative.value().value == Approx(0.02));
  CHECK(relative.value().to_string() == "2%");
  auto absolute = Threshold::parse("0.005");
  REQUIRE(absolute.ok());
  CHECK(absolute.value().kind == Threshold::Kind::kAbsolute);
  CHECK(absolute.value().to_string() == "0.005");
  CHECK(Threshold::parse("off").value().kind == Threshold::Kind::kOff);
  for (const char* bad : {"", "%", "-1", "x", "1.5x", "nan", "inf", "2 %"}) {
    INFO(bad);
    CHECK_FALSE(Threshold::parse(bad).ok());
  }

  Thresholds thresholds;
  CHECK(thresholds.find("blocks.peak_used")->kind == Threshold::Kind::kRelative);
  CHECK_FALSE(thresholds.find("blocks.allocations"));  // informational
  REQUIRE(thresholds.set("allocations=10%").ok());     // ... unless given one
  CHECK(thresholds.find("blocks.allocations"));
  CHECK_FALSE(thresholds.set("peak_used").ok());
  CHECK_FALSE(thresholds.set("peak_used=").ok());
  auto unknown = thresholds.set("nonsense=1");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().rfind("unknown metric 'nonsense' (known: blocks.peak_used, ", 0) == 0);
  auto fixed = thresholds.set("status=1");
  REQUIRE_FALSE(fixed.ok());
  CHECK(fixed.error() == "'status' is always checked and has no threshold");
  CHECK_FALSE(thresholds.set("violations=off").ok());
}

TEST_CASE("compare: thresholds from a JSON object") {
  Thresholds thresholds;
  REQUIRE(
      thresholds
          .set_all(json{
              {"waste_ratio_mean", 0.005}, {"peak_used", "2%"}, {"scheduler.preemptions", "off"}})
          .ok());
  CHECK(thresholds.find("fragmentation.waste_ratio_mean")->value == Approx(0.005));
  CHECK(thresholds.find("blocks.peak_used")->value == Approx(0.02));
  CHECK_FALSE(thresholds.find("scheduler.preemptions"));
  auto bad = thresholds.set_all(json{{"peak_used", true}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error() == "peak_used: expected a number or a string such as \"2%\" or \"off\"");
  CHECK_FALSE(thresholds.set_all(json::array()).ok());
  CHECK_FALSE(thresholds.set_all(json{{"peak_used", -1}}).ok());
}

TEST_CASE("compare: the table is deterministic and coloured only when asked") {
  json base = simulate_report();
  json now = base;
  now["blocks"]["peak_used"] = 110;
  now["config"]["alloc_order"] = "fifo";
  Comparison c = compare(base, now);
  std::string plain = comparison_text(c, "base.json", "new.json", false);
  CHECK(plain == comparison_text(compare(base, now), "base.json", "new.json", false));
  CHECK(plain.find('\033') == std::string::npos);
  CHECK(plain.find("config: alloc_order: \"lifo\" -> \"fifo\"\n") != std::string::npos);
  CHECK(plain.find("REGRESSED") != std::string::npos);
  CHECK(plain.find("regression: 1 of ") != std::string::npos);
  std::string colored = comparison_text(c, "base.json", "new.json", true);
  CHECK(colored.find("\033[1;31mREGRESSED\033[0m") != std::string::npos);
  CHECK(comparison_text(compare(base, base), "b", "n", false).find("no regression (") !=
        std::string::npos);
}

TEST_CASE("compare: any number by its dotted path, in either direction") {
  Thresholds t;
  REQUIRE(t.set("tokens.peak_logical=1%").ok());
  REQUIRE(t.set("cow.bytes_extra=-0").ok());  // a path the reports lack
  REQUIRE(t.ad_hoc().size() == 2);
  CHECK_FALSE(t.ad_hoc()[0].higher_is_better);
  CHECK(t.ad_hoc()[1].higher_is_better);
  CHECK_FALSE(t.set("peak_nothing=1%").ok());         // a bare name must be known
  CHECK_FALSE(t.set("tokens..x=1%").ok());            // not a path
  CHECK_FALSE(t.set("tokens.peak_logical=-x").ok());  // not a threshold
  json base = replay_report();
  base["tokens"]["peak_logical"] = 100;
  json now = base;
  now["tokens"]["peak_logical"] = 102;
  Thresholds one;
  REQUIRE(one.set("tokens.peak_logical=1%").ok());
  const Comparison up = compare(base, now, one);
  CHECK(row(up, "tokens.peak_logical").verdict == Verdict::kRegressed);
  Thresholds down;
  REQUIRE(down.set("tokens.peak_logical=-1%").ok());
  CHECK(row(compare(base, now, down), "tokens.peak_logical").verdict == Verdict::kBetter);
  CHECK(row(compare(now, base, down), "tokens.peak_logical").verdict == Verdict::kRegressed);
  // Both reports must carry it.
  auto missing = compare_reports(base, now, t);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().find("cow.bytes_extra: missing") != std::string::npos);
}

TEST_CASE("compare: JUnit and GitHub outputs name the case and escape what they must") {
  json base = replay_report();
  json now = base;
  now["cow"]["copies"] = 1000;
  const Comparison c = compare(base, now);
  const std::string xml = comparison_junit(c, "a<b>&\"c\"");
  CHECK(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>", 0) == 0);
  CHECK(xml.find("<testsuite name=\"a&lt;b&gt;&amp;&quot;c&quot;\"") != std::string::npos);
  CHECK(xml.find("failures=\"1\"") != std::string::npos);
  CHECK(xml.find("<failure message=\"cow.copies: ") != std::string::npos);
  std::size_t cases = 0;
  for (std::size_t at = xml.find("<testcase "); at != std::string::npos;
       at = xml.find("<testcase ", at + 1)) {
    ++cases;
  }
  CHECK(cases == c.rows.size());
  const std::string gh = comparison_github(c, "case:1,2");
  CHECK(gh.rfind("::error title=case%3A1%2C2%3A cow.copies regressed::cow.copies: ", 0) == 0);
  CHECK(gh.find("::notice ") != std::string::npos);
  const json parsed = json::parse(comparison_json(c, "B", "N"));
  CHECK(parsed["regressed"] == true);
  CHECK(parsed["rows"].size() == c.rows.size());
}

}  // namespace
}  // namespace kvreplay
