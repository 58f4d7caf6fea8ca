// kvreplay events --subscribe ENDPOINT -o FILE: records a live vLLM's KV
// events (its ZmqEventPublisher, engine/events/kv_subscribe.h) as the JSON
// Lines `kvreplay events FILE` checks. The options of `events` that belong to
// it, and its run.
#pragma once

#include <optional>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace kvreplay {

struct EventsSubscribeRequest {
  std::string endpoint;  // empty: not subscribing
  std::string topic;
  std::string replay;  // empty: none
  std::string output;
  std::optional<double> duration_s;
};

// Declares --subscribe, --topic, --replay, --duration and -o on `events`,
// after its own options: --subscribe excludes those that read a file (FILE,
// --json, --duplicates).
void declare_subscribe_options(CLI::App& app, EventsSubscribeRequest& request);

// Subscribes until SIGINT or SIGTERM (a clean stop: everything received is
// written and the file committed, exit 0) or --duration; one line and exit 2
// for a bad endpoint, an undecodable message or an output that fails.
int run_events_subscribe(const EventsSubscribeRequest& request, bool quiet);

}  // namespace kvreplay
