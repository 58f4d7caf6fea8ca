// What a GPU costs: --gpu-hour-usd (one price for every GPU) or --gpu-prices
// FILE (a price per GPU preset), for the reports' cost_usd and plan's lowest $.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <optional>
#include <string>

#include "core/result.h"

namespace kvreplay {

// --gpu-prices FILE: one JSON object, a GPU preset's name to its price in US
// dollars for an hour, e.g. {"h100-80gb": 2.99, "h200": 3.79}. Every key must
// name a preset and every price be within --gpu-hour-usd's range (1e-9 to
// 1e9); an error names the file, the key's line and the key.
Result<std::map<std::string, double>, std::string> read_gpu_prices(const std::string& path);

// The two price options of simulate and plan.
struct PriceOptions {
  double gpu_hour_usd = 0;
  std::string prices_path;
  CLI::Option* flat = nullptr;
  CLI::Option* file = nullptr;
  std::map<std::string, double> prices;  // by preset name, read by load()

  void add_to(CLI::App& app, const std::string& group);
  // Reads --gpu-prices when given; the problem, one line, when it does not read.
  std::optional<std::string> load();
  // The price of one GPU of `gpu` for an hour: none without a price option;
  // a problem when --gpu-prices has no price for it (or no --gpu is named).
  Result<std::optional<double>, std::string> price(const std::optional<std::string>& gpu) const;
};

}  // namespace kvreplay
