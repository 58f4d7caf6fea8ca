// bench_sha256: SHA-256 throughput, side by side: kvreplay's Sha256 (what
// trace.sha256 uses: nettle behind an incremental interface), nettle called
// directly, and OpenSSL's EVP interface (when libssl-dev is installed). Each
// hashes the same buffer in 1 MiB updates, like ByteSource hashing a trace as it
// is read, and prints seconds, GB/s and the digest, so the engines check each
// other. The figures behind the choice of library are in src/io/sha256.h.
// Not a test.
//   bench_sha256 [GIB]   (default 1: each engine hashes GIB GiB)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nettle/sha2.h>
#ifdef KVREPLAY_BENCH_OPENSSL
#include <openssl/evp.h>
#endif

#include "io/sha256.h"

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 20;

std::string hex(const unsigned char* digest, std::size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[digest[i] >> 4]);
    out.push_back(kDigits[digest[i] & 15]);
  }
  return out;
}

template <typename Hash>
void run(const char* name, const std::vector<unsigned char>& chunk, std::size_t chunks,
         Hash&& hash) {
  const auto start = std::chrono::steady_clock::now();
  const std::string digest = hash(chunk, chunks);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(chunk.size()) * static_cast<double>(chunks);
  std::printf("%-22s %7.3f s %7.3f GB/s  %s\n", name, seconds, bytes / seconds / 1e9,
              digest.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const long gib = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 1;
  if (gib < 1) {
    std::fprintf(stderr, "usage: bench_sha256 [GIB]\n");
    return 2;
  }
  const std::size_t chunks = static_cast<std::size_t>(gib) * 1024;
  std::vector<unsigned char> chunk(kChunk);
  std::uint32_t x = 12345;
  for (unsigned char& byte : chunk) {
    x = x * 1103515245u + 12345u;
    byte = static_cast<unsigned char>(x >> 24);
  }

  run("kvreplay Sha256", chunk, chunks, [](const auto& data, std::size_t n) {
    kvreplay::Sha256 hash;
    for (std::size_t i = 0; i < n; ++i) hash.update(data.data(), data.size());
    return hash.hex_digest();
  });
#ifdef KVREPLAY_BENCH_OPENSSL
  run("OpenSSL EVP", chunk, chunks, [](const auto& data, std::size_t n) {
    EVP_MD_CTX* context = EVP_MD_CTX_new();
    EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
    for (std::size_t i = 0; i < n; ++i) EVP_DigestUpdate(context, data.data(), data.size());
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned size = 0;
    EVP_DigestFinal_ex(context, digest, &size);
    EVP_MD_CTX_free(context);
    return hex(digest, size);
  });
#endif
  run("nettle sha256", chunk, chunks, [](const auto& data, std::size_t n) {
    sha256_ctx context;
    sha256_init(&context);
    for (std::size_t i = 0; i < n; ++i) sha256_update(&context, data.size(), data.data());
    unsigned char digest[SHA256_DIGEST_SIZE];
    sha256_digest(&context, SHA256_DIGEST_SIZE, digest);
    return hex(digest, SHA256_DIGEST_SIZE);
  });
  return 0;
}
