// Rotary position embedding (rotate-half pairs (i, i + D/2)), out of place, for H200 (sm_90a):
// a variant aimed at parity with QuACK on 8 x 4096 x 32 x 128 bf16.
//
// Against the committed kernel (a block per (b, s), tables re-read from L1 for every head and
// batch entry, two 16-byte loads in flight per thread): the grid is shaped to the layout,
// (S, ceil(B / 4)), so a block owns one position s and up to 4 batch entries; each thread's
// cos/sin vectors are loaded once into registers and reused across those batch entries; and the
// loads of four batch entries (4 x 2 x 16 bytes per thread) are issued before any is used.
// Loads go through the read-only path and stores are weak 16-byte st.global.v4 (streaming loads
// cost 4-13 % on swiglu); pos_batch_regs_stream is the same kernel with streaming hints.
// rope_vec_*: 16-byte vectors of 16 / sizeof(T) pairs, when (D/2) % VEC == 0 (misaligned base
// pointers fall back to element accesses); rope_scalar_*: one pair per item, any even D.
// float32 math, one rounding per output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

// One element <-> float32: exact widening, round-to-nearest-even narrowing.
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

// 16 bytes <-> N float32 lanes (exact unpack, round-to-nearest-even pack).
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

// A 16-byte store kept 16 bytes wide: NVRTC lowers `*reinterpret_cast<uint4*>(p) = v` to four
// 32-bit STG.E, and a weak st.global.v4 (STG.E.128) beat the evict-first __stcs on swiglu
// (benchmarks/swiglu_variants.py). The `#else` branch is the CUDA emulation's (tests/support),
// where __stcs checks the alignment.
__device__ __forceinline__ void store16(void* p, const uint4& v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#else
  __stcs(reinterpret_cast<uint4*>(p), v);
#endif
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// Access flavour: loads through the read-only path, 16-byte weak stores (what won on swiglu).
#define ROPE_LOAD16(p) __ldg(reinterpret_cast<const uint4*>(p))
#define ROPE_STORE16(p, v) store16((p), (v))

// One rotation in float32: the forward y1 = x1 c - x2 s, y2 = x2 c + x1 s, or its inverse
// (the rotation by -theta, the backward pass) x1 = y1 c + y2 s, x2 = y2 c - y1 s.
template <bool INVERSE>
__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, float& y1, float& y2) {
  if constexpr (INVERSE) {
    y1 = fmaf(x1, c, x2 * s);
    y2 = fmaf(x2, c, -(x1 * s));
  } else {
    y1 = fmaf(x1, c, -(x2 * s));
    y2 = fmaf(x2, c, x1 * s);
  }
}

// Batch entries handled per thread before the next 16-byte loads are issued: UNROLL iterations'
// loads are all in flight together (4 x 2 x 16 bytes per thread).
constexpr int UNROLL = 4;

// A block owns one position s (blockIdx.x) and the batch entries [b0, b1) (blockIdx.y * BPB ..);
// its threads walk the items (h, j) of a position: head h, pair vector j of the half-row
// (pairs [j * VEC, j * VEC + VEC)). The cos/sin vectors of item j are loaded once, kept in
// registers, and reused for every batch entry of the block, so a table row is read once per
// (position, block) instead of once per (batch entry, head).
template <typename T, bool VECTOR, bool INVERSE>
__device__ __forceinline__ void rope_rows(const T* __restrict__ x, const T* __restrict__ cos_t,
                                          const T* __restrict__ sin_t, T* __restrict__ y,
                                          long long B, long long S, long long H, long long D,
                                          long long BPB) {
  constexpr int VEC = VECTOR ? Vec16<T>::N : 1;
  using E = Elem<T>;
  const long long s = blockIdx.x;
  const long long b0 = static_cast<long long>(blockIdx.y) * BPB;
  const long long b1 = b0 + BPB < B ? b0 + BPB : B;
  const long long half = D / 2;
  const long long per_head = half / VEC;
  const long long items = H * per_head;
  const long long pos_stride = S * H * D;  // elements between (b, s) and (b + 1, s)
  const T* __restrict__ cr = cos_t + s * half;
  const T* __restrict__ sr = sin_t + s * half;
  bool vec_ok = VECTOR;
  if constexpr (VECTOR) {
    vec_ok = aligned16(x) && aligned16(y) && aligned16(cos_t) && aligned16(sin_t);
  }
  for (long long it = threadIdx.x; it < items; it += blockDim.x) {
    const long long h = it / per_head;
    const long long i0 = (it - h * per_head) * VEC;
    const long long off = (s * H + h) * D + i0;  // x1 of item it at batch entry 0
    if (VECTOR && vec_ok) {
      using V = Vec16<T>;
      float c[VEC], sn[VEC];
      V::unpack(__ldg(reinterpret_cast<const uint4*>(cr + i0)), c);
      V::unpack(__ldg(reinterpret_cast<const uint4*>(sr + i0)), sn);
      for (long long b = b0; b < b1; b += UNROLL) {
        uint4 u1[UNROLL], u2[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
          if (b + k < b1) {
            const T* xr = x + (b + k) * pos_stride + off;
            u1[k] = ROPE_LOAD16(xr);
            u2[k] = ROPE_LOAD16(xr + half);
          }
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
          if (b + k < b1) {
            float x1[VEC], x2[VEC], y1[VEC], y2[VEC];
            V::unpack(u1[k], x1);
            V::unpack(u2[k], x2);
#pragma unroll
            for (int e = 0; e < VEC; ++e) rotate<INVERSE>(x1[e], x2[e], c[e], sn[e], y1[e], y2[e]);
            T* yr = y + (b + k) * pos_stride + off;
            ROPE_STORE16(yr, V::pack(y1));
            ROPE_STORE16(yr + half, V::pack(y2));
          }
        }
      }
    } else {
      // one element pair at a time (the scalar kernel, or misaligned base pointers)
      for (int e = 0; e < VEC; ++e) {
        const float c = E::load(cr + i0 + e), sn = E::load(sr + i0 + e);
        for (long long b = b0; b < b1; ++b) {
          const T* xr = x + b * pos_stride + off + e;
          T* yr = y + b * pos_stride + off + e;
          float y1, y2;
          rotate<INVERSE>(E::load_stream(xr), E::load_stream(xr + half), c, sn, y1, y2);
          E::store(yr, y1);
          E::store(yr + half, y2);
        }
      }
    }
  }
}

}  // namespace

#define ROPE(NAME, T, VECTOR)                                                                  \
  extern "C" __global__ void __launch_bounds__(256)                                         \
  NAME(const T* __restrict__ x, const T* __restrict__ cos_t, const T* __restrict__ sin_t,   \
       T* __restrict__ y, long long B, long long S, long long H, long long D, long long BPB) { \
    rope_rows<T, VECTOR, false>(x, cos_t, sin_t, y, B, S, H, D, BPB);                       \
  }

ROPE(rope_vec_f32, float, true)
ROPE(rope_vec_bf16, __nv_bfloat16, true)
ROPE(rope_vec_f16, __half, true)
ROPE(rope_scalar_f32, float, false)
ROPE(rope_scalar_bf16, __nv_bfloat16, false)
ROPE(rope_scalar_f16, __half, false)
