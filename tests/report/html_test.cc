// The HTML report: TimelineSampler's bounded downsampling (min and max kept
// exactly), and the page's determinism, escaping and self-containment. The
// drawing itself is checked in a real browser by run_html_browser_test.sh.
#include "report/html.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "report/assets.h"

namespace {

using kvreplay::TimelinePoint;
using kvreplay::TimelineSampler;

TimelinePoint point(std::uint64_t i) {
  // A sawtooth with spikes, so that min and max differ within buckets.
  double used = static_cast<double>((i * 7919) % 1000) + (i % 997 == 0 ? 5000.0 : 0.0);
  return TimelinePoint{i + 1,
                       used,
                       static_cast<double>(i % 100) / 100.0,
                       static_cast<double>(i * 3),
                       static_cast<double>(i * 2),
                       static_cast<double>(i / 10)};
}

nlohmann::json small_report(const std::string& path) {
  return {
      {"kvreplay_report", 1},
      {"trace", {{"path", path}, {"format", "kvtrace-jsonl"}, {"events", 3}}},
      {"status", "ok"},
      {"blocks", {{"total", 8}, {"peak_used", 3}, {"final_used", 0}}},
      {"fragmentation", {{"waste_ratio_at_peak", 0.25}, {"waste_ratio_mean", 0.125}}},
      {"cow", {{"copies", 1}, {"bytes", 64}}},
      {"invariants", {{"mode", "every"}, {"checks", 3}, {"violations", nlohmann::json::array()}}},
      {"oom", {{"events", 0}, {"first_event", nullptr}}},
      {"timing", {{"wall_seconds", 1.234567}, {"kernels", nlohmann::json::object()}}}};
}

TimelineSampler three_points() {
  TimelineSampler sampler;
  for (std::uint64_t i = 0; i < 3; ++i) sampler.add(point(i));
  return sampler;
}

}  // namespace

TEST_CASE("html: the sampler keeps one bucket per point until it is full") {
  TimelineSampler sampler(8);
  for (std::uint64_t i = 0; i < 8; ++i) sampler.add(point(i));
  CHECK(sampler.buckets() == 8);
  CHECK(sampler.per_bucket() == 1);
  nlohmann::json json = sampler.to_json();
  CHECK(json["x"] == nlohmann::json({1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK(json["used_blocks"]["min"] == json["used_blocks"]["max"]);
}

TEST_CASE("html: the sampler stays bounded and keeps every extreme") {
  for (std::uint64_t total : {9u, 100u, 1000u, 4097u, 100000u}) {
    TimelineSampler sampler(16);
    double lo = 1e300, hi = -1e300;
    for (std::uint64_t i = 0; i < total; ++i) {
      sampler.add(point(i));
      lo = std::min(lo, point(i).used_blocks);
      hi = std::max(hi, point(i).used_blocks);
      REQUIRE(sampler.buckets() <= 16);
    }
    CAPTURE(total);
    CHECK(sampler.points() == total);
    CHECK(sampler.buckets() >= 8);
    // Full buckets cover per_bucket points each; the last may be partial.
    CHECK((sampler.buckets() - 1) * sampler.per_bucket() < total);
    CHECK(sampler.buckets() * sampler.per_bucket() >= total);
    nlohmann::json json = sampler.to_json();
    std::vector<double> mins = json["used_blocks"]["min"], maxs = json["used_blocks"]["max"];
    CHECK(*std::min_element(mins.begin(), mins.end()) == lo);
    CHECK(*std::max_element(maxs.begin(), maxs.end()) == hi);
    std::vector<std::uint64_t> xs = json["x"];
    CHECK(std::is_sorted(xs.begin(), xs.end()));
    CHECK(xs.back() == total);
    CHECK(json["cow_copies"]["last"].back() == (total - 1) / 10);
  }
}

TEST_CASE("html: a run page is deterministic, self-contained and escapes its input") {
  const std::string hostile = "t</script><script>alert(1)</script>&\"'\xff.jsonl";
  std::string page = kvreplay::render_run_html(small_report(hostile), three_points(), "event");
  CHECK(page == kvreplay::render_run_html(small_report(hostile), three_points(), "event"));
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<script>alert") == std::string::npos);
  CHECK(page.find("</script><script>alert") == std::string::npos);
  CHECK(page.find("http") == std::string::npos);
  CHECK(page.find("src=") == std::string::npos);
  CHECK(page.find("1.234567") == std::string::npos);  // timing is left out
  CHECK(page.find("id=\"kvreplay-data\"") != std::string::npos);
  CHECK(page.find("data-drawn") != std::string::npos);
  CHECK(page.find("waste_ratio_at_peak") != std::string::npos);
  CHECK(page.find('\xff') == std::string::npos);  // a non-UTF-8 byte becomes U+FFFD
  CHECK(page.find("\xef\xbf\xbd.jsonl") != std::string::npos);
}

TEST_CASE("html: a plan page lists every configuration") {
  nlohmann::json plan = {
      {"kvreplay_plan", 1},
      {"trace", {{"path", "r.jsonl"}, {"format", "native"}, {"requests", 10}}},
      {"simulation", {{"allocator", "paged"}}},
      {"cells",
       {{{"model", "llama-3-8b"},
         {"page_tokens", 16},
         {"kv_memory", "1GiB"},
         {"kv_memory_bytes", 1073741824},
         {"pool_blocks", 512},
         {"peak_used", 500},
         {"waste_ratio_mean", 0.01},
         {"preemptions", 3},
         {"hit_rate", 0.5},
         {"finished", 10},
         {"skipped", 0},
         {"output_tokens_per_second", 123.5}},
        {{"model", "llama-3-8b"},
         {"page_tokens", 16},
         {"kv_memory", "2GiB"},
         {"kv_memory_bytes", 2147483648},
         {"pool_blocks", 1024},
         {"peak_used", 700},
         {"waste_ratio_mean", 0.01},
         {"preemptions", 0},
         {"hit_rate", 0.5},
         {"finished", 10},
         {"skipped", 0},
         {"output_tokens_per_second", 150.25},
         {"latency", {{"ttft_ms", {{"p99", 147.44}}}, {"tpot_ms", {{"p99", 12345.0}}}}},
         {"overload", {{"ratio", 1.5}, {"overloaded", true}}},
         {"slo", {{"attainment", 0.5}, {"met", false}}}}}},
      {"objective",
       {{"objective", "usd-per-mtok"},
        {"serving_cells", 0},
        {"cells", 2},
        {"answer", nullptr},
        {"nearest_miss",
         {{"deployment", {{"label", "h100-80gb x1"}}},
          {"model", "llama-3-8b"},
          {"reason", "queueing"},
          {"shortfall", "ttft p95 3 s over 2000 ms"},
          {"simulate_args", "--model llama-3-8b --kv-memory 2GiB"}}}}},
      {"min_kv_memory",
       {{{"model", "llama-3-8b"},
         {"page_tokens", 16},
         {"pool_blocks", 600},
         {"kv_memory_bytes", 1258291200},
         {"probes", 9}}}}};
  std::string page = kvreplay::render_plan_html(plan);
  CHECK(page == kvreplay::render_plan_html(plan));
  CHECK(page.find("<td>1GiB</td>") != std::string::npos);
  CHECK(page.find("<td>2GiB</td>") != std::string::npos);
  CHECK(page.find("<td>1.2 GiB</td>") != std::string::npos);  // sizes in GiB, not bytes
  CHECK(page.find("<td>1258291200</td>") == std::string::npos);
  // Latency, load and SLO columns (a cell without them shows "-").
  CHECK(page.find("<th>p99 TTFT</th>") != std::string::npos);
  CHECK(page.find("<td>147 ms</td>") != std::string::npos);
  CHECK(page.find("<td>12.3 s</td>") != std::string::npos);
  CHECK(page.find("<td>1.50x overloaded</td>") != std::string::npos);
  CHECK(page.find("<th>p95 TTFT</th>") != std::string::npos);
  CHECK(page.find("<th>SLO</th>") != std::string::npos);
  CHECK(page.find("<td>missed · 50.00%</td>") != std::string::npos);
  // --objective with nothing serving: the nearest miss, its reason and its line.
  CHECK(page.find("<h2>Best by usd-per-mtok</h2>") != std::string::npos);
  CHECK(page.find("Its nearest miss, bound by queueing: ttft p95 3 s over 2000 ms") !=
        std::string::npos);
  CHECK(page.find("kvreplay simulate r.jsonl --model llama-3-8b --kv-memory 2GiB") !=
        std::string::npos);
  CHECK(page.find("meeting the SLOs") != std::string::npos);
  CHECK(page.find("http") == std::string::npos);
}

// The status card: green "ok" only when the run is ok and kept its promises;
// an ok simulation that was overloaded or missed its SLOs is amber, saying which.
TEST_CASE("html: an overloaded run or missed SLOs is never a green ok") {
  auto status_card = [](const nlohmann::json& report) {
    const std::string page = kvreplay::render_run_html(report, three_points(), "step");
    const std::string label = "<div class=\"label\">status</div>";
    const std::size_t at = page.find(label);
    REQUIRE(at != std::string::npos);
    const std::size_t open = page.rfind("<div class=\"card", at);
    const std::size_t end = page.find("</div></div>", at);
    return page.substr(open, end - open);
  };
  nlohmann::json report = small_report("t.jsonl");
  report["scheduler"] = {{"preemptions", 0}};
  report["overload"] = {{"overloaded", false}, {"ratio", 1.01}};
  CHECK(status_card(report) ==
        "<div class=\"card good\"><div class=\"label\">status</div><div class=\"value\">ok");

  report["overload"] = {{"overloaded", true}, {"ratio", 257.6}};
  CHECK(status_card(report) ==
        "<div class=\"card warn\"><div class=\"label\">status</div><div "
        "class=\"value\">overloaded");

  report["slo"] = {{"attainment", 0.0}};
  CHECK(status_card(report) ==
        "<div class=\"card warn\"><div class=\"label\">status</div><div "
        "class=\"value\">overloaded · SLO 0%");
  const std::string page = kvreplay::render_run_html(report, three_points(), "step");
  CHECK(page.find("status ok (overloaded · SLO 0%)") != std::string::npos);  // the subtitle

  report["overload"]["overloaded"] = false;
  report["slo"]["attainment"] = 0.98999;  // floored: never shown as 99%
  CHECK(status_card(report) ==
        "<div class=\"card warn\"><div class=\"label\">status</div><div "
        "class=\"value\">SLO 98.99%");
  report["slo"]["attainment"] = 0.995;
  CHECK(status_card(report) ==
        "<div class=\"card good\"><div class=\"label\">status</div><div class=\"value\">ok");

  report["status"] = "violation";
  report["slo"]["attainment"] = 0.0;
  CHECK(status_card(report) ==
        "<div class=\"card bad\"><div class=\"label\">status</div><div "
        "class=\"value\">violation");
}

// The embedded style sheet and script are the asset files, byte for byte.
TEST_CASE("html: embedded assets equal their source files") {
  auto read = [](const char* name) {
    std::ifstream in(std::string(KVREPLAY_SOURCE_DIR) + "/src/report/assets/" + name,
                     std::ios::binary);
    REQUIRE(in);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  CHECK(kvreplay::assets::report_css() == read("report.css"));
  CHECK(kvreplay::assets::report_js() == read("report.js"));
  CHECK_FALSE(kvreplay::assets::report_js().empty());
}

TEST_CASE("html: a fleet page has a row and a chart line per instance, escaped and deterministic") {
  const std::string hostile = "f</script><script>alert(1)</script>.jsonl";
  nlohmann::json report = small_report(hostile);
  report["scheduler"] = {{"preemptions", 2}};
  report["fleet"] = {{"replicas", 2},
                     {"prefill", 1},
                     {"decode", 1},
                     {"gpus", 2},
                     {"router", {{"policy", "round-robin"}}},
                     {"imbalance", {{"requests", 1.0}}},
                     {"kv_transfer", {{"ms", {{"p50", 1.5}, {"p99", 4.25}}}}}};
  auto instance = [](const char* role, std::uint64_t tpot_count) {
    return nlohmann::json{{"role", role},
                          {"routed", {{"requests", 3}}},
                          {"requests", {{"finished", 3}}},
                          {"prefix_cache", {{"hit_rate", 0.5}}},
                          {"blocks", {{"total", 8}, {"peak_in_use", 5}}},
                          {"scheduler", {{"preemptions", 1}}},
                          {"latency",
                           {{"ttft_ms", {{"count", 3}, {"p99", 12.5}}},
                            {"tpot_ms", {{"count", tpot_count}, {"p99", 0}}}}}};
  };
  report["instances"] = {instance("prefill", 0), instance("decode", 3)};
  TimelineSampler a(TimelineSampler::kFleetBuckets, true);
  TimelineSampler b(TimelineSampler::kFleetBuckets, true);
  for (std::uint64_t i = 0; i < 5; ++i) {
    TimelinePoint p = point(i);
    p.t = static_cast<double>(i);
    a.add(p);
    if (i < 3) b.add(p);
  }
  const std::vector<TimelineSampler> timelines{a, b};
  const std::string page = kvreplay::render_fleet_html(report, timelines);
  CHECK(page == kvreplay::render_fleet_html(report, timelines));
  CHECK(page.find("<script>alert") == std::string::npos);
  CHECK(page.find("\"kind\":\"fleet\"") != std::string::npos);
  CHECK(page.find("1 prefill + 1 decode instances") != std::string::npos);
  CHECK(page.find("<tr><td>0</td><td>prefill</td>") != std::string::npos);
  CHECK(page.find("<tr><td>1</td><td>decode</td>") != std::string::npos);
  CHECK(page.find("\"name\":\"0 prefill\"") != std::string::npos);
  CHECK(page.find("\"name\":\"1 decode\"") != std::string::npos);
  CHECK(page.find("8 steps over 2 instances") != std::string::npos);
  // A prefill instance measures no TPOT: a dash, not 0 ms.
  CHECK(page.find("<td>12.5 ms</td><td>-</td></tr>") != std::string::npos);
  CHECK(page.find("1.50 ms / 4.25 ms") != std::string::npos);

  // Per GPU on a fleet's page: the fullest instance's peak (the report's
  // memory section sums the instances'), and a tier's size as one instance has it.
  report["config"] = {{"block_bytes", 1048576}};
  report["memory"] = {{"peak_in_use_bytes", 10 * 1048576}};
  report["instances"][1]["blocks"]["peak_in_use"] = 7;
  report["offload"] = {
      {"tiers", {{"cpu", {{"capacity_bytes", 2 * 134217728}, {"hit_tokens", 0}}}}}};
  for (auto& one : report["instances"]) {
    one["offload"] = {{"tiers", {{"cpu", {{"capacity_bytes", 134217728}}}}}};
  }
  const std::string sized = kvreplay::render_fleet_html(report, timelines);
  CHECK(sized.find("peak KV memory in use, per GPU (fullest instance)</div><div "
                   "class=\"value\">7.0 MiB") != std::string::npos);
  CHECK(sized.find("in use, per GPU</div>") == std::string::npos);  // not the sum
  CHECK(sized.find("cpu tier (128.0 MiB per GPU)") != std::string::npos);
}

TEST_CASE("html: offload tiers add their figures and cards, and only with tiers") {
  auto sampled = [](std::size_t tiers) {
    TimelineSampler sampler(8, /*simulate=*/true, tiers);
    for (std::uint64_t i = 0; i < 20; ++i) {
      TimelinePoint p = point(i);
      p.loading = static_cast<double>(i % 3);
      p.tier_resident = {static_cast<double>(i), static_cast<double>(2 * i)};
      p.tier_stored = {static_cast<double>(10 * i), static_cast<double>(20 * i)};
      p.tier_loaded = {static_cast<double>(i / 2), static_cast<double>(i / 4)};
      sampler.add(p);
    }
    return sampler.to_json();
  };
  const nlohmann::json none = sampled(0), one = sampled(1), two = sampled(2);
  CHECK_FALSE(none.contains("loading"));
  CHECK_FALSE(none.contains("tier0_resident"));
  CHECK(none.contains("preemptions"));
  CHECK(one["loading"]["max"].size() == one["x"].size());
  CHECK(one["tier0_resident"]["max"].back() == 19);
  CHECK(one["tier0_stored"]["last"].back() == 190);
  CHECK_FALSE(one.contains("tier1_resident"));
  CHECK(two["tier1_resident"]["max"].back() == 38);
  CHECK(two["tier1_loaded"]["last"].back() == 4);
  // A replay's sampler keeps five figures whatever it is given.
  CHECK_FALSE(TimelineSampler(8, /*simulate=*/false, 2).to_json().contains("loading"));

  nlohmann::json report = small_report("sim.jsonl");
  report["scheduler"] = {{"preemptions", 0}};
  report["prefix_cache"] = {
      {"hit_rate", 0.1}, {"hit_rate_with_tiers", 0.25}, {"query_tokens", 1000}};
  const std::string plain = kvreplay::render_run_html(report, TimelineSampler(8, true), "step");
  CHECK(plain.find(R"("tiers":[)") == std::string::npos);
  CHECK(plain.find("tier0_resident") == std::string::npos);
  CHECK(plain.find("hit rate with the offload tiers") == std::string::npos);
  report["offload"] = {{"tiers",
                        {{"cpu",
                          {{"capacity_blocks", 64},
                           {"capacity_bytes", 134217728},
                           {"hit_tokens", 120},
                           {"load_ms", {{"p99", 2.5}}}}},
                         {"disk",
                          {{"capacity_blocks", 512},
                           {"capacity_bytes", 1073741824},
                           {"hit_tokens", 30},
                           {"load_ms", {{"p99", 40.0}}}}}}}};
  const std::string page = kvreplay::render_run_html(report, TimelineSampler(8, true, 2), "step");
  CHECK(page.find("hit rate with the offload tiers") != std::string::npos);
  CHECK(page.find("25.00%") != std::string::npos);
  CHECK(page.find("cpu tier (128.0 MiB per GPU): prompt tokens hit · load p99") !=
        std::string::npos);
  CHECK(page.find("12.00% · 2.50 ms") != std::string::npos);
  CHECK(page.find("disk tier (1.0 GiB per GPU)") != std::string::npos);
  CHECK(page.find("3.00% · 40.0 ms") != std::string::npos);
  CHECK(
      page.find(
          R"("tiers":[{"capacity_blocks":64,"name":"cpu"},{"capacity_blocks":512,"name":"disk"}])") !=
      std::string::npos);
  nlohmann::json idle = report;
  idle["offload"]["tiers"]["disk"]["load_ms"] = {{"count", 0}, {"p99", 0.0}};
  const std::string idle_page =
      kvreplay::render_run_html(idle, TimelineSampler(8, true, 2), "step");
  CHECK(idle_page.find("3.00% · -") != std::string::npos);  // no load: no load time
  // Loads for preempted requests coming back are said apart from the share.
  CHECK(page.find("at readmissions") == std::string::npos);
  nlohmann::json reloaded = report;
  reloaded["offload"]["tiers"]["cpu"]["hit_tokens"] = 0;
  reloaded["offload"]["tiers"]["cpu"]["preempted_hit_tokens"] = 64;
  const std::string reloaded_page =
      kvreplay::render_run_html(reloaded, TimelineSampler(8, true, 2), "step");
  CHECK(reloaded_page.find("0.00% (+64 tokens at readmissions) · 2.50 ms") != std::string::npos);
}
