// regen artifact swiglu@mi300x: generated content, do not edit. Change specs/swiglu.yaml and rebuild; provenance.json says who wrote it.
// SwiGLU, y[m, n] = silu(a) * b with a = x[m, :N] and b = x[m, N:], for a contiguous [M, 2N]
// input and [M, N] output, AMD Instinct (wave64, gfx942 and gfx950: the same source serves
// mi300x and mi350).
//
// Purely elementwise and memory-bound: workgroup g handles tile g % CB of row g / CB (CB tiles per
// row). float32 math, one round-to-nearest-even on store; silu(a) = a * rcp(1 + exp2(-a log2 e))
// with the hardware exponential and reciprocal (v_exp_f32, v_rcp_f32, about 1 ulp each): for
// a < -88, exp(-a) is inf, rcp(inf) = 0 and the product is -0, never NaN; for large a, y = a * b.
// `vec` (N * sizeof(T) % 16 == 0: rows of a, b and y all start 16-byte aligned): each lane issues
// 2 + 2 independent 16-byte nontemporal loads (global_load_dwordx4 nt) before any use and writes
// 2 16-byte nontemporal stores (amd.vector_access, amd.nontemporal); 8 waves per SIMD.
// `sca` (any N: the b half then starts mid-vector): one element per access, 8 per lane, coalesced
// across the wavefront.
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

// silu(a) * b in float32; see the header for the tails.
__device__ __forceinline__ float swiglu1(float a, float b) {
  return a * __builtin_amdgcn_rcpf(1.0f + __builtin_amdgcn_exp2f(-a * LOG2E)) * b;
}

// One tile of TILE = G * U * PACK output elements of one row: U accesses of a and U of b per
// lane, all issued before the first use.
template <class D, int PACK, int U, int G>
__device__ __forceinline__ void swiglu_tiles(const typename D::S* __restrict__ x,
                                             typename D::S* __restrict__ y, long long M,
                                             long long N) {
  constexpr int TILE = G * U * PACK;
  const long long CB = (N + TILE - 1) / TILE;
  const long long row = (long long)blockIdx.x / CB;
  const long long tile = (long long)blockIdx.x - row * CB;
  if (row >= M) return;
  const long long start = tile * TILE;
  const int len = (int)(N - start < TILE ? N - start : TILE);
  const typename D::S* a = x + row * 2 * N + start;
  const typename D::S* b = a + N;
  typename D::S* yr = y + row * N + start;
  float av[U][PACK], bv[U][PACK];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = ((int)threadIdx.x + u * G) * PACK;
    if (e0 < len) {
      load_pack<D, PACK, true>(a + e0, av[u]);
      load_pack<D, PACK, true>(b + e0, bv[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = ((int)threadIdx.x + u * G) * PACK;
    if (e0 < len) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) av[u][i] = swiglu1(av[u][i], bv[u][i]);
      store_pack<D, PACK>(yr + e0, av[u]);
    }
  }
}

}  // namespace

// ---- entry points: swiglu_<vec|sca>_<dtype>; the grid is M * ceil_div(N, TILE) workgroups of
// 256, TILE = 256 * U * PACK elements: 8192 bytes for vec (U = 2), 2048 elements for sca (U = 8).
#define SWIGLU_ONE(KIND, SUFFIX, D, ST, PACK, U)                                                  \
  extern "C" __global__ void __launch_bounds__(256) swiglu_##KIND##_##SUFFIX(                    \
      const ST* __restrict__ x, ST* __restrict__ y, long long M, long long N) {                  \
    swiglu_tiles<D, PACK, U, 256>(reinterpret_cast<const D::S*>(x), reinterpret_cast<D::S*>(y),  \
                                  M, N);                                                         \
  }

SWIGLU_ONE(vec, bf16, BF16, __hip_bfloat16, 8, 2)
SWIGLU_ONE(vec, f16, F16, __half, 8, 2)
SWIGLU_ONE(vec, f32, F32, float, 4, 2)
SWIGLU_ONE(sca, bf16, BF16, __hip_bfloat16, 1, 8)
SWIGLU_ONE(sca, f16, F16, __half, 1, 8)
SWIGLU_ONE(sca, f32, F32, float, 1, 8)
