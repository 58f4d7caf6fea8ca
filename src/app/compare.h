// The `compare` command: two reports of the same trace, metric by metric,
// for CI regression gates (report/compare.h holds the rules).
#pragma once

#include <string>
#include <vector>

#include "report/compare.h"

namespace kvreplay {

struct CompareRequest {
  std::string base_path;
  std::string new_path;
  std::vector<std::string> thresholds;  // "NAME=VALUE", after the file's
  std::string thresholds_file;          // empty: none
  bool quiet = false;                   // no table on stdout
  // What stdout gets: "text" (the table), "json", "junit" or "github"
  // (report/compare.h); `name` names the case in junit and github ("" : NEW's path).
  std::string format = "text";
  std::string name;
};

// The `compare` subcommand. Returns 0 (no regression), 1 (a regression: one
// line each on stderr) or 2 (a file cannot be read, the reports cannot be
// compared, a bad threshold).
int run_compare(const CompareRequest& request);

}  // namespace kvreplay
