// gemv variant for sm_90a (timed beside the committed kernel: h200_run.sh variants:gemv): the
// tensor-core kernel of variants/gemv/mma_wb made persistent and software-pipelined, so weight
// loads stay in flight across K iterations and across tiles. Not run on hardware yet.
//
// mma_wb's blocks (one 8-row tile each) issue one batch of loads per warp and iteration, wait a
// DRAM round trip, compute, and at the end of the tile synchronise, reduce and exit: between
// batches a warp has nothing in flight. Here (B <= 8, gemv_mma_pipe) a block of W warps stays
// resident (grid = as many blocks as fit the 132 SMs) and walks tiles blockIdx.x,
// blockIdx.x + gridDim.x, ...; each warp walks its (tile, slab group) steps with two register
// buffers of 8 weight vectors per lane: the loads of step i + 1 are issued before step i is
// consumed, also when step i + 1 belongs to the next tile, so the shared-memory sum of a tile
// (double-buffered: one __syncthreads per tile) runs while the next tile's weights are loading.
// About 8 KB per warp in flight, 128 KB per SM at 16 warps.
//
// Operands as in mma_wb: mma.sync.m16n8k16 with 8 weight rows as the B operand (lane g = lane / 4,
// t = lane % 4 loads W[n0 + g][k0 + 8t .. +8] and uses words {0, 1} / {2, 3} as the B registers
// of two mmas; a dot product's k order is free as long as A agrees), activations x[b0 + g][same
// k] as A's row g; float32 accumulators summed over the warps in warp order (deterministic).
// B > 8 (beyond the spec's decode sizes): mma_wb's kernel (gemv_mma_b16, 16 batch rows per pass).
// K % 8 != 0 (rows not 16-byte aligned): gemv_sca, a warp per row with scalar loads.
#include <cuda_bf16.h>

namespace {

constexpr int kMaxWarps = 16;
constexpr int kU = 8;   // slabs (weight vectors per lane) per iteration

// the weight is streamed once: keep it out of L1 (the activations live there)
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
#ifdef __CUDA_ARCH__
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
#else
  return __ldg(p);
#endif
}

// d += A (16 x 16: registers a0..a3) * B (16 x 8: b0, b1), float32 accumulators
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  const unsigned a[4] = {a0, a1, a2, a3}, b[2] = {b0, b1};
  emu_mma_m16n8k16(d, a, b, false);
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// one slab: weight vector wv (row g), activation vectors xl (batch row g), xh (batch row g + 8)
template <bool kHigh>
__device__ __forceinline__ void slab(float (&d)[4], const uint4& wv, const uint4& xl,
                                     const uint4& xh) {
  mma_bf16(d, xl.x, kHigh ? xh.x : 0u, xl.y, kHigh ? xh.y : 0u, wv.x, wv.y);
  mma_bf16(d, xl.z, kHigh ? xh.z : 0u, xl.w, kHigh ? xh.w : 0u, wv.z, wv.w);
}

// kHigh: batch rows b0 + 8 .. b0 + 15 in A's rows 8..15 (B > 8); else those rows are zero
template <bool kHigh>
__device__ __forceinline__ void gemv_mma(const __nv_bfloat16* __restrict__ x,
                                         const __nv_bfloat16* __restrict__ w,
                                         __nv_bfloat16* __restrict__ y, long long B, long long N,
                                         long long K, unsigned fence) {
  __shared__ float red[kMaxWarps][4][32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const long long n0 = static_cast<long long>(blockIdx.x) * 8;
  const long long b0 = static_cast<long long>(blockIdx.y) * 16;
  const int nb = static_cast<int>(B - b0 < 16 ? B - b0 : 16);
  const long long k8 = K >> 3;
  const long long row = n0 + g < N ? n0 + g : N - 1;
  // lanes of batch rows past B read row b0 and use zero activations (never stored)
  const bool lo_ok = g < nb, hi_ok = kHigh && g + 8 < nb;
  const long long first = static_cast<long long>(warp) * kU * 4 + t;   // this lane's first vector
  const uint4* pw = reinterpret_cast<const uint4*>(w) + row * k8 + first;
  const uint4* pl = reinterpret_cast<const uint4*>(x) + (b0 + (lo_ok ? g : 0)) * k8 + first;
  const uint4* ph = reinterpret_cast<const uint4*>(x) + (b0 + (hi_ok ? g + 8 : 0)) * k8 + first;
  const long long step = static_cast<long long>(nw) * kU * 4;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  long long s0 = static_cast<long long>(warp) * kU;
  // whole iterations: all kU slabs inside K, no predicates
  for (; (s0 + kU) * 4 <= k8; s0 += static_cast<long long>(nw) * kU, pw += step, pl += step, ph += step) {
    uint4 wv[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) wv[u] = ld_stream(pw + 4 * u);
    // every weight load is issued before the first mma: ptxas otherwise sinks the loads consumed
    // last below the first mma, which waits a whole DRAM round trip before issuing them. The
    // first mma's activation operand takes an OR of all loaded vectors AND `fence` (0, from the
    // recipe, unknown to the compiler): a true dependency on every load, for 4 logic ops.
    unsigned dep = 0u;
#pragma unroll
    for (int u = 0; u < kU; ++u) dep |= wv[u].x;
    dep &= fence;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      uint4 xl = __ldg(pl + 4 * u), xh = zero;
      if (!lo_ok) xl = zero;
      if (u == 0) xl.x |= dep;
      if (kHigh) {
        xh = __ldg(ph + 4 * u);
        if (!hi_ok) xh = zero;
      }
      slab<kHigh>(d, wv[u], xl, xh);
    }
  }
  // the last, partial iteration: at most one per warp (every later one starts past K)
  if (s0 * 4 < k8) {
    uint4 wv[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) wv[u] = (s0 + u) * 4 + t < k8 ? ld_stream(pw + 4 * u) : zero;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const bool in = (s0 + u) * 4 + t < k8;
      const uint4 xl = in && lo_ok ? __ldg(pl + 4 * u) : zero;
      const uint4 xh = kHigh && in && hi_ok ? __ldg(ph + 4 * u) : zero;
      slab<kHigh>(d, wv[u], xl, xh);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][i][lane] = d[i];
  __syncthreads();
  // output (batch b, row r) is D[b][r]: register (b >= 8 ? 2 : 0) + (r & 1) of lane (b & 7) * 4 + r / 2
  for (int o = tid; o < 128; o += blockDim.x) {
    const int r = o & 7, b = o >> 3;
    const int l = (b & 7) * 4 + (r >> 1), i = (b >> 3) * 2 + (r & 1);
    float s = 0.f;
    for (int q = 0; q < nw; ++q) s += red[q][i][l];
    if (b < nb && n0 + r < N) y[(b0 + b) * N + n0 + r] = __float2bfloat16_rn(s);
  }
}

}  // namespace

// B > 8 (beyond the spec's decode sizes): two activation vectors per slab, registers uncapped
extern "C" __global__ void __launch_bounds__(512, 1)
gemv_mma_b16_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                  __nv_bfloat16* __restrict__ y, long long B, long long N, long long K,
                 unsigned fence) {
  gemv_mma<true>(x, w, y, B, N, K, fence);
}

// ---- B <= 8: persistent, two register buffers of weight vectors ------------------------------
namespace {

// the kU weight vectors of one (tile, slab group) step; the partial last group of a row
// (K % (32 kU) != 0) is predicated, vectors past K are zero
__device__ __forceinline__ void load_step(uint4 (&wv)[kU], const uint4* __restrict__ w4,
                                          long long tile, long long s0, long long N, long long k8,
                                          int g, int t) {
  const long long row = tile * 8 + g < N ? tile * 8 + g : N - 1;
  const uint4* p = w4 + row * k8 + s0 * 4 + t;
  if ((s0 + kU) * 4 <= k8) {
#pragma unroll
    for (int u = 0; u < kU; ++u) wv[u] = ld_stream(p + 4 * u);
  } else {
#pragma unroll
    for (int u = 0; u < kU; ++u)
      wv[u] = (s0 + u) * 4 + t < k8 ? ld_stream(p + 4 * u) : make_uint4(0u, 0u, 0u, 0u);
  }
}

__device__ __forceinline__ void gemv_pipe(const __nv_bfloat16* __restrict__ x,
                                          const __nv_bfloat16* __restrict__ w,
                                          __nv_bfloat16* __restrict__ y, long long B, long long N,
                                          long long K) {
  __shared__ float red[2][kMaxWarps][4][32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int nb = static_cast<int>(B < 8 ? B : 8);
  const long long k8 = K >> 3, tiles = (N + 7) >> 3;
  const long long first = static_cast<long long>(warp) * kU, stride = static_cast<long long>(nw) * kU;
  const uint4* w4 = reinterpret_cast<const uint4*>(w);
  // lanes of batch rows past B read row 0 and use zero activations (never stored)
  const bool x_ok = g < nb;
  const uint4* px = reinterpret_cast<const uint4*>(x) + (x_ok ? g : 0) * k8 + t;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 cur[kU];
  long long tile = blockIdx.x;
  if (tile < tiles && first * 4 < k8) load_step(cur, w4, tile, first, N, k8, g, t);
  for (int parity = 0; tile < tiles; tile += gridDim.x, parity ^= 1) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    for (long long s0 = first; s0 * 4 < k8; s0 += stride) {
      // the next step's loads first: the rest of this row, else the next tile's first group
      long long ns0 = s0 + stride, ntile = tile;
      if (ns0 * 4 >= k8) ns0 = first, ntile = tile + gridDim.x;
      uint4 nxt[kU];
      if (ntile < tiles) load_step(nxt, w4, ntile, ns0, N, k8, g, t);
      else
#pragma unroll
        for (int u = 0; u < kU; ++u) nxt[u] = zero;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const bool in = (s0 + u) * 4 + t < k8;
        const uint4 xv = in && x_ok ? __ldg(px + (s0 + u) * 4) : zero;
        slab<false>(d, cur[u], xv, zero);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) cur[u] = nxt[u];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) red[parity][warp][i][lane] = d[i];
    __syncthreads();   // red[parity] is rewritten two tiles later, after another barrier
    // output (batch b, row r) is D[b][r]: register r & 1 of lane b * 4 + r / 2
    const long long n0 = tile * 8;
    for (int o = tid; o < 64; o += blockDim.x) {
      const int r = o & 7, b = o >> 3, l = b * 4 + (r >> 1), i = r & 1;
      float s = 0.f;
      for (int q = 0; q < nw; ++q) s += red[parity][q][i][l];
      if (b < nb && n0 + r < N) y[b * N + n0 + r] = __float2bfloat16_rn(s);
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(512, 1)
gemv_mma_pipe_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                   __nv_bfloat16* __restrict__ y, long long B, long long N, long long K) {
  gemv_pipe(x, w, y, B, N, K);
}

// any K: a warp per row, coalesced 2-byte loads, batch rows in chunks of 8
extern "C" __global__ void __launch_bounds__(256)
gemv_sca_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
              __nv_bfloat16* __restrict__ y, long long B, long long N, long long K) {
  const long long n = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (n >= N) return;
  const __nv_bfloat16* wr = w + n * K;
  for (long long b0 = 0; b0 < B; b0 += 8) {
    const int nb = static_cast<int>(B - b0 < 8 ? B - b0 : 8);
    float acc[8];
#pragma unroll
    for (int b = 0; b < 8; ++b) acc[b] = 0.f;
    for (long long k = lane; k < K; k += 32) {
      const float wf = __bfloat162float(wr[k]);
#pragma unroll
      for (int b = 0; b < 8; ++b)
        if (b < nb) acc[b] = fmaf(__bfloat162float(x[(b0 + b) * K + k]), wf, acc[b]);
    }
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      if (b < nb) {
        const float s = warp_sum(acc[b]);
        if (lane == 0) y[(b0 + b) * N + n] = __float2bfloat16_rn(s);
      }
    }
  }
}
