// 3x3x3 max pooling, stride 2, no padding, NCDHW, for B200 (sm_100a).
//
// maxpool3d_vec_*: used when W is a multiple of VEC = 16 / sizeof(T). A thread owns output
// columns [OPT*q, OPT*q + OPT) (OPT = VEC / 2) of two adjacent output rows of one volume and slides
// along D over a chunk of output planes. Per input plane it loads the five input rows of its two
// windows (2oh .. 2oh+4, the middle one shared) as one 16-byte vector each, takes elementwise
// maxima over D (the plane 2*od + 2 carried in registers to the next output plane, so each plane
// is loaded once per block) and over H, gets column VEC*q + VEC (the overlapping window column)
// from the next lane by a warp shuffle, and writes OPT outputs per row. Blocks are TX x TY lanes
// (TX a power of two <= 32, so a row of lanes never straddles warps); blocks along W overlap by one
// vector so every needed column comes from a lane of the same warp row. Rows shared between
// thread rows come from L1/L2: about 1.25 loads per input element, one read from HBM.
// maxpool3d_scalar_*: one thread per output, 27 element loads; any W.
// Max is exact in every dtype (values are converted to float and back without rounding).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

template <typename T> struct Elem;

template <> struct Elem<float> {
  static constexpr int VEC = 4;
  static __device__ __forceinline__ float load(const float* p) { return __ldg(p); }
  static __device__ __forceinline__ void store(float* p, float v) { *p = v; }
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
  }
};

template <> struct Elem<__nv_bfloat16> {
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float load(const __nv_bfloat16* p) {
    return __uint_as_float(static_cast<unsigned>(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, float v) {
    *reinterpret_cast<unsigned short*>(p) = static_cast<unsigned short>(__float_as_uint(v) >> 16);
  }
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // the lower half-word is the earlier element
      f[2 * k] = __uint_as_float(w[k] << 16);
      f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
    }
  }
};

template <> struct Elem<__half> {
  static constexpr int VEC = 8;
  static __device__ __forceinline__ float load(const __half* p) {
    return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
  }
  static __device__ __forceinline__ void store(__half* p, float v) {
    *reinterpret_cast<unsigned short*>(p) = __half_as_ushort(__float2half_rn(v));  // exact
  }
  static __device__ __forceinline__ void unpack(const uint4& u, float* f) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[2 * k] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] & 0xffffu)));
      f[2 * k + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] >> 16)));
    }
  }
};

// VEC consecutive elements of a row starting at p (one 16-byte load when the base is aligned).
template <typename T, bool ALIGNED>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float* f) {
  using E = Elem<T>;
  if constexpr (ALIGNED) {
    E::unpack(__ldg(reinterpret_cast<const uint4*>(p)), f);
  } else {
#pragma unroll
    for (int k = 0; k < E::VEC; ++k) f[k] = E::load(p + k);
  }
}

// Column maxima of the window rows of two vertically adjacent outputs: rows 0-2 (output a) and
// rows 2-4 (output b) of the five rows at p + {0, 1, 2, r3, r4} * W (r3, r4 = 3, 4, or 1, 2 when
// output b does not exist, so that every load stays in bounds).
template <typename T, bool ALIGNED>
__device__ __forceinline__ void rows_max(const T* __restrict__ p, long long W, long long r3,
                                         long long r4, float* col_a, float* col_b) {
  constexpr int VEC = Elem<T>::VEC;
  float v0[VEC], v1[VEC], v2[VEC], v3[VEC], v4[VEC];
  load_vec<T, ALIGNED>(p, v0);
  load_vec<T, ALIGNED>(p + W, v1);
  load_vec<T, ALIGNED>(p + 2 * W, v2);
  load_vec<T, ALIGNED>(p + r3 * W, v3);
  load_vec<T, ALIGNED>(p + r4 * W, v4);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    col_a[k] = fmaxf(fmaxf(v0[k], v1[k]), v2[k]);
    col_b[k] = fmaxf(fmaxf(v2[k], v3[k]), v4[k]);
  }
}

// Window maxima of one output row from the D-and-H column maxima col[0..VEC) of this thread; the
// column right of them is the next lane's col[0].
template <typename T>
__device__ __forceinline__ void store_row(const float* col, bool store, T* __restrict__ o,
                                          long long first, long long OW) {
  constexpr int VEC = Elem<T>::VEC;
  constexpr int OPT = VEC / 2;
  float c[VEC + 1];
#pragma unroll
  for (int k = 0; k < VEC; ++k) c[k] = col[k];
  c[VEC] = __shfl_down_sync(0xffffffffu, col[0], 1);  // every lane of the warp gets here
  if (store) {
#pragma unroll
    for (int j = 0; j < OPT; ++j) {
      if (first + j < OW) Elem<T>::store(o + j, fmaxf(fmaxf(c[2 * j], c[2 * j + 1]), c[2 * j + 2]));
    }
  }
}

// A thread owns output columns [OPT*q, OPT*q + OPT) of output rows oh_a = 2t and oh_b = 2t + 1
// (t = its row of the grid) for output planes [od0, od1) of one volume. A row of TX lanes covers
// vectors [z*(TX-1), z*(TX-1) + TX): its last lane only supplies the right-hand column of the lane
// before it (it stores nothing unless its vector is the last of the row, whose last window does
// not exist), so every needed column arrives by shuffle. TX is a power of two in [2, 32]: a row of
// lanes never straddles warps.
template <typename T, bool ALIGNED>
__device__ __forceinline__ void pool_vec(const T* __restrict__ x, T* __restrict__ y, long long NC,
                                         long long D, long long H, long long W, long long odc) {
  constexpr int VEC = Elem<T>::VEC;
  constexpr int OPT = VEC / 2;
  const long long OD = (D - 3) / 2 + 1, OH = (H - 3) / 2 + 1, OW = (W - 3) / 2 + 1;
  const long long Q = W / VEC;  // vectors per row; VEC * Q == W, OPT * Q == OW + 1
  const long long chunks = (OD + odc - 1) / odc;
  const long long nc = blockIdx.x / chunks;
  const long long od0 = (blockIdx.x - nc * chunks) * odc;
  const long long od1 = od0 + odc < OD ? od0 + odc : OD;
  const long long q_raw = static_cast<long long>(blockIdx.z) * (blockDim.x - 1) + threadIdx.x;
  const long long oh_a = 2 * (static_cast<long long>(blockIdx.y) * blockDim.y + threadIdx.y);
  const bool owner = q_raw < Q && (threadIdx.x + 1 < blockDim.x || q_raw == Q - 1);
  const bool store_a = owner && oh_a < OH;
  const bool store_b = owner && oh_a + 1 < OH;
  // Threads past an edge load a valid neighbour's data (clamped) so that loads need no branch
  // and every lane reaches the shuffles; they store nothing.
  const long long q = q_raw < Q ? q_raw : Q - 1;
  const long long oh = oh_a < OH ? oh_a : OH - 1;
  const long long r3 = oh + 1 < OH ? 3 : 1, r4 = oh + 1 < OH ? 4 : 2;
  const T* __restrict__ base = x + nc * D * H * W + 2 * oh * W + q * VEC;
  T* __restrict__ out = y + (nc * OD * OH + oh) * OW + OPT * q;
  const long long plane = H * W;

  // Slide along D: the column maxima of plane 2*od + 2 are carried to the next output plane.
  float carry_a[VEC], carry_b[VEC];
  rows_max<T, ALIGNED>(base + 2 * od0 * plane, W, r3, r4, carry_a, carry_b);
  for (long long od = od0; od < od1; ++od) {
    const T* __restrict__ p1 = base + (2 * od + 1) * plane;
    const T* __restrict__ p2 = p1 + plane;
    float a1[VEC], b1[VEC], a2[VEC], b2[VEC];
    rows_max<T, ALIGNED>(p1, W, r3, r4, a1, b1);  // ten independent 16-byte loads
    rows_max<T, ALIGNED>(p2, W, r3, r4, a2, b2);
    float col_a[VEC], col_b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      col_a[k] = fmaxf(fmaxf(carry_a[k], a1[k]), a2[k]);
      col_b[k] = fmaxf(fmaxf(carry_b[k], b1[k]), b2[k]);
      carry_a[k] = a2[k];
      carry_b[k] = b2[k];
    }
    T* __restrict__ o = out + od * OH * OW;
    store_row<T>(col_a, store_a, o, OPT * q, OW);
    store_row<T>(col_b, store_b, o + OW, OPT * q, OW);
  }
}

template <typename T>
__device__ __forceinline__ void pool_vec_any(const T* __restrict__ x, T* __restrict__ y,
                                             long long NC, long long D, long long H, long long W,
                                             long long odc) {
  if ((reinterpret_cast<unsigned long long>(x) & 15ull) == 0) {
    pool_vec<T, true>(x, y, NC, D, H, W, odc);
  } else {
    pool_vec<T, false>(x, y, NC, D, H, W, odc);
  }
}

template <typename T>
__device__ __forceinline__ void pool_scalar(const T* __restrict__ x, T* __restrict__ y,
                                            long long NC, long long D, long long H, long long W) {
  const long long OD = (D - 3) / 2 + 1, OH = (H - 3) / 2 + 1, OW = (W - 3) / 2 + 1;
  const long long total = NC * OD * OH * OW;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const long long ow = i % OW;
  const long long oh = (i / OW) % OH;
  const long long od = (i / (OW * OH)) % OD;
  const long long nc = i / (OW * OH * OD);
  const T* __restrict__ p = x + ((nc * D + 2 * od) * H + 2 * oh) * W + 2 * ow;
  float m = Elem<T>::load(p);
#pragma unroll
  for (int kd = 0; kd < 3; ++kd)
#pragma unroll
    for (int kh = 0; kh < 3; ++kh)
#pragma unroll
      for (int kw = 0; kw < 3; ++kw) m = fmaxf(m, Elem<T>::load(p + (kd * H + kh) * W + kw));
  Elem<T>::store(y + i, m);
}

}  // namespace

#define POOL_VEC(NAME, T, MINB)                                                               \
  extern "C" __global__ void __launch_bounds__(128, MINB)                                  \
  NAME(const T* __restrict__ x, T* __restrict__ y, long long NC, long long D, long long H,  \
       long long W, long long odc) {                                                       \
    pool_vec_any<T>(x, y, NC, D, H, W, odc);                                                   \
  }
#define POOL_SCALAR(NAME, T)                                                                  \
  extern "C" __global__ void __launch_bounds__(256)                                        \
  NAME(const T* __restrict__ x, T* __restrict__ y, long long NC, long long D, long long H,  \
       long long W) {                                                                      \
    pool_scalar<T>(x, y, NC, D, H, W);                                                     \
  }

// 128-thread blocks; five resident per multiprocessor for float32 (at most 96 registers: sm_100a's
// code for the float32 window spilled 136 B at the 64 registers of eight blocks, 32 B at 80)
POOL_VEC(maxpool3d_vec_f32, float, 5)
POOL_VEC(maxpool3d_vec_bf16, __nv_bfloat16, 4)
POOL_VEC(maxpool3d_vec_f16, __half, 4)
POOL_SCALAR(maxpool3d_scalar_f32, float)
POOL_SCALAR(maxpool3d_scalar_bf16, __nv_bfloat16)
POOL_SCALAR(maxpool3d_scalar_f16, __half)
