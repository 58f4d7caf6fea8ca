#include "app/plan/gpu_prices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <iterator>

#include "app/options.h"
#include "io/input_registry.h"
#include "io/json_file.h"
#include "io/read_once.h"
#include "model/gpu.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kMaxPricesBytes = 1 << 20;

// The line of the first `"key"` in the price file's text; 0 when not found.
std::size_t line_of_key(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(nlohmann::json(key).dump());
  if (at == std::string::npos) return 0;
  return 1 + static_cast<std::size_t>(
                 std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}

Result<std::map<std::string, double>, std::string> read_gpu_prices_file(const std::string& path) {
  // Read once, text and document (a FIFO or a pipe has no second reading).
  auto read = read_json_text(path, kMaxPricesBytes, "not a price file");
  if (!read) return Unexpected{read.error()};
  const JsonText& json = read.value();
  if (!json.document.is_object()) {
    return Unexpected{
        fmt::format("{}:1: --gpu-prices: not a JSON object of GPU presets and $ an hour (e.g. "
                    "{{\"h100-80gb\": 2.99}})",
                    path)};
  }
  // A key as messages show it: JSON-quoted (control characters escaped), cut at 40 bytes.
  auto shown = [](const std::string& key) {
    return key.size() > 40 ? nlohmann::json(key.substr(0, 40)).dump() + "..."
                           : nlohmann::json(key).dump();
  };
  auto where = [&](const std::string& key) {
    const std::size_t line = line_of_key(json.text, key);
    return line == 0 ? path : fmt::format("{}:{}", path, line);
  };
  std::map<std::string, double> prices;
  for (auto it = json.document.begin(); it != json.document.end(); ++it) {
    const GpuSpec* gpu = find_gpu_preset(it.key());
    if (gpu == nullptr) {
      return Unexpected{fmt::format("{}: --gpu-prices: {}: unknown GPU (known: {})",
                                    where(it.key()), shown(it.key()), gpu_preset_list())};
    }
    // The range --gpu-hour-usd takes, so that a fleet's $ an hour stays finite.
    if (!it.value().is_number() || !(it.value().get<double>() >= 1e-9) ||
        !(it.value().get<double>() <= 1e9)) {
      const std::string value = it.value().dump();
      return Unexpected{fmt::format(
          "{}: --gpu-prices: {}: {} is not a price (US dollars an hour, from 1e-9 to 1e9)",
          where(it.key()), shown(it.key()),
          value.size() > 40 ? value.substr(0, 40) + "..." : value)};
    }
    prices.emplace(gpu->name, it.value().get<double>());
  }
  if (prices.empty()) {
    return Unexpected{fmt::format("{}:1: --gpu-prices: prices no GPU", path)};
  }
  return prices;
}

}  // namespace

Result<std::map<std::string, double>, std::string> read_gpu_prices(const std::string& path) {
  struct Tag;
  return read_once<Tag>(path, read_gpu_prices_file);  // once a run, however often resolved
}

void PriceOptions::add_to(CLI::App& app, const std::string& group) {
  flat = app.add_option("--gpu-hour-usd", gpu_hour_usd,
                        "price of one GPU for an hour: the report's cost_usd ($/hour, $ per "
                        "million output tokens within the SLOs)")
             ->check(number_range(1e-9, 1e9))
             ->group(group);
  file = app.add_option("--gpu-prices", prices_path,
                        "a JSON file of prices per GPU preset, $ an hour (e.g. "
                        "{\"h100-80gb\": 2.99, \"h200\": 3.79}): --gpu-hour-usd of --gpu's kind")
             ->group(group);
  file->excludes(flat);
}

std::optional<std::string> PriceOptions::load() {
  if (file->count() == 0) return std::nullopt;
  record_input_path(prices_path, "--gpu-prices");  // the name an output clash gives it
  auto read = read_gpu_prices(prices_path);
  if (!read) return read.error();
  prices = std::move(read).value();
  return std::nullopt;
}

Result<std::optional<double>, std::string> PriceOptions::price(
    const std::optional<std::string>& gpu) const {
  if (flat->count() > 0) return std::optional<double>(gpu_hour_usd);
  if (file->count() == 0) return std::optional<double>();
  if (!gpu) {
    return Unexpected{fmt::format("--gpu-prices: prices GPUs by kind: name the GPU with --gpu")};
  }
  const GpuSpec* spec = find_gpu_preset(*gpu);
  auto it = spec != nullptr ? prices.find(spec->name) : prices.end();
  if (it == prices.end()) {
    std::string priced;
    for (const auto& [name, usd] : prices) priced += (priced.empty() ? "" : ", ") + name;
    return Unexpected{fmt::format("--gpu-prices: {} has no price for {} (it prices {})",
                                  prices_path, *gpu, priced)};
  }
  return std::optional<double>(it->second);
}

}  // namespace kvreplay
