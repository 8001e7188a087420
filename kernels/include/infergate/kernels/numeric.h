// Scalar number formats shared by the CPU reference and the CUDA kernels: fp16, bf16 and fp8 e4m3fn
// conversions and the rounding helpers the quantizers use. Every function here is __host__ __device__
// and bit-exact on both sides, so the per-element maths the kernels run is tested on the CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define INFERGATE_HD __host__ __device__ __forceinline__
#else
#define INFERGATE_HD inline
#endif

namespace infergate::kernels {

// Storage types: the bits of a 16- or 8-bit float. Distinct types so that a view says what it holds.
struct fp16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};
static_assert(sizeof(fp16_t) == 2 && sizeof(bf16_t) == 2);

INFERGATE_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

INFERGATE_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round to nearest integer, ties to even (the default IEEE rounding mode on both sides).
INFERGATE_HD float round_half_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

INFERGATE_HD bool is_finite_bits(uint32_t u) { return (u & 0x7F800000u) != 0x7F800000u; }
INFERGATE_HD bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

INFERGATE_HD float clamp_float(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// ---- fp16 (IEEE binary16) ------------------------------------------------------------------------

// fp32 -> fp16, round to nearest even; overflow gives +-inf, NaN gives the quiet NaN 0x7E00 (sign kept).
// Software on both sides (a handful of integer operations), so the result never depends on a device.
INFERGATE_HD uint16_t fp16_from_float(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // Below 2^-14: an fp16 subnormal (unit 2^-24) or zero. Scaling by 2^24 is exact; rint rounds.
    const float v = bits_to_float(ax) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(round_half_even(v)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t r = ax - (112u << 23) + 0xFFFu + odd;
  return static_cast<uint16_t>(sign | (r >> 13));
}

// fp16 -> fp32, exact. A NaN converts as IEEE 754 and x86's vcvtph2ps convert it: sign and payload
// kept (the payload moves to the top mantissa bits) and the quiet bit set, so 0x7E00 -> 0x7FC00000 and
// the signalling 0x7C01 -> 0x7FC02000. The device's cvt.f32.f16 returns the canonical NaN 0x7FFFFFFF
// instead, so NaNs take the software path there: every implementation reads the same bits.
INFERGATE_HD float fp16_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0u) {
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7FC00000u |
                           (static_cast<uint32_t>(h & 0x03FFu) << 13));
  }
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return bits_to_float(sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u));
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
#endif
}

inline constexpr float kFp16Max = 65504.0f;

// ---- bf16 ----------------------------------------------------------------------------------------

// fp32 -> bf16, round to nearest even; NaN stays a quiet NaN (sign kept).
INFERGATE_HD uint16_t bf16_from_float(float f) {
  const uint32_t x = float_to_bits(f);
  if (is_nan_bits(x)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t r = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(r >> 16);
}

INFERGATE_HD float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// ---- fp8 e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities) -------------
// Largest finite value 448 (0x7E); 0x7F/0xFF are NaN; smallest subnormal 2^-9.

inline constexpr float kE4m3Max = 448.0f;

// fp32 -> e4m3fn, round to nearest even, saturating: |x| >= 448 (infinities included) gives +-448.
// NaN gives 0x7F (the caller's policy decides whether NaN may reach here; the KV quantizers map NaN
// to 0 before converting).
INFERGATE_HD uint8_t e4m3_from_float(float f) {
  const uint32_t x = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (ax >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);  // >= 448 (incl. inf): saturate
  if (ax < 0x3C800000u) {
    // Below 2^-6: subnormal (unit 2^-9) or zero; a result of 8 is the smallest normal 0x08, which
    // is exactly what the encoding 8 means.
    const float v = bits_to_float(ax) * 512.0f;
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(round_half_even(v)));
  }
  // Normal: exponent rebias 127 -> 7, keep 3 mantissa bits, round the other 20 to nearest even.
  uint32_t v = (((ax >> 23) - 120u) << 3) | ((ax >> 20) & 0x7u);
  const uint32_t rest = ax & 0xFFFFFu;
  if (rest > 0x80000u || (rest == 0x80000u && (v & 1u))) ++v;
  if (v > 0x7Eu) v = 0x7Eu;  // 448 < x < 464 rounds to 448; never produce the NaN code
  return static_cast<uint8_t>(sign | v);
}

// e4m3fn -> fp32, exact; 0x7F/0xFF decode to NaN.
INFERGATE_HD float e4m3_to_float(uint8_t b) {
  const uint32_t mag = b & 0x7Fu;
  float v;
  if (mag == 0x7Fu) {
    v = bits_to_float(0x7FC00000u);
  } else if (mag < 8u) {
    v = static_cast<float>(mag) * 0.001953125f;  // subnormal: m * 2^-9
  } else {
    v = bits_to_float((mag << 20) + (120u << 23));  // rebias exponent 7 -> 127
  }
  return (b & 0x80u) ? -v : v;
}

// ---- helpers for stored scales -------------------------------------------------------------------

// The smallest fp16 value >= v (v finite, 0 <= v <= 65504). Scales are rounded UP so that
// `amax / scale <= qmax` still holds after rounding: the quantizer then never clamps a finite input.
INFERGATE_HD uint16_t fp16_round_up(float v) {
  uint16_t h = fp16_from_float(v);
  if (fp16_to_float(h) < v) ++h;  // v > 0 here: the next bit pattern is the next larger value
  return h;
}

// The largest fp16 value <= v (v finite, -65504 <= v <= 65504). Used for a group's minimum so that
// every input lies at or above the stored minimum.
INFERGATE_HD uint16_t fp16_round_down(float v) {
  uint16_t h = fp16_from_float(v);
  if (fp16_to_float(h) > v) {
    if (h == 0x0000u) return 0x8001u;  // +0 > v: the negative subnormal just below
    if (h & 0x8000u) return ++h;       // negative: a larger magnitude is a smaller value
    return --h;                        // positive: the next smaller value
  }
  return h;
}

INFERGATE_HD uint16_t bf16_round_up(float v) {
  uint16_t b = bf16_from_float(v);
  if (bf16_to_float(b) < v) ++b;
  return b;
}

}  // namespace infergate::kernels
