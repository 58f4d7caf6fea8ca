#include "kv_test_publisher.h"

#include <fmt/format.h>
#include <zmq.h>

#include <array>
#include <bit>
#include <stdexcept>

#include "core/mix64.h"

namespace kvreplay::testing {

void MsgpackWriter::be(std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    bytes_.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

void MsgpackWriter::uint(std::uint64_t value) {
  if (value < 128) {
    bytes_.push_back(static_cast<std::uint8_t>(value));
  } else if (value < 256) {
    bytes_.push_back(0xcc);
    be(value, 1);
  } else if (value < 65536) {
    bytes_.push_back(0xcd);
    be(value, 2);
  } else if (value < (std::uint64_t{1} << 32)) {
    bytes_.push_back(0xce);
    be(value, 4);
  } else {
    bytes_.push_back(0xcf);
    be(value, 8);
  }
}

void MsgpackWriter::sint(std::int64_t value) {
  if (value >= 0) return uint(static_cast<std::uint64_t>(value));
  const auto bits = static_cast<std::uint64_t>(value);
  if (value >= -32) {
    bytes_.push_back(static_cast<std::uint8_t>(bits));
  } else if (value >= -128) {
    bytes_.push_back(0xd0);
    be(bits, 1);
  } else if (value >= -32768) {
    bytes_.push_back(0xd1);
    be(bits, 2);
  } else if (value >= -2147483648LL) {
    bytes_.push_back(0xd2);
    be(bits, 4);
  } else {
    bytes_.push_back(0xd3);
    be(bits, 8);
  }
}

void MsgpackWriter::f64(double value) {
  bytes_.push_back(0xcb);
  be(std::bit_cast<std::uint64_t>(value), 8);
}

void MsgpackWriter::str(std::string_view text) {
  const std::size_t n = text.size();
  if (n < 32) {
    bytes_.push_back(static_cast<std::uint8_t>(0xa0 | n));
  } else if (n < 256) {
    bytes_.push_back(0xd9);
    be(n, 1);
  } else if (n < 65536) {
    bytes_.push_back(0xda);
    be(n, 2);
  } else {
    bytes_.push_back(0xdb);
    be(n, 4);
  }
  bytes_.insert(bytes_.end(), text.begin(), text.end());
}

void MsgpackWriter::bin(std::span<const std::uint8_t> data) {
  const std::size_t n = data.size();
  if (n < 256) {
    bytes_.push_back(0xc4);
    be(n, 1);
  } else if (n < 65536) {
    bytes_.push_back(0xc5);
    be(n, 2);
  } else {
    bytes_.push_back(0xc6);
    be(n, 4);
  }
  bytes_.insert(bytes_.end(), data.begin(), data.end());
}

void MsgpackWriter::header(std::size_t count, std::uint8_t fix, std::uint8_t wide) {
  if (count < 16) {
    bytes_.push_back(static_cast<std::uint8_t>(fix | count));
  } else if (count < 65536) {
    bytes_.push_back(wide);
    be(count, 2);
  } else {
    bytes_.push_back(static_cast<std::uint8_t>(wide + 1));
    be(count, 4);
  }
}

namespace {

// Above 2^63 (msgpack's uint64) and above 2^53 (a double would round it).
std::uint64_t int_hash(std::uint64_t n) {
  return 0xf000000000000000ULL + n * 0x1000 + 0xabc;
}

std::array<std::uint8_t, 32> bytes_hash(std::uint64_t n) {
  std::array<std::uint8_t, 32> out{};
  for (std::size_t word = 0; word < 4; ++word) {
    const std::uint64_t x = splitmix64(n * 4 + word);
    for (std::size_t b = 0; b < 8; ++b)
      out[word * 8 + b] = static_cast<std::uint8_t>(x >> (56 - 8 * b));
  }
  return out;
}

void put_hash(MsgpackWriter& out, HashKind kind, std::uint64_t n) {
  if (kind == HashKind::kInt) {
    out.uint(int_hash(n));
  } else {
    const auto bytes = bytes_hash(n);
    out.bin(bytes);
  }
}

void put_event(MsgpackWriter& out, Encoding encoding, HashKind kind, const WireEvent& event) {
  const bool map = encoding == Encoding::kMap;
  auto key = [&](std::string_view name) {
    if (map) out.str(name);
  };
  switch (event.kind) {
    case WireEvent::Kind::kStored:
      // map: type + 7 required fields (extra_keys, group_idx, kv_cache_spec_*
      // omitted as defaults); array (vLLM 0.10): tag + 6 fields, up to medium.
      map ? out.map(8) : out.array(7);
      key("type");
      out.str("BlockStored");
      key("block_hashes");
      out.array(event.hashes.size());
      for (std::uint64_t n : event.hashes) put_hash(out, kind, n);
      key("parent_block_hash");
      event.parent ? put_hash(out, kind, *event.parent) : out.nil();
      key("token_ids");
      out.array(event.token_ids.size());
      for (std::uint64_t t : event.token_ids) out.uint(t);
      key("block_size");
      out.uint(event.block_size);
      key("lora_id");
      out.nil();
      key("medium");
      out.str("GPU");
      if (map) {
        key("lora_name");
        out.nil();
      }
      break;
    case WireEvent::Kind::kRemoved:
      map ? out.map(3) : out.array(3);
      key("type");
      out.str("BlockRemoved");
      key("block_hashes");
      out.array(event.hashes.size());
      for (std::uint64_t n : event.hashes) put_hash(out, kind, n);
      key("medium");
      out.str("GPU");
      break;
    case WireEvent::Kind::kCleared:
      map ? out.map(1) : out.array(1);
      key("type");
      out.str("AllBlocksCleared");
      break;
  }
}

}  // namespace

std::string hash_text(HashKind kind, std::uint64_t n) {
  if (kind == HashKind::kInt) return std::to_string(int_hash(n));
  std::string out;
  for (std::uint8_t b : bytes_hash(n)) out += fmt::format("{:02x}", b);
  return out;
}

std::vector<std::uint8_t> encode_batch(Encoding encoding, HashKind hashes, double ts,
                                       const std::vector<WireEvent>& events,
                                       std::optional<std::uint64_t> rank) {
  MsgpackWriter out;
  const bool map = encoding == Encoding::kMap;
  const std::size_t fields = rank ? 3 : 2;  // omit_defaults: a None rank is left out
  map ? out.map(fields) : out.array(fields);
  if (map) out.str("ts");
  out.f64(ts);
  if (map) out.str("events");
  out.array(events.size());
  for (const WireEvent& event : events) put_event(out, encoding, hashes, event);
  if (rank) {
    if (map) out.str("data_parallel_rank");
    out.uint(*rank);
  }
  return out.bytes();
}

std::vector<WireEvent> stream_batch(std::uint64_t i) {
  const std::uint64_t j = i % 30;
  if (j == 29) return {WireEvent{}};
  WireEvent stored;
  stored.kind = WireEvent::Kind::kStored;
  stored.hashes = {2 * i, 2 * i + 1};
  if (j > 0) stored.parent = 2 * i - 1;
  for (std::uint64_t t = 0; t < 32; ++t) stored.token_ids.push_back(1000 + 32 * i + t);
  std::vector<WireEvent> out{stored};
  if (j >= 2) {
    WireEvent removed;
    removed.kind = WireEvent::Kind::kRemoved;
    removed.hashes = {2 * (i - 2)};
    out.push_back(removed);
  }
  return out;
}

StreamCounts stream_counts(std::uint64_t batches) {
  StreamCounts c;
  for (std::uint64_t i = 0; i < batches; ++i) {
    for (const WireEvent& e : stream_batch(i)) {
      if (e.kind == WireEvent::Kind::kStored) {
        ++c.stored_events;
        c.blocks_stored += e.hashes.size();
        c.cached += e.hashes.size();
      } else if (e.kind == WireEvent::Kind::kRemoved) {
        ++c.removed_events;
        c.blocks_removed += e.hashes.size();
        c.cached -= e.hashes.size();
      } else {
        ++c.cleared_events;
        c.cached = 0;
      }
    }
  }
  return c;
}

double stream_ts(std::uint64_t i) {
  return 1700000000.0 + 0.25 * static_cast<double>(i);
}

namespace {

std::string bind_random(void* socket) {
  if (zmq_bind(socket, "tcp://127.0.0.1:*") != 0) {
    throw std::runtime_error(fmt::format("bind: {}", zmq_strerror(zmq_errno())));
  }
  char endpoint[256];
  std::size_t size = sizeof endpoint;
  zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, endpoint, &size);
  return endpoint;
}

void send_parts(void* socket, const std::vector<std::span<const std::uint8_t>>& parts) {
  for (std::size_t i = 0; i < parts.size(); ++i) {
    zmq_send(socket, parts[i].data(), parts[i].size(), i + 1 < parts.size() ? ZMQ_SNDMORE : 0);
  }
}

std::array<std::uint8_t, 8> seq_bytes(std::uint64_t seq) {
  std::array<std::uint8_t, 8> out{};
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(seq >> (56 - 8 * i));
  return out;
}

}  // namespace

TestPublisher::TestPublisher(bool no_drop) : context_(zmq_ctx_new()) {
  pub_ = zmq_socket(context_, ZMQ_XPUB);
  const int hwm = 100000;  // ZmqEventPublisher's default hwm
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof hwm);
  if (no_drop) {
    const int on = 1;
    zmq_setsockopt(pub_, ZMQ_XPUB_NODROP, &on, sizeof on);
  }
  endpoint_ = bind_random(pub_);
  router_ = zmq_socket(context_, ZMQ_ROUTER);
  replay_endpoint_ = bind_random(router_);
}

TestPublisher::~TestPublisher() {
  zmq_close(pub_);  // the default linger: what was sent is delivered first
  zmq_close(router_);
  zmq_ctx_term(context_);
}

bool TestPublisher::wait_for_subscriber(int timeout_ms) {
  zmq_pollitem_t item{pub_, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return false;
  char message[256];
  zmq_recv(pub_, message, sizeof message, 0);  // [1, topic...]
  return message[0] == 1;
}

void TestPublisher::publish(std::uint64_t seq, std::span<const std::uint8_t> payload,
                            bool on_wire) {
  const auto seq_part = seq_bytes(seq);
  if (on_wire) send_parts(pub_, {std::span<const std::uint8_t>(), seq_part, payload});
  buffer_.emplace_back(seq, std::vector<std::uint8_t>(payload.begin(), payload.end()));
}

void TestPublisher::send_raw(const std::vector<std::string>& parts) {
  std::vector<std::span<const std::uint8_t>> spans;
  for (const std::string& part : parts) {
    spans.emplace_back(reinterpret_cast<const std::uint8_t*>(part.data()), part.size());
  }
  send_parts(pub_, spans);
}

bool TestPublisher::serve_replay(int timeout_ms) {
  zmq_pollitem_t item{router_, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return false;
  std::vector<std::vector<std::uint8_t>> frames;
  int more = 1;
  while (more != 0) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    zmq_msg_recv(&part, router_, 0);
    const auto* data = static_cast<const std::uint8_t*>(zmq_msg_data(&part));
    frames.emplace_back(data, data + zmq_msg_size(&part));
    more = zmq_msg_more(&part);
    zmq_msg_close(&part);
  }
  if (frames.size() != 3 || frames[2].size() != 8) return true;  // vLLM warns and ignores it
  std::uint64_t start = 0;
  for (std::uint8_t b : frames[2]) start = (start << 8) | b;
  const std::span<const std::uint8_t> empty;
  for (const auto& [seq, payload] : buffer_) {
    if (seq < start) continue;
    const auto seq_part = seq_bytes(seq);
    send_parts(router_, {frames[0], empty, seq_part, payload});
  }
  const auto end = seq_bytes(~std::uint64_t{0});  // END_SEQ, -1
  send_parts(router_, {frames[0], empty, end, empty});
  return true;
}

}  // namespace kvreplay::testing
