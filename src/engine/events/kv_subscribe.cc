#include "engine/events/kv_subscribe.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <vector>

#include "engine/events/kv_wire.h"

namespace kvreplay {

namespace {

using Clock = std::chrono::steady_clock;

// ZmqEventPublisher.END_SEQ: -1 as 8 signed big-endian bytes.
constexpr std::uint64_t kEndSeq = ~std::uint64_t{0};
// The SUB socket's queue: as deep as vLLM's PUB high-water mark (hwm=100_000),
// so that a burst the publisher keeps is not dropped here instead.
constexpr int kReceiveHighWaterMark = 100000;

std::string zmq_problem() {
  return zmq_strerror(zmq_errno());
}

// The endpoint's own refusal, before ZeroMQ would retry it silently forever:
// a scheme other than tcp:// and ipc://, no port, a host that does not resolve.
std::optional<std::string> endpoint_problem(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0) {
    if (endpoint.size() == 6) return "expected ipc://PATH";
    return std::nullopt;
  }
  if (endpoint.rfind("tcp://", 0) != 0) {
    return "expected tcp://HOST:PORT (vLLM's KVEventsConfig.endpoint, e.g. tcp://localhost:5557) "
           "or ipc://PATH";
  }
  const std::string address = endpoint.substr(6);
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return "expected tcp://HOST:PORT";
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoul(port) == 0 || std::stoul(port) > 65535) {
    return fmt::format("port {} is not a number from 1 to 65535", port);
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "*") return "* binds; a subscriber connects to a host";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) return fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
  freeaddrinfo(found);
  return std::nullopt;
}

std::uint64_t big_endian(const zmq_msg_t& part) {
  const auto* bytes = static_cast<const std::uint8_t*>(zmq_msg_data(const_cast<zmq_msg_t*>(&part)));
  std::uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | bytes[i];
  return value;
}

// One multipart message, its parts kept.
class Message {
 public:
  Message() = default;
  ~Message() { clear(); }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;

  // Receives the whole message (the socket is readable). False: errno says why.
  bool receive(void* socket) {
    clear();
    for (;;) {
      parts_.emplace_back();
      zmq_msg_init(&parts_.back());
      if (zmq_msg_recv(&parts_.back(), socket, 0) < 0) return false;
      if (zmq_msg_more(&parts_.back()) == 0) return true;
    }
  }
  std::size_t size() const { return parts_.size(); }
  std::size_t bytes(std::size_t i) const {
    return zmq_msg_size(const_cast<zmq_msg_t*>(&parts_[i]));
  }
  const zmq_msg_t& part(std::size_t i) const { return parts_[i]; }
  std::span<const std::uint8_t> data(std::size_t i) const {
    return {static_cast<const std::uint8_t*>(zmq_msg_data(const_cast<zmq_msg_t*>(&parts_[i]))),
            bytes(i)};
  }

 private:
  void clear() {
    for (zmq_msg_t& part : parts_) zmq_msg_close(&part);
    parts_.clear();
  }
  std::deque<zmq_msg_t> parts_;  // a deque: a part never moves once received
};

class Socket {
 public:
  Socket(void* context, int type) : socket_(zmq_socket(context, type)) {}
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  void* get() const { return socket_; }
  void close() {
    if (socket_ == nullptr) return;
    int linger = 0;
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(socket_);
    socket_ = nullptr;
  }

 private:
  void* socket_;
};

class Context {
 public:
  Context() : context_(zmq_ctx_new()) {}
  ~Context() { zmq_ctx_term(context_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void* get() const { return context_; }

 private:
  void* context_;
};

class Subscriber {
 public:
  Subscriber(const SubscribeOptions& options, const LineSink& sink, const NoteSink& note)
      : options_(options), sink_(sink), note_(note) {}

  Result<SubscribeResult, std::string> run();

 private:
  Result<void, std::string> connect();
  // Decodes and writes one batch. False (with error_ set): stop.
  bool write(std::uint64_t seq, std::span<const std::uint8_t> payload);
  // The batches first..last (inclusive) through the replay socket, written in
  // order; false when the subscription must stop (error_ set or the sink failed).
  bool fill_gap(std::uint64_t first, std::uint64_t last);
  // One live message. False: stop.
  bool on_message(const Message& message);
  // At a stop: what has arrived already (in the socket's queue, at most its
  // high-water mark), then the result.
  Result<SubscribeResult, std::string> drain();
  std::string where() const { return options_.endpoint; }

  const SubscribeOptions& options_;
  const LineSink& sink_;
  const NoteSink& note_;
  Context context_;
  std::optional<Socket> sub_;
  std::optional<Socket> replay_;
  SubscribeResult result_;
  std::optional<std::uint64_t> next_;  // the sequence number expected next
  std::optional<Clock::time_point> first_at_;
  std::string error_;
  bool sink_failed_ = false;
};

Result<void, std::string> Subscriber::connect() {
  for (const std::string* endpoint :
       {&options_.endpoint, options_.replay ? &*options_.replay : nullptr}) {
    if (endpoint == nullptr) continue;
    if (auto problem = endpoint_problem(*endpoint)) {
      return Unexpected{fmt::format("{}: {}", *endpoint, *problem)};
    }
  }
  sub_.emplace(context_.get(), ZMQ_SUB);
  const int hwm = kReceiveHighWaterMark;
  if (zmq_setsockopt(sub_->get(), ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 ||
      zmq_setsockopt(sub_->get(), ZMQ_SUBSCRIBE, options_.topic.data(), options_.topic.size()) !=
          0 ||
      zmq_connect(sub_->get(), options_.endpoint.c_str()) != 0) {
    return Unexpected{fmt::format("{}: cannot connect: {}", options_.endpoint, zmq_problem())};
  }
  return {};
}

bool Subscriber::write(std::uint64_t seq, std::span<const std::uint8_t> payload) {
  WireBatchCounts counts;
  auto line = kv_batch_line_from_msgpack(payload, counts);
  if (!line) {
    error_ =
        fmt::format("{}: batch {}: cannot decode its KVEventBatch: {}", where(), seq, line.error());
    return false;
  }
  if (!sink_(line.value())) {
    sink_failed_ = true;
    return false;
  }
  SubscribeSummary& s = result_.summary;
  ++s.batches;
  s.stored += counts.stored;
  s.removed += counts.removed;
  s.cleared += counts.cleared;
  if (!s.first_seq) s.first_seq = seq;
  s.last_seq = seq;
  return true;
}

bool Subscriber::fill_gap(std::uint64_t first, std::uint64_t last) {
  SubscribeSummary& s = result_.summary;
  ++s.gaps;
  s.missed += last - first + 1;
  const std::string range =
      first == last ? fmt::format("batch {}", first) : fmt::format("batches {} to {}", first, last);
  if (!options_.replay) {
    note_(fmt::format("{}: {} missed (no --replay endpoint to ask)", where(), range));
    return true;
  }
  if (!replay_) {
    replay_.emplace(context_.get(), ZMQ_DEALER);
    if (zmq_connect(replay_->get(), options_.replay->c_str()) != 0) {
      error_ = fmt::format("{}: cannot connect: {}", *options_.replay, zmq_problem());
      return false;
    }
  }
  // [empty delimiter, start sequence]: the ROUTER sees [identity, "", start].
  std::uint8_t start[8];
  for (int i = 0; i < 8; ++i) start[i] = static_cast<std::uint8_t>(first >> (56 - 8 * i));
  // Never blocking: unsent, the request goes unanswered and the gap is lost.
  zmq_send(replay_->get(), "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(replay_->get(), start, sizeof start, ZMQ_DONTWAIT);
  std::map<std::uint64_t, std::vector<std::uint8_t>> got;  // the gap's payloads
  const auto deadline = Clock::now() + std::chrono::duration<double>(options_.replay_timeout_s);
  bool ended = false;
  while (!ended) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    zmq_pollitem_t item{replay_->get(), 0, ZMQ_POLLIN, 0};
    const int ready = zmq_poll(&item, 1, static_cast<long>(left));
    if (ready < 0 && zmq_errno() == EINTR) continue;  // a stop waits for the replay
    if (ready <= 0) continue;
    Message reply;
    if (!reply.receive(replay_->get())) continue;
    if (reply.size() != 3 || reply.bytes(0) != 0 || reply.bytes(1) != 8) {
      error_ = fmt::format("{}: a replay reply is not [empty, 8-byte sequence, payload] ({} parts)",
                           *options_.replay, reply.size());
      return false;
    }
    const std::uint64_t seq = big_endian(reply.part(1));
    if (seq == kEndSeq) {
      ended = true;
    } else if (seq >= first && seq <= last) {
      const auto payload = reply.data(2);
      got.try_emplace(seq, payload.begin(), payload.end());
    }
  }
  if (!ended) {
    // A late answer must not be taken for the next request's: a fresh socket.
    replay_.reset();
  }
  for (const auto& [seq, payload] : got) {
    if (!write(seq, payload)) return false;
  }
  s.replayed += got.size();
  const std::uint64_t lost = (last - first + 1) - got.size();
  std::string outcome;
  if (!ended) {
    outcome = fmt::format("no end marker from {} in {} s; {} replayed, {} lost", *options_.replay,
                          options_.replay_timeout_s, got.size(), lost);
  } else if (lost == 0) {
    outcome = fmt::format("replayed from {}", *options_.replay);
  } else {
    outcome = fmt::format("{} replayed from {}, {} lost (no longer in its buffer)", got.size(),
                          *options_.replay, lost);
  }
  note_(fmt::format("{}: {} missed: {}", where(), range, outcome));
  return true;
}

bool Subscriber::on_message(const Message& message) {
  if (message.size() != 3 || message.bytes(1) != 8) {
    error_ = fmt::format(
        "{}: a message is not [topic, 8-byte sequence, payload] ({} parts{}): is this vLLM's "
        "KV-event publisher?",
        where(), message.size(),
        message.size() >= 2 ? fmt::format(", a {}-byte second part", message.bytes(1)) : "");
    return false;
  }
  const std::uint64_t seq = big_endian(message.part(1));
  if (!first_at_) first_at_ = Clock::now();
  if (next_ && seq > *next_) {
    if (!fill_gap(*next_, seq - 1)) return false;
  } else if (next_ && seq < *next_) {
    ++result_.summary.restarts;
    note_(fmt::format("{}: the sequence went back from {} to {} (a restarted publisher?)", where(),
                      *next_ - 1, seq));
  } else if (!next_ && seq > 0) {
    note_(fmt::format("{}: the first batch received is {}: the capture starts mid-stream", where(),
                      seq));
  }
  if (!write(seq, message.data(2))) return false;
  next_ = seq + 1;
  result_.summary.seconds = std::chrono::duration<double>(Clock::now() - *first_at_).count();
  return true;
}

Result<SubscribeResult, std::string> Subscriber::drain() {
  Message message;
  for (int i = 0; i < kReceiveHighWaterMark; ++i) {
    zmq_pollitem_t item{sub_->get(), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 0) <= 0 || !message.receive(sub_->get())) break;
    if (!on_message(message)) {
      if (sink_failed_) break;
      return Unexpected{error_};
    }
  }
  return result_;
}

Result<SubscribeResult, std::string> Subscriber::run() {
  if (auto r = connect(); !r) return Unexpected{r.error()};
  std::optional<Clock::time_point> deadline;
  if (options_.duration_s) {
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(*options_.duration_s));
  }
  Message message;
  for (;;) {
    if (options_.max_batches && result_.summary.batches >= *options_.max_batches) {
      result_.stop = SubscribeStop::kMaxBatches;
      break;
    }
    long timeout = -1;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) {
        result_.stop = SubscribeStop::kDuration;
        return drain();
      }
      timeout = static_cast<long>(left);
    }
    zmq_pollitem_t items[2] = {{sub_->get(), 0, ZMQ_POLLIN, 0},
                               {nullptr, options_.stop_fd, ZMQ_POLLIN, 0}};
    const int count = options_.stop_fd >= 0 ? 2 : 1;
    const int ready = zmq_poll(items, count, timeout);
    if (ready < 0) {
      if (zmq_errno() == EINTR) continue;  // the stop descriptor says whether to stop
      return Unexpected{fmt::format("{}: {}", where(), zmq_problem())};
    }
    if (count == 2 && (items[1].revents & ZMQ_POLLIN) != 0) {
      result_.stop = SubscribeStop::kStopFd;
      return drain();
    }
    if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
    if (!message.receive(sub_->get())) {
      if (zmq_errno() == EINTR || zmq_errno() == EAGAIN) continue;
      return Unexpected{fmt::format("{}: {}", where(), zmq_problem())};
    }
    if (!on_message(message)) {
      if (sink_failed_) {
        result_.stop = SubscribeStop::kSinkFailed;
        break;
      }
      return Unexpected{error_};
    }
  }
  return result_;
}

}  // namespace

Result<SubscribeResult, std::string> subscribe_kv_events(const SubscribeOptions& options,
                                                         const LineSink& sink,
                                                         const NoteSink& note) {
  Subscriber subscriber(options, sink, note);
  return subscriber.run();
}

}  // namespace kvreplay
