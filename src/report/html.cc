#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

#include "report/assets.h"
#include "report/report.h"

namespace kvreplay {

namespace {

constexpr std::array<const char*, TimelineSampler::kFigures> kFigureNames{"used_blocks",
                                                                          "waste_ratio",
                                                                          "logical_tokens",
                                                                          "physical_tokens",
                                                                          "cow_copies",
                                                                          "in_use_blocks",
                                                                          "t",
                                                                          "cached_blocks",
                                                                          "running",
                                                                          "waiting",
                                                                          "preemptions",
                                                                          "loading",
                                                                          "tier0_resident",
                                                                          "tier0_stored",
                                                                          "tier0_loaded",
                                                                          "tier1_resident",
                                                                          "tier1_stored",
                                                                          "tier1_loaded"};

std::array<double, TimelineSampler::kFigures> figures_of(const TimelinePoint& p) {
  return {p.used_blocks,
          p.waste_ratio,
          p.logical_tokens,
          p.physical_tokens,
          p.cow_copies,
          p.in_use_blocks,
          p.t,
          p.cached_blocks,
          p.running,
          p.waiting,
          p.preemptions,
          p.loading,
          p.tier_resident[0],
          p.tier_stored[0],
          p.tier_loaded[0],
          p.tier_resident[1],
          p.tier_stored[1],
          p.tier_loaded[1]};
}

// A figure as JSON: integral values as integers, ratios to 6 decimals, so the
// page stays small and its text depends only on the values.
nlohmann::json figure_json(double value) {
  if (!std::isfinite(value)) return nullptr;
  if (value == std::floor(value) && std::fabs(value) < 9.0e15) {
    return static_cast<std::int64_t>(value);
  }
  return std::round(value * 1e6) / 1e6;
}

// The length of the valid UTF-8 sequence at the start of `text`, or 0.
std::size_t utf8_sequence(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char first = byte(0);
  if (first < 0x80) return 1;
  std::size_t length = first >= 0xC2 && first <= 0xDF   ? 2
                       : first >= 0xE0 && first <= 0xEF ? 3
                       : first >= 0xF0 && first <= 0xF4 ? 4
                                                        : 0;
  if (length == 0 || text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if ((first == 0xE0 && byte(1) < 0xA0) || (first == 0xED && byte(1) >= 0xA0) ||
      (first == 0xF0 && byte(1) < 0x90) || (first == 0xF4 && byte(1) >= 0x90)) {
    return 0;
  }
  return length;
}

// Text for HTML: markup characters escaped, and bytes that are not UTF-8 (a
// file name can hold any) replaced by U+FFFD, so the page is valid UTF-8.
std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const std::size_t length = utf8_sequence(text);
    if (length != 1) {
      out.append(length == 0 ? std::string_view("\xEF\xBF\xBD") : text.substr(0, length));
      text.remove_prefix(length == 0 ? 1 : length);
      continue;
    }
    const char c = text.front();
    text.remove_prefix(1);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// JSON text safe inside <script>: ASCII only (invalid UTF-8 replaced), and no
// '<', '>' or '&' that could end the element.
std::string script_json(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A scalar of the report as table text.
std::string value_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) return fmt::format("{:.6g}", value.get<double>());
  if (value.is_null()) return "-";
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A non-negative integer (a count, a byte size), however the JSON holds it.
bool is_count(const nlohmann::json& value) {
  return value.is_number_integer() && value.get<std::int64_t>() >= 0;
}

// Rows "key.sub: value" of one report section, nested objects flattened.
void flatten(const nlohmann::json& value, const std::string& prefix, std::string& rows) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [key, child] : value.items()) {
      flatten(child, prefix.empty() ? key : prefix + "." + key, rows);
    }
    return;
  }
  std::string text;
  if (value.is_array()) {
    if (value.empty()) {
      text = "none";
    } else {
      for (const auto& element : value) {
        if (!text.empty()) text += "; ";
        text += element.is_object()
                    ? element.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    : value_text(element);
      }
    }
  } else if (is_count(value) && prefix.size() > 5 &&
             prefix.compare(prefix.size() - 5, 5, "bytes") == 0) {
    text = bytes_text(value.get<std::uint64_t>());  // sizes in GiB (MiB, KiB), not bytes
  } else {
    text = value_text(value);
  }
  rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", escape_html(prefix), escape_html(text));
}

// The report's sections as tables, in reading order (sections this page does
// not know come last, sorted); `timing`, the version key and top-level scalars
// (the status, shown above) left out.
std::string report_tables(const nlohmann::json& report) {
  static constexpr std::array<std::string_view, 13> kOrder{
      "trace", "blocks",   "tokens",       "fragmentation", "sharing", "cow",       "invariants",
      "oom",   "requests", "prefix_cache", "scheduler",     "config",  "simulation"};
  std::vector<std::string> sections;
  for (std::string_view key : kOrder) {
    if (report.contains(key)) sections.emplace_back(key);
  }
  for (const auto& [key, value] : report.items()) {
    if (std::find(kOrder.begin(), kOrder.end(), key) == kOrder.end()) sections.push_back(key);
  }
  std::string out;
  for (const std::string& section : sections) {
    const nlohmann::json& value = report[section];
    if (section == "timing" || !value.is_object()) continue;
    std::string rows;
    flatten(value, "", rows);
    out += fmt::format("<table class=\"figures\"><caption>{}</caption>\n{}</table>\n",
                       escape_html(section), rows);
  }
  return out;
}

const nlohmann::json& at_path(const nlohmann::json& report,
                              std::initializer_list<const char*> path) {
  static const nlohmann::json kNull;
  const nlohmann::json* node = &report;
  for (const char* key : path) {
    if (!node->is_object() || !node->contains(key)) return kNull;
    node = &(*node)[key];
  }
  return *node;
}

std::string card(std::string_view label, const std::string& value, std::string_view css = "") {
  return fmt::format(
      "<div class=\"card{}{}\"><div class=\"label\">{}</div><div "
      "class=\"value\">{}</div></div>\n",
      css.empty() ? "" : " ", css, escape_html(label), escape_html(value));
}

std::string percent_text(const nlohmann::json& ratio) {
  return ratio.is_number() ? fmt::format("{:.2f}%", ratio.get<double>() * 100.0) : "-";
}

// What makes an ok simulation less than fine, "" when nothing does:
// "overloaded" (overload.overloaded), "SLO 42.5%" (slo.attainment below
// kSloAttained, floored to a hundredth of a percent so it never reads 99%).
constexpr double kSloAttained = 0.99;  // plan's default --slo-attainment

std::string run_concerns(const nlohmann::json& report) {
  std::string out;
  if (at_path(report, {"overload", "overloaded"}) == true) out = "overloaded";
  const nlohmann::json& attainment = at_path(report, {"slo", "attainment"});
  if (attainment.is_number() && attainment.get<double>() < kSloAttained) {
    const double percent = std::floor(attainment.get<double>() * 10000.0) / 100.0;
    out += fmt::format("{}SLO {:g}%", out.empty() ? "" : " · ", percent);
  } else if (at_path(report, {"slo", "met"}) == false) {
    out += fmt::format("{}SLO missed", out.empty() ? "" : " · ");
  }
  return out;
}

// The page's style and script are assets/report.css and assets/report.js,
// embedded at build time (report/assets.h). The script draws every chart
// described in the page's data and sets data-drawn on <html>; it builds SVG as
// markup (the HTML parser puts it in the SVG namespace), so the page names no
// URL at all.
std::string page(std::string_view title, std::string_view subtitle, const std::string& body,
                 const nlohmann::json& data) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>{}</title>\n<style>\n{}</style>\n</head>\n<body>\n",
                     escape_html(title), assets::report_css());
  out += fmt::format("<h1>{}</h1>\n<div class=\"sub\">{}</div>\n", escape_html(title),
                     escape_html(subtitle));
  out += body;
  out += fmt::format("<script type=\"application/json\" id=\"kvreplay-data\">{}</script>\n",
                     script_json(data));
  out += fmt::format("<script>\n{}</script>\n</body>\n</html>\n", assets::report_js());
  return out;
}

// --offload: the tiers of a run's report in lookup order (cpu, then disk: the
// report's keys' order too), each {name, capacity_blocks}, named in the
// timeline by their index (tierK_...). Empty without offload.
nlohmann::json tier_list(const nlohmann::json& report) {
  nlohmann::json list = nlohmann::json::array();
  const nlohmann::json& tiers = at_path(report, {"offload", "tiers"});
  if (!tiers.is_object()) return list;
  for (const auto& [name, tier] : tiers.items()) {
    list.push_back({{"name", name}, {"capacity_blocks", at_path(tier, {"capacity_blocks"})}});
  }
  return list;
}

// --offload: the hit rate the GPU cache and the tiers reach together, and per
// tier its size, the share of prompt tokens it served and its load times.
std::string offload_cards(const nlohmann::json& report) {
  const nlohmann::json& tiers = at_path(report, {"offload", "tiers"});
  if (!tiers.is_object()) return {};
  std::string body = card("hit rate with the offload tiers",
                          percent_text(at_path(report, {"prefix_cache", "hit_rate_with_tiers"})));
  const nlohmann::json& queries = at_path(report, {"prefix_cache", "query_tokens"});
  // A tier's size is per GPU: a fleet's report sums its instances', so its
  // page shows one instance's (every instance has the same tiers).
  const nlohmann::json& instances = at_path(report, {"instances"});
  const nlohmann::json& sized = instances.is_array() && !instances.empty()
                                    ? at_path(instances[0], {"offload", "tiers"})
                                    : tiers;
  for (const auto& [name, tier] : tiers.items()) {
    const nlohmann::json& capacity = at_path(sized, {name.c_str(), "capacity_bytes"});
    const nlohmann::json& hits = at_path(tier, {"hit_tokens"});
    const nlohmann::json share =
        is_count(queries) && is_count(hits) && queries.get<std::uint64_t>() > 0
            ? nlohmann::json(static_cast<double>(hits.get<std::uint64_t>()) /
                             static_cast<double>(queries.get<std::uint64_t>()))
            : nlohmann::json();
    // The share counts first admissions (as the GPU hit rate does); a tier's
    // loads for preempted requests coming back are said apart.
    const nlohmann::json& again = at_path(tier, {"preempted_hit_tokens"});
    const std::string readmitted =
        is_count(again) && again.get<std::uint64_t>() > 0
            ? fmt::format(" (+{} tokens at readmissions)", again.get<std::uint64_t>())
            : std::string();
    // No load, no load time (not 0 ms).
    const nlohmann::json p99 = at_path(tier, {"load_ms", "count"}) == 0
                                   ? nlohmann::json()
                                   : at_path(tier, {"load_ms", "p99"});
    body += card(fmt::format("{} tier ({} per GPU): prompt tokens hit · load p99", name,
                             is_count(capacity) ? bytes_text(capacity.get<std::uint64_t>())
                                                : std::string("-")),
                 fmt::format("{}{} · {}", percent_text(share), readmitted,
                             p99.is_number() ? ms_text(p99.get<double>()) : std::string("-")));
  }
  return body;
}

// The cards atop a replay or simulate page (and a fleet's): status, memory,
// invariants, and for a simulation requests, hits and latencies.
std::string run_cards(const nlohmann::json& report, bool simulate) {
  const std::string status = value_text(at_path(report, {"status"}));
  const std::string concerns = run_concerns(report);
  std::string body;
  // Green only for a run that is ok and kept its promises: an ok run that was
  // overloaded or missed its SLOs is amber, saying which.
  if (status != "ok") {
    body += card("status", status, "bad");
  } else if (!concerns.empty()) {
    body += card("status", concerns, "warn");
  } else {
    body += card("status", status, "good");
  }
  body += card("peak used blocks",
               fmt::format("{} of {}", value_text(at_path(report, {"blocks", "peak_used"})),
                           value_text(at_path(report, {"blocks", "total"}))));
  body += card("waste at peak",
               percent_text(at_path(report, {"fragmentation", "waste_ratio_at_peak"})));
  body += card("mean waste", percent_text(at_path(report, {"fragmentation", "waste_ratio_mean"})));
  body += card("COW copies", value_text(at_path(report, {"cow", "copies"})));
  const nlohmann::json& violations = at_path(report, {"invariants", "violations"});
  const std::size_t violation_count = violations.is_array() ? violations.size() : 0;
  body += card("invariant violations",
               fmt::format("{} ({} checks)", violation_count,
                           value_text(at_path(report, {"invariants", "checks"}))),
               violation_count == 0 ? "good" : "bad");
  body += card("failed allocations (OOM)", value_text(at_path(report, {"oom", "events"})));
  if (simulate) {
    body += card("requests finished",
                 fmt::format("{} of {}", value_text(at_path(report, {"requests", "finished"})),
                             value_text(at_path(report, {"requests", "total"}))));
    body += card("peak blocks in use by requests",
                 fmt::format("{} of {}", value_text(at_path(report, {"blocks", "peak_in_use"})),
                             value_text(at_path(report, {"blocks", "total"}))));
    body += card("preemptions", value_text(at_path(report, {"scheduler", "preemptions"})));
    body +=
        card("prefix-cache hit rate", percent_text(at_path(report, {"prefix_cache", "hit_rate"})));
    body += offload_cards(report);
    // The pool the engine's startup rule gave one GPU, and where it went.
    const nlohmann::json& rule = at_path(report, {"config", "kv_memory_rule"});
    if (rule.is_object() && is_count(at_path(rule, {"kv_bytes_per_gpu"}))) {
      auto gib = [&](const char* key) {
        const nlohmann::json& v = at_path(rule, {key});
        return is_count(v) ? bytes_text(v.get<std::uint64_t>()) : std::string("-");
      };
      body += card(fmt::format("KV memory a GPU ({} {})", value_text(at_path(rule, {"engine"})),
                               value_text(at_path(rule, {"engine_version"}))),
                   fmt::format("{} (weights {}, activation {}, CUDA graphs {}, non-torch {})",
                               gib("kv_bytes_per_gpu"), gib("weights_bytes_per_gpu"),
                               gib("activation_bytes_per_gpu"), gib("cuda_graph_bytes_per_gpu"),
                               gib("non_torch_bytes_per_gpu")));
    }
    const nlohmann::json& in_use_bytes = at_path(report, {"memory", "peak_in_use_bytes"});
    const nlohmann::json& instances = at_path(report, {"instances"});
    const nlohmann::json& block_bytes = at_path(report, {"config", "block_bytes"});
    if (instances.is_array() && is_count(block_bytes)) {
      // A fleet's report sums its instances' peaks: per GPU is the fullest
      // instance's (a GPU of an instance holds its pool's share of each block).
      std::uint64_t peak = 0;
      for (const nlohmann::json& one : instances) {
        const nlohmann::json& blocks = at_path(one, {"blocks", "peak_in_use"});
        if (is_count(blocks)) peak = std::max(peak, blocks.get<std::uint64_t>());
      }
      body += card("peak KV memory in use, per GPU (fullest instance)",
                   bytes_text(peak * block_bytes.get<std::uint64_t>()));
    } else if (is_count(in_use_bytes)) {
      body += card("peak KV memory in use, per GPU", bytes_text(in_use_bytes.get<std::uint64_t>()));
    }
    auto ms = [&](std::initializer_list<const char*> where) {
      const nlohmann::json& v = at_path(report, where);
      return v.is_number() ? ms_text(v.get<double>()) : std::string("-");
    };
    body += card("TTFT p50 / p95 / p99", ms({"latency", "ttft_ms", "p50"}) + " / " +
                                             ms({"latency", "ttft_ms", "p95"}) + " / " +
                                             ms({"latency", "ttft_ms", "p99"}));
    body += card("TPOT p50 / p95 / p99", ms({"latency", "tpot_ms", "p50"}) + " / " +
                                             ms({"latency", "tpot_ms", "p95"}) + " / " +
                                             ms({"latency", "tpot_ms", "p99"}));
    if (at_path(report, {"latency", "itl_ms", "count"}).is_number()) {
      body += card("ITL p50 / p95 / p99", ms({"latency", "itl_ms", "p50"}) + " / " +
                                              ms({"latency", "itl_ms", "p95"}) + " / " +
                                              ms({"latency", "itl_ms", "p99"}));
    }
    const nlohmann::json& attainment = at_path(report, {"slo", "attainment"});
    if (attainment.is_number()) {
      body += card("SLO joint attainment", percent_text(attainment),
                   attainment.get<double>() < kSloAttained ? "warn" : "good");
    }
    // --slo: each target, its value against its limit.
    const nlohmann::json& targets = at_path(report, {"slo", "targets"});
    for (std::size_t i = 0; targets.is_array() && i < targets.size(); ++i) {
      const nlohmann::json& t = targets[i];
      const nlohmann::json& value = at_path(t, {"value_ms"});
      body += card(fmt::format("SLO {} {} (limit {} ms)", value_text(at_path(t, {"metric"})),
                               "p" + value_text(at_path(t, {"percentile"})),
                               value_text(at_path(t, {"limit_ms"}))),
                   value.is_number() ? ms_text(value.get<double>()) : std::string("-"),
                   at_path(t, {"met"}) == true ? "good" : "bad");
    }
    const nlohmann::json& ratio = at_path(report, {"overload", "ratio"});
    if (ratio.is_number()) {
      const bool overloaded = at_path(report, {"overload", "overloaded"}) == true;
      body += card(overloaded ? "overloaded: time / arrival span" : "time / arrival span",
                   fmt::format("{:.2f}x", ratio.get<double>()), overloaded ? "bad" : "good");
    }
  }
  return body;
}

}  // namespace

TimelineSampler::TimelineSampler(std::size_t max_buckets, bool simulate, std::size_t tiers)
    : max_buckets_(max_buckets), simulate_(simulate), tiers_(simulate ? tiers : 0) {
  assert(max_buckets >= 2 && max_buckets % 2 == 0);
  assert(tiers <= TimelinePoint::kTiers);
  buckets_.reserve(max_buckets);
}

void TimelineSampler::add(const TimelinePoint& point) {
  const auto values = figures_of(point);
  ++points_;
  if (buckets_.empty() || open_count_ == per_bucket_) {
    if (buckets_.size() == max_buckets_) {
      // Merge neighbours pairwise: every bucket now covers twice the points.
      for (std::size_t i = 0; i < max_buckets_ / 2; ++i) {
        const Bucket& a = buckets_[2 * i];
        const Bucket& b = buckets_[2 * i + 1];
        Bucket merged = b;
        for (std::size_t f = 0; f < kFigures; ++f) {
          merged.min[f] = std::min(a.min[f], b.min[f]);
          merged.max[f] = std::max(a.max[f], b.max[f]);
        }
        buckets_[i] = merged;
      }
      buckets_.resize(max_buckets_ / 2);
      per_bucket_ *= 2;
    }
    buckets_.push_back(Bucket{point.x, values, values, values});
    open_count_ = 1;
    return;
  }
  Bucket& open = buckets_.back();
  open.x_last = point.x;
  for (std::size_t f = 0; f < kFigures; ++f) {
    open.min[f] = std::min(open.min[f], values[f]);
    open.max[f] = std::max(open.max[f], values[f]);
    open.last[f] = values[f];
  }
  ++open_count_;
}

nlohmann::json TimelineSampler::to_json() const {
  nlohmann::json out;
  out["points"] = points_;
  out["per_bucket"] = per_bucket_;
  nlohmann::json xs = nlohmann::json::array();
  for (const Bucket& b : buckets_) xs.push_back(b.x_last);
  out["x"] = std::move(xs);
  const std::size_t figures = !simulate_   ? kReplayFigures
                              : tiers_ > 0 ? kSimulateFigures + 1 + kFiguresPerTier * tiers_
                                           : kSimulateFigures;
  for (std::size_t f = 0; f < figures; ++f) {
    nlohmann::json lo = nlohmann::json::array(), hi = nlohmann::json::array(),
                   last = nlohmann::json::array();
    for (const Bucket& b : buckets_) {
      lo.push_back(figure_json(b.min[f]));
      hi.push_back(figure_json(b.max[f]));
      last.push_back(figure_json(b.last[f]));
    }
    out[kFigureNames[f]] = {
        {"min", std::move(lo)}, {"max", std::move(hi)}, {"last", std::move(last)}};
  }
  return out;
}

std::string render_run_html(const nlohmann::json& report, const TimelineSampler& timeline,
                            std::string_view x_label, const nlohmann::json& latency_cdf) {
  const bool simulate = report.contains("scheduler");
  const std::string path = value_text(at_path(report, {"trace", "path"}));
  std::string title = fmt::format("kvreplay {}: {}", simulate ? "simulate" : "replay", path);
  const std::string status = value_text(at_path(report, {"status"}));
  const std::string concerns = run_concerns(report);
  std::string subtitle = fmt::format(
      "{} · {} {} · status {}{}", value_text(at_path(report, {"trace", "format"})),
      value_text(at_path(report, {"trace", "events"})), simulate ? "requests" : "events", status,
      concerns.empty() ? std::string() : fmt::format(" ({})", concerns));

  std::string body = "<div class=\"cards\">\n" + run_cards(report, simulate);
  body += fmt::format("</div>\n<h2>Over {}</h2>\n<div class=\"charts\" id=\"charts\"></div>\n",
                      simulate ? "virtual time" : "time");
  if (timeline.per_bucket() == 1) {
    body +=
        fmt::format("<p class=\"note\">{} {}s, one point each.</p>\n", timeline.points(), x_label);
  } else {
    body += fmt::format(
        "<p class=\"note\">{} {}s, downsampled: each point covers {} consecutive {}s; the line "
        "is their maximum and the band spans their minimum to maximum (cumulative counts: the "
        "last).</p>\n",
        timeline.points(), x_label, timeline.per_bucket(), x_label);
  }
  body += "<h2>Summary</h2>\n<div class=\"tables\">\n" + report_tables(report) + "</div>\n";

  nlohmann::json data;
  data["kind"] = "run";
  data["x_label"] = std::string(x_label);
  data["pool_blocks"] = at_path(report, {"blocks", "total"});
  data["timeline"] = timeline.to_json();
  if (simulate) {
    data["block_bytes"] = at_path(report, {"config", "block_bytes"});
    data["cdf"] = latency_cdf.is_object() ? latency_cdf : nlohmann::json::object();
    data["slo"] = {{"ttft_ms", at_path(report, {"slo", "ttft_ms"})},
                   {"tpot_ms", at_path(report, {"slo", "tpot_ms"})}};
    if (nlohmann::json tiers = tier_list(report); !tiers.empty()) data["tiers"] = std::move(tiers);
  }
  return page(title, subtitle, body, data);
}

std::string render_fleet_html(const nlohmann::json& report,
                              const std::vector<TimelineSampler>& timelines,
                              const nlohmann::json& latency_cdf,
                              const nlohmann::json& single_pool) {
  const std::string path = value_text(at_path(report, {"trace", "path"}));
  const std::string title = fmt::format("kvreplay simulate: {}", path);
  const std::string status = value_text(at_path(report, {"status"}));
  const std::string concerns = run_concerns(report);
  const nlohmann::json empty = nlohmann::json::array();
  const nlohmann::json& instances = report.contains("instances") ? report["instances"] : empty;
  const nlohmann::json& fleet = at_path(report, {"fleet"});
  const bool disaggregated = at_path(fleet, {"prefill"}).is_number();
  const std::string shape = disaggregated ? fmt::format("{} prefill + {} decode instances",
                                                        value_text(at_path(fleet, {"prefill"})),
                                                        value_text(at_path(fleet, {"decode"})))
                                          : fmt::format("{} instances", instances.size());
  const std::string router = value_text(at_path(fleet, {"router", "policy"}));
  const std::string subtitle =
      fmt::format("{} · {} requests · {}, router {} · status {}{}",
                  value_text(at_path(report, {"trace", "format"})),
                  value_text(at_path(report, {"trace", "events"})), shape, router, status,
                  concerns.empty() ? std::string() : fmt::format(" ({})", concerns));

  std::string body = "<div class=\"cards\">\n";
  body += card("fleet", fmt::format("{} · {} GPUs · router {}", shape,
                                    value_text(at_path(fleet, {"gpus"})), router));
  body += card("imbalance: max / mean requests routed",
               at_path(fleet, {"imbalance", "requests"}).is_number()
                   ? fmt::format("{:.2f}", at_path(fleet, {"imbalance", "requests"}).get<double>())
                   : std::string("-"));
  if (disaggregated) {
    const nlohmann::json& ms = at_path(fleet, {"kv_transfer", "ms"});
    body += card("KV transfer p50 / p99",
                 at_path(ms, {"p50"}).is_number()
                     ? ms_text(ms["p50"].get<double>()) + " / " + ms_text(ms["p99"].get<double>())
                     : std::string("-"));
  }
  const nlohmann::json& fleet_hit = at_path(report, {"prefix_cache", "hit_rate"});
  const nlohmann::json& pool_hit = at_path(single_pool, {"hit_rate"});
  if (fleet_hit.is_number() && pool_hit.is_number()) {
    body += card(fmt::format("hit rate: this router / one pool as large as the fleet ({} blocks)",
                             value_text(at_path(single_pool, {"pool_blocks"}))),
                 percent_text(fleet_hit) + " / " + percent_text(pool_hit));
  }
  const nlohmann::json& per_million =
      at_path(report, {"cost_usd", "usd_per_million_output_tokens"});
  if (per_million.is_number()) {
    body += card("$ per million output tokens", fmt::format("{:.2f}", per_million.get<double>()));
  }
  body += run_cards(report, /*simulate=*/true);
  body += "</div>\n<h2>Over virtual time, one line per instance</h2>\n";
  body += "<div class=\"charts\" id=\"charts\"></div>\n";
  std::uint64_t steps = 0;
  std::uint64_t per_bucket = 1;
  for (const TimelineSampler& t : timelines) {
    steps += t.points();
    per_bucket = std::max(per_bucket, t.per_bucket());
  }
  body += fmt::format(
      "<p class=\"note\">{} steps over {} instances{}.</p>\n", steps, timelines.size(),
      per_bucket == 1 ? std::string(", one point each")
                      : fmt::format(", downsampled to at most {} points an instance: the line is "
                                    "each point's maximum and the band its minimum to maximum",
                                    TimelineSampler::kFleetBuckets));

  body += "<h2>Instances</h2>\n<div class=\"scroll\"><table class=\"sweep\">\n<tr>";
  body +=
      "<th>instance</th><th>role</th><th>routed requests</th><th>finished</th><th>hit "
      "rate</th><th>peak in use</th><th>preemptions</th><th>p99 TTFT</th><th>p99 TPOT</th></tr>\n";
  auto p99 = [](const nlohmann::json& i, const char* name) {
    const nlohmann::json& v = at_path(i, {"latency", name, "p99"});
    // None measured (a prefill instance's TPOT): no figure, not 0.
    if (at_path(i, {"latency", name, "count"}) == 0) return std::string("-");
    return v.is_number() ? ms_text(v.get<double>()) : std::string("-");
  };
  nlohmann::json series = nlohmann::json::array();
  for (std::size_t k = 0; k < instances.size(); ++k) {
    const nlohmann::json& i = instances[k];
    const std::string role = value_text(at_path(i, {"role"}));
    body += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        k, escape_html(role), value_text(at_path(i, {"routed", "requests"})),
        value_text(at_path(i, {"requests", "finished"})),
        percent_text(at_path(i, {"prefix_cache", "hit_rate"})),
        value_text(at_path(i, {"blocks", "peak_in_use"})),
        value_text(at_path(i, {"blocks", "total"})),
        value_text(at_path(i, {"scheduler", "preemptions"})), p99(i, "ttft_ms"), p99(i, "tpot_ms"));
    nlohmann::json one = {{"name", fmt::format("{} {}", k, role)},
                          {"pool_blocks", at_path(i, {"blocks", "total"})}};
    if (nlohmann::json tiers = tier_list(i); !tiers.empty()) one["tiers"] = std::move(tiers);
    if (k < timelines.size()) one["timeline"] = timelines[k].to_json();
    series.push_back(std::move(one));
  }
  body += "</table></div>\n";
  body +=
      "<h2>Summary (the fleet)</h2>\n<div class=\"tables\">\n" + report_tables(report) + "</div>\n";

  nlohmann::json data;
  data["kind"] = "fleet";
  data["instances"] = std::move(series);
  data["cdf"] = latency_cdf.is_object() ? latency_cdf : nlohmann::json::object();
  data["slo"] = {{"ttft_ms", at_path(report, {"slo", "ttft_ms"})},
                 {"tpot_ms", at_path(report, {"slo", "tpot_ms"})}};
  return page(title, subtitle, body, data);
}

namespace {

// A fleet sweep's answers (plan.json's min_fleet): the fewest GPUs overall,
// then each router's fewest.
std::string fleet_answer_table(const nlohmann::json& answers, bool slo) {
  if (!answers.is_array() || answers.empty()) return std::string();
  std::string body = fmt::format(
      "<h2>Fewest GPUs{} (then the lowest $)</h2>\n<table class=\"sweep\">\n"
      "<tr><th>model</th><th>page</th><th>router</th><th>GPUs</th><th>deployment</th>"
      "<th>$ an hour</th><th>$ per million output tokens</th><th>hit rate</th>"
      "<th>verified</th></tr>\n",
      slo ? " meeting the SLOs" : " with no preemption");
  auto usd = [](const nlohmann::json& v) {
    return v.is_number() ? fmt::format("${:.3f}", v.get<double>()) : std::string("-");
  };
  auto row = [&](const nlohmann::json& a, const nlohmann::json& m, const std::string& router,
                 const std::string& verified) {
    const bool found = at_path(m, {"deployment"}).is_object();
    return fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td></tr>\n",
        escape_html(value_text(at_path(a, {"model"}))),
        escape_html(value_text(at_path(a, {"page_tokens"}))), escape_html(router),
        escape_html(found ? value_text(at_path(m, {"gpus"})) : std::string("-")),
        escape_html(found ? value_text(at_path(m, {"deployment", "label"}))
                          : std::string("none of those swept")),
        escape_html(usd(at_path(m, {"usd_per_hour"}))),
        escape_html(usd(at_path(m, {"usd_per_million_output_tokens"}))),
        escape_html(found ? percent_text(at_path(m, {"hit_rate"})) : std::string("-")),
        escape_html(verified));
  };
  for (const nlohmann::json& a : answers) {
    body += row(a, a, "best of all",
                at_path(a, {"verified"}) == true ? "simulated again: same figures" : "-");
    const nlohmann::json& by_router = at_path(a, {"by_router"});
    if (!by_router.is_array()) continue;
    for (const nlohmann::json& r : by_router) {
      body += row(a, r, value_text(at_path(r, {"router"})), "");
    }
  }
  return body + "</table>\n";
}

// --objective: the best serving cell, or the nearest miss and what binds it.
std::string objective_section(const nlohmann::json& objective, const std::string& trace) {
  if (!objective.is_object()) return std::string();
  const nlohmann::json& answer = at_path(objective, {"answer"});
  const nlohmann::json& miss = at_path(objective, {"nearest_miss"});
  const bool found = answer.is_object();
  const nlohmann::json& cell = found ? answer : miss;
  std::string body = fmt::format("<h2>Best by {}</h2>\n",
                                 escape_html(value_text(at_path(objective, {"objective"}))));
  if (!cell.is_object()) {
    return body + fmt::format("<p>{} of {} cells serve; none has a value to rank by.</p>\n",
                              escape_html(value_text(at_path(objective, {"serving_cells"}))),
                              escape_html(value_text(at_path(objective, {"cells"}))));
  }
  auto usd = [](const nlohmann::json& v) {
    return v.is_number() ? fmt::format("${:.3f}", v.get<double>()) : std::string("-");
  };
  body += fmt::format(
      "<p>{}</p>\n<table class=\"sweep\">\n<tr><th>deployment</th><th>model</th><th>page</th>"
      "<th>kv_memory</th><th>GPUs</th><th>$ an hour</th><th>$ per million output tokens</th>"
      "</tr>\n<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
      "</tr>\n</table>\n",
      found ? fmt::format("The best of the {} cells that serve:",
                          value_text(at_path(objective, {"serving_cells"})))
            : fmt::format("No swept cell serves the trace. Its nearest miss, bound by {}: {}.",
                          escape_html(value_text(at_path(miss, {"reason"}))),
                          escape_html(value_text(at_path(miss, {"shortfall"})))),
      escape_html(value_text(at_path(cell, {"deployment", "label"}))),
      escape_html(value_text(at_path(cell, {"model"}))),
      escape_html(value_text(at_path(cell, {"page_tokens"}))),
      escape_html(value_text(at_path(cell, {"kv_memory"}))),
      escape_html(value_text(at_path(cell, {"gpus"}))),
      escape_html(usd(at_path(cell, {"usd_per_hour"}))),
      escape_html(usd(at_path(cell, {"usd_per_million_output_tokens"}))));
  body += fmt::format("<pre>kvreplay simulate {} {}</pre>\n", escape_html(trace),
                      escape_html(value_text(at_path(cell, {"simulate_args"}))));
  return body;
}

}  // namespace

std::string render_plan_html(const nlohmann::json& plan) {
  const std::string path = value_text(at_path(plan, {"trace", "path"}));
  std::string title = fmt::format("kvreplay plan: {}", path);
  std::string subtitle = fmt::format("{} · {} requests · {} configurations",
                                     value_text(at_path(plan, {"trace", "format"})),
                                     value_text(at_path(plan, {"trace", "requests"})),
                                     plan.contains("cells") ? plan["cells"].size() : 0);
  std::string body = "<h2>Sweep</h2>\n<div class=\"charts\" id=\"charts\"></div>\n";
  const nlohmann::json empty = nlohmann::json::array();
  const nlohmann::json& cells = plan.contains("cells") ? plan["cells"] : empty;
  const bool deployments = std::any_of(
      cells.begin(), cells.end(), [](const nlohmann::json& c) { return c.contains("deployment"); });
  const bool slo = std::any_of(cells.begin(), cells.end(),
                               [](const nlohmann::json& c) { return c.contains("slo"); });
  body += "<h2>Configurations</h2>\n<div class=\"scroll\"><table class=\"sweep\">\n<tr>";
  if (deployments) body += "<th>deployment</th>";
  body +=
      "<th>model</th><th>page</th><th>kv_memory</th><th>blocks</th><th>peak in use</th>"
      "<th>mean waste</th><th>preemptions</th><th>hit rate</th><th>finished</th><th>skipped</th>"
      "<th>output tokens/s</th><th>p95 TTFT</th><th>p99 TTFT</th><th>p95 TPOT</th>"
      "<th>p99 TPOT</th><th>time / arrivals</th>";
  if (slo) body += "<th>SLO</th>";
  const bool tiered = std::any_of(cells.begin(), cells.end(), [](const nlohmann::json& c) {
    return at_path(c, {"prefix_cache", "hit_rate_with_tiers"}).is_number();
  });
  if (tiered) body += "<th>hit rate with tiers</th>";
  const bool priced = std::any_of(cells.begin(), cells.end(),
                                  [](const nlohmann::json& c) { return c.contains("cost_usd"); });
  if (priced) body += "<th>$ per million output tokens</th>";
  body += "</tr>\n";
  auto latency = [](const nlohmann::json& c, const char* name, const char* percentile) {
    const nlohmann::json& v = at_path(c, {"latency", name, percentile});
    return v.is_number() ? ms_text(v.get<double>()) : std::string("-");
  };
  // A cell's SLO: the joint rule's attainment, and whether every target is met.
  auto slo_text = [](const nlohmann::json& c) {
    const nlohmann::json& attainment = at_path(c, {"slo", "attainment"});
    const nlohmann::json& met = at_path(c, {"slo", "met"});
    std::string out = met.is_boolean() ? (met.get<bool>() ? "met" : "missed") : "-";
    if (attainment.is_number()) out += " · " + percent_text(attainment);
    return out;
  };
  for (const nlohmann::json& c : cells) {
    body += "<tr>";
    if (deployments) {
      body +=
          fmt::format("<td>{}</td>", escape_html(value_text(at_path(c, {"deployment", "label"}))));
    }
    const nlohmann::json& ratio = at_path(c, {"overload", "ratio"});
    body += fmt::format(
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td>",
        escape_html(value_text(at_path(c, {c.contains("label") ? "label" : "model"}))),
        escape_html(value_text(at_path(c, {"page_tokens"}))),
        escape_html(value_text(at_path(c, {"kv_memory"}))),
        // A fleet's blocks: every instance's pool, as its peaks are summed.
        escape_html(value_text(
            at_path(c, {c.contains("fleet_pool_blocks") ? "fleet_pool_blocks" : "pool_blocks"}))),
        escape_html(value_text(at_path(c, {"peak_in_use"}))),
        escape_html(percent_text(at_path(c, {"waste_ratio_mean"}))),
        escape_html(value_text(at_path(c, {"preemptions"}))),
        escape_html(percent_text(at_path(c, {"hit_rate"}))),
        escape_html(value_text(at_path(c, {"finished"}))),
        escape_html(value_text(at_path(c, {"skipped"}))),
        escape_html(value_text(at_path(c, {"output_tokens_per_second"}))),
        escape_html(latency(c, "ttft_ms", "p95")), escape_html(latency(c, "ttft_ms", "p99")),
        escape_html(latency(c, "tpot_ms", "p95")), escape_html(latency(c, "tpot_ms", "p99")),
        escape_html(
            ratio.is_number()
                ? fmt::format("{:.2f}x{}", ratio.get<double>(),
                              at_path(c, {"overload", "overloaded"}) == true ? " overloaded" : "")
                : std::string("-")));
    if (slo) body += fmt::format("<td>{}</td>", escape_html(slo_text(c)));
    if (tiered) {
      body += fmt::format(
          "<td>{}</td>",
          escape_html(percent_text(at_path(c, {"prefix_cache", "hit_rate_with_tiers"}))));
    }
    if (priced) {
      const nlohmann::json& usd = at_path(c, {"cost_usd", "usd_per_million_output_tokens"});
      body += fmt::format("<td>{}</td>", usd.is_number() ? fmt::format("${:.3f}", usd.get<double>())
                                                         : std::string("-"));
    }
    body += "</tr>\n";
  }
  body += "</table></div>\n";
  const nlohmann::json& minimum = at_path(plan, {"min_kv_memory"});
  if (minimum.is_array() && !minimum.empty()) {
    body += fmt::format(
        "<h2>Smallest KV memory with no preemption{}</h2>\n<table class=\"sweep\">\n"
        "<tr><th>model</th><th>page</th><th>blocks</th><th>KV memory a GPU</th>"
        "<th>--kv-memory</th><th>simulations</th></tr>\n",
        slo ? " meeting the SLOs" : "");
    for (const nlohmann::json& m : minimum) {
      body += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          escape_html(value_text(at_path(m, {m.contains("label") ? "label" : "model"}))),
          escape_html(value_text(at_path(m, {"page_tokens"}))),
          escape_html(at_path(m, {"pool_blocks"}).is_null()
                          ? std::string("not found")
                          : value_text(at_path(m, {"pool_blocks"}))),
          escape_html(is_count(at_path(m, {"kv_memory_bytes"}))
                          ? bytes_text(at_path(m, {"kv_memory_bytes"}).get<std::uint64_t>())
                          : std::string("-")),
          escape_html(value_text(at_path(m, {"kv_memory"}))),
          escape_html(value_text(at_path(m, {"probes"}))));
    }
    body += "</table>\n";
  }
  const nlohmann::json& smallest = at_path(plan, {"min_deployment"});
  if (smallest.is_array() && !smallest.empty()) {
    body += fmt::format(
        "<h2>Smallest deployment per GPU kind{}</h2>\n<table class=\"sweep\">\n"
        "<tr><th>model</th><th>page</th><th>GPU</th><th>deployment</th><th>KV memory a GPU</th>"
        "<th>blocks</th></tr>\n",
        slo ? " meeting the SLOs" : " with no preemption");
    for (const nlohmann::json& m : smallest) {
      const bool found = at_path(m, {"deployment"}).is_object();
      body += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          escape_html(value_text(at_path(m, {"model"}))),
          escape_html(value_text(at_path(m, {"page_tokens"}))),
          escape_html(value_text(at_path(m, {"gpu"}))),
          escape_html(found ? value_text(at_path(m, {"deployment", "label"}))
                            : std::string("none of those swept")),
          escape_html(found && is_count(at_path(m, {"kv_memory_bytes"}))
                          ? bytes_text(at_path(m, {"kv_memory_bytes"}).get<std::uint64_t>())
                          : std::string("-")),
          escape_html(found ? value_text(at_path(m, {"pool_blocks"})) : std::string("-")));
    }
    body += "</table>\n";
  }
  body += fleet_answer_table(at_path(plan, {"min_fleet"}), slo);
  body += objective_section(at_path(plan, {"objective"}), path);
  body += "<h2>Simulation settings</h2>\n<div class=\"tables\">\n" +
          report_tables(nlohmann::json{{"simulation", at_path(plan, {"simulation"})}}) + "</div>\n";

  nlohmann::json data;
  data["kind"] = "plan";
  data["deployments"] = deployments;
  data["cells"] = cells;
  data["min_kv_memory"] = minimum.is_array() ? minimum : empty;
  return page(title, subtitle, body, data);
}

}  // namespace kvreplay
