#include "report/html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>

namespace kvreplay {

namespace {

constexpr std::array<const char*, TimelineSampler::kFigures> kFigureNames{
    "used_blocks", "waste_ratio", "logical_tokens", "physical_tokens", "cow_copies"};

std::array<double, TimelineSampler::kFigures> figures_of(const TimelinePoint& p) {
  return {p.used_blocks, p.waste_ratio, p.logical_tokens, p.physical_tokens, p.cow_copies};
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

constexpr std::string_view kStyle = R"css(
:root { --fg: #1d2430; --muted: #5b6575; --line: #d8dde6; --bg: #ffffff; --panel: #f5f7fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
       Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 10px; }
.sub { color: var(--muted); margin-bottom: 16px; word-break: break-all; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
        padding: 8px 14px; min-width: 140px; }
.card .label { color: var(--muted); font-size: 12px; }
.card .value { font-size: 18px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card.bad .value { color: #b42318; }
.card.good .value { color: #1a7f37; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
.chart { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px 6px; }
.chart h3 { font-size: 14px; margin: 0 0 4px; }
.chart svg { width: 100%; height: auto; display: block; }
.chart .legend { font-size: 12px; color: var(--muted); margin-top: 2px; }
.chart .legend span { margin-right: 14px; white-space: nowrap; }
.chart .legend i { display: inline-block; width: 12px; height: 3px; margin-right: 5px;
                   vertical-align: middle; }
.chart .readout { font-size: 12px; color: var(--muted); min-height: 18px;
                  font-variant-numeric: tabular-nums; }
.note { color: var(--muted); font-size: 12px; }
.tables { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.figures caption { text-align: left; font-weight: 600; padding: 4px 0; }
table.figures th { text-align: left; font-weight: normal; color: var(--muted); padding: 2px 14px 2px 0; }
table.figures td { text-align: right; padding: 2px 0; word-break: break-all; max-width: 420px; }
table.sweep th, table.sweep td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: right; }
table.sweep th { background: var(--panel); }
table.sweep td:first-child, table.sweep th:first-child { text-align: left; }
svg text { font: 11px system-ui, sans-serif; fill: var(--muted); }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .axis { stroke: #8a93a3; stroke-width: 1; }
svg .band { stroke: none; fill-opacity: 0.22; }
svg .series-line { fill: none; stroke-width: 1.6; stroke-linejoin: round; }
svg .ref { stroke-dasharray: 5 4; stroke-width: 1.2; }
svg .cursor { stroke: #8a93a3; stroke-width: 1; }
)css";

// Draws every chart described in the page's data; sets data-drawn on <html>.
// SVG is built as markup (the HTML parser puts it in the SVG namespace), so
// the page names no URL at all.
constexpr std::string_view kScript = R"js(
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('kvreplay-data').textContent);
  var W = 720, H = 260, L = 64, R = 16, T = 12, B = 38;

  function num(v, percent) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    if (percent) return (v * 100).toFixed(Math.abs(v) < 0.1 ? 2 : 1) + '%';
    var a = Math.abs(v);
    function short(d, unit) { return String(parseFloat((v / d).toFixed(a >= 10 * d ? 0 : 1))) + unit; }
    if (a >= 1e9) return short(1e9, 'G');
    if (a >= 1e6) return short(1e6, 'M');
    if (a >= 1e4) return short(1e3, 'k');
    if (a === Math.round(a)) return String(v);
    return String(parseFloat(v.toPrecision(3)));
  }
  function niceTicks(lo, hi, count, integer) {
    if (!(hi > lo)) { hi = lo + 1; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / count)));
    var err = (hi - lo) / count / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (integer) step = Math.max(1, Math.round(step));
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }

  // spec: {title, xLabel, yLabel, percent, integer (y), integerX, x: [..], markers,
  //        series: [{name, color, lo: [..], hi: [..], x: [..] (optional)}],
  //        hlines: [{y, label, color}], vlines: [{x, label, color}]}
  function drawChart(holder, spec) {
    var xs = [], ys = [];
    spec.series.forEach(function (s) {
      var sx = s.x || spec.x;
      sx.forEach(function (v, i) {
        if (s.hi[i] === null) return;
        xs.push(v); ys.push(s.hi[i]); ys.push(s.lo[i]);
      });
    });
    (spec.hlines || []).forEach(function (h) { ys.push(h.y); });
    (spec.vlines || []).forEach(function (v) { xs.push(v.x); });
    var x0 = Math.min.apply(null, xs.concat([Infinity])), x1 = Math.max.apply(null, xs.concat([-Infinity]));
    if (!isFinite(x0)) { x0 = 0; x1 = 1; }
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    var y0 = Math.min(0, Math.min.apply(null, ys.concat([0])));
    var y1 = Math.max.apply(null, ys.concat([0]));
    if (!(y1 > y0)) y1 = y0 + (spec.percent ? 0.01 : 1);
    var yt = niceTicks(y0, y1, 5, !spec.percent && spec.integer);
    y1 = Math.max(y1, yt[yt.length - 1]);
    var xt = niceTicks(x0, x1, 6, spec.integerX);
    function px(v) { return L + (v - x0) / (x1 - x0) * (W - L - R); }
    function py(v) { return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); }
    var svg = ['<svg viewBox="0 0 ' + W + ' ' + H + '" role="img" aria-label="' + esc(spec.title) + '">'];
    yt.forEach(function (v) {
      var y = py(v).toFixed(1);
      svg.push('<line class="grid" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>');
      svg.push('<text x="' + (L - 6) + '" y="' + y + '" dy="4" text-anchor="end">' + num(v, spec.percent) + '</text>');
    });
    xt.forEach(function (v) {
      if (v < x0 || v > x1) return;
      var x = px(v).toFixed(1);
      svg.push('<line class="axis" x1="' + x + '" x2="' + x + '" y1="' + (H - B) + '" y2="' + (H - B + 4) + '"/>');
      svg.push('<text x="' + x + '" y="' + (H - B + 16) + '" text-anchor="middle">' + num(v) + '</text>');
    });
    svg.push('<line class="axis" x1="' + L + '" x2="' + (W - R) + '" y1="' + (H - B) + '" y2="' + (H - B) + '"/>');
    svg.push('<line class="axis" x1="' + L + '" x2="' + L + '" y1="' + T + '" y2="' + (H - B) + '"/>');
    svg.push('<text x="' + ((L + W - R) / 2) + '" y="' + (H - 4) + '" text-anchor="middle">' + esc(spec.xLabel) + '</text>');
    svg.push('<text transform="translate(12 ' + ((T + H - B) / 2) + ') rotate(-90)" text-anchor="middle">' + esc(spec.yLabel) + '</text>');
    (spec.hlines || []).forEach(function (h) {
      var y = py(h.y).toFixed(1);
      svg.push('<line class="ref" stroke="' + h.color + '" x1="' + L + '" x2="' + (W - R) + '" y1="' + y + '" y2="' + y + '"/>');
      var below = py(h.y) < T + 14;  // a line at the top gets its label underneath
      svg.push('<text x="' + (W - R - 4) + '" y="' + y + '" dy="' + (below ? 12 : -4) + '" text-anchor="end">' + esc(h.label) + '</text>');
    });
    (spec.vlines || []).forEach(function (v) {
      var x = px(v.x).toFixed(1);
      svg.push('<line class="ref" stroke="' + v.color + '" x1="' + x + '" x2="' + x + '" y1="' + T + '" y2="' + (H - B) + '"/>');
    });
    var paths = 0;
    spec.series.forEach(function (s) {
      var sx = s.x || spec.x, top = [], bottom = [], band = false;
      sx.forEach(function (v, i) {
        if (s.hi[i] === null) return;
        top.push(px(v).toFixed(1) + ',' + py(s.hi[i]).toFixed(1));
        bottom.push(px(v).toFixed(1) + ',' + py(s.lo[i]).toFixed(1));
        if (s.lo[i] !== s.hi[i]) band = true;
      });
      if (top.length === 0) return;
      if (band) {
        svg.push('<path class="band" fill="' + s.color + '" d="M' + top.join('L') + 'L' + bottom.reverse().join('L') + 'Z"/>');
      }
      if (top.length === 1) top.push(top[0]);
      svg.push('<path class="series-line" stroke="' + s.color + '" data-points="' + top.length + '" d="M' + top.join('L') + '"/>');
      paths++;
      if (spec.markers) {
        sx.forEach(function (v, i) {
          if (s.hi[i] === null) return;
          svg.push('<circle r="3.5" fill="' + s.color + '" cx="' + px(v).toFixed(1) + '" cy="' + py(s.hi[i]).toFixed(1) + '"/>');
        });
      }
    });
    svg.push('<line class="cursor" x1="-10" x2="-10" y1="' + T + '" y2="' + (H - B) + '"/>');
    svg.push('</svg>');
    var legend = spec.series.map(function (s) {
      return '<span><i style="background:' + s.color + '"></i>' + esc(s.name) + '</span>';
    }).concat((spec.hlines || []).map(function (h) {
      return '<span><i style="background:' + h.color + '"></i>' + esc(h.label) + '</span>';
    }));
    holder.innerHTML = '<h3>' + esc(spec.title) + '</h3>' + svg.join('') +
        '<div class="legend">' + legend.join('') + '</div><div class="readout"></div>';
    holder.setAttribute('data-paths', String(paths));
    var svgEl = holder.querySelector('svg'), cursor = holder.querySelector('.cursor');
    var readout = holder.querySelector('.readout');
    svgEl.addEventListener('mousemove', function (ev) {
      var box = svgEl.getBoundingClientRect();
      var vx = x0 + ((ev.clientX - box.left) / box.width * W - L) / (W - L - R) * (x1 - x0);
      var parts = [];
      spec.series.forEach(function (s) {
        var sx = s.x || spec.x, best = -1;
        for (var i = 0; i < sx.length; i++) {
          if (s.hi[i] !== null && (best < 0 || Math.abs(sx[i] - vx) < Math.abs(sx[best] - vx))) best = i;
        }
        if (best < 0) return;
        var range = s.lo[best] === s.hi[best] ? '' : ' (' + num(s.lo[best], spec.percent) + '\u2013' + num(s.hi[best], spec.percent) + ')';
        parts.push(s.name + ' ' + num(s.hi[best], spec.percent) + range);
        if (parts.length === 1) {
          cursor.setAttribute('x1', px(sx[best]).toFixed(1));
          cursor.setAttribute('x2', px(sx[best]).toFixed(1));
          parts[0] = spec.xLabel + ' ' + num(sx[best]) + ': ' + parts[0];
        }
      });
      readout.textContent = parts.join(', ');
    });
    return paths;
  }

  var palette = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f'];
  var specs = [];
  if (data.kind === 'run') {
    var tl = data.timeline, xl = data.x_label;
    function fig(name, label, color, lo, hi) {
      return {name: label, color: color, lo: tl[name][lo], hi: tl[name][hi]};
    }
    specs.push({id: 'chart-used', title: 'Used blocks', xLabel: xl, yLabel: 'blocks', x: tl.x, integer: true, integerX: true,
                series: [fig('used_blocks', 'used blocks', palette[0], 'min', 'max')],
                hlines: data.pool_blocks ? [{y: data.pool_blocks, label: 'pool (' + data.pool_blocks + ' blocks)', color: '#8a93a3'}] : []});
    specs.push({id: 'chart-waste', title: 'Waste ratio (unfilled slots of used blocks)', xLabel: xl,
                yLabel: 'waste', percent: true, x: tl.x, integerX: true,
                series: [fig('waste_ratio', 'waste ratio', palette[1], 'min', 'max')]});
    specs.push({id: 'chart-tokens', title: 'Logical versus physical tokens', xLabel: xl, yLabel: 'tokens', x: tl.x, integer: true, integerX: true,
                series: [fig('logical_tokens', 'logical (sequence lengths)', palette[3], 'min', 'max'),
                         fig('physical_tokens', 'physical (filled slots)', palette[2], 'min', 'max')]});
    specs.push({id: 'chart-cow', title: 'Copy-on-write copies (cumulative)', xLabel: xl, yLabel: 'copies', x: tl.x, integer: true, integerX: true,
                series: [fig('cow_copies', 'COW copies', palette[4], 'last', 'last')]});
  } else if (data.kind === 'plan') {
    var groups = [], byKey = {};
    data.cells.forEach(function (c) {
      var key = c.model + ', page ' + c.page_tokens;
      if (!(key in byKey)) { byKey[key] = groups.length; groups.push({name: key, model: c.model, page: c.page_tokens, cells: []}); }
      groups[byKey[key]].cells.push(c);
    });
    groups.forEach(function (g) { g.cells.sort(function (a, b) { return a.kv_memory_bytes - b.kv_memory_bytes; }); });
    function sweep(id, title, yLabel, value, percent, withMin) {
      var series = groups.map(function (g, i) {
        var ys = g.cells.map(value);
        return {name: g.name, color: palette[i % palette.length], x: g.cells.map(function (c) { return c.kv_memory_bytes / 1073741824; }), lo: ys, hi: ys};
      });
      var vlines = [];
      if (withMin) {
        data.min_kv_memory.forEach(function (m) {
          var i = byKey[m.model + ', page ' + m.page_tokens];
          if (m.kv_memory_bytes !== null && i !== undefined) vlines.push({x: m.kv_memory_bytes / 1073741824, color: palette[i % palette.length]});
        });
      }
      specs.push({id: id, title: title, xLabel: 'KV memory (GiB)', yLabel: yLabel, percent: percent,
                  markers: true, series: series, vlines: vlines});
    }
    sweep('chart-preemptions', 'Preemptions (dashed: smallest KV memory with none)', 'preemptions', function (c) { return c.preemptions; }, false, true);
    specs[specs.length - 1].integer = true;
    sweep('chart-peak', 'Peak used blocks (fraction of the pool)', 'peak / pool', function (c) { return c.pool_blocks ? c.peak_used / c.pool_blocks : null; }, true, false);
    sweep('chart-waste', 'Mean waste ratio', 'waste', function (c) { return c.waste_ratio_mean; }, true, false);
    sweep('chart-throughput', 'Output tokens per second (virtual time)', 'tokens/s', function (c) { return c.output_tokens_per_second; }, false, false);
  }
  var container = document.getElementById('charts'), drawn = 0;
  specs.forEach(function (spec) {
    var holder = document.createElement('div');
    holder.className = 'chart';
    holder.id = spec.id;
    container.appendChild(holder);
    if (drawChart(holder, spec) > 0) drawn++;
  });
  document.documentElement.setAttribute('data-drawn', String(drawn));
})();
)js";

std::string page(std::string_view title, std::string_view subtitle, const std::string& body,
                 const nlohmann::json& data) {
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n", escape_html(title),
                     kStyle);
  out += fmt::format("<h1>{}</h1>\n<div class=\"sub\">{}</div>\n", escape_html(title),
                     escape_html(subtitle));
  out += body;
  out += fmt::format("<script type=\"application/json\" id=\"kvreplay-data\">{}</script>\n",
                     script_json(data));
  out += fmt::format("<script>{}</script>\n</body>\n</html>\n", kScript);
  return out;
}

}  // namespace

TimelineSampler::TimelineSampler(std::size_t max_buckets) : max_buckets_(max_buckets) {
  assert(max_buckets >= 2 && max_buckets % 2 == 0);
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
  for (std::size_t f = 0; f < kFigures; ++f) {
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
                            std::string_view x_label) {
  const bool simulate = report.contains("scheduler");
  const std::string path = value_text(at_path(report, {"trace", "path"}));
  std::string title = fmt::format("kvreplay {}: {}", simulate ? "simulate" : "replay", path);
  std::string subtitle =
      fmt::format("{} · {} {} · status {}", value_text(at_path(report, {"trace", "format"})),
                  value_text(at_path(report, {"trace", "events"})),
                  simulate ? "requests" : "events", value_text(at_path(report, {"status"})));

  std::string body = "<div class=\"cards\">\n";
  const std::string status = value_text(at_path(report, {"status"}));
  body += card("status", status, status == "ok" ? "good" : "bad");
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
    body += card("preemptions", value_text(at_path(report, {"scheduler", "preemptions"})));
    body +=
        card("prefix-cache hit rate", percent_text(at_path(report, {"prefix_cache", "hit_rate"})));
  }
  body += "</div>\n<h2>Over time</h2>\n<div class=\"charts\" id=\"charts\"></div>\n";
  if (timeline.per_bucket() == 1) {
    body +=
        fmt::format("<p class=\"note\">{} {}s, one point each.</p>\n", timeline.points(), x_label);
  } else {
    body += fmt::format(
        "<p class=\"note\">{} {}s, downsampled: each point covers {} consecutive {}s; the line "
        "is their maximum and the band spans their minimum to maximum (COW copies: the "
        "last).</p>\n",
        timeline.points(), x_label, timeline.per_bucket(), x_label);
  }
  body += "<h2>Summary</h2>\n<div class=\"tables\">\n" + report_tables(report) + "</div>\n";

  nlohmann::json data;
  data["kind"] = "run";
  data["x_label"] = std::string(x_label);
  data["pool_blocks"] = at_path(report, {"blocks", "total"});
  data["timeline"] = timeline.to_json();
  return page(title, subtitle, body, data);
}

std::string render_plan_html(const nlohmann::json& plan) {
  const std::string path = value_text(at_path(plan, {"trace", "path"}));
  std::string title = fmt::format("kvreplay plan: {}", path);
  std::string subtitle = fmt::format("{} · {} requests · {} configurations",
                                     value_text(at_path(plan, {"trace", "format"})),
                                     value_text(at_path(plan, {"trace", "requests"})),
                                     plan.contains("cells") ? plan["cells"].size() : 0);
  std::string body = "<h2>Sweep</h2>\n<div class=\"charts\" id=\"charts\"></div>\n";
  body +=
      "<h2>Configurations</h2>\n<table class=\"sweep\">\n<tr><th>model</th><th>page</th>"
      "<th>kv_memory</th><th>blocks</th><th>peak used</th><th>mean waste</th>"
      "<th>preemptions</th><th>hit rate</th><th>finished</th><th>skipped</th>"
      "<th>output tokens/s</th></tr>\n";
  const nlohmann::json empty = nlohmann::json::array();
  for (const nlohmann::json& c : plan.contains("cells") ? plan["cells"] : empty) {
    body += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        escape_html(value_text(at_path(c, {"model"}))),
        escape_html(value_text(at_path(c, {"page_tokens"}))),
        escape_html(value_text(at_path(c, {"kv_memory"}))),
        escape_html(value_text(at_path(c, {"pool_blocks"}))),
        escape_html(value_text(at_path(c, {"peak_used"}))),
        escape_html(percent_text(at_path(c, {"waste_ratio_mean"}))),
        escape_html(value_text(at_path(c, {"preemptions"}))),
        escape_html(percent_text(at_path(c, {"hit_rate"}))),
        escape_html(value_text(at_path(c, {"finished"}))),
        escape_html(value_text(at_path(c, {"skipped"}))),
        escape_html(value_text(at_path(c, {"output_tokens_per_second"}))));
  }
  body += "</table>\n";
  const nlohmann::json& minimum = at_path(plan, {"min_kv_memory"});
  if (minimum.is_array() && !minimum.empty()) {
    body +=
        "<h2>Smallest KV memory with no preemption</h2>\n<table class=\"sweep\">\n"
        "<tr><th>model</th><th>page</th><th>blocks</th><th>KV memory (bytes)</th>"
        "<th>simulations</th></tr>\n";
    for (const nlohmann::json& m : minimum) {
      body += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                          escape_html(value_text(at_path(m, {"model"}))),
                          escape_html(value_text(at_path(m, {"page_tokens"}))),
                          escape_html(at_path(m, {"pool_blocks"}).is_null()
                                          ? std::string("not found")
                                          : value_text(at_path(m, {"pool_blocks"}))),
                          escape_html(value_text(at_path(m, {"kv_memory_bytes"}))),
                          escape_html(value_text(at_path(m, {"probes"}))));
    }
    body += "</table>\n";
  }
  body += "<h2>Simulation settings</h2>\n<div class=\"tables\">\n" +
          report_tables(nlohmann::json{{"simulation", at_path(plan, {"simulation"})}}) + "</div>\n";

  nlohmann::json data;
  data["kind"] = "plan";
  data["cells"] = plan.contains("cells") ? plan["cells"] : empty;
  data["min_kv_memory"] = minimum.is_array() ? minimum : empty;
  return page(title, subtitle, body, data);
}

}  // namespace kvreplay
