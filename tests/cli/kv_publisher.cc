// A vLLM KV-event publisher for tests/cli/run_events_subscribe_tests.sh and
// the capture throughput measure: the test stream of tests/engine/
// kv_test_publisher.h on XPUB and ROUTER sockets at tcp://127.0.0.1:*.
//   kv_publisher [--encoding array|map] [--hashes int|bytes] [--batches N]
//                [--drop S,S...] [--bad S] [--replays K] [--flood]
// Prints "PUB_ENDPOINT REPLAY_ENDPOINT" on one line and closes stdout; once a
// subscriber is there, publishes batches 0..N-1 (those in --drop kept for
// replay only; --bad S sends a payload cut short at S), answers K replay
// requests, then exits 0 once everything sent was delivered (1 when no
// subscriber or no request came in 60 s). --flood: a publisher that blocks
// instead of dropping (ZMQ_XPUB_NODROP), for measuring the subscriber.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/kv_test_publisher.h"

using kvreplay::testing::Encoding;
using kvreplay::testing::HashKind;

int main(int argc, char** argv) {
  Encoding encoding = Encoding::kMap;
  HashKind hashes = HashKind::kInt;
  std::uint64_t batches = 50;
  std::set<std::uint64_t> drop;
  long long bad = -1;
  int replays = 0;
  bool flood = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    if (arg == "--encoding") {
      encoding = std::string(value) == "array" ? Encoding::kArray : Encoding::kMap;
      ++i;
    } else if (arg == "--hashes") {
      hashes = std::string(value) == "bytes" ? HashKind::kBytes : HashKind::kInt;
      ++i;
    } else if (arg == "--batches") {
      batches = std::strtoull(value, nullptr, 10);
      ++i;
    } else if (arg == "--drop") {
      std::stringstream list(value);
      std::string item;
      while (std::getline(list, item, ',')) drop.insert(std::strtoull(item.c_str(), nullptr, 10));
      ++i;
    } else if (arg == "--bad") {
      bad = std::strtoll(value, nullptr, 10);
      ++i;
    } else if (arg == "--replays") {
      replays = std::atoi(value);
      ++i;
    } else if (arg == "--flood") {
      flood = true;
    } else {
      std::fprintf(stderr, "kv_publisher: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  std::vector<std::vector<std::uint8_t>> payloads;
  payloads.reserve(batches);
  for (std::uint64_t i = 0; i < batches; ++i) {
    payloads.push_back(kvreplay::testing::encode_batch(
        encoding, hashes, kvreplay::testing::stream_ts(i), kvreplay::testing::stream_batch(i), 0));
  }
  kvreplay::testing::TestPublisher publisher(flood);
  std::printf("%s %s\n", publisher.endpoint().c_str(), publisher.replay_endpoint().c_str());
  std::fclose(stdout);
  if (!publisher.wait_for_subscriber(60000)) {
    std::fprintf(stderr, "kv_publisher: no subscriber in 60 s\n");
    return 1;
  }
  const std::vector<std::uint8_t> cut_short = {0x92, 0xcb};  // a float with no bytes
  for (std::uint64_t i = 0; i < batches; ++i) {
    if (static_cast<long long>(i) == bad) {
      publisher.publish(i, cut_short);
    } else {
      publisher.publish(i, payloads[i], drop.count(i) == 0);
    }
  }
  for (int served = 0; served < replays; ++served) {
    if (!publisher.serve_replay(60000)) {
      std::fprintf(stderr, "kv_publisher: no replay request in 60 s\n");
      return 1;
    }
  }
  return 0;
}
