// Shared helpers of the data-plane tests: geometries, a dense reference arena,
// the fp64 attention reference, and a replay driver with a data plane attached.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "dataplane/arena.h"
#include "dataplane/backend.h"
#include "dataplane/content.h"
#include "dataplane/data_plane.h"
#include "engine/replay/replayer.h"
#include "formats/kvtrace_reader.h"
#include "model/run_config.h"

namespace kvreplay::test {

// memcmp that accepts empty (possibly null) ranges.
inline int bytes_compare(const void* a, const void* b, std::size_t n) {
  return n == 0 ? 0 : std::memcmp(a, b, n);
}

inline PagedKvConfig geometry(std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim,
                              Dtype dtype, std::uint32_t page_tokens, std::uint32_t pool_blocks,
                              std::uint32_t max_seq_tokens = 4096) {
  PagedKvConfig config;
  config.layers = layers;
  config.kv_heads = kv_heads;
  config.head_dim = head_dim;
  config.dtype = dtype;
  config.page_tokens = page_tokens;
  config.pool_blocks = pool_blocks;
  config.max_seq_tokens = max_seq_tokens;
  return config;
}

// A small geometry for the example traces that use a model preset: the same
// pool (in blocks), so every figure stays; `pool_blocks` as in the trace.
inline ConfigOverrides small_geometry(std::uint32_t pool_blocks) {
  ConfigOverrides overrides;
  overrides.layers = 2;
  overrides.kv_heads = 2;
  overrides.head_dim = 4;
  overrides.dtype = "fp16";
  overrides.pool_blocks = pool_blocks;
  return overrides;
}

inline constexpr Dtype kAllDtypes[] = {Dtype::kFp32, Dtype::kFp16, Dtype::kBf16, Dtype::kFp8};

// A dense KV store per sequence: [layer][token][2][kv_heads][head_dim], the
// layout of a gather's output for one item.
struct DenseSequence {
  std::vector<std::uint8_t> bytes;
  std::uint32_t length = 0;
};

// Writes the content of (writer, position) into a dense [layers][capacity][token] buffer.
inline void write_dense(std::uint8_t* dense, const ArenaView& shape, std::uint64_t capacity,
                        std::uint32_t writer, std::uint32_t position) {
  const std::uint64_t token_bytes = shape.token_bytes();
  for (std::uint32_t layer = 0; layer < shape.layers; ++layer) {
    content::fill_token_row(dense + (layer * capacity + position) * token_bytes, shape.dtype,
                            writer, position, layer, shape.kv_heads, shape.head_dim,
                            shape.kv_tensors);
  }
}

// The tolerance of attention against the fp64 reference: the dtype's unit
// roundoff (fp16 2^-11, bf16 2^-8, fp8 e4m3 2^-4), and 1e-4 for fp32 (the floor
// of fp32 accumulation over a few thousand tokens). Inputs decode exactly, so
// the kernels' real error is far smaller; a dropped token costs ~1/length.
inline double attention_tolerance(ElemType dtype) {
  switch (dtype) {
    case ElemType::kFp32: return 1e-4;
    case ElemType::kFp16: return 4.8828125e-4;
    case ElemType::kBf16: return 3.90625e-3;
    case ElemType::kFp8: return 6.25e-2;
  }
  return 1e-4;
}

// fp64 decode attention over a dense sequence: q [q_heads][head_dim], out the same.
inline void reference_attention(const ArenaView& shape, const std::uint8_t* dense,
                                std::uint64_t capacity, std::uint32_t length, std::uint32_t layer,
                                std::uint32_t group, const float* q, double* out) {
  const std::uint32_t head_dim = shape.head_dim, q_heads = shape.kv_heads * group;
  const std::uint64_t token_bytes = shape.token_bytes(), row_bytes = shape.row_bytes();
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(length);
  for (std::uint32_t h = 0; h < q_heads; ++h) {
    const std::uint32_t kv_head = h / group;
    double* o = out + std::uint64_t{h} * head_dim;
    std::fill(o, o + head_dim, 0.0);
    if (length == 0) continue;
    auto row = [&](std::uint32_t t, std::uint32_t kv) {
      return dense + (layer * capacity + t) * token_bytes +
             (kv * shape.kv_heads + kv_head) * row_bytes;
    };
    double max_score = -INFINITY;
    for (std::uint32_t t = 0; t < length; ++t) {
      double dot = 0.0;
      for (std::uint32_t d = 0; d < head_dim; ++d) {
        dot += static_cast<double>(q[h * head_dim + d]) *
               static_cast<double>(content::load_element(row(t, 0), shape.dtype, d));
      }
      scores[t] = dot * scale;
      max_score = std::max(max_score, scores[t]);
    }
    double sum = 0.0;
    for (std::uint32_t t = 0; t < length; ++t) {
      scores[t] = std::exp(scores[t] - max_score);
      sum += scores[t];
    }
    for (std::uint32_t t = 0; t < length; ++t) {
      for (std::uint32_t d = 0; d < head_dim; ++d) {
        o[d] +=
            scores[t] / sum * static_cast<double>(content::load_element(row(t, 1), shape.dtype, d));
      }
    }
  }
}

// The largest |out - ref| / max(1, |ref|).
inline double max_relative_error(const float* out, const double* ref, std::size_t n) {
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(
        worst, std::abs(static_cast<double>(out[i]) - ref[i]) / std::max(1.0, std::abs(ref[i])));
  }
  return worst;
}

// A replay with a data plane: the outcome and what the data plane saw.
struct DataReplay {
  bool input_error = false;
  std::string input_message;
  bool violated = false;
  std::optional<Violation> violation;
  ReplayTotals totals;
  VerifySummary verify;
  std::uint64_t copies_launched = 0;  // copy_blocks launches
};

// Replays `trace` (kvtrace text) with a data plane of `backend` (none: no data
// plane). Checks are `check` (end by default); on_oom skip.
inline DataReplay replay_text(const std::string& trace, BackendKind backend,
                              DataPlaneOptions options = {}, DataPlaneFaults faults = {},
                              CheckPolicy check = CheckPolicy{CheckPolicy::Mode::kEnd, 1},
                              ConfigOverrides overrides = {},
                              const std::function<void(RunConfig&)>& adjust = {}) {
  DataReplay out;
  auto opened = KvTraceReader::from_string(trace, "test.jsonl");
  if (!opened) {
    out.input_error = true;
    out.input_message = opened.error().to_string();
    return out;
  }
  KvTraceReader& reader = *opened.value();
  auto config = resolve_run_config(reader.header().config, overrides, reader.name(),
                                   reader.header().config_line);
  if (!config) {
    out.input_error = true;
    out.input_message = config.error().to_string();
    return out;
  }
  if (adjust) adjust(config.value());
  Replayer replayer(config.value(), check, OomPolicy::kSkip);
  std::unique_ptr<DataPlane> plane;
  if (backend != BackendKind::kNone) {
    auto made = make_backend(backend, config.value().kv, std::nullopt);
    if (!made) {
      out.input_error = true;
      out.input_message = made.error();
      return out;
    }
    plane = std::make_unique<DataPlane>(std::move(made).value(), options, faults);
    replayer.set_observer(plane.get());
  }
  Event event;
  for (;;) {
    auto more = reader.next(event);
    if (!more) {
      out.input_error = true;
      out.input_message = more.error().to_string();
      return out;
    }
    if (!more.value()) break;
    auto outcome = replayer.apply(event, reader.name());
    if (!outcome) {
      out.input_error = true;
      out.input_message = outcome.error().to_string();
      return out;
    }
    if (outcome.value() == Replayer::Outcome::kViolation) {
      out.violated = true;
      break;
    }
  }
  if (!out.violated) out.violated = replayer.finish() == Replayer::Outcome::kViolation;
  out.violation = replayer.violation();
  out.totals = replayer.totals();
  if (plane) {
    out.verify = plane->verify_summary();
    plane->backend().synchronize();
    if (const KernelTiming* copies = plane->backend().stats().find(kKernelCopyBlocks)) {
      out.copies_launched = copies->launches;
    }
  }
  return out;
}

// A random but valid kvtrace: prefixes, admits (some on a prefix), appends,
// decodes, forks, frees, prefix drops and check events, on a small pool (some
// operations exhaust it: replay with on_oom skip).
inline std::string random_trace(std::uint64_t seed, std::uint32_t events,
                                const std::string& config) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };
  std::string out = "{\"kvtrace\": 1, \"config\": " + config + "}\n";
  std::vector<std::uint64_t> live;
  std::vector<std::pair<std::string, std::uint32_t>> prefixes;
  std::uint64_t next_seq = 0, next_prefix = 0;
  std::vector<std::uint32_t> lengths;  // parallel to live (upper bound; oom skips are fine)
  for (std::uint32_t i = 0; i < events; ++i) {
    const std::uint64_t roll = pick(100);
    if (roll < 6 || (live.empty() && roll < 50)) {
      if (!prefixes.empty() && pick(2) == 0) {
        const auto& [id, tokens] = prefixes[pick(prefixes.size())];
        const std::uint32_t prompt = tokens + static_cast<std::uint32_t>(pick(9));
        out += "{\"op\": \"admit\", \"seq\": " + std::to_string(next_seq) +
               ", \"prompt\": " + std::to_string(prompt) + ", \"prefix\": \"" + id + "\"}\n";
        lengths.push_back(prompt);
      } else {
        const auto prompt = static_cast<std::uint32_t>(pick(20));
        out += "{\"op\": \"admit\", \"seq\": " + std::to_string(next_seq) +
               ", \"prompt\": " + std::to_string(prompt) + "}\n";
        lengths.push_back(prompt);
      }
      live.push_back(next_seq++);
    } else if (roll < 10) {
      std::string id = "p" + std::to_string(next_prefix++);
      const auto tokens = static_cast<std::uint32_t>(1 + pick(15));
      out += "{\"op\": \"prefix\", \"id\": \"" + id + "\", \"tokens\": " + std::to_string(tokens) +
             "}\n";
      prefixes.push_back({id, tokens});
    } else if (roll < 12 && !prefixes.empty()) {
      const std::size_t k = pick(prefixes.size());
      out += "{\"op\": \"drop_prefix\", \"id\": \"" + prefixes[k].first + "\"}\n";
      prefixes.erase(prefixes.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (roll < 20 && !live.empty()) {
      const std::size_t k = pick(live.size());
      out += "{\"op\": \"fork\", \"seq\": " + std::to_string(live[k]) +
             ", \"child\": " + std::to_string(next_seq) + "}\n";
      lengths.push_back(lengths[k]);
      live.push_back(next_seq++);
    } else if (roll < 30 && !live.empty()) {
      const std::size_t k = pick(live.size());
      out += "{\"op\": \"free\", \"seq\": " + std::to_string(live[k]) + "}\n";
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      lengths.erase(lengths.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (roll < 38 && !live.empty()) {
      const std::size_t k = pick(live.size());
      const auto tokens = static_cast<std::uint32_t>(1 + pick(12));
      if (lengths[k] + tokens > 200) continue;
      out += "{\"op\": \"append\", \"seq\": " + std::to_string(live[k]) +
             ", \"tokens\": " + std::to_string(tokens) + "}\n";
      lengths[k] += tokens;
    } else if (roll < 42) {
      out += "{\"op\": \"check\"}\n";
    } else if (!live.empty()) {
      std::vector<std::size_t> chosen;
      for (std::size_t k = 0; k < live.size(); ++k) {
        if (pick(2) == 0 && lengths[k] + 2 <= 200) chosen.push_back(k);
      }
      if (chosen.empty()) continue;
      const auto tokens = static_cast<std::uint32_t>(1 + pick(2));
      std::string seqs;
      for (std::size_t k : chosen) {
        seqs += (seqs.empty() ? "" : ", ") + std::to_string(live[k]);
        lengths[k] += tokens;
      }
      out += "{\"op\": \"decode\", \"seqs\": [" + seqs +
             "], \"tokens\": " + std::to_string(tokens) + "}\n";
    }
  }
  return out;
}

// A random but valid kvtrace of the prefix cache and the offload tiers:
// admits on cached pages (hits), appends, frees, cache/uncache of full pages,
// stores to the cpu and disk tiers, loads back under new names, drops. The
// pool (`pool_blocks` in `config`) must hold what it keeps live: at most 6
// sequences of at most `max_tokens` tokens and at most 40 cached pages, so
// that no operation runs out of blocks and every length is exact.
inline std::string random_cache_trace(std::uint64_t seed, std::uint32_t events,
                                      const std::string& config, std::uint32_t page_tokens,
                                      std::uint32_t max_tokens) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::uint64_t n) { return n == 0 ? 0 : rng() % n; };
  std::string out = "{\"kvtrace\": 1, \"config\": " + config + "}\n";
  struct Seq {
    std::uint64_t id;
    std::uint32_t length;
  };
  std::vector<Seq> live;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> cached;                // name, page
  std::array<std::vector<std::pair<std::uint64_t, std::uint32_t>>, 2> tiers;  // key, page
  std::uint64_t next_seq = 0, next_name = 0, next_key = 1000;
  const char* tier_names[] = {"cpu", "disk"};
  for (std::uint32_t i = 0; i < events; ++i) {
    const std::uint64_t roll = pick(100);
    if ((roll < 15 || live.empty()) && live.size() < 6) {
      // Hits: a cached page for page 0, 1, ... while one is found.
      std::string hits;
      std::uint32_t pages = 0;
      for (;; ++pages) {
        std::vector<std::uint64_t> candidates;
        for (const auto& [name, page] : cached) {
          if (page == pages) candidates.push_back(name);
        }
        if (candidates.empty() || pick(4) == 0) break;
        hits += (hits.empty() ? "" : ", ") + std::to_string(candidates[pick(candidates.size())]);
      }
      const std::uint32_t prompt = pages * page_tokens + static_cast<std::uint32_t>(pick(30));
      if (prompt > max_tokens) continue;
      out += "{\"op\": \"admit\", \"seq\": " + std::to_string(next_seq) +
             ", \"prompt\": " + std::to_string(prompt) +
             (pages > 0 ? ", \"hits\": [" + hits + "]" : "") + "}\n";
      live.push_back({next_seq++, prompt});
    } else if (roll < 25 && !live.empty()) {
      Seq& seq = live[pick(live.size())];
      const auto tokens = static_cast<std::uint32_t>(1 + pick(9));
      if (seq.length + tokens > max_tokens) continue;
      out += "{\"op\": \"append\", \"seq\": " + std::to_string(seq.id) +
             ", \"tokens\": " + std::to_string(tokens) + "}\n";
      seq.length += tokens;
    } else if (roll < 33 && !live.empty()) {
      const std::size_t k = pick(live.size());
      out += "{\"op\": \"free\", \"seq\": " + std::to_string(live[k].id) + "}\n";
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (roll < 48 && !live.empty() && cached.size() < 40) {
      const Seq& seq = live[pick(live.size())];
      if (seq.length < page_tokens) continue;
      const auto page = static_cast<std::uint32_t>(pick(seq.length / page_tokens));
      out += "{\"op\": \"cache\", \"seq\": " + std::to_string(seq.id) +
             ", \"page\": " + std::to_string(page) + ", \"block\": " + std::to_string(next_name) +
             "}\n";
      cached.push_back({next_name++, page});
    } else if (roll < 56 && !cached.empty()) {
      const std::size_t k = pick(cached.size());
      out += "{\"op\": \"uncache\", \"block\": " + std::to_string(cached[k].first) + "}\n";
      cached.erase(cached.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (roll < 70 && !live.empty()) {
      const Seq& seq = live[pick(live.size())];
      if (seq.length < page_tokens) continue;
      const std::size_t t = pick(2);
      const auto page = static_cast<std::uint32_t>(pick(seq.length / page_tokens));
      out += "{\"op\": \"store\", \"seq\": " + std::to_string(seq.id) +
             ", \"page\": " + std::to_string(page) + ", \"tier\": \"" + tier_names[t] +
             "\", \"key\": " + std::to_string(next_key) + "}\n";
      tiers[t].push_back({next_key++, page});
    } else if (roll < 80 && cached.size() < 40) {
      const std::size_t t = pick(2);
      if (tiers[t].empty()) continue;
      const auto& [key, page] = tiers[t][pick(tiers[t].size())];
      out += "{\"op\": \"load\", \"tier\": \"" + std::string(tier_names[t]) +
             "\", \"key\": " + std::to_string(key) + ", \"block\": " + std::to_string(next_name) +
             "}\n";
      cached.push_back({next_name++, page});
    } else if (roll < 88) {
      const std::size_t t = pick(2);
      if (tiers[t].empty()) continue;
      const std::size_t k = pick(tiers[t].size());
      out += "{\"op\": \"drop\", \"tier\": \"" + std::string(tier_names[t]) +
             "\", \"key\": " + std::to_string(tiers[t][k].first) + "}\n";
      tiers[t].erase(tiers[t].begin() + static_cast<std::ptrdiff_t>(k));
    } else if (roll < 92) {
      out += "{\"op\": \"check\"}\n";
    } else if (!live.empty()) {
      std::string seqs;
      for (Seq& seq : live) {
        if (seq.length + 1 > max_tokens) continue;
        seqs += (seqs.empty() ? "" : ", ") + std::to_string(seq.id);
        ++seq.length;
      }
      if (!seqs.empty()) out += "{\"op\": \"decode\", \"seqs\": [" + seqs + "]}\n";
    }
  }
  return out;
}

}  // namespace kvreplay::test
