// ByteSource: buffered bytes from a file or standard input ("-"), gzip
// recognised by content (zlib's transparent mode) rather than by name.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "trace/sha256.h"

namespace kvreplay {

class ByteSource {
 public:
  // Opens `path` ("-" for standard input). Error: why it cannot be read.
  static Result<std::unique_ptr<ByteSource>, std::string> open(const std::string& path);
  // An in-memory source (tests, fuzzers).
  static std::unique_ptr<ByteSource> from_string(std::string data);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Refills the buffer. Returns false at end of input or on error (see error()).
  bool refill();
  const char* begin() const { return data_.data() + start_; }
  const char* end() const { return data_.data() + size_; }
  void advance_to(const char* position) {
    start_ = static_cast<std::size_t>(position - data_.data());
  }
  // Set once a read failed (I/O error, corrupt or truncated gzip).
  const std::string& error() const { return error_; }
  bool compressed() const { return compressed_; }

  // SHA-256 (hex) of every byte of the input as it is read, after gzip
  // decompression: a file, its gzip copy and the same bytes on standard input
  // hash the same. Every byte is hashed once, as refill() produces it; what
  // the caller has not read yet (a replay stopped early) is read and hashed
  // here, so the digest always covers the whole input. Call it once, when done
  // with the source: it leaves the source at its end.
  // Error: why the rest of the input could not be read (error() is set too).
  Result<std::string, std::string> content_sha256();

 private:
  ByteSource() = default;

  gzFile gz_ = nullptr;
  bool memory_ = false;
  bool compressed_ = false;
  std::vector<char> data_;
  std::size_t start_ = 0;
  std::size_t size_ = 0;
  std::string error_;
  Sha256 hash_;  // of data_[0, size_) and everything read before it
};

}  // namespace kvreplay
