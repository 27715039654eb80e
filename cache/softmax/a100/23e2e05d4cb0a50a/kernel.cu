// regen artifact softmax@a100: generated content, do not edit. Change specs/softmax.yaml and rebuild; provenance.json says who wrote it.
// Softmax over the last dimension of a contiguous [M, N] tensor, for the A100 (sm_80, NVRTC).
//
// float32 math, one RNE rounding on store. Dispatch (launch.yaml `when` guards on N):
//   N <= 32768: the row lives in registers between the max, sum and normalise passes (x read
//     once, y written once): a warp per row up to 256 elements, else a block per row;
//     `vec` variants move 16 bytes per access and need N * sizeof(T) % 16 == 0, `sca` variants
//     move one element per access (coalesced across the warp) for any N.
//   N > 32768: the row is split into 4096-element chunks, one block each, so few long rows still
//     fill the GPU: pass 1 writes a (max, sum) pair per chunk to a workspace, pass 2 merges the
//     row's pairs with the online-softmax rule and writes its chunk (re-reading x, mostly from L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

#define NEG_INF (__uint_as_float(0xff800000u))  // -inf

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

template <typename T, int PACK>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    *p = from_float<T>(v[0]);
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<uint4*>(p) = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]),
                                              __float_as_uint(v[2]), __float_as_uint(v[3]));
  } else {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack_two<T>(v[0], v[1]), pack_two<T>(v[2], v[3]),
                                              pack_two<T>(v[4], v[5]), pack_two<T>(v[6], v[7]));
  }
}

template <typename T, int PACK>
__device__ __forceinline__ void load_pack(const T* __restrict__ p, float (&v)[PACK]) {
  unpack<T, PACK>(load_raw<T, PACK>(p), v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reductions over the G threads that own one row. G == 32: one warp, shuffles only. G > 32: the
// whole block owns the row; warp partials meet in `red` (a __shared__ float[32] that no other
// reduction of the same kernel uses), and every warp then reduces them identically, so all
// threads get the same bits with one barrier.
template <int G> __device__ __forceinline__ float group_sum(float v, float* red) {
  v = warp_sum(v);
  if constexpr (G > 32) {
    const int lane = threadIdx.x & 31;
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_sum(lane < G / 32 ? red[lane] : 0.0f);
  }
  return v;
}
template <int G> __device__ __forceinline__ float group_max(float v, float* red) {
  v = warp_max(v);
  if constexpr (G > 32) {
    const int lane = threadIdx.x & 31;
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_max(lane < G / 32 ? red[lane] : NEG_INF);
  }
  return v;
}

// Long rows are cut into chunks of SPLIT_CHUNK elements, one block of SPLIT_G threads each:
// a statistics kernel writes one partial per chunk, an apply kernel combines a row's partials
// and writes its chunk. launch.yaml sizes the workspace and the grid with the same 4096.
constexpr int SPLIT_G = 256;
constexpr int SPLIT_F = 16;
constexpr int SPLIT_CHUNK = SPLIT_G * SPLIT_F;
static_assert(SPLIT_CHUNK == 4096, "launch.yaml assumes 4096-element chunks");

// A row that fits in registers: G threads own it (one warp, RPB rows per block; or the whole
// block), each holding F elements as F / PACK accesses; x is read once and y written once.
template <typename T, int PACK, int F, int G, int RPB>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y,
                                             long long M, long long N) {
  constexpr int CH = F / PACK;
  static_assert(CH * PACK == F && (G == 32 || RPB == 1), "bad row mapping");
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  const int lane = G == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const long long row = static_cast<long long>(blockIdx.x) * RPB + (G == 32 ? threadIdx.x >> 5 : 0);
  if (row >= M) return;  // a whole warp (G == 32) or a whole block (G > 32) leaves together
  const int n = static_cast<int>(N);
  const T* xr = x + row * N;
  T* yr = y + row * N;

  float v[CH][PACK];
  float mx = NEG_INF;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      load_pack<T, PACK>(xr + e0, v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = NEG_INF;
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) mx = fmaxf(mx, v[c][i]);
  }
  mx = group_max<G>(mx, red_max);
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      v[c][i] = __expf(v[c][i] - mx);  // padding: exp(-inf) = 0
      s += v[c][i];
    }
  s = group_sum<G>(s, red_sum);
  const float inv = __frcp_rn(s);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] *= inv;
      store_pack<T, PACK>(yr + e0, v[c]);
    }
  }
}

// (max, sum of exp(x - max)) merged with the online rule; an empty side has max -inf, sum 0.
__device__ __forceinline__ void merge_stats(float& m, float& s, float m2, float s2) {
  const float nm = fmaxf(m, m2);
  if (nm == NEG_INF) return;
  s = (m == NEG_INF ? 0.0f : s * __expf(m - nm)) + (m2 == NEG_INF ? 0.0f : s2 * __expf(m2 - nm));
  m = nm;
}

// Loads this block's chunk of a long row into registers; padding is -inf.
template <typename T, int PACK>
__device__ __forceinline__ void load_chunk(const T* __restrict__ xc, int len,
                                           float (&v)[SPLIT_F / PACK][PACK]) {
#pragma unroll
  for (int c = 0; c < SPLIT_F / PACK; ++c) {
    const int e0 = (static_cast<int>(threadIdx.x) + c * SPLIT_G) * PACK;
    if (e0 < len) {
      load_pack<T, PACK>(xc + e0, v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = NEG_INF;
    }
  }
}

// Long rows, pass 1: block b handles chunk b % C of row b / C and writes its (max, sum) pair.
template <typename T, int PACK>
__device__ __forceinline__ void softmax_split_stats(const T* __restrict__ x,
                                                    float* __restrict__ partial, long long M,
                                                    long long N) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = static_cast<long long>(blockIdx.x) / C;
  const long long chunk = static_cast<long long>(blockIdx.x) - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = static_cast<int>(min(static_cast<long long>(SPLIT_CHUNK), N - start));
  float v[CH][PACK];
  load_chunk<T, PACK>(x + row * N + start, len, v);
  float mx = NEG_INF;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) mx = fmaxf(mx, v[c][i]);
  mx = group_max<SPLIT_G>(mx, red_max);
  const float base = mx == NEG_INF ? 0.0f : mx;  // an all -inf chunk: sum 0, no NaN
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += __expf(v[c][i] - base);
  s = group_sum<SPLIT_G>(s, red_sum);
  if (threadIdx.x == 0) {
    partial[(row * C + chunk) * 2] = mx;
    partial[(row * C + chunk) * 2 + 1] = s;
  }
}

// Long rows, pass 2: combine the row's C partials, then normalise this block's chunk.
template <typename T, int PACK>
__device__ __forceinline__ void softmax_split_apply(const T* __restrict__ x,
                                                    const float* __restrict__ partial,
                                                    T* __restrict__ y, long long M, long long N) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_max[32];
  __shared__ float red_sum[32];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = static_cast<long long>(blockIdx.x) / C;
  const long long chunk = static_cast<long long>(blockIdx.x) - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = static_cast<int>(min(static_cast<long long>(SPLIT_CHUNK), N - start));
  const T* xc = x + row * N + start;
  T* yc = y + row * N + start;
  float v[CH][PACK];
  load_chunk<T, PACK>(xc, len, v);  // issued first: its latency overlaps the combine below

  float pm = NEG_INF, ps = 0.0f;
  const float* pr = partial + row * C * 2;
  for (long long i = threadIdx.x; i < C; i += SPLIT_G) merge_stats(pm, ps, pr[2 * i], pr[2 * i + 1]);
  const float gm = group_max<SPLIT_G>(pm, red_max);
  const float gs = group_sum<SPLIT_G>(pm == NEG_INF ? 0.0f : ps * __expf(pm - gm), red_sum);
  const float inv = __frcp_rn(gs);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (static_cast<int>(threadIdx.x) + c * SPLIT_G) * PACK;
    if (e0 < len) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = __expf(v[c][i] - gm) * inv;
      store_pack<T, PACK>(yc + e0, v[c]);
    }
  }
}

}  // namespace

// Residency each variant asks of ptxas: 16-byte variants of 16-bit types with at most 16 elements
// per thread fit 32 registers, so an SM keeps 2048 threads (the most bytes in flight); the others
// keep 1024 threads (64 registers). Without a minimum ptxas may pick 32 registers and spill.
#define MIN_BLOCKS(THREADS, F, PACK, T) \
  ((PACK) > 1 && sizeof(T) == 2 && (F) <= 16 ? 2048 / (THREADS) : 1024 / (THREADS))

// ---- entry points: <variant>_<vec|sca>_<dtype>; vec needs N * sizeof(T) % 16 == 0 ------------
#define SOFTMAX_ROWS_ONE(NAME, KIND, SUFFIX, T, PACK, F, G, RPB)                                  \
  extern "C" __global__ void __launch_bounds__(G * RPB, MIN_BLOCKS(G * RPB, F, PACK, T))         \
      softmax_##NAME##_##KIND##_##SUFFIX(const T* x, T* y, long long M, long long N) {           \
    softmax_rows<T, PACK, F, G, RPB>(x, y, M, N);                                                \
  }
#define SOFTMAX_ROWS(NAME, F, G, RPB)                                                             \
  SOFTMAX_ROWS_ONE(NAME, vec, bf16, __nv_bfloat16, 8, F, G, RPB)                                 \
  SOFTMAX_ROWS_ONE(NAME, vec, f16, __half, 8, F, G, RPB)                                         \
  SOFTMAX_ROWS_ONE(NAME, vec, f32, float, 4, F, G, RPB)                                          \
  SOFTMAX_ROWS_ONE(NAME, sca, bf16, __nv_bfloat16, 1, F, G, RPB)                                 \
  SOFTMAX_ROWS_ONE(NAME, sca, f16, __half, 1, F, G, RPB)                                         \
  SOFTMAX_ROWS_ONE(NAME, sca, f32, float, 1, F, G, RPB)

SOFTMAX_ROWS(r256, 8, 32, 8)      // N <= 256: a warp per row, 8 rows per block
SOFTMAX_ROWS(r1024, 16, 64, 1)     // then a block per row, 16 elements per thread
SOFTMAX_ROWS(r2048, 16, 128, 1)
SOFTMAX_ROWS(r4096, 16, 256, 1)
SOFTMAX_ROWS(r8192, 16, 512, 1)
SOFTMAX_ROWS(r16384, 16, 1024, 1)
// 32 elements per thread at 1024 threads: only the 16-byte variants fit sm_80's 64 registers (the
// one-element-per-access ones spilled 8 B); unaligned rows past 16384 take the split path
SOFTMAX_ROWS_ONE(r32768, vec, bf16, __nv_bfloat16, 8, 32, 1024, 1)
SOFTMAX_ROWS_ONE(r32768, vec, f16, __half, 8, 32, 1024, 1)
SOFTMAX_ROWS_ONE(r32768, vec, f32, float, 4, 32, 1024, 1)

#define SOFTMAX_SPLIT(KIND, PACK_BF16, PACK_F32)                                                 \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_stats_##KIND##_bf16(       \
      const __nv_bfloat16* x, float* partial, long long M, long long N) {                        \
    softmax_split_stats<__nv_bfloat16, PACK_BF16>(x, partial, M, N);                             \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_stats_##KIND##_f16(        \
      const __half* x, float* partial, long long M, long long N) {                               \
    softmax_split_stats<__half, PACK_BF16>(x, partial, M, N);                                    \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_stats_##KIND##_f32(        \
      const float* x, float* partial, long long M, long long N) {                                \
    softmax_split_stats<float, PACK_F32>(x, partial, M, N);                                      \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_apply_##KIND##_bf16(       \
      const __nv_bfloat16* x, const float* partial, __nv_bfloat16* y, long long M, long long N) { \
    softmax_split_apply<__nv_bfloat16, PACK_BF16>(x, partial, y, M, N);                          \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_apply_##KIND##_f16(        \
      const __half* x, const float* partial, __half* y, long long M, long long N) {              \
    softmax_split_apply<__half, PACK_BF16>(x, partial, y, M, N);                                 \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) softmax_split_apply_##KIND##_f32(        \
      const float* x, const float* partial, float* y, long long M, long long N) {                \
    softmax_split_apply<float, PACK_F32>(x, partial, y, M, N);                                   \
  }

SOFTMAX_SPLIT(vec, 8, 4)
SOFTMAX_SPLIT(sca, 1, 1)
