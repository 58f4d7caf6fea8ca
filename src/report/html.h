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

#include "engine/replayer.h"

namespace kvreplay {

// The figures the timeline CSV has for one event (replay) or step (simulate).
struct TimelinePoint {
  std::uint64_t x = 0;  // event index or step number, increasing
  double used_blocks = 0;
  double waste_ratio = 0;
  double logical_tokens = 0;
  double physical_tokens = 0;
  double cow_copies = 0;     // cumulative
  double in_use_blocks = 0;  // simulate: used blocks less cache residency
};

// The point of an event or step from the figures the engine keeps.
// `in_use`: the blocks requests hold, when a prefix cache keeps others (simulate).
inline TimelinePoint timeline_point(std::uint64_t x, const ReplayState& state,
                                    std::uint64_t cow_copies,
                                    std::optional<std::uint32_t> in_use = std::nullopt) {
  return TimelinePoint{x,
                       static_cast<double>(state.used),
                       state.waste_ratio,
                       static_cast<double>(state.logical_tokens),
                       static_cast<double>(state.physical_tokens),
                       static_cast<double>(cow_copies),
                       static_cast<double>(in_use.value_or(state.used))};
}

// Downsamples a stream of points to at most max_buckets buckets: when full,
// neighbouring buckets are merged pairwise and every bucket then covers twice
// as many points. Deterministic: depends only on the points and their order.
class TimelineSampler {
 public:
  static constexpr std::size_t kFigures = 6;
  static constexpr std::size_t kDefaultBuckets = 2000;

  // REQUIRES: max_buckets >= 2 and even. `in_use`: the page charts in-use
  // blocks apart from used ones (simulate); otherwise that figure is left out.
  explicit TimelineSampler(std::size_t max_buckets = kDefaultBuckets, bool in_use = false);

  void add(const TimelinePoint& point);

  std::uint64_t points() const { return points_; }
  std::size_t buckets() const { return buckets_.size(); }
  std::uint64_t per_bucket() const { return per_bucket_; }
  // {"points", "per_bucket", "x": [last x of each bucket], "FIGURE": {"min": [...],
  // "max": [...], "last": [...]}} for FIGURE in used_blocks, waste_ratio,
  // logical_tokens, physical_tokens, cow_copies, and in_use_blocks when asked for.
  nlohmann::json to_json() const;

 private:
  struct Bucket {
    std::uint64_t x_last = 0;
    std::array<double, kFigures> min{};
    std::array<double, kFigures> max{};
    std::array<double, kFigures> last{};
  };

  std::size_t max_buckets_;
  bool in_use_;
  std::uint64_t per_bucket_ = 1;  // points per full bucket
  std::uint64_t open_count_ = 0;  // points in the last bucket
  std::uint64_t points_ = 0;
  std::vector<Bucket> buckets_;
};

// A replay or simulate page. `report` is the JSON report (its "timing" object
// is ignored); `x_label` names the timeline's x ("event" or "step").
std::string render_run_html(const nlohmann::json& report, const TimelineSampler& timeline,
                            std::string_view x_label);

// A plan page: the sweep table and charts of preemptions, peak use, waste and
// throughput against KV memory, one line per model and page size.
std::string render_plan_html(const nlohmann::json& plan);

}  // namespace kvreplay
