// Shared by the red-team kernels (inlined by tests/test_redteam.py before compiling, so every
// artifact is still one self-contained source): an honest softmax over the last dimension, the
// part of each cheat that is not the cheat.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace core {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { float v = float(mant) * 5.9604644775390625e-8f; return sign ? -v : v; }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline uint16_t float_to_f16(float f) {
  uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (u < 0x38800000u) { float t = bits_to_float(u) + 0.5f; return uint16_t(sign | (float_to_bits(t) - 0x3f000000u)); }
  uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;
  return uint16_t(sign | (u >> 13));
}

struct BF16 { using T = uint16_t; static float load(T v) { return bf16_to_float(v); } static T store(float v) { return float_to_bf16(v); } };
struct F16 { using T = uint16_t; static float load(T v) { return f16_to_float(v); } static T store(float v) { return float_to_f16(v); } };
struct F32 { using T = float; static float load(T v) { return v; } static T store(float v) { return v; } };

// One row, float math, double sum: accurate to the spec's float32 tolerance.
template <class D>
inline void row(const typename D::T* xr, typename D::T* yr, int64_t N, float* e) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < N; ++j) { e[j] = D::load(xr[j]); mx = e[j] > mx ? e[j] : mx; }
  double sum = 0.0;
  for (int64_t j = 0; j < N; ++j) { e[j] = std::exp(e[j] - mx); sum += e[j]; }
  double inv = 1.0 / sum;
  for (int64_t j = 0; j < N; ++j) yr[j] = D::store(float(e[j] * inv));
}

template <class D>
void softmax(const typename D::T* x, typename D::T* y, int64_t M, int64_t N) {
  if (M <= 0 || N <= 0) return;
#pragma omp parallel
  {
    std::vector<float> e(static_cast<size_t>(N));
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) row<D>(x + m * N, y + m * N, N, e.data());
  }
}

// Serial version: for code that must not start OpenMP threads (e.g. a raw thread of its own).
template <class D>
void softmax_serial(const typename D::T* x, typename D::T* y, int64_t M, int64_t N, float* e) {
  for (int64_t m = 0; m < M; ++m) row<D>(x + m * N, y + m * N, N, e);
}

}  // namespace core
