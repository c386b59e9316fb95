#pragma once
// IEEE half precision and bfloat16 storage types. Arithmetic happens in float: kernels convert
// on load and store (round to nearest even).
#include <cstdint>
#include <cstring>

namespace graft {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(fromFloat(f)) {}  // NOLINT: implicit like a builtin type
  operator float() const { return toFloat(bits); }
  static Half fromBits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  static uint16_t fromFloat(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (absx < 0x38800000u) {                                               // subnormal or zero
      if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
      uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
      int shift = 113 - static_cast<int>(absx >> 23) + 13;
      uint32_t r = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1);
      uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (r & 1u))) ++r;
      return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = ((absx - 0x38000000u) >> 13);
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  static float toFloat(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
      if (mant == 0) {
        x = sign;
      } else {  // subnormal: normalise
        int e = -1;
        do {
          ++e;
          mant <<= 1;
        } while (!(mant & 0x400u));
        x = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
      }
    } else if (exp == 31) {
      x = sign | 0x7f800000u | (mant << 13);
    } else {
      x = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(fromFloat(f)) {}  // NOLINT
  operator float() const { return toFloat(bits); }
  static BFloat16 fromBits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  static uint16_t fromFloat(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return static_cast<uint16_t>(x >> 16);
  }
  static float toFloat(uint16_t b) {
    uint32_t x = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

}  // namespace graft
