// The HTML report (--html FILE): one self-contained page (inline CSS, JS and
// SVG; no network, no external URL) with a summary table of the JSON report
// and charts of the run over time, or of a plan's sweep.
//
// Contract:
//   - The page is a pure function of its inputs: the same report and timeline
//     give byte-identical HTML (no timestamps; the report's "timing" object,
//     the one non-deterministic part of a report, is left out).
//   - Memory is bounded however long the run: TimelineSampler keeps at most
//     max_buckets buckets, each the min, max and last value of every figure
//     over a run of consecutive events (or steps).
//   - The charts are drawn by the page's script from the embedded data; once
//     every chart is drawn it sets data-drawn="N" (N charts) on <html>, which
//     tests in a headless browser look for.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/replay/replayer.h"

namespace kvreplay {

// The figures the timeline CSV has for one event (replay) or step (simulate).
struct TimelinePoint {
  std::uint64_t x = 0;  // event index or step number, increasing
  double used_blocks = 0;
  double waste_ratio = 0;
  double logical_tokens = 0;
  double physical_tokens = 0;
  double cow_copies = 0;  // cumulative
  // simulate only (TimelineSampler's `simulate`):
  double in_use_blocks = 0;  // used blocks less cache residency
  double t = 0;              // virtual seconds at the end of the step
  double cached_blocks = 0;  // cached blocks no request holds
  double running = 0;        // requests running
  double waiting = 0;        // requests waiting
  double preemptions = 0;    // cumulative
  // simulate --offload (TimelineSampler's `tiers`): requests waiting for a
  // tier load, and each tier's (in lookup order) blocks held and cumulative
  // blocks stored and loaded.
  static constexpr std::size_t kTiers = 2;
  double loading = 0;
  std::array<double, kTiers> tier_resident{};
  std::array<double, kTiers> tier_stored{};
  std::array<double, kTiers> tier_loaded{};
};

// The point of an event (replay) from the figures the engine keeps.
inline TimelinePoint timeline_point(std::uint64_t x, const ReplayState& state,
                                    std::uint64_t cow_copies) {
  TimelinePoint p;
  p.x = x;
  p.used_blocks = static_cast<double>(state.used);
  p.waste_ratio = state.waste_ratio;
  p.logical_tokens = static_cast<double>(state.logical_tokens);
  p.physical_tokens = static_cast<double>(state.physical_tokens);
  p.cow_copies = static_cast<double>(cow_copies);
  p.in_use_blocks = p.used_blocks;
  return p;
}

// Downsamples a stream of points to at most max_buckets buckets: when full,
// neighbouring buckets are merged pairwise and every bucket then covers twice
// as many points. Deterministic: depends only on the points and their order.
class TimelineSampler {
 public:
  static constexpr std::size_t kSimulateFigures = 11;
  static constexpr std::size_t kReplayFigures = 5;  // the first five; simulate has eleven
  // Then, with offload tiers, `loading` and three figures per tier.
  static constexpr std::size_t kFiguresPerTier = 3;
  static constexpr std::size_t kFigures =
      kSimulateFigures + 1 + kFiguresPerTier * TimelinePoint::kTiers;
  static constexpr std::size_t kDefaultBuckets = 2000;
  static constexpr std::size_t kFleetBuckets = 500;  // each instance's, on a fleet's page

  // REQUIRES: max_buckets >= 2 and even. `simulate`: the figures of a
  // simulation's steps (in-use and cached blocks, virtual time, requests
  // running and waiting, preemptions) are kept; otherwise they are left out.
  // `tiers` (simulate --offload, at most TimelinePoint::kTiers): loading and
  // the first `tiers` tiers' figures are kept too.
  explicit TimelineSampler(std::size_t max_buckets = kDefaultBuckets, bool simulate = false,
                           std::size_t tiers = 0);

  void add(const TimelinePoint& point);

  std::uint64_t points() const { return points_; }
  std::size_t buckets() const { return buckets_.size(); }
  std::uint64_t per_bucket() const { return per_bucket_; }
  // {"points", "per_bucket", "x": [last x of each bucket], "FIGURE": {"min": [...],
  // "max": [...], "last": [...]}} for FIGURE in used_blocks, waste_ratio,
  // logical_tokens, physical_tokens, cow_copies, and with `simulate`
  // in_use_blocks, t, cached_blocks, running, waiting and preemptions, and
  // with `tiers` loading and tierK_resident, tierK_stored, tierK_loaded for
  // each tier K from 0.
  nlohmann::json to_json() const;

 private:
  struct Bucket {
    std::uint64_t x_last = 0;
    std::array<double, kFigures> min{};
    std::array<double, kFigures> max{};
    std::array<double, kFigures> last{};
  };

  std::size_t max_buckets_;
  bool simulate_;
  std::size_t tiers_;
  std::uint64_t per_bucket_ = 1;  // points per full bucket
  std::uint64_t open_count_ = 0;  // points in the last bucket
  std::uint64_t points_ = 0;
  std::vector<Bucket> buckets_;
};

// A replay or simulate page. `report` is the JSON report (its "timing" object
// is ignored); `x_label` names the timeline's x ("event" or "step"; a
// simulation's charts run over virtual time). `latency_cdf` (simulate):
// {"ttft_ms": [...], "tpot_ms": [...]}, quantiles from 0 to 1, drawn as CDFs
// with the report's SLOs.
std::string render_run_html(const nlohmann::json& report, const TimelineSampler& timeline,
                            std::string_view x_label,
                            const nlohmann::json& latency_cdf = nlohmann::json());

// A fleet's page (simulate --replicas, or prefill and decode instances): the
// fleet's cards and summary, a table of the instances, and charts over
// virtual time with one line per instance (KV in use as a share of its pool,
// requests waiting and running, preemptions), then the fleet's TTFT and
// TPOT CDFs. `timelines[i]` is instance i's; `report` has instances[].
// `single_pool`: {hit_rate, pool_blocks} of one instance holding the whole
// fleet's memory on the same trace, set beside the fleet's hit rate (null:
// no such card).
std::string render_fleet_html(const nlohmann::json& report,
                              const std::vector<TimelineSampler>& timelines,
                              const nlohmann::json& latency_cdf = nlohmann::json(),
                              const nlohmann::json& single_pool = nlohmann::json());

// A plan page: the sweep table and charts of preemptions, peak use, p99 TTFT
// and TPOT (and SLO attainment) against KV memory, one line per model,
// deployment and page size, and against GPUs when deployments are swept.
std::string render_plan_html(const nlohmann::json& plan);

}  // namespace kvreplay
