// ByteSource: buffered bytes from a file or standard input ("-"), gzip
// recognised by content (the magic bytes 1f 8b at the start) rather than by name.
//
// Gzip input follows gzip(1): one or more concatenated members, decompressed
// as one stream. Anything after a member that is not another member (plain
// text appended, padding) is an error, as are a corrupt or truncated member:
// never a silent end of input after the first member.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "io/sha256.h"

namespace kvreplay {

class ByteSource {
 public:
  // Opens `path` ("-" for standard input). Error: why it cannot be read.
  static Result<std::unique_ptr<ByteSource>, std::string> open(const std::string& path);
  // The next source opened (standard input, a FIFO, any path) also copies
  // every raw byte it reads to `fd` (plan's spool: an input that cannot be
  // read twice is read once, and checked record by record as it is spooled,
  // so a bad or endless input stops at its first error instead of filling the
  // disk first). A failed copy stops the source with error() "cannot spool
  // the input: WHY". -1: none.
  static void tee_next_source(int fd);
  // An in-memory source (tests, fuzzers).
  static std::unique_ptr<ByteSource> from_string(std::string data);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Caps the input at `bytes` (after decompression): reading past them fails
  // with error() == `message`. Unlimited by default (traces are streamed).
  void set_limit(std::uint64_t bytes, std::string message) {
    limit_ = bytes;
    limit_message_ = std::move(message);
  }

  // Refills the buffer. Returns false at end of input or on error (see error()).
  bool refill();
  const char* begin() const { return data_.data() + start_; }
  const char* end() const { return data_.data() + size_; }
  void advance_to(const char* position) {
    start_ = static_cast<std::size_t>(position - data_.data());
  }
  // Set once a read failed (I/O error, corrupt or truncated gzip, bytes after
  // the gzip data that are not a gzip member).
  const std::string& error() const { return error_; }

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
  // Reads more raw input into input_ (after what is left of it). Returns false
  // at end of file (input_eof_ set) or on error (error_ set).
  bool read_input();
  // Copies `n` raw bytes to the tee, if any; false (error_ set) when that fails.
  bool tee(const void* bytes, std::size_t n);
  // Decides raw or gzip from the first bytes.
  bool start();
  // Appends up to `space` decompressed (or raw) bytes at `out`; returns how
  // many (0: end of input or error).
  std::size_t produce(char* out, std::size_t space);
  std::size_t produce_gzip(char* out, std::size_t space);

  int fd_ = -1;
  int tee_fd_ = -1;
  bool memory_ = false;
  bool started_ = false;
  bool finished_ = false;  // every input byte produced
  // Raw input: input_[input_start_, input_end_) not yet used.
  std::vector<unsigned char> input_;
  std::size_t input_start_ = 0;
  std::size_t input_end_ = 0;
  bool input_eof_ = false;
  // Gzip: the inflater (gzip wrapper), and whether it is inside a member.
  z_stream stream_{};
  bool inflating_ = false;
  bool in_member_ = false;
  std::vector<char> data_;
  std::uint64_t produced_ = 0;  // bytes refill() has produced so far
  std::uint64_t limit_ = UINT64_MAX;
  std::string limit_message_;
  std::size_t start_ = 0;
  std::size_t size_ = 0;
  std::string error_;
  Sha256 hash_;  // of data_[0, size_) and everything read before it
};

}  // namespace kvreplay
