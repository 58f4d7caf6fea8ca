// ByteSource::content_sha256: the hash of every decompressed byte, however the
// input arrives and however much of it the caller parsed.
#include "io/byte_source.h"

#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/sha256.h"

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

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  std::string bytes = read_bytes(dir.file("whole.gz"));
  write_plain(dir.file("cut.gz"), bytes.substr(0, bytes.size() / 2));
  auto source = ByteSource::open(dir.file("cut.gz"));
  REQUIRE(source.ok());
  auto digest = source.value()->content_sha256();
  REQUIRE_FALSE(digest.ok());
  CHECK(digest.error() == "truncated gzip data");
}

// Reads `path` whole through a ByteSource: the bytes, or the error.
Result<std::string, std::string> read_all(const std::string& path) {
  auto source = ByteSource::open(path);
  REQUIRE(source.ok());
  std::string out;
  ByteSource& s = *source.value();
  while (s.refill()) {
    out.append(s.begin(), s.end());
    s.advance_to(s.end());
  }
  out.append(s.begin(), s.end());
  if (!s.error().empty()) return Unexpected{s.error()};
  return out;
}

TEST_CASE("byte_source: concatenated gzip members are one stream, as gzip -d reads them") {
  TempDir dir;
  const std::string first = sample(100000);
  const std::string second = sample(70000) + "\n";
  write_gzip(dir.file("a.gz"), first);
  write_gzip(dir.file("b.gz"), second);
  write_gzip(dir.file("empty.gz"), "");
  write_plain(dir.file("members.gz"), read_bytes(dir.file("a.gz")) +
                                          read_bytes(dir.file("empty.gz")) +
                                          read_bytes(dir.file("b.gz")));
  auto all = read_all(dir.file("members.gz"));
  REQUIRE(all.ok());
  CHECK(all.value() == first + second);
  auto source = ByteSource::open(dir.file("members.gz"));
  REQUIRE(source.ok());
  auto digest = source.value()->content_sha256();
  REQUIRE(digest.ok());
  CHECK(digest.value() == Sha256::hex(first + second));
}

TEST_CASE("byte_source: bytes after the gzip data that are not a gzip member are an error") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), sample(100000));
  const std::string member = read_bytes(dir.file("a.gz"));
  // Plain text appended (the replay used to stop at the first member, exit 0),
  // zero padding, a lone magic byte, a second byte that is not gzip's.
  const std::pair<std::string, std::string> cases[] = {
      {"{\"op\": \"check\"}\n", "bytes after the end of the gzip data are not another gzip member"},
      {std::string(512, '\0'), "bytes after the end of the gzip data are not another gzip member"},
      {"\x1f", "truncated gzip data"},
      {"\x1f\x8c", "bytes after the end of the gzip data are not another gzip member"},
      {member.substr(0, 20), "truncated gzip data"},
  };
  for (const auto& [tail, error] : cases) {
    INFO("tail of " << tail.size() << " bytes");
    write_plain(dir.file("tail.gz"), member + tail);
    auto all = read_all(dir.file("tail.gz"));
    REQUIRE_FALSE(all.ok());
    CHECK(all.error() == error);
    auto source = ByteSource::open(dir.file("tail.gz"));
    REQUIRE(source.ok());
    auto digest = source.value()->content_sha256();
    REQUIRE_FALSE(digest.ok());
    CHECK(digest.error() == error);
  }
}

TEST_CASE("byte_source: plain input that merely starts like gzip is read as it is") {
  TempDir dir;
  write_plain(dir.file("one.txt"), "\x1f");
  write_plain(dir.file("two.txt"), "\x1fx rest");
  CHECK(read_all(dir.file("one.txt")).value() == "\x1f");
  CHECK(read_all(dir.file("two.txt")).value() == "\x1fx rest");
  write_plain(dir.file("empty.txt"), "");
  CHECK(read_all(dir.file("empty.txt")).value().empty());
}

TEST_CASE("byte_source: a limit stops reading past it") {
  TempDir dir;
  write_plain(dir.file("big"), sample(300000));
  auto source = ByteSource::open(dir.file("big"));
  REQUIRE(source.ok());
  source.value()->set_limit(200000, "too big");
  auto digest = source.value()->content_sha256();
  REQUIRE_FALSE(digest.ok());
  CHECK(digest.error() == "too big");
  auto small = ByteSource::open(dir.file("big"));
  REQUIRE(small.ok());
  small.value()->set_limit(300000, "too big");
  CHECK(small.value()->content_sha256().ok());
}

}  // namespace
}  // namespace kvreplay
