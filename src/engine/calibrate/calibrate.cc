#include "engine/calibrate/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>

#include "core/parallel.h"
#include "engine/load_generator.h"
#include "engine/simulator.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kMaxCsvBytes = 16u << 20;
// A measured figure outside this range is no benchmark's (1e-308 ms, say),
// and the errors, shares of it, would overflow to inf.
constexpr double kMinValue = 1e-3, kMaxValue = 1e9;
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
constexpr const char* kHeader[] = {"model",        "gpu",           "tp",
                                   "input_tokens", "output_tokens", "concurrency",
                                   "requests",     "metric",        "value"};

std::vector<std::string> split_csv(std::string_view line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  for (std::string& field : out) {  // surrounding blanks
    const auto first = field.find_first_not_of(" \t");
    const auto last = field.find_last_not_of(" \t");
    field = first == std::string::npos ? std::string() : field.substr(first, last - first + 1);
  }
  return out;
}

// An integer in [lo, hi], the whole field.
std::optional<std::uint64_t> parse_count(const std::string& text, std::uint64_t lo,
                                         std::uint64_t hi) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < lo || value > hi) {
    return std::nullopt;
  }
  return value;
}

InputResult<MeasuredRow> parse_row(const std::vector<std::string>& fields, const std::string& path,
                                   std::uint64_t line) {
  auto fail = [&](const char* field, std::string problem) {
    return Unexpected{InputError{path, line, field, std::move(problem)}};
  };
  MeasuredRow row;
  row.line = line;
  row.model = fields[0];
  row.gpu = fields[1];
  if (row.model.empty()) return fail("model", "missing (a preset, or a config.json path)");
  if (row.gpu.empty()) return fail("gpu", "missing (a GPU preset, e.g. h100-80gb)");
  struct Count {
    const char* name;
    std::uint32_t* into;
    std::uint64_t lo, hi;
  };
  const Count counts[] = {{"tp", &row.tp, 1, 64},
                          {"input_tokens", &row.input_tokens, 1, 1u << 24},
                          {"output_tokens", &row.output_tokens, 1, 1u << 24},
                          {"concurrency", &row.concurrency, 1, 1000000},
                          {"requests", &row.requests, 1, 1000000}};
  for (std::size_t i = 0; i < std::size(counts); ++i) {
    const Count& c = counts[i];
    auto value = parse_count(fields[2 + i], c.lo, c.hi);
    if (!value) {
      return fail(c.name, fmt::format("'{}' is not an integer from {} to {}",
                                      fields[2 + i].substr(0, 40), c.lo, c.hi));
    }
    *c.into = static_cast<std::uint32_t>(*value);
  }
  const std::string& metric = fields[7];
  if (auto parsed = parse_calibration_metric(metric)) {
    row.metric = *parsed;
  } else {
    return fail("metric",
                fmt::format("'{}' is none of {}", metric.substr(0, 40), calibration_metric_list()));
  }
  if ((metric_class(row.metric) == "tpot" || metric_class(row.metric) == "itl") &&
      row.output_tokens < 2) {
    return fail("output_tokens", fmt::format("1 output token has no time per output token (a "
                                             "{} row needs at least 2)",
                                             metric));
  }
  const std::string& value = fields[8];
  double x = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), x);
  if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(x) || !(x > 0)) {
    return fail("value", fmt::format("'{}' is not a positive number", value.substr(0, 40)));
  }
  if (x < kMinValue || x > kMaxValue) {
    return fail("value", fmt::format("'{}' is out of range: a measured {} is from 0.001 to 1e9 "
                                     "(the errors are shares of it, and would overflow)",
                                     value.substr(0, 40), metric));
  }
  row.value = x;
  return row;
}

// The next line of `in` into `text`, without its newline; false at the end of
// input. `bytes` counts what was read, newlines included; the read stops as
// soon as it passes `limit`, so a line of any length holds at most that much.
bool read_line(std::streambuf& in, std::string& text, std::uint64_t& bytes, std::uint64_t limit) {
  text.clear();
  for (bool any = false;; any = true) {
    const int c = in.sbumpc();
    if (c == std::char_traits<char>::eof()) return any;
    ++bytes;
    if (c == '\n') return true;
    if (bytes > limit) return true;
    text.push_back(static_cast<char>(c));
  }
}

}  // namespace

namespace {

struct MetricRow {
  CalibrationMetric metric;
  std::string_view name, klass;
  double Figures::*field;
};
constexpr MetricRow kMetrics[] = {
    {CalibrationMetric::kTtftMs, "ttft_ms", "ttft", &Figures::ttft_ms},
    {CalibrationMetric::kTtftP50Ms, "ttft_p50_ms", "ttft", &Figures::ttft_p50_ms},
    {CalibrationMetric::kTtftP99Ms, "ttft_p99_ms", "ttft", &Figures::ttft_p99_ms},
    {CalibrationMetric::kTpotMs, "tpot_ms", "tpot", &Figures::tpot_ms},
    {CalibrationMetric::kTpotP50Ms, "tpot_p50_ms", "tpot", &Figures::tpot_p50_ms},
    {CalibrationMetric::kTpotP99Ms, "tpot_p99_ms", "tpot", &Figures::tpot_p99_ms},
    {CalibrationMetric::kItlMs, "itl_ms", "itl", &Figures::itl_ms},
    {CalibrationMetric::kE2eMs, "e2e_ms", "e2e", &Figures::e2e_ms},
    {CalibrationMetric::kE2eP50Ms, "e2e_p50_ms", "e2e", &Figures::e2e_p50_ms},
    {CalibrationMetric::kE2eP99Ms, "e2e_p99_ms", "e2e", &Figures::e2e_p99_ms},
    {CalibrationMetric::kOutputTokS, "output_tok_s", "throughput", &Figures::output_tok_s},
};
const MetricRow& metric_row(CalibrationMetric metric) {
  return kMetrics[static_cast<std::size_t>(metric)];
}

// numpy's default percentile of `v` (reordered), q in [0, 100].
double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double at = q / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double below = v[lo];
  if (lo + 1 >= v.size()) return below;
  const double above = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  return below + (above - below) * (at - static_cast<double>(lo));
}

}  // namespace

std::string_view to_string(CalibrationMetric metric) {
  return metric_row(metric).name;
}
std::optional<CalibrationMetric> parse_calibration_metric(std::string_view name) {
  for (const MetricRow& m : kMetrics) {
    if (m.name == name) return m.metric;
  }
  return std::nullopt;
}
std::string calibration_metric_list() {
  std::string out;
  for (const MetricRow& m : kMetrics) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}
bool is_percentile(CalibrationMetric metric) {
  return metric_row(metric).name.find("_p") != std::string_view::npos;
}
std::string_view metric_class(CalibrationMetric metric) {
  return metric_row(metric).klass;
}

double Figures::of(CalibrationMetric metric) const {
  return this->*metric_row(metric).field;
}

Figures figures_of(const std::vector<RequestSpan>& spans, std::uint64_t measure_after,
                   bool percentiles) {
  Figures out;
  std::vector<double> ttft, tpot, e2e;
  double start = std::numeric_limits<double>::infinity(), end = 0, decode_s = 0;
  std::uint64_t tokens = 0, gaps = 0;
  for (const RequestSpan& t : spans) {
    if (t.line <= measure_after) continue;
    start = std::min(start, t.arrival);
    end = std::max(end, t.last);
    tokens += t.output;
    ttft.push_back((t.first - t.arrival) * 1e3);
    e2e.push_back((t.last - t.arrival) * 1e3);
    if (t.output > 1) {
      tpot.push_back((t.last - t.first) * 1e3 / (t.output - 1));
      decode_s += t.last - t.first;
      gaps += t.output - 1;
    }
  }
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  out.ttft_ms = mean(ttft);
  out.tpot_ms = mean(tpot);
  out.e2e_ms = mean(e2e);
  out.itl_ms = gaps > 0 ? decode_s * 1e3 / static_cast<double>(gaps) : 0;
  out.output_tok_s = end > start ? static_cast<double>(tokens) / (end - start) : 0;
  if (percentiles) {
    out.ttft_p50_ms = percentile(ttft, 50);
    out.ttft_p99_ms = percentile(ttft, 99);
    out.tpot_p50_ms = percentile(tpot, 50);
    out.tpot_p99_ms = percentile(tpot, 99);
    out.e2e_p50_ms = percentile(e2e, 50);
    out.e2e_p99_ms = percentile(e2e, 99);
  }
  return out;
}

InputResult<std::vector<MeasuredRow>> read_measured_csv(const std::string& path,
                                                        const std::string& set) {
  std::size_t set_column = 0;
  // Optional columns, by name (0: none).
  std::size_t engine_column = 0, client_column = 0, kv_column = 0, measure_column = 0,
              ratio_column = 0, style_column = 0;
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      return Unexpected{
          InputError{path, 0, "MEASURED", "cannot be read (no such file, or no access)"}};
    }
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<MeasuredRow> rows;
  std::string text;
  std::uint64_t line = 0, bytes = 0;
  while (read_line(*in.rdbuf(), text, bytes, kMaxCsvBytes)) {
    ++line;
    if (bytes > kMaxCsvBytes) {
      return Unexpected{
          InputError{path, line, "row", "past 16 MiB of input: not a measurement file"}};
    }
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (line == 1) {
      if (text.starts_with(kByteOrderMark)) text.erase(0, kByteOrderMark.size());
      const auto header = split_csv(text);
      bool ok = header.size() >= std::size(kHeader);
      for (std::size_t i = 0; ok && i < std::size(kHeader); ++i) ok = header[i] == kHeader[i];
      if (!ok) {
        return Unexpected{InputError{
            path, 1, "header",
            "expected model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,"
            "value (more columns may follow)"}};
      }
      for (auto [name, column] :
           {std::pair{"engine", &engine_column}, std::pair{"client", &client_column},
            std::pair{"kv_dtype", &kv_column}, std::pair{"measure_after", &measure_column},
            std::pair{"range_ratio", &ratio_column}, std::pair{"range_style", &style_column}}) {
        if (auto it = std::find(header.begin() + std::size(kHeader), header.end(), name);
            it != header.end()) {
          *column = static_cast<std::size_t>(it - header.begin());
        }
      }
      if (!set.empty()) {
        auto it = std::find(header.begin() + std::size(kHeader), header.end(), "set");
        if (it == header.end()) {
          return Unexpected{InputError{path, 1, "header", "no column 'set' (--set)"}};
        }
        set_column = static_cast<std::size_t>(it - header.begin());
      }
      continue;
    }
    if (text.find_first_not_of(" \t") == std::string::npos || text[0] == '#') continue;
    const auto fields = split_csv(text);
    if (fields.size() < std::size(kHeader)) {
      return Unexpected{InputError{
          path, line, "row",
          fmt::format("{} fields, expected at least {}", fields.size(), std::size(kHeader))}};
    }
    auto row = parse_row(fields, path, line);
    if (!row) return Unexpected{row.error()};
    if (!set.empty() && (set_column >= fields.size() || fields[set_column] != set)) continue;
    auto field = [&](std::size_t column) -> const std::string* {
      return column != 0 && column < fields.size() && !fields[column].empty() ? &fields[column]
                                                                              : nullptr;
    };
    if (const std::string* engine = field(engine_column)) row.value().engine = *engine;
    if (const std::string* client = field(client_column)) row.value().client = *client;
    if (const std::string* kv = field(kv_column)) row.value().kv_dtype = *kv;
    if (const std::string* after = field(measure_column)) {
      auto value = parse_count(*after, 0, 1000000);
      if (!value) {
        return Unexpected{InputError{
            path, line, "measure_after",
            fmt::format("'{}' is not an integer from 0 to 1000000", after->substr(0, 40))}};
      }
      row.value().measure_after = *value;
      if (*value >= row.value().requests) {
        return Unexpected{InputError{path, line, "measure_after",
                                     fmt::format("{} leaves none of the {} requests measured",
                                                 *value, row.value().requests)}};
      }
    }
    if (const std::string* ratio = field(ratio_column)) {
      double x = -1;
      const auto [end, error] = std::from_chars(ratio->data(), ratio->data() + ratio->size(), x);
      if (error != std::errc() || end != ratio->data() + ratio->size() || !(x >= 0 && x <= 1)) {
        return Unexpected{
            InputError{path, line, "range_ratio",
                       fmt::format("'{}' is not a number from 0 to 1", ratio->substr(0, 40))}};
      }
      row.value().range_ratio = x;
    }
    if (const std::string* style = field(style_column)) {
      if (*style != "vllm" && *style != "sglang") {
        return Unexpected{
            InputError{path, line, "range_style",
                       fmt::format("'{}' is neither vllm nor sglang", style->substr(0, 40))}};
      }
      row.value().range_style = *style == "sglang" ? RangeStyle::kSglang : RangeStyle::kVllm;
    }
    rows.push_back(std::move(row).value());
  }
  if (in.bad()) return Unexpected{InputError{path, line, "row", "read error"}};
  if (line == 0) return Unexpected{InputError{path, 1, "header", "missing: the file is empty"}};
  if (rows.empty()) {
    return Unexpected{InputError{
        path, line, "row",
        set.empty() ? std::string("no measurement rows") : fmt::format("no row of set '{}'", set)}};
  }
  return rows;
}

InputResult<std::vector<Schedule>> record_schedules(
    const std::vector<Workload>& workloads,
    const std::function<RooflineConstants(const Workload&)>& constants_of, unsigned jobs,
    const std::string& path) {
  std::vector<std::optional<Result<Schedule, std::string>>> done(workloads.size());
  parallel_for(workloads.size(), jobs, [&](std::size_t i) {
    done[i] = Schedule::record(workloads[i], constants_of(workloads[i]));
  });
  std::vector<Schedule> out;
  out.reserve(done.size());
  for (std::size_t i = 0; i < done.size(); ++i) {
    const Workload& w = workloads[i];
    if (!*done[i]) {
      return Unexpected{InputError{
          path, w.line, "row",
          fmt::format("{} on {} TP{}, {}/{} tokens, concurrency {}: {}", w.model, w.gpu, w.tp,
                      w.input_tokens, w.output_tokens, w.concurrency, done[i]->error())}};
    }
    out.push_back(std::move(*done[i]).value());
  }
  return out;
}

Result<Schedule, std::string> Schedule::record(const Workload& workload,
                                               const RooflineConstants& constants) {
  SimOptions options = workload.options;
  options.cost.kind = CostKind::kRoofline;
  options.cost.given = constants;
  options.cost.given_mask = ~0u;
  options.load = LoadOptions{};
  options.load.concurrency = workload.concurrency;
  options.load.measure_after = workload.measure_after;
  options.load.range_ratio = workload.range_ratio;
  options.load.range_style = workload.range_style;
  Simulator sim(workload.config, options);
  if (sim.violation()) return Unexpected{sim.violation()->message};
  if (!sim.roofline()) return Unexpected{std::string("the roofline cannot price this model")};
  Schedule out;
  std::vector<double> ends;
  struct Wait {
    std::size_t step;
    double base;
    std::uint64_t queued;
  };
  std::vector<Wait> waits;
  std::vector<RequestTimes> done;
  bool skipped = false;
  sim.on_step = [&](const Simulator& s) {
    out.terms_.push_back(s.roofline()->terms(s.step_work()));
    // A step that began after the last one ended waited, idle, for a request
    // the server was taking in: the engine sees it `queued` intakes after
    // the arrival that found the server free, which a closed loop sends at a
    // step's end (or at 0). Stored as that step (-1: time 0) and the count.
    const auto& waited = s.last_step_waited_for();
    if (waited && s.step_started() > (ends.empty() ? 0.0 : ends.back())) {
      waits.push_back({out.terms_.size() - 1, waited->base, waited->queued});
    }
    ends.push_back(s.now());
  };
  sim.on_request = [&](const RequestTimes& t) {
    if (t.skipped || t.finished < 0) {
      skipped = true;
    } else {
      done.push_back(t);
    }
  };
  LoadGenerator load(options.load, sim);
  for (std::uint32_t i = 0; i < workload.requests; ++i) {
    Request r;
    r.line = i + 1;
    r.id = std::to_string(i + 1);
    r.prompt = workload.input_tokens;
    r.output = workload.output_tokens;
    if (!load.set_arrival(r)) {
      if (load.error()) return Unexpected{load.error()->to_string()};
      break;
    }
    if (!sim.run_until(r.arrival)) break;
    sim.submit(std::move(r));
  }
  if (!sim.violation()) sim.run_until(std::numeric_limits<double>::infinity());
  if (sim.violation()) return Unexpected{sim.violation()->message};
  if (skipped || done.size() != workload.requests) {
    return Unexpected{
        fmt::format("{} of {} requests never ran (a request of {} tokens does not fit the pool or "
                    "--max-seq-tokens)",
                    workload.requests - done.size(), workload.requests,
                    workload.input_tokens + workload.output_tokens)};
  }
  // Each time is the end of a step (a closed loop's arrivals too) or 0.
  auto step_of = [&](double t) -> std::optional<std::int64_t> {
    if (t == 0) return -1;
    auto it = std::lower_bound(ends.begin(), ends.end(), t);
    if (it == ends.end() || *it != t) return std::nullopt;
    return it - ends.begin();
  };
  out.waits_.assign(out.terms_.size(), Schedule::Wait{});
  for (const Wait& w : waits) {
    auto base = step_of(w.base);
    if (!base) return Unexpected{std::string("internal: an intake began off a step's end")};
    out.waits_[w.step] = Schedule::Wait{*base, w.queued};
  }
  std::vector<RequestSpan> spans;
  for (const RequestTimes& t : done) {
    auto arrival = step_of(t.arrival), first = step_of(t.first_token), last = step_of(t.finished);
    if (!arrival || !first || !last) {
      return Unexpected{std::string("internal: a request's time is not a step's end")};
    }
    out.times_.push_back(Times{t.line, *arrival, *first, *last, t.output});
    spans.push_back(RequestSpan{t.line, t.arrival, t.first_token, t.finished, t.output});
  }
  out.measure_after_ = workload.measure_after;
  // What the run itself measured must be what the schedule gives back.
  const Figures measured = figures_of(spans, workload.measure_after, true);
  const Figures replayed = out.figures(constants);
  auto close = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
  };
  for (const MetricRow& m : kMetrics) {
    if (!close(measured.*m.field, replayed.*m.field)) {
      return Unexpected{
          fmt::format("internal: the recorded schedule does not give the run's {} ({} against {})",
                      m.name, replayed.*m.field, measured.*m.field)};
    }
  }
  out.simulated_ = measured;
  return out;
}

Figures Schedule::figures(const RooflineConstants& constants, bool percentiles) const {
  // One buffer a thread, reused: a fit prices every schedule thousands of times.
  thread_local std::vector<double> ends;
  thread_local std::vector<RequestSpan> spans;
  ends.resize(terms_.size());
  double now = 0;
  for (std::size_t i = 0; i < terms_.size(); ++i) {
    if (const Wait& w = waits_[i]; w.queued > 0) {
      now = std::max(now, (w.base < 0 ? 0.0 : ends[static_cast<std::size_t>(w.base)]) +
                              static_cast<double>(w.queued) * constants.request_overhead_ms / 1e3);
    }
    now += terms_[i].at(constants).total_ms() / 1000.0;
    ends[i] = now;
  }
  auto at = [&](std::int64_t step) {
    return step < 0 ? 0.0 : ends[static_cast<std::size_t>(step)];
  };
  spans.clear();
  for (const Times& t : times_) {
    spans.push_back(RequestSpan{t.line, at(t.arrival), at(t.first), at(t.last), t.output});
  }
  return figures_of(spans, measure_after_, percentiles);
}

}  // namespace kvreplay
