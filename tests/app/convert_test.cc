// kvreplay convert: the native record layout, byte-identical round trips, and
// atomic output (no file at all) on bad input.
#include "app/convert.h"

#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "formats/requests/native_writer.h"
#include "formats/requests/request_reader.h"

namespace {

namespace fs = std::filesystem;
using kvreplay::Request;
using kvreplay::RequestFormat;

// A fresh, empty directory for one test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("kvreplay_convert_test_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::size_t entries() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(path)) ++n;
    return n;
  }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Converts `text` twice (source -> a -> b) and returns a; b must equal a.
std::string round_trip(const std::string& text, const std::string& ext = "jsonl") {
  TempDir dir;
  write_text(dir.file("in." + ext), text);
  REQUIRE(kvreplay::run_convert(dir.file("in." + ext), std::nullopt, dir.file("a.jsonl")) == 0);
  REQUIRE(kvreplay::run_convert(dir.file("a.jsonl"), std::nullopt, dir.file("b.jsonl")) == 0);
  std::string a = read_text(dir.file("a.jsonl"));
  CHECK(read_text(dir.file("b.jsonl")) == a);
  return a;
}

}  // namespace

TEST_CASE("native records: fixed key order, optional keys only when set", "[convert]") {
  Request r;
  r.line = 7;
  r.arrival = 0.1;
  r.id = "\"a\"";
  r.prompt = 1030;
  r.output = 5;
  std::string out;
  kvreplay::append_native_json(out, r);
  CHECK(out == "{\"arrival\": 0.1, \"id\": \"a\", \"prompt\": 1030, \"output\": 5}\n");
  r.n = 3;
  r.prefix = "sys\"tem\n";
  r.prefix_tokens = 1000;
  r.hash_ids = {1, 2, 18446744073709551615ull};
  r.hash_block_tokens = 512;
  r.id.clear();  // no id: the line number
  out.clear();
  kvreplay::append_native_json(out, r);
  CHECK(out ==
        "{\"arrival\": 0.1, \"id\": 7, \"prompt\": 1030, \"output\": 5, \"n\": 3, \"prefix\": "
        "\"sys\\\"tem\\n\", \"prefix_tokens\": 1000, \"hash_block_tokens\": 512, \"hash_ids\": [1, "
        "2, 18446744073709551615]}\n");
}

TEST_CASE("arrivals print with the fewest digits that round-trip", "[convert]") {
  // Up to the arrival bound, 2^33 s (formats/requests/request.h).
  for (double value : {0.0, 0.1, 1.0 / 3.0, 3536.999, 1e-7, 123456789.123456789, 8589934592.0}) {
    Request r;
    r.arrival = value;
    r.prompt = 1;
    r.output = 1;
    std::string out;
    kvreplay::append_native_json(out, r);
    auto reader = kvreplay::RequestReader::from_string(out, "x", std::nullopt);
    REQUIRE(reader);
    Request back;
    auto more = reader.value()->next(back);
    REQUIRE(more);
    REQUIRE(more.value());
    CHECK(back.arrival == value);
  }
}

TEST_CASE("converting native output again gives the same bytes", "[convert]") {
  std::string a = round_trip(
      "\n{\"output\": 2, \"prompt\": 1030, \"arrival\": 0.10, \"id\": {\"k\": [1, 2.50]},\n"
      "   \"hash_ids\": [3, 4, 5], \"n\": 2}\n"
      "{\"arrival\": 1E2, \"prompt\": 9, \"output\": 1, \"prefix\": \"caf\\u00e9\", "
      "\"prefix_tokens\": 9, \"n\": 1}\n"
      "{\"arrival\": 100, \"prompt\": 9, \"output\": 1, \"id\": \"\\u0007\", "
      "\"hash_ids\": [7, 8, 9], \"hash_block_tokens\": 4}\n");
  CHECK(a ==
        "{\"arrival\": 0.1, \"id\": {\"k\":[1,2.50]}, \"prompt\": 1030, \"output\": 2, \"n\": 2, "
        "\"hash_block_tokens\": 512, \"hash_ids\": [3, 4, 5]}\n"
        "{\"arrival\": 100, \"id\": 4, \"prompt\": 9, \"output\": 1, \"prefix\": \"caf\xC3\xA9\", "
        "\"prefix_tokens\": 9}\n"
        "{\"arrival\": 100, \"id\": \"\\u0007\", \"prompt\": 9, \"output\": 1, "
        "\"hash_block_tokens\": 4, \"hash_ids\": [7, 8, 9]}\n");
}

TEST_CASE("every format converts to native and round-trips", "[convert]") {
  CHECK(round_trip("{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 3, "
                   "\"hash_ids\": [4, 5]}\n") ==
        "{\"arrival\": 1.5, \"id\": 1, \"prompt\": 600, \"output\": 3, \"hash_block_tokens\": 512, "
        "\"hash_ids\": [4, 5]}\n");
  CHECK(round_trip("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                   "2023-11-16 18:15:46.6805900,374,44\r\n"
                   "2023-11-16 18:15:50.9951690,396,109\r\n",
                   "csv") ==
        "{\"arrival\": 0, \"start\": \"2023-11-16 18:15:46.6805900\", \"id\": 2, \"prompt\": 374, "
        "\"output\": 44}\n"
        "{\"arrival\": 4.314579, \"id\": 3, \"prompt\": 396, \"output\": 109}\n");
  CHECK(round_trip("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   "5,ChatGPT,472,18,490,Conversation log\n"
                   "45,GPT-4,1087,0,1087,API log\n",
                   "csv") == "{\"arrival\": 5, \"id\": 2, \"prompt\": 472, \"output\": 18}\n");
}

TEST_CASE("bad input leaves no output file behind", "[convert]") {
  TempDir dir;
  write_text(dir.file("bad.jsonl"),
             "{\"arrival\": 0, \"prompt\": 5, \"output\": 1}\n"
             "{\"arrival\": 0, \"prompt\": 0, \"output\": 1}\n");
  CHECK(kvreplay::run_convert(dir.file("bad.jsonl"), std::nullopt, dir.file("out.jsonl")) == 2);
  CHECK_FALSE(fs::exists(dir.file("out.jsonl")));
  CHECK(dir.entries() == 1);  // no temporary file either
  // An existing output is left as it was.
  write_text(dir.file("out.jsonl"), "old\n");
  CHECK(kvreplay::run_convert(dir.file("bad.jsonl"), std::nullopt, dir.file("out.jsonl")) == 2);
  CHECK(read_text(dir.file("out.jsonl")) == "old\n");
  CHECK(dir.entries() == 2);
  // A bad record past the first flush (64 KiB of output) too.
  std::string big;
  for (int i = 0; i < 5000; ++i) big += "{\"arrival\": 1, \"prompt\": 5, \"output\": 1}\n";
  write_text(dir.file("big.jsonl"), big + "{\"arrival\": 0, \"prompt\": 5, \"output\": 1}\n");
  CHECK(kvreplay::run_convert(dir.file("big.jsonl"), std::nullopt, dir.file("big.out")) == 2);
  CHECK_FALSE(fs::exists(dir.file("big.out")));
  CHECK(dir.entries() == 3);
}

TEST_CASE("convert: missing input, forced format, unwritable output", "[convert]") {
  TempDir dir;
  CHECK(kvreplay::run_convert(dir.file("absent.jsonl"), std::nullopt, dir.file("out.jsonl")) == 2);
  CHECK_FALSE(fs::exists(dir.file("out.jsonl")));
  write_text(dir.file("in.csv"),
             "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:00,1,2\n");
  CHECK(kvreplay::run_convert(dir.file("in.csv"), RequestFormat::kBurstGpt, dir.file("o")) == 2);
  CHECK(kvreplay::run_convert(dir.file("in.csv"), RequestFormat::kAzure, dir.file("o")) == 0);
  CHECK(read_text(dir.file("o")) ==
        "{\"arrival\": 0, \"start\": \"2023-01-01 00:00:00\", \"id\": 2, \"prompt\": 1, "
        "\"output\": 2}\n");
  CHECK(kvreplay::run_convert(dir.file("in.csv"), std::nullopt, dir.file("no/such/dir/o")) == 2);
}

TEST_CASE("real trace: the Mooncake conversation round-trips", "[convert][shared]") {
  fs::path path = fs::path(KVREPLAY_SHARED_DIR) / "traces/mooncake/conversation_trace.jsonl";
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(fs::exists(path));
  TempDir dir;
  REQUIRE(kvreplay::run_convert(path.string(), std::nullopt, dir.file("a.jsonl")) == 0);
  REQUIRE(kvreplay::run_convert(dir.file("a.jsonl"), std::nullopt, dir.file("b.jsonl")) == 0);
  std::string a = read_text(dir.file("a.jsonl"));
  CHECK(a == read_text(dir.file("b.jsonl")));
  CHECK(std::count(a.begin(), a.end(), '\n') == 12031);
}
