// Backward of LayerNorm for H200 (sm_90a), variant regpipe (timed beside the committed kernel:
// benchmarks/variants.py layernorm_bwd --target h200 committed variants/layernorm_bwd/*). Not run
// on hardware yet.
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, xhat = (x - mean) * rstd
// (mean and rstd as given); dweight and dbias = column sums of dy * xhat and of dy.
//
// The committed kernel's blocks walk their rows one at a time: a row's loads, then its block
// reduction (a barrier) and its dx write, and only then the next row's loads, so each block has
// nothing in flight for most of a row. layernorm_bwd_p{1024,4096,8192} (16-byte rows) keep the
// committed thread -> column mapping (16 elements per thread, 64 / 256 / 512 threads), but each
// thread rotates D register buffers of raw 16-byte x and dy vectors (with the row's mean and
// rstd): as soon as row i is unpacked into float32 xhat and g, the loads of row i + D * gridDim.x
// go into its buffer, before row i's block reduction and dx write. D = 2 for 16-bit types (16
// registers per buffer), 1 for float32. The weight of the thread's columns is held in registers
// for the whole kernel, and x and dy are loaded past L1 (single use). Element-wise rows (N *
// sizeof(T) % 16 != 0) and rows over 8192 use the committed kernels (layernorm_bwd_r*_sca,
// layernorm_bwd_long_*), unchanged.
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

// ---- variant: the pipelined row kernel (16-byte rows) ------------------------------------------
// Single-use row data (x, dy) is loaded past L1 (ld.global.nc.L1::no_allocate); the `#else`
// branch is the CUDA emulation's (tests/support).
__device__ __forceinline__ uint4 ld_row(const void* p) {
#ifdef __CUDA_ARCH__
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
#else
  return __ldg(reinterpret_cast<const uint4*>(p));
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

// One row's loads as they arrive: a thread's CH 16-byte vectors of x and of dy, and the row's rstd
// (and mean).
template <int CH>
struct RowBuf {
  uint4 x[CH], d[CH];
  float rs, mu;
};

// Issue the loads of row r into b (nothing when r >= M). Vectors past N are not loaded.
template <typename T, int THREADS, int CH, bool LN>
__device__ __forceinline__ void fetch_row(RowBuf<CH>& b, const T* __restrict__ x,
                                          const T* __restrict__ dy, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, long long r, long long M,
                                          long long N) {
  constexpr int VEC = Vec16<T>::N;
  if (r >= M) return;
  b.rs = __ldg(rstd + r);
  b.mu = LN ? __ldg(mean + r) : 0.0f;
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
    if (col < N) {
      b.x[c] = ld_row(x + r * N + col);
      b.d[c] = ld_row(dy + r * N + col);
    }
  }
}

// Row r from b: xhat and g into registers, the column partials, then b's loads for row r + D * G
// are issued (b is free once unpacked) before the block reduction and the dx write, so D rows
// per block stay in flight while this one is reduced and written.
template <typename T, int THREADS, int CH, int D, bool LN>
__device__ __forceinline__ void pipe_row(RowBuf<CH>& b, long long r, int parity,
                                         const T* __restrict__ x, const T* __restrict__ dy,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd, T* __restrict__ dx,
                                         const float (&wf)[CH][Vec16<T>::N],
                                         float (&dw)[CH][Vec16<T>::N],
                                         float (&db)[CH][Vec16<T>::N], float (*red)[2][32],
                                         long long M, long long N, float inv_n) {
  constexpr int VEC = Vec16<T>::N;
  const float rs = b.rs, mu = b.mu;
  float xh[CH][VEC], g[CH][VEC];
  float sg = 0.0f, sgx = 0.0f;  // sums of g and of g * xhat over the thread's columns
#pragma unroll
  for (int c = 0; c < CH; ++c) {
    const long long col = (static_cast<long long>(c) * THREADS + threadIdx.x) * VEC;
    if (col < N) {
      float fx[VEC], fd[VEC];
      Vec16<T>::unpack(b.x[c], fx);
      Vec16<T>::unpack(b.d[c], fd);
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
  fetch_row<T, THREADS, CH, LN>(b, x, dy, mean, rstd, r + static_cast<long long>(D) * gridDim.x,
                                M, N);
  block_sum2<THREADS>(sg, sgx, red, parity);
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

// A block of THREADS threads takes rows blockIdx.x, blockIdx.x + G, ... (G = gridDim.x); a thread
// owns the 16-byte vectors (c * THREADS + threadIdx.x), c < CH, of every row, holds the weight of
// those columns in registers and their dweight/dbias partials, stored once into
// pw/pb[blockIdx.x, :] at the end. D register buffers (RowBuf) rotate over the block's rows: row
// i's loads are issued while row i - D is being reduced and written. Rows whose start is not
// 16-byte aligned (a pointer off 16 bytes) take the committed element-wise path.
template <typename T, int THREADS, int CH, int D, bool LN>
__device__ __forceinline__ void norm_bwd_pipe(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ dy,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, T* __restrict__ dx,
                                              float* __restrict__ pw, float* __restrict__ pb,
                                              long long M, long long N) {
  constexpr int VEC = Vec16<T>::N;
  if (!(aligned16(x) && aligned16(w) && aligned16(dy) && aligned16(dx))) {
    norm_bwd_rows<T, THREADS, 1, CH * VEC, true, LN>(x, w, dy, mean, rstd, dx, pw, pb, M, N);
    return;
  }
  __shared__ float red[2][2][32];
  const float inv_n = 1.0f / static_cast<float>(N);
  const long long G = gridDim.x;
  float wf[CH][VEC], dw[CH][VEC], db[CH][VEC];
  RowBuf<CH> buf[D];
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
#pragma unroll
    for (int k = 0; k < D; ++k) buf[k].x[c] = buf[k].d[c] = make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < D; ++k) {
    buf[k].rs = buf[k].mu = 0.0f;
    fetch_row<T, THREADS, CH, LN>(buf[k], x, dy, mean, rstd, blockIdx.x + k * G, M, N);
  }
  long long r = blockIdx.x;
  int parity = 0;
  while (r < M) {
#pragma unroll
    for (int k = 0; k < D; ++k) {
      if (r < M) {
        pipe_row<T, THREADS, CH, D, LN>(buf[k], r, parity, x, dy, mean, rstd, dx, wf, dw, db, red,
                                        M, N, inv_n);
        r += G;
        parity ^= 1;
      }
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

// Pipeline depth: two rows in flight per block for 16-bit types (a row buffer is 8 registers per
// tensor per thread), one for float32 (16 registers per tensor per thread).
template <typename T> constexpr int kDepth = sizeof(T) == 4 ? 1 : 2;

#define LN_ROWS(NAME, T, THREADS, VEC, REG)                                                     \
  extern "C" __global__ void __launch_bounds__(THREADS)                                       \
  NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,            \
       const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,    \
       float* __restrict__ pw, float* __restrict__ pb, long long M, long long N) {             \
    norm_bwd_rows<T, THREADS, VEC, 16 / VEC, REG, true>(x, w, dy, mean, rstd, dx, pw, pb, M, N); \
  }
#define LN_PIPE(NAME, T, THREADS, MINB)                                                         \
  extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                 \
  NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ dy,            \
       const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,    \
       float* __restrict__ pw, float* __restrict__ pb, long long M, long long N) {             \
    norm_bwd_pipe<T, THREADS, 16 / Vec16<T>::N, kDepth<T>, true>(x, w, dy, mean, rstd, dx, pw, \
                                                                  pb, M, N);                   \
  }
#define LN_ALL(SUFFIX, T)                                                                      \
  LN_PIPE(layernorm_bwd_p1024_##SUFFIX, T, 64, 8)                                             \
  LN_ROWS(layernorm_bwd_r1024_sca_##SUFFIX, T, 64, 1, true)                                   \
  LN_PIPE(layernorm_bwd_p4096_##SUFFIX, T, 256, 2)                                            \
  LN_ROWS(layernorm_bwd_r4096_sca_##SUFFIX, T, 256, 1, true)                                  \
  LN_PIPE(layernorm_bwd_p8192_##SUFFIX, T, 512, 1)                                            \
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
