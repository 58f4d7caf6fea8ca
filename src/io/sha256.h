// Sha256: the SHA-256 message digest (FIPS 180-4), streamed, computed by
// nettle (Debian's nettle-dev).
//
// Used for trace.sha256 in reports: a trace's identity by content, so reports
// of the same trace can be compared wherever and however (gzip, stdin) it was
// read. Not a defence against an adversary choosing inputs to collide; just the
// standard, well-tested fingerprint.
//
// Why nettle: replay hashes every trace byte. Side by side in one process, 1 GiB
// in 1 MiB updates on an AMD EPYC with the SHA extensions (median of 5 runs,
// RelWithDebInfo):
//   OpenSSL 3.0 EVP                              1.73 GB/s
//   nettle 3.8                                   1.60 GB/s
//   kvreplay's former hand-written transform     1.37 GB/s  (with the SHA extensions)
// Both libraries beat the hand-written code, which is gone. OpenSSL is 8%
// faster but its provider start-up costs `kvreplay replay` 3.5 MiB of peak RSS
// (6.8 -> 10.3 MiB on a 1M-event trace) and about a millisecond; nettle costs
// 0.2 MiB and no start-up, and end to end replay time is the same within noise.
// Measure again with
//   cmake --build build --target bench_sha256 && build/bench_sha256 1
//   /usr/bin/time -f '%e s %M KB' build/src/kvreplay replay TRACE -q --check off
//
// Contract: update() any number of times, then digest()/hex_digest() once;
// after that the object must not be used again (REQUIRES, asserted).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct sha256_ctx;  // nettle's, kept out of this header

namespace kvreplay {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, std::size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Digest digest();
  // 64 lowercase hex digits.
  std::string hex_digest();

  // One-shot helper.
  static std::string hex(std::string_view text);

 private:
  std::unique_ptr<sha256_ctx> context_;
  bool finished_ = false;
};

}  // namespace kvreplay
