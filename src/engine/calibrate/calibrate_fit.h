// The fit of kvreplay calibrate (engine/calibrate/calibrate.h): the constants that
// minimize the median absolute percentage error of a set of rows.
#pragma once

#include <string>
#include <vector>

#include "engine/calibrate/calibrate.h"

namespace kvreplay {

// Rows to fit, each with the schedule of its workload.
struct FitPoint {
  const MeasuredRow* row;
  const Schedule* schedule;
};

// |predicted - measured| / measured.
double relative_error(double predicted, double measured);
// The median of `values` (the mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

struct FitResult {
  RooflineConstants constants;
  std::vector<std::size_t> fitted;  // indexes into roofline_constant_infos()
  // The constants not fitted, each with why ("held by --step-overhead-ms", ...).
  std::vector<std::pair<std::size_t, std::string>> kept;
  double median_before = 0, median_after = 0;
  // Fitted constants that ended at an end of their range (within 0.1%): the
  // rows do not pin them, or want a value the range refuses.
  std::vector<std::size_t> at_bound;
};

// Fits the constants not `held` (a mask over roofline_constant_infos()) from
// `start`: those some row depends on, as many as there are rows, in the order
// bandwidth, decode, overhead, prefill, prefill pass, request overhead, fp8,
// all-reduce latency, link. The
// objective is the median absolute percentage error plus 1% of the mean (which
// breaks the median's ties); Nelder-Mead over the logarithms, restarted until
// it gains nothing. Each pass over the rows prices their schedules `jobs` at
// a time (-j); what a job throws is rethrown here.
FitResult fit_constants(const std::vector<FitPoint>& points, const RooflineConstants& start,
                        std::uint32_t held, unsigned jobs = 1);

}  // namespace kvreplay
