// regen artifact swiglu@cpu: generated content, do not edit. Change specs/swiglu.yaml and rebuild; provenance.json says who wrote it.
// SwiGLU on the host CPU: y[m, n] = silu(x[m, n]) * x[m, N + n] for a contiguous [M, 2N] input.
// float32 math (a / (1 + exp(-a)) is -0, not NaN, when exp(-a) overflows), one rounding on store.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// bfloat16 <-> float, round to nearest even, NaN stays NaN.
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE half <-> float, round to nearest even, subnormals, inf and NaN handled.
inline float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float v = float(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline uint16_t float_to_f16(float f) {
  uint32_t u = float_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u)  // |f| >= 65536: inf, or NaN
    return uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u < 0x38800000u) {  // below the smallest normal: let the FPU round at 2^-24 granularity
    float t = bits_to_float(u) + 0.5f;
    return uint16_t(sign | (float_to_bits(t) - 0x3f000000u));
  }
  uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // rebias exponent (15 - 127) and round to nearest even
  return uint16_t(sign | (u >> 13));
}

struct BF16 { using T = uint16_t;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float v) { return float_to_bf16(v); } };
struct F16 { using T = uint16_t;
  static float load(T v) { return f16_to_float(v); }
  static T store(float v) { return float_to_f16(v); } };
struct F32 { using T = float;
  static float load(T v) { return v; }
  static T store(float v) { return v; } };

template <class D>
void swiglu_rows(const typename D::T* __restrict__ x, typename D::T* __restrict__ y, int64_t M,
                 int64_t N) {
  if (M <= 0 || N <= 0) return;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const typename D::T* a = x + m * 2 * N;
    const typename D::T* b = a + N;
    typename D::T* yr = y + m * N;
    for (int64_t j = 0; j < N; ++j) {
      float av = D::load(a[j]);
      yr[j] = D::store(av / (1.0f + std::exp(-av)) * D::load(b[j]));
    }
  }
}

}  // namespace

extern "C" {
void swiglu_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { swiglu_rows<BF16>(x, y, M, N); }
void swiglu_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { swiglu_rows<F16>(x, y, M, N); }
void swiglu_f32(const float* x, float* y, int64_t M, int64_t N) { swiglu_rows<F32>(x, y, M, N); }
}
