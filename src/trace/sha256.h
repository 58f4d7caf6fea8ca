// Sha256: the SHA-256 message digest (FIPS 180-4), streamed.
//
// Used for trace.sha256 in reports: a trace's identity by content, so reports
// of the same trace can be compared wherever and however (gzip, stdin) it was
// read. Not a defence against an adversary choosing inputs to collide; just the
// standard, well-tested fingerprint.
//
// Contract: update() any number of times, then digest()/hex_digest() once;
// after that the object must not be used again (REQUIRES, asserted).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvreplay {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;
  // kBest: the x86 SHA extensions when the CPU has them (several times faster:
  // replay hashes every trace byte), else the portable code.
  enum class Engine : std::uint8_t { kBest, kPortable };

  explicit Sha256(Engine engine = Engine::kBest);
  // True when kBest uses the CPU's SHA extensions on this machine.
  static bool hardware_accelerated();

  void update(const void* data, std::size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Digest digest();
  // 64 lowercase hex digits.
  std::string hex_digest();

  // One-shot helper.
  static std::string hex(std::string_view text);

 private:
  // Hashes `blocks` whole 64-byte blocks.
  void compress(const std::uint8_t* data, std::size_t blocks);

  bool hardware_;
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace kvreplay
