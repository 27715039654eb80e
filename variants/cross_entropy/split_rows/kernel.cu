// Mean token cross-entropy for H200 (sm_90a), NVRTC-compiled, launched by regen's recipe.
//
// Pass 1 (ce_rows_*): one row of logits per thread group (a warp for short rows, a whole block
// for long ones). Each thread streams its share of the row with 16-byte loads (a scalar head and
// tail per row handle rows that do not start on a 16-byte boundary, e.g. V = 50257) and keeps an
// online logsumexp state (running max m, sum s of exp(x - m)) in float32, rescaling s once per
// chunk of loads. The states are merged across the group, and the row's loss
// m + log(s) - logits[target] (0 for ignore_index -100) goes to a float32 scratch row_loss[N].
// Pass 2 (ce_mean): one block sums row_loss in a fixed order in float64 and divides by the number
// of counted tokens: deterministic, no atomics.
// Few long rows (V > 16384, N <= 132: decoding, a handful of tokens): one block per row would
// leave most SMs idle (a single token reads its 256 KB row on one SM), so each row is split over
// S blocks (ce_split_rows: grid N x S, S chosen so that N x S fills two waves of 132 SMs). A block
// leaves the (max, sum) state of its part of the row in `partial`; ce_split_mean merges a row's S
// states in a fixed order, subtracts the target's logit and takes the same deterministic mean.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

constexpr long long IGNORE_INDEX = -100;
#define NEG_INF (-__int_as_float(0x7f800000))

// 16 bytes of storage -> float32 lanes; exact for every supported dtype.
template <typename T> struct Lanes;

template <> struct Lanes<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ float load1(const float* p) { return __ldg(p); }
};

template <> struct Lanes<__nv_bfloat16> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // little endian: the lower half-word is the earlier element
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ float load1(const __nv_bfloat16* p) {
    return __uint_as_float(static_cast<unsigned>(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
  }
};

template <> struct Lanes<__half> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] & 0xffffu)));
      f[2 * k + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] >> 16)));
    }
  }
  static __device__ __forceinline__ float load1(const __half* p) {
    return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
  }
};

constexpr float LOG2E = 1.4426950408889634f;

// exp(x - base) with one ex2.approx.ftz (about 2 ulp; -inf gives +0; results below 2^-126 flush to
// 0). The difference is taken first so that logits of magnitude 1e4 lose no accuracy to the
// rounding of base * log2(e). (__expf would add two multiplies and a compare per element to keep
// denormal results, which a sum of exponentials does not need.)
__device__ __forceinline__ float exp_diff(float x, float base) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((x - base) * LOG2E));
  return y;
#else  // regen's CUDA emulation (tests/support/cuda_emulation.h): the same function in libm
  return exp2f((x - base) * LOG2E);
#endif
}

// Online logsumexp state. `base` is the running max, or 0 while the max is still -inf, so that
// exp(x - base) is 0 for x = -inf and never inf - inf = NaN.
__device__ __forceinline__ float safe_base(float m) { return m == NEG_INF ? 0.0f : m; }

template <int K>
__device__ __forceinline__ void absorb(float& m, float& s, const float* f) {
  float cm = f[0];
#pragma unroll
  for (int k = 1; k < K; ++k) cm = fmaxf(cm, f[k]);
  const float mn = fmaxf(m, cm);
  const float base = safe_base(mn);
  float acc = s * exp_diff(m, base);
#pragma unroll
  for (int k = 0; k < K; ++k) acc += exp_diff(f[k], base);
  m = mn;
  s = acc;
}

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  const float base = safe_base(mn);
  s = s * exp_diff(m, base) + s2 * exp_diff(m2, base);
  m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
    merge(m, s, m2, s2);
  }
}

// One thread's share of a row: elements lane, lane + TPR, ... in 16-byte vectors.
template <typename T, int TPR, int UNROLL>
__device__ __forceinline__ void scan_row(const T* __restrict__ row, long long V, int lane,
                                         float& m, float& s) {
  using L = Lanes<T>;
  constexpr int VEC = L::N;
  m = NEG_INF;
  s = 0.0f;
  // scalar head up to the first 16-byte boundary (fewer than VEC elements)
  const unsigned long long misalign = reinterpret_cast<unsigned long long>(row) & 15ull;
  long long head = misalign ? static_cast<long long>((16ull - misalign) / sizeof(T)) : 0;
  if (head > V) head = V;
  if (lane < head) {
    const float f = L::load1(row + lane);
    absorb<1>(m, s, &f);
  }
  const long long nvec = (V - head) / VEC;
  const uint4* __restrict__ body = reinterpret_cast<const uint4*>(row + head);
  long long i = lane;
  for (; i + (UNROLL - 1) * TPR < nvec; i += UNROLL * TPR) {
    uint4 u[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) u[k] = __ldcs(body + i + k * TPR);
    float f[UNROLL * VEC];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) L::unpack(u[k], f + k * VEC);
    absorb<UNROLL * VEC>(m, s, f);
  }
  for (; i < nvec; i += TPR) {
    const uint4 u = __ldcs(body + i);
    float f[VEC];
    L::unpack(u, f);
    absorb<VEC>(m, s, f);
  }
  // scalar tail (fewer than VEC elements)
  const long long t = head + nvec * VEC + lane;
  if (t < V) {
    const float f = L::load1(row + t);
    absorb<1>(m, s, &f);
  }
}

// TPR threads per row, ROWS rows per block. TPR is 32 (a warp) or the whole block (ROWS = 1).
template <typename T, int TPR, int ROWS, int UNROLL>
__device__ __forceinline__ void ce_rows(const T* __restrict__ logits,
                                        const long long* __restrict__ targets,
                                        float* __restrict__ row_loss, long long N, long long V) {
  static_assert(TPR % 32 == 0 && (ROWS == 1 || TPR == 32), "a row is a warp or a whole block");
  constexpr int WARPS = TPR / 32;
  const int lane = threadIdx.x % TPR;
  const long long row = static_cast<long long>(blockIdx.x) * ROWS + threadIdx.x / TPR;
  if (row >= N) return;  // only when ROWS > 1, where no block barrier follows
  const long long target = targets[row];
  if (target == IGNORE_INDEX) {  // uniform over the row's threads
    if (lane == 0) row_loss[row] = 0.0f;
    return;
  }
  const T* __restrict__ x = logits + row * V;
  // fetch the target's logit early so its latency hides behind the row scan
  const float picked = lane == 0 ? Lanes<T>::load1(x + target) : 0.0f;
  float m, s;
  scan_row<T, TPR, UNROLL>(x, V, lane, m, s);
  warp_merge(m, s);
  if constexpr (WARPS > 1) {
    __shared__ float sm[WARPS], ss[WARPS];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
      m = threadIdx.x < WARPS ? sm[threadIdx.x] : NEG_INF;
      s = threadIdx.x < WARPS ? ss[threadIdx.x] : 0.0f;
      warp_merge(m, s);
    }
  }
  if (lane == 0) row_loss[row] = (m + logf(s)) - picked;
}

// Fixed-order float64 sum of the row losses, divided by the number of counted tokens.
template <int BLOCK>
__device__ __forceinline__ void ce_mean(const float* __restrict__ row_loss,
                                        const long long* __restrict__ targets,
                                        float* __restrict__ loss, long long N) {
  double sum = 0.0;
  long long count = 0;
  for (long long i = threadIdx.x; i < N; i += BLOCK) {
    sum += static_cast<double>(row_loss[i]);
    count += targets[i] != IGNORE_INDEX;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    count += __shfl_xor_sync(0xffffffffu, count, off);
  }
  __shared__ double wsum[BLOCK / 32];
  __shared__ long long wcount[BLOCK / 32];
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) { wsum[warp] = sum; wcount[warp] = count; }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    long long counted = 0;
    for (int w = 0; w < BLOCK / 32; ++w) { total += wsum[w]; counted += wcount[w]; }
    loss[0] = static_cast<float>(total / static_cast<double>(counted));
  }
}

// One part of a row for the split path: elements [part * chunk, min(V, (part + 1) * chunk)), where
// chunk is a multiple of 8 elements, so every part but the last starts 16-byte aligned when the row
// does (scan_row handles a head and tail either way). Writes the part's (max, sum).
template <typename T, int BLOCK, int UNROLL>
__device__ __forceinline__ void ce_split_rows(const T* __restrict__ logits,
                                              const long long* __restrict__ targets,
                                              float* __restrict__ partial, long long N,
                                              long long V, long long S) {
  constexpr int WARPS = BLOCK / 32;
  const long long row = blockIdx.x, part = blockIdx.y;
  if (targets[row] == IGNORE_INDEX) return;  // the row is not counted: pass 2 reads nothing of it
  const long long chunk = ((V + S - 1) / S + 7) / 8 * 8;
  const long long begin = part * chunk;
  const long long len = begin < V ? (V - begin < chunk ? V - begin : chunk) : 0;
  float m = NEG_INF, s = 0.0f;
  if (len > 0) scan_row<T, BLOCK, UNROLL>(logits + row * V + begin, len, threadIdx.x, m, s);
  warp_merge(m, s);
  __shared__ float sm[WARPS], ss[WARPS];
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) { sm[warp] = m; ss[warp] = s; }
  __syncthreads();
  if (warp == 0) {
    m = threadIdx.x < WARPS ? sm[threadIdx.x] : NEG_INF;
    s = threadIdx.x < WARPS ? ss[threadIdx.x] : 0.0f;
    warp_merge(m, s);
    if (threadIdx.x == 0) {
      partial[2 * (row * S + part)] = m;
      partial[2 * (row * S + part) + 1] = s;
    }
  }
}

// Pass 2 of the split path: warp w takes rows w, w + WARPS, ...; its lanes merge a row's S states
// (lane k takes parts k, k + 32, ..., then a fixed butterfly), lane 0 adds the row's loss to its
// float64 sum in row order; the warps' sums are added in warp order. Deterministic.
template <typename T, int BLOCK>
__device__ __forceinline__ void ce_split_mean(const T* __restrict__ logits,
                                              const long long* __restrict__ targets,
                                              const float* __restrict__ partial,
                                              float* __restrict__ loss, long long N, long long V,
                                              long long S) {
  constexpr int WARPS = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  double sum = 0.0;
  long long count = 0;
  for (long long row = warp; row < N; row += WARPS) {
    const long long target = targets[row];
    if (target == IGNORE_INDEX) continue;  // uniform over the warp
    const float picked = lane == 0 ? Lanes<T>::load1(logits + row * V + target) : 0.0f;
    float m = NEG_INF, s = 0.0f;
    for (long long k = lane; k < S; k += 32)
      merge(m, s, partial[2 * (row * S + k)], partial[2 * (row * S + k) + 1]);
    warp_merge(m, s);
    if (lane == 0) {
      sum += static_cast<double>((m + logf(s)) - picked);
      ++count;
    }
  }
  __shared__ double wsum[WARPS];
  __shared__ long long wcount[WARPS];
  if (lane == 0) { wsum[warp] = sum; wcount[warp] = count; }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    long long counted = 0;
    for (int w = 0; w < WARPS; ++w) { total += wsum[w]; counted += wcount[w]; }
    loss[0] = static_cast<float>(total / static_cast<double>(counted));
  }
}

}  // namespace

#define CE_SPLIT(SUFFIX, T)                                                                     \
  extern "C" __global__ void __launch_bounds__(256, 4)                                      \
  ce_split_rows_##SUFFIX(const T* __restrict__ logits, const long long* __restrict__ targets,\
                         float* __restrict__ partial, long long N, long long V, long long S) {\
    ce_split_rows<T, 256, 4>(logits, targets, partial, N, V, S);                            \
  }                                                                                         \
  extern "C" __global__ void __launch_bounds__(512, 1)                                      \
  ce_split_mean_##SUFFIX(const T* __restrict__ logits, const long long* __restrict__ targets,\
                         const float* __restrict__ partial, float* __restrict__ loss,        \
                         long long N, long long V, long long S) {                           \
    ce_split_mean<T, 512>(logits, targets, partial, loss, N, V, S);                         \
  }

// few long rows (V > 16384, N <= 132): each row over S blocks
CE_SPLIT(f32, float)
CE_SPLIT(bf16, __nv_bfloat16)
CE_SPLIT(f16, __half)

#define CE_ROWS(NAME, T, TPR, ROWS, UNROLL, MINB)                                              \
  extern "C" __global__ void __launch_bounds__(TPR * ROWS, MINB)                            \
  NAME(const T* __restrict__ logits, const long long* __restrict__ targets,                 \
       float* __restrict__ row_loss, long long N, long long V) {                            \
    ce_rows<T, TPR, ROWS, UNROLL>(logits, targets, row_loss, N, V);                         \
  }

// short rows (V <= 2048): a warp per row, 8 rows per block
CE_ROWS(ce_rows_warp_f32, float, 32, 8, 2, 4)
CE_ROWS(ce_rows_warp_bf16, __nv_bfloat16, 32, 8, 2, 4)
CE_ROWS(ce_rows_warp_f16, __half, 32, 8, 2, 4)
// medium rows (2048 < V <= 16384): 128 threads per row
CE_ROWS(ce_rows_mid_f32, float, 128, 1, 4, 8)
CE_ROWS(ce_rows_mid_bf16, __nv_bfloat16, 128, 1, 4, 8)
CE_ROWS(ce_rows_mid_f16, __half, 128, 1, 4, 8)
// long rows (V > 16384): 512 threads per row, four 16-byte loads in flight per thread
CE_ROWS(ce_rows_block_f32, float, 512, 1, 4, 2)
CE_ROWS(ce_rows_block_bf16, __nv_bfloat16, 512, 1, 4, 2)
CE_ROWS(ce_rows_block_f16, __half, 512, 1, 4, 2)

extern "C" __global__ void __launch_bounds__(1024, 1)
ce_mean_f32(const float* __restrict__ row_loss, const long long* __restrict__ targets,
            float* __restrict__ loss, long long N) {
  ce_mean<1024>(row_loss, targets, loss, N);
}
