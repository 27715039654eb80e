// Backward of LayerNorm for H200 (sm_90a), variant bulkring (timed beside the committed kernel:
// benchmarks/variants.py layernorm_bwd --target h200 committed variants/layernorm_bwd/*). Not run
// on hardware yet.
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, xhat = (x - mean) * rstd
// (mean and rstd as given); dweight and dbias = column sums of dy * xhat and of dy.
//
// The committed kernel's blocks walk their rows one at a time: a row's loads, then its block
// reduction (a barrier) and its dx write, and only then the next row's loads, so each block has
// nothing in flight for most of a row. layernorm_bwd_ring{4096,8192} (16-byte rows, 1024 < N <=
// 8192) move x and dy with the bulk-copy engine instead: each block (256 threads, 2 per SM, or
// 512 threads, 1 per SM) keeps a ring of S stages in dynamic shared memory, each a row of x and a
// row of dy landing on its own mbarrier; thread 0 keeps the block's next S rows in flight
// (cp.async.bulk, two copies per row) and refills a stage right after the block reduction of the
// row it held, so the loads never wait on the threads' reductions or dx writes. The threads keep
// the committed thread -> column mapping (16 elements per thread), read their vectors from the
// stage with 16-byte shared loads, hold the weight of their columns in registers and load rstd
// and mean one row ahead. S (2 to 4) and the shared memory come from the recipe: at most 48 KiB
// of stages per 256-thread block (96 KiB per 512-thread block) unless two stages need more.
// Element-wise rows (N * sizeof(T) % 16 != 0), N <= 1024 and rows over 8192 use the committed
// kernels (layernorm_bwd_r*, layernorm_bwd_long_*), unchanged.
//
// dweight and dbias are deterministic, without atomics: each block sums its rows' dy * xhat and dy
// per column in registers into float32 partial rows of two [blocks, N] workspaces;
// layernorm_bwd_reduce_* sums a column's partials in an order fixed by the block count.
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sums of (u, v): warp shuffles, then one shared array per value. Every warp adds the
// warp partials in the same order, so all threads get the same bits. `red` alternates between two
// halves from one row to the next, so a warp that runs ahead cannot overwrite partials another
// warp has not read yet (the barrier of the next row separates two uses of one half).
template <int THREADS>
__device__ __forceinline__ void block_sum2(float& u, float& v, float (*red)[2][32], int parity) {
  constexpr int WARPS = THREADS / 32;
  u = warp_sum(u);
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    red[parity][0][warp] = u;
    red[parity][1][warp] = v;
  }
  __syncthreads();
  float su = 0.0f, sv = 0.0f;
#pragma unroll
  for (int k = 0; k < WARPS; ++k) {
    su += red[parity][0][k];
    sv += red[parity][1][k];
  }
  u = su;
  v = sv;
}

// VEC consecutive elements at p as float32: one 16-byte load when `vec` (p 16-byte aligned), else
// one element at a time, through the read-only path (L1; streaming loads cost 4-13 % on swiglu).
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, bool vec, float* f) {
  if constexpr (VEC > 1) {
    if (vec) {
      Vec16<T>::unpack(__ldg(reinterpret_cast<const uint4*>(p)), f);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) f[e] = Elem<T>::load(p + e);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* __restrict__ p, bool vec, const float* f) {
  if constexpr (VEC > 1) {
    if (vec) {
      store16(p, Vec16<T>::pack(f));
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) Elem<T>::store(p + e, f[e]);
}

// The row kernel of the backward. LN: LayerNorm (mean given, a_m = mean g, dbias), else RMS norm
// (mean 0, a_m = 0). A block takes rows blockIdx.x, blockIdx.x + gridDim.x, ...; a thread owns the
// columns (c * THREADS + threadIdx.x) * VEC + [0, VEC) for chunks c, the same for every row, so its
// dweight/dbias column partials accumulate across the block's rows without any sharing:
//   REG (N <= CH * THREADS * VEC): xhat and g of a row stay in registers between the row
//     reduction and the dx write (x and dy read once), the column partials too, stored once per
//     block into pw/pb[blockIdx.x, :] at the end;
//   otherwise the row is re-read for dx (from L2) and the partials are read-modify-written in
//     pw/pb[blockIdx.x, :] (zeroed by the recipe), a row at a time.
// The partials are summed over blocks in a fixed order by norm_bwd_reduce: deterministic.
template <typename T, int THREADS, int VEC, int CH, bool REG, bool LN>
__device__ __forceinline__ void norm_bwd_rows(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ dy,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, T* __restrict__ dx,
                                              float* __restrict__ pw, float* __restrict__ pb,
                                              long long M, long long N) {
  __shared__ float red[2][2][32];
  const bool vec = VEC > 1 && aligned16(x) && aligned16(w) && aligned16(dy) && aligned16(dx);
  const float inv_n = 1.0f / static_cast<float>(N);
  float* __restrict__ pwr = pw + static_cast<long long>(blockIdx.x) * N;
  float* __restrict__ pbr = LN ? pb + static_cast<long long>(blockIdx.x) * N : nullptr;
  const long long chunks = REG ? CH : (N + static_cast<long long>(THREADS) * VEC - 1) / (THREADS * VEC);
  float xh[REG ? CH : 1][VEC], g[REG ? CH : 1][VEC], dw[REG ? CH : 1][VEC], db[REG ? CH : 1][VEC];
  if constexpr (REG) {
#pragma unroll
    for (int c = 0; c < CH; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) dw[c][e] = db[c][e] = 0.0f;
  }
  int parity = 0;
  for (long long r = blockIdx.x; r < M; r += gridDim.x, parity ^= 1) {
    const float rs = rstd[r];
    const float mu = LN ? mean[r] : 0.0f;
    const T* __restrict__ xr = x + r * N;
    const T* __restrict__ dyr = dy + r * N;
    float sg = 0.0f, sgx = 0.0f;  // sums of g and of g * xhat over the thread's columns
#pragma unroll
    for (long long c = 0; c < chunks; ++c) {
      const long long col = (c * THREADS + threadIdx.x) * VEC;
      if (col >= N) continue;  // N % VEC == 0 on the vector path: a vector is whole or absent
      const int cr = REG ? static_cast<int>(c) : 0;
      float fx[VEC], fd[VEC], fw[VEC];
      load_vec<T, VEC>(xr + col, vec, fx);
      load_vec<T, VEC>(dyr + col, vec, fd);
      load_vec<T, VEC>(w + col, vec, fw);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float xhat = (fx[e] - mu) * rs, ge = fd[e] * fw[e];
        sg += ge;
        sgx += ge * xhat;
        if constexpr (REG) {
          xh[cr][e] = xhat;
          g[cr][e] = ge;
          dw[cr][e] += fd[e] * xhat;
          if constexpr (LN) db[cr][e] += fd[e];
        } else {
          pwr[col + e] += fd[e] * xhat;
          if constexpr (LN) pbr[col + e] += fd[e];
        }
      }
    }
    block_sum2<THREADS>(sg, sgx, red, parity);
    const float a = LN ? sg * inv_n : 0.0f, cm = sgx * inv_n;
    T* __restrict__ dxr = dx + r * N;
#pragma unroll
    for (long long c = 0; c < chunks; ++c) {
      const long long col = (c * THREADS + threadIdx.x) * VEC;
      if (col >= N) continue;
      float out[VEC];
      if constexpr (REG) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[e] = rs * (g[c][e] - a - xh[c][e] * cm);
      } else {
        float fx[VEC], fd[VEC], fw[VEC];
        load_vec<T, VEC>(xr + col, vec, fx);
        load_vec<T, VEC>(dyr + col, vec, fd);
        load_vec<T, VEC>(w + col, vec, fw);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float xhat = (fx[e] - mu) * rs;
          out[e] = rs * (fd[e] * fw[e] - a - xhat * cm);
        }
      }
      store_vec<T, VEC>(dxr + col, vec, out);
    }
  }
  if constexpr (REG) {
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
      if (col >= N) continue;
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        pwr[col + e] = dw[c][e];
        if constexpr (LN) pbr[col + e] = db[c][e];
      }
    }
  }
}

// ---- variant: rows streamed into shared memory by the bulk-copy engine -------------------------
// Shared-memory barriers and 1-D bulk copies (PTX ISA 8.0, sm_90); the `#else` branches call the
// CUDA emulation's models (tests/support/cuda_emulation.h).
__device__ __forceinline__ unsigned saddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  emu_mbar_init(bar, count);
#endif
}
// the initialised barriers become visible to the async proxy (the bulk-copy engine)
__device__ __forceinline__ void mbar_fence_init() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  emu_mbar_arrive_expect_tx(bar, bytes);
#endif
}
// wait until the phase with this parity has completed
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
#else
  while (!emu_mbar_try_wait(bar, parity)) {
  }
#endif
}
// 1-D bulk copy global -> shared; addresses and size multiples of 16 bytes
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes,
                                          unsigned bar) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
#else
  emu_bulk_load(dst, src, bytes, bar);
#endif
}

// A block's column partials (VEC consecutive columns per chunk) into its row p of a [G, N]
// workspace: 16-byte stores where the row is 16-byte aligned (the workspace is, and N % 4 == 0 on
// every 16-byte row path), else element stores.
template <typename T, int THREADS, int CH>
__device__ __forceinline__ void store_partials(float* __restrict__ p,
                                               const float (&v)[CH][Vec16<T>::N], long long N) {
  constexpr int VEC = Vec16<T>::N;
  const bool v16 = aligned16(p);
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
    if (col >= N) continue;
    if (v16) {
#pragma unroll
      for (int e = 0; e < VEC; e += 4) store16(p + col + e, Vec16<float>::pack(&v[c][e]));
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) p[col + e] = v[c][e];
    }
  }
}

// Stage s of the ring: x's row at byte kRingHead + 2 s N sizeof(T) of the dynamic shared memory,
// dy's row right after it, both landing on the mbarrier at byte 8 s. Thread 0 issues row r's two
// copies into it (nothing when r >= M).
constexpr unsigned kRingHead = 128;  // the S <= 16 mbarriers, then the stages (16-byte aligned)

template <typename T>
__device__ __forceinline__ void ring_issue(unsigned base, int s, const T* __restrict__ x,
                                           const T* __restrict__ dy, long long r, long long M,
                                           long long N) {
  if (r >= M) return;
  const unsigned rowbytes = static_cast<unsigned>(N * sizeof(T));
  const unsigned bar = base + 8u * s, dst = base + kRingHead + 2u * rowbytes * s;
  mbar_arrive_expect_tx(bar, 2u * rowbytes);
  bulk_load(dst, x + r * N, rowbytes, bar);
  bulk_load(dst + rowbytes, dy + r * N, rowbytes, bar);
}

// A block of THREADS threads takes rows blockIdx.x, blockIdx.x + G, ... (G = gridDim.x) through a
// ring of S shared-memory stages: thread 0 keeps the block's next S rows of x and dy in flight as
// 1-D bulk copies (cp.async.bulk, completing on the stage's mbarrier), so the loads run on the
// copy engine whatever the threads are doing. A thread owns the 16-byte vectors
// (c * THREADS + threadIdx.x), c < CH, of every row: it waits for the stage's phase, reads its
// vectors (LDS.128, conflict-free), keeps xhat and g in registers and adds its column partials;
// the block reduction's barrier is also the point after which no thread reads the stage, so
// thread 0 refills it with row i + S right there, before the dx write. rstd (and mean) are
// loaded one row ahead. Rows whose start is not 16-byte aligned (a pointer off 16 bytes) take the
// committed element-wise path.
template <typename T, int THREADS, int CH, bool LN>
__device__ __forceinline__ void norm_bwd_ring(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ dy,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, T* __restrict__ dx,
                                              float* __restrict__ pw, float* __restrict__ pb,
                                              long long M, long long N, long long S_) {
  constexpr int VEC = Vec16<T>::N;
  const int S = static_cast<int>(S_);  // stages: 2 <= S <= 16 (the recipe gives 2 to 4)
  if (!(aligned16(x) && aligned16(w) && aligned16(dy) && aligned16(dx))) {
    norm_bwd_rows<T, THREADS, 1, CH * VEC, true, LN>(x, w, dy, mean, rstd, dx, pw, pb, M, N);
    return;
  }
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ float red[2][2][32];
  const unsigned base = saddr(ring);
  const long long rowbytes = N * static_cast<long long>(sizeof(T));
  const float inv_n = 1.0f / static_cast<float>(N);
  const long long G = gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) mbar_init(base + 8u * s, 1);
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) ring_issue<T>(base, s, x, dy, blockIdx.x + s * G, M, N);
  }
  float wf[CH][VEC], dw[CH][VEC], db[CH][VEC];
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
    if (col < N) {
      Vec16<T>::unpack(__ldg(reinterpret_cast<const uint4*>(w + col)), wf[c]);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) wf[c][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) dw[c][e] = db[c][e] = 0.0f;
  }
  float rs_next = __ldg(rstd + blockIdx.x), mu_next = LN ? __ldg(mean + blockIdx.x) : 0.0f;
  int s = 0;
  unsigned phase = 0;
  int parity = 0;
  for (long long r = blockIdx.x; r < M; r += G, parity ^= 1) {
    const float rs = rs_next, mu = mu_next;
    if (r + G < M) {
      rs_next = __ldg(rstd + r + G);
      if constexpr (LN) mu_next = __ldg(mean + r + G);
    }
    mbar_wait(base + 8u * s, phase);
    const unsigned char* stage = ring + kRingHead + 2 * rowbytes * s;
    float xh[CH][VEC], g[CH][VEC];
    float sg = 0.0f, sgx = 0.0f;  // sums of g and of g * xhat over the thread's columns
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
      if (col < N) {
        float fx[VEC], fd[VEC];
        Vec16<T>::unpack(*reinterpret_cast<const uint4*>(stage + col * sizeof(T)), fx);
        Vec16<T>::unpack(*reinterpret_cast<const uint4*>(stage + rowbytes + col * sizeof(T)), fd);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float xhat = (fx[e] - mu) * rs, ge = fd[e] * wf[c][e];
          sg += ge;
          sgx += ge * xhat;
          xh[c][e] = xhat;
          g[c][e] = ge;
          dw[c][e] += fd[e] * xhat;
          if constexpr (LN) db[c][e] += fd[e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) xh[c][e] = g[c][e] = 0.0f;
      }
    }
    block_sum2<THREADS>(sg, sgx, red, parity);
    // every thread has read stage s (its values fed the sums before the barrier): refill it
    if (threadIdx.x == 0) ring_issue<T>(base, s, x, dy, r + S * G, M, N);
    if (++s == S) {
      s = 0;
      phase ^= 1u;
    }
    const float a = LN ? sg * inv_n : 0.0f, cm = sgx * inv_n;
    T* __restrict__ dxr = dx + r * N;
#pragma unroll
    for (int c = 0; c < CH; ++c) {
      const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
      if (col >= N) continue;
      float out[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] = rs * (g[c][e] - a - xh[c][e] * cm);
      store16(dxr + col, Vec16<T>::pack(out));
    }
  }
  store_partials<T, THREADS, CH>(pw + static_cast<long long>(blockIdx.x) * N, dw, N);
  if constexpr (LN) {
    store_partials<T, THREADS, CH>(pb + static_cast<long long>(blockIdx.x) * N, db, N);
  }
}

// dweight[n] (and dbias[n]) = the G block partials of column n, summed in float64 in an order
// fixed by G alone (deterministic): a block's 1024 threads take 32 columns x 32 row groups, thread
// (j, q) sums partials q, q + 32, q + 64, ... of column 32 blockIdx.x + j (a warp reads 128
// contiguous bytes per partial row, up to 8 partial rows in flight per thread), and thread (j, 0)
// adds the 32 group sums in order q = 0..31, rounded once. ceil(N / 32) blocks of 32 warps keep
// much of the G x N workspace in flight at once (the committed reduce ran ceil(N / 256) blocks,
// each thread walking all G partials of its column: 16 blocks for N = 4096).
template <typename T, bool LN>
__device__ __forceinline__ void norm_bwd_reduce_cols(const float* __restrict__ pw,
                                                     const float* __restrict__ pb,
                                                     T* __restrict__ dw, T* __restrict__ dbias,
                                                     long long G, long long N) {
  constexpr int GROUPS = 32;
  __shared__ double sw[GROUPS][32], sb[LN ? GROUPS : 1][32];
  const int j = threadIdx.x & 31, q = threadIdx.x >> 5;
  const long long n = static_cast<long long>(blockIdx.x) * 32 + j;
  double aw = 0.0, ab = 0.0;
  if (n < N) {
#pragma unroll 8
    for (long long g = q; g < G; g += GROUPS) {
      aw += static_cast<double>(__ldg(pw + g * N + n));
      if constexpr (LN) ab += static_cast<double>(__ldg(pb + g * N + n));
    }
  }
  sw[q][j] = aw;
  if constexpr (LN) sb[q][j] = ab;
  __syncthreads();
  if (q == 0 && n < N) {
    double s = 0.0, t = 0.0;
#pragma unroll
    for (int k = 0; k < GROUPS; ++k) {
      s += sw[k][j];
      if constexpr (LN) t += sb[k][j];
    }
    Elem<T>::store(dw + n, static_cast<float>(s));
    if constexpr (LN) Elem<T>::store(dbias + n, static_cast<float>(t));
  }
}

}  // namespace

#define LN_ROWS(NAME, T, THREADS, VEC, REG)                                                     \
  extern "C" __global__ void __launch_bounds__(THREADS)                                       \
  NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,            \
       const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,    \
       float* __restrict__ pw, float* __restrict__ pb, long long M, long long N) {             \
    norm_bwd_rows<T, THREADS, VEC, 16 / VEC, REG, true>(x, w, dy, mean, rstd, dx, pw, pb, M, N); \
  }
#define LN_RING(NAME, T, THREADS, MINB)                                                         \
  extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                 \
  NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,            \
       const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,    \
       float* __restrict__ pw, float* __restrict__ pb, long long M, long long N,               \
       long long S) {                                                                          \
    norm_bwd_ring<T, THREADS, 16 / Vec16<T>::N, true>(x, w, dy, mean, rstd, dx, pw, pb, M, N, S); \
  }
#define LN_ALL(SUFFIX, T)                                                                      \
  LN_ROWS(layernorm_bwd_r1024_vec_##SUFFIX, T, 64, Vec16<T>::N, true)                         \
  LN_ROWS(layernorm_bwd_r1024_sca_##SUFFIX, T, 64, 1, true)                                   \
  LN_RING(layernorm_bwd_ring4096_##SUFFIX, T, 256, 2)                                         \
  LN_ROWS(layernorm_bwd_r4096_sca_##SUFFIX, T, 256, 1, true)                                  \
  LN_RING(layernorm_bwd_ring8192_##SUFFIX, T, 512, 1)                                         \
  LN_ROWS(layernorm_bwd_r8192_sca_##SUFFIX, T, 512, 1, true)                                  \
  LN_ROWS(layernorm_bwd_long_vec_##SUFFIX, T, 512, Vec16<T>::N, false)                        \
  LN_ROWS(layernorm_bwd_long_sca_##SUFFIX, T, 512, 1, false)                                  \
  extern "C" __global__ void __launch_bounds__(1024)                                          \
  layernorm_bwd_reduce_##SUFFIX(const float* __restrict__ pw, const float* __restrict__ pb,    \
                                T* __restrict__ dweight, T* __restrict__ dbias, long long G,   \
                                long long N) {                                                 \
    norm_bwd_reduce_cols<T, true>(pw, pb, dweight, dbias, G, N);                               \
  }

LN_ALL(bf16, __nv_bfloat16)
LN_ALL(f16, __half)
LN_ALL(f32, float)
