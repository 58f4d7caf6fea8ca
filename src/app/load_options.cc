// The load generators' options (LoadOptionsCli), their simulate spelling
// (load_args), and plan's split of --offload into the settings it sweeps
// (app/options.h).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>

#include "app/options.h"

namespace kvreplay {

void LoadOptionsCli::add_to(CLI::App& app, const std::string& group, bool swept) {
  rate_option = scalar_or_list(app, swept, "--request-rate", request_rate, rates,
                               "send the trace's requests, in order, at seeded Poisson times: R "
                               "requests a second on average (the trace's times are ignored)")
                    ->check(number_range(1e-9, 1e9))
                    ->group(group);
  concurrency_option =
      scalar_or_list(app, swept, "--concurrency", concurrency, concurrencies,
                     "a closed loop of C clients: each sends the trace's next request when its "
                     "previous one ends, as genai-perf --concurrency and vllm bench serve "
                     "--max-concurrency (the trace's times are ignored)")
          ->check(CLI::Range(1u, 1000000u))
          ->group(group);
  time_scale_option =
      scalar_or_list(app, swept, "--time-scale", time_scale, time_scales,
                     "replay the trace's own arrival times F times as fast (0.5: at half speed), "
                     "its gaps keeping their shape; not with a load generator")
          ->check(number_range(1e-6, 1e6))
          ->group(group);
  concurrency_option->excludes(rate_option);
  // A 64-bit value: CLI11's own conversion wraps an overflow.
  const CLI::Validator uint64_text(
      [](const std::string& text) {
        std::uint64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        return error == std::errc() && end == text.data() + text.size()
                   ? std::string()
                   : "'" + text.substr(0, 40) +
                         "' is not an integer from 0 to 18446744073709551615";
      },
      "UINT64");
  seed_option = app.add_option("--load-seed", seed, "seed of --request-rate's draws (default 0)")
                    ->check(uint64_text)
                    ->group(group);
  warmup_option = app.add_option("--warmup-requests", warmup,
                                 "send the trace's first N requests as a warm-up, wait until "
                                 "they all end, then measure the rest (genai-perf "
                                 "--warmup-request-count); needs --concurrency or --request-rate")
                      ->check(uint64_text)
                      ->group(group);
  measure_after_option =
      app.add_option("--measure-after", measure_after,
                     "send the first N requests as any other but leave them out of the load's "
                     "figures (the steady state a stable measurement window reports, as "
                     "genai-perf's --measurement-interval); the clients do not pause")
          ->check(uint64_text)
          ->group(group);
  burstiness_option =
      app.add_option("--burstiness", burstiness,
                     "gaps between --request-rate's arrivals gamma-distributed with this shape "
                     "and the same mean, as vllm bench serve --burstiness (1: Poisson; lower: "
                     "burstier)")
          ->check(number_range(1e-3, 1e3))
          ->group(group);
  ramp_option = app.add_option("--ramp-up-strategy", ramp_up,
                               "open-loop arrivals whose rate climbs over the trace's requests "
                               "from --ramp-up-start-rps to --ramp-up-end-rps, as vllm bench "
                               "serve (linear or exponential)")
                    ->check(CLI::IsMember(std::vector<std::string>{"linear", "exponential"}))
                    ->group(group);
  ramp_start_option =
      app.add_option("--ramp-up-start-rps", ramp_start, "the ramp's first rate, requests/s")
          ->check(number_range(0.0, 1e9))
          ->group(group);
  ramp_end_option =
      app.add_option("--ramp-up-end-rps", ramp_end, "the ramp's last rate, requests/s")
          ->check(number_range(0.0, 1e9))
          ->group(group);
  range_option =
      app.add_option(
             "--random-range-ratio", range_ratio,
             "draw each request's prompt and output length around the trace's, as the "
             "benchmark clients' random datasets: vllm bench serve's uniform "
             "[L(1-R), L(1+R)], or SGLang bench_serving's [L R, L] (--range-ratio-style); a "
             "prompt with hash ids or a named prefix keeps its length")
          ->check(number_range(0.0, 1.0))
          ->group(group);
  range_style_option = app.add_option("--range-ratio-style", range_style,
                                      "whose --random-range-ratio: vllm (default) or sglang")
                           ->check(CLI::IsMember(std::vector<std::string>{"vllm", "sglang"}))
                           ->group(group);
}

std::optional<std::string> LoadOptionsCli::resolve(LoadOptions& out) const {
  if (rate_option->count() > 0) out.request_rate = request_rate;
  if (concurrency_option->count() > 0) out.concurrency = concurrency;
  out.time_scale = time_scale;
  out.seed = seed;
  out.warmup = warmup;
  out.measure_after = measure_after;
  out.burstiness = burstiness;
  if (range_option->count() > 0) out.range_ratio = range_ratio;
  out.range_style = range_style == "sglang" ? RangeStyle::kSglang : RangeStyle::kVllm;
  const bool ramp = ramp_option->count() > 0;
  if (ramp) {
    out.ramp_up = ramp_up == "linear" ? RampUp::kLinear : RampUp::kExponential;
    out.ramp_start_rps = ramp_start;
    out.ramp_end_rps = ramp_end;
    if (ramp_start_option->count() == 0 || ramp_end_option->count() == 0) {
      return std::string("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps");
    }
    if (rate_option->count() > 0 || concurrency_option->count() > 0) {
      return std::string(
          "--ramp-up-strategy is a load generator of its own: drop --request-rate and "
          "--concurrency");
    }
    if (out.ramp_up == RampUp::kExponential && !(ramp_start > 0)) {
      return std::string("--ramp-up-strategy exponential needs --ramp-up-start-rps above 0");
    }
    if (!(std::max(ramp_start, ramp_end) > 0)) {
      return std::string("--ramp-up-strategy: a ramp from 0 to 0 requests/s sends nothing");
    }
  } else if (ramp_start_option->count() > 0 || ramp_end_option->count() > 0) {
    return std::string("--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy");
  }
  const bool any = out.any() || ramp;
  if (seed_option->count() > 0 && rate_option->count() == 0 && !ramp && !out.range_ratio) {
    return std::string(
        "--load-seed seeds --request-rate's and --random-range-ratio's draws: give one of them");
  }
  if (warmup_option->count() > 0 && !any) {
    return std::string(
        "--warmup-requests warms up a load generator: give --concurrency or --request-rate "
        "(the trace's own times have no warm-up)");
  }
  for (auto [option, what] : {std::pair{measure_after_option, "--measure-after"},
                              std::pair{range_option, "--random-range-ratio"}}) {
    if (option->count() > 0 && !any) {
      return fmt::format(
          "{} belongs to a load generator: give --concurrency, --request-rate or "
          "--ramp-up-strategy",
          what);
    }
  }
  if (burstiness_option->count() > 0 && rate_option->count() == 0 && !ramp) {
    return std::string("--burstiness shapes --request-rate's gaps: give --request-rate");
  }
  if (range_style_option->count() > 0 && range_option->count() == 0) {
    return std::string("--range-ratio-style says whose --random-range-ratio: give that too");
  }
  if (time_scale_option->count() > 0 && any) {
    return std::string(
        "--time-scale scales the trace's own arrival times, which a load generator replaces: "
        "drop --concurrency, --request-rate or --ramp-up-strategy");
  }
  return std::nullopt;
}

std::vector<std::string> plan_offload_settings(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::vector<std::string> media;  // of the setting being formed
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::string medium = item.substr(0, item.find(':'));
    const bool fresh = out.empty() || item == "none" || out.back() == "none" ||
                       std::find(media.begin(), media.end(), medium) != media.end();
    if (fresh) {
      out.push_back(item);
      media = {medium};
    } else {
      out.back() += "," + item;
      media.push_back(medium);
    }
  }
  return out;
}

std::string load_args(const LoadOptions& load) {
  std::string out;
  if (load.concurrency) out += fmt::format(" --concurrency {}", *load.concurrency);
  if (load.request_rate) {
    out += fmt::format(" --request-rate {} --load-seed {}", *load.request_rate, load.seed);
  }
  if (load.ramp_up != RampUp::kNone) {
    out += fmt::format(
        " --ramp-up-strategy {} --ramp-up-start-rps {} --ramp-up-end-rps {} "
        "--load-seed {}",
        load.ramp_up == RampUp::kLinear ? "linear" : "exponential", load.ramp_start_rps,
        load.ramp_end_rps, load.seed);
  }
  if (load.burstiness != 1.0) out += fmt::format(" --burstiness {}", load.burstiness);
  if (load.range_ratio) {
    out += fmt::format(" --random-range-ratio {}", *load.range_ratio);
    if (load.range_style == RangeStyle::kSglang) out += " --range-ratio-style sglang";
    if (!load.request_rate && load.ramp_up == RampUp::kNone) {
      out += fmt::format(" --load-seed {}", load.seed);
    }
  }
  if (load.warmup > 0) out += fmt::format(" --warmup-requests {}", load.warmup);
  if (load.measure_after > 0) out += fmt::format(" --measure-after {}", load.measure_after);
  if (load.time_scale != 1.0) out += fmt::format(" --time-scale {}", load.time_scale);
  return out;
}

}  // namespace kvreplay
