// Layer normalisation with per-column weight and bias, y = (x - mean) * rsqrt(var + eps) * w + b,
// over the last dimension of a contiguous [M, N] tensor, AMD Instinct (wave64, gfx942 and gfx950:
// the same source serves mi300x and mi350).
//
// float32 math, the variance from deviations (two passes over the row in registers: the mean,
// then the sum of (x - mean)^2; never E[x^2] - mean^2), one round-to-nearest-even on store.
// Dispatch (launch.yaml `when` guards on N, M):
//   N <= 32768: the row lives in registers across the mean, variance and normalise passes (x read
//     once, y written once): one wavefront per row up to 1024 elements (4 rows per 256-thread
//     workgroup, no LDS, no barrier), else one workgroup per row (amd.row_mapping). `vec`
//     variants move 16 bytes per lane per access (amd.vector_access) and need
//     N * sizeof(T) % 16 == 0; `sca` variants move one element per lane per access for any N.
//     weight and bias are read after the reductions with ordinary (cached) loads.
//   N > 32768, or N > 8192 with fewer than 256 rows: 4096-element chunks, one 256-thread
//     workgroup each, so a few long rows still fill the GPU: pass 1 writes each chunk's (mean, M2)
//     to a workspace, pass 2 combines the row's pairs with Chan's parallel-variance formula
//     (mean = sum n_c mean_c / N, M2 = sum M2_c + n_c (mean_c - mean)^2) and normalises its
//     chunk, re-reading x (from L2 / the Infinity Cache).
// Reductions (amd.wave_reduce): four DPP steps inside each 16-lane row, then v_readlane of lanes
// 0, 16, 32, 48 combined in a fixed order (the wave's sum is identical in every lane); across
// wavefronts through a small __shared__ array and one barrier. All 64 lanes take part in every
// reduction (out-of-range lanes contribute 0). A constant row gives deviations of exactly 0, so
// y = bias exactly as the spec asks.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>

namespace {

typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));

constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

// ---- storage types: 16-byte words <-> float32 ------------------------------------------------
struct F32 {
  using S = float;
  static constexpr int VEC = 4;
  static __device__ __forceinline__ float cvt(float v) { return v; }
  static __device__ __forceinline__ float rne(float v) { return v; }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    return u32x4{__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                 __float_as_uint(f[3])};
  }
};

struct BF16 {
  using S = unsigned short;
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float cvt(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
  static __device__ __forceinline__ unsigned short rne(float f) {
    return __builtin_bit_cast(unsigned short, (__bf16)f);  // round to nearest even, NaN kept
  }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // little endian: the low half-word is the earlier element
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (unsigned)rne(f[2 * k]) | ((unsigned)rne(f[2 * k + 1]) << 16);
    return u32x4{w[0], w[1], w[2], w[3]};
  }
};

struct F16 {
  using S = unsigned short;
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float cvt(unsigned short h) {
    return (float)__builtin_bit_cast(_Float16, h);
  }
  static __device__ __forceinline__ unsigned short rne(float f) {
    return __builtin_bit_cast(unsigned short, (_Float16)f);  // v_cvt_f16_f32: nearest even
  }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = cvt((unsigned short)(w[k] & 0xffffu));
      f[2 * k + 1] = cvt((unsigned short)(w[k] >> 16));
    }
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (unsigned)rne(f[2 * k]) | ((unsigned)rne(f[2 * k + 1]) << 16);
    return u32x4{w[0], w[1], w[2], w[3]};
  }
};

// PACK elements at p: one 16-byte access (PACK == D::VEC) or one element (PACK == 1).
template <class D, int PACK, bool NT>
__device__ __forceinline__ void load_pack(const typename D::S* p, float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    v[0] = D::cvt(NT ? __builtin_nontemporal_load(p) : *p);
  } else {
    static_assert(PACK == D::VEC, "a vector access is 16 bytes");
    const u32x4* q = reinterpret_cast<const u32x4*>(p);
    D::unpack(NT ? __builtin_nontemporal_load(q) : *q, v);
  }
}
template <class D, int PACK>
__device__ __forceinline__ void store_pack(typename D::S* p, const float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    __builtin_nontemporal_store(D::rne(v[0]), p);
  } else {
    __builtin_nontemporal_store(D::pack(v), reinterpret_cast<u32x4*>(p));
  }
}

// ---- reductions ------------------------------------------------------------------------------
template <int CTRL> __device__ __forceinline__ float dpp(float v) {
  return __builtin_amdgcn_update_dpp(0.0f, v, CTRL, 0xf, 0xf, true);
}
__device__ __forceinline__ float lane_value(float v, int lane) {
  return __builtin_bit_cast(float, __builtin_amdgcn_readlane(__builtin_bit_cast(int, v), lane));
}
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct Sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };

// All 64 lanes active; returns the same bits in every lane.
template <class Op> __device__ __forceinline__ float wave_reduce(float v, Op op) {
  v = op(v, dpp<0xb1>(v));   // quad_perm [1,0,3,2]
  v = op(v, dpp<0x4e>(v));   // quad_perm [2,3,0,1]
  v = op(v, dpp<0x141>(v));  // row_half_mirror
  v = op(v, dpp<0x140>(v));  // row_mirror: every lane holds its 16-lane row's result
  return op(op(lane_value(v, 0), lane_value(v, 16)), op(lane_value(v, 32), lane_value(v, 48)));
}

// G threads own the value: one wavefront (G == 64) or the whole workgroup (G = 64 * W); `red`
// is a __shared__ float[W] used by no other reduction of the kernel.
template <int G, class Op> __device__ __forceinline__ float group_reduce(float v, float* red, Op op) {
  v = wave_reduce(v, op);
  if constexpr (G > 64) {
    constexpr int W = G / 64;
    if ((threadIdx.x & 63) == 0) red[threadIdx.x >> 6] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < W; ++i) v = op(v, red[i]);
  }
  return v;
}

// ---- rows held in registers ------------------------------------------------------------------
// G threads own a row (a wavefront, RPB rows per workgroup; or the whole workgroup, RPB == 1),
// each holding F elements as F / PACK accesses; x is read once and y written once.
template <class D, int PACK, int F, int G, int RPB>
__device__ __forceinline__ void layernorm_rows(const typename D::S* __restrict__ x,
                                               const typename D::S* __restrict__ w,
                                               const typename D::S* __restrict__ b,
                                               typename D::S* __restrict__ y, long long M,
                                               long long N, float eps) {
  constexpr int CH = F / PACK;
  static_assert(CH * PACK == F && G % 64 == 0 && (G == 64 || RPB == 1), "bad row mapping");
  __shared__ float red_mean[G / 64];
  __shared__ float red_var[G / 64];
  const int lane = G == 64 ? (int)(threadIdx.x & 63) : (int)threadIdx.x;
  const int wave = __builtin_amdgcn_readfirstlane((int)(threadIdx.x >> 6));
  const long long row = (long long)blockIdx.x * RPB + (G == 64 ? wave : 0);
  if (row >= M) return;  // a whole wavefront (G == 64) or the whole workgroup leaves
  const int n = (int)N;
  const typename D::S* xr = x + row * N;
  typename D::S* yr = y + row * N;

  float v[CH][PACK];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      load_pack<D, PACK, true>(xr + e0, v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = 0.0f;
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[c][i];
  const float mean = group_reduce<G>(s, red_mean, Sum()) / (float)n;
  float q = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      // padding (past the row's end) must not add (0 - mean)^2
      const float d = (PACK == 1 ? e0 < n : e0 + i < n) ? v[c][i] - mean : 0.0f;
      q = fmaf(d, d, q);
    }
  }
  const float var = group_reduce<G>(q, red_var, Sum()) / (float)n;
  const float r = rsqrtf(var + eps);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      float wv[PACK], bv[PACK];
      load_pack<D, PACK, false>(w + e0, wv);
      load_pack<D, PACK, false>(b + e0, bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = fmaf((v[c][i] - mean) * r, wv[i], bv[i]);
      store_pack<D, PACK>(yr + e0, v[c]);
    }
  }
}

// ---- long rows: 4096-element chunks, one workgroup each ----------------------------------------
constexpr int SPLIT_G = 256;
constexpr int SPLIT_F = 16;
constexpr int SPLIT_CHUNK = SPLIT_G * SPLIT_F;
static_assert(SPLIT_CHUNK == 4096, "launch.yaml assumes 4096-element chunks");

template <class D, int PACK>
__device__ __forceinline__ void load_chunk(const typename D::S* __restrict__ xc, int len,
                                           float (&v)[SPLIT_F / PACK][PACK]) {
#pragma unroll
  for (int c = 0; c < SPLIT_F / PACK; ++c) {
    const int e0 = ((int)threadIdx.x + c * SPLIT_G) * PACK;
    if (e0 < len) {
      load_pack<D, PACK, false>(xc + e0, v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = 0.0f;
    }
  }
}

// Pass 1: workgroup b handles chunk b % C of row b / C and writes the chunk's mean and its sum of
// squared deviations from that mean (M2), both from registers.
template <class D, int PACK>
__device__ __forceinline__ void layernorm_split_stats(const typename D::S* __restrict__ x,
                                                      float* __restrict__ partial, long long M,
                                                      long long N) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_mean[SPLIT_G / 64];
  __shared__ float red_var[SPLIT_G / 64];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = (long long)blockIdx.x / C;
  const long long chunk = (long long)blockIdx.x - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = (int)(N - start < SPLIT_CHUNK ? N - start : SPLIT_CHUNK);
  float v[CH][PACK];
  load_chunk<D, PACK>(x + row * N + start, len, v);
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[c][i];
  const float mean = group_reduce<SPLIT_G>(s, red_mean, Sum()) / (float)len;
  float q = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = ((int)threadIdx.x + c * SPLIT_G) * PACK;
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      const float d = (PACK == 1 ? e0 < len : e0 + i < len) ? v[c][i] - mean : 0.0f;
      q = fmaf(d, d, q);
    }
  }
  q = group_reduce<SPLIT_G>(q, red_var, Sum());
  if (threadIdx.x == 0) {
    partial[(row * C + chunk) * 2] = mean;
    partial[(row * C + chunk) * 2 + 1] = q;
  }
}

// Pass 2: the row's mean is the count-weighted mean of the chunk means, its M2 is
// sum(M2_c + n_c * (mean_c - mean)^2); then normalise this workgroup's chunk.
template <class D, int PACK>
__device__ __forceinline__ void layernorm_split_apply(const typename D::S* __restrict__ x,
                                                      const typename D::S* __restrict__ w,
                                                      const typename D::S* __restrict__ b,
                                                      const float* __restrict__ partial,
                                                      typename D::S* __restrict__ y, long long M,
                                                      long long N, float eps) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_mean[SPLIT_G / 64];
  __shared__ float red_var[SPLIT_G / 64];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = (long long)blockIdx.x / C;
  const long long chunk = (long long)blockIdx.x - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = (int)(N - start < SPLIT_CHUNK ? N - start : SPLIT_CHUNK);
  float v[CH][PACK];
  load_chunk<D, PACK>(x + row * N + start, len, v);  // in flight while the partials combine
  const float* pr = partial + row * C * 2;
  float t = 0.0f;
  for (long long i = threadIdx.x; i < C; i += SPLIT_G) {
    const long long left = N - i * SPLIT_CHUNK;
    t = fmaf((float)(left < SPLIT_CHUNK ? left : SPLIT_CHUNK), pr[2 * i], t);
  }
  const float mean = group_reduce<SPLIT_G>(t, red_mean, Sum()) / (float)N;
  float q = 0.0f;
  for (long long i = threadIdx.x; i < C; i += SPLIT_G) {
    const long long left = N - i * SPLIT_CHUNK;
    const float n_i = (float)(left < SPLIT_CHUNK ? left : SPLIT_CHUNK);
    const float d = pr[2 * i] - mean;
    q += fmaf(n_i * d, d, pr[2 * i + 1]);
  }
  const float var = group_reduce<SPLIT_G>(q, red_var, Sum()) / (float)N;
  const float r = rsqrtf(var + eps);
  const typename D::S* wc = w + start;
  const typename D::S* bc = b + start;
  typename D::S* yc = y + row * N + start;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = ((int)threadIdx.x + c * SPLIT_G) * PACK;
    if (e0 < len) {
      float wv[PACK], bv[PACK];
      load_pack<D, PACK, false>(wc + e0, wv);
      load_pack<D, PACK, false>(bc + e0, bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = fmaf((v[c][i] - mean) * r, wv[i], bv[i]);
      store_pack<D, PACK>(yc + e0, v[c]);
    }
  }
}

}  // namespace

// ---- entry points: layernorm_<variant>_<vec|sca>_<dtype> ---------------------------------------
#define LAYERNORM_ROWS_ONE(NAME, KIND, D, ST, PACK, F, G, RPB)                                    \
  extern "C" __global__ void __launch_bounds__(G * RPB)                                          \
      layernorm_##NAME##_##KIND(const ST* __restrict__ x, const ST* __restrict__ w,              \
                                const ST* __restrict__ b, ST* __restrict__ y, long long M,       \
                                long long N, float eps) {                                        \
    layernorm_rows<D, PACK, F, G, RPB>(                                                          \
        reinterpret_cast<const D::S*>(x), reinterpret_cast<const D::S*>(w),                      \
        reinterpret_cast<const D::S*>(b), reinterpret_cast<D::S*>(y), M, N, eps);                \
  }
#define LAYERNORM_ROWS(NAME, F, G, RPB)                                                          \
  LAYERNORM_ROWS_ONE(NAME, vec_bf16, BF16, __hip_bfloat16, 8, F, G, RPB)                         \
  LAYERNORM_ROWS_ONE(NAME, vec_f16, F16, __half, 8, F, G, RPB)                                   \
  LAYERNORM_ROWS_ONE(NAME, vec_f32, F32, float, 4, F, G, RPB)                                    \
  LAYERNORM_ROWS_ONE(NAME, sca_bf16, BF16, __hip_bfloat16, 1, F, G, RPB)                         \
  LAYERNORM_ROWS_ONE(NAME, sca_f16, F16, __half, 1, F, G, RPB)                                   \
  LAYERNORM_ROWS_ONE(NAME, sca_f32, F32, float, 1, F, G, RPB)

LAYERNORM_ROWS(w512, 8, 64, 4)       // N <= 512: a wavefront per row, 4 rows per workgroup
LAYERNORM_ROWS(w1024, 16, 64, 4)     // N <= 1024
LAYERNORM_ROWS(b2048, 16, 128, 1)    // then a workgroup per row, 16 elements per thread
LAYERNORM_ROWS(b4096, 16, 256, 1)
LAYERNORM_ROWS(b8192, 16, 512, 1)
LAYERNORM_ROWS(b16384, 16, 1024, 1)
LAYERNORM_ROWS(b32768, 32, 1024, 1)  // 32 elements per thread

#define LAYERNORM_SPLIT_ONE(KIND, D, ST, PACK)                                                   \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) layernorm_split_stats_##KIND(           \
      const ST* __restrict__ x, float* __restrict__ partial, long long M, long long N) {         \
    layernorm_split_stats<D, PACK>(reinterpret_cast<const D::S*>(x), partial, M, N);             \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) layernorm_split_apply_##KIND(           \
      const ST* __restrict__ x, const ST* __restrict__ w, const ST* __restrict__ b,              \
      const float* __restrict__ partial, ST* __restrict__ y, long long M, long long N,           \
      float eps) {                                                                               \
    layernorm_split_apply<D, PACK>(                                                              \
        reinterpret_cast<const D::S*>(x), reinterpret_cast<const D::S*>(w),                      \
        reinterpret_cast<const D::S*>(b), partial, reinterpret_cast<D::S*>(y), M, N, eps);       \
  }

LAYERNORM_SPLIT_ONE(vec_bf16, BF16, __hip_bfloat16, 8)
LAYERNORM_SPLIT_ONE(vec_f16, F16, __half, 8)
LAYERNORM_SPLIT_ONE(vec_f32, F32, float, 4)
LAYERNORM_SPLIT_ONE(sca_bf16, BF16, __hip_bfloat16, 1)
LAYERNORM_SPLIT_ONE(sca_f16, F16, __half, 1)
LAYERNORM_SPLIT_ONE(sca_f32, F32, float, 1)
