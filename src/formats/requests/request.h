// Request: one record of a request trace (SPEC 2.2), whatever its format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay {

// The formats, one row each in requests/format_table.cc (names, detection,
// readers); outside src/formats/requests/ no code names a value.
enum class RequestFormat : std::uint8_t { kNative, kMooncake, kAzure, kBurstGpt };

std::string_view to_string(RequestFormat format);  // the row's name: "native", "mooncake", ...
std::optional<RequestFormat> parse_request_format(std::string_view name);
std::vector<std::string> request_format_names();  // in table order, for the command line
std::string request_format_help();  // "native (kvreplay's JSON Lines), ...": --format's help

// Arrivals are seconds in a double, bounded so that a double still resolves
// them to about a microsecond: 2^33 s (about 272 years), where its ulp is
// 2^-19 s (1.9 us). Past it latencies would drown in rounding (an arrival of
// 1e15 s has an ulp of 0.125 s), so every reader refuses a later arrival as
// an input error.
inline constexpr double kMaxArrivalSeconds = 8589934592.0;  // 2^33
// "VALUE is past the arrival bound of 2^33 s (...)": the problem, for every reader.
std::string past_arrival_bound(std::string_view value);

// Trace hash ids are below 2^62. kvreplay keys the pages no trace hash names
// above it (a request's own pages, a named prefix's, the keys a
// disaggregated fleet's decode side gives a prompt: engine/key_spaces.h), so
// a trace id there could alias one of them. Every reader refuses a larger id
// as an input error.
inline constexpr std::uint64_t kMaxTraceHashId = (std::uint64_t{1} << 62) - 1;
// "VALUE is in kvreplay's reserved range (...)": the problem, for every reader.
std::string reserved_hash_id(std::uint64_t value);

struct Request {
  std::uint64_t line = 0;    // where the record starts in its file
  double arrival = 0.0;      // seconds from the trace's time origin
  std::string id;            // native: the "id" value as JSON text; others: the line number
  std::uint32_t prompt = 0;  // prompt tokens (prefix included)
  std::uint32_t output = 0;  // tokens to generate (>= 1)
  std::uint32_t n = 1;       // parallel samples: n - 1 forks after prefill
  // A named shared prefix (native only): the first prefix_tokens tokens of the
  // prompt are identical across requests naming the same prefix.
  std::string prefix;
  std::uint32_t prefix_tokens = 0;
  // The conversation (or client) the request belongs to (native only): the
  // fleet's session router keeps a session on one instance.
  std::string session;
  // Content hashes of the prompt, one per hash_block_tokens tokens (the last may
  // be partial): equal ids mean an identical prefix up to and including that block.
  std::vector<std::uint64_t> hash_ids;
  std::uint32_t hash_block_tokens = 512;
  // The simulator's own mark, carried into the request's times: a fleet
  // follows a request from its prefill instance to its decode one by it.
  std::uint64_t tag = 0;
};

}  // namespace kvreplay
