// events --subscribe (engine/events/kv_wire.h, engine/events/kv_subscribe.h):
// vLLM's KV-event wire format (vllm/distributed/kv_events.py) decoded byte for
// byte in both encodings, and a real publisher in this process (XPUB and
// ROUTER on 127.0.0.1, tests/engine/kv_test_publisher.h) recorded with a
// sequence gap filled through the replay socket, as ZmqEventPublisher's
// _service_replay answers; the recorded lines pass `kvreplay events`' checks.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "engine/events/events_check.h"
#include "engine/events/kv_subscribe.h"
#include "engine/events/kv_wire.h"
#include "kv_test_publisher.h"

namespace {

using kvreplay::WireBatchCounts;
using kvreplay::testing::Encoding;
using kvreplay::testing::HashKind;
using kvreplay::testing::TestPublisher;
using kvreplay::testing::WireEvent;

std::string decode(const std::vector<std::uint8_t>& bytes, WireBatchCounts* counts = nullptr) {
  WireBatchCounts ignored;
  auto line = kvreplay::kv_batch_line_from_msgpack(bytes, counts ? *counts : ignored);
  return line ? line.value() : "error: " + line.error();
}

}  // namespace

TEST_CASE("kv wire: msgspec's array_like batch, byte for byte") {
  // msgspec.msgpack.encode(KVEventBatch(ts=1.5, events=[BlockRemoved(
  // block_hashes=[7], medium="GPU")], data_parallel_rank=0)) with both structs
  // array_like: fixarray(3), float64 1.5, fixarray(1) of fixarray(3):
  // fixstr(12) "BlockRemoved", fixarray(1) of fixint 7, fixstr(3) "GPU"; fixint 0.
  const std::vector<std::uint8_t> bytes = {
      0x93, 0xcb, 0x3f, 0xf8, 0,   0,   0,   0,   0,   0,    0x91, 0x93, 0xac, 'B', 'l', 'o',
      'c',  'k',  'R',  'e',  'm', 'o', 'v', 'e', 'd', 0x91, 0x07, 0xa3, 'G',  'P', 'U', 0x00};
  CHECK(decode(bytes) ==
        "{\"data_parallel_rank\":0,\"events\":[{\"block_hashes\":[\"7\"],\"medium\":\"GPU\","
        "\"type\":\"BlockRemoved\"}],\"ts\":1.5}\n");
  WireBatchCounts counts;
  decode(bytes, &counts);
  CHECK(counts.removed == 1);
  CHECK(counts.events() == 1);
}

TEST_CASE("kv wire: both encodings decode to the same line, hashes as exact strings") {
  const std::vector<WireEvent> events = kvreplay::testing::stream_batch(3);  // store 6,7; remove 2
  for (HashKind kind : {HashKind::kInt, HashKind::kBytes}) {
    const std::string array =
        decode(kvreplay::testing::encode_batch(Encoding::kArray, kind, 1700000000.75, events, 0));
    const std::string map =
        decode(kvreplay::testing::encode_batch(Encoding::kMap, kind, 1700000000.75, events, 0));
    REQUIRE(array.rfind("error", 0) != 0);
    const auto a = nlohmann::json::parse(array);
    const auto m = nlohmann::json::parse(map);
    // The map form adds lora_name (nil); the rest is the same.
    auto without_lora_name = m;
    without_lora_name["events"][0].erase("lora_name");
    CHECK(without_lora_name == a);
    CHECK(a["ts"].get<double>() == 1700000000.75);
    CHECK(a["events"][0]["block_hashes"] ==
          nlohmann::json::array(
              {kvreplay::testing::hash_text(kind, 6), kvreplay::testing::hash_text(kind, 7)}));
    CHECK(a["events"][0]["parent_block_hash"] == kvreplay::testing::hash_text(kind, 5));
    CHECK(a["events"][1]["block_hashes"][0] == kvreplay::testing::hash_text(kind, 2));
    CHECK(a["events"][0]["token_ids"].size() == 32);
    CHECK(a["events"][0]["block_size"] == 16);
    CHECK(a["events"][0]["lora_id"].is_null());
  }
  // Above 2^63, as uint64 on the wire: every digit kept (a double would round).
  CHECK(kvreplay::testing::hash_text(HashKind::kInt, 6) == "17293822569102731964");
  // 32 bytes: 64 hex digits.
  CHECK(kvreplay::testing::hash_text(HashKind::kBytes, 6).size() == 64);
}

TEST_CASE("kv wire: an older vLLM's events (no medium) and negative hashes") {
  kvreplay::testing::MsgpackWriter w;
  w.array(2);  // no data_parallel_rank (vLLM before data parallel)
  w.f64(2.0);
  w.array(2);
  w.array(6);  // ["BlockStored", hashes, parent, token_ids, block_size, lora_id]
  w.str("BlockStored");
  w.array(1);
  w.sint(-5);  // Python's hash() of an older vLLM
  w.nil();
  w.array(0);
  w.uint(16);
  w.nil();
  w.array(1);
  w.str("AllBlocksCleared");
  CHECK(decode(w.bytes()) ==
        "{\"events\":[{\"block_hashes\":[\"-5\"],\"block_size\":16,\"lora_id\":null,\"medium\":"
        "null,\"parent_block_hash\":null,\"token_ids\":[],\"type\":\"BlockStored\"},{\"type\":"
        "\"AllBlocksCleared\"}],\"ts\":2.0}\n");
}

TEST_CASE("kv wire: what is not a KVEventBatch is named") {
  const auto good = kvreplay::testing::encode_batch(Encoding::kArray, HashKind::kInt, 1.0,
                                                    kvreplay::testing::stream_batch(3), 0);
  auto truncated = good;
  truncated.resize(good.size() - 3);
  CHECK(decode(truncated).rfind("error: not msgpack: parse error at byte", 0) == 0);
  CHECK(decode({}) == "error: the payload is empty");
  CHECK(decode({0xc1}).rfind("error: not msgpack", 0) == 0);  // 0xc1: never used

  kvreplay::testing::MsgpackWriter w;
  w.array(2);
  w.f64(1.0);
  w.array(1);
  w.array(3);
  w.str("BlockRemoved");
  w.array(1);
  w.str("abc");  // a hash as a string: not vLLM's
  w.nil();
  CHECK(decode(w.bytes()) ==
        "error: events[0].block_hashes[0]: expected a block hash (an integer or bytes), got a "
        "string");

  kvreplay::testing::MsgpackWriter unknown;
  unknown.array(2);
  unknown.f64(1.0);
  unknown.array(1);
  unknown.map(1);
  unknown.str("type");
  unknown.str("BlockMoved");
  CHECK(decode(unknown.bytes()) ==
        "error: events[0].type: unknown event type \"BlockMoved\" (BlockStored, BlockRemoved or "
        "AllBlocksCleared)");

  kvreplay::testing::MsgpackWriter shortened;
  shortened.map(1);
  shortened.str("ts");
  shortened.f64(1.0);
  CHECK(decode(shortened.bytes()) == "error: events: missing");

  kvreplay::testing::MsgpackWriter stored;
  stored.array(2);
  stored.f64(1.0);
  stored.array(1);
  stored.array(3);
  stored.str("BlockStored");
  stored.array(0);
  stored.nil();
  CHECK(decode(stored.bytes()) == "error: events[0].token_ids: missing (BlockStored needs it)");

  std::vector<std::uint8_t> deep(100000, 0x91);  // fixarray(1) nested 100000 deep
  CHECK(decode(deep) == "error: not msgpack: nested deeper than 32 levels");
}

namespace {

struct Capture {
  std::vector<std::string> lines;
  std::vector<std::string> notes;
};

// Publishes `batches` of the test stream (those in `dropped` kept for replay
// only) once a subscriber is there, answering replay requests until the
// subscription returns.
Capture record(Encoding encoding, HashKind kind, std::uint64_t batches,
               const std::vector<std::uint64_t>& dropped, bool with_replay,
               kvreplay::SubscribeResult* result, bool answer_replays = true) {
  TestPublisher publisher;
  std::atomic<bool> done{false};
  std::thread thread([&] {
    if (!publisher.wait_for_subscriber(30000)) return;
    for (std::uint64_t i = 0; i < batches; ++i) {
      const bool drop = std::find(dropped.begin(), dropped.end(), i) != dropped.end();
      publisher.publish(
          i,
          kvreplay::testing::encode_batch(encoding, kind, kvreplay::testing::stream_ts(i),
                                          kvreplay::testing::stream_batch(i), 0),
          !drop);
    }
    while (!done && answer_replays) publisher.serve_replay(20);
  });
  kvreplay::SubscribeOptions options;
  options.endpoint = publisher.endpoint();
  if (with_replay) options.replay = publisher.replay_endpoint();
  options.max_batches = batches - (with_replay && answer_replays ? 0 : dropped.size());
  options.replay_timeout_s = answer_replays ? 5 : 0.2;
  options.duration_s = 60;  // a subscriber that never gets them all fails, not hangs
  Capture capture;
  auto r = kvreplay::subscribe_kv_events(
      options,
      [&](std::string_view line) {
        capture.lines.emplace_back(line);
        return true;
      },
      [&](const std::string& note) { capture.notes.push_back(note); });
  done = true;
  thread.join();
  REQUIRE(r);
  *result = r.value();
  return capture;
}

// The lines through `kvreplay events`' checks: the first problem, or "".
std::string check(const std::vector<std::string>& lines, kvreplay::EventsSummary* summary) {
  kvreplay::EventsChecker checker("capture.jsonl", {});
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    line.remove_suffix(1);  // the newline
    if (auto status = checker.add_line(line, i + 1); !status) return status.error().to_string();
  }
  *summary = checker.summary();
  return "";
}

}  // namespace

TEST_CASE("kv subscribe: a live publisher in both encodings, a gap filled through replay") {
  constexpr std::uint64_t kBatches = 50;
  const auto expected = kvreplay::testing::stream_counts(kBatches);
  // Worked by hand: batches 0-28 store 2 blocks each (27 also remove one),
  // 29 clears, 30-49 store (18 remove): 49 + 45 + 1 events, 22 cached.
  REQUIRE(expected.stored_events == 49);
  REQUIRE(expected.removed_events == 45);
  REQUIRE(expected.cleared_events == 1);
  REQUIRE(expected.cached == 22);
  for (Encoding encoding : {Encoding::kArray, Encoding::kMap}) {
    for (HashKind kind : {HashKind::kInt, HashKind::kBytes}) {
      kvreplay::SubscribeResult result;
      const Capture capture = record(encoding, kind, kBatches, {10, 11, 48}, true, &result);
      const kvreplay::SubscribeSummary& s = result.summary;
      CHECK(result.stop == kvreplay::SubscribeStop::kMaxBatches);
      CHECK(s.batches == kBatches);
      CHECK(s.first_seq == 0);
      CHECK(s.last_seq == kBatches - 1);
      CHECK(s.gaps == 2);
      CHECK(s.missed == 3);
      CHECK(s.replayed == 3);
      CHECK(s.lost() == 0);
      CHECK(s.stored == expected.stored_events);
      CHECK(s.removed == expected.removed_events);
      CHECK(s.cleared == expected.cleared_events);
      REQUIRE(capture.notes.size() == 2);
      CHECK(capture.notes[0].find(": batches 10 to 11 missed: replayed from tcp://127.0.0.1:") !=
            std::string::npos);
      CHECK(capture.notes[1].find(": batch 48 missed: replayed from") != std::string::npos);
      // In sequence order: the replayed batches before the one that showed the gap.
      REQUIRE(capture.lines.size() == kBatches);
      for (std::uint64_t i = 0; i < kBatches; ++i) {
        CHECK(nlohmann::json::parse(capture.lines[i])["ts"].get<double>() ==
              kvreplay::testing::stream_ts(i));
      }
      kvreplay::EventsSummary summary;
      REQUIRE(check(capture.lines, &summary) == "");
      CHECK(summary.batches == kBatches);
      CHECK(summary.stored_events == expected.stored_events);
      CHECK(summary.removed_events == expected.removed_events);
      CHECK(summary.cleared_events == expected.cleared_events);
      REQUIRE(summary.media.size() == 1);
      CHECK(summary.media[0].stored == expected.blocks_stored);
      CHECK(summary.media[0].removed == expected.blocks_removed);
      CHECK(summary.media[0].cached == expected.cached);
    }
  }
}

TEST_CASE("kv subscribe: a gap without a replay endpoint is noted and counted lost") {
  kvreplay::SubscribeResult result;
  const Capture capture = record(Encoding::kMap, HashKind::kInt, 20, {5}, false, &result);
  CHECK(result.summary.batches == 19);
  CHECK(result.summary.missed == 1);
  CHECK(result.summary.replayed == 0);
  CHECK(result.summary.lost() == 1);
  REQUIRE(capture.notes.size() == 1);
  CHECK(capture.notes[0].find(": batch 5 missed (no --replay endpoint to ask)") !=
        std::string::npos);
  // The capture misses batch 5's blocks: batch 6's parent was never stored.
  kvreplay::EventsSummary summary;
  CHECK(check(capture.lines, &summary).find("events[0].parent_block_hash") != std::string::npos);
}

TEST_CASE("kv subscribe: a replay socket that does not answer: the gap is lost, noted") {
  kvreplay::SubscribeResult result;
  const Capture capture =
      record(Encoding::kArray, HashKind::kBytes, 20, {5}, true, &result, /*answer_replays=*/false);
  CHECK(result.summary.batches == 19);
  CHECK(result.summary.replayed == 0);
  CHECK(result.summary.lost() == 1);
  REQUIRE(capture.notes.size() == 1);
  CHECK(capture.notes[0].find(": batch 5 missed: no end marker from tcp://127.0.0.1:") !=
        std::string::npos);
  CHECK(capture.notes[0].find(" in 0.2 s; 0 replayed, 1 lost") != std::string::npos);
}

TEST_CASE("kv subscribe: an undecodable batch and a message not vLLM's are named") {
  for (int variant = 0; variant < 2; ++variant) {
    TestPublisher publisher;
    std::thread thread([&] {
      if (!publisher.wait_for_subscriber(30000)) return;
      publisher.publish(0, kvreplay::testing::encode_batch(Encoding::kMap, HashKind::kInt, 1.0,
                                                           kvreplay::testing::stream_batch(0), 0));
      if (variant == 0) {
        const std::vector<std::uint8_t> bad = {0x92, 0xcb};  // a float cut short
        publisher.publish(1, bad);
      } else {
        publisher.send_raw({"", "1234"});
      }
    });
    kvreplay::SubscribeOptions options;
    options.endpoint = publisher.endpoint();
    std::vector<std::string> lines;
    auto r = kvreplay::subscribe_kv_events(
        options,
        [&](std::string_view line) {
          lines.emplace_back(line);
          return true;
        },
        [](const std::string&) {});
    thread.join();
    REQUIRE_FALSE(r);
    CHECK(lines.size() == 1);
    if (variant == 0) {
      CHECK(r.error() == publisher.endpoint() +
                             ": batch 1: cannot decode its KVEventBatch: not msgpack: parse error "
                             "at byte 3: syntax error while parsing MessagePack number: unexpected "
                             "end of input");
    } else {
      CHECK(r.error() == publisher.endpoint() +
                             ": a message is not [topic, 8-byte sequence, payload] (2 parts, a "
                             "4-byte second part): is this vLLM's KV-event publisher?");
    }
  }
}

TEST_CASE("kv subscribe: a bad endpoint is refused at once") {
  auto refuse = [](const std::string& endpoint) {
    kvreplay::SubscribeOptions options;
    options.endpoint = endpoint;
    auto r = kvreplay::subscribe_kv_events(
        options, [](std::string_view) { return true; }, [](const std::string&) {});
    return r ? std::string("subscribed") : r.error();
  };
  CHECK(refuse("http://localhost:5557") ==
        "http://localhost:5557: expected tcp://HOST:PORT (vLLM's KVEventsConfig.endpoint, e.g. "
        "tcp://localhost:5557) or ipc://PATH");
  CHECK(refuse("tcp://localhost") == "tcp://localhost: expected tcp://HOST:PORT");
  CHECK(refuse("tcp://localhost:99999") ==
        "tcp://localhost:99999: port 99999 is not a number from 1 to 65535");
  CHECK(refuse("tcp://*:5557") == "tcp://*:5557: * binds; a subscriber connects to a host");
  CHECK(refuse("tcp://no-such-host.invalid:5557")
            .rfind("tcp://no-such-host.invalid:5557: cannot resolve no-such-host.invalid: ", 0) ==
        0);
}
