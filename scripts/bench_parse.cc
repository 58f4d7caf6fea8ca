// bench_parse: parsing cost alone, side by side, on one kvtrace (JSON Lines):
// kvreplay's streaming reader (KvTraceReader), nlohmann::json DOM per line,
// nlohmann::json SAX per line, and simdjson's on-demand parser per line (when
// built with it). Each reads every field of every event, so the comparison is
// fair: a parser that only validates would be cheaper. Prints one line per
// parser: seconds, lines/s, MB/s. Not a test.
//   bench_parse TRACE.jsonl
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "formats/kvtrace_reader.h"

#ifdef KVREPLAY_HAVE_SIMDJSON
#include <simdjson.h>
#endif

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void report(const char* name, double seconds, std::size_t lines, std::size_t bytes,
            std::uint64_t checksum) {
  std::printf("%-28s %8.3f s %12.0f lines/s %9.1f MB/s   (checksum %llu)\n", name, seconds,
              static_cast<double>(lines) / seconds, static_cast<double>(bytes) / seconds / 1e6,
              static_cast<unsigned long long>(checksum));
}

// A SAX handler that sums every integer, like a reader that takes every field.
struct SumHandler : nlohmann::json::json_sax_t {
  std::uint64_t sum = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override {
    sum += static_cast<std::uint64_t>(v);
    return true;
  }
  bool number_unsigned(number_unsigned_t v) override {
    sum += v;
    return true;
  }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t& s) override {
    sum += s.size();
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t& s) override {
    sum += s.size();
    return true;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    return false;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_parse TRACE.jsonl\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  std::vector<std::string> lines;
  std::size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size() + 1;
    lines.push_back(std::move(line));
  }
  std::string all;
  all.reserve(bytes);
  for (const std::string& line : lines) (all += line) += '\n';

  {
    auto start = std::chrono::steady_clock::now();
    auto reader = kvreplay::KvTraceReader::from_string(all, argv[1]);
    if (!reader) {
      std::fprintf(stderr, "%s\n", reader.error().to_string().c_str());
      return 2;
    }
    kvreplay::Event event;
    std::uint64_t sum = 0;
    for (;;) {
      auto more = reader.value()->next(event);
      if (!more || !more.value()) break;
      sum += event.seq + event.tokens + event.prompt + event.child + event.id.size();
      for (std::uint64_t s : event.seqs) sum += s;
    }
    report("kvreplay KvTraceReader", seconds_since(start), lines.size(), bytes, sum);
  }
  {
    auto start = std::chrono::steady_clock::now();
    std::uint64_t sum = 0;
    for (std::size_t i = 1; i < lines.size(); ++i) {
      nlohmann::json event = nlohmann::json::parse(lines[i]);
      for (auto& [key, value] : event.items()) {
        if (value.is_number_unsigned()) sum += value.get<std::uint64_t>();
        if (value.is_array()) {
          for (auto& s : value) sum += s.get<std::uint64_t>();
        }
      }
    }
    report("nlohmann::json DOM", seconds_since(start), lines.size(), bytes, sum);
  }
  {
    auto start = std::chrono::steady_clock::now();
    SumHandler handler;
    for (std::size_t i = 1; i < lines.size(); ++i) nlohmann::json::sax_parse(lines[i], &handler);
    report("nlohmann::json SAX", seconds_since(start), lines.size(), bytes, handler.sum);
  }
#ifdef KVREPLAY_HAVE_SIMDJSON
  {
    auto start = std::chrono::steady_clock::now();
    simdjson::ondemand::parser parser;
    std::uint64_t sum = 0;
    simdjson::padded_string padded(all);
    simdjson::ondemand::document_stream stream;
    if (parser.iterate_many(padded).get(stream)) return 1;
    bool header = true;
    for (auto doc : stream) {
      if (header) {
        header = false;
        continue;
      }
      simdjson::ondemand::object object;
      if (doc.get_object().get(object)) return 1;
      for (auto field : object) {
        std::string_view key = field.unescaped_key();
        sum += key.size();
        simdjson::ondemand::value value = field.value();
        switch (value.type()) {
          case simdjson::ondemand::json_type::number:
            sum += uint64_t(value.get_uint64().value_unsafe());
            break;
          case simdjson::ondemand::json_type::string:
            sum += std::string_view(value.get_string()).size();
            break;
          case simdjson::ondemand::json_type::array:
            for (auto s : value.get_array()) sum += uint64_t(s.get_uint64());
            break;
          default: break;
        }
      }
    }
    report("simdjson on-demand", seconds_since(start), lines.size(), bytes, sum);
  }
#endif
  return 0;
}
