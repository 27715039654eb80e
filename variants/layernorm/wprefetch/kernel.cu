// variants/layernorm/wprefetch: the committed h200 source plus row kernels that load weight and
// bias together with x, before the reductions, for small M (layernorm_rows_wpf, the *wpf_* entry
// points).
//
// Layer normalisation with per-column weight and bias, y = (x - mean) * rsqrt(var + eps) * w + b,
// over the last dimension of a contiguous [M, N] tensor, for NVIDIA sm_80, sm_90a and sm_100a (NVRTC).
//
// float32 math, variance from deviations (never E[x^2] - mean^2), one RNE rounding on store.
// Dispatch (launch.yaml `when` guards on N):
//   N <= 16384: the row lives in registers across the mean, variance and normalise passes (x read
//     once, y written once): a warp per row up to 256 elements, else a block per row; `vec`
//     variants move 16 bytes per access and need N * sizeof(T) % 16 == 0, `sca` variants move
//     one element per access (coalesced across the warp) for any N.
//   N > 16384: 4096-element chunks, one block each, so few long rows still fill the GPU: pass 1
//     writes each chunk's (mean, M2) to a workspace, pass 2 combines a row's pairs exactly
//     (parallel-variance identity) and normalises its chunk (re-reading x, mostly from L2).
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

// Long rows are cut into chunks of SPLIT_CHUNK elements, one block of SPLIT_G threads each:
// a statistics kernel writes one partial per chunk, an apply kernel combines a row's partials
// and writes its chunk. launch.yaml sizes the workspace and the grid with the same 4096.
constexpr int SPLIT_G = 256;
constexpr int SPLIT_F = 16;
constexpr int SPLIT_CHUNK = SPLIT_G * SPLIT_F;
static_assert(SPLIT_CHUNK == 4096, "launch.yaml assumes 4096-element chunks");

// A row that fits in registers: G threads own it (one warp, RPB rows per block; or the whole
// block), each holding F elements as F / PACK accesses; x is read once and y written once.
// Two passes over the registers: the mean, then the sum of squared deviations (no E[x^2] - mu^2).
// weight and bias (8 KB each for N = 4096) stay in L1 across rows and are read after the
// reductions: a prefetch into registers would cost the occupancy that keeps x streaming.
template <typename T, int PACK, int F, int G, int RPB>
__device__ __forceinline__ void layernorm_rows(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, T* __restrict__ y,
                                               long long M, long long N, float eps) {
  constexpr int CH = F / PACK;
  static_assert(CH * PACK == F && (G == 32 || RPB == 1), "bad row mapping");
  __shared__ float red_mean[32];
  __shared__ float red_var[32];
  const int lane = G == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const long long row = static_cast<long long>(blockIdx.x) * RPB + (G == 32 ? threadIdx.x >> 5 : 0);
  if (row >= M) return;  // a whole warp (G == 32) or a whole block (G > 32) leaves together
  const int n = static_cast<int>(N);
  const T* xr = x + row * N;
  T* yr = y + row * N;

  float v[CH][PACK];
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      load_pack<T, PACK>(xr + e0, v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[c][i];
  }
  const float mean = group_sum<G>(s, red_mean) / static_cast<float>(n);
  float q = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        const float d = v[c][i] - mean;
        q = fmaf(d, d, q);
      }
    }
  }
  const float var = group_sum<G>(q, red_var) / static_cast<float>(n);
  const float r = rsqrtf(var + eps);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      float wv[PACK], bv[PACK];
      load_pack<T, PACK>(w + e0, wv);
      load_pack<T, PACK>(b + e0, bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = fmaf((v[c][i] - mean) * r, wv[i], bv[i]);
      store_pack<T, PACK>(yr + e0, v[c]);
    }
  }
}

// The same row mapping for small M (launch.yaml: the whole grid resident in one wave at 1024
// threads per SM): weight and bias are loaded into registers together with x, before the two
// reductions, so their memory round trip overlaps x's instead of following the reductions on the
// critical path (x load -> mean -> variance -> store). Raw 16-byte words are held, unpacked after
// the reductions. Costs registers (64 allowed per thread), which one resident wave can afford.
template <typename T, int PACK, int F, int G, int RPB>
__device__ __forceinline__ void layernorm_rows_wpf(const T* __restrict__ x, const T* __restrict__ w,
                                                   const T* __restrict__ b, T* __restrict__ y,
                                                   long long M, long long N, float eps) {
  using Raw = typename RawOf<T, PACK>::type;
  constexpr int CH = F / PACK;
  static_assert(CH * PACK == F && (G == 32 || RPB == 1), "bad row mapping");
  __shared__ float red_mean[32];
  __shared__ float red_var[32];
  const int lane = G == 32 ? (threadIdx.x & 31) : threadIdx.x;
  const long long row = static_cast<long long>(blockIdx.x) * RPB + (G == 32 ? threadIdx.x >> 5 : 0);
  if (row >= M) return;  // a whole warp (G == 32) or a whole block (G > 32) leaves together
  const int n = static_cast<int>(N);
  const T* xr = x + row * N;
  T* yr = y + row * N;

  Raw xraw[CH], wraw[CH], braw[CH];
#pragma unroll
  for (int c = 0; c < CH; ++c) {  // every load of the thread issued before any is used
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      xraw[c] = load_raw<T, PACK>(xr + e0);
      wraw[c] = load_raw<T, PACK>(w + e0);
      braw[c] = load_raw<T, PACK>(b + e0);
    }
  }
  float v[CH][PACK];
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      unpack<T, PACK>(xraw[c], v[c]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[c][i];
  }
  const float mean = group_sum<G>(s, red_mean) / static_cast<float>(n);
  float q = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        const float d = v[c][i] - mean;
        q = fmaf(d, d, q);
      }
    }
  }
  const float var = group_sum<G>(q, red_var) / static_cast<float>(n);
  const float r = rsqrtf(var + eps);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (lane + c * G) * PACK;
    if (e0 < n) {
      float wv[PACK], bv[PACK];
      unpack<T, PACK>(wraw[c], wv);
      unpack<T, PACK>(braw[c], bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = fmaf((v[c][i] - mean) * r, wv[i], bv[i]);
      store_pack<T, PACK>(yr + e0, v[c]);
    }
  }
}

// Loads this block's chunk of a long row into registers; padding is 0.
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
      for (int i = 0; i < PACK; ++i) v[c][i] = 0.0f;
    }
  }
}

// Long rows, pass 1: block b handles chunk b % C of row b / C and writes the chunk's mean and
// sum of squared deviations from it (M2), both from registers.
template <typename T, int PACK>
__device__ __forceinline__ void layernorm_split_stats(const T* __restrict__ x,
                                                      float* __restrict__ partial, long long M,
                                                      long long N) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_mean[32];
  __shared__ float red_var[32];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = static_cast<long long>(blockIdx.x) / C;
  const long long chunk = static_cast<long long>(blockIdx.x) - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = static_cast<int>(min(static_cast<long long>(SPLIT_CHUNK), N - start));
  float v[CH][PACK];
  load_chunk<T, PACK>(x + row * N + start, len, v);
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < PACK; ++i) s += v[c][i];
  const float mean = group_sum<SPLIT_G>(s, red_mean) / static_cast<float>(len);
  float q = 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (static_cast<int>(threadIdx.x) + c * SPLIT_G) * PACK;
    if (e0 < len) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        const float d = v[c][i] - mean;
        q = fmaf(d, d, q);
      }
    }
  }
  q = group_sum<SPLIT_G>(q, red_var);
  if (threadIdx.x == 0) {
    partial[(row * C + chunk) * 2] = mean;
    partial[(row * C + chunk) * 2 + 1] = q;
  }
}

// Long rows, pass 2: the row's mean is the count-weighted mean of the chunk means, and its M2 is
// sum(M2_c + n_c * (mean_c - mean)^2) (the parallel-variance identity); then normalise this chunk.
template <typename T, int PACK>
__device__ __forceinline__ void layernorm_split_apply(const T* __restrict__ x,
                                                      const T* __restrict__ w,
                                                      const T* __restrict__ b,
                                                      const float* __restrict__ partial,
                                                      T* __restrict__ y, long long M, long long N,
                                                      float eps) {
  constexpr int CH = SPLIT_F / PACK;
  __shared__ float red_mean[32];
  __shared__ float red_var[32];
  const long long C = (N + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  const long long row = static_cast<long long>(blockIdx.x) / C;
  const long long chunk = static_cast<long long>(blockIdx.x) - row * C;
  if (row >= M) return;
  const long long start = chunk * SPLIT_CHUNK;
  const int len = static_cast<int>(min(static_cast<long long>(SPLIT_CHUNK), N - start));
  float v[CH][PACK];
  load_chunk<T, PACK>(x + row * N + start, len, v);  // in flight while the partials combine
  const float* pr = partial + row * C * 2;
  float t = 0.0f;
  for (long long i = threadIdx.x; i < C; i += SPLIT_G) {
    const float n_i = static_cast<float>(min(static_cast<long long>(SPLIT_CHUNK), N - i * SPLIT_CHUNK));
    t = fmaf(n_i, pr[2 * i], t);
  }
  const float mean = group_sum<SPLIT_G>(t, red_mean) / static_cast<float>(N);
  float q = 0.0f;
  for (long long i = threadIdx.x; i < C; i += SPLIT_G) {
    const float n_i = static_cast<float>(min(static_cast<long long>(SPLIT_CHUNK), N - i * SPLIT_CHUNK));
    const float d = pr[2 * i] - mean;
    q += fmaf(n_i * d, d, pr[2 * i + 1]);
  }
  const float var = group_sum<SPLIT_G>(q, red_var) / static_cast<float>(N);
  const float r = rsqrtf(var + eps);
  const T* wc = w + start;
  const T* bc = b + start;
  T* yc = y + row * N + start;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const int e0 = (static_cast<int>(threadIdx.x) + c * SPLIT_G) * PACK;
    if (e0 < len) {
      float wv[PACK], bv[PACK];
      load_pack<T, PACK>(wc + e0, wv);
      load_pack<T, PACK>(bc + e0, bv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[c][i] = fmaf((v[c][i] - mean) * r, wv[i], bv[i]);
      store_pack<T, PACK>(yc + e0, v[c]);
    }
  }
}

}  // namespace

// Residency each variant asks of ptxas: 16-byte variants of 16-bit types with at most 16 elements
// per thread fit 32 registers, so an SM keeps 2048 threads (the most bytes in flight); the others
// keep 1024 threads (64 registers). Without a minimum ptxas may pick 32 registers and spill.
// sm_100a: those 16-bit vec rows need a few more than 32 registers (12 B spilled there), so they
// keep 1536 threads per multiprocessor (42 registers).
#if __CUDA_ARCH__ >= 1000
#define MIN_BLOCKS(THREADS, F, PACK, T) \
  ((PACK) > 1 && sizeof(T) == 2 && (F) <= 16 ? 1536 / (THREADS) : 1024 / (THREADS))
#else
#define MIN_BLOCKS(THREADS, F, PACK, T) \
  ((PACK) > 1 && sizeof(T) == 2 && (F) <= 16 ? 2048 / (THREADS) : 1024 / (THREADS))
#endif

// ---- entry points: <variant>_<vec|sca>_<dtype>; vec needs N * sizeof(T) % 16 == 0 ------------
#define LAYERNORM_ROWS_ONE(NAME, KIND, SUFFIX, T, PACK, F, G, RPB)                                \
  extern "C" __global__ void __launch_bounds__(G * RPB, MIN_BLOCKS(G * RPB, F, PACK, T)) layernorm_##NAME##_##KIND##_##SUFFIX(    \
      const T* x, const T* w, const T* b, T* y, long long M, long long N, float eps) {           \
    layernorm_rows<T, PACK, F, G, RPB>(x, w, b, y, M, N, eps);                                   \
  }
#define LAYERNORM_ROWS(NAME, F, G, RPB)                                                           \
  LAYERNORM_ROWS_ONE(NAME, vec, bf16, __nv_bfloat16, 8, F, G, RPB)                               \
  LAYERNORM_ROWS_ONE(NAME, vec, f16, __half, 8, F, G, RPB)                                       \
  LAYERNORM_ROWS_ONE(NAME, vec, f32, float, 4, F, G, RPB)                                        \
  LAYERNORM_ROWS_ONE(NAME, sca, bf16, __nv_bfloat16, 1, F, G, RPB)                               \
  LAYERNORM_ROWS_ONE(NAME, sca, f16, __half, 1, F, G, RPB)                                       \
  LAYERNORM_ROWS_ONE(NAME, sca, f32, float, 1, F, G, RPB)

LAYERNORM_ROWS(r256, 8, 32, 8)      // N <= 256: a warp per row, 8 rows per block
LAYERNORM_ROWS(r1024, 16, 64, 1)     // then a block per row, 16 elements per thread
LAYERNORM_ROWS(r2048, 16, 128, 1)
LAYERNORM_ROWS(r4096, 16, 256, 1)
LAYERNORM_ROWS(r8192, 16, 512, 1)
LAYERNORM_ROWS(r16384, 16, 1024, 1)

// Small-M entry points (<variant>wpf_vec_<dtype>): weight and bias prefetched with x. 1024
// threads per SM (64 registers, 0 spills): launch.yaml picks them while the whole grid fits 132
// SMs at that residency. Only 16-byte rows: element-wise (sca) rows hold 16 guarded accesses each
// of x, weight and bias (they spilled at 64 registers in rmsnorm with x and weight alone), so they
// keep the committed kernels at every M, as does the split path.
#define LAYERNORM_WPF_ONE(NAME, KIND, SUFFIX, T, PACK, F, G, RPB)                                 \
  extern "C" __global__ void __launch_bounds__(G * RPB, 1024 / (G * RPB))                        \
      layernorm_##NAME##wpf_##KIND##_##SUFFIX(const T* x, const T* w, const T* b, T* y,          \
                                              long long M, long long N, float eps) {            \
    layernorm_rows_wpf<T, PACK, F, G, RPB>(x, w, b, y, M, N, eps);                               \
  }
#define LAYERNORM_WPF(NAME, F, G, RPB)                                                            \
  LAYERNORM_WPF_ONE(NAME, vec, bf16, __nv_bfloat16, 8, F, G, RPB)                                \
  LAYERNORM_WPF_ONE(NAME, vec, f16, __half, 8, F, G, RPB)                                        \
  LAYERNORM_WPF_ONE(NAME, vec, f32, float, 4, F, G, RPB)

LAYERNORM_WPF(r256, 8, 32, 8)
LAYERNORM_WPF(r1024, 16, 64, 1)
LAYERNORM_WPF(r2048, 16, 128, 1)
LAYERNORM_WPF(r4096, 16, 256, 1)
LAYERNORM_WPF(r8192, 16, 512, 1)
LAYERNORM_WPF(r16384, 16, 1024, 1)

#define LAYERNORM_SPLIT_ONE(KIND, SUFFIX, T, PACK)                                                \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) layernorm_split_stats_##KIND##_##SUFFIX( \
      const T* x, float* partial, long long M, long long N) {                                    \
    layernorm_split_stats<T, PACK>(x, partial, M, N);                                            \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(SPLIT_G) layernorm_split_apply_##KIND##_##SUFFIX( \
      const T* x, const T* w, const T* b, const float* partial, T* y, long long M, long long N,  \
      float eps) {                                                                               \
    layernorm_split_apply<T, PACK>(x, w, b, partial, y, M, N, eps);                              \
  }
LAYERNORM_SPLIT_ONE(vec, bf16, __nv_bfloat16, 8)
LAYERNORM_SPLIT_ONE(vec, f16, __half, 8)
LAYERNORM_SPLIT_ONE(vec, f32, float, 4)
LAYERNORM_SPLIT_ONE(sca, bf16, __nv_bfloat16, 1)
LAYERNORM_SPLIT_ONE(sca, f16, __half, 1)
LAYERNORM_SPLIT_ONE(sca, f32, float, 1)
