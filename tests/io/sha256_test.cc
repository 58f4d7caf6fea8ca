#include "io/sha256.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

namespace kvreplay {
namespace {

// FIPS 180-4's examples (NIST CSRC "Examples with Intermediate Values",
// SHA256.pdf and SHA2_Additional.pdf).
TEST_CASE("sha256: FIPS 180-4 test vectors") {
  CHECK(Sha256::hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256::hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(
      Sha256::hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                  "klmnopqrlmnopqrsmnopqrstnopqrstu") ==
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(Sha256::hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Messages around the padding boundaries: 55 bytes still fit the length in
// their last block, 56..63 need another block.
TEST_CASE("sha256: lengths around the 64-byte block and its padding") {
  struct Case {
    std::size_t length;
    const char* digest;
  };
  const Case cases[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
  };
  for (const Case& c : cases) {
    INFO("length " << c.length);
    CHECK(Sha256::hex(std::string(c.length, 'a')) == c.digest);
  }
}

TEST_CASE("sha256: any split of the input into updates gives the same digest") {
  std::string data;
  for (int i = 0; i < 300; ++i) {
    for (int b = 0; b < 256; ++b) data.push_back(static_cast<char>(b));
  }
  const std::string whole = "f8b0585eb91f58c007a5634362c9f90d8543822c113f702523bc7b73408a9392";
  REQUIRE(Sha256::hex(data) == whole);
  for (std::size_t chunk : {1u, 3u, 63u, 64u, 65u, 127u, 4096u, 65537u}) {
    INFO("chunk " << chunk);
    Sha256 hash;
    for (std::size_t at = 0; at < data.size(); at += chunk) {
      hash.update(data.data() + at, std::min(chunk, data.size() - at));
    }
    CHECK(hash.hex_digest() == whole);
  }
}

// Pseudo-random bytes (every byte value, no structure), digests as computed by
// the earlier hand-written transform, both its portable and SHA-extensions code.
TEST_CASE("sha256: pseudo-random data keeps its digests") {
  std::string data;
  std::uint32_t x = 12345;
  for (int i = 0; i < 100000; ++i) {
    x = x * 1103515245u + 12345u;
    data.push_back(static_cast<char>(x >> 24));
  }
  struct Case {
    std::size_t length;
    const char* digest;
  };
  const Case cases[] = {
      {1000, "6af465987131433aa3e51f0cfc683739f03f442b82cdf13e3aac9848d104e8ec"},
      {4095, "47198a7df6d69d29741794019beb8856f24c459a372f38c812a99ea1edc17ffa"},
      {100000, "345385757c07af6511cd2bfe391ab4b22036e34e635b9f3e07ce1610dfbec0b8"},
  };
  for (const Case& c : cases) {
    INFO("length " << c.length);
    Sha256 hash;
    hash.update(data.data(), c.length);
    CHECK(hash.hex_digest() == c.digest);
  }
}

TEST_CASE("sha256: digest is 32 bytes matching the hex form") {
  Sha256 hash;
  hash.update("abc");
  Sha256::Digest digest = hash.digest();
  CHECK(digest[0] == 0xba);
  CHECK(digest[31] == 0xad);
}

}  // namespace
}  // namespace kvreplay
