// 3x3x3 max pooling, stride 2, no padding, NCDHW, AMD Instinct (wave64, gfx942 and gfx950: the
// same source serves mi300x and mi350).
//
// maxpool3d_vec_*: used when W is a multiple of VEC = 16 / sizeof(T). A lane owns output columns
// [OPT*q, OPT*q + OPT) (OPT = VEC / 2) of two adjacent output rows of one volume and slides along
// D over a chunk of output planes. Per input plane it loads the five input rows of its two windows
// (2oh .. 2oh+4, the middle one shared) as one 16-byte vector each (global_load_dwordx4,
// amd.vector_access), takes elementwise maxima over D (the plane 2*od + 2 carried in registers to
// the next output plane, so each plane is loaded once per workgroup) and over H, gets column
// VEC*q + VEC (the overlapping window column) from the next lane with __shfl_down
// (ds_bpermute), and writes OPT outputs per row. Workgroups are TX x TY lanes, 256 in all (TX a
// power of two <= 64, so a row of lanes never straddles wavefronts); workgroups along W overlap by
// one vector so every needed column comes from a lane of the same row. Rows shared between lane
// rows come from L1/L2: about 1.25 loads per input element, one read from HBM. Volumes are cut
// into chunks of output planes when N*C < 2048, so that at least 2048 workgroups fill the 256
// (mi350) or 304 (mi300x) CUs.
// maxpool3d_scalar_*: one lane per output, 27 element loads; any W.
// Max is exact in every dtype (values are converted to float and back without rounding).
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

// VEC consecutive elements of a row starting at p (one 16-byte load when the base is aligned).
template <class D, bool ALIGNED>
__device__ __forceinline__ void load_vec(const typename D::S* __restrict__ p, float* f) {
  if constexpr (ALIGNED) {
    D::unpack(*reinterpret_cast<const u32x4*>(p), f);
  } else {
#pragma unroll
    for (int k = 0; k < D::VEC; ++k) f[k] = D::cvt(p[k]);
  }
}

// Column maxima of the window rows of two vertically adjacent outputs: rows 0-2 (output a) and
// rows 2-4 (output b) of the five rows at p + {0, 1, 2, r3, r4} * W (r3, r4 = 3, 4, or 1, 2 when
// output b does not exist, so that every load stays in bounds).
template <class D, bool ALIGNED>
__device__ __forceinline__ void rows_max(const typename D::S* __restrict__ p, long long W,
                                         long long r3, long long r4, float* col_a, float* col_b) {
  constexpr int VEC = D::VEC;
  float v0[VEC], v1[VEC], v2[VEC], v3[VEC], v4[VEC];
  load_vec<D, ALIGNED>(p, v0);
  load_vec<D, ALIGNED>(p + W, v1);
  load_vec<D, ALIGNED>(p + 2 * W, v2);
  load_vec<D, ALIGNED>(p + r3 * W, v3);
  load_vec<D, ALIGNED>(p + r4 * W, v4);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    col_a[k] = fmaxf(fmaxf(v0[k], v1[k]), v2[k]);
    col_b[k] = fmaxf(fmaxf(v2[k], v3[k]), v4[k]);
  }
}

// Window maxima of one output row from the D-and-H column maxima col[0..VEC) of this lane; the
// column right of them is the next lane's col[0].
template <class D>
__device__ __forceinline__ void store_row(const float* col, bool store,
                                          typename D::S* __restrict__ o, long long first,
                                          long long OW) {
  constexpr int VEC = D::VEC;
  constexpr int OPT = VEC / 2;
  float c[VEC + 1];
#pragma unroll
  for (int k = 0; k < VEC; ++k) c[k] = col[k];
  c[VEC] = __shfl_down(col[0], 1, 64);  // every lane of the wavefront gets here
  if (store) {
#pragma unroll
    for (int j = 0; j < OPT; ++j) {
      if (first + j < OW) o[j] = D::rne(fmaxf(fmaxf(c[2 * j], c[2 * j + 1]), c[2 * j + 2]));
    }
  }
}

// A lane owns output columns [OPT*q, OPT*q + OPT) of output rows oh_a = 2t and oh_b = 2t + 1
// (t = its row of the grid) for output planes [od0, od1) of one volume. A row of TX lanes covers
// vectors [z*(TX-1), z*(TX-1) + TX): its last lane only supplies the right-hand column of the lane
// before it (it stores nothing unless its vector is the last of the row, whose last window does
// not exist), so every needed column arrives by shuffle.
template <class D, bool ALIGNED>
__device__ __forceinline__ void pool_vec(const typename D::S* __restrict__ x,
                                         typename D::S* __restrict__ y, long long NC, long long Dd,
                                         long long H, long long W, long long odc) {
  constexpr int VEC = D::VEC;
  constexpr int OPT = VEC / 2;
  const long long OD = (Dd - 3) / 2 + 1, OH = (H - 3) / 2 + 1, OW = (W - 3) / 2 + 1;
  const long long Q = W / VEC;  // vectors per row; VEC * Q == W, OPT * Q == OW + 1
  const long long chunks = (OD + odc - 1) / odc;
  const long long nc = blockIdx.x / chunks;
  const long long od0 = (blockIdx.x - nc * chunks) * odc;
  const long long od1 = od0 + odc < OD ? od0 + odc : OD;
  const long long q_raw = (long long)blockIdx.z * (blockDim.x - 1) + threadIdx.x;
  const long long oh_a = 2 * ((long long)blockIdx.y * blockDim.y + threadIdx.y);
  const bool owner = q_raw < Q && (threadIdx.x + 1 < blockDim.x || q_raw == Q - 1);
  const bool store_a = owner && oh_a < OH;
  const bool store_b = owner && oh_a + 1 < OH;
  // Lanes past an edge load a valid neighbour's data (clamped) so that loads need no branch and
  // every lane reaches the shuffles; they store nothing.
  const long long q = q_raw < Q ? q_raw : Q - 1;
  const long long oh = oh_a < OH ? oh_a : OH - 1;
  const long long r3 = oh + 1 < OH ? 3 : 1, r4 = oh + 1 < OH ? 4 : 2;
  const typename D::S* __restrict__ base = x + nc * Dd * H * W + 2 * oh * W + q * VEC;
  typename D::S* __restrict__ out = y + (nc * OD * OH + oh) * OW + OPT * q;
  const long long plane = H * W;

  // Slide along D: the column maxima of plane 2*od + 2 are carried to the next output plane.
  float carry_a[VEC], carry_b[VEC];
  rows_max<D, ALIGNED>(base + 2 * od0 * plane, W, r3, r4, carry_a, carry_b);
  for (long long od = od0; od < od1; ++od) {
    const typename D::S* __restrict__ p1 = base + (2 * od + 1) * plane;
    const typename D::S* __restrict__ p2 = p1 + plane;
    float a1[VEC], b1[VEC], a2[VEC], b2[VEC];
    rows_max<D, ALIGNED>(p1, W, r3, r4, a1, b1);  // ten independent 16-byte loads
    rows_max<D, ALIGNED>(p2, W, r3, r4, a2, b2);
    float col_a[VEC], col_b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      col_a[k] = fmaxf(fmaxf(carry_a[k], a1[k]), a2[k]);
      col_b[k] = fmaxf(fmaxf(carry_b[k], b1[k]), b2[k]);
      carry_a[k] = a2[k];
      carry_b[k] = b2[k];
    }
    typename D::S* __restrict__ o = out + od * OH * OW;
    store_row<D>(col_a, store_a, o, OPT * q, OW);
    store_row<D>(col_b, store_b, o + OW, OPT * q, OW);
  }
}

template <class D>
__device__ __forceinline__ void pool_vec_any(const typename D::S* __restrict__ x,
                                             typename D::S* __restrict__ y, long long NC,
                                             long long Dd, long long H, long long W,
                                             long long odc) {
  if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
    pool_vec<D, true>(x, y, NC, Dd, H, W, odc);
  } else {
    pool_vec<D, false>(x, y, NC, Dd, H, W, odc);
  }
}

template <class D>
__device__ __forceinline__ void pool_scalar(const typename D::S* __restrict__ x,
                                            typename D::S* __restrict__ y, long long NC,
                                            long long Dd, long long H, long long W) {
  const long long OD = (Dd - 3) / 2 + 1, OH = (H - 3) / 2 + 1, OW = (W - 3) / 2 + 1;
  const long long total = NC * OD * OH * OW;
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long long ow = i % OW;
  const long long oh = (i / OW) % OH;
  const long long od = (i / (OW * OH)) % OD;
  const long long nc = i / (OW * OH * OD);
  const typename D::S* __restrict__ p = x + ((nc * Dd + 2 * od) * H + 2 * oh) * W + 2 * ow;
  float m = D::cvt(p[0]);
#pragma unroll
  for (int kd = 0; kd < 3; ++kd)
#pragma unroll
    for (int kh = 0; kh < 3; ++kh)
#pragma unroll
      for (int kw = 0; kw < 3; ++kw) m = fmaxf(m, D::cvt(p[(kd * H + kh) * W + kw]));
  y[i] = D::rne(m);
}

}  // namespace

#define POOL_VEC(NAME, D, ST)                                                                    \
  extern "C" __global__ void __launch_bounds__(256)                                              \
  NAME(const ST* __restrict__ x, ST* __restrict__ y, long long NC, long long Dd, long long H,    \
       long long W, long long odc) {                                                             \
    pool_vec_any<D>(reinterpret_cast<const D::S*>(x), reinterpret_cast<D::S*>(y), NC, Dd, H, W,  \
                    odc);                                                                        \
  }
#define POOL_SCALAR(NAME, D, ST)                                                                 \
  extern "C" __global__ void __launch_bounds__(256)                                              \
  NAME(const ST* __restrict__ x, ST* __restrict__ y, long long NC, long long Dd, long long H,    \
       long long W) {                                                                            \
    pool_scalar<D>(reinterpret_cast<const D::S*>(x), reinterpret_cast<D::S*>(y), NC, Dd, H, W);  \
  }

POOL_VEC(maxpool3d_vec_f32, F32, float)
POOL_VEC(maxpool3d_vec_bf16, BF16, __hip_bfloat16)
POOL_VEC(maxpool3d_vec_f16, F16, __half)
POOL_SCALAR(maxpool3d_scalar_f32, F32, float)
POOL_SCALAR(maxpool3d_scalar_bf16, BF16, __hip_bfloat16)
POOL_SCALAR(maxpool3d_scalar_f16, F16, __half)
