// regen artifact swiglu@b200: generated content, do not edit. Change specs/swiglu.yaml and rebuild; provenance.json says who wrote it.
// SwiGLU, y[m, n] = silu(a) * b with a = x[m, :N] and b = x[m, N:], for a contiguous [M, 2N]
// input and [M, N] output, on the H200 (sm_90a, NVRTC).
//
// Purely elementwise and memory-bound: block b handles tile b % CB of row b / CB (CB tiles per
// row). float32 math, one RNE rounding on store; silu(a) = a / (1 + exp(-a)) with the fast
// exponential and division: for a < -88, exp(-a) is inf and the quotient is -0, never NaN.
// `vec` (N * sizeof(T) % 16 == 0: rows of a, b and y all start 16-byte aligned): blocks of 512
// threads, each issuing 2 + 2 independent 16-byte loads before any use and two 16-byte stores,
// 2048 threads per SM (32 registers). On the H200 this runs at parity with torch.compile's Triton
// kernel (183 us, 4.40 TB/s moved); see benchmarks/swiglu_variants.py for the 19 variants timed.
// `sca` (any N): one element per access, 8 per thread, coalesced across the warp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One memory access of PACK elements: a 16-byte uint4 (PACK = 16 / sizeof(T)), or a single
// element (PACK = 1) where rows are not 16-byte aligned.
template <typename T, int PACK> struct RawOf { using type = uint4; };
template <typename T> struct RawOf<T, 1> { using type = T; };

template <typename T, int PACK>
__device__ __forceinline__ typename RawOf<T, PACK>::type load_raw(const T* __restrict__ p) {
  if constexpr (PACK == 1) {
    return __ldg(p);
  } else {
    static_assert(PACK * sizeof(T) == 16, "a vector access is 16 bytes");
    return __ldg(reinterpret_cast<const uint4*>(p));
  }
}

template <typename T> __device__ __forceinline__ float low_half(unsigned w) {
  if constexpr (same_type<T, __nv_bfloat16>::value) return __uint_as_float(w << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
}
template <typename T> __device__ __forceinline__ float high_half(unsigned w) {
  if constexpr (same_type<T, __nv_bfloat16>::value) return __uint_as_float(w & 0xffff0000u);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}

template <typename T, int PACK>
__device__ __forceinline__ void unpack(const typename RawOf<T, PACK>::type& raw, float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    v[0] = to_float<T>(raw);
  } else {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
    if constexpr (sizeof(T) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(w[i]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = low_half<T>(w[i]);
        v[2 * i + 1] = high_half<T>(w[i]);
      }
    }
  }
}

// Two floats rounded to nearest even into one 32-bit word, the first in the low half.
template <typename T> __device__ __forceinline__ unsigned pack_two(float lo, float hi) {
  if constexpr (same_type<T, __nv_bfloat16>::value) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
  } else {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
  }
}

// The 16-byte stores are written in PTX: NVRTC lowered `*reinterpret_cast<uint4*>(p) = ...` to
// four 32-bit STG.E per vector, which cost 2.5 % of the benchmark time (188.1 vs 183.5 us); the
// `#else` branch is for the CPU emulation in tests/test_library_a.py.
template <typename T, int PACK>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    *p = from_float<T>(v[0]);
  } else if constexpr (sizeof(T) == 4) {
    const uint4 packed = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]),
                                    __float_as_uint(v[2]), __float_as_uint(v[3]));
#ifdef __CUDA_ARCH__
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(packed.x), "r"(packed.y), "r"(packed.z), "r"(packed.w) : "memory");
#else
    *reinterpret_cast<uint4*>(p) = packed;
#endif
  } else {
    const uint4 packed = make_uint4(pack_two<T>(v[0], v[1]), pack_two<T>(v[2], v[3]),
                                    pack_two<T>(v[4], v[5]), pack_two<T>(v[6], v[7]));
#ifdef __CUDA_ARCH__
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(packed.x), "r"(packed.y), "r"(packed.z), "r"(packed.w) : "memory");
#else
    *reinterpret_cast<uint4*>(p) = packed;
#endif
  }
}

template <typename T, int PACK>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, float (&v)[PACK]) {
  unpack<T, PACK>(load_raw<T, PACK>(p), v);
}

template <typename T, int PACK, int U, int G>
__device__ __forceinline__ void swiglu_tiles(const T* __restrict__ x, T* __restrict__ y,
                                             long long M, long long N) {
  constexpr int TILE = G * U * PACK;
  using Raw = typename RawOf<T, PACK>::type;
  const long long CB = (N + TILE - 1) / TILE;
  const long long row = static_cast<long long>(blockIdx.x) / CB;
  const long long tile = static_cast<long long>(blockIdx.x) - row * CB;
  if (row >= M) return;
  const long long start = tile * TILE;
  const int len = static_cast<int>(min(static_cast<long long>(TILE), N - start));
  const T* a = x + row * 2 * N + start;
  const T* b = a + N;
  T* yr = y + row * N + start;

  Raw ra[U], rb[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (static_cast<int>(threadIdx.x) + u * G) * PACK;
    if (e0 < len) {
      ra[u] = load_raw<T, PACK>(a + e0);
      rb[u] = load_raw<T, PACK>(b + e0);
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int e0 = (static_cast<int>(threadIdx.x) + u * G) * PACK;
    if (e0 < len) {
      float av[PACK], bv[PACK];
      unpack<T, PACK>(ra[u], av);
      unpack<T, PACK>(rb[u], bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) av[i] = __fdividef(av[i], 1.0f + __expf(-av[i])) * bv[i];
      store_pack<T, PACK>(yr + e0, av);
    }
  }
}

}  // namespace

// ---- entry points: swiglu_<vec|sca>_<dtype>; the grid is M * ceil_div(N, TILE) blocks of G
// threads, TILE = G * U * PACK elements: 16384 bytes for vec (G = 512, U = 2), 2048 elements for
// sca (G = 256, U = 8). Both keep 2048 threads per SM (G * MINB).
#define SWIGLU_ONE(KIND, SUFFIX, T, PACK, U, G, MINB)                                             \
  extern "C" __global__ void __launch_bounds__(G, MINB) swiglu_##KIND##_##SUFFIX(                \
      const T* x, T* y, long long M, long long N) {                                              \
    swiglu_tiles<T, PACK, U, G>(x, y, M, N);                                                     \
  }
SWIGLU_ONE(vec, bf16, __nv_bfloat16, 8, 2, 512, 4)
SWIGLU_ONE(vec, f16, __half, 8, 2, 512, 4)
SWIGLU_ONE(vec, f32, float, 4, 2, 512, 4)
SWIGLU_ONE(sca, bf16, __nv_bfloat16, 1, 8, 256, 8)
SWIGLU_ONE(sca, f16, __half, 1, 8, 256, 8)
SWIGLU_ONE(sca, f32, float, 1, 8, 256, 8)
