// RequestReader: every format from strings (detection, fields, defaults), every
// class of bad input with its exact message, and the real published traces.
#include "formats/requests/request_reader.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "formats/requests/format_entry.h"

namespace {

using kvreplay::Request;
using kvreplay::RequestFormat;
using kvreplay::RequestReader;

struct ReadAll {
  RequestFormat format = RequestFormat::kNative;
  std::vector<Request> requests;
  std::uint64_t skipped = 0;
};

ReadAll read_all(const std::string& text, const std::string& name = "t.jsonl",
                 std::optional<RequestFormat> forced = std::nullopt) {
  auto opened = RequestReader::from_string(text, name, forced);
  if (!opened) FAIL("open failed: " << opened.error().to_string());
  ReadAll out;
  out.format = opened.value()->format();
  Request request;
  for (;;) {
    auto more = opened.value()->next(request);
    if (!more) FAIL("next failed: " << more.error().to_string());
    if (!more.value()) break;
    out.requests.push_back(request);
  }
  out.skipped = opened.value()->skipped();
  return out;
}

// The first error reading `text`, as printed; "" when it reads cleanly.
std::string error_of(const std::string& text, const std::string& name = "t.jsonl",
                     std::optional<RequestFormat> forced = std::nullopt) {
  auto opened = RequestReader::from_string(text, name, forced);
  if (!opened) return opened.error().to_string();
  Request request;
  for (;;) {
    auto more = opened.value()->next(request);
    if (!more) return more.error().to_string();
    if (!more.value()) return "";
  }
}

std::filesystem::path shared_trace(const char* relative) {
  return std::filesystem::path(KVREPLAY_SHARED_DIR) / "traces" / relative;
}

}  // namespace

TEST_CASE("request format names round-trip", "[request_reader]") {
  for (RequestFormat format : {RequestFormat::kNative, RequestFormat::kMooncake,
                               RequestFormat::kAzure, RequestFormat::kBurstGpt}) {
    auto parsed = kvreplay::parse_request_format(kvreplay::to_string(format));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == format);
  }
  CHECK(kvreplay::to_string(RequestFormat::kBurstGpt) == "burstgpt");
  CHECK_FALSE(kvreplay::parse_request_format("csv").has_value());
  CHECK_FALSE(kvreplay::parse_request_format("Native").has_value());
}

// The table of formats (format_table.cc): each entry's names and factory, in
// detection order, and the hints the kvtrace reader takes from it.
TEST_CASE("request formats: the table names each format once, with its rule and factory",
          "[request_reader]") {
  using namespace kvreplay::requests;
  std::vector<std::string> names;
  for (const RequestFormatEntry* entry : request_format_table()) {
    INFO(entry->name);
    CHECK(kvreplay::to_string(entry->format) == entry->name);
    CHECK(&format_entry(entry->format) == entry);
    CHECK_FALSE(entry->title.empty());
    CHECK(kvreplay::request_format_help().find(std::string(entry->name) + " (" +
                                               std::string(entry->help) + ")") !=
          std::string::npos);
    if (entry->layout == Layout::kJsonLines) {
      CHECK(entry->json.make != nullptr);
      CHECK((entry->json.decisive & ~entry->json.fields) == 0);
      CHECK((entry->json.required & ~entry->json.fields) == 0);
    } else {
      CHECK(entry->csv.make != nullptr);
      CHECK_FALSE(entry->csv.columns.empty());
    }
    names.emplace_back(entry->name);
  }
  CHECK(kvreplay::request_format_names() == names);
  CHECK(json_format_of_key("input_length") == std::optional<std::string_view>("mooncake"));
  CHECK(json_format_of_key("session") == std::optional<std::string_view>("native"));
  CHECK(json_format_of_key("hash_ids") == std::optional<std::string_view>(""));
  CHECK_FALSE(json_format_of_key("op").has_value());
  CHECK(csv_format_of_header("Timestamp,Request tokens") ==
        std::optional<std::string_view>("burstgpt"));
  CHECK_FALSE(csv_format_of_header("time,prompt").has_value());
}

TEST_CASE("native JSON Lines: every field and the defaults", "[request_reader][native]") {
  auto all = read_all(
      "{\"arrival\": 0.5, \"prompt\": 40, \"output\": 8}\n"
      "\n"
      "{\"id\": \"req-7\", \"arrival\": 1.25, \"prompt\": 1030, \"output\": 3, \"n\": 4,\n"
      "  \"prefix\": \"system\", \"prefix_tokens\": 1000, \"hash_ids\": [5, 6, 7],\n"
      "  \"hash_block_tokens\": 512}\n"
      "{\"arrival\": 1.25, \"prompt\": 16, \"output\": 1, \"hash_ids\": [4611686018427387903],"
      " \"hash_block_tokens\": 16, \"id\": {\"b\" : [1, true, null], \"a\": \"x\\u0001\\\"\"}}\n");
  REQUIRE(all.format == RequestFormat::kNative);
  REQUIRE(all.requests.size() == 3);
  const Request& a = all.requests[0];
  CHECK(a.line == 1);
  CHECK(a.arrival == 0.5);
  CHECK(a.id == "1");  // default: the line number
  CHECK(a.prompt == 40);
  CHECK(a.output == 8);
  CHECK(a.n == 1);
  CHECK(a.prefix.empty());
  CHECK(a.prefix_tokens == 0);
  CHECK(a.hash_ids.empty());
  CHECK(a.hash_block_tokens == 512);
  const Request& b = all.requests[1];
  CHECK(b.line == 3);
  CHECK(b.id == "\"req-7\"");  // compact JSON text
  CHECK(b.arrival == 1.25);
  CHECK(b.prompt == 1030);
  CHECK(b.output == 3);
  CHECK(b.n == 4);
  CHECK(b.prefix == "system");
  CHECK(b.prefix_tokens == 1000);
  CHECK(b.hash_ids == std::vector<std::uint64_t>{5, 6, 7});
  CHECK(b.hash_block_tokens == 512);
  const Request& c = all.requests[2];
  CHECK(c.line == 6);
  CHECK(c.id == "{\"b\":[1,true,null],\"a\":\"x\\u0001\\\"\"}");            // key order kept
  CHECK(c.hash_ids == std::vector<std::uint64_t>{4611686018427387903ull});  // the largest
  CHECK(c.hash_block_tokens == 16);
}

TEST_CASE("native JSON Lines: ids of every kind", "[request_reader][native]") {
  auto all = read_all(
      "{\"arrival\": 0, \"prompt\": 1, \"output\": 1, \"id\": 17}\n"
      "{\"arrival\": 0, \"prompt\": 1, \"output\": 1, \"id\": -1.5e3}\n"
      "{\"arrival\": 0, \"prompt\": 1, \"output\": 1, \"id\": null}\n"
      "{\"arrival\": 0, \"prompt\": 1, \"output\": 1, \"id\": [ ]}\n"
      "{\"arrival\": 0, \"prompt\": 1, \"output\": 1, \"id\": \"caf\\u00e9 \\n\"}\n");
  REQUIRE(all.requests.size() == 5);
  CHECK(all.requests[0].id == "17");
  CHECK(all.requests[1].id == "-1.5e3");
  CHECK(all.requests[2].id == "null");
  CHECK(all.requests[3].id == "[]");
  CHECK(all.requests[4].id == "\"caf\xC3\xA9 \\n\"");
}

TEST_CASE("native JSON Lines: arrival forms", "[request_reader][native]") {
  auto all = read_all(
      "{\"arrival\": -0, \"prompt\": 1, \"output\": 1}\n"
      "{\"arrival\": 1e-3, \"prompt\": 1, \"output\": 1}\n"
      "{\"arrival\": 0.1, \"prompt\": 1, \"output\": 1}\n"
      "{\"arrival\": 0.1, \"prompt\": 1, \"output\": 1}\n"
      "{\"arrival\": 12345678.125, \"prompt\": 1, \"output\": 1}\n");
  REQUIRE(all.requests.size() == 5);
  CHECK(all.requests[0].arrival == 0.0);
  CHECK_FALSE(std::signbit(all.requests[0].arrival));
  CHECK(all.requests[1].arrival == 0.001);
  CHECK(all.requests[2].arrival == 0.1);
  CHECK(all.requests[4].arrival == 12345678.125);
}

TEST_CASE("Mooncake JSON Lines", "[request_reader][mooncake]") {
  auto all = read_all(
      "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, "
      "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n"
      "{\"hash_ids\": [0], \"timestamp\": 1500, \"input_length\": 512, \"output_length\": 1, "
      "\"session\": {\"x\": [1, 2]}, \"prompt\": \"ignored\", \"id\": 99}\n"
      "\r\n"
      "{\"timestamp\": 1501, \"input_length\": 513, \"output_length\": 2, \"hash_ids\": [0, "
      "14]}\r\n");
  REQUIRE(all.format == RequestFormat::kMooncake);
  REQUIRE(all.requests.size() == 3);
  CHECK(all.requests[0].arrival == 0.0);
  CHECK(all.requests[0].prompt == 6758);
  CHECK(all.requests[0].output == 500);
  CHECK(all.requests[0].hash_ids.size() == 14);
  CHECK(all.requests[0].hash_block_tokens == 512);
  CHECK(all.requests[0].id == "1");
  CHECK(all.requests[1].arrival == 1.5);
  CHECK(all.requests[1].id == "2");  // Mooncake ids are line numbers, whatever "id" says
  CHECK(all.requests[1].prompt == 512);
  CHECK(all.requests[2].line == 4);
  CHECK(all.requests[2].arrival == 1.501);
  CHECK(all.requests[2].hash_ids == std::vector<std::uint64_t>{0, 14});
}

TEST_CASE("Mooncake: a leading id does not make it native", "[request_reader][mooncake]") {
  auto all = read_all(
      "{\"id\": \"x\", \"timestamp\": 3, \"input_length\": 1, \"output_length\": 1, "
      "\"hash_ids\": [9]}\n");
  CHECK(all.format == RequestFormat::kMooncake);
  CHECK(all.requests.at(0).arrival == 0.003);
}

TEST_CASE("Azure CSV", "[request_reader][azure]") {
  auto all = read_all(
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
      "2023-11-16 18:15:46.6805900,374,44\r\n"
      "2023-11-16 18:15:50.9951690,396,109\r\n"
      "\r\n"
      "\"2023-11-16 18:15:50.9951690\", 879 ,\"55\"\r\n"
      "2023-11-17 00:00:00,1,1",
      "t.csv");
  REQUIRE(all.format == RequestFormat::kAzure);
  REQUIRE(all.requests.size() == 4);
  CHECK(all.requests[0].arrival == 0.0);
  CHECK(all.requests[0].line == 2);
  CHECK(all.requests[0].id == "2");
  CHECK(all.requests[0].prompt == 374);
  CHECK(all.requests[0].output == 44);
  CHECK(all.requests[0].hash_ids.empty());
  CHECK(all.requests[1].arrival == 4.314579);
  CHECK(all.requests[2].line == 5);
  CHECK(all.requests[2].arrival == 4.314579);
  CHECK(all.requests[2].prompt == 879);
  CHECK(all.requests[2].output == 55);
  CHECK(all.requests[3].line == 6);
  CHECK(all.requests[3].arrival == 20653.31941);
}

TEST_CASE("Azure CSV: dates, offsets, column order, BOM", "[request_reader][azure]") {
  auto all = read_all(
      "\xEF\xBB\xBF"
      "GeneratedTokens,extra,timestamp,CONTEXTTOKENS\n"
      "1,a,2023-12-31 23:59:59.5,10\n"
      "2,b,2024-01-01T00:00:00.25Z,20\n"
      "3,\"c,d\",2024-02-29 00:00:00,30\n"
      "4,e,2024-03-01 01:00:00.000000001+01:00,40\n"
      "5,f,2024-02-29 19:00:00.5-05:00,50\n",
      "t.csv");
  REQUIRE(all.format == RequestFormat::kAzure);
  REQUIRE(all.requests.size() == 5);
  CHECK(all.requests[0].prompt == 10);
  CHECK(all.requests[0].output == 1);
  CHECK(all.requests[1].arrival == 0.75);
  CHECK(all.requests[2].arrival == 0.5 + 59 * 86400.0);
  CHECK(all.requests[3].arrival == 0.5 + 60 * 86400.0 + 1e-9);
  CHECK(all.requests[4].arrival == 0.5 + 60 * 86400.0 + 0.5);
}

TEST_CASE("BurstGPT CSV: failed requests are skipped and counted", "[request_reader][burstgpt]") {
  auto all = read_all(
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,GPT-4,1087,0,1087,API log\n"
      "45.5,ChatGPT,30,2,32,\"Conversation log\"\n"
      "118,GPT-4,417,276,693,Conversation log\n",
      "b.csv");
  REQUIRE(all.format == RequestFormat::kBurstGpt);
  REQUIRE(all.requests.size() == 3);
  CHECK(all.skipped == 1);
  CHECK(all.requests[0].arrival == 5.0);
  CHECK(all.requests[0].prompt == 472);
  CHECK(all.requests[0].output == 18);
  CHECK(all.requests[0].id == "2");
  CHECK(all.requests[1].arrival == 45.5);
  CHECK(all.requests[1].line == 4);
  CHECK(all.requests[2].output == 276);
}

TEST_CASE("CSV: a header alone is zero requests, quoted fields may span lines",
          "[request_reader][csv]") {
  CHECK(read_all("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv").requests.empty());
  auto all = read_all(
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "1,\"two\nline \"\"model\"\"\",3,4,7,x\n"
      "2,m,3,4,7,x\n",
      "b.csv");
  REQUIRE(all.requests.size() == 2);
  CHECK(all.requests[0].line == 2);
  CHECK(all.requests[1].line == 4);
}

TEST_CASE("a forced format", "[request_reader]") {
  // Without the header's hint a JSON record is read as the forced format.
  auto native = read_all("{\"arrival\": 1, \"prompt\": 2, \"output\": 3}\n", "t.jsonl",
                         RequestFormat::kNative);
  CHECK(native.format == RequestFormat::kNative);
  CHECK(error_of("{\"arrival\": 1, \"prompt\": 2, \"output\": 3}\n", "t.jsonl",
                 RequestFormat::kMooncake) ==
        "t.jsonl:1: timestamp: missing (a Mooncake record needs timestamp, input_length, "
        "output_length, hash_ids)");
  CHECK(error_of("{\"timestamp\": 1, \"input_length\": 2, \"output_length\": 3, \"hash_ids\": "
                 "[1]}\n",
                 "t.jsonl", RequestFormat::kNative) ==
        "t.jsonl:1: timestamp: unknown field (a native record takes arrival, id, prompt, output, "
        "n, prefix, prefix_tokens, hash_block_tokens, hash_ids, start, session)");
  CHECK(error_of("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv", RequestFormat::kBurstGpt) ==
        "t.csv:1: header: no column 'Request tokens' (an BurstGPT trace's header is "
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type)");
  CHECK(error_of("TIMESTAMP,ContextTokens,GeneratedTokens\n", "t.csv", RequestFormat::kNative) ==
        "t.csv:1: json: expected a request object, got 'T'");
  auto azure = read_all("timestamp,contexttokens,generatedtokens\n2023-01-01 00:00:00,1,2\n",
                        "t.csv", RequestFormat::kAzure);
  CHECK(azure.requests.size() == 1);
}

// Arrivals past 2^33 s would lose their microseconds in a double (1e15 s has
// an ulp of 0.125 s: every latency read 0): every format refuses them, at the
// bound's exact edge.
TEST_CASE("every format refuses arrivals past 2^33 s", "[request_reader][errors]") {
  const std::string bound =
      " is past the arrival bound of 2^33 s (8589934592 s, about 272 years; beyond it a double "
      "no longer resolves microseconds)";
  CHECK(error_of("{\"arrival\": 8589934592, \"prompt\": 1, \"output\": 1}\n").empty());
  CHECK(error_of("{\"arrival\": 1e15, \"prompt\": 1, \"output\": 1}\n") ==
        "t.jsonl:1: arrival: 1e15" + bound);
  CHECK(error_of("{\"arrival\": 8589934592.001, \"prompt\": 1, \"output\": 1}\n") ==
        "t.jsonl:1: arrival: 8589934592.001" + bound);
  const std::string mooncake = ", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n";
  CHECK(error_of("{\"timestamp\": 8589934592000" + mooncake).empty());
  CHECK(error_of("{\"timestamp\": 8589934592001" + mooncake) ==
        "t.jsonl:1: timestamp: 8589934592001 ms" + bound);
  CHECK(error_of("{\"timestamp\": 0" + mooncake + "{\"timestamp\": 1000000000000000000" +
                 mooncake) == "t.jsonl:2: timestamp: 1000000000000000000 ms" + bound);
  const std::string azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,1\n";
  CHECK(error_of(azure + "2296-01-30 07:12:18,5,1\n", "t.csv").empty());  // 2^33 s later
  CHECK(error_of(azure + "2296-01-30 07:12:18.000001,5,1\n", "t.csv") ==
        "t.csv:3: TIMESTAMP: 2296-01-30 07:12:18.000001 (8589934592 s after the first row)" +
            bound);
  CHECK(error_of(azure + "2296-01-30 07:12:19,5,1\n", "t.csv") ==
        "t.csv:3: TIMESTAMP: 2296-01-30 07:12:19 (8589934593 s after the first row)" + bound);
  CHECK(error_of(azure + "9999-12-31 23:59:59,5,1\n", "t.csv") ==
        "t.csv:3: TIMESTAMP: 9999-12-31 23:59:59 (251702142253 s after the first row)" + bound);
  const std::string burst =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  CHECK(error_of(burst + "8589934592,ChatGPT,1,18,19,x\n", "t.csv").empty());
  CHECK(error_of(burst + "1e15,ChatGPT,1,18,19,x\n", "t.csv") ==
        "t.csv:2: Timestamp: 1e15" + bound);
  // Negative and not-a-number arrivals were refused before the bound existed.
  CHECK(error_of(burst + "nan,ChatGPT,1,18,19,x\n", "t.csv") ==
        "t.csv:2: Timestamp: expected a number, got 'nan'");
  CHECK(error_of("{\"arrival\": NaN, \"prompt\": 1, \"output\": 1}\n")
            .rfind("t.jsonl:1: arrival: expected a number", 0) == 0);
  CHECK(error_of("{\"timestamp\": -1" + mooncake) ==
        "t.jsonl:1: timestamp: -1 is negative (must be >= 0)");
}

TEST_CASE("every format with hash ids refuses one past 2^62 - 1", "[request_reader][errors]") {
  // kvreplay keys its own pages above 2^62 (engine/key_spaces.h): a trace id
  // there could alias them. Azure and BurstGPT traces carry no hash ids.
  const std::string limit =
      " is past the hash id limit of 2^62 - 1 (4611686018427387903; kvreplay keys its own pages "
      "above it)";
  const std::string native = "{\"arrival\": 0, \"prompt\": 20, \"output\": 1, \"hash_ids\": [";
  CHECK(error_of(native + "4611686018427387903]}\n").empty());
  CHECK(error_of(native + "1]}\n" + native + "4611686018427387904]}\n") ==
        "t.jsonl:2: hash_ids: 4611686018427387904" + limit);
  CHECK(error_of(native + "18446744073709551615]}\n") ==
        "t.jsonl:1: hash_ids: 18446744073709551615" + limit);
  const std::string mooncake =
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, "
      "\"hash_ids\": [";
  CHECK(error_of(mooncake + "0, 4611686018427387903]}\n").empty());
  CHECK(error_of(mooncake + "0, 9223372036854775808]}\n") ==
        "t.jsonl:1: hash_ids: 9223372036854775808" + limit);
}

// A trace out of order is refused with the command that sorts it; with
// allow_unsorted (convert --sort) it reads through.
TEST_CASE("arrivals that go backwards: the fix in the message, or read through",
          "[request_reader][errors]") {
  const std::string native =
      "{\"arrival\": 2, \"prompt\": 1, \"output\": 1}\n{\"arrival\": 1, \"prompt\": 1, \"output\": "
      "1}\n";
  CHECK(error_of(native, "my trace's.jsonl") ==
        "my trace's.jsonl:2: arrival: 1 goes backwards (previous arrival was 2); sort it by "
        "arrival first: kvreplay convert --sort 'my trace'\\''s.jsonl' -o sorted.jsonl");
  CHECK(error_of(native, "<stdin>") ==
        "<stdin>:2: arrival: 1 goes backwards (previous arrival was 2); sort it by arrival first: "
        "kvreplay convert --sort - -o sorted.jsonl");
  auto read_unsorted = [](const std::string& text, const std::string& name) {
    auto opened = RequestReader::from_string(text, name, std::nullopt);
    REQUIRE(opened);
    opened.value()->allow_unsorted();
    std::vector<double> arrivals;
    Request request;
    for (;;) {
      auto more = opened.value()->next(request);
      REQUIRE(more);
      if (!more.value()) break;
      arrivals.push_back(request.arrival);
    }
    return std::make_pair(arrivals, opened.value()->start());
  };
  CHECK(read_unsorted(native, "t.jsonl").first == std::vector<double>{2.0, 1.0});
  // Azure: seconds from the first row, negative before it; start() is the earliest row.
  auto [arrivals, start] = read_unsorted(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,5,1\n"
      "2023-11-16 18:15:45,5,1\n2023-11-16 18:15:50,5,1\n",
      "t.csv");
  CHECK(arrivals == std::vector<double>{0.0, -1.5, 3.5});
  CHECK(start == std::optional<std::string>("2023-11-16 18:15:45"));
}

// The wall-clock instant of arrival 0: Azure's first TIMESTAMP as written, a
// native trace's "start" (first record only, a date and time), none otherwise.
TEST_CASE("the trace's start: Azure's first row, native's start field", "[request_reader]") {
  auto start_of = [](const std::string& text, const std::string& name) {
    auto opened = RequestReader::from_string(text, name, std::nullopt);
    REQUIRE(opened);
    Request request;
    while (opened.value()->next(request).value()) {
    }
    return opened.value()->start();
  };
  CHECK(start_of("TIMESTAMP,ContextTokens,GeneratedTokens\n 2023-11-16 18:15:46.6805900 ,5,1\n"
                 "2023-11-16 18:15:47,5,1\n",
                 "t.csv") == std::optional<std::string>("2023-11-16 18:15:46.6805900"));
  CHECK(start_of(
            "{\"arrival\": 0, \"start\": \"2023-11-16T18:15:46Z\", \"prompt\": 1, \"output\": 1}\n",
            "t.jsonl") == std::optional<std::string>("2023-11-16T18:15:46Z"));
  CHECK(start_of(
            "{\"start\": \"2023-11-16 18:15:46\", \"arrival\": 0, \"prompt\": 1, \"output\": 1}\n",
            "t.jsonl") == std::optional<std::string>("2023-11-16 18:15:46"));
  CHECK(start_of("{\"arrival\": 0, \"prompt\": 1, \"output\": 1}\n", "t.jsonl") == std::nullopt);
  CHECK(
      start_of("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
               "t.jsonl") == std::nullopt);
  const std::string one = "{\"arrival\": 0, \"prompt\": 1, \"output\": 1}\n";
  CHECK(error_of(one + "{\"arrival\": 1, \"start\": \"2023-11-16 18:15:46\", \"prompt\": 1, "
                       "\"output\": 1}\n") ==
        "t.jsonl:2: start: only the first record may give the trace's start");
  CHECK(error_of("{\"arrival\": 0, \"start\": 5, \"prompt\": 1, \"output\": 1}\n") ==
        "t.jsonl:1: start: expected a date and time as a string, got a number");
  CHECK(error_of("{\"arrival\": 0, \"start\": \"yesterday\", \"prompt\": 1, \"output\": 1}\n") ==
        "t.jsonl:1: start: expected a date and time like 2023-11-16 18:15:46.6805900, got "
        "'yesterday'");
}

TEST_CASE("bad native records: exact messages", "[request_reader][native][errors]") {
  const std::string ok = "{\"arrival\": 0, \"prompt\": 5, \"output\": 1}\n";
  struct Case {
    std::string input;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\"arrival\": 0, \"prompt\": 5 \"output\": 1}\n",
       "t.jsonl:1: json: expected ',' or '}' in the record, got '\"'"},
      {ok + "{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"foo\": 1}\n",
       "t.jsonl:2: foo: unknown field (a native record takes arrival, id, prompt, output, n, "
       "prefix, prefix_tokens, hash_block_tokens, hash_ids, start, session)"},
      {"{\"foo\": [1, {\"a\": 2}],\n \"arrival\": 0, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: foo: unknown field (a native record takes arrival, id, prompt, output, n, "
       "prefix, prefix_tokens, hash_block_tokens, hash_ids, start, session)"},
      {ok + "{\"arrival\": 0, \"prompt\": 5}\n",
       "t.jsonl:2: output: missing (a native record needs arrival, prompt, output)"},
      {ok + "{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"session\": 7}\n",
       "t.jsonl:2: session: expected a string, got a number"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"session\": \"\"}\n",
       "t.jsonl:1: session: must not be empty"},
      {"{\"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: arrival: missing (a native record needs arrival, prompt, output)"},
      {"{\"arrival\": 0, \"prompt\": \"5\", \"output\": 1}\n",
       "t.jsonl:1: prompt: expected an integer, got a string"},
      {"{\"arrival\": 0, \"prompt\": 1.5, \"output\": 1}\n",
       "t.jsonl:1: prompt: expected an integer, got 1.5"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 0}\n", "t.jsonl:1: output: 0 (must be >= 1)"},
      {"{\"arrival\": 0, \"prompt\": -3, \"output\": 1}\n",
       "t.jsonl:1: prompt: -3 is negative (must be >= 1)"},
      {"{\"arrival\": 0, \"prompt\": 4294967296, \"output\": 1}\n",
       "t.jsonl:1: prompt: 4294967296 is too large (at most 4294967295)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"n\": 0}\n",
       "t.jsonl:1: n: 0 (must be >= 1)"},
      {"{\"arrival\": -1, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: arrival: -1 is negative (must be >= 0)"},
      {"{\"arrival\": \"now\", \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: arrival: expected a number, got a string"},
      {"{\"arrival\": 1e999, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: arrival: 1e999 is out of range"},
      {"{\"arrival\": 2, \"prompt\": 5, \"output\": 1}\n\n"
       "{\"arrival\": 1, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:3: arrival: 1 goes backwards (previous arrival was 2); sort it by arrival first: "
       "kvreplay convert --sort t.jsonl -o sorted.jsonl"},
      {"{\"arrival\": 0, \"prompt\": 5, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: prompt: duplicate field"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": \"s\", \"prefix_tokens\": 6}\n",
       "t.jsonl:1: prefix_tokens: 6 is more than prompt 5"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": \"s\"}\n",
       "t.jsonl:1: prefix_tokens: missing (required with prefix)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix_tokens\": 2}\n",
       "t.jsonl:1: prefix_tokens: given without prefix"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": \"\", \"prefix_tokens\": 2}\n",
       "t.jsonl:1: prefix: must not be empty"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": 7, \"prefix_tokens\": 2}\n",
       "t.jsonl:1: prefix: expected a string, got a number"},
      {"{\"arrival\": 0, \"prompt\": 1030, \"output\": 1, \"hash_ids\": [1, 2]}\n",
       "t.jsonl:1: hash_ids: 2 entries, expected 3 for prompt 1030 (hash_block_tokens 512)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": []}\n",
       "t.jsonl:1: hash_ids: 0 entries, expected 1 for prompt 5 (hash_block_tokens 512)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": [1], \"hash_block_tokens\": "
       "2}\n",
       "t.jsonl:1: hash_ids: 1 entries, expected 3 for prompt 5 (hash_block_tokens 2)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_block_tokens\": 2}\n",
       "t.jsonl:1: hash_block_tokens: given without hash_ids"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": [-1]}\n",
       "t.jsonl:1: hash_ids: -1 is negative (must be >= 0)"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": [1,]}\n",
       "t.jsonl:1: hash_ids: expected an integer, got ']'"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": [1 2]}\n",
       "t.jsonl:1: hash_ids: expected ',' or ']', got '2'"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": 1}\n",
       "t.jsonl:1: hash_ids: expected an array, got a number"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1} {\"arrival\": 0}\n",
       "t.jsonl:1: json: expected end of line after the record, got '{'"},
      {ok + "{\"arrival\": 0, \"prompt\": 5",
       "t.jsonl:2: json: unexpected end of input inside a record"},
      {ok + "[1, 2]\n", "t.jsonl:2: json: expected a request object, got '['"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": \"\xC3\x28\", "
       "\"prefix_tokens\": "
       "1}\n",
       "t.jsonl:1: prefix: invalid UTF-8 in string"},
      {"{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"id\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
       "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
       "]]]]]]]}\n",
       "t.jsonl:1: id: nested deeper than 64 levels"},
      {"{\"arrival\": 0, \"timestamp\": 0, \"prompt\": 5, \"output\": 1}\n",
       "t.jsonl:1: format: the first record has both native (arrival, prompt, output) and "
       "Mooncake (timestamp) fields; use --format to say which it is"},
      {"{\"hash_ids\": [1]}\n",
       "t.jsonl:1: format: cannot tell native from Mooncake JSON Lines: the first record has none "
       "of arrival, prompt, output, timestamp, input_length, output_length (use --format)"},
      {"{\"kvtrace\": 1, \"config\": {\"model\": \"llama-3-8b\"}}\n{\"op\": \"check\"}\n",
       "t.jsonl:1: format: this is a kvtrace event trace, not a request trace (replay it with "
       "kvreplay replay)"},
      {"", "t.jsonl:1: file: empty input (no requests)"},
      {" \n\r\n\t\n", "t.jsonl:1: file: empty input (no requests)"},
  };
  for (const Case& c : cases) {
    INFO(c.input);
    CHECK(error_of(c.input) == c.message);
  }
}

TEST_CASE("bad Mooncake records: exact messages", "[request_reader][mooncake][errors]") {
  const std::string ok =
      "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n";
  struct Case {
    std::string input;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, "
       "2]}\n",
       "t.jsonl:1: hash_ids: 3 entries, expected 14 for input_length 6758"},
      {ok + "{\"timestamp\": 11, \"input_length\": 1, \"output_length\": 1}\n",
       "t.jsonl:2: hash_ids: missing (a Mooncake record needs timestamp, input_length, "
       "output_length, hash_ids)"},
      {ok + "{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
       "t.jsonl:2: timestamp: 5 goes backwards (previous timestamp was 10); sort it by arrival "
       "first: kvreplay convert --sort t.jsonl -o sorted.jsonl"},
      {"{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
       "t.jsonl:1: timestamp: expected an integer, got 1.5"},
      {"{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}\n",
       "t.jsonl:1: input_length: 0 (must be >= 1)"},
      {ok + "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [0]}\n",
       "t.jsonl:2: output_length: 0 (must be >= 1)"},
      {ok + "{\"timestamp\": 10, \"input_length\": 1, \"input_length\": 1, \"output_length\": 1, "
            "\"hash_ids\": [0]}\n",
       "t.jsonl:2: input_length: duplicate field"},
      {ok + "{\"timestamp\": 10, \"extra\": [1, ], \"input_length\": 1}\n",
       "t.jsonl:2: extra: unexpected ']'"},
  };
  for (const Case& c : cases) {
    INFO(c.input);
    CHECK(error_of(c.input) == c.message);
  }
}

TEST_CASE("bad CSV rows: exact messages", "[request_reader][csv][errors]") {
  const std::string azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string burst =
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  struct Case {
    std::string input;
    std::string message;
  };
  const std::vector<Case> cases = {
      {azure + "2023-11-16 18:15:46.6805900,374\n",
       "t.csv:2: csv: 2 fields, expected 3 as in the header"},
      {azure + "2023-11-16 18:15:46.6805900,374,44,1\n",
       "t.csv:2: csv: 4 fields, expected 3 as in the header"},
      {azure + "2023-11-16 18:15:46.6805900,abc,44\n",
       "t.csv:2: ContextTokens: expected an integer, got 'abc'"},
      {azure + "2023-11-16 18:15:46.6805900,12.0,44\n",
       "t.csv:2: ContextTokens: expected an integer, got '12.0'"},
      {azure + "2023-11-16 18:15:46.6805900,0,44\n", "t.csv:2: ContextTokens: 0 (must be >= 1)"},
      {azure + "2023-11-16 18:15:46.6805900,5,0\r\n", "t.csv:2: GeneratedTokens: 0 (must be >= 1)"},
      {azure + "2023-11-16 18:15:46.6805900,5,-2\n",
       "t.csv:2: GeneratedTokens: -2 is negative (must be >= 1)"},
      {azure + "2023-11-16 18:15:46.6805900,5,\n",
       "t.csv:2: GeneratedTokens: empty (expected an integer)"},
      {azure + "2023-11-16 18:15:46.6805900,99999999999,1\n",
       "t.csv:2: ContextTokens: 99999999999 is too large (at most 4294967295)"},
      {azure + "2023/11/16 18:15:46,5,1\n",
       "t.csv:2: TIMESTAMP: expected a date and time like 2023-11-16 18:15:46.6805900, got "
       "'2023/11/16 18:15:46'"},
      {azure + "2023-02-29 00:00:00,5,1\n",
       "t.csv:2: TIMESTAMP: '2023-02-29 00:00:00' is not a valid date and time"},
      {azure + "2023-11-16 24:00:00,5,1\n",
       "t.csv:2: TIMESTAMP: '2023-11-16 24:00:00' is not a valid date and time"},
      {azure + "2023-11-16 18:15:46.1234567891,5,1\n",
       "t.csv:2: TIMESTAMP: '2023-11-16 18:15:46.1234567891': more than 9 fraction digits"},
      {azure + "2023-11-16 18:15:46.6805900,5,1\n\n2023-11-16 18:15:46.6805800,5,1\n",
       "t.csv:4: TIMESTAMP: 2023-11-16 18:15:46.6805800 goes backwards (previous TIMESTAMP was "
       "2023-11-16 18:15:46.6805900); sort it by arrival first: kvreplay convert --sort t.csv -o "
       "sorted.jsonl"},
      {azure + "\"2023-11-16 18:15:46.6805900,5,1\n", "t.csv:2: csv: unterminated quoted field"},
      {azure + "2023-11-16 18:15:46.6805900,5\"0\",1\n",
       "t.csv:2: csv: '\"' inside an unquoted field (quote the whole field)"},
      {azure + "2023-11-16 18:15:46.6805900,\"5\"x,1\n",
       "t.csv:2: csv: expected ',' or end of line after a quoted field, got 'x'"},
      {azure + "2023-11-16 18:15:46.6805900,5\r1,1\n",
       "t.csv:2: csv: carriage return inside an unquoted field"},
      {azure + "2023-11-16 18:15:46.6805900," + std::string(5000, '1') + ",1\n",
       "t.csv:2: csv: field longer than 4096 bytes"},
      {"TIMESTAMP,ContextTokens,Tokens\n",
       "t.csv:1: header: no column 'GeneratedTokens' (an Azure trace's header is "
       "TIMESTAMP,ContextTokens,GeneratedTokens)"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens,contexttokens\n",
       "t.csv:1: header: column 'ContextTokens' appears twice"},
      {"time,prompt,output\n1,2,3\n",
       "t.csv:1: format: unknown request trace format: expected JSON Lines records, or a CSV "
       "header TIMESTAMP,ContextTokens,GeneratedTokens (Azure) or Timestamp,Model,Request "
       "tokens,Response tokens,Total tokens,Log Type (BurstGPT); use --format to name it"},
      {burst + "5,ChatGPT,0,18,18,Conversation log\n", "t.csv:2: Request tokens: 0 (must be >= 1)"},
      {burst + "soon,ChatGPT,1,18,18,Conversation log\n",
       "t.csv:2: Timestamp: expected a number, got 'soon'"},
      {burst + "inf,ChatGPT,1,18,18,Conversation log\n",
       "t.csv:2: Timestamp: expected a number, got 'inf'"},
      {burst + "-5,ChatGPT,1,18,18,Conversation log\n",
       "t.csv:2: Timestamp: -5 is negative (must be >= 0)"},
      {burst + "5,ChatGPT,1,18,18,Conversation log\n4.5,ChatGPT,1,0,1,API log\n",
       "t.csv:3: Timestamp: 4.5 goes backwards (previous Timestamp was 5); sort it by arrival "
       "first: kvreplay convert --sort t.csv -o sorted.jsonl"},
      {burst + "5,ChatGPT,1,x,18,Conversation log\n",
       "t.csv:2: Response tokens: expected an integer, got 'x'"},
  };
  for (const Case& c : cases) {
    INFO(c.input);
    CHECK(error_of(c.input, "t.csv") == c.message);
  }
}

TEST_CASE("memory stays bounded per record", "[request_reader][errors]") {
  std::string ids = "[0";
  for (std::size_t i = 1; i <= RequestReader::kMaxHashIds; ++i) ids += ",1";
  ids += "]";
  CHECK(error_of("{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"hash_ids\": " + ids + "}\n") ==
        "t.jsonl:1: hash_ids: more than 1048576 entries");
  CHECK(error_of("{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"prefix\": \"" +
                 std::string(5000, 'p') + "\", \"prefix_tokens\": 1}\n") ==
        "t.jsonl:1: prefix: string longer than 4096 bytes");
  std::string long_id = "[";
  for (int i = 0; i < 1000; ++i) long_id += "\"abcd\",";
  long_id += "1]";
  CHECK(error_of("{\"arrival\": 0, \"prompt\": 5, \"output\": 1, \"id\": " + long_id + "}\n") ==
        "t.jsonl:1: id: longer than 4096 bytes as compact JSON");
  std::string wide = "TIMESTAMP,ContextTokens,GeneratedTokens";
  for (int i = 0; i < 300; ++i) wide += ",x";
  CHECK(error_of(wide + "\n", "t.csv", RequestFormat::kAzure) ==
        "t.csv:1: csv: more than 256 fields");
  CHECK(error_of(wide + "\n", "t.csv").find("t.csv:1: format: unknown request trace format") == 0);
}

TEST_CASE("open names unreadable files", "[request_reader][errors]") {
  auto opened = RequestReader::open("/nonexistent/requests.jsonl", std::nullopt);
  REQUIRE_FALSE(opened);
  CHECK(opened.error().to_string() ==
        "/nonexistent/requests.jsonl: file: cannot open: No such file or directory");
}

TEST_CASE("real trace: Mooncake conversation", "[request_reader][shared]") {
  auto path = shared_trace("mooncake/conversation_trace.jsonl");
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(std::filesystem::exists(path));
  auto opened = RequestReader::open(path.string(), std::nullopt);
  REQUIRE(opened);
  RequestReader& reader = *opened.value();
  CHECK(reader.format() == RequestFormat::kMooncake);
  Request request;
  std::uint64_t count = 0;
  double input = 0, output = 0, last = 0;
  for (;;) {
    auto more = reader.next(request);
    if (!more) FAIL(more.error().to_string());
    if (!more.value()) break;
    ++count;
    input += request.prompt;
    output += request.output;
    CHECK(request.arrival >= last);
    last = request.arrival;
    REQUIRE(request.hash_ids.size() == (request.prompt + 511) / 512);
  }
  CHECK(count == 12031);
  CHECK(input / static_cast<double>(count) == Approx(12035).margin(1));
  CHECK(output / static_cast<double>(count) == Approx(343).margin(1));
  CHECK(last == 3536.999);
}

TEST_CASE("real trace: Azure conversation", "[request_reader][shared]") {
  auto path = shared_trace("azure2023/AzureLLMInferenceTrace_conv.csv");
  // [shared] cases are registered only where ../shared/traces exists: a missing file fails.
  REQUIRE(std::filesystem::exists(path));
  auto opened = RequestReader::open(path.string(), std::nullopt);
  REQUIRE(opened);
  RequestReader& reader = *opened.value();
  CHECK(reader.format() == RequestFormat::kAzure);
  Request request;
  std::uint64_t count = 0;
  double input = 0, output = 0, last = 0;
  for (;;) {
    auto more = reader.next(request);
    if (!more) FAIL(more.error().to_string());
    if (!more.value()) break;
    ++count;
    input += request.prompt;
    output += request.output;
    last = request.arrival;
  }
  CHECK(count == 19366);
  CHECK(reader.skipped() == 0);
  CHECK(input / static_cast<double>(count) == Approx(1154.7).margin(0.1));
  CHECK(output / static_cast<double>(count) == Approx(211.1).margin(0.1));
  // 2023-11-16 18:15:46.6805900 to 19:14:08.4025270.
  CHECK(last == 3501.721937);
}
