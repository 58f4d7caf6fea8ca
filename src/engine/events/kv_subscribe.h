// `kvreplay events --subscribe` (SPEC 3.8): records a live vLLM's KV events
// from its ZmqEventPublisher (vllm/distributed/kv_events.py, enabled by
// `vllm serve --kv-events-config`).
//
// The publisher's PUB socket sends each KVEventBatch as one multipart message,
// [topic, sequence (8 bytes, big-endian, from 0), msgpack payload]
// (ZmqEventPublisher._publisher_thread). A SUB socket connects to it,
// subscribed to the topic prefix; every batch becomes one JSON line
// (engine/events/kv_wire.h) given to the sink in sequence order.
//
// A sequence number beyond the next expected one is a gap (PUB drops what a
// slow subscriber's queue cannot hold, and a subscriber misses what was sent
// before it connected). With a replay endpoint (the publisher's ROUTER,
// KVEventsConfig.replay_endpoint) the gap is asked for as vLLM's
// _service_replay answers it: a DEALER sends [empty, start sequence (8 bytes,
// big-endian)]; the ROUTER answers every batch it still buffers from there,
// each [empty, sequence, payload], then the end marker [empty, -1 as 8 bytes,
// empty]. The batches of the gap are written before the one that revealed it;
// those the publisher no longer buffers (buffer_steps) are lost, and said so.
// A gap is noted (one line to `note`) whether or not it could be filled.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvreplay {

struct SubscribeOptions {
  std::string endpoint;                      // the PUB socket: tcp://HOST:PORT or ipc://PATH
  std::string topic;                         // the topic prefix subscribed to ("" for all)
  std::optional<std::string> replay;         // the ROUTER replay socket, if any
  std::optional<double> duration_s;          // stop after this long
  std::optional<std::uint64_t> max_batches;  // stop after writing this many
  int stop_fd = -1;                          // stop once this descriptor is readable
  double replay_timeout_s = 5;               // the longest wait for a replay's end marker
};

struct SubscribeSummary {
  std::uint64_t batches = 0;                           // written (replayed ones included)
  std::uint64_t stored = 0, removed = 0, cleared = 0;  // events written, by type
  std::optional<std::uint64_t> first_seq, last_seq;
  std::uint64_t gaps = 0;      // sequence gaps seen
  std::uint64_t missed = 0;    // batches in them
  std::uint64_t replayed = 0;  // of those, recovered through the replay socket
  std::uint64_t restarts = 0;  // sequence numbers that went back (a new publisher)
  double seconds = 0;          // from the first batch received to the last
  std::uint64_t events() const { return stored + removed + cleared; }
  std::uint64_t lost() const { return missed - replayed; }
};

// Where a stop came from, for the caller's summary.
enum class SubscribeStop { kStopFd, kDuration, kMaxBatches, kSinkFailed };

struct SubscribeResult {
  SubscribeSummary summary;
  SubscribeStop stop = SubscribeStop::kStopFd;
};

// A batch's JSON line; false stops the subscription (an output failed).
using LineSink = std::function<bool(std::string_view line)>;
using NoteSink = std::function<void(const std::string& note)>;

// Subscribes until a stop (options: stop_fd, duration, max_batches; a replay
// in progress completes first; after stop_fd or the duration, the batches that
// have already arrived, queued in the socket, are written too). Error: one line, the endpoint and
// the problem: an endpoint that is not tcp://HOST:PORT or ipc://PATH or whose host does not
// resolve, a message that is not [topic, 8-byte sequence, payload], or a
// payload that is not a KVEventBatch ("tcp://h:5557: batch 12: events[0]...").
// What was given to the sink before an error stays given.
Result<SubscribeResult, std::string> subscribe_kv_events(const SubscribeOptions& options,
                                                         const LineSink& sink,
                                                         const NoteSink& note);

}  // namespace kvreplay
