// kvreplay events FILE: checks and sums up a KV-event stream, the JSON Lines
// form of vLLM's KV events (vllm/distributed/kv_events.py: KVEventBatch,
// BlockStored, BlockRemoved, AllBlocksCleared) that `simulate --kv-events`
// writes (engine/events/kv_events.h). The checks and figures: engine/events/events_check.h.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include "app/command.h"
#include "app/events_subscribe.h"
#include "app/exit_codes.h"
#include "engine/events/events_check.h"
#include "io/byte_source.h"
#include "io/input_error.h"
#include "io/output.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

struct EventsRequest {
  std::string path;
  std::string json;  // --json: empty for none
  bool unique = false;
  bool mid_stream = false;
  bool duplicates = false;  // the default now: accepted, changes nothing
  bool quiet = false;
};

// The next line of `in`, without its newline, into `line`: false at the end of
// input. Error: why the input cannot be read, or why the line is not read on
// (`checker`: longer than 64 MiB, or than the memory limit leaves room for),
// asked as it grows, so that memory stays bounded.
Result<bool, std::string> next_line(ByteSource& in, std::string& line,
                                    const EventsChecker& checker) {
  if (line.capacity() > (std::size_t{1} << 20)) line = std::string();  // a long line's
  line.clear();
  bool any = false;
  for (;;) {
    const char* begin = in.begin();
    const char* end = in.end();
    if (begin != end) {
      any = true;
      const auto* newline =
          static_cast<const char*>(std::memchr(begin, '\n', static_cast<std::size_t>(end - begin)));
      const char* stop = newline != nullptr ? newline : end;
      if (auto problem =
              checker.line_problem(line.size() + static_cast<std::size_t>(stop - begin))) {
        return Unexpected{std::move(*problem)};
      }
      line.append(begin, stop);
      if (newline != nullptr) {
        in.advance_to(newline + 1);
        return true;
      }
      in.advance_to(end);
    }
    if (!in.refill()) {
      if (!in.error().empty()) return Unexpected{in.error()};
      return any;
    }
  }
}

int run_events(const EventsRequest& request) {
  const std::string name = request.path == "-" ? "<stdin>" : request.path;
  // Opened first, as every command opens its outputs before reading; nothing
  // appears at the path unless the whole stream passed.
  OutputSet outputs;
  OutputFile* json = nullptr;
  if (!request.json.empty()) {
    outputs.add_input("FILE", request.path);
    json = outputs.open("the summary", request.json, OutputFile::Flow::kWhole, "--json");
    if (json == nullptr) {
      eprint("{}\n", outputs.error());
      return kExitInput;
    }
  }
  auto source = ByteSource::open(request.path);
  if (!source) {
    eprint("{}\n", InputError{name, 0, "file", "cannot open: " + source.error()}.to_string());
    return kExitInput;
  }
  EventsOptions options;
  options.unique = request.unique;
  options.mid_stream = request.mid_stream;
  EventsChecker checker(name, options);
  std::string line;
  for (std::uint64_t number = 1;; ++number) {
    auto more = next_line(*source.value(), line, checker);
    if (!more) {
      const bool long_line = source.value()->error().empty();
      eprint("{}\n",
             InputError{name, number, long_line ? "json" : "file", more.error()}.to_string());
      return kExitInput;
    }
    if (!more.value()) break;
    if (auto status = checker.add_line(line, number); !status) {
      eprint("{}\n", status.error().to_string());
      return kExitInput;
    }
  }
  const EventsSummary summary = checker.summary();
  if (json != nullptr) json->write(events_summary_json(summary, name).dump(2) + "\n");
  std::FILE* summary_stream = outputs.writes_stdout() ? stderr : stdout;  // asked before commit
  if (!outputs.commit()) {
    eprint("{}\n", outputs.error());
    return kExitInput;
  }
  if (!request.quiet) put_text(summary_stream, events_summary_text(summary, name));
  return kExitOk;
}

class EventsCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option(
        "FILE", request_.path,
        "KV-event stream, JSON Lines (gzip too; - for stdin), e.g. simulate --kv-events");
    app.add_option("--json", request_.json,
                   "also write the summary as JSON here (- for stdout; the text then goes to "
                   "stderr); written only when the whole stream passed");
    app.add_flag("--mid-stream", request_.mid_stream,
                 "the stream was captured mid-run: a parent never stored makes a root, a removal "
                 "of a hash not cached and a first seq above 0 are counted, not refused");
    app.add_flag("--unique", request_.unique,
                 "refuse a store of a hash already cached (a key-level stream); by default a "
                 "medium counts each hash per block, as vLLM caches it in several blocks");
    app.add_flag("--duplicates", request_.duplicates,
                 "per-block counts (the default; kept for older scripts)");
    app.add_flag("-q,--quiet", request_.quiet, "print no summary");
    declare_subscribe_options(app, subscribe_);
    app.footer(
        "Form: one batch a line (vLLM's KVEventBatch), {\"ts\": T, \"events\": [...], "
        "\"instance\": I}\n"
        "(\"seq\": N, the ZMQ frame's number, optional)\n"
        "or [T, [...], data_parallel_rank]; events as {\"type\": \"BlockStored\", ...} or tag "
        "first,\n"
        "[\"BlockStored\", block_hashes, parent_block_hash, token_ids, block_size, lora_id, "
        "medium],\n"
        "[\"BlockRemoved\", block_hashes, medium], [\"AllBlocksCleared\"]; a hash is an integer "
        "up to 2^64-1\n"
        "or a string; medium null = GPU. Counts per block, as vLLM emits them and Dynamo's "
        "router counts\n"
        "them: a hash stored twice is cached twice and removed twice. Checks, per instance and "
        "medium:\n"
        "ts never goes back; seq rises from 0; a stored block's parent was stored there before; "
        "a removed\n"
        "hash is cached (--unique: no hash is stored while cached). AllBlocksCleared empties the "
        "instance.\n"
        "--mid-stream accepts a capture begun mid-run (unknown parents are roots, unmatched "
        "removals and\n"
        "seq gaps counted). The first problem is one line, FILE:LINE: FIELD: problem, and exit "
        "2.\n"
        "Summary: events, blocks stored, removed and cached (peak), the same per key, cached over "
        "time,\n"
        "store and removal rates, seq gaps, and re-stores (LRU stack distance, time since the "
        "removal).\n"
        "Examples:\n"
        "  kvreplay events tests/cli/events/vllm_recorded.jsonl\n"
        "  kvreplay events tests/cli/events/summary.jsonl --json summary.json\n"
        "  tail -n 2 tests/cli/events/dynamo_counts.jsonl | kvreplay events - --mid-stream\n"
        "  kvreplay events --subscribe tcp://localhost:5557 --replay tcp://localhost:5558 "
        "--duration 1 -o live.jsonl");
  }
  int run() override {
    if (!subscribe_.endpoint.empty()) return run_events_subscribe(subscribe_, request_.quiet);
    if (request_.path.empty()) {
      eprint("command line: FILE is required (or --subscribe ENDPOINT -o FILE)\n");
      return kExitInput;
    }
    return run_events(request_);
  }

 private:
  EventsRequest request_;
  EventsSubscribeRequest subscribe_;
};

}  // namespace

std::unique_ptr<Command> make_events_command() {
  return std::make_unique<EventsCommand>();
}

}  // namespace kvreplay
