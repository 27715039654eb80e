// Fused linear + cross-entropy (LM head, mean loss, dhidden and dweight) for H200 (sm_90a),
// chunked over the vocabulary so the [N, V] logits never exist: a [N, min(V, 8192)] float32
// chunk workspace, a float32 [N, H] dhidden accumulator and three floats per token.
//
// Variant mma_sync: bf16 and fp16 GEMMs on the tensor cores through mma.sync.m16n8k16 (float32
// accumulators; 128 x 128 block tiles, K in steps of 32 through shared memory, eight warps of
// 64 x 32, the next tile's global loads in flight while the current one is multiplied). The
// float32 G enters the two gradient GEMMs as two T parts (hi + lo, two MMAs each: G rounded to T
// once fails the float32 tolerance of the gradients by 1.5-5x), so those cost twice the logits
// GEMM; h and W are exact in T. float32 cases use
// the plain tiled SIMT kernel (64 x 64 tiles). Not wgmma/TMA: a straightforward tensor-core path
// whose fragment layouts the CUDA emulation models (tests/support/cuda_emulation.h), so the
// whole kernel runs there; its speed is well below the H200's dense bf16 peak.
// Launches (launch.yaml, one set per 8192-column chunk c0, the recipe unrolls the chunks up to
// V = 262144):
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

// ---- tensor-core GEMM (bf16 / fp16 operands, float32 accumulators) ---------------------------
constexpr int TBM = 128, TBN = 128, TBK = 32, TPAD = 8, TLD = TBK + TPAD;  // smem row: 80 bytes
constexpr int TLOADS = TBM * TBK / GEMM_THREADS;                          // 16 per operand

template <typename T> struct IsHalf { static constexpr bool value = false; };
template <> struct IsHalf<__half> { static constexpr bool value = true; };

template <typename T> __device__ __forceinline__ unsigned short to_bits(float v);
template <> __device__ __forceinline__ unsigned short to_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <> __device__ __forceinline__ unsigned short to_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

// d += a * b for one m16n8k16 tile (fragment layouts: tests/support/cuda_emulation.h).
template <typename T>
__device__ __forceinline__ void mma16816(float* d, const unsigned* a, const unsigned* b) {
#ifdef __CUDA_ARCH__
  if constexpr (IsHalf<T>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  emu_mma_m16n8k16(d, a, b, IsHalf<T>::value);
#endif
}

// One operand tile, rows [r0, r0 + 128) x k [k0, k0 + 32) of X(r, k) = X[r * sr + k * sk], read
// with consecutive threads along the contiguous index (KC: k, sk == 1; else r, sr == 1) and
// rounded to T (zero outside [R, K)), two values per 32-bit register until the shared store.
// SPLIT (a float32 operand, G, scaled by split_scale first): also the rounding error as a second
// T tile, so hi + lo carries
// G to about 2^-16 (bf16) and the GEMM multiplies both (G rounded to bf16 alone lost the
// float32 tolerance of dhidden and dweight by 1.5-5x under the emulation).
// Thread e = tid + 256 q takes (r, k) = (e / 32, e % 32) when KC, else (e % 128, e / 128).
// G's entries are at most 1 / C and mostly near 1 / (V C): fp16 would hold them as subnormals, so
// a split operand is scaled by 2^12 (exactly; undone in the epilogue), which keeps hi and lo normal
// and below fp16's 65504. bf16 has float32's exponent range and needs no scale.
template <typename T> __device__ __forceinline__ float split_scale() {
  return IsHalf<T>::value ? 4096.0f : 1.0f;
}

template <typename T, typename TX, bool KC, bool SPLIT>
__device__ __forceinline__ void tile_load(const TX* __restrict__ X, long long sr, long long sk,
                                          long long r0, long long k0, long long R, long long K,
                                          unsigned* v, unsigned* lo) {
  const int tid = threadIdx.x;
  const long long r = r0 + (KC ? tid / TBK : tid % TBM);
  const long long k = k0 + (KC ? tid % TBK : tid / TBM);
  const TX* p = X + r * sr + k * sk;
  const long long step = KC ? (GEMM_THREADS / TBK) * sr : (GEMM_THREADS / TBM) * sk;
#pragma unroll
  for (int q = 0; q < TLOADS; ++q) {
    const long long rq = KC ? r + q * (GEMM_THREADS / TBK) : r;
    const long long kq = KC ? k : k + q * (GEMM_THREADS / TBM);
    float x = rq < R && kq < K ? Elem<TX>::load(p + q * step) : 0.0f;
    if constexpr (SPLIT) x *= split_scale<T>();
    const unsigned bits = to_bits<T>(x);
    v[q / 2] = q % 2 ? (v[q / 2] | (bits << 16)) : bits;
    if constexpr (SPLIT) {  // the rounding error of x as a second T: x = hi + lo within T's 2^-2p
      const unsigned lbits = to_bits<T>(x - Elem<T>::bits(static_cast<unsigned short>(bits)));
      lo[q / 2] = q % 2 ? (lo[q / 2] | (lbits << 16)) : lbits;
    }
  }
}

// The loaded tile into a [128][TLD] shared tile, row-major in k.
template <typename T, bool KC>
__device__ __forceinline__ void tile_store(unsigned short (*S)[TLD], const unsigned* v) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int q = 0; q < TLOADS; ++q) {
    const int r = KC ? tid / TBK + q * (GEMM_THREADS / TBK) : tid % TBM;
    const int k = KC ? tid % TBK : tid / TBM + q * (GEMM_THREADS / TBM);
    S[r][k] = static_cast<unsigned short>(q % 2 ? v[q / 2] >> 16 : v[q / 2] & 0xffffu);
  }
}

__device__ __forceinline__ unsigned pair_at(const unsigned short (*S)[TLD], int r, int k) {
  return *reinterpret_cast<const unsigned*>(&S[r][k]);  // k even: 4-byte aligned (TLD even)
}

// C[i, j] (+)= sum_k A(i, k) B(k, j) as gemm_tile, with 128 x 128 block tiles on the tensor cores;
// operands are rounded to T on their way into shared memory. AKC / BKC: A's / B's k index is the
// contiguous one (sak == 1 / sbk == 1), else its row index is (sai == 1 / sbj == 1).
template <typename T, typename TA, typename TB, typename TC, int EPI, bool AKC, bool BKC,
          bool SPLIT>
__device__ __forceinline__ void gemm_tc(const TA* __restrict__ A, long long sai, long long sak,
                                        const TB* __restrict__ B, long long sbk, long long sbj,
                                        TC* __restrict__ C, long long ldc, long long M,
                                        long long NN, long long K) {
  __shared__ unsigned As[TBM * TLD / 2];  // 32-bit words: 4-byte aligned pairs
  __shared__ unsigned Bs[TBN * TLD / 2];  // B stored [n][k]
  __shared__ unsigned Al[SPLIT ? TBM * TLD / 2 : 2];  // A's low parts (SPLIT)
  unsigned short (*SA)[TLD] = reinterpret_cast<unsigned short (*)[TLD]>(As);
  unsigned short (*SL)[TLD] = reinterpret_cast<unsigned short (*)[TLD]>(Al);
  unsigned short (*SB)[TLD] = reinterpret_cast<unsigned short (*)[TLD]>(Bs);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32;
  const long long row0 = static_cast<long long>(blockIdx.y) * TBM;
  const long long col0 = static_cast<long long>(blockIdx.x) * TBN;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
  unsigned va[TLOADS / 2], vl[SPLIT ? TLOADS / 2 : 1], vb[TLOADS / 2];
  // B(k, j) = B[k * sbk + j * sbj] is loaded as rows j of k: X(r = j, k) with (sr, sk) = (sbj, sbk)
  tile_load<T, TA, AKC, SPLIT>(A, sai, sak, row0, 0, M, K, va, vl);
  tile_load<T, TB, BKC, false>(B, sbj, sbk, col0, 0, NN, K, vb, nullptr);
  for (long long k0 = 0; k0 < K; k0 += TBK) {
    tile_store<T, AKC>(SA, va);
    if constexpr (SPLIT) tile_store<T, AKC>(SL, vl);
    tile_store<T, BKC>(SB, vb);
    __syncthreads();
    if (k0 + TBK < K) {  // the next tile's loads fly while this one is multiplied
      tile_load<T, TA, AKC, SPLIT>(A, sai, sak, row0, k0 + TBK, M, K, va, vl);
      tile_load<T, TB, BKC, false>(B, sbj, sbk, col0, k0 + TBK, NN, K, vb, nullptr);
    }
#pragma unroll
    for (int kk = 0; kk < TBK; kk += 16) {
      unsigned af[4][4], bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = wm + i * 16 + g;
        af[i][0] = pair_at(SA, r, kk + 2 * t);
        af[i][1] = pair_at(SA, r + 8, kk + 2 * t);
        af[i][2] = pair_at(SA, r, kk + 2 * t + 8);
        af[i][3] = pair_at(SA, r + 8, kk + 2 * t + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = wn + j * 8 + g;
        bf[j][0] = pair_at(SB, n, kk + 2 * t);
        bf[j][1] = pair_at(SB, n, kk + 2 * t + 8);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma16816<T>(acc[i][j], af[i], bf[j]);
      if constexpr (SPLIT) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = wm + i * 16 + g;
          af[i][0] = pair_at(SL, r, kk + 2 * t);
          af[i][1] = pair_at(SL, r + 8, kk + 2 * t);
          af[i][2] = pair_at(SL, r, kk + 2 * t + 8);
          af[i][3] = pair_at(SL, r + 8, kk + 2 * t + 8);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) mma16816<T>(acc[i][j], af[i], bf[j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const long long r = row0 + wm + i * 16 + g + (c >= 2 ? 8 : 0);
        const long long n = col0 + wn + j * 8 + 2 * t + (c & 1);
        if (r >= M || n >= NN) continue;
        const float v = SPLIT ? acc[i][j][c] * (1.0f / split_scale<T>()) : acc[i][j][c];
        if constexpr (EPI == STORE_F32) C[r * ldc + n] = v;
        else if constexpr (EPI == ACCUMULATE_F32) C[r * ldc + n] += v;
        else Elem<TC>::store(C + r * ldc + n, v);
      }
}

// The GEMM of a dtype: the tensor cores for bf16 / fp16, the SIMT tiles for float32 (the recipe
// sizes the grid by the matching tile: 128 for 2-byte T, 64 for float32).
template <typename T, typename TA, typename TB, typename TC, int EPI, bool AKC, bool BKC,
          bool SPLIT>
__device__ __forceinline__ void gemm(const TA* __restrict__ A, long long sai, long long sak,
                                     const TB* __restrict__ B, long long sbk, long long sbj,
                                     TC* __restrict__ C, long long ldc, long long M, long long NN,
                                     long long K) {
  if constexpr (sizeof(T) == 2) gemm_tc<T, TA, TB, TC, EPI, AKC, BKC, SPLIT>(A, sai, sak, B, sbk, sbj, C, ldc, M, NN, K);
  else gemm_tile<TA, TB, TC, EPI>(A, sai, sak, B, sbk, sbj, C, ldc, M, NN, K);
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

// Grids in tiles of 128 (bf16 / fp16) or 64 (float32), columns first.
// Chunk logits: L[n, j] = h[n, :] . W[c0 + j, :] for j < cols; grid (cols tiles, N tiles).
#define FLCE_LOGITS(NAME, T)                                                                    \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const T* __restrict__ h, const T* __restrict__ W, float* __restrict__ L, long long N,   \
       long long H, long long CW, long long c0, long long cols) {                              \
    gemm<T, T, T, float, STORE_F32, true, true, false>(h, H, 1, W + c0 * H, 1, H, L, CW, N, cols, H);                   \
  }
// dh[N, H] += G[N, cols] @ W[c0:c0 + cols, :]; grid (H tiles, N tiles).
#define FLCE_DHIDDEN(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const float* __restrict__ L, const T* __restrict__ W, float* __restrict__ dh,          \
       long long N, long long H, long long CW, long long c0, long long cols) {                \
    gemm<T, float, T, float, ACCUMULATE_F32, true, false, true>(L, CW, 1, W + c0 * H, H, 1, dh, H, N, H, cols); \
  }
// dweight[c0 + j, :] = sum_n G[n, j] h[n, :]; grid (H tiles, cols tiles).
#define FLCE_DWEIGHT(NAME, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(GEMM_THREADS)                                  \
  NAME(const float* __restrict__ L, const T* __restrict__ h, T* __restrict__ dW, long long N,  \
       long long H, long long CW, long long c0, long long cols) {                             \
    gemm<T, float, T, T, STORE_T, false, false, true>(L, 1, CW, h, H, 1, dW + c0 * H, H, cols, H, N);                    \
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
