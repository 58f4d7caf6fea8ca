#include "core/enum_names.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace kvreplay {
namespace {

enum class Color : unsigned char { kRed, kGreen, kBlue, kUnnamed };

constexpr EnumName<Color> kColorNames[] = {
    {Color::kRed, "red"},
    {Color::kGreen, "green"},
    {Color::kBlue, "blue"},
};

TEST_CASE("enum names: a table maps both ways") {
  STATIC_REQUIRE(enum_name(kColorNames, Color::kGreen) == "green");
  STATIC_REQUIRE(enum_parse(kColorNames, "blue") == Color::kBlue);
  for (const EnumName<Color>& entry : kColorNames) {
    CHECK(enum_parse(kColorNames, enum_name(kColorNames, entry.value)) == entry.value);
  }
}

TEST_CASE("enum names: the list of names keeps table order") {
  CHECK(enum_names(kColorNames) == std::vector<std::string>{"red", "green", "blue"});
  CHECK(dtype_names() == std::vector<std::string>{"fp32", "fp16", "bf16", "fp8"});
  for (const std::string& name : dtype_names()) CHECK(parse_dtype(name).has_value());
}

TEST_CASE("enum names: unknown values and names") {
  CHECK(enum_name(kColorNames, Color::kUnnamed) == "?");
  CHECK(enum_name(kColorNames, Color::kUnnamed, "unknown color") == "unknown color");
  CHECK_FALSE(enum_parse(kColorNames, "purple").has_value());
  // Exact spelling only: no case folding, no prefixes, no surrounding space.
  CHECK_FALSE(enum_parse(kColorNames, "Red").has_value());
  CHECK_FALSE(enum_parse(kColorNames, "re").has_value());
  CHECK_FALSE(enum_parse(kColorNames, "red ").has_value());
  CHECK_FALSE(enum_parse(kColorNames, "").has_value());
}

TEST_CASE("enum names: duplicates are caught") {
  constexpr EnumName<Color> kSameName[] = {{Color::kRed, "red"}, {Color::kBlue, "red"}};
  constexpr EnumName<Color> kSameValue[] = {{Color::kRed, "red"}, {Color::kRed, "rouge"}};
  STATIC_REQUIRE(enum_names_unique(kColorNames));
  STATIC_REQUIRE_FALSE(enum_names_unique(kSameName));
  STATIC_REQUIRE_FALSE(enum_names_unique(kSameValue));
}

// The spellings reports and the command line use, through the helper.
TEST_CASE("enum names: core enums keep their spellings") {
  CHECK(to_string(Dtype::kFp32) == "fp32");
  CHECK(to_string(Dtype::kFp16) == "fp16");
  CHECK(to_string(Dtype::kBf16) == "bf16");
  CHECK(to_string(Dtype::kFp8) == "fp8");
  CHECK(parse_dtype("bf16") == Dtype::kBf16);
  CHECK_FALSE(parse_dtype("BF16").has_value());
  CHECK(to_string(AllocOrder::kLifo) == "lifo");
  CHECK(to_string(AllocOrder::kFifo) == "fifo");
  CHECK(to_string(AllocOrder::kLowest) == "lowest");
  CHECK(parse_alloc_order("lowest") == AllocOrder::kLowest);
  CHECK_FALSE(parse_alloc_order("highest").has_value());
  CHECK(to_string(CoreError::kPoolExhausted) == "pool exhausted");
  CHECK(to_string(CoreError::kLengthExceeded) == "length exceeded");
  CHECK(to_string(static_cast<CoreError>(200)) == "unknown error");
  CHECK(to_string(static_cast<Dtype>(200)) == "?");
}

}  // namespace
}  // namespace kvreplay
