// kvreplay calibrate's machinery (engine/calibrate/calibrate.h, engine/calibrate/calibrate_fit.h)
// and the cost profiles it writes (model/cost_profile.h): a recorded closed-loop schedule priced
// under other constants gives what a full simulation under them gives, a fit recovers constants
// that made the measurements, and a profile's most specific entry wins.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/options.h"
#include "app/simulation/simulation.h"
#include "core/parallel.h"
#include "engine/calibrate/calibrate.h"
#include "engine/calibrate/calibrate_fit.h"
#include "model/cost_profile.h"

using namespace kvreplay;

namespace {

Workload make_workload(const char* model, std::uint32_t tp, std::uint32_t input,
                       std::uint32_t output, std::uint32_t concurrency, std::uint32_t requests) {
  Workload w;
  w.model = model;
  w.gpu = "h100-80gb";
  w.tp = tp;
  w.input_tokens = input;
  w.output_tokens = output;
  w.concurrency = concurrency;
  w.requests = requests;
  w.options.engine = EngineKind::kVllm;
  w.options.watermark = 0;
  ConfigOverrides overrides;
  overrides.model = model;
  overrides.gpu = w.gpu;
  overrides.tp = tp;
  overrides.context_default = overrides.kv_groups = true;
  set_activation_limits(overrides, w.options);
  auto config = resolve_sim_config(overrides);
  REQUIRE(config.ok());
  w.config = config.value();
  return w;
}

RooflineConstants other_constants() {
  RooflineConstants c;
  c.prefill_efficiency = 0.45;
  c.decode_efficiency = 0.3;
  c.bandwidth_efficiency = 0.55;
  c.step_overhead_ms = 1.25;
  c.allreduce_latency_us = 20;
  c.link_efficiency = 0.5;
  return c;
}

}  // namespace

TEST_CASE(
    "calibrate: a recorded schedule priced under other constants is the simulation under them") {
  const RooflineConstants base;
  const RooflineConstants other = other_constants();
  for (const Workload& w : {make_workload("llama-3.1-8b", 1, 300, 40, 4, 12),
                            make_workload("llama-3.1-70b-fp8", 2, 1000, 20, 16, 40)}) {
    INFO(w.model);
    auto recorded = Schedule::record(w, base);
    REQUIRE(recorded.ok());
    const Schedule& schedule = recorded.value();
    CHECK(schedule.steps() > 0);
    // Under its own constants: exactly the run's figures.
    const Figures same = schedule.figures(base);
    CHECK(same.ttft_ms == schedule.simulated().ttft_ms);
    CHECK(same.tpot_ms == schedule.simulated().tpot_ms);
    CHECK(same.output_tok_s == schedule.simulated().output_tok_s);
    // Under others: what simulating again under them gives.
    auto again = Schedule::record(w, other);
    REQUIRE(again.ok());
    const Figures priced = schedule.figures(other);
    CHECK(priced.ttft_ms == Approx(again.value().simulated().ttft_ms).epsilon(1e-12));
    CHECK(priced.tpot_ms == Approx(again.value().simulated().tpot_ms).epsilon(1e-12));
    CHECK(priced.output_tok_s == Approx(again.value().simulated().output_tok_s).epsilon(1e-12));
    // And they differ from the first: the constants matter.
    CHECK(priced.tpot_ms > 1.2 * same.tpot_ms);
  }
}

TEST_CASE("calibrate: the fit recovers the constants that made the measurements") {
  // Measurements made by the roofline itself under known constants: the fit
  // must bring the median error to (about) 0 from the built-in start.
  RooflineConstants truth;
  truth.bandwidth_efficiency = 0.55;
  truth.decode_efficiency = 0.4;
  truth.step_overhead_ms = 1.0;
  std::vector<Workload> workloads = {make_workload("llama-3.1-8b", 1, 128, 64, 1, 4),
                                     make_workload("llama-3.1-8b", 1, 128, 64, 64, 128),
                                     make_workload("llama-3.1-8b", 1, 2000, 16, 8, 16),
                                     make_workload("llama-3.1-8b", 1, 512, 256, 256, 512)};
  std::vector<Schedule> schedules;
  for (const Workload& w : workloads) {
    auto s = Schedule::record(w, RooflineConstants{});
    REQUIRE(s.ok());
    schedules.push_back(std::move(s).value());
  }
  std::vector<MeasuredRow> rows;
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    const Figures f = schedules[i].figures(truth);
    for (auto metric : {CalibrationMetric::kTpotMs, CalibrationMetric::kOutputTokS}) {
      MeasuredRow row;
      row.line = rows.size() + 2;
      row.metric = metric;
      row.value = f.of(metric);
      row.workload = i;
      rows.push_back(row);
    }
  }
  std::vector<FitPoint> points;
  for (const MeasuredRow& row : rows) points.push_back({&row, &schedules[row.workload]});
  // Only the three that made the difference are free; the rest held at truth.
  const std::uint32_t held =
      ~((1u << 1) | (1u << 3) | (1u << 6));  // all but decode, bandwidth, overhead
  REQUIRE(roofline_constant_infos()[1].name == std::string("decode_efficiency"));
  REQUIRE(roofline_constant_infos()[3].name == std::string("bandwidth_efficiency"));
  REQUIRE(roofline_constant_infos()[6].name == std::string("step_overhead_ms"));
  const FitResult fit = fit_constants(points, RooflineConstants{}, held);
  CHECK(fit.median_before > 0.1);
  CHECK(fit.median_after < 0.005);
  CHECK(fit.fitted.size() == 3);
  CHECK(fit.constants.bandwidth_efficiency == Approx(0.55).epsilon(0.02));
  CHECK(fit.constants.step_overhead_ms == Approx(1.0).epsilon(0.05));
  // Held constants stay where they were.
  CHECK(fit.constants.prefill_efficiency == RooflineConstants{}.prefill_efficiency);
  // -j: each pass over the rows on 3 threads gives the same fit.
  const FitResult threaded = fit_constants(points, RooflineConstants{}, held, 3);
  CHECK(threaded.constants == fit.constants);
  CHECK(threaded.median_after == fit.median_after);
}

TEST_CASE("calibrate: what a worker thread throws reaches the caller, never std::terminate") {
  // Two jobs, each waiting until both have started, so that each runs on its
  // own thread; the one not on the calling thread throws.
  const auto caller = std::this_thread::get_id();
  std::atomic<int> started{0};
  std::atomic<int> ran{0};
  auto job = [&](std::size_t) {
    ++started;
    for (long spins = 0; started.load() < 2 && spins < 100000000; ++spins) {
      std::this_thread::yield();
    }
    ++ran;
    if (std::this_thread::get_id() != caller) throw std::bad_alloc();
  };
  CHECK_THROWS_AS(parallel_for(2, 2, job), std::bad_alloc);
  CHECK(ran == 2);  // both joined before the rethrow
  // Any exception, from the calling thread too; the jobs after it are not started.
  std::atomic<std::size_t> done{0};
  CHECK_THROWS_WITH(parallel_for(1000, 1,
                                 [&](std::size_t i) {
                                   ++done;
                                   if (i == 3) throw std::runtime_error("job 3");
                                 }),
                    "job 3");
  CHECK(done == 4);
  // -j N: at most N threads, the calling one among them; every job runs once.
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<int> runs(64, 0);
  parallel_for(runs.size(), 3, [&](std::size_t i) {
    const std::lock_guard<std::mutex> lock(mutex);
    threads.insert(std::this_thread::get_id());
    ++runs[i];
  });
  CHECK(threads.size() <= 3);
  CHECK(std::count(runs.begin(), runs.end(), 1) == 64);
  threads.clear();
  parallel_for(16, 1, [&](std::size_t) { threads.insert(std::this_thread::get_id()); });
  CHECK(threads == std::set<std::thread::id>{caller});
}

TEST_CASE("calibrate: a workload's exception under -j 2 is rethrown by record_schedules") {
  const std::vector<Workload> workloads = {make_workload("llama-3.1-8b", 1, 128, 16, 1, 2),
                                           make_workload("llama-3.1-8b", 1, 256, 16, 1, 2),
                                           make_workload("llama-3.1-8b", 1, 512, 16, 1, 2)};
  auto throwing = [](const Workload& w) {
    if (w.input_tokens == 256) throw std::bad_alloc();
    return RooflineConstants{};
  };
  CHECK_THROWS_AS(record_schedules(workloads, throwing, 2, "m.csv"), std::bad_alloc);
  auto fine = record_schedules(
      workloads, [](const Workload&) { return RooflineConstants{}; }, 2, "m.csv");
  REQUIRE(fine.ok());
  CHECK(fine.value().size() == 3);
}

namespace {

// Reads `text` as MEASURED.csv; the problem as FILE:LINE: FIELD: problem, or "".
std::string read_csv_problem(const std::string& text, std::size_t* rows = nullptr) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("kvreplay-calibrate-test-" + std::to_string(::getpid()) + ".csv");
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  auto read = read_measured_csv(path.string());
  std::filesystem::remove(path);
  if (!read) {
    const std::string shown = read.error().to_string();
    return shown.substr(shown.find(".csv") + 4);  // from ":LINE: FIELD: problem"
  }
  if (rows != nullptr) *rows = read.value().size();
  return "";
}

const char* const kHeaderLine =
    "model,gpu,tp,input_tokens,output_tokens,concurrency,requests,metric,value\n";

}  // namespace

TEST_CASE("calibrate: MEASURED.csv refusals are FILE:LINE: FIELD: problem, and a BOM is read") {
  std::size_t rows = 0;
  // A UTF-8 byte order mark before the header, as a spreadsheet writes it.
  CHECK(read_csv_problem(std::string("\xEF\xBB\xBF") + kHeaderLine +
                             "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,7\r\n",
                         &rows) == "");
  CHECK(rows == 1);
  // TPOT of one output token is undefined.
  CHECK(read_csv_problem(std::string(kHeaderLine) +
                         "llama-3.1-8b,h100-80gb,1,128,1,1,2,tpot_ms,7\n") ==
        ":2: output_tokens: 1 output token has no time per output token (a tpot_ms row needs "
        "at least 2)");
  CHECK(read_csv_problem(std::string(kHeaderLine) +
                         "llama-3.1-8b,h100-80gb,1,128,1,1,2,ttft_ms,7\n") == "");
  // Figures no benchmark gives: their errors would be inf.
  CHECK(read_csv_problem(std::string(kHeaderLine) +
                         "llama-3.1-8b,h100-80gb,1,128,128,1,2,ttft_ms,1e-308\n") ==
        ":2: value: '1e-308' is out of range: a measured ttft_ms is from 0.001 to 1e9 "
        "(the errors are shares of it, and would overflow)");
  CHECK(read_csv_problem(std::string(kHeaderLine) +
                         "llama-3.1-8b,h100-80gb,1,128,128,1,2,output_tok_s,2e9\n")
            .starts_with(":2: value: '2e9' is out of range"));
  CHECK(read_csv_problem(std::string(kHeaderLine) +
                         "llama-3.1-8b,h100-80gb,1,128,128,1,2,tpot_ms,0.001\n") == "");
  // A line of 20 MiB is refused at 16 MiB, naming its line.
  CHECK(read_csv_problem(std::string(kHeaderLine) + std::string(20u << 20, 'x')) ==
        ":2: row: past 16 MiB of input: not a measurement file");
}

TEST_CASE("calibrate: a benchmark's figures: means, numpy's percentiles, the measured window") {
  // Four requests sent at 0, 0, 1 and 2 s, one token first at +0.1, +0.2,
  // +0.3, +0.4 s, and 11 tokens each ending 1 s after their first.
  std::vector<RequestSpan> spans;
  for (std::uint64_t i = 0; i < 4; ++i) {
    const double arrival = i < 2 ? 0.0 : static_cast<double>(i - 1);
    const double first = arrival + 0.1 * static_cast<double>(i + 1);
    spans.push_back(RequestSpan{i + 1, arrival, first, first + 1.0, 11});
  }
  const Figures all = figures_of(spans, 0, true);
  CHECK(all.ttft_ms == Approx(250));
  CHECK(all.ttft_p50_ms == Approx(250));  // between 200 and 300
  CHECK(all.ttft_p99_ms == Approx(397));  // 300 + 0.97 * 100
  CHECK(all.tpot_ms == Approx(100));      // 1 s over 10 gaps
  CHECK(all.itl_ms == Approx(100));
  CHECK(all.e2e_ms == Approx(1250));
  CHECK(all.output_tok_s == Approx(44 / 3.4));  // 44 tokens from 0 to the last end, 3.4 s
  // Past the first two: the window starts at the third's arrival.
  const Figures steady = figures_of(spans, 2, true);
  CHECK(steady.ttft_ms == Approx(350));
  CHECK(steady.output_tok_s == Approx(22 / 2.4));
  // Without percentiles asked for, none are filled.
  CHECK(figures_of(spans, 0, false).ttft_p99_ms == 0);
  // Every metric has its name and class, and only those names parse.
  CHECK(parse_calibration_metric("ttft_p99_ms") == CalibrationMetric::kTtftP99Ms);
  CHECK(metric_class(CalibrationMetric::kItlMs) == "itl");
  CHECK(is_percentile(CalibrationMetric::kE2eP50Ms));
  CHECK_FALSE(is_percentile(CalibrationMetric::kE2eMs));
  CHECK_FALSE(parse_calibration_metric("ttft_p90_ms"));
  CHECK(calibration_metric_list().find("output_tok_s") != std::string::npos);
}

TEST_CASE("cost profile: the most specific entry wins, constant by constant") {
  const char* text = R"({"kvreplay_cost_profile": 1, "base": "built-in", "profiles": [
    {"gpu": "h200", "engine": "vllm", "constants": {"step_overhead_ms": {"value": 4, "source": "d"}}},
    {"gpu": "*", "engine": "*", "constants": {"step_overhead_ms": {"value": 1, "source": "a"},
                                              "bandwidth_efficiency": {"value": 0.5, "source": "a"}}},
    {"gpu": "h200", "engine": "*", "constants": {"step_overhead_ms": {"value": 3, "source": "c"}}},
    {"gpu": "*", "engine": "vllm", "constants": {"step_overhead_ms": {"value": 2, "source": "b"}}}]})";
  auto profile = CostProfile::parse(nlohmann::json::parse(text), "p.json", text);
  REQUIRE(profile.ok());
  const CostProfile& p = profile.value();
  CHECK(p.constants_for("h100-80gb", "sglang").step_overhead_ms == 1);
  CHECK(p.constants_for("h100-80gb", "vllm").step_overhead_ms == 2);
  CHECK(p.constants_for("h200", "sglang").step_overhead_ms == 3);
  CHECK(p.constants_for("h200", "vllm").step_overhead_ms == 4);
  CHECK(p.constants_for("h200", "vllm").bandwidth_efficiency == 0.5);  // from */*
  CHECK(p.constants_for("h200", "vllm").decode_efficiency == RooflineConstants{}.decode_efficiency);
  const auto sources = p.sources_for("h200", "vllm");
  CHECK(sources[6] == "d");
  CHECK(sources[3] == "a");
  CHECK(sources[0] == "built-in");
  // What to_json writes, parse reads back to the same constants.
  const std::string again = p.to_json().dump();
  auto reread = CostProfile::parse(nlohmann::json::parse(again), "q.json", again);
  REQUIRE(reread.ok());
  CHECK(reread.value().constants_for("h200", "vllm") == p.constants_for("h200", "vllm"));
  // The reread profile keeps the built-in base only where the file says so.
  CHECK(p.to_json().value("base", "shipped") == "built-in");
  // Two entries for one GPU and engine are refused, naming the line.
  const char* twice = R"({"kvreplay_cost_profile": 1,
 "profiles": [{"gpu": "*", "engine": "*"}, {"gpu": "*", "engine": "*"}]})";
  auto refused = CostProfile::parse(nlohmann::json::parse(twice), "t.json", twice);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error() == "t.json:2: cost profile: profiles: profiles[1] repeats gpu * engine *");
}

TEST_CASE("cost profile: the shipped profile reads, and every constant says where it comes from") {
  const CostProfile& shipped = CostProfile::shipped();
  CHECK(shipped.name() == "shipped");
  REQUIRE(shipped.entries().size() >= 2);
  for (const char* gpu : {"h100-80gb", "h200", "a100-80gb", "b200"}) {
    for (const std::string& source : shipped.sources_for(gpu, "vllm")) {
      INFO(gpu << ": " << source);
      const bool said = source.find("fitted by kvreplay calibrate") != std::string::npos ||
                        source.find("(not fitted: ") != std::string::npos;
      CHECK(said);
    }
  }
}

TEST_CASE(
    "cost profile: a file goes over the shipped profile, so one GPU's fit leaves the others") {
  // What calibrate writes for one H100 fit: one entry, h100-80gb / vllm.
  const char* text = R"({"kvreplay_cost_profile": 1, "profiles": [
    {"gpu": "h100-80gb", "engine": "vllm",
     "constants": {"prefill_efficiency": {"value": 0.61, "source": "my H100 fit"}}}]})";
  auto profile = CostProfile::parse(nlohmann::json::parse(text), "mine.json", text);
  REQUIRE(profile.ok());
  const CostProfile& mine = profile.value();
  const CostProfile& shipped = CostProfile::shipped();
  // Another GPU kind: exactly the shipped constants and sources.
  CHECK(mine.constants_for("h200", "vllm") == shipped.constants_for("h200", "vllm"));
  CHECK(mine.sources_for("h200", "vllm") == shipped.sources_for("h200", "vllm"));
  // The fitted GPU: the fitted constant, the others as shipped.
  RooflineConstants expected = shipped.constants_for("h100-80gb", "vllm");
  expected.prefill_efficiency = 0.61;
  CHECK(mine.constants_for("h100-80gb", "vllm") == expected);
  const auto sources = mine.sources_for("h100-80gb", "vllm");
  CHECK(std::count(sources.begin(), sources.end(), "my H100 fit") == 1);
  // "base": "built-in" starts from the built-in values; another base is refused.
  const char* bare = R"({"kvreplay_cost_profile": 1, "base": "built-in", "profiles": []})";
  auto built_in = CostProfile::parse(nlohmann::json::parse(bare), "b.json", bare);
  REQUIRE(built_in.ok());
  CHECK(built_in.value().constants_for("h200", "vllm") == RooflineConstants{});
  const char* wrong = R"({"kvreplay_cost_profile": 1, "base": "mine", "profiles": []})";
  auto refused = CostProfile::parse(nlohmann::json::parse(wrong), "w.json", wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error() ==
        "w.json:1: cost profile: base: expected \"shipped\" or \"built-in\", got \"mine\"");
}
