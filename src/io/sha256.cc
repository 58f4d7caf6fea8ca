#include "io/sha256.h"

#include <nettle/sha2.h>

#include <cassert>

namespace kvreplay {

Sha256::Sha256() : context_(std::make_unique<sha256_ctx>()) {
  sha256_init(context_.get());
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
  assert(!finished_);
  if (size > 0) sha256_update(context_.get(), size, static_cast<const std::uint8_t*>(data));
}

Sha256::Digest Sha256::digest() {
  assert(!finished_);
  finished_ = true;
  Digest out;
  static_assert(std::tuple_size_v<Digest> == SHA256_DIGEST_SIZE);
  sha256_digest(context_.get(), out.size(), out.data());
  return out;
}

std::string Sha256::hex_digest() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (std::uint8_t byte : digest()) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

std::string Sha256::hex(std::string_view text) {
  Sha256 hash;
  hash.update(text);
  return hash.hex_digest();
}

}  // namespace kvreplay
