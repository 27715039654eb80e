// regen artifact rope@h100: generated content, do not edit. Change specs/rope.yaml and rebuild; provenance.json says who wrote it.
// Rotary position embedding (rotate-half pairs (i, i + D/2)), out of place, for H200 (sm_90a).
//
// One block per sequence position (b, s): its H * D/2 pairs are spread over the block's threads.
// rope_vec_*: a thread takes VEC = 16 / sizeof(T) consecutive pairs, so it moves x1, x2 and the
// matching cos/sin entries with four 16-byte loads and y with two 16-byte streaming stores. Used
// when (D/2) % VEC == 0, which makes every row, half-row and table row 16-byte aligned; if a base
// pointer is not 16-byte aligned the same kernel falls back to element loads.
// rope_scalar_*: a thread takes one pair; any even D.
// x and y stream through (evict-first); the tables are small and re-read from L1/L2 across the
// H heads of a block and the B batch entries. Math in float32, one rounding per output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

template <typename T> struct Elem;

template <> struct Elem<float> {
  static __device__ __forceinline__ float load(const float* p) { return __ldg(p); }
  static __device__ __forceinline__ float load_stream(const float* p) { return __ldcs(p); }
  static __device__ __forceinline__ void store(float* p, float v) { __stcs(p, v); }
};

template <> struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float bits(unsigned short b) {
    return __uint_as_float(static_cast<unsigned>(b) << 16);
  }
  static __device__ __forceinline__ float load(const __nv_bfloat16* p) {
    return bits(__ldg(reinterpret_cast<const unsigned short*>(p)));
  }
  static __device__ __forceinline__ float load_stream(const __nv_bfloat16* p) {
    return bits(__ldcs(reinterpret_cast<const unsigned short*>(p)));
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    __stcs(reinterpret_cast<unsigned short*>(p), __bfloat16_as_ushort(__float2bfloat16_rn(v)));
  }
};

template <> struct Elem<__half> {
  static __device__ __forceinline__ float bits(unsigned short b) {
    return __half2float(__ushort_as_half(b));
  }
  static __device__ __forceinline__ float load(const __half* p) {
    return bits(__ldg(reinterpret_cast<const unsigned short*>(p)));
  }
  static __device__ __forceinline__ float load_stream(const __half* p) {
    return bits(__ldcs(reinterpret_cast<const unsigned short*>(p)));
  }
  static __device__ __forceinline__ void store(__half* p, float v) {
    __stcs(reinterpret_cast<unsigned short*>(p), __half_as_ushort(__float2half_rn(v)));
  }
};

// 16 bytes <-> VEC float32 lanes (exact unpack, round-to-nearest-even pack).
template <typename T> struct Vec16;

template <> struct Vec16<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

template <> struct Vec16<__nv_bfloat16> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // the lower half-word is the earlier element
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
           (static_cast<unsigned>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
  }
};

template <> struct Vec16<__half> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] & 0xffffu)));
      f[2 * k + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] >> 16)));
    }
  }
  static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return static_cast<unsigned>(__half_as_ushort(__float2half_rn(lo))) |
           (static_cast<unsigned>(__half_as_ushort(__float2half_rn(hi))) << 16);
  }
  static __device__ __forceinline__ uint4 pack(const float* f) {
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
  }
};

__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, float& y1, float& y2) {
  y1 = fmaf(x1, c, -(x2 * s));
  y2 = fmaf(x2, c, x1 * s);
}

// Pairs [i0, i0 + n) of one row (element loads): the scalar kernel and the misaligned fallback.
template <typename T>
__device__ __forceinline__ void rope_pairs(const T* __restrict__ xr, const T* __restrict__ cr,
                                           const T* __restrict__ sr, T* __restrict__ yr,
                                           long long half, long long i0, int n) {
  using E = Elem<T>;
  for (int k = 0; k < n; ++k) {
    const long long i = i0 + k;
    float y1, y2;
    rotate(E::load_stream(xr + i), E::load_stream(xr + half + i), E::load(cr + i), E::load(sr + i),
           y1, y2);
    E::store(yr + i, y1);
    E::store(yr + half + i, y2);
  }
}

// One block per position; item it = (h, j) with h = it / per_head, j = it % per_head, covering
// pairs [j * VEC, j * VEC + VEC) of head h. VEC = 1 is the scalar kernel.
template <typename T, bool VECTOR>
__device__ __forceinline__ void rope_position(const T* __restrict__ x, const T* __restrict__ cos_t,
                                              const T* __restrict__ sin_t, T* __restrict__ y,
                                              long long S, long long H, long long D) {
  constexpr int VEC = VECTOR ? Vec16<T>::N : 1;
  const long long pos = blockIdx.x;  // b * S + s (B * S * H < 2^31, so 32-bit division is exact)
  const long long s = static_cast<unsigned>(pos) % static_cast<unsigned>(S);
  const long long half = D / 2;
  const unsigned per_head = static_cast<unsigned>(half / VEC);
  const unsigned items = static_cast<unsigned>(H) * per_head;
  const T* __restrict__ xp = x + pos * H * D;
  T* __restrict__ yp = y + pos * H * D;
  const T* __restrict__ cr = cos_t + s * half;
  const T* __restrict__ sr = sin_t + s * half;
  bool aligned = true;
  if constexpr (VECTOR) {
    aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y) |
                reinterpret_cast<unsigned long long>(cos_t) |
                reinterpret_cast<unsigned long long>(sin_t)) & 15ull) == 0;
  }
  for (unsigned it = threadIdx.x; it < items; it += blockDim.x) {
    const unsigned h = it / per_head;
    const unsigned j = it - h * per_head;
    const long long i0 = static_cast<long long>(j) * VEC;
    const T* __restrict__ xr = xp + static_cast<long long>(h) * D;
    T* __restrict__ yr = yp + static_cast<long long>(h) * D;
    if constexpr (VECTOR) {
      if (aligned) {
        using V = Vec16<T>;
        const uint4 u1 = __ldcs(reinterpret_cast<const uint4*>(xr + i0));
        const uint4 u2 = __ldcs(reinterpret_cast<const uint4*>(xr + half + i0));
        const uint4 uc = __ldg(reinterpret_cast<const uint4*>(cr + i0));
        const uint4 us = __ldg(reinterpret_cast<const uint4*>(sr + i0));
        float x1[VEC], x2[VEC], c[VEC], sn[VEC], y1[VEC], y2[VEC];
        V::unpack(u1, x1);
        V::unpack(u2, x2);
        V::unpack(uc, c);
        V::unpack(us, sn);
#pragma unroll
        for (int k = 0; k < VEC; ++k) rotate(x1[k], x2[k], c[k], sn[k], y1[k], y2[k]);
        __stcs(reinterpret_cast<uint4*>(yr + i0), V::pack(y1));
        __stcs(reinterpret_cast<uint4*>(yr + half + i0), V::pack(y2));
        continue;
      }
    }
    rope_pairs<T>(xr, cr, sr, yr, half, i0, VEC);
  }
}

}  // namespace

#define ROPE(NAME, T, VECTOR)                                                                 \
  extern "C" __global__ void __launch_bounds__(256)                                        \
  NAME(const T* __restrict__ x, const T* __restrict__ cos_t, const T* __restrict__ sin_t,  \
       T* __restrict__ y, long long S, long long H, long long D) {                         \
    rope_position<T, VECTOR>(x, cos_t, sin_t, y, S, H, D);                                 \
  }

ROPE(rope_vec_f32, float, true)
ROPE(rope_vec_bf16, __nv_bfloat16, true)
ROPE(rope_vec_f16, __half, true)
ROPE(rope_scalar_f32, float, false)
ROPE(rope_scalar_bf16, __nv_bfloat16, false)
ROPE(rope_scalar_f16, __half, false)
