#include "app/convert.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "app/command.h"
#include "app/exit_codes.h"
#include "formats/requests/native_writer.h"
#include "formats/requests/request_reader.h"
#include "io/output.h"
#include "io/standard_output.h"

namespace kvreplay {

namespace {

int write_failed(const OutputSet& outputs) {
  fmt::print(stderr, "{}\n", outputs.error());
  return kExitInput;
}

}  // namespace

int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output) {
  // Opened first, as every command opens its outputs before reading: a path
  // that cannot be written fails before any input is read.
  OutputSet outputs;
  outputs.add_input("INPUT", input);
  OutputFile* out = outputs.open("the output", output, OutputFile::Flow::kStream, "--output");
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

namespace {

class ConvertCommand final : public Command {
 public:
  void declare(CLI::App& app) override {
    app.add_option("INPUT", input_, "request trace (format told by content, gzip too; - for stdin)")
        ->required();
    app.add_option("--format", format_, "read as this format instead of telling it by content")
        ->check(CLI::IsMember(request_format_names()));
    app.add_option("-o,--output", output_,
                   "write here (default - for stdout); a file appears only once the whole input "
                   "converted");
    app.footer(
        "Examples:\n"
        "  kvreplay convert traces/requests/mooncake_conv.jsonl -o requests.jsonl\n"
        "  kvreplay convert traces/requests/azure_conv.csv -o requests.jsonl");
  }
  int run() override {
    std::optional<RequestFormat> format;
    if (!format_.empty()) format = parse_request_format(format_);
    return run_convert(input_, format, output_);
  }

 private:
  std::string input_, format_, output_ = "-";
};

}  // namespace

std::unique_ptr<Command> make_convert_command() {
  return std::make_unique<ConvertCommand>();
}

}  // namespace kvreplay
