// Fused linear + cross-entropy (LM head, mean loss, dhidden and dweight) for H200 (sm_90a),
// chunked over the vocabulary so the [N, V] logits never exist: a [N, min(V, 8192)] float32
// chunk workspace, a float32 [N, H] dhidden accumulator and three floats per token.
//
// Variant simt_f32: every GEMM on a plain tiled float32 SIMT kernel (64 x 64 tiles, K in steps of
// 16 through shared memory, 4 x 4 outputs per thread, T inputs widened to float32, G kept in
// float32), no inline PTX: the fallback to pick if the committed mma.sync kernel fails on the
// device, at a fraction of its speed (compute-bound far below the H200's bf16 peak). Launches (launch.yaml, one set per
// 8192-column chunk c0, the recipe unrolls the chunks up to V = 262144):
//   pass 1, per chunk: flce_logits (L = h @ W[c0:c0+cols]^T), flce_stats (per token an online
//     (max, sum of exp) merged into the running pair; the target's logit when it is in the chunk)
//   flce_finish: lse per token, the counted tokens C and the mean loss (float64, fixed order)
//   pass 2, per chunk: flce_logits again, flce_grad (L becomes G = (exp(L - lse) - onehot) / C, 0
//     for ignored tokens), flce_dhidden (dh += G @ W_c, float32 accumulator, chunks in order),
//     flce_dweight (dweight[c0:c0+cols] = G^T @ h, rounded to T once)
//   flce_dhidden_out: dh rounded to T once.
// Deterministic: no atomics; every sum has a fixed order.
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

constexpr int BM = 64, BN = 64, BK = 16, GEMM_THREADS = 256;

enum Epilogue { STORE_F32 = 0, ACCUMULATE_F32 = 1, STORE_T = 2 };

// C[i, j] (+)= sum_k A(i, k) B(k, j) for i < M, j < NN, with A(i, k) = A[i * sai + k * sak] and
// B(k, j) = B[k * sbk + j * sbj]; block (blockIdx.x, blockIdx.y) owns the 64 x 64 tile at
// (row blockIdx.y * 64, column blockIdx.x * 64). Tiles are loaded with consecutive threads along
// whichever index is contiguous in memory (coalesced), stored k-major in shared memory (padded).
template <typename TA, typename TB, typename TC, int EPI>
__device__ __forceinline__ void gemm_tile(const TA* __restrict__ A, long long sai, long long sak,
                                          const TB* __restrict__ B, long long sbk, long long sbj,
                                          TC* __restrict__ C, long long ldc, long long M,
                                          long long NN, long long K) {
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN + 1];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const long long row0 = static_cast<long long>(blockIdx.y) * BM;
  const long long col0 = static_cast<long long>(blockIdx.x) * BN;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (long long k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
    for (int q = 0; q < (BM * BK) / GEMM_THREADS; ++q) {
      const int e = tid + q * GEMM_THREADS;
      const int i = sak == 1 ? e / BK : e % BM;
      const int k = sak == 1 ? e % BK : e / BM;
      const long long gi = row0 + i, gk = k0 + k;
      As[k][i] = gi < M && gk < K ? Elem<TA>::load(A + gi * sai + gk * sak) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < (BN * BK) / GEMM_THREADS; ++q) {
      const int e = tid + q * GEMM_THREADS;
      const int j = sbj == 1 ? e % BN : e / BK;
      const int k = sbj == 1 ? e / BN : e % BK;
      const long long gj = col0 + j, gk = k0 + k;
      Bs[k][j] = gj < NN && gk < K ? Elem<TB>::load(B + gk * sbk + gj * sbj) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long r = row0 + ty + 16 * i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long c = col0 + tx + 16 * j;
      if (c >= NN) continue;
      if constexpr (EPI == STORE_F32) C[r * ldc + c] = acc[i][j];
      else if constexpr (EPI == ACCUMULATE_F32) C[r * ldc + c] += acc[i][j];
      else Elem<TC>::store(C + r * ldc + c, acc[i][j]);
    }
  }
}

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == neg_inf()) return;
  s = s * expf(m - mm) + s2 * expf(m2 - mm);
  m = mm;
}

__device__ __forceinline__ double block_sum_1024(double v) {
  __shared__ double part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < 32; ++w) total += part[w];
  __syncthreads();
  return total;  // every thread: the same bits
}

}  // namespace

// Chunk logits: L[n, j] = h[n, :] . W[c0 + j, :] for j < cols; grid (ceil(cols / 64), ceil(N / 64)).
#define FLCE_LOGITS(NAME, T)                                                                    \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const T* __restrict__ h, const T* __restrict__ W, float* __restrict__ L, long long N,   \
       long long H, long long CW, long long c0, long long cols) {                              \
    gemm_tile<T, T, float, STORE_F32>(h, H, 1, W + c0 * H, 1, H, L, CW, N, cols, H);           \
  }
// dh[N, H] += G[N, cols] @ W[c0:c0 + cols, :]; grid (ceil(H / 64), ceil(N / 64)).
#define FLCE_DHIDDEN(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const float* __restrict__ L, const T* __restrict__ W, float* __restrict__ dh,          \
       long long N, long long H, long long CW, long long c0, long long cols) {                \
    gemm_tile<float, T, float, ACCUMULATE_F32>(L, CW, 1, W + c0 * H, H, 1, dh, H, N, H, cols); \
  }
// dweight[c0 + j, :] = sum_n G[n, j] h[n, :]; grid (ceil(H / 64), ceil(cols / 64)).
#define FLCE_DWEIGHT(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const float* __restrict__ L, const T* __restrict__ h, T* __restrict__ dW, long long N,  \
       long long H, long long CW, long long c0, long long cols) {                             \
    gemm_tile<float, T, T, STORE_T>(L, 1, CW, h, H, 1, dW + c0 * H, H, cols, H, N);            \
  }
#define FLCE_OUT(NAME, T)                                                                       \
  extern "C" __global__ void __launch_bounds__(256)                                           \
  NAME(const float* __restrict__ dh, T* __restrict__ dhidden, long long total) {              \
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;        \
    if (i < total) Elem<T>::store(dhidden + i, dh[i]);                                         \
  }

FLCE_LOGITS(flce_logits_bf16, __nv_bfloat16)
FLCE_LOGITS(flce_logits_f16, __half)
FLCE_LOGITS(flce_logits_f32, float)
FLCE_DHIDDEN(flce_dhidden_bf16, __nv_bfloat16)
FLCE_DHIDDEN(flce_dhidden_f16, __half)
FLCE_DHIDDEN(flce_dhidden_f32, float)
FLCE_DWEIGHT(flce_dweight_bf16, __nv_bfloat16)
FLCE_DWEIGHT(flce_dweight_f16, __half)
FLCE_DWEIGHT(flce_dweight_f32, float)
FLCE_OUT(flce_dhidden_out_bf16, __nv_bfloat16)
FLCE_OUT(flce_dhidden_out_f16, __half)
FLCE_OUT(flce_dhidden_out_f32, float)

// Per token (a warp each, 8 per block): the chunk's online (max, sum of exp) merged into the
// running pair (m, s) (started at c0 == 0), and the target's logit when the target is in the chunk.
extern "C" __global__ void __launch_bounds__(256)
flce_stats(const float* __restrict__ L, const long long* __restrict__ targets,
           float* __restrict__ m, float* __restrict__ s, float* __restrict__ tgt, long long N,
           long long CW, long long c0, long long cols) {
  const long long r = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= N) return;  // whole warps leave together
  const float* __restrict__ row = L + r * CW;
  float lm = neg_inf(), ls = 0.0f;
  for (long long j = lane; j < cols; j += 32) combine(lm, ls, row[j], 1.0f);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, lm, o), s2 = __shfl_xor_sync(0xffffffffu, ls, o);
    combine(lm, ls, m2, s2);
  }
  if (lane == 0) {
    if (c0 == 0) {
      m[r] = lm;
      s[r] = ls;
      tgt[r] = 0.0f;
    } else {
      float pm = m[r], ps = s[r];
      combine(pm, ps, lm, ls);
      m[r] = pm;
      s[r] = ps;
    }
    const long long t = targets[r];
    if (t >= c0 && t < c0 + cols) tgt[r] = row[t - c0];
  }
}

// One block of 1024: lse[n] = m + log(s) written over m, C = the counted tokens (into count[0]),
// loss = sum over counted tokens of (lse - target logit) / C, in a fixed order in float64.
extern "C" __global__ void __launch_bounds__(1024)
flce_finish(float* __restrict__ m, const float* __restrict__ s, const float* __restrict__ tgt,
            const long long* __restrict__ targets, float* __restrict__ count,
            float* __restrict__ loss, long long N) {
  double c = 0.0, total = 0.0;
  for (long long n = threadIdx.x; n < N; n += 1024) {
    const float lse = m[n] + logf(s[n]);
    m[n] = lse;
    if (targets[n] != -100) {
      c += 1.0;
      total += static_cast<double>(lse - tgt[n]);
    }
  }
  c = block_sum_1024(c);
  total = block_sum_1024(total);
  if (threadIdx.x == 0) {
    count[0] = static_cast<float>(c);
    loss[0] = static_cast<float>(total / c);
  }
}

// G over the chunk in place: (exp(L - lse) - [c0 + j == target]) / C for counted tokens, 0 for
// ignored ones; grid (ceil(cols / 256), N).
extern "C" __global__ void __launch_bounds__(256)
flce_grad(float* __restrict__ L, const long long* __restrict__ targets,
          const float* __restrict__ lse, const float* __restrict__ count, long long CW,
          long long c0, long long cols) {
  const long long j = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long r = blockIdx.y;
  if (j >= cols) return;
  const long long t = targets[r];
  float* p = L + r * CW + j;
  *p = t == -100 ? 0.0f : (expf(*p - lse[r]) - (c0 + j == t ? 1.0f : 0.0f)) / count[0];
}
