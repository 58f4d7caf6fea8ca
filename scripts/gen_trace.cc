// kvtrace_gen: writes a large synthetic kvtrace v1 (JSON Lines) to stdout for
// benchmarks and soak runs. Deterministic for a given seed.
//
// Workload: up to --live sequences at once. New requests are admitted (a third
// of them on one of --prefixes shared system prompts), prefilled in chunks
// (append), decoded in batches of up to --batch sequences (decode), sometimes
// forked for parallel samples, and freed when they reach their output length.
// Prefixes are rotated now and then (drop_prefix + prefix). The pool is sized
// so that the trace never exhausts it, unless --pool-blocks sets it (smaller:
// replay with --on-oom skip; soak runs use a small pool so that --check every,
// O(pool blocks) per check, stays fast). --max-tokens bounds every sequence
// (prompts, prefixes and outputs scale down with it).
//
// Usage: kvtrace_gen --events 5000000 [--seed 1] [--live 256] [--batch 32]
//                    [--prefixes 8] [--page-tokens 16] [--check-every 0]
//                    [--max-tokens 8192] [--pool-blocks N]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
  std::uint64_t events = 1000000;
  std::uint64_t seed = 1;
  std::uint32_t live = 256;
  std::uint32_t batch = 32;
  std::uint32_t prefixes = 8;
  std::uint32_t page_tokens = 16;
  std::uint64_t check_every = 0;  // emit a check event every N events (0: never)
  std::uint32_t max_tokens = 8192;
  std::uint64_t pool_blocks = 0;  // 0: large enough never to be exhausted
};

struct Seq {
  std::uint64_t id;
  std::uint32_t length;
  std::uint32_t target;
  std::uint32_t prefill_left;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "kvtrace_gen: %s\nusage: kvtrace_gen --events N [--seed S] [--live L] "
               "[--batch B] [--prefixes P] [--page-tokens T] [--check-every N] "
               "[--max-tokens M] [--pool-blocks N]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value");
    std::uint64_t value = std::strtoull(argv[++i], nullptr, 10);
    if (flag == "--events")
      o.events = value;
    else if (flag == "--seed")
      o.seed = value;
    else if (flag == "--live")
      o.live = static_cast<std::uint32_t>(value);
    else if (flag == "--batch")
      o.batch = static_cast<std::uint32_t>(value);
    else if (flag == "--prefixes")
      o.prefixes = static_cast<std::uint32_t>(value);
    else if (flag == "--page-tokens")
      o.page_tokens = static_cast<std::uint32_t>(value);
    else if (flag == "--check-every")
      o.check_every = value;
    else if (flag == "--max-tokens")
      o.max_tokens = static_cast<std::uint32_t>(value);
    else if (flag == "--pool-blocks")
      o.pool_blocks = value;
    else
      usage("unknown flag");
  }
  if (o.live == 0 || o.batch == 0 || o.page_tokens == 0) usage("values must be >= 1");
  if (o.max_tokens < 64 || o.max_tokens > (1u << 24)) usage("--max-tokens must be 64..2^24");
  const std::uint32_t max_tokens = o.max_tokens;
  // Sizes scale with --max-tokens (these are the default's, 8192): a prompt
  // part of at most 3000 (M/2), a prefix of 100..2000 (M/4) and an output of at
  // most 600 (M/4) tokens.
  const std::uint32_t max_prompt = std::min<std::uint32_t>(3000, max_tokens / 2);
  const std::uint32_t max_prefix = std::min<std::uint32_t>(2000, max_tokens / 4);
  const std::uint32_t min_prefix = std::min<std::uint32_t>(100, max_prefix);
  const std::uint32_t max_output = std::min<std::uint32_t>(600, max_tokens / 4);
  const std::uint64_t pages_per_seq = (max_tokens + o.page_tokens - 1) / o.page_tokens;
  const std::uint64_t prefix_pages = (max_prefix + o.page_tokens - 1) / o.page_tokens;
  // Enough for every live sequence at full length (forks included) plus the
  // prefixes (256 blocks each at the default --max-tokens, as before).
  const std::uint64_t prefix_allowance = std::max<std::uint64_t>(prefix_pages + 1, max_tokens / 32);
  const std::uint64_t pool = o.pool_blocks != 0 ? o.pool_blocks
                                                : (o.live + 1) * (pages_per_seq + 1) +
                                                      (o.prefixes + 1) * prefix_allowance + 64;
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  static char out_buffer[1 << 20];  // outlives main: stdout is flushed at exit
  std::setvbuf(stdout, out_buffer, _IOFBF, sizeof out_buffer);
  std::printf(
      "{\"kvtrace\": 1, \"config\": {\"model\": \"llama-3-8b\", \"page_tokens\": %u, "
      "\"pool_blocks\": %llu, \"max_seq_tokens\": %u}}\n",
      o.page_tokens, static_cast<unsigned long long>(pool), max_tokens);

  std::vector<Seq> seqs;
  std::vector<std::uint32_t> prefix_tokens(o.prefixes, 0);
  std::vector<std::uint32_t> prefix_generation(o.prefixes, 0);
  std::uint64_t next_id = 0;
  std::uint64_t written = 0;
  double t = 0.0;
  auto emit_prefix = [&](std::uint32_t p) {
    prefix_tokens[p] = uniform(min_prefix, max_prefix);
    std::printf("{\"op\": \"prefix\", \"id\": \"sys%u.%u\", \"tokens\": %u}\n", p,
                prefix_generation[p], prefix_tokens[p]);
    ++written;
  };
  for (std::uint32_t p = 0; p < o.prefixes && written < o.events; ++p) emit_prefix(p);
  std::vector<std::uint32_t> batch_index;
  while (written < o.events) {
    t += 0.001;
    std::uint32_t roll = uniform(0, 99);
    if (o.check_every != 0 && written % o.check_every == o.check_every - 1) {
      std::printf("{\"op\": \"check\"}\n");
    } else if (seqs.size() < o.live && (roll < 10 || seqs.empty())) {
      // Admit: prompt includes the prefix when there is one.
      Seq s{next_id++, 0, 0, 0};
      std::uint32_t prompt = uniform(16, max_prompt);
      bool with_prefix = o.prefixes > 0 && uniform(0, 2) == 0;
      if (with_prefix) {
        std::uint32_t p = uniform(0, o.prefixes - 1);
        prompt += prefix_tokens[p];
        std::uint32_t first = std::min(prompt, prefix_tokens[p] + uniform(0, 512));
        std::printf(
            "{\"op\": \"admit\", \"seq\": %llu, \"prompt\": %u, \"prefix\": \"sys%u.%u\", "
            "\"t\": %.3f}\n",
            static_cast<unsigned long long>(s.id), first, p, prefix_generation[p], t);
        s.length = first;
        s.prefill_left = prompt - first;
      } else {
        std::uint32_t first = std::min(prompt, uniform(1, 512));
        std::printf("{\"op\": \"admit\", \"seq\": %llu, \"prompt\": %u, \"t\": %.3f}\n",
                    static_cast<unsigned long long>(s.id), first, t);
        s.length = first;
        s.prefill_left = prompt - first;
      }
      s.target =
          std::min<std::uint32_t>(max_tokens, s.length + s.prefill_left + uniform(1, max_output));
      seqs.push_back(s);
    } else if (roll < 25 && !seqs.empty()) {
      // Chunked prefill of one sequence (or a speculative append).
      Seq& s = seqs[uniform(0, static_cast<std::uint32_t>(seqs.size() - 1))];
      std::uint32_t chunk =
          s.prefill_left > 0 ? std::min(s.prefill_left, uniform(64, 512)) : uniform(1, 4);
      chunk = std::min(chunk, s.target - s.length);
      if (chunk == 0) {
        std::printf("{\"op\": \"free\", \"seq\": %llu}\n", static_cast<unsigned long long>(s.id));
        s = seqs.back();
        seqs.pop_back();
      } else {
        std::printf("{\"op\": \"append\", \"seq\": %llu, \"tokens\": %u}\n",
                    static_cast<unsigned long long>(s.id), chunk);
        s.length += chunk;
        s.prefill_left -= std::min(s.prefill_left, chunk);
      }
    } else if (roll < 27 && !seqs.empty() && seqs.size() < o.live) {
      Seq parent = seqs[uniform(0, static_cast<std::uint32_t>(seqs.size() - 1))];
      Seq child{next_id++, parent.length, parent.target, parent.prefill_left};
      std::printf("{\"op\": \"fork\", \"seq\": %llu, \"child\": %llu}\n",
                  static_cast<unsigned long long>(parent.id),
                  static_cast<unsigned long long>(child.id));
      seqs.push_back(child);
    } else if (roll < 28 && o.prefixes > 0) {
      std::uint32_t p = uniform(0, o.prefixes - 1);
      std::printf("{\"op\": \"drop_prefix\", \"id\": \"sys%u.%u\"}\n", p, prefix_generation[p]);
      ++prefix_generation[p];
      ++written;
      if (written < o.events) emit_prefix(p);
      continue;
    } else if (!seqs.empty()) {
      // Decode a batch of sequences; free those that reach their target.
      batch_index.clear();
      std::uint32_t n = std::min<std::uint32_t>(o.batch, static_cast<std::uint32_t>(seqs.size()));
      std::uint32_t start = uniform(0, static_cast<std::uint32_t>(seqs.size() - 1));
      for (std::uint32_t k = 0; k < n; ++k) {
        batch_index.push_back(static_cast<std::uint32_t>((start + k) % seqs.size()));
      }
      bool any_done = false;
      for (std::uint32_t i : batch_index) any_done = any_done || seqs[i].length >= seqs[i].target;
      if (any_done) {
        for (std::size_t i = 0; i < seqs.size();) {
          if (seqs[i].length >= seqs[i].target) {
            std::printf("{\"op\": \"free\", \"seq\": %llu}\n",
                        static_cast<unsigned long long>(seqs[i].id));
            seqs[i] = seqs.back();
            seqs.pop_back();
            break;
          }
          ++i;
        }
      } else {
        std::fputs("{\"op\": \"decode\", \"seqs\": [", stdout);
        for (std::size_t k = 0; k < batch_index.size(); ++k) {
          std::printf(k == 0 ? "%llu" : ", %llu",
                      static_cast<unsigned long long>(seqs[batch_index[k]].id));
          ++seqs[batch_index[k]].length;
        }
        std::fputs("]}\n", stdout);
      }
    } else {
      std::printf("{\"op\": \"check\"}\n");
    }
    ++written;
  }
  return 0;
}
