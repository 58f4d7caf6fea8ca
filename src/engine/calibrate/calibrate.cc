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
  if (metric == "ttft_ms") {
    row.metric = CalibrationMetric::kTtftMs;
  } else if (metric == "tpot_ms") {
    row.metric = CalibrationMetric::kTpotMs;
  } else if (metric == "output_tok_s") {
    row.metric = CalibrationMetric::kOutputTokS;
  } else {
    return fail("metric", fmt::format("'{}' is none of ttft_ms, tpot_ms, output_tok_s",
                                      metric.substr(0, 40)));
  }
  if (row.metric == CalibrationMetric::kTpotMs && row.output_tokens < 2) {
    return fail("output_tokens",
                "1 output token has no time per output token (a tpot_ms row needs at least 2)");
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

std::string_view to_string(CalibrationMetric metric) {
  switch (metric) {
    case CalibrationMetric::kTtftMs: return "ttft_ms";
    case CalibrationMetric::kTpotMs: return "tpot_ms";
    case CalibrationMetric::kOutputTokS: return "output_tok_s";
  }
  return "?";
}

double Figures::of(CalibrationMetric metric) const {
  switch (metric) {
    case CalibrationMetric::kTtftMs: return ttft_ms;
    case CalibrationMetric::kTpotMs: return tpot_ms;
    case CalibrationMetric::kOutputTokS: return output_tok_s;
  }
  return 0;
}

InputResult<std::vector<MeasuredRow>> read_measured_csv(const std::string& path,
                                                        const std::string& set) {
  std::size_t set_column = 0;
  std::size_t engine_column = 0;  // 0: none
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
      if (auto it = std::find(header.begin() + std::size(kHeader), header.end(), "engine");
          it != header.end()) {
        engine_column = static_cast<std::size_t>(it - header.begin());
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
    if (engine_column != 0 && engine_column < fields.size())
      row.value().engine = fields[engine_column];
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
  Simulator sim(workload.config, options);
  if (sim.violation()) return Unexpected{sim.violation()->message};
  if (!sim.roofline()) return Unexpected{std::string("the roofline cannot price this model")};
  Schedule out;
  std::vector<double> ends;
  std::vector<RequestTimes> done;
  bool skipped = false;
  sim.on_step = [&](const Simulator& s) {
    out.terms_.push_back(s.roofline()->terms(s.step_work()));
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
  for (const RequestTimes& t : done) {
    auto arrival = step_of(t.arrival), first = step_of(t.first_token), last = step_of(t.finished);
    if (!arrival || !first || !last) {
      return Unexpected{std::string("internal: a request's time is not a step's end")};
    }
    out.times_.push_back(Times{*arrival, *first, *last, t.output});
  }
  out.simulated_ = out.figures(constants);
  // What the run itself measured must be what the schedule gives back.
  Figures measured;
  double end = 0;
  std::uint64_t tokens = 0, tpots = 0;
  for (const RequestTimes& t : done) {
    measured.ttft_ms += t.ttft_ms();
    if (auto tpot = t.tpot_ms()) {
      measured.tpot_ms += *tpot;
      ++tpots;
    }
    tokens += t.output;
    end = std::max(end, t.finished);
  }
  measured.ttft_ms /= static_cast<double>(done.size());
  measured.tpot_ms = tpots > 0 ? measured.tpot_ms / static_cast<double>(tpots) : 0;
  measured.output_tok_s = end > 0 ? static_cast<double>(tokens) / end : 0;
  auto close = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
  };
  if (!close(measured.ttft_ms, out.simulated_.ttft_ms) ||
      !close(measured.tpot_ms, out.simulated_.tpot_ms) ||
      !close(measured.output_tok_s, out.simulated_.output_tok_s)) {
    return Unexpected{
        std::string("internal: the recorded schedule does not give the run's figures")};
  }
  out.simulated_ = measured;
  return out;
}

Figures Schedule::figures(const RooflineConstants& constants) const {
  // One buffer a thread, reused: a fit prices every schedule thousands of times.
  thread_local std::vector<double> ends;
  ends.resize(terms_.size());
  double now = 0;
  for (std::size_t i = 0; i < terms_.size(); ++i) {
    now += terms_[i].at(constants).total_ms() / 1000.0;
    ends[i] = now;
  }
  auto at = [&](std::int64_t step) {
    return step < 0 ? 0.0 : ends[static_cast<std::size_t>(step)];
  };
  Figures out;
  double end = 0;
  std::uint64_t tokens = 0, tpots = 0;
  for (const Times& t : times_) {
    out.ttft_ms += (at(t.first) - at(t.arrival)) * 1e3;
    if (t.output > 1) {
      out.tpot_ms += (at(t.last) - at(t.first)) * 1e3 / (t.output - 1);
      ++tpots;
    }
    tokens += t.output;
    end = std::max(end, at(t.last));
  }
  out.ttft_ms /= static_cast<double>(std::max<std::size_t>(times_.size(), 1));
  out.tpot_ms = tpots > 0 ? out.tpot_ms / static_cast<double>(tpots) : 0;
  out.output_tok_s = end > 0 ? static_cast<double>(tokens) / end : 0;
  return out;
}

}  // namespace kvreplay
