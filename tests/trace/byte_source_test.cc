// ByteSource::content_sha256: the hash of every decompressed byte, however the
// input arrives and however much of it the caller parsed.
#include "trace/byte_source.h"

#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "trace/kvtrace_reader.h"
#include "trace/sha256.h"

namespace kvreplay {
namespace {

// A file in a fresh temporary directory, removed with it.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kvreplay-bytesource.XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_plain(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

void write_gzip(const std::string& path, const std::string& data) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, data.data(), static_cast<unsigned>(data.size())) ==
          static_cast<int>(data.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

// Reads `source` to its end, consuming every byte.
void consume(ByteSource& source) {
  do {
    source.advance_to(source.end());
  } while (source.refill());
}

std::string sample(std::size_t size) {
  std::string data;
  data.reserve(size);
  for (std::size_t i = 0; data.size() < size; ++i) data += std::to_string(i * 7919 % 1000) + ",";
  data.resize(size);
  return data;
}

TEST_CASE("byte_source: an in-memory source hashes its bytes") {
  auto source = ByteSource::from_string("abc");
  auto digest = source->content_sha256();
  REQUIRE(digest.ok());
  CHECK(digest.value() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("byte_source: a file and its gzip copy hash the same, read whole or not at all") {
  TempDir dir;
  const std::string data = sample(300000);  // several 64 KiB refills
  const std::string expected = Sha256::hex(data);
  write_plain(dir.file("trace.jsonl"), data);
  write_gzip(dir.file("trace.jsonl.gz"), data);
  for (const char* name : {"trace.jsonl", "trace.jsonl.gz"}) {
    INFO(name);
    {
      auto source = ByteSource::open(dir.file(name));
      REQUIRE(source.ok());
      consume(*source.value());
      auto digest = source.value()->content_sha256();
      REQUIRE(digest.ok());
      CHECK(digest.value() == expected);
    }
    {
      // The caller stops early (a replay stopped by pool exhaustion): the rest is hashed.
      auto source = ByteSource::open(dir.file(name));
      REQUIRE(source.ok());
      REQUIRE(source.value()->refill());
      source.value()->advance_to(source.value()->begin() + 10);
      auto digest = source.value()->content_sha256();
      REQUIRE(digest.ok());
      CHECK(digest.value() == expected);
    }
  }
}

TEST_CASE("byte_source: a truncated gzip file cannot be hashed") {
  TempDir dir;
  write_gzip(dir.file("whole.gz"), sample(200000));
  std::ifstream in(dir.file("whole.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_plain(dir.file("cut.gz"), bytes.substr(0, bytes.size() / 2));
  auto source = ByteSource::open(dir.file("cut.gz"));
  REQUIRE(source.ok());
  auto digest = source.value()->content_sha256();
  REQUIRE_FALSE(digest.ok());
  CHECK(digest.error() == "truncated gzip data");
}

TEST_CASE("byte_source: a kvtrace reader's hash covers events it never read") {
  const std::string trace =
      "{\"kvtrace\": 1, \"config\": {\"layers\": 1, \"kv_heads\": 1, \"head_dim\": 4, "
      "\"pool_blocks\": 8}}\n"
      "{\"op\": \"admit\", \"seq\": 0, \"prompt\": 4}\n"
      "{\"op\": \"free\", \"seq\": 0}\n";
  auto reader = KvTraceReader::from_string(trace, "t.jsonl");
  REQUIRE(reader.ok());
  Event event;
  auto more = reader.value()->next(event);
  REQUIRE(more.ok());
  REQUIRE(more.value());
  auto digest = reader.value()->content_sha256();
  REQUIRE(digest.ok());
  CHECK(digest.value() == Sha256::hex(trace));
}

}  // namespace
}  // namespace kvreplay
