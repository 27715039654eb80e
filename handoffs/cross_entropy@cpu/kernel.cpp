// Mean token cross-entropy of a contiguous [N, V] logits matrix against int64 targets, host CPU.
//
// Each row is read from memory once, in chunks of CHUNK elements converted to float32 in a small
// per-thread buffer (L1-resident): the chunk's maximum, then an online logsumexp update (running
// max m and sum s of exp(x - m); s is rescaled when the maximum grows). exp is a vectorisable
// Cephes-style expf (Cody-Waite reduction, degree-7 polynomial, about 1 ulp) under `omp simd`,
// since glibc's vector expf needs -ffast-math; the sum of exponentials is kept in double. A masked
// logit (-inf) contributes exactly 0, also when a whole chunk is -inf. Rows run in parallel
// (OpenMP); their losses go to a per-call buffer and are summed in row order in double, so the
// result is deterministic whatever the thread count. ignore_index (-100) rows add nothing and are
// left out of the divisor; any other target outside [0, V) makes the loss NaN (never tested).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t IGNORE_INDEX = -100;
constexpr int CHUNK = 1024;

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

// IEEE half -> float: subnormals, inf and NaN handled.
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

struct BF16 { using T = uint16_t; static float load(T v) { return bf16_to_float(v); } };
struct F16 { using T = uint16_t; static float load(T v) { return f16_to_float(v); } };
struct F32 { using T = float; static float load(T v) { return v; } };

// exp(d) for d <= 0 (d = x - max); 0 below -87 (exp(-87) = 1.6e-38: nothing a sum that contains
// exp(0) = 1 can notice), so -inf gives 0 and no NaN. Branch-free so that `omp simd` vectorises.
inline float exp_nonpos(float d) {
  const float c = d < -87.0f ? -87.0f : d;
  const float n = std::floor(c * 1.44269504088896341f + 0.5f);
  float r = c - n * 0.693359375f;   // Cody-Waite: ln 2 = 0.693359375 - 2.12194440e-4
  r = r + n * 2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  const int32_t e = (int32_t(n) + 127) << 23;  // n in [-126, 0]: a normal power of two
  float scale;
  std::memcpy(&scale, &e, 4);
  const float v = p * scale;
  return d < -87.0f ? 0.0f : v;
}

// log(sum_v exp(x_v)) of one row, reading it once.
template <class D>
double row_logsumexp(const typename D::T* __restrict__ row, int64_t V, float* __restrict__ buf) {
  float m = -INFINITY;
  double s = 0.0;
  for (int64_t c0 = 0; c0 < V; c0 += CHUNK) {
    const int len = int(V - c0 < CHUNK ? V - c0 : CHUNK);
    float cm = -INFINITY;
#pragma omp simd reduction(max : cm)
    for (int j = 0; j < len; ++j) {
      const float v = D::load(row[c0 + j]);
      buf[j] = v;
      cm = v > cm ? v : cm;
    }
    if (cm == -INFINITY) continue;  // an all-masked chunk adds nothing
    if (cm > m) {
      s = (m == -INFINITY) ? 0.0 : s * std::exp(double(m) - double(cm));
      m = cm;
    }
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int j = 0; j < len; ++j) acc += double(exp_nonpos(buf[j] - m));
    s += acc;
  }
  return double(m) + std::log(s);  // an all -inf row (never tested) gives -inf + log(0)
}

template <class D>
void cross_entropy(const typename D::T* __restrict__ logits, const int64_t* __restrict__ targets,
                   float* __restrict__ loss, int64_t N, int64_t V) {
  if (N <= 0) {
    loss[0] = NAN;
    return;
  }
  std::vector<double> row_loss(static_cast<size_t>(N), 0.0);
#pragma omp parallel
  {
    std::vector<float> buf(CHUNK);
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = targets[n];
      if (t == IGNORE_INDEX) continue;
      if (t < 0 || t >= V) {
        row_loss[n] = NAN;
        continue;
      }
      const typename D::T* row = logits + n * V;
      row_loss[n] = row_logsumexp<D>(row, V, buf.data()) - double(D::load(row[t]));
    }
  }
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == IGNORE_INDEX) continue;
    total += row_loss[n];
    ++counted;
  }
  loss[0] = float(total / double(counted));  // no counted token (never tested): NaN
}

}  // namespace

extern "C" {
void cross_entropy_bf16(const uint16_t* __restrict__ logits, const int64_t* __restrict__ targets,
                        float* __restrict__ loss, int64_t N, int64_t V) {
  cross_entropy<BF16>(logits, targets, loss, N, V);
}
void cross_entropy_f16(const uint16_t* __restrict__ logits, const int64_t* __restrict__ targets,
                       float* __restrict__ loss, int64_t N, int64_t V) {
  cross_entropy<F16>(logits, targets, loss, N, V);
}
void cross_entropy_f32(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                       float* __restrict__ loss, int64_t N, int64_t V) {
  cross_entropy<F32>(logits, targets, loss, N, V);
}
}
