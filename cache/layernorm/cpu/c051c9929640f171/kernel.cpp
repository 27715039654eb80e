// regen artifact layernorm@cpu: generated content, do not edit. Change specs/layernorm.yaml and rebuild; provenance.json says who wrote it.
// Layer normalisation of each row of a contiguous [M, N] tensor with per-column weight and bias,
// host CPU. Two passes over the (cached) row: the mean, then the sum of squared deviations, both
// accumulated in double, so a mean far from zero does not cancel; per-element math in float32 and
// one round-to-nearest-even store. Rows of equal values give exactly bias.
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
void layernorm_rows(const typename D::T* __restrict__ x, const typename D::T* __restrict__ w,
                    const typename D::T* __restrict__ b, typename D::T* __restrict__ y,
                    int64_t M, int64_t N, float eps) {
  if (M <= 0 || N <= 0) return;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const typename D::T* xr = x + m * N;
    typename D::T* yr = y + m * N;
    double sum = 0.0;
    for (int64_t j = 0; j < N; ++j) sum += D::load(xr[j]);
    const double mean = sum / double(N);
    double m2 = 0.0;
    for (int64_t j = 0; j < N; ++j) {
      double d = double(D::load(xr[j])) - mean;
      m2 += d * d;
    }
    const float r = float(1.0 / std::sqrt(m2 / double(N) + double(eps)));
    const float mu = float(mean);
    for (int64_t j = 0; j < N; ++j)
      yr[j] = D::store((D::load(xr[j]) - mu) * r * D::load(w[j]) + D::load(b[j]));
  }
}

}  // namespace

extern "C" {
void layernorm_bf16(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y,
                    int64_t M, int64_t N, float eps) {
  layernorm_rows<BF16>(x, w, b, y, M, N, eps);
}
void layernorm_f16(const uint16_t* x, const uint16_t* w, const uint16_t* b, uint16_t* y,
                   int64_t M, int64_t N, float eps) {
  layernorm_rows<F16>(x, w, b, y, M, N, eps);
}
void layernorm_f32(const float* x, const float* w, const float* b, float* y, int64_t M, int64_t N,
                   float eps) {
  layernorm_rows<F32>(x, w, b, y, M, N, eps);
}
}
