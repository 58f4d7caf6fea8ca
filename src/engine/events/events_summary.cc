// events_summary_text and events_summary_json (engine/events/events_check.h):
// the figures of `kvreplay events` for people and as JSON.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <string_view>

#include "engine/events/events_check.h"

namespace kvreplay {

namespace {

std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

std::string events_summary_text(const EventsSummary& s, const std::string& name) {
  const std::uint64_t events = s.stored_events + s.removed_events + s.cleared_events;
  std::string out =
      fmt::format("{}: {}, {} ({} BlockStored, {} BlockRemoved, {} AllBlocksCleared)", name,
                  plural(s.batches, "batch", "batches"), plural(events, "event", "events"),
                  s.stored_events, s.removed_events, s.cleared_events);
  if (s.first_ts) {
    out += fmt::format(", ts {} to {} ({} s)", *s.first_ts, *s.last_ts, *s.last_ts - *s.first_ts);
  }
  out += s.unique ? ", one block a hash (--unique)" : ", counted per block";
  out += s.mid_stream ? ", mid-stream\n" : "\n";
  if (s.seq_batches > 0) {
    out += fmt::format("seq: {} batches numbered, {} ({} missing), {} started mid-run\n",
                       s.seq_batches, plural(s.seq_gaps, "gap", "gaps"), s.seq_missing,
                       plural(s.late_starts, "instance", "instances"));
  }
  if (s.max_interval > 0) {
    out += fmt::format("longest time between an instance's batches {:.6g} s (to ts {})\n",
                       s.max_interval, s.max_interval_ts);
  }
  for (const EventsMedium& m : s.media) {
    out += fmt::format(
        "instance {} {}: stored {}, removed {}, cleared {}, cached {} at the end, peak {} at ts "
        "{}\n",
        m.instance, m.medium, m.stored, m.removed, m.cleared, m.cached, m.peak, m.peak_ts);
    out += fmt::format(
        "  keys: stored {}, removed {}, cached {} at the end, peak {}; {} of a cached hash\n",
        m.keys_stored, m.keys_removed, m.keys_cached, m.keys_peak,
        plural(m.duplicate_stores, "store", "stores"));
    if (s.mid_stream) {
      out += fmt::format("  mid-stream: {} with a parent never stored (roots), {} not cached\n",
                         plural(m.orphan_stores, "BlockStored", "BlockStored"),
                         plural(m.unmatched_removals, "removal", "removals"));
    }
    out += m.churn ? fmt::format(
                         "  stored {:.6g} blocks/s, removed {:.6g} blocks/s, churn {:.6g} "
                         "blocks/s",
                         *m.stored_rate, *m.removed_rate, *m.churn)
                   : std::string("  churn n/a (no stream time)");
    if (m.reuses == 0) {
      out += "; no re-stores\n";
    } else {
      out += fmt::format(
          "; {}: distance p50 {} p90 {} p99 {} max {}, time from removal p50 {:.6g} s p99 "
          "{:.6g} s\n",
          plural(m.reuses, "re-store", "re-stores"), m.distance_p50, m.distance_p90, m.distance_p99,
          m.distance_max, m.time_p50, m.time_p99);
    }
    if (!s.sample_ts.empty()) {
      // The points as seconds after the first ts (vLLM's ts are epoch seconds).
      std::string ts_row = "  at +s ", cached_row = "  cached";
      for (std::size_t k = 0; k < s.sample_ts.size(); ++k) {
        std::string t = fmt::format("{:.4g}", s.sample_ts[k] - *s.first_ts);
        std::string c = fmt::format("{}", m.samples[k]);
        const std::size_t width = std::max(t.size(), c.size()) + 1;
        ts_row += fmt::format("{:>{}}", t, width);
        cached_row += fmt::format("{:>{}}", c, width);
      }
      out += ts_row + "\n" + cached_row + "\n";
    }
  }
  return out;
}

nlohmann::json events_summary_json(const EventsSummary& s, const std::string& name) {
  auto optional = [](const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
  };
  nlohmann::json media = nlohmann::json::array();
  for (const EventsMedium& m : s.media) {
    nlohmann::json reuse = {{"count", m.reuses}, {"distance", nullptr}, {"time_s", nullptr}};
    if (m.reuses > 0) {
      reuse["distance"] = {{"p50", m.distance_p50},
                           {"p90", m.distance_p90},
                           {"p99", m.distance_p99},
                           {"max", m.distance_max}};
      reuse["time_s"] = {{"p50", m.time_p50}, {"p99", m.time_p99}};
    }
    media.push_back(
        {{"instance", m.instance},
         {"medium", m.medium},
         {"stored", m.stored},
         {"removed", m.removed},
         {"cleared", m.cleared},
         {"cached", m.cached},
         {"peak", {{"cached", m.peak}, {"ts", m.peak_ts}}},
         {"churn_per_s", optional(m.churn)},
         {"stored_per_s", optional(m.stored_rate)},
         {"removed_per_s", optional(m.removed_rate)},
         {"duplicate_stores", m.duplicate_stores},
         {"keys",
          {{"stored", m.keys_stored},
           {"removed", m.keys_removed},
           {"cached", m.keys_cached},
           {"peak", m.keys_peak}}},
         {"mid_stream",
          {{"orphan_stores", m.orphan_stores}, {"unmatched_removals", m.unmatched_removals}}},
         {"samples", m.samples},
         {"reuse", std::move(reuse)}});
  }
  std::optional<double> span;
  if (s.first_ts) span = *s.last_ts - *s.first_ts;
  return {
      {"input", name},
      {"batches", s.batches},
      {"duplicates", !s.unique},
      {"mid_stream", s.mid_stream},
      {"seq",
       {{"batches", s.seq_batches},
        {"gaps", s.seq_gaps},
        {"missing", s.seq_missing},
        {"late_starts", s.late_starts}}},
      {"max_interval", {{"s", s.max_interval}, {"ts", s.max_interval_ts}}},
      {"events",
       {{"BlockStored", s.stored_events},
        {"BlockRemoved", s.removed_events},
        {"AllBlocksCleared", s.cleared_events}}},
      {"ts",
       {{"first", optional(s.first_ts)}, {"last", optional(s.last_ts)}, {"span", optional(span)}}},
      {"sample_ts", s.sample_ts},
      {"media", std::move(media)}};
}

}  // namespace kvreplay
