#include "sim/convert.h"

#include <fmt/format.h>

#include <cstdio>
#include <iterator>

#include "io/output.h"
#include "io/standard_output.h"
#include "sim/json_text.h"
#include "sim/request_reader.h"

namespace kvreplay {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitInput = 2;

int write_failed(const OutputSet& outputs) {
  fmt::print(stderr, "{}\n", outputs.error());
  return kExitInput;
}

}  // namespace

void append_native_json(std::string& out, const Request& request) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"arrival\": {}, \"id\": ", request.arrival);
  if (request.id.empty()) {
    fmt::format_to(it, "{}", request.line);
  } else {
    out += request.id;
  }
  fmt::format_to(it, ", \"prompt\": {}, \"output\": {}", request.prompt, request.output);
  if (request.n != 1) fmt::format_to(it, ", \"n\": {}", request.n);
  if (!request.prefix.empty()) {
    out += ", \"prefix\": ";
    append_json_string(out, request.prefix);
    fmt::format_to(it, ", \"prefix_tokens\": {}", request.prefix_tokens);
  }
  if (!request.hash_ids.empty()) {
    fmt::format_to(it, ", \"hash_block_tokens\": {}, \"hash_ids\": [", request.hash_block_tokens);
    bool first = true;
    for (std::uint64_t id : request.hash_ids) {
      if (!first) out += ", ";
      first = false;
      fmt::format_int text(id);
      out.append(text.data(), text.size());
    }
    out += ']';
  }
  out += "}\n";
}

int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output) {
  // Opened first, as every command opens its outputs before reading: a path
  // that cannot be written fails before any input is read.
  OutputSet outputs;
  OutputFile* out = outputs.open("the output", output, OutputFile::Flow::kStream);
  if (out == nullptr) return write_failed(outputs);
  const bool to_stdout = out->is_stdout();  // then the summary is left out
  auto opened = RequestReader::open(input, forced);
  if (!opened) {
    fmt::print(stderr, "{}\n", opened.error().to_string());
    return kExitInput;
  }
  RequestReader& reader = *opened.value();
  std::string record;
  Request request;
  std::uint64_t count = 0;
  for (;;) {
    auto more = reader.next(request);
    if (!more) {
      fmt::print(stderr, "{}\n", more.error().to_string());
      return kExitInput;  // the output's temporary file is removed
    }
    if (!more.value()) break;
    if (out->failed()) return write_failed(outputs);  // stop at once, not at the end
    record.clear();
    append_native_json(record, request);
    out->write(record);
    ++count;
  }
  if (!outputs.commit()) return write_failed(outputs);
  std::string skipped;
  if (reader.skipped() > 0) {
    skipped = fmt::format(", skipped {} failed request{} (0 response tokens)", reader.skipped(),
                          reader.skipped() == 1 ? "" : "s");
  }
  if (to_stdout) {
    if (!skipped.empty()) fmt::print(stderr, "kvreplay convert: {}\n", skipped.substr(2));
  } else {
    put_text(stdout,
             fmt::format("converted {} request{} ({} -> native) to {}{}\n", count,
                         count == 1 ? "" : "s", to_string(reader.format()), output, skipped));
  }
  return kExitOk;
}

}  // namespace kvreplay
