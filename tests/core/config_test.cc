// PagedKvConfig: validation, derived sizes, memory sizes, names.
#include <cstdint>
#include <limits>
#include <string>

#include "core/config.h"
#include "core/test_support.h"

namespace kvreplay {
namespace {

// Llama-3-8B, bf16, 16-token pages.
PagedKvConfig llama_3_8b() {
  return PagedKvConfig{.layers = 32,
                       .kv_heads = 8,
                       .head_dim = 128,
                       .dtype = Dtype::kBf16,
                       .page_tokens = 16,
                       .pool_blocks = 1000,
                       .max_seq_tokens = 4096};
}

// The smallest geometry: 1 layer, 1 head, head_dim 1, fp8, 1-token pages ->
// 2 bytes per token and per block.
PagedKvConfig tiny() {
  return PagedKvConfig{.layers = 1,
                       .kv_heads = 1,
                       .head_dim = 1,
                       .dtype = Dtype::kFp8,
                       .page_tokens = 1,
                       .pool_blocks = 1,
                       .max_seq_tokens = 1};
}

bool mentions(const std::optional<std::string>& message, std::string_view fragment) {
  return message.has_value() && message->find(fragment) != std::string::npos;
}

TEST_CASE("config: llama-3-8b bf16 with 16-token pages derives 128 KiB per token, 2 MiB blocks") {
  const PagedKvConfig config = llama_3_8b();
  REQUIRE(config.is_valid());
  REQUIRE_FALSE(config.validate().has_value());
  CHECK(config.bytes_per_token() == 131072u);  // 2 * 32 * 8 * 128 * 2
  CHECK(config.block_bytes() == 2u * 1024u * 1024u);
  CHECK(config.pool_bytes() == 1000ull * 2 * 1024 * 1024);
  CHECK(config.pages_per_seq() == 256u);  // 4096 / 16
  CHECK(config.required_single_sequence_blocks() == 32u * 256u);
}

TEST_CASE("config: pages_per_seq rounds up a partial last page") {
  PagedKvConfig config = llama_3_8b();
  config.max_seq_tokens = 4097;
  CHECK(config.pages_per_seq() == 257u);
  config.max_seq_tokens = 15;
  CHECK(config.pages_per_seq() == 1u);
  config.page_tokens = 1;
  CHECK(config.pages_per_seq() == 15u);
  config.page_tokens = 3;
  config.max_seq_tokens = 7;
  CHECK(config.pages_per_seq() == 3u);
  config.max_seq_tokens = std::numeric_limits<std::uint32_t>::max();
  config.page_tokens = 2;
  CHECK(config.pages_per_seq() == 2147483648u);
}

TEST_CASE("config: dtype sizes feed bytes_per_token") {
  PagedKvConfig config = llama_3_8b();
  CHECK(dtype_bytes(Dtype::kFp32) == 4u);
  CHECK(dtype_bytes(Dtype::kFp16) == 2u);
  CHECK(dtype_bytes(Dtype::kBf16) == 2u);
  CHECK(dtype_bytes(Dtype::kFp8) == 1u);
  config.dtype = Dtype::kFp32;
  CHECK(config.bytes_per_token() == 262144u);
  config.dtype = Dtype::kFp8;
  CHECK(config.bytes_per_token() == 65536u);
  CHECK(config.block_bytes() == 1024u * 1024u);
}

TEST_CASE("config: kv_tensors 1 keeps one MLA latent per token, 2 a K and a V") {
  PagedKvConfig config = llama_3_8b();
  CHECK(config.kv_tensors == 2u);  // the default: K and V (SPEC 1)
  // DeepSeek-V3: 61 layers, one latent of 512 + 64 values, bf16.
  config.layers = 61;
  config.kv_heads = 1;
  config.head_dim = 576;
  config.kv_tensors = 1;
  CHECK(config.is_valid());
  CHECK(config.bytes_per_token() == 61u * 576u * 2u);
  CHECK(config.block_bytes() == 61u * 576u * 2u * 16u);
  for (std::uint32_t bad : {0u, 3u}) {
    config.kv_tensors = bad;
    CHECK(config.validate() ==
          std::optional<std::string>("kv_tensors must be 1 (MLA) or 2 (K and V)"));
  }
}

TEST_CASE("config: validate rejects each zero field and names it") {
  struct Case {
    const char* field;
    std::uint32_t PagedKvConfig::*member;
  };
  const Case cases[] = {{"layers", &PagedKvConfig::layers},
                        {"kv_heads", &PagedKvConfig::kv_heads},
                        {"head_dim", &PagedKvConfig::head_dim},
                        {"page_tokens", &PagedKvConfig::page_tokens},
                        {"pool_blocks", &PagedKvConfig::pool_blocks},
                        {"max_seq_tokens", &PagedKvConfig::max_seq_tokens}};
  for (const Case& c : cases) {
    INFO("field " << c.field);
    PagedKvConfig config = llama_3_8b();
    config.*c.member = 0;
    CHECK_FALSE(config.is_valid());
    const auto message = config.validate();
    REQUIRE(message.has_value());
    CHECK(mentions(message, c.field));
  }
}

TEST_CASE("config: validate rejects a dtype outside the enum") {
  PagedKvConfig config = llama_3_8b();
  config.dtype = static_cast<Dtype>(9);
  CHECK_FALSE(config.is_valid());
  CHECK(mentions(config.validate(), "dtype"));
}

TEST_CASE("config: validate rejects byte counts that overflow 64 bits") {
  SECTION("bytes_per_token") {
    PagedKvConfig config = llama_3_8b();
    config.layers = config.kv_heads = config.head_dim = 0xFFFFFFFFu;
    CHECK_FALSE(config.is_valid());
    CHECK(mentions(config.validate(), "bytes_per_token"));
  }
  SECTION("block_bytes") {
    // 2 * 2^16 * 2^16 * 2^16 * 2 = 2^50 bytes per token; * 2^16 tokens = 2^66.
    PagedKvConfig config = llama_3_8b();
    config.layers = config.kv_heads = config.head_dim = 1u << 16;
    config.page_tokens = 1u << 16;
    CHECK_FALSE(config.is_valid());
    CHECK(mentions(config.validate(), "block_bytes"));
    config.page_tokens = 1u << 13;  // 2^63: still fits
    config.pool_blocks = 1;
    CHECK(config.is_valid());
  }
  SECTION("pool bytes") {
    // fp8: 2^49 bytes per token and block; 2^15 blocks = 2^64 bytes.
    PagedKvConfig config = tiny();
    config.layers = config.kv_heads = config.head_dim = 1u << 16;
    config.pool_blocks = 1u << 15;
    CHECK_FALSE(config.is_valid());
    CHECK(mentions(config.validate(), "pool bytes"));
    config.pool_blocks = (1u << 15) - 1;
    CHECK(config.is_valid());
  }
}

TEST_CASE("config: pools of 2^32-1 blocks or more are rejected, 2^32-2 is accepted") {
  PagedKvConfig config = tiny();
  config.pool_blocks = 0xFFFFFFFFu;
  CHECK_FALSE(config.is_valid());
  CHECK(mentions(config.validate(), "pool_blocks"));
  config.pool_blocks = 0xFFFFFFFEu;
  CHECK(config.is_valid());
  CHECK(config.pool_bytes() == 2ull * 0xFFFFFFFEull);
}

TEST_CASE("config: parse_memory_size reads byte counts and binary and decimal units") {
  struct Case {
    const char* text;
    std::uint64_t bytes;
  };
  const Case cases[] = {
      {"80GiB", 85899345920ull},
      {"512MiB", 536870912ull},
      {"1048576", 1048576ull},
      {"1.5GiB", 1610612736ull},
      {"2GB", 2000000000ull},
      {"0", 0},
      {"100B", 100},
      {"1KiB", 1024},
      {"1KB", 1000},
      {"3MB", 3000000},
      {"2TiB", 2199023255552ull},
      {"2TB", 2000000000000ull},
      {"1.25KiB", 1280},
      {"0.5KiB", 512},
      {"1.0001KiB", 1024},  // 1024.1024 rounded down
      {"1.999999999B", 1},  // rounded down
      {"16 GiB", 17179869184ull},
      {"18446744073709551615", 18446744073709551615ull},
      {"16777215TiB", 16777215ull << 40},
  };
  for (const Case& c : cases) {
    INFO("'" << c.text << "'");
    const auto parsed = parse_memory_size(c.text);
    REQUIRE(parsed.ok());
    CHECK(parsed.value() == c.bytes);
  }
}

TEST_CASE("config: parse_memory_size rejects malformed and overflowing sizes") {
  struct Case {
    const char* text;
    const char* fragment;  // expected in the message
  };
  const Case cases[] = {
      {"", "not a size"},
      {"abc", "not a size"},
      {"GiB", "not a size"},
      {"-1GiB", "not a size"},
      {"1.2.3", "not a size"},
      {".5GiB", "not a size"},
      {"5.GiB", "not a size"},
      {"12XB", "unknown unit 'XB'"},
      {"12gib", "unknown unit 'gib'"},
      {"1GiB ", "unknown unit"},
      {"99999999999TiB", "too large"},
      {"16777216TiB", "too large"},            // exactly 2^64
      {"18446744073709551616", "too large"},   // 2^64 as a byte count
      {"18446744073709551.9KB", "too large"},  // the fraction pushes it past 2^64-1
  };
  for (const Case& c : cases) {
    INFO("'" << c.text << "'");
    const auto parsed = parse_memory_size(c.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().find(c.fragment) != std::string::npos);
  }
}

TEST_CASE("config: pool_blocks_for_memory rounds down to whole blocks") {
  const PagedKvConfig config = llama_3_8b();  // 2 MiB blocks
  constexpr std::uint64_t kMiB = 1024 * 1024;
  auto blocks = pool_blocks_for_memory(config, 80ull << 30);
  REQUIRE(blocks.ok());
  CHECK(blocks.value() == 40960u);
  blocks = pool_blocks_for_memory(config, (80ull << 30) + 2 * kMiB - 1);
  REQUIRE(blocks.ok());
  CHECK(blocks.value() == 40960u);
  blocks = pool_blocks_for_memory(config, 2 * kMiB);
  REQUIRE(blocks.ok());
  CHECK(blocks.value() == 1u);
  blocks = pool_blocks_for_memory(config, 5 * kMiB);
  REQUIRE(blocks.ok());
  CHECK(blocks.value() == 2u);
}

TEST_CASE("config: pool_blocks_for_memory errors when no block fits") {
  const PagedKvConfig config = llama_3_8b();
  for (std::uint64_t memory : {0ull, 1ull, 2ull * 1024 * 1024 - 1}) {
    INFO(memory << " bytes");
    const auto blocks = pool_blocks_for_memory(config, memory);
    REQUIRE_FALSE(blocks.ok());
    CHECK(blocks.error().find("no block") != std::string::npos);
  }
}

TEST_CASE("config: pool_blocks_for_memory errors at 2^32-1 blocks or more") {
  const PagedKvConfig config = tiny();  // 2-byte blocks
  REQUIRE(config.block_bytes() == 2u);
  auto blocks = pool_blocks_for_memory(config, 2ull * 0xFFFFFFFEull + 1);
  REQUIRE(blocks.ok());
  CHECK(blocks.value() == 0xFFFFFFFEu);
  for (std::uint64_t memory : std::initializer_list<std::uint64_t>{
           2ull * 0xFFFFFFFFull, 2ull * 0xFFFFFFFFull + 1, 1ull << 40,
           std::numeric_limits<std::uint64_t>::max()}) {
    INFO(memory << " bytes");
    blocks = pool_blocks_for_memory(config, memory);
    REQUIRE_FALSE(blocks.ok());
    CHECK(blocks.error().find("4294967294") != std::string::npos);
  }
}

TEST_CASE("config: dtype names round trip and unknown names are rejected") {
  const std::pair<const char*, Dtype> names[] = {
      {"fp32", Dtype::kFp32}, {"fp16", Dtype::kFp16}, {"bf16", Dtype::kBf16}, {"fp8", Dtype::kFp8}};
  for (const auto& [name, dtype] : names) {
    INFO(name);
    CHECK(to_string(dtype) == name);
    const auto parsed = parse_dtype(name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == dtype);
  }
  for (const char* name : {"", "int8", "fp64", "bf", "fp16 "}) {
    INFO("'" << name << "'");
    CHECK_FALSE(parse_dtype(name).has_value());
  }
}

TEST_CASE("config: allocation order names round trip and unknown names are rejected") {
  const std::pair<const char*, AllocOrder> names[] = {
      {"lifo", AllocOrder::kLifo}, {"fifo", AllocOrder::kFifo}, {"lowest", AllocOrder::kLowest}};
  for (const auto& [name, order] : names) {
    INFO(name);
    CHECK(to_string(order) == name);
    const auto parsed = parse_alloc_order(name);
    REQUIRE(parsed.has_value());
    CHECK(*parsed == order);
  }
  for (const char* name : {"", "random", "highest", "lifo2"}) {
    INFO("'" << name << "'");
    CHECK_FALSE(parse_alloc_order(name).has_value());
  }
}

}  // namespace
}  // namespace kvreplay
