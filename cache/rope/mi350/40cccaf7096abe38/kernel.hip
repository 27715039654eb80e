// regen artifact rope@mi350: generated content, do not edit. Change specs/rope.yaml and rebuild; provenance.json says who wrote it.
// Rotary position embedding (rotate-half pairs (i, i + D/2)), out of place, AMD Instinct (wave64,
// gfx942 and gfx950: the same source serves mi300x and mi350).
//
// One workgroup per sequence position (b, s): its H * D/2 pairs are spread over the workgroup's
// threads (64 to 256, a whole number of wavefronts).
// rope_vec_*: a lane takes VEC = 16 / sizeof(T) consecutive pairs, so it moves x1, x2 and the
// matching cos/sin entries with four 16-byte loads (global_load_dwordx4; x nontemporal, the
// tables cached) and y with two 16-byte nontemporal stores (amd.vector_access, amd.nontemporal).
// Used when (D/2) % VEC == 0, which makes every row, half-row and table row 16-byte aligned; if a
// base pointer were not 16-byte aligned the same kernel falls back to element accesses.
// rope_scalar_*: a lane takes one pair; any even D (D = 6, 72, ...).
// The tables are small and re-read from L1/L2 across the H heads of a workgroup and the B batch
// entries. Math in float32: y1 = x1 c - x2 s, y2 = x2 c + x1 s (one fma each), one
// round-to-nearest-even per output; at s = 0 (c = 1, sin = 0) y equals x.
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

__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = fmaf(x1, c, -(x2 * s));
  y2 = fmaf(x2, c, x1 * s);
}

// Pairs [i0, i0 + n) of one head row with element accesses: the scalar kernel and the fallback.
template <class D>
__device__ __forceinline__ void rope_pairs(const typename D::S* __restrict__ xr,
                                           const typename D::S* __restrict__ cr,
                                           const typename D::S* __restrict__ sr,
                                           typename D::S* __restrict__ yr, long long half,
                                           long long i0, int n) {
  for (int k = 0; k < n; ++k) {
    const long long i = i0 + k;
    float y1, y2;
    rotate(D::cvt(__builtin_nontemporal_load(xr + i)),
           D::cvt(__builtin_nontemporal_load(xr + half + i)), D::cvt(cr[i]), D::cvt(sr[i]), y1,
           y2);
    __builtin_nontemporal_store(D::rne(y1), yr + i);
    __builtin_nontemporal_store(D::rne(y2), yr + half + i);
  }
}

// One workgroup per position; item it = (h, j) with h = it / per_head, j = it % per_head,
// covering pairs [j * VEC, j * VEC + VEC) of head h. VEC = 1 is the scalar kernel.
template <class D, bool VECTOR>
__device__ __forceinline__ void rope_position(const typename D::S* __restrict__ x,
                                              const typename D::S* __restrict__ cos_t,
                                              const typename D::S* __restrict__ sin_t,
                                              typename D::S* __restrict__ y, long long S,
                                              long long H, long long Dm) {
  constexpr int VEC = VECTOR ? D::VEC : 1;
  const long long pos = blockIdx.x;  // b * S + s (B * S * H < 2^31: 32-bit division is exact)
  const long long s = (unsigned)pos % (unsigned)S;
  const long long half = Dm / 2;
  const unsigned per_head = (unsigned)(half / VEC);
  const unsigned items = (unsigned)H * per_head;
  const typename D::S* __restrict__ xp = x + pos * H * Dm;
  typename D::S* __restrict__ yp = y + pos * H * Dm;
  const typename D::S* __restrict__ cr = cos_t + s * half;
  const typename D::S* __restrict__ sr = sin_t + s * half;
  bool aligned = true;
  if constexpr (VECTOR) {
    aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y) |
                reinterpret_cast<unsigned long long>(cos_t) |
                reinterpret_cast<unsigned long long>(sin_t)) & 15ull) == 0;
  }
  for (unsigned it = threadIdx.x; it < items; it += blockDim.x) {
    const unsigned h = it / per_head;
    const unsigned j = it - h * per_head;
    const long long i0 = (long long)j * VEC;
    const typename D::S* __restrict__ xr = xp + (long long)h * Dm;
    typename D::S* __restrict__ yr = yp + (long long)h * Dm;
    if constexpr (VECTOR) {
      if (aligned) {
        float x1[VEC], x2[VEC], c[VEC], sn[VEC], y1[VEC], y2[VEC];
        load_pack<D, VEC, true>(xr + i0, x1);
        load_pack<D, VEC, true>(xr + half + i0, x2);
        load_pack<D, VEC, false>(cr + i0, c);
        load_pack<D, VEC, false>(sr + i0, sn);
#pragma unroll
        for (int k = 0; k < VEC; ++k) rotate(x1[k], x2[k], c[k], sn[k], y1[k], y2[k]);
        store_pack<D, VEC>(yr + i0, y1);
        store_pack<D, VEC>(yr + half + i0, y2);
        continue;
      }
    }
    rope_pairs<D>(xr, cr, sr, yr, half, i0, VEC);
  }
}

}  // namespace

#define ROPE(NAME, D, ST, VECTOR)                                                                \
  extern "C" __global__ void __launch_bounds__(256)                                              \
  NAME(const ST* __restrict__ x, const ST* __restrict__ cos_t, const ST* __restrict__ sin_t,     \
       ST* __restrict__ y, long long S, long long H, long long Dm) {                              \
    rope_position<D, VECTOR>(reinterpret_cast<const D::S*>(x), reinterpret_cast<const D::S*>(cos_t), \
                             reinterpret_cast<const D::S*>(sin_t), reinterpret_cast<D::S*>(y), S,  \
                             H, Dm);                                                             \
  }

ROPE(rope_vec_f32, F32, float, true)
ROPE(rope_vec_bf16, BF16, __hip_bfloat16, true)
ROPE(rope_vec_f16, F16, __half, true)
ROPE(rope_scalar_f32, F32, float, false)
ROPE(rope_scalar_bf16, BF16, __hip_bfloat16, false)
ROPE(rope_scalar_f16, F16, __half, false)
