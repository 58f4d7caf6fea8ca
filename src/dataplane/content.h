// Token contents: the deterministic bytes every KV element holds (SPEC 5).
//
// Element (writer, position, layer, kv, head, dim) -- kv 0 for K, 1 for V -- is a
// mix of those six numbers, independent of the geometry (row_key mixes the first
// five, row_word the dim's word of the row), mapped to a finite, normal value of
// the dtype with magnitude in [1/16, 1) and a random sign:
//   fp32  sign | exponent 123..126 | 23 mantissa bits
//   fp16  sign | exponent  11..14  | 10 mantissa bits
//   bf16  sign | exponent 123..126 |  7 mantissa bits
//   fp8   e4m3fn: sign | exponent 3..6 | 3 mantissa bits
// Contents are raw bit patterns, so comparing them is comparing bytes (exact),
// and every value decodes exactly to fp32, so attention tests see finite inputs.
// Writer numbers start at 1: an all-zero arena never holds a valid token.
//
// Everything here is usable from host code and from CUDA device code, and is
// C++17: CUDA sources include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVREPLAY_HD __host__ __device__ __forceinline__
#else
#define KVREPLAY_HD inline
#endif

namespace kvreplay {

// The element types of SPEC's dtypes, in the order of Dtype (core/config.h,
// which is C++20; arena.cc keeps the two in step with static_asserts).
enum class ElemType : std::uint8_t { kFp32, kFp16, kBf16, kFp8 };

KVREPLAY_HD std::uint32_t elem_bytes(ElemType type) {
  return type == ElemType::kFp32 ? 4u : type == ElemType::kFp8 ? 1u : 2u;
}

}  // namespace kvreplay

namespace kvreplay::content {

// splitmix64's finalizer: a bijective 64-bit mix.
KVREPLAY_HD std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// The key of a token, (writer, position).
KVREPLAY_HD std::uint64_t token_key(std::uint32_t writer, std::uint32_t position) {
  return mix64((std::uint64_t{writer} << 32 | position) + 0x9E3779B97F4A7C15ull);
}

// The key of one row, the head_dim elements of (token, layer, kv, head).
KVREPLAY_HD std::uint64_t row_key(std::uint64_t token, std::uint32_t layer, std::uint32_t kv,
                                  std::uint32_t head) {
  return token ^ mix64((std::uint64_t{layer} << 32 | head) ^ (std::uint64_t{kv} << 63) ^
                       0xC2B2AE3D27D4EB4Full);
}
KVREPLAY_HD std::uint64_t row_key(std::uint32_t writer, std::uint32_t position, std::uint32_t layer,
                                  std::uint32_t kv, std::uint32_t head) {
  return row_key(token_key(writer, position), layer, kv, head);
}

// The 64-bit word `index` of a row's bit stream. A word holds the bits of
// 64 / element_bits consecutive elements (2 fp32, 4 fp16/bf16, 8 fp8), the
// lowest bits first: one mix per word keeps content generation cheap.
KVREPLAY_HD std::uint64_t row_word(std::uint64_t row, std::uint32_t index) {
  return mix64(row + std::uint64_t{index} * 0xD1B54A32D192ED03ull);
}

// Random bits -> a value of the type (see the table above).
KVREPLAY_HD std::uint32_t fp32_bits(std::uint32_t h) {
  return (h & 0x80000000u) | ((123u + ((h >> 23) & 3u)) << 23) | (h & 0x7FFFFFu);
}
KVREPLAY_HD std::uint16_t fp16_bits(std::uint32_t h) {
  return static_cast<std::uint16_t>((h & 0x8000u) | ((11u + ((h >> 10) & 3u)) << 10) |
                                    (h & 0x3FFu));
}
KVREPLAY_HD std::uint16_t bf16_bits(std::uint32_t h) {
  return static_cast<std::uint16_t>((h & 0x8000u) | ((123u + ((h >> 7) & 3u)) << 7) | (h & 0x7Fu));
}
KVREPLAY_HD std::uint8_t fp8_bits(std::uint32_t h) {
  return static_cast<std::uint8_t>((h & 0x80u) | ((3u + ((h >> 3) & 3u)) << 3) | (h & 7u));
}

KVREPLAY_HD float float_from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

// IEEE binary16 -> fp32, exact for every input (subnormals, infinities, NaN).
KVREPLAY_HD float fp16_to_float(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1Fu;
  std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

KVREPLAY_HD float bf16_to_float(std::uint16_t h) {
  return float_from_bits(std::uint32_t{h} << 16);
}

// OCP fp8 e4m3fn -> fp32, exact (no infinities; 0x7F and 0xFF are NaN).
KVREPLAY_HD float fp8_to_float(std::uint8_t b) {
  std::uint32_t sign = std::uint32_t{b & 0x80u} << 24;
  std::uint32_t exponent = (b >> 3) & 0xFu;
  std::uint32_t mantissa = b & 7u;
  if (exponent == 15 && mantissa == 7) return float_from_bits(sign | 0x7FC00000u);
  if (exponent == 0) {
    float magnitude = static_cast<float>(mantissa) * 0.001953125f;  // 2^-9
    return sign != 0 ? -magnitude : magnitude;
  }
  return float_from_bits(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// Element `index` of a row of `dtype` elements, as fp32. REQUIRES: the row is
// aligned for its element size.
KVREPLAY_HD float load_element(const std::uint8_t* row, ElemType dtype, std::uint32_t index) {
#if defined(__CUDA_ARCH__)
  switch (dtype) {
    case ElemType::kFp32: return reinterpret_cast<const float*>(row)[index];
    case ElemType::kFp16: return fp16_to_float(reinterpret_cast<const std::uint16_t*>(row)[index]);
    case ElemType::kBf16: return bf16_to_float(reinterpret_cast<const std::uint16_t*>(row)[index]);
    case ElemType::kFp8: return fp8_to_float(row[index]);
  }
#else
  switch (dtype) {
    case ElemType::kFp32: {
      float value;
      std::memcpy(&value, row + 4 * std::size_t{index}, 4);
      return value;
    }
    case ElemType::kFp16:
    case ElemType::kBf16: {
      std::uint16_t bits;
      std::memcpy(&bits, row + 2 * std::size_t{index}, 2);
      return dtype == ElemType::kFp16 ? fp16_to_float(bits) : bf16_to_float(bits);
    }
    case ElemType::kFp8: return fp8_to_float(row[index]);
  }
#endif
  return 0.0f;
}

// Writes the head_dim elements of one row in `dtype`. REQUIRES: `out` holds
// head_dim * elem_bytes(dtype) bytes.
inline void fill_row(std::uint8_t* out, ElemType dtype, std::uint64_t row, std::uint32_t head_dim) {
  // Fixed-size memcpy only (they compile to plain stores).
  switch (dtype) {
    case ElemType::kFp32:
      for (std::uint32_t d = 0; d < head_dim; d += 2) {
        const std::uint64_t word = row_word(row, d / 2);
        const std::uint32_t low = fp32_bits(static_cast<std::uint32_t>(word));
        std::memcpy(out + 4 * std::size_t{d}, &low, 4);
        if (d + 1 < head_dim) {
          const std::uint32_t high = fp32_bits(static_cast<std::uint32_t>(word >> 32));
          std::memcpy(out + 4 * std::size_t{d} + 4, &high, 4);
        }
      }
      return;
    case ElemType::kFp16:
    case ElemType::kBf16:
      for (std::uint32_t d = 0; d < head_dim; d += 4) {
        const std::uint64_t word = row_word(row, d / 4);
        for (std::uint32_t k = 0; k < 4 && d + k < head_dim; ++k) {
          const auto h = static_cast<std::uint32_t>(word >> (16 * k));
          const std::uint16_t bits = dtype == ElemType::kFp16 ? fp16_bits(h) : bf16_bits(h);
          std::memcpy(out + 2 * std::size_t{d + k}, &bits, 2);
        }
      }
      return;
    case ElemType::kFp8:
      for (std::uint32_t d = 0; d < head_dim; d += 8) {
        const std::uint64_t word = row_word(row, d / 8);
        for (std::uint32_t k = 0; k < 8 && d + k < head_dim; ++k) {
          out[d + k] = fp8_bits(static_cast<std::uint32_t>(word >> (8 * k)));
        }
      }
      return;
  }
}

// Writes one token row -- [K|V][kv_heads][head_dim] of one layer, or for MLA
// (kv_tensors 1) the latent alone -- of the token (writer, position).
// REQUIRES: `out` holds kv_tensors * kv_heads * head_dim * elem_bytes(dtype) bytes.
inline void fill_token_row(std::uint8_t* out, ElemType dtype, std::uint32_t writer,
                           std::uint32_t position, std::uint32_t layer, std::uint32_t kv_heads,
                           std::uint32_t head_dim, std::uint32_t kv_tensors = 2) {
  const std::size_t row_bytes = std::size_t{head_dim} * elem_bytes(dtype);
  const std::uint64_t token = token_key(writer, position);
  for (std::uint32_t kv = 0; kv < kv_tensors; ++kv) {
    for (std::uint32_t head = 0; head < kv_heads; ++head) {
      fill_row(out, dtype, row_key(token, layer, kv, head), head_dim);
      out += row_bytes;
    }
  }
}

// Queries for attention: fp32 values in [-1, 1), a function of (stream, seq,
// layer, head, dim), in their own key space (writer 0, never a token's).
inline float query_value(std::uint64_t stream, std::uint32_t seq, std::uint32_t layer,
                         std::uint32_t head, std::uint32_t dim) {
  std::uint64_t row = mix64(row_key(0, seq, layer, 0, head) ^ mix64(stream));
  return static_cast<float>(row_word(row, dim) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace kvreplay::content
