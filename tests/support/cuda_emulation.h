// CUDA execution model emulated on the CPU, for tests: a CUDA source (its <cuda*> includes
// removed) is compiled with g++ after this header, in one translation unit, into a shared object
// whose emu_launch() runs one of its kernels over a grid (tests/support/cuda_emulation.py).
//
// Every CUDA thread is a ucontext fiber; __syncthreads and warp shuffles are real barriers (a
// deadlock aborts); 16-byte loads and stores assert alignment; the Python side ends every buffer
// at a PROT_NONE page, so an access past its end faults. Fast intrinsics are modelled by their
// float32 library versions. Linux on x86-64 only (the launcher relies on the SysV calling
// convention). Blocks run one after another; atomics are plain read-modify-writes (a fiber is
// never preempted), __nanosleep yields to the block's other threads, and dynamic shared memory
// (`extern __shared__`) is one buffer of the launch's size. A kernel whose blocks wait on each
// other must therefore let the first block to run make progress alone (a persistent kernel
// that claims work in dependency order through a ticket does); otherwise it deadlocks here.
#pragma once
// EMU_WARP is the warp width: 32 (CUDA, the default) or 64 (an AMD wavefront, -DEMU_WARP=64 with
// -DEMU_HIP, which adds the HIP names below; HIP sources are built with clang++, whose
// ext_vector_type, __bf16 and __builtin_nontemporal_load they use).
#ifndef EMU_WARP
#define EMU_WARP 32
#endif
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ucontext.h>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float2 make_float2(float a, float b) { return float2{a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct __nv_bfloat16 { uint16_t b; };
struct __half { uint16_t b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __half2 { __half x, y; };
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned(h.b) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float __half2float(__half hh) {
  uint16_t h = hh.b;
  unsigned sign = unsigned(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { float v = float(mant) * 5.9604644775390625e-8f; return sign ? -v : v; }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline __half __float2half_rn(float f) {
  unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return {uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (u < 0x38800000u) {
    float t = __uint_as_float(u) + 0.5f;
    return {uint16_t(sign | (__float_as_uint(t) - 0x3f000000u))};
  }
  u += 0xc8000fffu + ((u >> 13) & 1u);
  return {uint16_t(sign | (u >> 13))};
}
inline __half __ushort_as_half(unsigned short s) { return {s}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float __expf(float x) { return exp2f(x * 1.4426950408889634f); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
template <class T> inline T __ldg(const T* p) {
  if (sizeof(T) == 16 && (reinterpret_cast<uintptr_t>(p) & 15)) {
    fprintf(stderr, "emu: misaligned 16-byte load at %p\n", (const void*)p);
    abort();
  }
  return *p;
}
// cache-hinted loads and stores (streaming, L2-only, last-use...) move the same bits
template <class T> inline T __ldcs(const T* p) { return __ldg(p); }
template <class T> inline T __ldcg(const T* p) { return __ldg(p); }
template <class T> inline T __ldlu(const T* p) { return __ldg(p); }
template <class T> inline T __ldcv(const T* p) { return __ldg(p); }
template <class T> inline void __stcs(T* p, T v) {
  if (sizeof(T) == 16 && (reinterpret_cast<uintptr_t>(p) & 15)) {
    fprintf(stderr, "emu: misaligned 16-byte store at %p\n", (const void*)p);
    abort();
  }
  *p = v;
}
template <class T> inline void __stcg(T* p, T v) { __stcs(p, v); }
template <class T> inline void __stwt(T* p, T v) { __stcs(p, v); }
template <class T> inline void __stwb(T* p, T v) { __stcs(p, v); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
inline unsigned short __half_as_ushort(__half h) { return h.b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return {s}; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// words per thread for the operands of a wave-wide matrix instruction: mma.sync takes 6, an MFMA
// up to 2 x 8 (gfx950's 8-dword f8f6f4 operands)
#define EMU_FRAG 16
struct EmuFiber { ucontext_t ctx; dim3 tid; bool done = false; std::vector<char> stack; };
struct Emu {
  dim3 grid, block, bidx;
  std::vector<EmuFiber> f;
  ucontext_t sched;
  int cur = -1;
  unsigned live = 0, arrived = 0;
  unsigned long gen = 0, events = 0;
  std::vector<unsigned> wlive, warrived;
  std::vector<unsigned long> wgen;
  std::vector<uint64_t> slot;
  std::vector<unsigned> frag;  // EMU_FRAG words per thread: operands of an emulated mma.sync / MFMA
  void* fn; int64_t ints[32]; float flts[4];
  std::vector<unsigned char> dynamic_smem;
};
extern Emu* g_emu;
#define threadIdx (g_emu->f[g_emu->cur].tid)
#define blockIdx (g_emu->bidx)
#define blockDim (g_emu->block)
#define gridDim (g_emu->grid)
inline void emu_yield() { swapcontext(&g_emu->f[g_emu->cur].ctx, &g_emu->sched); }
inline unsigned emu_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void __syncthreads() {
  Emu* e = g_emu;
  unsigned long g = e->gen;
  ++e->events;
  if (++e->arrived == e->live) { e->arrived = 0; ++e->gen; return; }
  while (e->gen == g) emu_yield();
}
inline void emu_warp_barrier() {
  Emu* e = g_emu;
  unsigned w = emu_lin() / EMU_WARP;
  unsigned long g = e->wgen[w];
  ++e->events;
  if (++e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; return; }
  while (e->wgen[w] == g) emu_yield();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu || g_emu->wlive[emu_lin() / EMU_WARP] != EMU_WARP) {
    fprintf(stderr, "emu: __syncwarp without the full warp\n");
    abort();
  }
  emu_warp_barrier();
}
inline unsigned char* emu_dynamic_smem() { return g_emu->dynamic_smem.data(); }
// a fiber runs until it yields, so these read-modify-writes are atomic among the grid's threads
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; ++g_emu->events; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; ++g_emu->events; return old; }
inline void __threadfence() {}
inline void __nanosleep(unsigned) { emu_yield(); }   // a spin-wait lets the other threads run
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  Emu* e = g_emu;
  unsigned me = emu_lin();
  if (mask != 0xffffffffu || e->wlive[me / EMU_WARP] != EMU_WARP) {
    fprintf(stderr, "emu: shuffle without the full warp\n");
    abort();
  }
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  e->slot[me] = bits;
  emu_warp_barrier();
  uint64_t other = e->slot[(me & ~(EMU_WARP - 1u)) | ((me & (EMU_WARP - 1u)) ^ unsigned(o))];
  emu_warp_barrier();
  T r;
  memcpy(&r, &other, sizeof(T));
  return r;
}

#ifdef EMU_HIP
// HIP's names for the same model: wavefront shuffles take no mask (the whole wavefront must be
// live, as in every kernel these tests run); nontemporal loads and stores move the same bits.
typedef __nv_bfloat16 __hip_bfloat16;
inline __hip_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
constexpr int warpSize = EMU_WARP;
template <class T> inline T __shfl_xor(T v, int o, int width = EMU_WARP) {
  if (width != EMU_WARP) {
    fprintf(stderr, "emu: sub-wavefront shuffle width %d is not modelled\n", width);
    abort();
  }
  return __shfl_xor_sync(0xffffffffu, v, o);
}
// clang lowers a float -> __bf16 conversion on x86-64 to this runtime call, which the host's
// libgcc may lack (GCC < 13): round to nearest even, NaN kept quiet, as the device converts
extern "C" __bf16 __truncsfbf2(float f) {
  return __builtin_bit_cast(__bf16, __float2bfloat16_rn(f).b);
}
#endif

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, d += a * b over one warp, with
// the fragment layouts of the PTX ISA (groupID g = lane / 4, t = lane % 4): A (16 x 16, row-major)
// reg 0 = A[g][2t..2t+1], 1 = A[g+8][2t..], 2 = A[g][2t+8..], 3 = A[g+8][2t+8..]; B (16 x 8, k by
// n) reg 0 = B[2t..2t+1][g], 1 = B[2t+8..2t+9][g]; D (16 x 8) d0,d1 = D[g][2t..2t+1], d2,d3 =
// D[g+8][2t..]; the lower half-word of a register is the lower index. A kernel reaches this model
// from the `#else` branch of its `#ifdef __CUDA_ARCH__` inline PTX.
inline float emu_half_bits(unsigned h, bool f16) {
  return f16 ? __half2float(__half{uint16_t(h)}) : __uint_as_float(h << 16);
}
inline void emu_mma_m16n8k16(float* d, const unsigned* a, const unsigned* b, bool f16) {
  Emu* e = g_emu;
  unsigned me = emu_lin();
  if (EMU_WARP != 32 || e->wlive[me / EMU_WARP] != EMU_WARP) {   // a 32-lane warp's instruction
    fprintf(stderr, "emu: mma.sync without the full warp\n");
    abort();
  }
  for (int i = 0; i < 4; ++i) e->frag[me * EMU_FRAG + i] = a[i];
  for (int i = 0; i < 2; ++i) e->frag[me * EMU_FRAG + 4 + i] = b[i];
  emu_warp_barrier();
  const unsigned base = me & ~31u, lane = me & 31u, g = lane / 4, t = lane % 4;
  auto A = [&](unsigned r, unsigned k) {
    unsigned reg = (k >= 8 ? 2 : 0) + (r >= 8 ? 1 : 0);
    unsigned w = e->frag[(base + (r % 8) * 4 + (k % 8) / 2) * EMU_FRAG + reg];
    return emu_half_bits(k % 2 ? w >> 16 : w & 0xffffu, f16);
  };
  auto B = [&](unsigned k, unsigned n) {
    unsigned w = e->frag[(base + n * 4 + (k % 8) / 2) * EMU_FRAG + 4 + (k >= 8 ? 1 : 0)];
    return emu_half_bits(k % 2 ? w >> 16 : w & 0xffffu, f16);
  };
  for (int i = 0; i < 4; ++i) {
    unsigned r = g + (i >= 2 ? 8 : 0), n = 2 * t + (i % 2);
    float acc = d[i];
    for (unsigned k = 0; k < 16; ++k) acc = fmaf(A(r, k), B(k, n), acc);
    d[i] = acc;
  }
  emu_warp_barrier();
}
// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16 over one warp, as the PTX ISA
// describes it: lane 8 m + r gives the (16-byte aligned) address of row r of 8 x 8 matrix m;
// register m of lane l receives 32-bit word l % 4 of row l / 4 of matrix m (elements 2 (l % 4)
// and 2 (l % 4) + 1 of that row), or with .trans the elements at (row 2 (l % 4), column l / 4)
// and (row 2 (l % 4) + 1, column l / 4), the lower row in the lower half-word. A kernel reaches
// this model from the `#else` branch of its `#ifdef __CUDA_ARCH__` inline PTX.
inline void emu_ldmatrix(unsigned* r, int count, bool trans, const void* row) {
  Emu* e = g_emu;
  const unsigned me = emu_lin();
  if (EMU_WARP != 32 || e->wlive[me / EMU_WARP] != EMU_WARP) {
    fprintf(stderr, "emu: ldmatrix without the full warp\n");
    abort();
  }
  if (reinterpret_cast<uintptr_t>(row) & 15) {
    fprintf(stderr, "emu: ldmatrix row address %p is not 16-byte aligned\n", row);
    abort();
  }
  e->slot[me] = reinterpret_cast<uintptr_t>(row);
  emu_warp_barrier();
  const unsigned base = me & ~31u, lane = me & 31u;
  for (int m = 0; m < count; ++m) {
    const auto at = [&](unsigned rr) {
      return reinterpret_cast<const unsigned char*>(e->slot[base + 8 * m + rr]);
    };
    if (!trans) {
      memcpy(&r[m], at(lane / 4) + 4 * (lane % 4), 4);
    } else {
      uint16_t lo, hi;
      memcpy(&lo, at(2 * (lane % 4)) + 2 * (lane / 4), 2);
      memcpy(&hi, at(2 * (lane % 4) + 1) + 2 * (lane / 4), 2);
      r[m] = unsigned(lo) | (unsigned(hi) << 16);
    }
  }
  emu_warp_barrier();
}
#ifdef EMU_HIP
// CDNA3/CDNA4 MFMA (v_mfma_f32_{32x32x8,16x16x16}{bf16_1k,f16}, v_mfma_f32_{32x32x16,16x16x32}
// _fp8_fp8), D = A B + C over one 64-lane wavefront, with the operand and accumulator layouts of
// AMD's matrix instruction calculator (CDNA3; gfx950 runs the same instructions with the same
// layouts). For an M x M x K instruction with P = K * M / 64 elements per lane and operand (each
// lane's vector of P 16-bit or 8-bit elements, element e in bits [w e, w e + w) of its registers):
//   A[i][k] (M x K) is element k % P of lane M * (k / P) + i;
//   B[k][j] (K x M) is element k % P of lane M * (k / P) + j;
//   D[i][j] is register r of lane l where j = l % M and i = 4 * (64 / M) * (r / 4) + 4 * (l / M)
//   + r % 4 (32 x 32: i = 8 (r / 4) + 4 (l / 32) + r % 4; 16 x 16: i = 4 (l / 16) + r).
// fp8 elements are e4m3 as the arch reads them: FNUZ on gfx942 (exponent bias 8, 0x80 is NaN, no
// negative zero), OCP e4m3fn on gfx950 (bias 7, S.1111.111 is NaN); the arch is the one the
// source is built for (build_hip(arch=...) defines __gfx942__ or __gfx950__), and an fp8 MFMA in a
// build without one aborts. Products of the inputs are exact in float32 and are accumulated onto
// C in k order (the matrix core's internal summation order is not modelled bit for bit). The
// CBSZ, ABID and BLGP broadcast modifiers are not modelled: a non-zero one aborts. Tested against
// a scalar matmul for every lane and register (tests/test_hip_mfma_emulation.py).
inline float emu_bf16_bits(unsigned h) { return __uint_as_float((h & 0xffffu) << 16); }
inline float emu_f16_bits(unsigned h) { return __half2float(__half{uint16_t(h)}); }
inline float emu_e4m3_bits(unsigned v, int bias, bool fnuz) {
  v &= 0xffu;
  const bool neg = v & 0x80u;
  const unsigned e = (v >> 3) & 0xfu, m = v & 7u;
  if (fnuz ? v == 0x80u : (v & 0x7fu) == 0x7fu) return __uint_as_float(0x7fc00000u);
  const float mag = e ? ldexpf(1.0f + m / 8.0f, int(e) - bias) : ldexpf(m / 8.0f, 1 - bias);
  return neg ? -mag : mag;
}
inline float emu_fp8_bits(unsigned v) {
#if defined(__gfx950__)
  return emu_e4m3_bits(v, 7, false);
#elif defined(__gfx942__)
  return emu_e4m3_bits(v, 8, true);
#else
  fprintf(stderr, "emu: an fp8 MFMA's format depends on the arch: build with arch gfx942 or gfx950\n");
  abort();
#endif
}
template <int M, int K, int BITS, class VA, class VC>
inline VC emu_mfma(const char* name, VA a, VA b, VC c, int cbsz, int abid, int blgp,
                   float (*elem)(unsigned)) {
  constexpr int P = K * M / 64, REGS = M * M / 64;
  static_assert(sizeof(VA) * 8 == P * BITS && sizeof(VC) == REGS * 4, "MFMA operand sizes");
  Emu* e = g_emu;
  const unsigned me = emu_lin();
  if (EMU_WARP != 64 || e->wlive[me / 64] != 64) {
    fprintf(stderr, "emu: %s without the full wavefront\n", name);
    abort();
  }
  if (cbsz || abid || blgp) {
    fprintf(stderr, "emu: %s with cbsz/abid/blgp modifiers is not modelled\n", name);
    abort();
  }
  memcpy(&e->frag[me * EMU_FRAG], &a, sizeof(VA));
  memcpy(&e->frag[me * EMU_FRAG + 8], &b, sizeof(VA));
  emu_warp_barrier();
  const unsigned base = me & ~63u, lane = me & 63u;
  auto operand = [&](unsigned l, int k, int which) {
    const unsigned bit = unsigned(k % P) * BITS;
    const unsigned w = e->frag[(base + l) * EMU_FRAG + 8 * which + bit / 32];
    return elem((w >> (bit % 32)) & ((1u << BITS) - 1u));
  };
  float acc[REGS];
  memcpy(acc, &c, sizeof(VC));
  const unsigned j = lane % M;
  for (int r = 0; r < REGS; ++r) {
    const unsigned i = 4 * (64 / M) * (r / 4) + 4 * (lane / M) + r % 4;
    float sum = acc[r];
    for (int k = 0; k < K; ++k)
      sum = fmaf(operand(M * (k / P) + i, k, 0), operand(M * (k / P) + j, k, 1), sum);
    acc[r] = sum;
  }
  emu_warp_barrier();
  VC d;
  memcpy(&d, acc, sizeof(VC));
  return d;
}
#define EMU_MFMA(fn, m, k, bits, elem)                                                  \
  template <class VA, class VC>                                                         \
  inline VC emu_##fn(VA a, VA b, VC c, int cbsz, int abid, int blgp) {                  \
    return emu_mfma<m, k, bits>(#fn, a, b, c, cbsz, abid, blgp, elem);                  \
  }
EMU_MFMA(mfma_f32_32x32x8bf16_1k, 32, 8, 16, emu_bf16_bits)
EMU_MFMA(mfma_f32_16x16x16bf16_1k, 16, 16, 16, emu_bf16_bits)
EMU_MFMA(mfma_f32_32x32x8f16, 32, 8, 16, emu_f16_bits)
EMU_MFMA(mfma_f32_16x16x16f16, 16, 16, 16, emu_f16_bits)
EMU_MFMA(mfma_f32_32x32x16_fp8_fp8, 32, 16, 8, emu_fp8_bits)
EMU_MFMA(mfma_f32_16x16x32_fp8_fp8, 16, 32, 8, emu_fp8_bits)
#undef EMU_MFMA
#define __builtin_amdgcn_mfma_f32_32x32x8bf16_1k emu_mfma_f32_32x32x8bf16_1k
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k emu_mfma_f32_16x16x16bf16_1k
#define __builtin_amdgcn_mfma_f32_32x32x8f16 emu_mfma_f32_32x32x8f16
#define __builtin_amdgcn_mfma_f32_16x16x16f16 emu_mfma_f32_16x16x16f16
#define __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8 emu_mfma_f32_32x32x16_fp8_fp8
#define __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8 emu_mfma_f32_16x16x32_fp8_fp8
#endif
// -- the launcher: runs every block of a grid, its threads as fibers ---------------------------
Emu* g_emu = nullptr;
#define EMU_I8 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t
typedef void (*UniversalFn)(EMU_I8, EMU_I8, EMU_I8, EMU_I8, float, float, float, float);
static void emu_entry() {
  Emu* e = g_emu;
  // x86-64 SysV: integer-class arguments go to rdi.. then the stack in order, floats to xmm0.. in
  // order, so one universal signature calls any (pointers and integers..., floats...) kernel.
  const int64_t* i = e->ints;
  reinterpret_cast<UniversalFn>(e->fn)(
      i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], i[8], i[9], i[10], i[11], i[12], i[13], i[14],
      i[15], i[16], i[17], i[18], i[19], i[20], i[21], i[22], i[23], i[24], i[25], i[26], i[27],
      i[28], i[29], i[30], i[31], e->flts[0], e->flts[1], e->flts[2], e->flts[3]);
  e->f[e->cur].done = true;
  ++e->events;
  unsigned w = emu_lin() / EMU_WARP;
  --e->live;
  if (e->live && e->arrived == e->live) { e->arrived = 0; ++e->gen; }
  --e->wlive[w];
  if (e->wlive[w] && e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; }
}
extern "C" int emu_launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared_bytes, int nint, const int64_t* ints,
                          int nflt, const float* flts) {
  Emu e;
  g_emu = &e;
  e.fn = fn;
  e.dynamic_smem.assign(shared_bytes + 16, 0xff);   // poisoned: a kernel must write before it reads
  for (int i = 0; i < 32; ++i) e.ints[i] = i < nint ? ints[i] : 0;
  for (int i = 0; i < 4; ++i) e.flts[i] = i < nflt ? flts[i] : 0.0f;
  e.grid = dim3{gx, gy, gz};
  e.block = dim3{bx, by, bz};
  const unsigned nt = bx * by * bz, nw = (nt + EMU_WARP - 1) / EMU_WARP;
  e.f.resize(nt);
  for (auto& fb : e.f) fb.stack.resize(64 * 1024);
  e.slot.assign(nt, 0);
  e.frag.assign(size_t(nt) * EMU_FRAG, 0);
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        e.bidx = dim3{x, y, z};
        e.live = nt;
        e.arrived = 0;
        e.wlive.assign(nw, 0);
        e.warrived.assign(nw, 0);
        e.wgen.assign(nw, 0);
        for (unsigned t = 0; t < nt; ++t) ++e.wlive[t / EMU_WARP];
        for (unsigned t = 0; t < nt; ++t) {
          EmuFiber& fb = e.f[t];
          fb.done = false;
          fb.tid = dim3{t % bx, (t / bx) % by, t / (bx * by)};
          getcontext(&fb.ctx);
          fb.ctx.uc_stack.ss_sp = fb.stack.data();
          fb.ctx.uc_stack.ss_size = fb.stack.size();
          fb.ctx.uc_link = &e.sched;
          makecontext(&fb.ctx, emu_entry, 0);
        }
        unsigned remaining = nt;
        while (remaining) {
          const unsigned long before = e.events;
          for (unsigned t = 0; t < nt; ++t) {
            if (e.f[t].done) continue;
            e.cur = int(t);
            swapcontext(&e.sched, &e.f[t].ctx);
            if (e.f[t].done) --remaining;
          }
          if (remaining && e.events == before) {
            fprintf(stderr, "emu: deadlock in block %u: threads wait at different barriers\n", x);
            abort();
          }
        }
      }
  g_emu = nullptr;
  return 0;
}
