// A vLLM KV-event publisher for tests (vllm/distributed/kv_events.py:
// ZmqEventPublisher), used in process by tests/engine/kv_subscribe_test.cc and
// as the program tests/cli/kv_publisher.cc.
//
// The payloads are msgspec's msgpack bytes, written by hand by msgspec's own
// rules (msgspec/_core.c, mpack_encode_*): an integer in its smallest form
// (positive fixint, uint8..uint64; negative fixint, int8..int64), a float
// always as float64, str as fixstr/str8/str16/str32, bytes as bin8/16/32,
// arrays and maps as fix/16/32; a Struct with array_like as an array of its
// fields in order, else as a map of them by name, omit_defaults leaving out
// the fields equal to their defaults (an array only at its end); a tagged
// Struct's tag first ("type" in a map).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvreplay::testing {

class MsgpackWriter {
 public:
  void nil() { bytes_.push_back(0xc0); }
  void uint(std::uint64_t value);
  void sint(std::int64_t value);
  void f64(double value);
  void str(std::string_view text);
  void bin(std::span<const std::uint8_t> data);
  void array(std::size_t count) { header(count, 0x90, 0xdc); }
  void map(std::size_t count) { header(count, 0x80, 0xde); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  void header(std::size_t count, std::uint8_t fix, std::uint8_t wide);
  void be(std::uint64_t value, int bytes);
  std::vector<std::uint8_t> bytes_;
};

// The two encodings vLLM has used: kArray, KVCacheEvent and EventBatch both
// array_like (vLLM 0.9-0.10: BlockStored up to medium); kMap, both maps
// (vLLM's current form: BlockStored with lora_name, defaults omitted).
enum class Encoding { kArray, kMap };
// ExternalBlockHash: an int (uint64, above 2^63 here) or bytes (32, sha256's).
enum class HashKind { kInt, kBytes };

struct WireEvent {
  enum class Kind { kStored, kRemoved, kCleared } kind = Kind::kCleared;
  std::vector<std::uint64_t> hashes;  // block numbers, made into hashes by HashKind
  std::optional<std::uint64_t> parent;
  std::vector<std::uint64_t> token_ids;
  std::uint64_t block_size = 16;
};

// The hash of block number `n` as the JSON line writes it (a decimal or hex string).
std::string hash_text(HashKind kind, std::uint64_t n);

std::vector<std::uint8_t> encode_batch(Encoding encoding, HashKind hashes, double ts,
                                       const std::vector<WireEvent>& events,
                                       std::optional<std::uint64_t> rank);

// A stream `kvreplay events` accepts: batch i stores blocks 2i and 2i+1 (the
// parent 2i-1), removes block 2i-4, every 30th batch (i % 30 == 29) is an
// AllBlocksCleared alone, after which the chain starts again without a parent.
struct StreamCounts {
  std::uint64_t stored_events = 0, removed_events = 0, cleared_events = 0;
  std::uint64_t blocks_stored = 0, blocks_removed = 0, cached = 0;
};
std::vector<WireEvent> stream_batch(std::uint64_t i);
StreamCounts stream_counts(std::uint64_t batches);
double stream_ts(std::uint64_t i);

// XPUB (a PUB that also hears subscriptions, so a test sends once a
// subscriber is there) and ROUTER on tcp://127.0.0.1:* (random ports).
class TestPublisher {
 public:
  explicit TestPublisher(bool no_drop = false);
  ~TestPublisher();
  TestPublisher(const TestPublisher&) = delete;
  TestPublisher& operator=(const TestPublisher&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // Blocks until a subscription arrives (false after timeout_ms).
  bool wait_for_subscriber(int timeout_ms);
  // Sends [topic, seq, payload] as ZmqEventPublisher does, and keeps it for
  // replay; `on_wire` false keeps it only (a batch the subscriber missed).
  void publish(std::uint64_t seq, std::span<const std::uint8_t> payload, bool on_wire = true);
  // Sends any parts, not kept (a malformed message).
  void send_raw(const std::vector<std::string>& parts);
  // Answers one replay request as _service_replay does, waiting up to
  // timeout_ms: false when none came.
  bool serve_replay(int timeout_ms);

 private:
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* router_ = nullptr;
  std::string endpoint_, replay_endpoint_;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> buffer_;
};

}  // namespace kvreplay::testing
