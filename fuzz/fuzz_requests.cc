// Fuzz target: the request readers (native, Mooncake, Azure, BurstGPT), with
// the format forced (KVREPLAY_FUZZ_FORMAT = "native", "mooncake", "azure",
// "burstgpt") or told by content ("auto"), and the requests they accept
// scheduled by a Simulator over a small pool with checks after every step.
//
// Oracles besides fuzz_support.h's: every request returned keeps the
// reader's documented contract (request_reader.h), and the simulation breaks
// no invariant. Requests are shrunk before simulation (prompt, output and n
// capped) so that one input stays fast; the reader itself sees them whole.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "app/simulation/simulation.h"
#include "engine/simulator.h"
#include "formats/requests/request_reader.h"
#include "fuzz_support.h"

#ifndef KVREPLAY_FUZZ_FORMAT
#define KVREPLAY_FUZZ_FORMAT "auto"
#endif

namespace {

using namespace kvreplay;

constexpr std::size_t kMaxSimulated = 64;  // requests
constexpr std::uint32_t kMaxPrompt = 2048;
constexpr std::uint32_t kMaxOutput = 32;
constexpr std::uint32_t kMaxSamples = 4;

std::optional<RequestFormat> forced_format() {
  constexpr std::string_view kFormat = KVREPLAY_FUZZ_FORMAT;
  if (kFormat == "auto") return std::nullopt;
  auto format = parse_request_format(kFormat);
  if (!format) fuzz::fail("unknown KVREPLAY_FUZZ_FORMAT", kFormat);
  return format;
}

void check_request(const Request& r, std::optional<double> previous_arrival) {
  auto bad = [&](std::string_view what) { fuzz::fail("request breaks the contract", what); };
  if (r.prompt < 1) bad("prompt < 1");
  if (r.output < 1) bad("output < 1");
  if (r.n < 1) bad("n < 1");
  if (!std::isfinite(r.arrival) || r.arrival < 0) bad("arrival not finite and >= 0");
  if (std::signbit(r.arrival)) bad("arrival is -0");
  if (previous_arrival && r.arrival < *previous_arrival) bad("arrival goes backwards");
  if (r.prefix.empty() != (r.prefix_tokens == 0)) bad("prefix without prefix_tokens");
  if (r.prefix_tokens > r.prompt) bad("prefix_tokens > prompt");
  if (r.id.size() > RequestReader::kMaxField) bad("id longer than kMaxField");
  if (r.hash_block_tokens < 1) bad("hash_block_tokens < 1");
  if (!r.hash_ids.empty()) {
    std::uint64_t blocks =
        (std::uint64_t{r.prompt} + r.hash_block_tokens - 1) / r.hash_block_tokens;
    if (r.hash_ids.size() != blocks) bad("hash_ids count != ceil(prompt / hash_block_tokens)");
  }
}

// The request cut down to fuzzing size, still within the reader's contract.
Request shrink(Request r) {
  r.prompt = std::min(r.prompt, kMaxPrompt);
  r.output = std::min(r.output, kMaxOutput);
  r.n = std::min(r.n, kMaxSamples);
  r.prefix_tokens = std::min(r.prefix_tokens, r.prompt);
  if (!r.hash_ids.empty()) {
    r.hash_ids.resize((std::uint64_t{r.prompt} + r.hash_block_tokens - 1) / r.hash_block_tokens);
  }
  return r;
}

void read_and_simulate(std::string_view data) {
  std::optional<fuzz::MemoryFile> file;
  InputResult<std::unique_ptr<RequestReader>> opened = Unexpected{InputError{}};
  if (fuzz::is_gzip(data)) {
    file.emplace(data);
    opened = RequestReader::open(file->path(), forced_format());
  } else {
    opened = RequestReader::from_string(std::string(data), fuzz::kName, forced_format());
  }
  if (!opened) {
    fuzz::check_error(opened.error(), data);
    return;
  }
  RequestReader& reader = *opened.value();
  if (auto forced = forced_format(); forced && reader.format() != *forced) {
    fuzz::fail("forced format not kept", to_string(reader.format()));
  }
  ConfigOverrides overrides;
  overrides.pool_blocks = 64;
  overrides.max_seq_tokens = 4096;
  auto config = resolve_sim_config(overrides);
  if (!config) fuzz::fail("fixed simulation config rejected", config.error().to_string());
  SimOptions options;
  options.check = CheckPolicy{CheckPolicy::Mode::kEvery, 1};
  Simulator sim(config.value(), options);

  Request request;
  std::optional<double> previous;
  std::size_t submitted = 0;
  for (;;) {
    auto more = reader.next(request);
    if (!more) {
      fuzz::check_error(more.error(), data);
      return;
    }
    if (!more.value()) break;
    check_request(request, previous);
    previous = request.arrival;
    if (submitted < kMaxSimulated) {
      ++submitted;
      Request small = shrink(request);
      double arrival = small.arrival;
      if (!sim.run_until(arrival)) fuzz::fail("invariant violated", sim.violation()->message);
      sim.submit(std::move(small));
    }
  }
  if (!sim.run_until(std::numeric_limits<double>::infinity())) {
    fuzz::fail("invariant violated", sim.violation()->message);
  }
  if (!sim.finish()) fuzz::fail("invariant violated at the end", sim.violation()->message);
  if (sim.sim_totals().finished + sim.sim_totals().skipped != submitted) {
    fuzz::fail("requests neither finished nor skipped", std::to_string(submitted));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  read_and_simulate(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
