#include "dataplane/content.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "dataplane/arena.h"

using namespace kvreplay;

namespace {

constexpr ElemType kTypes[] = {ElemType::kFp32, ElemType::kFp16, ElemType::kBf16, ElemType::kFp8};

}  // namespace

TEST_CASE("decoders are exact on known bit patterns", "[content]") {
  CHECK(content::fp16_to_float(0x3C00) == 1.0f);
  CHECK(content::fp16_to_float(0xC000) == -2.0f);
  CHECK(content::fp16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(content::fp16_to_float(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(content::fp16_to_float(0x7BFF) == 65504.0f);
  CHECK(std::isinf(content::fp16_to_float(0x7C00)));
  CHECK(std::isnan(content::fp16_to_float(0x7E00)));
  CHECK(content::bf16_to_float(0x3F80) == 1.0f);
  CHECK(content::bf16_to_float(0xC0A0) == -5.0f);
  CHECK(content::fp8_to_float(0x38) == 1.0f);
  CHECK(content::fp8_to_float(0x7E) == 448.0f);
  CHECK(content::fp8_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(content::fp8_to_float(0x08) == std::ldexp(1.0f, -6));
  CHECK(content::fp8_to_float(0xB8) == -1.0f);
  CHECK(std::isnan(content::fp8_to_float(0x7F)));
  CHECK(std::isnan(content::fp8_to_float(0xFF)));
}

TEST_CASE("every content value is finite with magnitude at least 1/16 and below 1", "[content]") {
  for (ElemType type : kTypes) {
    std::vector<std::uint8_t> row(64 * elem_bytes(type));
    bool negative = false, positive = false;
    for (std::uint32_t writer = 1; writer < 40; ++writer) {
      content::fill_row(row.data(), type, content::row_key(writer, writer * 7, 3, writer % 2, 1),
                        64);
      for (std::uint32_t d = 0; d < 64; ++d) {
        const float v = content::load_element(row.data(), type, d);
        REQUIRE(std::isfinite(v));
        REQUIRE(std::abs(v) >= 0.0625f);
        REQUIRE(std::abs(v) < 1.0f);
        (v < 0 ? negative : positive) = true;
      }
    }
    CHECK(negative);
    CHECK(positive);
  }
}

TEST_CASE("content is deterministic and tells every coordinate apart", "[content]") {
  // Token rows of one layer, fp32: distinct for distinct (writer, position, layer).
  std::set<std::vector<std::uint8_t>> rows;
  std::vector<std::uint8_t> row(2 * 3 * 5 * 4);
  std::size_t made = 0;
  for (std::uint32_t writer = 1; writer <= 6; ++writer) {
    for (std::uint32_t position = 0; position < 20; ++position) {
      for (std::uint32_t layer = 0; layer < 3; ++layer) {
        content::fill_token_row(row.data(), ElemType::kFp32, writer, position, layer, 3, 5);
        std::vector<std::uint8_t> again(row.size());
        content::fill_token_row(again.data(), ElemType::kFp32, writer, position, layer, 3, 5);
        REQUIRE(again == row);
        rows.insert(row);
        ++made;
      }
    }
  }
  CHECK(rows.size() == made);
  // Within a token, K and V, every head and every word of a row differ.
  std::set<std::uint64_t> words;
  for (std::uint32_t kv = 0; kv < 2; ++kv) {
    for (std::uint32_t head = 0; head < 8; ++head) {
      for (std::uint32_t word = 0; word < 64; ++word) {
        words.insert(content::row_word(content::row_key(1, 0, 0, kv, head), word));
      }
    }
  }
  CHECK(words.size() == 2 * 8 * 64);
  // Odd head_dims fill exactly their bytes, and a row is a prefix of a longer one.
  for (ElemType type : kTypes) {
    std::vector<std::uint8_t> longer(9 * elem_bytes(type), 0xEE), shorter(longer.size(), 0xEE);
    content::fill_row(longer.data(), type, 42, 9);
    content::fill_row(shorter.data(), type, 42, 5);
    CHECK(std::equal(shorter.begin(), shorter.begin() + 5 * elem_bytes(type), longer.begin()));
    CHECK(std::all_of(shorter.begin() + 5 * elem_bytes(type), shorter.end(),
                      [](std::uint8_t b) { return b == 0xEE; }));
  }
}

TEST_CASE("the element type mirrors the configuration's dtype", "[content]") {
  CHECK(elem_type(Dtype::kFp32) == ElemType::kFp32);
  CHECK(elem_type(Dtype::kFp8) == ElemType::kFp8);
  for (Dtype dtype : {Dtype::kFp32, Dtype::kFp16, Dtype::kBf16, Dtype::kFp8}) {
    CHECK(elem_bytes(elem_type(dtype)) == dtype_bytes(dtype));
  }
}

TEST_CASE("query values are at least -1 and below 1", "[content]") {
  for (std::uint32_t i = 0; i < 1000; ++i) {
    const float q = content::query_value(7, i, i % 3, i % 5, i % 11);
    REQUIRE(q >= -1.0f);
    REQUIRE(q < 1.0f);
  }
}
