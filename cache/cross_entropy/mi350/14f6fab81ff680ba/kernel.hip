// regen artifact cross_entropy@mi350: generated content, do not edit. Change specs/cross_entropy.yaml and rebuild; provenance.json says who wrote it.
// Mean token cross-entropy of a contiguous [N, V] logits matrix against int64 targets (ignore
// index -100), AMD Instinct (wave64, gfx942 and gfx950: the same source serves mi300x and mi350).
//
// Pass 1 (ce_rows_*): one row of logits per wavefront (V <= 4096, 4 rows per 256-thread
// workgroup) or per workgroup (256 threads for V <= 32768, 512 beyond; amd.row_mapping). Each
// lane streams its share of the row once with 16-byte nontemporal loads (global_load_dwordx4 nt,
// four in flight per lane; a scalar head up to the first 16-byte boundary and a scalar tail handle
// rows that start unaligned, e.g. V = 50257: amd.vector_access, amd.nontemporal) and keeps an
// online logsumexp state in the log2 domain (amd.online_softmax): a base b = round(max * log2 e)
// and s = sum exp2(x * log2 e - b), each term one v_fma_f32 and one v_exp_f32, summed pairwise
// per chunk of loads; s is rescaled by exp2(b_old - b_new) once per chunk when the maximum grows.
// logsumexp = (b + log2 s) * ln 2: the rounding of b is common to every term and cancels, so
// logits of magnitude 1e4 lose no accuracy. An empty state is (b = -inf, s = 0); a -inf logit
// (masked vocabulary) contributes exp2(-inf) = 0, and a lane whose whole share is -inf stays empty
// without ever forming inf - inf. States merge across lanes with DPP (amd.wave_reduce: quad_perm,
// row_half_mirror, row_mirror, then v_readlane of lanes 0/16/32/48), across wavefronts through
// __shared__ memory, always in a fixed order. The row's loss (b + log2 s) ln 2 - logits[target]
// (0 for ignore_index -100; NaN for any other target outside [0, V), never tested) goes to a
// float32 scratch row_loss[N].
// Pass 2 (ce_mean_f32): one workgroup sums row_loss and counts the counted tokens in float64, in a
// fixed order (strided per-lane sums, DPP tree, wave partials in __shared__ summed by thread 0),
// and writes loss[0] = sum / count: deterministic, no atomics.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>

namespace {

typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));

constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

// ---- storage types: 16-byte words <-> float32 ------------------------------------------------
struct F32 {
  using S = float;
  static constexpr int VEC = 4;
  static __device__ __forceinline__ float cvt(float v) { return v; }
  static __device__ __forceinline__ float rne(float v) { return v; }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    return u32x4{__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                 __float_as_uint(f[3])};
  }
};

struct BF16 {
  using S = unsigned short;
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float cvt(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
  static __device__ __forceinline__ unsigned short rne(float f) {
    return __builtin_bit_cast(unsigned short, (__bf16)f);  // round to nearest even, NaN kept
  }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // little endian: the low half-word is the earlier element
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (unsigned)rne(f[2 * k]) | ((unsigned)rne(f[2 * k + 1]) << 16);
    return u32x4{w[0], w[1], w[2], w[3]};
  }
};

struct F16 {
  using S = unsigned short;
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float cvt(unsigned short h) {
    return (float)__builtin_bit_cast(_Float16, h);
  }
  static __device__ __forceinline__ unsigned short rne(float f) {
    return __builtin_bit_cast(unsigned short, (_Float16)f);  // v_cvt_f16_f32: nearest even
  }
  static __device__ __forceinline__ void unpack(u32x4 u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = cvt((unsigned short)(w[k] & 0xffffu));
      f[2 * k + 1] = cvt((unsigned short)(w[k] >> 16));
    }
  }
  static __device__ __forceinline__ u32x4 pack(const float* f) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = (unsigned)rne(f[2 * k]) | ((unsigned)rne(f[2 * k + 1]) << 16);
    return u32x4{w[0], w[1], w[2], w[3]};
  }
};

// PACK elements at p: one 16-byte access (PACK == D::VEC) or one element (PACK == 1).
template <class D, int PACK, bool NT>
__device__ __forceinline__ void load_pack(const typename D::S* p, float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    v[0] = D::cvt(NT ? __builtin_nontemporal_load(p) : *p);
  } else {
    static_assert(PACK == D::VEC, "a vector access is 16 bytes");
    const u32x4* q = reinterpret_cast<const u32x4*>(p);
    D::unpack(NT ? __builtin_nontemporal_load(q) : *q, v);
  }
}
template <class D, int PACK>
__device__ __forceinline__ void store_pack(typename D::S* p, const float (&v)[PACK]) {
  if constexpr (PACK == 1) {
    __builtin_nontemporal_store(D::rne(v[0]), p);
  } else {
    __builtin_nontemporal_store(D::pack(v), reinterpret_cast<u32x4*>(p));
  }
}

// ---- reductions ------------------------------------------------------------------------------
template <int CTRL> __device__ __forceinline__ float dpp(float v) {
  return __builtin_amdgcn_update_dpp(0.0f, v, CTRL, 0xf, 0xf, true);
}
__device__ __forceinline__ float lane_value(float v, int lane) {
  return __builtin_bit_cast(float, __builtin_amdgcn_readlane(__builtin_bit_cast(int, v), lane));
}
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct Sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };

// All 64 lanes active; returns the same bits in every lane.
template <class Op> __device__ __forceinline__ float wave_reduce(float v, Op op) {
  v = op(v, dpp<0xb1>(v));   // quad_perm [1,0,3,2]
  v = op(v, dpp<0x4e>(v));   // quad_perm [2,3,0,1]
  v = op(v, dpp<0x141>(v));  // row_half_mirror
  v = op(v, dpp<0x140>(v));  // row_mirror: every lane holds its 16-lane row's result
  return op(op(lane_value(v, 0), lane_value(v, 16)), op(lane_value(v, 32), lane_value(v, 48)));
}

// G threads own the value: one wavefront (G == 64) or the whole workgroup (G = 64 * W); `red`
// is a __shared__ float[W] used by no other reduction of the kernel.
template <int G, class Op> __device__ __forceinline__ float group_reduce(float v, float* red, Op op) {
  v = wave_reduce(v, op);
  if constexpr (G > 64) {
    constexpr int W = G / 64;
    if ((threadIdx.x & 63) == 0) red[threadIdx.x >> 6] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < W; ++i) v = op(v, red[i]);
  }
  return v;
}

// ---- pass 1 ------------------------------------------------------------------------------------
constexpr long long IGNORE_INDEX = -100;
constexpr float LN2 = 0.6931471805599453f;

// Online logsumexp state in the log2 domain: s = sum_x exp2(x * log2e - b). Empty: b = -inf, s = 0.
struct Lse {
  float b, s;
};

// Absorbs K values: one new base for the chunk, the old sum rescaled once, the terms summed
// pairwise (a tree of K - 1 adds keeps the float32 sum accurate).
template <int K> __device__ __forceinline__ void absorb(Lse& st, const float* f) {
  float cm = f[0];
#pragma unroll
  for (int k = 1; k < K; ++k) cm = fmaxf(cm, f[k]);
  const float bn = fmaxf(st.b, cm * LOG2E);
  const float bs = bn == neg_inf() ? 0.0f : bn;  // all -inf so far: every term is exp2(-inf) = 0
  float e[K];
  if constexpr (K % 2 == 0) {  // x * log2e - b two at a time: v_pk_fma_f32 (amd.packed_fp32)
    typedef float f2 __attribute__((ext_vector_type(2)));
    const f2 scale = {LOG2E, LOG2E}, shift = {-bs, -bs};
#pragma unroll
    for (int k = 0; k < K; k += 2) {
      const f2 t = __builtin_elementwise_fma(f2{f[k], f[k + 1]}, scale, shift);
      e[k] = __builtin_amdgcn_exp2f(t.x);
      e[k + 1] = __builtin_amdgcn_exp2f(t.y);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) e[k] = __builtin_amdgcn_exp2f(fmaf(f[k], LOG2E, -bs));
  }
#pragma unroll
  for (int w = 1; w < K; w *= 2)
#pragma unroll
    for (int k = 0; k + w < K; k += 2 * w) e[k] += e[k + w];
  st.s = fmaf(st.s, __builtin_amdgcn_exp2f(st.b - bs), e[0]);  // b = -inf: 0 * 0
  st.b = bn;
}

__device__ __forceinline__ Lse merge(Lse p, Lse q) {
  const float bn = fmaxf(p.b, q.b);
  const float bs = bn == neg_inf() ? 0.0f : bn;
  return Lse{bn, p.s * __builtin_amdgcn_exp2f(p.b - bs) + q.s * __builtin_amdgcn_exp2f(q.b - bs)};
}

template <int CTRL> __device__ __forceinline__ Lse dpp_lse(Lse v) {
  return Lse{dpp<CTRL>(v.b), dpp<CTRL>(v.s)};
}
__device__ __forceinline__ Lse lane_lse(Lse v, int lane) {
  return Lse{lane_value(v.b, lane), lane_value(v.s, lane)};
}

// All 64 lanes active; every lane ends with the same merged state.
__device__ __forceinline__ Lse wave_merge(Lse v) {
  v = merge(v, dpp_lse<0xb1>(v));
  v = merge(v, dpp_lse<0x4e>(v));
  v = merge(v, dpp_lse<0x141>(v));
  v = merge(v, dpp_lse<0x140>(v));
  return merge(merge(lane_lse(v, 0), lane_lse(v, 16)), merge(lane_lse(v, 32), lane_lse(v, 48)));
}

// One lane's share of a row: 16-byte vectors lane, lane + G, ... of the aligned body, U in flight.
template <class D, int G, int U>
__device__ __forceinline__ Lse scan_row(const typename D::S* __restrict__ row, long long V,
                                        int lane) {
  constexpr int VEC = D::VEC;
  Lse st{neg_inf(), 0.0f};
  // scalar head up to the first 16-byte boundary (fewer than VEC elements)
  const unsigned long long misalign = reinterpret_cast<unsigned long long>(row) & 15ull;
  long long head = misalign ? (long long)((16ull - misalign) / sizeof(typename D::S)) : 0;
  if (head > V) head = V;
  if (lane < head) {
    const float f = D::cvt(row[lane]);
    absorb<1>(st, &f);
  }
  const long long nvec = (V - head) / VEC;
  const u32x4* __restrict__ body = reinterpret_cast<const u32x4*>(row + head);
  long long i = lane;
  for (; i + (U - 1) * G < nvec; i += U * G) {
    u32x4 u[U];
#pragma unroll
    for (int k = 0; k < U; ++k) u[k] = __builtin_nontemporal_load(body + i + k * G);
    float f[U * VEC];
#pragma unroll
    for (int k = 0; k < U; ++k) D::unpack(u[k], f + k * VEC);
    absorb<U * VEC>(st, f);
  }
  for (; i < nvec; i += G) {
    float f[VEC];
    D::unpack(__builtin_nontemporal_load(body + i), f);
    absorb<VEC>(st, f);
  }
  // scalar tail (fewer than VEC elements)
  const long long t = head + nvec * VEC + lane;
  if (t < V) {
    const float f = D::cvt(row[t]);
    absorb<1>(st, &f);
  }
  return st;
}

// G threads per row: a wavefront (G == 64, RPB rows per workgroup) or the whole workgroup.
template <class D, int G, int RPB, int U>
__device__ __forceinline__ void ce_rows(const typename D::S* __restrict__ logits,
                                        const long long* __restrict__ targets,
                                        float* __restrict__ row_loss, long long N, long long V) {
  static_assert(G % 64 == 0 && (RPB == 1 || G == 64), "a row is a wavefront or a workgroup");
  constexpr int W = G / 64;
  const int lane = G == 64 ? (int)(threadIdx.x & 63) : (int)threadIdx.x;
  const int wave = __builtin_amdgcn_readfirstlane((int)(threadIdx.x >> 6));
  const long long row = (long long)blockIdx.x * RPB + (G == 64 ? wave : 0);
  if (row >= N) return;  // the whole wavefront (RPB > 1) or workgroup leaves
  const long long target = targets[row];
  if (target == IGNORE_INDEX) {
    if (lane == 0) row_loss[row] = 0.0f;
    return;
  }
  if (target < 0 || target >= V) {  // outside the spec: never read out of bounds
    if (lane == 0) row_loss[row] = __uint_as_float(0x7fc00000u);
    return;
  }
  const typename D::S* __restrict__ x = logits + row * V;
  const float picked = D::cvt(x[target]);  // one address for the whole group: early, cached
  Lse st = wave_merge(scan_row<D, G, U>(x, V, lane));
  if constexpr (W > 1) {
    __shared__ float sb[W], ss[W];
    if ((threadIdx.x & 63) == 0) {
      sb[wave] = st.b;
      ss[wave] = st.s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      st = Lse{sb[0], ss[0]};
#pragma unroll
      for (int k = 1; k < W; ++k) st = merge(st, Lse{sb[k], ss[k]});
    }
  }
  if (lane == 0) row_loss[row] = (st.b + log2f(st.s)) * LN2 - picked;
}

// ---- pass 2 ------------------------------------------------------------------------------------
template <int CTRL> __device__ __forceinline__ double dpp_d(double v) {
  const unsigned long long u = __builtin_bit_cast(unsigned long long, v);
  const int lo = __builtin_amdgcn_update_dpp(0, (int)(unsigned)u, CTRL, 0xf, 0xf, true);
  const int hi = __builtin_amdgcn_update_dpp(0, (int)(unsigned)(u >> 32), CTRL, 0xf, 0xf, true);
  return __builtin_bit_cast(double, ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}
__device__ __forceinline__ double lane_d(double v, int lane) {
  const unsigned long long u = __builtin_bit_cast(unsigned long long, v);
  const unsigned lo = (unsigned)__builtin_amdgcn_readlane((int)(unsigned)u, lane);
  const unsigned hi = (unsigned)__builtin_amdgcn_readlane((int)(unsigned)(u >> 32), lane);
  return __builtin_bit_cast(double, ((unsigned long long)hi << 32) | lo);
}
__device__ __forceinline__ double wave_sum_d(double v) {
  v += dpp_d<0xb1>(v);
  v += dpp_d<0x4e>(v);
  v += dpp_d<0x141>(v);
  v += dpp_d<0x140>(v);
  return (lane_d(v, 0) + lane_d(v, 16)) + (lane_d(v, 32) + lane_d(v, 48));
}

// Fixed-order float64 sum of the row losses over the counted tokens, divided by their count.
template <int BLOCK>
__device__ __forceinline__ void ce_mean(const float* __restrict__ row_loss,
                                        const long long* __restrict__ targets,
                                        float* __restrict__ loss, long long N) {
  constexpr int W = BLOCK / 64;
  double sum = 0.0, count = 0.0;
  for (long long i = threadIdx.x; i < N; i += BLOCK) {
    if (targets[i] != IGNORE_INDEX) {
      sum += (double)row_loss[i];
      count += 1.0;
    }
  }
  sum = wave_sum_d(sum);
  count = wave_sum_d(count);
  __shared__ double wsum[W], wcount[W];
  const int wave = (int)(threadIdx.x >> 6);
  if ((threadIdx.x & 63) == 0) {
    wsum[wave] = sum;
    wcount[wave] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0, counted = 0.0;
    for (int k = 0; k < W; ++k) {
      total += wsum[k];
      counted += wcount[k];
    }
    loss[0] = (float)(total / counted);  // no counted token (never tested): NaN
  }
}

}  // namespace

#define CE_ROWS(NAME, D, ST, G, RPB, U)                                                          \
  extern "C" __global__ void __launch_bounds__(G * RPB)                                          \
  NAME(const ST* __restrict__ logits, const long long* __restrict__ targets,                     \
       float* __restrict__ row_loss, long long N, long long V) {                                 \
    ce_rows<D, G, RPB, U>(reinterpret_cast<const D::S*>(logits), targets, row_loss, N, V);       \
  }

// short rows (V <= 4096): a wavefront per row, 4 rows per workgroup, two loads in flight per lane
CE_ROWS(ce_rows_wave_f32, F32, float, 64, 4, 2)
CE_ROWS(ce_rows_wave_bf16, BF16, __hip_bfloat16, 64, 4, 2)
CE_ROWS(ce_rows_wave_f16, F16, __half, 64, 4, 2)
// medium rows (4096 < V <= 32768): 256 threads per row, four 16-byte loads in flight per lane
CE_ROWS(ce_rows_mid_f32, F32, float, 256, 1, 4)
CE_ROWS(ce_rows_mid_bf16, BF16, __hip_bfloat16, 256, 1, 4)
CE_ROWS(ce_rows_mid_f16, F16, __half, 256, 1, 4)
// long rows (V > 32768): 512 threads per row, four 16-byte loads in flight per lane
CE_ROWS(ce_rows_long_f32, F32, float, 512, 1, 4)
CE_ROWS(ce_rows_long_bf16, BF16, __hip_bfloat16, 512, 1, 4)
CE_ROWS(ce_rows_long_f16, F16, __half, 512, 1, 4)

extern "C" __global__ void __launch_bounds__(1024)
ce_mean_f32(const float* __restrict__ row_loss, const long long* __restrict__ targets,
            float* __restrict__ loss, long long N) {
  ce_mean<1024>(row_loss, targets, loss, N);
}
