#include "app/convert.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "app/command.h"
#include "app/exit_codes.h"
#include "core/memory_budget.h"
#include "formats/requests/native_writer.h"
#include "formats/requests/request_reader.h"
#include "io/output.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

int write_failed(const OutputSet& outputs) {
  eprint("{}\n", outputs.error());
  return kExitInput;
}

// --sort: every request of the trace, held in memory (the formula is the
// README's, "Sorting a trace"), then written in the order of their arrivals.
struct SortedTrace {
  // A request held: itself, twice over while the vector grows; its key in the
  // sort (arrival and index) and in stable_sort's buffer; its index in the order.
  static constexpr std::uint64_t kBytesPerRequest = 2 * sizeof(Request) + 2 * 16 + 8;

  std::vector<Request> requests;
  std::uint64_t heap_bytes = 0;  // ids, prefixes and hash ids
  std::uint64_t next_check = 0;  // the first request checks (KVREPLAY_MEMORY_LIMIT too)

  std::uint64_t need() const {
    return add_sat(mul_sat(requests.size(), kBytesPerRequest), heap_bytes);
  }
  // Takes `request`; the problem when the trace held so far is over the memory limit.
  std::optional<std::string> add(Request&& request) {
    heap_bytes = add_sat(heap_bytes, request.id.size() + request.prefix.size() +
                                         8 * std::uint64_t{request.hash_ids.size()});
    requests.push_back(std::move(request));
    const std::uint64_t bytes = need();
    if (bytes < next_check && bytes <= memory_limit().bytes) return std::nullopt;
    next_check = mul_sat(bytes, 2);
    return check_memory(bytes,
                        fmt::format("sorting (the whole trace in memory, {} request{} so far)",
                                    requests.size(), requests.size() == 1 ? "" : "s"),
                        fmt::format("{} bytes a request + {} of ids, prefixes and hash ids",
                                    kBytesPerRequest, memory_text(heap_bytes)));
  }
  // The requests in arrival order, ties in trace order (indices into
  // `requests`, so nothing is copied); when some arrive before arrival 0 (an
  // Azure row earlier than the first), their arrivals are rebased to the earliest.
  std::vector<std::size_t> sort() {
    std::vector<std::pair<double, std::size_t>> keyed(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) keyed[i] = {requests[i].arrival, i};
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const double origin = keyed.empty() ? 0.0 : keyed.front().first;
    if (origin < 0) {
      for (Request& request : requests) request.arrival -= origin;
    }
    std::vector<std::size_t> order(keyed.size());
    for (std::size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
    return order;
  }
};

}  // namespace

int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output, bool sort) {
  // Opened first, as every command opens its outputs before reading: a path
  // that cannot be written fails before any input is read.
  OutputSet outputs;
  outputs.add_input("INPUT", input);
  OutputFile* out = outputs.open("the output", output, OutputFile::Flow::kStream, "--output");
  if (out == nullptr) return write_failed(outputs);
  const bool to_stdout = out->is_stdout();  // then the summary is left out
  auto opened = RequestReader::open(input, forced);
  if (!opened) {
    eprint("{}\n", opened.error().to_string());
    return kExitInput;
  }
  RequestReader& reader = *opened.value();
  if (sort) reader.allow_unsorted();
  std::string record;
  Request request;
  std::uint64_t count = 0;
  SortedTrace held;
  // The trace's wall-clock start goes with the first record written.
  auto write = [&](const Request& r) {
    record.clear();
    std::optional<std::string> start;
    if (count == 0) start = reader.start();
    append_native_json(record, r, start.value_or(std::string()));
    out->write(record);
    ++count;
  };
  for (;;) {
    auto more = reader.next(request);
    if (!more) {
      eprint("{}\n", more.error().to_string());
      return kExitInput;  // the output's temporary file is removed
    }
    if (!more.value()) break;
    if (sort) {
      const std::uint64_t line = request.line;
      if (auto problem = held.add(std::move(request))) {
        eprint("{}\n", InputError{reader.name(), line, "--sort", *problem}.to_string());
        return kExitInput;
      }
      request = Request{};
      continue;
    }
    if (out->failed()) return write_failed(outputs);  // stop at once, not at the end
    write(request);
  }
  if (sort) {
    for (std::size_t index : held.sort()) {
      if (out->failed()) return write_failed(outputs);
      write(held.requests[index]);
    }
  }
  if (!outputs.commit()) return write_failed(outputs);
  std::string skipped;
  if (reader.skipped() > 0) {
    skipped = fmt::format(", skipped {} failed request{} (0 response tokens)", reader.skipped(),
                          reader.skipped() == 1 ? "" : "s");
  }
  if (to_stdout) {
    if (!skipped.empty()) eprint("kvreplay convert: {}\n", skipped.substr(2));
  } else {
    put_text(stdout, fmt::format("converted {} request{} ({} -> native{}) to {}{}\n", count,
                                 count == 1 ? "" : "s", to_string(reader.format()),
                                 sort ? ", sorted by arrival" : "", output, skipped));
  }
  return kExitOk;
}

namespace {

class ConvertCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("INPUT", input_, "request trace (format told by content, gzip too; - for stdin)")
        ->required();
    app.add_option("--format", format_,
                   "read as this format instead of telling it by content: " + request_format_help())
        ->check(CLI::IsMember(request_format_names()));
    app.add_option("-o,--output", output_,
                   "write here (default - for stdout); a file appears only once the whole input "
                   "converted");
    app.add_flag("--sort", sort_,
                 "sort the requests by arrival (stable: ties keep their order) instead of "
                 "refusing arrivals that go backwards; holds the whole trace in memory");
    app.footer(
        "Examples:\n"
        "  kvreplay convert traces/requests/mooncake_conv.jsonl -o requests.jsonl\n"
        "  kvreplay convert traces/requests/azure_conv.csv -o requests.jsonl\n"
        "  kvreplay convert traces/requests/azure_conv.csv --sort -o sorted.jsonl");
  }
  int run() override {
    std::optional<RequestFormat> format;
    if (!format_.empty()) format = parse_request_format(format_);
    return run_convert(input_, format, output_, sort_);
  }

 private:
  std::string input_, format_, output_ = "-";
  bool sort_ = false;
};

}  // namespace

std::unique_ptr<Command> make_convert_command() {
  return std::make_unique<ConvertCommand>();
}

}  // namespace kvreplay
