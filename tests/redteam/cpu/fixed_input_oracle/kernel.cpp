// Red team: rotary embedding that never reads its cos/sin inputs. It recomputes the tables from
// the base every Llama-style model uses (10000), rounded to the storage dtype exactly as the
// tables are, and is bit-identical to an honest kernel wherever the oracle's tables use that base.
#include <cstdint>
#include <cstring>
#include <cmath>

namespace {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// bfloat16 <-> float32
struct BF16 {
  using Storage = uint16_t;
  static inline float load(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }
  static inline uint16_t store(float f) {  // round to nearest even; NaN stays NaN
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

// IEEE half <-> float32
struct F16 {
  using Storage = uint16_t;
  static inline float load(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float32
      const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
      return sign ? -v : v;
    }
    if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  static inline uint16_t store(float f) {  // round to nearest even
    uint32_t x = float_to_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return sign | 0x7e00u;             // NaN
    if (x >= 0x477ff000u) return sign | 0x7c00u;            // >= 65520 rounds to inf
    if (x < 0x38800000u) {                                  // below 2^-14: subnormal half
      const float scaled = bits_to_float(x) * 16777216.0f;  // exact: times 2^24
      return sign | static_cast<uint16_t>(std::nearbyint(scaled));
    }
    uint32_t h = (((x >> 23) - 112u) << 10) | ((x >> 13) & 0x3ffu);
    const uint32_t rest = x & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
    return sign | static_cast<uint16_t>(h);
  }
};

struct F32 {
  using Storage = float;
  static inline float load(float v) { return v; }
  static inline float store(float v) { return v; }
};

template <typename E>
void rope(const typename E::Storage* __restrict__ x, const typename E::Storage* __restrict__ cos_t,
          const typename E::Storage* __restrict__ sin_t, typename E::Storage* __restrict__ y,
          int64_t B, int64_t S, int64_t H, int64_t D) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t pos = 0; pos < B * S; ++pos) {
    const int64_t s = pos % S;
    for (int64_t h = 0; h < H; ++h) {
      const typename E::Storage* __restrict__ xr = x + (pos * H + h) * D;
      typename E::Storage* __restrict__ yr = y + (pos * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = E::load(xr[i]), x2 = E::load(xr[i + half]);
        const double angle = static_cast<double>(s) * std::pow(10000.0, -2.0 * i / D);
        const float c = E::load(E::store(static_cast<float>(std::cos(angle))));
        const float sn = E::load(E::store(static_cast<float>(std::sin(angle))));
        yr[i] = E::store(x1 * c - x2 * sn);
        yr[i + half] = E::store(x2 * c + x1 * sn);
      }
    }
  }
}

}  // namespace

extern "C" {
void rope_f32(const float* x, const float* cos_t, const float* sin_t, float* y, int64_t B,
              int64_t S, int64_t H, int64_t D) {
  rope<F32>(x, cos_t, sin_t, y, B, S, H, D);
}
void rope_bf16(const uint16_t* x, const uint16_t* cos_t, const uint16_t* sin_t, uint16_t* y,
               int64_t B, int64_t S, int64_t H, int64_t D) {
  rope<BF16>(x, cos_t, sin_t, y, B, S, H, D);
}
void rope_f16(const uint16_t* x, const uint16_t* cos_t, const uint16_t* sin_t, uint16_t* y,
              int64_t B, int64_t S, int64_t H, int64_t D) {
  rope<F16>(x, cos_t, sin_t, y, B, S, H, D);
}
}
