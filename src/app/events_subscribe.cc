#include "app/events_subscribe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>

#include "app/exit_codes.h"
#include "engine/events/kv_subscribe.h"
#include "io/output.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

// The self-pipe SIGINT and SIGTERM write to, which the subscription polls.
int g_stop_pipe[2] = {-1, -1};

void on_stop_signal(int /*signal_number*/) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = write(g_stop_pipe[1], &byte, 1);
  errno = saved;
}

// SIGINT and SIGTERM stop the subscription cleanly while it lives: they are
// how a capture is meant to end, so they are caught even where the shell left
// them ignored (a script's background job); the previous handlers (the
// temporaries' cleanup, io/temporaries.h) come back after the commit.
class StopSignals {
 public:
  StopSignals() {
    if (pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
    installed_ = true;
  }
  ~StopSignals() {
    if (!installed_) return;
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
    close(g_stop_pipe[0]);
    close(g_stop_pipe[1]);
    g_stop_pipe[0] = g_stop_pipe[1] = -1;
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int fd() const { return installed_ ? g_stop_pipe[0] : -1; }

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  bool installed_ = false;
};

std::string summary_text(const EventsSubscribeRequest& request, const SubscribeResult& result) {
  const SubscribeSummary& s = result.summary;
  std::string out;
  if (s.batches == 0) {
    out = fmt::format(
        "{}: no batch received (is vLLM serving with --kv-events-config's endpoint there{}?)\n",
        request.endpoint,
        request.topic.empty() ? std::string() : fmt::format(" and topic \"{}\"", request.topic));
  } else {
    out = fmt::format(
        "{}: {} batches (sequence {} to {}), {} events ({} BlockStored, {} BlockRemoved, {} "
        "AllBlocksCleared)\n",
        request.endpoint, s.batches, *s.first_seq, *s.last_seq, s.events(), s.stored, s.removed,
        s.cleared);
    if (s.seconds > 0) {
      out += fmt::format(
          "  {:.3f} s from the first batch to the last: {:.0f} events/s, {:.0f} "
          "batches/s\n",
          s.seconds, static_cast<double>(s.events()) / s.seconds,
          static_cast<double>(s.batches) / s.seconds);
    }
  }
  if (s.gaps == 0) {
    out += "  no sequence gaps\n";
  } else {
    out += fmt::format("  {} sequence gaps, {} batches missed: {} replayed, {} lost\n", s.gaps,
                       s.missed, s.replayed, s.lost());
  }
  if (s.restarts > 0) out += fmt::format("  the sequence went back {} times\n", s.restarts);
  if (request.output != "-") {
    out += fmt::format("  written to {}; check it with: kvreplay events {}\n", request.output,
                       request.output);
  }
  return out;
}

}  // namespace

void declare_subscribe_options(CLI::App& app, EventsSubscribeRequest& request) {
  auto* subscribe = app.add_option(
      "--subscribe", request.endpoint,
      "record a live vLLM's KV events instead: its ZMQ publisher (vllm serve --kv-events-config "
      "'{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", ...}'), tcp://HOST:PORT or "
      "ipc://PATH; until Ctrl-C (SIGINT/SIGTERM) or --duration");
  auto* topic = app.add_option("--topic", request.topic,
                               "with --subscribe: the topic prefix (KVEventsConfig.topic; "
                               "default: every topic)");
  auto* replay = app.add_option(
      "--replay", request.replay,
      "with --subscribe: the publisher's replay socket (KVEventsConfig.replay_endpoint), asked for "
      "the batches of a sequence gap");
  auto* duration = app.add_option("--duration", request.duration_s,
                                  "with --subscribe: stop after this many seconds")
                       ->check(CLI::PositiveNumber);
  auto* output = app.add_option("-o,--output", request.output,
                                "with --subscribe: the JSON Lines written (- for stdout)");
  subscribe->needs(output);
  for (CLI::Option* option : {topic, replay, duration, output}) option->needs(subscribe);
  for (const char* name : {"FILE", "--json", "--duplicates"}) {
    subscribe->excludes(app.get_option(name));
  }
}

int run_events_subscribe(const EventsSubscribeRequest& request, bool quiet) {
  OutputSet outputs;
  OutputFile* file =
      outputs.open("the KV events", request.output, OutputFile::Flow::kStream, "--output");
  if (file == nullptr) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  StopSignals signals;
  SubscribeOptions options;
  options.endpoint = request.endpoint;
  options.topic = request.topic;
  if (!request.replay.empty()) options.replay = request.replay;
  options.duration_s = request.duration_s;
  options.stop_fd = signals.fd();
  auto sink = [&](std::string_view line) {
    file->write(line);
    return !file->failed();
  };
  auto note = [](const std::string& text) { eprint("{}\n", text); };
  if (!quiet && isatty(STDERR_FILENO) == 1) {  // a status line for a person only
    eprint("{}: subscribed{}; Ctrl-C stops\n", request.endpoint,
           request.topic.empty() ? std::string() : fmt::format(" to topic \"{}\"", request.topic));
  }
  auto result = subscribe_kv_events(options, sink, note);
  if (!result) {
    eprint("{}\n", result.error());
    return kExitInput;
  }
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;  // asked before commit
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (!quiet) put_text(summary_stream, summary_text(request, result.value()));
  return kExitOk;
}

}  // namespace kvreplay
