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
#include <ctime>
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
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
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
// integer-class kernel arguments (pointers, integers) a launch may pass, floats after them
#define EMU_INTS 40
struct EmuFiber { ucontext_t ctx; dim3 tid; bool done = false; std::vector<char> stack; };
// Hopper's asynchronous units (see "Hopper's asynchronous units" below): an mbarrier's state, a
// TMA tile copy in flight, a wgmma in flight, a bulk (TMA) store group.
struct EmuBarrier { unsigned expected = 0, pending = 0; long long tx = 0; unsigned phase = 0; };
// shared addresses in a copy are cluster-absolute: (block of the cluster + 1) << 24 | address
// src: a 1-D bulk copy's global source (cp.async.bulk, no tensor map), `bytes` long; null for a
// tensor-map copy
struct EmuTmaCopy { unsigned smem; unsigned char map[128]; int coords[5]; unsigned bar; bool store;
                    const unsigned char* src; unsigned bytes; };
struct EmuWgmma { float* d; int n, scale_d, tnsp_a, tnsp_b, kind; uint64_t da, db; unsigned group;
                  // A from registers (emu_wgmma_rs): rows lane / 4 and + 8 of the warp's 16, as
                  // gathered from the quad at issue; the issuing thread's registers and their value
                  bool rs = false; float a[2][16] = {}; const unsigned* a_regs = nullptr;
                  unsigned a_saved[4] = {}; };
// a tcgen05 operation in flight: an MMA (kind 0 f16, 1 f8f6f4, 2 mxf8f6f4 block-scaled; group 1
// or 2: cta_group::1 or ::2), a tcgen05.cp (32x128b.warpx4) or a commit (arrive on `bar` once
// everything before it is done; with a multicast mask, on the barrier at bar's offset in each
// block of the mask). issuer: the cluster rank of the block that issued it.
struct EmuTcOp { int type; unsigned d, sfa, sfb, idesc, bar; uint64_t a, b; int accumulate, kind;
                 unsigned group = 1, mask = 0, issuer = 0; };
struct EmuThreadAsync {
  std::vector<EmuWgmma> wgmma;          // issued, not yet retired by wgmma.wait_group
  unsigned wgmma_groups = 0;            // groups committed so far
  std::vector<EmuTmaCopy> stores;       // TMA stores issued, not yet waited for
  std::vector<unsigned> store_group;    // the bulk group of each
  unsigned store_groups = 0;
};
// One block of the running cluster (a grid without clusters runs clusters of one block).
struct EmuBlock {
  dim3 bidx;
  unsigned rank = 0;                    // %cluster_ctarank
  unsigned live = 0, arrived = 0;       // __syncthreads
  unsigned long gen = 0;
  std::vector<unsigned char> smem_buf;
  unsigned char* smem = nullptr;        // the dynamic shared memory: shared address EMU_SMEM_BASE
  std::vector<std::pair<unsigned, EmuBarrier>> barriers;   // by shared address
  std::vector<EmuTmaCopy> tma_loads;    // issued, landing when their barrier is waited on
  unsigned named_arrived[16] = {}; unsigned long named_gen[16] = {};
  // Blackwell (see "Blackwell's tensor memory and tcgen05" below)
  std::vector<uint32_t> tmem;           // 128 lanes x 512 columns of 32 bits, on the first alloc
  std::vector<std::pair<unsigned, unsigned>> tmem_allocs;   // (first column, columns)
  std::vector<struct EmuTcOp> tc_ops;   // tcgen05 mma / cp / commit issued, not yet performed
};
struct Emu {
  dim3 grid, block;
  std::vector<EmuFiber> f;              // cluster x nt fibers: fiber i is thread i % nt of block i / nt
  ucontext_t sched;
  int cur = -1;
  unsigned nt = 0, cluster = 1, smem_bytes = 0;
  unsigned long events = 0;
  std::vector<EmuBlock> blocks;         // the running cluster's
  unsigned c_arrived = 0; unsigned long c_gen = 0;   // barrier.cluster
  std::vector<unsigned> wlive, warrived;
  std::vector<unsigned long> wgen;
  std::vector<uint64_t> slot;
  std::vector<unsigned> frag;  // EMU_FRAG words per thread: operands of an emulated mma.sync / MFMA
  void* fn; int64_t ints[EMU_INTS]; float flts[4];
  std::vector<EmuThreadAsync> async;    // per fiber
  std::vector<uint64_t> stm_addr;       // stmatrix: each lane's row address and registers
  std::vector<unsigned> stm_regs;
};
extern Emu* g_emu;
#define threadIdx (g_emu->f[g_emu->cur].tid)
inline EmuBlock& emu_blk() { return g_emu->blocks[unsigned(g_emu->cur) / g_emu->nt]; }
#define blockIdx (emu_blk().bidx)
#define blockDim (g_emu->block)
#define gridDim (g_emu->grid)
inline void emu_yield() { swapcontext(&g_emu->f[g_emu->cur].ctx, &g_emu->sched); }
inline unsigned emu_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
// the fiber: the index of this thread's per-thread state (its block's threads are consecutive)
inline unsigned emu_fid() { return unsigned(g_emu->cur); }
inline void __syncthreads() {
  EmuBlock* b = &emu_blk();
  unsigned long g = b->gen;
  ++g_emu->events;
  if (++b->arrived == b->live) { b->arrived = 0; ++b->gen; return; }
  while (b->gen == g) emu_yield();
}
inline void emu_warp_barrier() {
  Emu* e = g_emu;
  unsigned w = emu_fid() / EMU_WARP;
  unsigned long g = e->wgen[w];
  ++e->events;
  if (++e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; return; }
  while (e->wgen[w] == g) emu_yield();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu || g_emu->wlive[emu_fid() / EMU_WARP] != EMU_WARP) {
    fprintf(stderr, "emu: __syncwarp without the full warp\n");
    abort();
  }
  emu_warp_barrier();
}
inline unsigned char* emu_dynamic_smem() { return emu_blk().smem; }
// %globaltimer and %smid as a kernel's plain path reads them (the timeline contract,
// regen/timeline.py): a monotonic nanosecond clock, and the SM a block runs on, blocks dealt
// over EMU_SMS SMs by linear block index
#ifndef EMU_SMS
#define EMU_SMS 132
#endif
inline unsigned long long emu_globaltimer() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull + static_cast<unsigned long long>(ts.tv_nsec);
}
inline unsigned emu_smid() {
  return (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) % EMU_SMS;
}
// a fiber runs until it yields, so these read-modify-writes are atomic among the grid's threads
template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; ++g_emu->events; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; ++g_emu->events; return old; }
inline void __threadfence() {}
inline void __nanosleep(unsigned) { emu_yield(); }   // a spin-wait lets the other threads run
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  Emu* e = g_emu;
  unsigned me = emu_fid();
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
  unsigned me = emu_fid();
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

// -- Hopper's asynchronous units: mbarriers, TMA tile copies, wgmma, stmatrix ------------------
// A kernel reaches these from the `#else` branch of its `#ifdef __CUDA_ARCH__` inline PTX, with
// the same shared addresses, descriptors and tensor maps the device code builds:
//  * shared memory: __cvta_generic_to_shared maps the dynamic shared memory to shared addresses
//    from EMU_SMEM_BASE (not 1024-aligned, so a kernel must align its swizzled tiles itself);
//  * mbarrier: init / arrive / expect_tx / try_wait.parity with the PTX phase rules; a phase
//    completes when every expected arrival came and the transaction count is back to zero;
//  * cp.async.bulk 1-D loads (emu_bulk_load): the bytes as they are, landing like tensor loads;
//  * cp.async.bulk.tensor loads: the tensor map is the emulation's own encoding of the recipe's
//    declaration (tests/support/cuda_emulation.py), the box lands in shared memory with the
//    map's swizzle (the 16-byte chunk bits [4,7) of the shared address XOR bits [7,10) for 128B;
//    [4,6) ^ [7,9) for 64B, bit 4 ^ bit 7 for 32B), elements outside the tensor zero-filled, and
//    the whole box's bytes complete on the mbarrier; a copy lands when a thread waits on its
//    barrier (a stage read before its wait reads the poison) or, in the eager mode, at issue (a
//    stage handed back too early is overwritten before the wgmma reading it retire);
//  * TMA stores (bulk groups): elements outside the tensor are not written; the store reads
//    shared memory when the thread waits for its group (or exits), as the hardware may;
//  * wgmma.mma_async (bf16/f16 k16, e4m3/e5m2 k32, f32 accumulators, m64nNk): operands through
//    their 64-bit shared-memory descriptors (start, leading and stride byte offsets, swizzle
//    mode; K-major or, for 16-bit types, MN-major), the accumulator fragment of PTX (register
//    4j + {0,1}: row 16 warp + lane / 4, column 8j + 2 (lane % 4) + {0,1}; 4j + {2,3}: 8 rows
//    down); executed when wgmma.wait_group retires its group, so operands are read late;
//    A may instead come from registers (bf16/f16 k16, emu_wgmma_rs): the PTX fragment (thread
//    32 w + l, register i, half h: row 16 w + l / 4 + 8 (i % 2), column 2 (l % 4) + 8 (i / 2) + h),
//    gathered from each row's quad of lanes at issue; the registers must hold the issued values
//    until the wait that retires the instruction (changing them earlier is reported);
//  * stmatrix (x1/x2/x4, b16): a warp's 8x8 matrices, row addresses from lanes 8i..8i+7.
#define CU_TENSOR_MAP_NUM_QWORDS 16
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
#define __grid_constant__
#define __cluster_dims__(...)
#define EMU_SMEM_BASE 128u
#define EMU_MAP_MAGIC 0x70614d726f736e65ull
struct EmuTensorMap {   // what tests/support/cuda_emulation.py writes into a CUtensorMap
  uint64_t magic, address; uint32_t rank, esize; uint64_t dims[5], strides[4];
  uint32_t box[5], swizzle, oob_nan;
};
static_assert(sizeof(EmuTensorMap) <= 128, "the emulated map fits a CUtensorMap");
[[noreturn]] inline void emu_fail(const char* what) {
  fprintf(stderr, "emu: %s (block %u, thread %u)\n", what, emu_blk().bidx.x, emu_lin());
  abort();
}
inline unsigned __cvta_generic_to_shared(const void* p) {
  const unsigned char* q = static_cast<const unsigned char*>(p);
  EmuBlock& b = emu_blk();
  if (q < b.smem || q > b.smem + g_emu->smem_bytes)
    emu_fail("__cvta_generic_to_shared of an address outside the dynamic shared memory");
  return EMU_SMEM_BASE + unsigned(q - b.smem);
}
// A shared address of this block, or (mapa) of block r of the cluster: (r + 1) << 24 | address.
inline unsigned emu_cluster_addr(unsigned addr) {
  return addr >> 24 ? addr : ((unsigned(g_emu->cur) / g_emu->nt + 1) << 24) | addr;
}
inline EmuBlock& emu_addr_block(unsigned addr) {
  const unsigned r = addr >> 24;
  if (r > g_emu->cluster) emu_fail("a shared::cluster address of a block outside the cluster");
  return r ? g_emu->blocks[r - 1] : emu_blk();
}
inline unsigned char* emu_smem(unsigned addr, unsigned bytes) {
  Emu* e = g_emu;
  EmuBlock& b = emu_addr_block(addr);
  addr &= 0xFFFFFFu;
  if (addr < EMU_SMEM_BASE || addr - EMU_SMEM_BASE + uint64_t(bytes) > e->smem_bytes) {
    fprintf(stderr, "emu: shared address %#x (+%u bytes) is outside the launch's %u bytes of "
            "dynamic shared memory\n", addr, bytes, e->smem_bytes);
    abort();
  }
  return b.smem + (addr - EMU_SMEM_BASE);
}
inline unsigned emu_swizzle(unsigned addr, unsigned span) {
  const unsigned mask = span == 128 ? 7u : span == 64 ? 3u : span == 32 ? 1u : 0u;
  return addr ^ (((addr >> 7) & mask) << 4);
}
// mbarriers
inline EmuBarrier& emu_barrier(unsigned addr, bool create = false) {
  if (addr % 8) emu_fail("mbarrier address not 8-byte aligned");
  EmuBlock& blk = emu_addr_block(addr);
  emu_smem(addr, 8);
  addr &= 0xFFFFFFu;
  for (auto& b : blk.barriers)
    if (b.first == addr) return b.second;
  if (!create) {
    fprintf(stderr, "emu: mbarrier at shared address %#x used before mbarrier.init\n", addr);
    abort();
  }
  blk.barriers.push_back({addr, EmuBarrier{}});
  return blk.barriers.back().second;
}
inline void emu_mbar_settle(EmuBarrier& b) {
  if (b.pending == 0 && b.tx == 0) { b.phase += 1; b.pending = b.expected; }
}
inline void emu_mbar_init(unsigned addr, unsigned count) {
  if (count == 0 || count >= (1u << 20)) emu_fail("mbarrier.init count out of range");
  EmuBarrier& b = emu_barrier(addr, true);
  b = EmuBarrier{count, count, 0, 0};
  ++g_emu->events;
}
inline void emu_mbar_arrive(unsigned addr, unsigned count = 1) {
  EmuBarrier& b = emu_barrier(addr);
  if (count > b.pending) emu_fail("more mbarrier arrivals than its count in one phase");
  b.pending -= count;
  ++g_emu->events;
  emu_mbar_settle(b);
}
inline void emu_mbar_expect_tx(unsigned addr, unsigned bytes) {
  EmuBarrier& b = emu_barrier(addr);
  b.tx += bytes;
  ++g_emu->events;
}
inline void emu_mbar_arrive_expect_tx(unsigned addr, unsigned bytes) {
  emu_barrier(addr).tx += bytes;
  emu_mbar_arrive(addr);
}
inline void emu_mbar_complete_tx(unsigned addr, unsigned bytes) {
  EmuBarrier& b = emu_barrier(addr);
  b.tx -= bytes;
  ++g_emu->events;
  emu_mbar_settle(b);
}
inline void emu_tma_land(EmuTmaCopy& c);
inline void emu_tcgen05_complete(unsigned bar);
// try_wait.parity: true once the phase of that parity has completed (the current phase's parity
// differs); lands the copies that complete on this barrier first (and performs the tcgen05
// operations a commit to it waits for), and yields when not done
inline bool emu_mbar_try_wait(unsigned addr, unsigned parity) {
  std::vector<EmuTmaCopy>& loads = emu_blk().tma_loads;
  const unsigned bar = emu_cluster_addr(addr);
  emu_tcgen05_complete(bar);
  for (size_t i = 0; i < loads.size();) {
    if (loads[i].bar == bar) {
      EmuTmaCopy c = loads[i];
      loads.erase(loads.begin() + long(i));
      emu_tma_land(c);
    } else {
      ++i;
    }
  }
  if ((emu_barrier(addr).phase & 1u) != (parity & 1u)) return true;
  emu_yield();
  return false;
}
// tensor maps and TMA copies
inline const EmuTensorMap& emu_map(const void* map) {
  const EmuTensorMap& m = *static_cast<const EmuTensorMap*>(map);
  if (reinterpret_cast<uintptr_t>(map) % 64) emu_fail("CUtensorMap not 64-byte aligned");
  if (m.magic != EMU_MAP_MAGIC) emu_fail("not a tensor map the recipe passed");
  return m;
}
inline uint64_t emu_box_bytes(const EmuTensorMap& m) {
  uint64_t n = m.esize;
  for (unsigned d = 0; d < m.rank; ++d) n *= m.box[d];
  return n;
}
// visit every element of the box at `coords`: f(shared byte offset before the swizzle, global
// address or nullptr when the element is outside the tensor)
template <class F> inline void emu_box_walk(const EmuTensorMap& m, const int* coords, F f) {
  uint32_t idx[5] = {0, 0, 0, 0, 0};
  const uint64_t count = emu_box_bytes(m) / m.esize;
  for (uint64_t linear = 0; linear < count; ++linear) {
    uint64_t rest = linear;
    for (unsigned d = 0; d < m.rank; ++d) { idx[d] = uint32_t(rest % m.box[d]); rest /= m.box[d]; }
    bool inside = true;
    uint64_t offset = 0;
    for (unsigned d = 0; d < m.rank; ++d) {
      const long long g = (long long)coords[d] + idx[d];
      if (g < 0 || uint64_t(g) >= m.dims[d]) { inside = false; break; }
      offset += d == 0 ? uint64_t(g) * m.esize : uint64_t(g) * m.strides[d - 1];
    }
    f(unsigned(linear * m.esize), inside ? reinterpret_cast<unsigned char*>(m.address + offset) : nullptr);
  }
}
inline void emu_tma_check(const EmuTensorMap& m, unsigned smem, int rank) {
  if (int(m.rank) != rank) emu_fail("cp.async.bulk.tensor rank differs from the tensor map's");
  const unsigned align = m.swizzle ? 8 * m.swizzle : 128;
  if ((smem % align) != 0) {
    fprintf(stderr, "emu: TMA shared address %#x is not %u-byte aligned (%s)\n", smem, align,
            m.swizzle ? "a swizzled box starts on a whole swizzle pattern" : "TMA boxes");
    abort();
  }
  emu_smem(smem, unsigned(emu_box_bytes(m)));
}
inline void emu_tma_land(EmuTmaCopy& c) {
  if (c.src != nullptr) {   // a 1-D bulk copy: the bytes as they are, then complete_tx
    unsigned char* s = emu_smem(c.smem, c.bytes);
    for (const auto& b : emu_addr_block(c.smem).barriers)
      if (b.first + 8 > (c.smem & 0xFFFFFFu) && b.first < (c.smem & 0xFFFFFFu) + c.bytes)
        emu_fail("a bulk copy wrote over an mbarrier");
    memcpy(s, c.src, c.bytes);
    emu_mbar_complete_tx(c.bar, c.bytes);
    return;
  }
  const EmuTensorMap& m = *reinterpret_cast<const EmuTensorMap*>(c.map);
  static const unsigned char nan16[2] = {0xc0, 0x7f}, nan32[4] = {0, 0, 0xc0, 0x7f};
  emu_box_walk(m, c.coords, [&](unsigned off, unsigned char* g) {
    const unsigned at = emu_swizzle(c.smem + off, m.swizzle);
    unsigned char* s = emu_smem(at, m.esize);
    for (const auto& b : emu_addr_block(at).barriers)
      if (b.first + 8 > (at & 0xFFFFFFu) && b.first < (at & 0xFFFFFFu) + m.esize)
        emu_fail("a TMA load wrote over an mbarrier");
    if (g) memcpy(s, g, m.esize);
    else if (m.oob_nan && m.esize == 2) memcpy(s, nan16, 2);
    else if (m.oob_nan && m.esize == 4) memcpy(s, nan32, 4);
    else memset(s, 0, m.esize);
  });
  emu_mbar_complete_tx(c.bar, unsigned(emu_box_bytes(m)));
}
// When a load lands: lazily (when a thread waits on its barrier: a stage read before its wait
// reads the poison) or eagerly (at issue: a stage handed back before the wgmma reading it retired
// is overwritten under them). cuda_emulation.py alternates the two between repeated launches.
int g_emu_eager_tma = 0;
extern "C" void emu_set_eager_tma(int eager) { g_emu_eager_tma = eager; }
// cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes [smem], [map, coords], [bar]
// with a cta mask (.multicast::cluster): the box lands at the same offset in each block of the
// mask and completes on the barrier at the same offset there
inline void emu_tma_load(unsigned smem, const void* map, const int* coords, int rank, unsigned bar,
                         unsigned mask = 0) {
  const EmuTensorMap& m = emu_map(map);
  if (smem >> 24 || bar >> 24) emu_fail("a TMA load names this block's shared addresses");
  emu_tma_check(m, smem, rank);
  emu_barrier(bar);
  if (mask >> g_emu->cluster) emu_fail("a TMA multicast mask names a block outside the cluster");
  for (unsigned r = 0; r < (mask ? g_emu->cluster : 1); ++r) {
    if (mask && !(mask >> r & 1u)) continue;
    const unsigned to = mask ? r + 1 : unsigned(g_emu->cur) / g_emu->nt + 1;
    EmuTmaCopy c{};
    c.smem = (to << 24) | smem; c.bar = (to << 24) | bar; c.store = false;
    memcpy(c.map, &m, sizeof(m));
    for (int d = 0; d < rank; ++d) c.coords[d] = coords[d];
    emu_barrier(c.bar);
    ++g_emu->events;
    if (g_emu_eager_tma) emu_tma_land(c);
    else g_emu->blocks[to - 1].tma_loads.push_back(c);
  }
}
// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [smem], [src], bytes, [bar]:
// 16-byte aligned addresses and size; lands lazily or eagerly like a tensor-map load
inline void emu_bulk_load(unsigned smem, const void* src, unsigned bytes, unsigned bar) {
  if (smem >> 24 || bar >> 24) emu_fail("a bulk load names this block's shared addresses");
  if (smem % 16 || bytes % 16 || bytes == 0 || reinterpret_cast<uintptr_t>(src) % 16)
    emu_fail("cp.async.bulk needs 16-byte aligned addresses and a size that is a multiple of 16");
  emu_smem(smem, bytes);
  EmuTmaCopy c{};
  c.smem = emu_cluster_addr(smem); c.bar = emu_cluster_addr(bar); c.store = false;
  c.src = static_cast<const unsigned char*>(src); c.bytes = bytes;
  emu_barrier(c.bar);
  ++g_emu->events;
  if (g_emu_eager_tma) emu_tma_land(c);
  else emu_blk().tma_loads.push_back(c);
}
inline void emu_tma_load_2d(unsigned smem, const void* map, int c0, int c1, unsigned bar) {
  const int c[2] = {c0, c1};
  emu_tma_load(smem, map, c, 2, bar);
}
inline void emu_tma_load_3d(unsigned smem, const void* map, int c0, int c1, int c2, unsigned bar) {
  const int c[3] = {c0, c1, c2};
  emu_tma_load(smem, map, c, 3, bar);
}
inline void emu_tma_load_2d_multicast(unsigned smem, const void* map, int c0, int c1, unsigned bar,
                                      unsigned mask) {
  const int c[2] = {c0, c1};
  emu_tma_load(smem, map, c, 2, bar, mask);
}
// clusters: %cluster_ctarank, mapa, barrier.cluster (every live thread of the cluster's blocks)
inline unsigned emu_cluster_rank() { return emu_blk().rank; }
inline unsigned emu_mapa(unsigned addr, unsigned rank) {
  if (rank >= g_emu->cluster) emu_fail("mapa to a rank outside the cluster");
  return ((rank + 1) << 24) | (addr & 0xFFFFFFu);
}
inline void emu_cluster_sync() {
  Emu* e = g_emu;
  unsigned live = 0;
  for (const auto& b : e->blocks) live += b.live;
  const unsigned long g = e->c_gen;
  ++e->events;
  if (++e->c_arrived == live) { e->c_arrived = 0; ++e->c_gen; return; }
  while (e->c_gen == g) emu_yield();
}
// cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [map, coords], [smem]
inline void emu_tma_store(const void* map, const int* coords, int rank, unsigned smem) {
  const EmuTensorMap& m = emu_map(map);
  emu_tma_check(m, smem, rank);
  EmuTmaCopy c{};
  c.smem = emu_cluster_addr(smem); c.bar = 0; c.store = true;
  memcpy(c.map, &m, sizeof(m));
  for (int d = 0; d < rank; ++d) c.coords[d] = coords[d];
  EmuThreadAsync& a = g_emu->async[emu_fid()];
  a.stores.push_back(c);
  a.store_group.push_back(a.store_groups);
  ++g_emu->events;
}
inline void emu_tma_store_2d(const void* map, int c0, int c1, unsigned smem) {
  const int c[2] = {c0, c1};
  emu_tma_store(map, c, 2, smem);
}
inline void emu_tma_store_3d(const void* map, int c0, int c1, int c2, unsigned smem) {
  const int c[3] = {c0, c1, c2};
  emu_tma_store(map, c, 3, smem);
}
inline void emu_bulk_commit() { ++g_emu->async[emu_fid()].store_groups; }
// cp.async.bulk.wait_group(.read) n: the stores of all but the newest n groups are done
inline void emu_bulk_wait(unsigned n) {
  EmuThreadAsync& a = g_emu->async[emu_fid()];
  std::vector<EmuTmaCopy> keep;
  std::vector<unsigned> keep_group;
  for (size_t i = 0; i < a.stores.size(); ++i) {
    if (a.store_group[i] + n < a.store_groups) {
      EmuTmaCopy& c = a.stores[i];
      const EmuTensorMap& m = *reinterpret_cast<const EmuTensorMap*>(c.map);
      emu_box_walk(m, c.coords, [&](unsigned off, unsigned char* g) {
        const unsigned char* s = emu_smem(emu_swizzle(c.smem + off, m.swizzle), m.esize);
        if (g) memcpy(g, s, m.esize);
      });
    } else {
      keep.push_back(a.stores[i]);
      keep_group.push_back(a.store_group[i]);
    }
  }
  a.stores.swap(keep);
  a.store_group.swap(keep_group);
  ++g_emu->events;
}
// wgmma
inline float emu_elem(unsigned addr, int kind) {   // 0 bf16, 1 f16, 2 e4m3, 3 e5m2
  const unsigned char* p = emu_smem(addr, kind >= 2 ? 1 : 2);
  if (kind == 0) return __uint_as_float(unsigned(p[0] | (p[1] << 8)) << 16);
  if (kind == 1) return __half2float(__half{uint16_t(p[0] | (p[1] << 8))});
  const unsigned v = p[0], sign = v >> 7;
  float r;
  if (kind == 2) {   // e4m3fn: bias 7, no infinities, S.1111.111 is NaN
    const unsigned e = (v >> 3) & 15u, f = v & 7u;
    r = (e == 15 && f == 7) ? NAN : e ? ldexpf(1.0f + f / 8.0f, int(e) - 7) : ldexpf(f / 8.0f, -6);
  } else {           // e5m2: bias 15
    const unsigned e = (v >> 2) & 31u, f = v & 3u;
    r = e == 31 ? (f ? NAN : INFINITY) : e ? ldexpf(1.0f + f / 4.0f, int(e) - 15) : ldexpf(f / 4.0f, -14);
  }
  return sign ? -r : r;
}
// shared address of element (mn, k) of a 64 x K (A) or N x K (B) operand behind descriptor `desc`
inline unsigned emu_desc_addr(uint64_t desc, unsigned mn, unsigned k, bool mn_major, unsigned esize) {
  const unsigned start = unsigned(desc & 0x3FFF) << 4, lbo = unsigned((desc >> 16) & 0x3FFF) << 4,
                 sbo = unsigned((desc >> 32) & 0x3FFF) << 4, base = unsigned(desc >> 49) & 7u,
                 mode = unsigned(desc >> 62);
  if (base) emu_fail("wgmma descriptor base offset other than 0 is not modelled");
  const unsigned span = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  const unsigned t = 16 / esize;   // elements per 16 bytes
  unsigned off;
  if (!mn_major) {
    off = span ? (mn / 8) * sbo + (mn % 8) * span + k * esize
               : (mn / 8) * sbo + (mn % 8) * 16 + (k / t) * lbo + (k % t) * esize;
  } else {
    off = span ? (mn / (span / esize)) * lbo + (mn % (span / esize)) * esize + (k / 8) * sbo + (k % 8) * span
               : (mn / t) * sbo + (mn % t) * esize + (k / 8) * lbo + (k % 8) * 16;
  }
  return emu_swizzle(start + off, span);
}
inline void emu_wgmma_run(const EmuWgmma& w) {
  const unsigned me = emu_lin() % 128, warp = me / 32, lane = me % 32;
  const unsigned esize = w.kind >= 2 ? 1 : 2, kk = 32 / esize;
  const unsigned rows[2] = {16 * warp + lane / 4, 16 * warp + lane / 4 + 8};
  float a[2][32], b[32];
  if (w.rs) {
    if (memcmp(w.a_regs, w.a_saved, sizeof(w.a_saved)) != 0)
      emu_fail("a register of wgmma's A operand changed before wgmma.wait_group retired it");
    for (int r = 0; r < 2; ++r)
      for (unsigned k = 0; k < kk; ++k) a[r][k] = w.a[r][k];
  } else {
    for (int r = 0; r < 2; ++r)
      for (unsigned k = 0; k < kk; ++k) a[r][k] = emu_elem(emu_desc_addr(w.da, rows[r], k, w.tnsp_a, esize), w.kind);
  }
  for (int j = 0; j < w.n / 8; ++j)
    for (int c = 0; c < 2; ++c) {
      const unsigned col = 8 * j + 2 * (lane % 4) + c;
      for (unsigned k = 0; k < kk; ++k) b[k] = emu_elem(emu_desc_addr(w.db, col, k, w.tnsp_b, esize), w.kind);
      for (int r = 0; r < 2; ++r) {
        float acc = w.scale_d ? w.d[4 * j + 2 * r + c] : 0.0f;
        for (unsigned k = 0; k < kk; ++k) acc = fmaf(a[r][k], b[k], acc);
        w.d[4 * j + 2 * r + c] = acc;
      }
    }
}
// wgmma.mma_async.sync.aligned.m64n{n}k{16|32}.f32.{kind}: issued by every thread of a warpgroup
inline void emu_wgmma(float* d, int n, uint64_t da, uint64_t db, int scale_d, int tnsp_a, int tnsp_b,
                      int kind) {
  if (n < 8 || n > 256 || n % 8) emu_fail("wgmma N must be a multiple of 8 in 8..256");
  if (kind >= 2 && (tnsp_a || tnsp_b)) emu_fail("8-bit wgmma operands must be K-major");
  EmuThreadAsync& a = g_emu->async[emu_fid()];
  a.wgmma.push_back(EmuWgmma{d, n, scale_d, tnsp_a, tnsp_b, kind, da, db, a.wgmma_groups});
}
// wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{bf16|f16} with A from registers: `a` is this
// thread's four 32-bit registers (they must stay alive, unchanged, until the wait that retires
// the instruction), B through its descriptor. Warp-collective: each lane's registers are
// exchanged through the warp (two warp barriers, like stmatrix) so that a thread holds its two
// rows' 16 values, as it reads them when the instruction retires.
inline void emu_wgmma_rs(float* d, int n, const unsigned* a, uint64_t db, int scale_d, int tnsp_b,
                         int kind) {
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  if (n < 8 || n > 256 || n % 8) emu_fail("wgmma N must be a multiple of 8 in 8..256");
  if (kind != 0 && kind != 1) emu_fail("wgmma with A from registers is modelled for bf16 and f16 only");
  if (EMU_WARP != 32 || e->wlive[me / 32] != 32) emu_fail("wgmma without the full warp");
  for (int i = 0; i < 4; ++i) e->stm_regs[me * 4 + i] = a[i];
  emu_warp_barrier();
  EmuWgmma w{d, n, scale_d, 0, tnsp_b, kind, 0, db, e->async[me].wgmma_groups};
  w.rs = true;
  w.a_regs = a;
  memcpy(w.a_saved, a, sizeof(w.a_saved));
  const unsigned quad = me & ~3u;   // the fiber of lane 4 (l / 4): lanes quad .. quad + 3
  for (unsigned q = 0; q < 4; ++q)
    for (unsigned i = 0; i < 4; ++i)
      for (unsigned h = 0; h < 2; ++h) {
        const unsigned v = e->stm_regs[(quad + q) * 4 + i];
        const uint16_t bits = uint16_t(h ? v >> 16 : v & 0xffffu);
        w.a[i % 2][2 * q + 8 * (i / 2) + h] =
            kind == 0 ? __uint_as_float(unsigned(bits) << 16) : __half2float(__half{bits});
      }
  emu_warp_barrier();
  e->async[me].wgmma.push_back(w);
}
inline void emu_wgmma_commit() { ++g_emu->async[emu_fid()].wgmma_groups; }
// wgmma.wait_group n: every group but the newest n retired (their accumulators written)
inline void emu_wgmma_wait(unsigned n) {
  EmuThreadAsync& a = g_emu->async[emu_fid()];
  size_t done = 0;
  for (; done < a.wgmma.size() && a.wgmma[done].group + n < a.wgmma_groups; ++done)
    emu_wgmma_run(a.wgmma[done]);
  a.wgmma.erase(a.wgmma.begin(), a.wgmma.begin() + long(done));
}
// named barriers (bar.sync / bar.arrive id, count): count threads, whole warps
inline void emu_named_arrive(unsigned id, unsigned count, bool wait) {
  Emu* e = g_emu;
  if (id >= 16 || count % 32 || count == 0 || count > e->block.x * e->block.y * e->block.z)
    emu_fail("named barrier id or thread count out of range");
  EmuBlock& b = emu_blk();
  const unsigned long g = b.named_gen[id];
  ++e->events;
  if (++b.named_arrived[id] == count) { b.named_arrived[id] = 0; ++b.named_gen[id]; return; }
  if (wait)
    while (b.named_gen[id] == g) emu_yield();
}
// stmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16 [addr], {r...}: matrix i's row r is lane
// 8i + r's address; lane l's register i holds its elements (l / 4, 2 (l % 4) .. + 1)
inline void emu_stmatrix(unsigned addr, const unsigned* regs, int count) {
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  if (EMU_WARP != 32 || e->wlive[me / 32] != 32) emu_fail("stmatrix without the full warp");
  e->stm_addr[me] = addr;
  for (int i = 0; i < 4; ++i) e->stm_regs[me * 4 + i] = i < count ? regs[i] : 0;
  emu_warp_barrier();
  const unsigned base = me & ~31u, lane = me & 31u;
  if (int(lane / 8) < count) {
    const unsigned mat = lane / 8, row = lane % 8;
    if (addr % 16) emu_fail("stmatrix row address not 16-byte aligned");
    unsigned char* dst = emu_smem(addr, 16);
    for (unsigned q = 0; q < 4; ++q) {
      const unsigned v = e->stm_regs[(base + 4 * row + q) * 4 + mat];
      memcpy(dst + 4 * q, &v, 4);
    }
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
  const unsigned me = emu_fid();
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
// -- Blackwell's tensor memory and tcgen05 (sm_100a) ---------------------------------------------
// A kernel reaches these from the `#else` branch of its tcgen05 inline PTX, with the device code's
// own tensor-memory addresses (lane << 16 | column), shared-memory descriptors and instruction
// descriptors:
//  * tensor memory: 128 lanes x 512 columns of 32 bits per block, poisoned (NaN bits) when the
//    block starts; tcgen05.alloc (whole warp: a power of two of 32..512 columns, the address
//    written to shared memory), tcgen05.dealloc (the same range, nothing in flight); a block that
//    exits still holding columns fails;
//  * tcgen05.mma, cta_group::1, M = 128 (row i of D is lane i), K-major operands: the 64-bit
//    shared-memory descriptor of sm_100 (start, leading and stride byte offsets in 16-byte units at
//    bits 0, 16 and 32, the version 1 at bit 46, base offset 0, layout at bits 61-63: 0 none, 2
//    128-byte, 4 64-byte, 6 32-byte swizzle); the instruction descriptor's D format (float32),
//    A and B formats (kind::f16: f16 0, bf16 1; kind::f8f6f4 and mxf8f6f4: e4m3 0, e5m2 1, e2m1
//    5 in the padded layout, 16 elements in the first 8 bytes of each 16), N >> 3 at bit 17,
//    M >> 4 at bit 24; anything else set (sparsity, negation, MN-major, saturation) aborts;
//  * block scaling (kind::mxf8f6f4.block_scale, scale_vec::1X, ue8m0 at bit 23): one scale per
//    row per instruction from tensor memory, row r of A at lane r, column (scale A's column +
//    r / 32), byte a_sf_id (bits 29-30); row r of B at lane r % 32 + 32 ((r / 32) % 4), column
//    (scale B's column + r / 32), byte b_sf_id (bits 4-5): the layout tcgen05.cp.32x128b.warpx4
//    writes from 512 bytes whose 16-byte row l holds rows l, l + 32, l + 64, l + 96 (4 bytes each);
//  * tcgen05.cp.32x128b.warpx4: 32 rows of 16 bytes (through a descriptor) into 4 columns of
//    lanes l, l + 32, l + 64 and l + 96;
//  * tcgen05.mma.cta_group::2 (a CTA pair of a cluster, issued by one thread of the even rank
//    r): M = 256, row i of D at lane i % 128 of block r + i / 128; A's rows 0..127 read through
//    the descriptor in block r's shared memory, rows 128..255 at the same offsets in block r + 1;
//    B's N rows split in halves the same way (rows 0..N/2-1 from block r, the rest from r + 1,
//    row j - N/2 there); tcgen05.alloc / dealloc .cta_group::2 are modelled as each block's own
//    (a warp of each allocates the same columns);
//  * tcgen05.commit: an arrive on the mbarrier once every earlier operation is done (.multicast::
//    cluster: on the barrier at the same offset in each block of the mask). Operations are
//    performed in issue order, lazily (when a thread waits on the barrier of a later commit:
//    operands are read as late as the hardware may) or, in the eager mode, at issue;
//  * tcgen05.ld.32x32b: warp w reads lanes 32 (w % 4) .. + 31 (its address names that lane
//    quadrant), thread l lane 32 (w % 4) + l, consecutive columns.
inline EmuBlock& emu_tmem_block() {
  EmuBlock& b = emu_blk();
  if (b.tmem.empty()) b.tmem.assign(128 * 512, 0x7fffffffu);
  return b;
}
inline void emu_tmem_check_in(const EmuBlock& b, unsigned addr, unsigned cols, const char* what) {
  const unsigned col = addr & 0xFFFFu;
  for (const auto& a : b.tmem_allocs)
    if (col >= a.first && col + cols <= a.first + a.second) return;
  fprintf(stderr, "emu: %s: tensor memory columns %u..%u are not allocated\n", what, col, col + cols - 1);
  abort();
}
inline void emu_tmem_check(unsigned addr, unsigned cols, const char* what) {
  emu_tmem_check_in(emu_blk(), addr, cols, what);
}
inline void emu_tcgen05_alloc(unsigned dst, unsigned cols) {
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  if (e->wlive[me / 32] != 32) emu_fail("tcgen05.alloc without the full warp");
  if ((me & 31u) == 0) {
    if (cols < 32 || cols > 512 || (cols & (cols - 1))) emu_fail("tcgen05.alloc: columns not a power of two in 32..512");
    EmuBlock& b = emu_tmem_block();
    unsigned at = 512;
    for (unsigned c = 0; c + cols <= 512 && at == 512; c += cols) {
      bool free = true;
      for (const auto& a : b.tmem_allocs) free = free && (c + cols <= a.first || a.first + a.second <= c);
      if (free) at = c;
    }
    if (at == 512) emu_fail("tcgen05.alloc: not enough free tensor memory");
    b.tmem_allocs.push_back({at, cols});
    memcpy(emu_smem(dst, 4), &at, 4);   // lane 0, column `at`
  }
  ++e->events;
  emu_warp_barrier();
}
inline void emu_tcgen05_dealloc(unsigned addr, unsigned cols) {
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  if (e->wlive[me / 32] != 32) emu_fail("tcgen05.dealloc without the full warp");
  if ((me & 31u) == 0) {
    EmuBlock& b = emu_blk();
    for (const auto& op : b.tc_ops)
      if (op.type != 2) emu_fail("tcgen05.dealloc while tcgen05 operations are still in flight");
    size_t i = 0;
    while (i < b.tmem_allocs.size() && !(b.tmem_allocs[i].first == addr && b.tmem_allocs[i].second == cols)) ++i;
    if (i == b.tmem_allocs.size()) emu_fail("tcgen05.dealloc of a range tcgen05.alloc did not return");
    b.tmem_allocs.erase(b.tmem_allocs.begin() + long(i));
  }
  ++e->events;
  emu_warp_barrier();
}
// shared address of byte `kbyte` (along K) of row `row` of a K-major operand behind an sm_100
// shared-memory descriptor
inline unsigned emu_umma_desc_addr(uint64_t desc, unsigned row, unsigned kbyte) {
  const unsigned start = unsigned(desc & 0x3FFF) << 4, lbo = unsigned((desc >> 16) & 0x3FFF) << 4,
                 sbo = unsigned((desc >> 32) & 0x3FFF) << 4, layout = unsigned(desc >> 61);
  if (((desc >> 46) & 3u) != 1) emu_fail("tcgen05 descriptor version (bits 46-47) is not 1");
  if ((desc >> 49) & 7u) emu_fail("tcgen05 descriptor base offset other than 0 is not modelled");
  if ((desc >> 52) & 0x1FFu) emu_fail("tcgen05 descriptor bits 52-60 (absolute LBO mode, reserved) set");
  if ((desc >> 14) & 3u || (desc >> 30) & 3u) emu_fail("tcgen05 descriptor reserved bits 14-15 or 30-31 set");
  const unsigned span = layout == 2 ? 128 : layout == 4 ? 64 : layout == 6 ? 32 : layout == 0 ? 0 : 1;
  if (span == 1) emu_fail("tcgen05 descriptor layout type not modelled (only none, 32B, 64B, 128B swizzle)");
  if (span) {
    if (kbyte >= span) emu_fail("tcgen05 K slice wider than the descriptor's swizzle span");
    return emu_swizzle(start + (row / 8) * sbo + (row % 8) * span + kbyte, span);
  }
  return start + (row / 8) * sbo + (row % 8) * 16 + (kbyte / 16) * lbo + kbyte % 16;
}
inline float emu_e2m1(unsigned v) {
  static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (v & 8u) ? -mag[v & 7u] : mag[v & 7u];
}
// the K elements of one row of an operand: kind 0 (f16: format 0 f16, 1 bf16; 16 elements) or
// kinds 1, 2 (f8f6f4: format 0 e4m3, 1 e5m2, 5 e2m1 padded; 32 elements), read in the shared
// memory of the cluster's block `window` names ((rank + 1) << 24)
inline int emu_umma_row(uint64_t desc, unsigned row, int kind, unsigned fmt, float* out,
                        unsigned window) {
  if (kind == 0) {
    if (fmt > 1) emu_fail("kind::f16 operand format other than f16 or bf16");
    for (unsigned k = 0; k < 16; ++k)
      out[k] = emu_elem(window | emu_umma_desc_addr(desc, row, 2 * k), fmt ? 0 : 1);
    return 16;
  }
  if (fmt != 0 && fmt != 1 && fmt != 5) emu_fail("kind::f8f6f4 operand format not modelled (e4m3, e5m2, e2m1)");
  for (unsigned k = 0; k < 32; ++k) {
    if (fmt == 5) {
      const unsigned char v = *emu_smem(window | emu_umma_desc_addr(desc, row, (k / 16) * 16 + (k % 16) / 2), 1);
      out[k] = emu_e2m1(k % 2 ? v >> 4 : v & 15u);
    } else {
      out[k] = emu_elem(window | emu_umma_desc_addr(desc, row, k), fmt ? 3 : 2);
    }
  }
  return 32;
}
inline float emu_ue8m0(const EmuBlock& b, unsigned lane, unsigned col, unsigned id) {
  const unsigned v = (b.tmem[lane * 512 + col] >> (8 * id)) & 0xFFu;
  return v == 255 ? NAN : ldexpf(1.0f, int(v) - 127);
}
inline void emu_tcgen05_mma_run(EmuBlock& b, const EmuTcOp& op) {
  const unsigned id = op.idesc, scaled = op.kind == 2;
  if (id & 0xFu) emu_fail("tcgen05 instruction descriptor: sparsity or saturation (bits 0-3) set");
  if (!scaled && ((id >> 4) & 3u) != 1) emu_fail("tcgen05 instruction descriptor: D format is not float32");
  if ((id >> 6) & 1u) emu_fail("tcgen05 instruction descriptor: reserved bit 6 set");
  if ((id >> 13) & 3u) emu_fail("tcgen05 instruction descriptor: negation is not modelled");
  if ((id >> 15) & 3u) emu_fail("tcgen05 instruction descriptor: MN-major operands are not modelled");
  if (!scaled && (id >> 23) & 1u) emu_fail("tcgen05 instruction descriptor: reserved bit 23 set");
  if (scaled && !((id >> 23) & 1u)) emu_fail("tcgen05 block scaling: scale format is not ue8m0 (bit 23)");
  if (!scaled && (id >> 29)) emu_fail("tcgen05 instruction descriptor: bits 29-31 set");
  if (scaled && (id >> 31)) emu_fail("tcgen05 block scaling: K size bit 31 set");
  const unsigned n = ((id >> 17) & 63u) << 3, m = ((id >> 24) & 31u) << 4, pair = op.group == 2;
  if (m != 128 * op.group) emu_fail("tcgen05.mma: only M = 128 (cta_group::1) and M = 256 (cta_group::2) are modelled");
  if (n < 16 || n > 256 || n % 16) emu_fail("tcgen05.mma: N must be a multiple of 16 in 16..256");
  if (op.d >> 16) emu_fail("tcgen05.mma: D's address names a lane other than 0");
  if (pair && (op.issuer % 2 || op.issuer + 1 >= g_emu->cluster))
    emu_fail("tcgen05.mma.cta_group::2 issued outside the even rank of a CTA pair");
  if (pair && scaled) emu_fail("tcgen05.mma.cta_group::2 with block scaling is not modelled");
  EmuBlock* blk[2] = {&g_emu->blocks[op.issuer], &g_emu->blocks[op.issuer + pair]};
  for (unsigned h = 0; h <= pair; ++h) {
    if (blk[h]->tmem.empty()) blk[h]->tmem.assign(128 * 512, 0x7fffffffu);
    emu_tmem_check_in(*blk[h], op.d, n, "tcgen05.mma D");
  }
  const unsigned afmt = (id >> 7) & 7u, bfmt = (id >> 10) & 7u, d0 = op.d & 0xFFFFu;
  unsigned sfa = 0, sfb = 0, ida = 0, idb = 0;
  if (scaled) {
    if (op.sfa >> 16 || op.sfb >> 16) emu_fail("tcgen05.mma block scaling: a scale address names a lane other than 0");
    sfa = op.sfa & 0xFFFFu; sfb = op.sfb & 0xFFFFu; ida = (id >> 29) & 3u; idb = (id >> 4) & 3u;
    emu_tmem_check(op.sfa, 4, "tcgen05.mma scale A");
    emu_tmem_check(op.sfb, (n + 31) / 32, "tcgen05.mma scale B");
  }
  static float a[256][32], bm[256][32];
  int kk = 0;
  const unsigned bhalf = pair ? n / 2 : n;   // B's rows per block
  for (unsigned i = 0; i < m; ++i)
    kk = emu_umma_row(op.a, i % 128, op.kind, afmt, a[i], (op.issuer + i / 128 + 1) << 24);
  for (unsigned j = 0; j < n; ++j)
    emu_umma_row(op.b, j % bhalf, op.kind, bfmt, bm[j], (op.issuer + j / bhalf + 1) << 24);
  for (unsigned i = 0; i < m; ++i) {
    const float sa = scaled ? emu_ue8m0(b, i, sfa + i / 32, ida) : 1.0f;
    for (unsigned j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int k = 0; k < kk; ++k) s = fmaf(a[i][k], bm[j][k], s);
      if (scaled) s *= sa * emu_ue8m0(b, j % 32 + 32 * ((j / 32) % 4), sfb + j / 32, idb);
      uint32_t& cell = blk[i / 128]->tmem[(i % 128) * 512 + d0 + j];
      const float prior = op.accumulate ? __uint_as_float(cell) : 0.0f;
      cell = __float_as_uint(prior + s);
    }
  }
}
inline void emu_tcgen05_cp_run(EmuBlock& b, const EmuTcOp& op) {
  if (op.d >> 16) emu_fail("tcgen05.cp.32x128b.warpx4: the address names a lane other than 0");
  emu_tmem_check(op.d, 4, "tcgen05.cp");
  const unsigned col = op.d & 0xFFFFu;
  for (unsigned r = 0; r < 32; ++r) {
    uint32_t w[4];
    for (unsigned q = 0; q < 4; ++q)
      memcpy(&w[q], emu_smem(((op.issuer + 1) << 24) | emu_umma_desc_addr(op.a, r, 4 * q), 4), 4);
    for (unsigned rep = 0; rep < 4; ++rep)
      for (unsigned q = 0; q < 4; ++q) b.tmem[(32 * rep + r) * 512 + col + q] = w[q];
  }
}
// does commit `op` arrive on the barrier at cluster-absolute address `bar`?
inline bool emu_tc_commit_to(const EmuTcOp& op, unsigned bar) {
  if (op.type != 2) return false;
  if (!op.mask) return op.bar == bar;
  const unsigned r = bar >> 24;
  return r && ((op.mask >> (r - 1)) & 1u) && (bar & 0xFFFFFFu) == op.bar;
}
inline void emu_tc_commit_arrive(const EmuTcOp& op) {
  if (!op.mask) { emu_mbar_arrive(op.bar); return; }
  for (unsigned r = 0; r < g_emu->cluster; ++r)
    if ((op.mask >> r) & 1u) emu_mbar_arrive(((r + 1) << 24) | op.bar);
}
inline void emu_tcgen05_run(EmuBlock& b, const EmuTcOp& op) {
  if (op.type == 0) emu_tcgen05_mma_run(b, op);
  else if (op.type == 1) emu_tcgen05_cp_run(b, op);
  else emu_tc_commit_arrive(op);
}
// perform, in each block of the cluster, its tcgen05 operations in issue order up to its last
// commit that arrives on `bar` (every commit passed arrives on its barriers)
inline void emu_tcgen05_complete(unsigned bar) {
  for (auto& b : g_emu->blocks) {
    size_t last = b.tc_ops.size();
    for (size_t i = 0; i < b.tc_ops.size(); ++i)
      if (emu_tc_commit_to(b.tc_ops[i], bar)) last = i;
    if (last == b.tc_ops.size()) continue;
    std::vector<EmuTcOp> ops(b.tc_ops.begin(), b.tc_ops.begin() + long(last) + 1);
    b.tc_ops.erase(b.tc_ops.begin(), b.tc_ops.begin() + long(last) + 1);
    for (const auto& op : ops) emu_tcgen05_run(b, op);
  }
}
inline void emu_tcgen05_issue(EmuTcOp op) {
  EmuBlock& b = emu_tmem_block();
  op.issuer = b.rank;
  ++g_emu->events;
  if (g_emu_eager_tma && b.tc_ops.empty()) {
    emu_tcgen05_run(b, op);
    return;
  }
  b.tc_ops.push_back(op);
}
// tcgen05.mma.cta_group::{1,2}.kind::{f16 (kind 0), f8f6f4 (1)} [d], adesc, bdesc, idesc,
// accumulate and kind::mxf8f6f4.block_scale (2) with [scale A], [scale B]: one thread issues it
// (for cta_group::2, a thread of the pair's even rank)
inline void emu_tcgen05_mma(unsigned d, uint64_t adesc, uint64_t bdesc, unsigned idesc, int accumulate,
                            int kind, unsigned sfa = 0, unsigned sfb = 0, unsigned group = 1) {
  if (kind < 0 || kind > 2) emu_fail("tcgen05.mma kind not modelled");
  if (group != 1 && group != 2) emu_fail("tcgen05.mma cta_group other than 1 or 2");
  EmuTcOp op{0, d, sfa, sfb, idesc, 0, adesc, bdesc, accumulate, kind};
  op.group = group;
  emu_tcgen05_issue(op);
}
// tcgen05.cp.cta_group::1.32x128b.warpx4 [taddr], sdesc
inline void emu_tcgen05_cp_32x128b_warpx4(unsigned taddr, uint64_t sdesc) {
  emu_tcgen05_issue(EmuTcOp{1, taddr, 0, 0, 0, 0, sdesc, 0, 0, 0});
}
// tcgen05.commit.cta_group::1.mbarrier::arrive::one [bar]
inline void emu_tcgen05_commit(unsigned bar) {
  emu_barrier(bar);
  emu_tcgen05_issue(EmuTcOp{2, 0, 0, 0, 0, emu_cluster_addr(bar), 0, 0, 0, 0});
}
// tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster [bar], mask:
// one arrival on the barrier at bar's offset in each block of the mask
inline void emu_tcgen05_commit_multicast(unsigned bar, unsigned mask) {
  if (bar >> 24) emu_fail("a multicast commit names this block's shared address of the barrier");
  if (!mask || (mask >> g_emu->cluster)) emu_fail("a tcgen05.commit multicast mask names a block outside the cluster");
  for (unsigned r = 0; r < g_emu->cluster; ++r)
    if ((mask >> r) & 1u) emu_barrier(((r + 1) << 24) | bar);
  EmuTcOp op{2, 0, 0, 0, 0, bar, 0, 0, 0, 0};
  op.mask = mask;
  emu_tcgen05_issue(op);
}
// tcgen05.ld.sync.aligned.32x32b.x{n}.b32: this thread's lane, n consecutive columns
inline void emu_tcgen05_ld_32x32b(uint32_t* out, unsigned n, unsigned taddr) {
  const unsigned warp = emu_lin() / 32, lane = emu_lin() % 32;
  if ((taddr >> 16) != 32 * (warp % 4)) emu_fail("tcgen05.ld: the address is not this warp's lane quadrant (32 (warp % 4))");
  emu_tmem_check(taddr, n, "tcgen05.ld");
  const EmuBlock& b = emu_tmem_block();
  const unsigned row = (taddr >> 16) + lane, col = taddr & 0xFFFFu;
  for (unsigned j = 0; j < n; ++j) out[j] = b.tmem[row * 512 + col + j];
  ++g_emu->events;
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
  const unsigned me = emu_fid();
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
// gfx950's block-scaled MFMA, v_mfma_scale_f32_32x32x64_f8f6f4, with FP4 (e2m1) A and B only
// (cbsz = blgp = 4): D = C + sum_k A[i][k] 2^(sa - 127) B[k][j] 2^(sb - 127). Operands: an FP4
// operand is the low 128 bits of the 8-dword argument (the device compiler passes four registers;
// the upper four dwords are ignored), lane 32 g + i holding the 32 consecutive k = 32 g .. 32 g +
// 31 of row i of A (column j of B for lane 32 g + j), two per byte, the lower k in the low nibble.
// Scales: byte 0 of lane 32 g + i's scale_a (op_sel 0) is the E8M0 scale of A's row i, k block g,
// and byte 0 of lane 32 g + j's scale_b that of B's column j, block g (0xff: NaN). That scale
// mapping is an assumption: the lane that holds a block's 32 elements supplies its scale; nothing
// here states it and no hardware here can check it. Each block's 32 products are summed exactly
// (e2m1 products are exact in float32 and so is their sum), scaled by ldexp and accumulated onto C
// in block order. Other formats and op_sel values abort. D is laid out as the 32 x 32 MFMA's.
// Tested against a scalar block-scaled matmul, slot by slot (tests/test_hip_mfma_emulation.py).
inline void emu_require_wavefront(const char* name) {
  if (EMU_WARP != 64 || g_emu->wlive[emu_fid() / 64] != 64) {
    fprintf(stderr, "emu: %s without the full wavefront\n", name);
    abort();
  }
}
template <class VA, class VC>
inline VC emu_mfma_scale_f32_32x32x64_f8f6f4(VA a, VA b, VC c, int cbsz, int blgp, int opsel_a,
                                             int scale_a, int opsel_b, int scale_b) {
  static_assert(sizeof(VA) == 32 && sizeof(VC) == 64, "MFMA scale operand sizes");
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  emu_require_wavefront("mfma_scale_f32_32x32x64_f8f6f4");
  if (cbsz != 4 || blgp != 4) emu_fail("mfma_scale: only FP4 (e2m1) A and B (cbsz = blgp = 4) are modelled");
  if (opsel_a != 0 || opsel_b != 0) emu_fail("mfma_scale: only op_sel 0 (scale byte 0) is modelled");
  memcpy(&e->frag[me * EMU_FRAG], &a, 16);       // the low 128 bits: 32 e2m1 codes
  memcpy(&e->frag[me * EMU_FRAG + 4], &b, 16);
  e->frag[me * EMU_FRAG + 8] = unsigned(scale_a);
  e->frag[me * EMU_FRAG + 9] = unsigned(scale_b);
  emu_warp_barrier();
  const unsigned base = me & ~63u, lane = me & 63u;
  auto code = [&](unsigned l, int k, int which) {   // element k % 32 of lane l's operand
    const unsigned w = e->frag[(base + l) * EMU_FRAG + 4 * which + (k % 32) / 8];
    return emu_e2m1((w >> (4 * (k % 8))) & 15u);
  };
  auto scale = [&](unsigned l, int which) { return e->frag[(base + l) * EMU_FRAG + 8 + which] & 0xffu; };
  float acc[16];
  memcpy(acc, &c, sizeof(VC));
  const unsigned j = lane % 32;
  for (int r = 0; r < 16; ++r) {
    const unsigned i = 8 * (r / 4) + 4 * (lane / 32) + r % 4;
    float sum = acc[r];
    for (int g = 0; g < 2; ++g) {
      const unsigned sa = scale(32 * g + i, 0), sb = scale(32 * g + j, 1);
      float block = 0.0f;
      for (int k = 0; k < 32; ++k) block += code(32 * g + i, k, 0) * code(32 * g + j, k, 1);
      sum += (sa == 0xffu || sb == 0xffu) ? __uint_as_float(0x7fc00000u)
                                           : ldexpf(block, int(sa) + int(sb) - 254);
    }
    acc[r] = sum;
  }
  emu_warp_barrier();
  VC d;
  memcpy(&d, acc, sizeof(VC));
  return d;
}
// GCN / CDNA DPP lane moves within 16-lane rows (__builtin_amdgcn_update_dpp(old, src, ctrl,
// row_mask, bank_mask, bound_ctrl): v_mov_b32 old, then v_mov_b32_dpp of src, which the compiler
// folds into the VALU instruction that uses it, e.g. v_add_f32_dpp) and v_readlane_b32. Lane l is
// lane i = l % 16 of row l / 16; it reads src from lane (l & ~15) | j with, per control:
//   quad_perm 0x00-0xff: j = (i & ~3) | ((ctrl >> 2 (i & 3)) & 3)
//   row_shl:n 0x101-0x10f: j = i + n;   row_shr:n 0x111-0x11f: j = i - n  (no source past the row)
//   row_ror:n 0x121-0x12f: j = (i - n) & 15
//   row_mirror 0x140: j = 15 - i;       row_half_mirror 0x141: j = (i & 8) | (7 - (i & 7))
// A lane with no source lane gets 0 with bound_ctrl and keeps `old` without. The wave-wide
// controls (wave_shl, wave_rol..., row_bcast:15/31) and row or bank masks other than 0xf (lanes
// that keep `old`) are not modelled and abort, as does a move without the full wavefront. Tested
// lane by lane against the same table (tests/test_hip_emulation.py).
inline int emu_dpp_source(int ctrl, unsigned i) {
  if (ctrl >= 0 && ctrl <= 0xff) return int((i & ~3u) | ((unsigned(ctrl) >> (2 * (i & 3u))) & 3u));
  const int n = ctrl & 15;
  if (ctrl >= 0x101 && ctrl <= 0x10f) return int(i) + n <= 15 ? int(i) + n : -1;
  if (ctrl >= 0x111 && ctrl <= 0x11f) return int(i) - n >= 0 ? int(i) - n : -1;
  if (ctrl >= 0x121 && ctrl <= 0x12f) return int((i - unsigned(n)) & 15u);
  if (ctrl == 0x140) return int(15 - i);
  if (ctrl == 0x141) return int((i & 8u) | (7u - (i & 7u)));
  return -2;
}
template <class T> inline uint64_t emu_lane_bits(T v) {
  static_assert(sizeof(T) == 4, "a DPP move or readlane of a 32-bit value");
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
template <class T> inline T emu_from_lane_bits(uint64_t bits) {
  const uint32_t u = uint32_t(bits);
  T r;
  memcpy(&r, &u, 4);
  return r;
}
template <class T>
inline T emu_update_dpp(T old, T src, int ctrl, int row_mask, int bank_mask, bool bound_ctrl) {
  emu_require_wavefront("update_dpp");
  if (row_mask != 0xf || bank_mask != 0xf) emu_fail("update_dpp: row or bank masks other than 0xf are not modelled");
  const unsigned me = emu_fid(), lane = me & 63u;
  const int j = emu_dpp_source(ctrl, lane & 15u);
  if (j == -2) emu_fail("update_dpp: this dpp_ctrl is not modelled (quad_perm, row_shl/shr/ror, row_mirror, row_half_mirror are)");
  Emu* e = g_emu;
  e->slot[me] = emu_lane_bits(src);
  emu_warp_barrier();
  const uint64_t got = j >= 0 ? e->slot[(me & ~15u) | unsigned(j)] : 0;
  emu_warp_barrier();
  if (j < 0) return bound_ctrl ? emu_from_lane_bits<T>(0) : old;
  return emu_from_lane_bits<T>(got);
}
template <class T> inline T emu_readlane(T v, int lane) {
  emu_require_wavefront("readlane");
  if (lane < 0 || lane > 63) emu_fail("readlane: lane outside the wavefront");
  Emu* e = g_emu;
  const unsigned me = emu_fid();
  e->slot[me] = emu_lane_bits(v);
  emu_warp_barrier();
  const uint64_t got = e->slot[(me & ~63u) | unsigned(lane)];
  emu_warp_barrier();
  return emu_from_lane_bits<T>(got);
}
#define __builtin_amdgcn_update_dpp emu_update_dpp
#define __builtin_amdgcn_readlane emu_readlane
#define __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4 emu_mfma_scale_f32_32x32x64_f8f6f4
// s_getreg_b32 of HW_REG_XCC_ID (register 20, from bit 0): the XCD the workgroup runs on. By
// default the dispatcher is modelled as dealing workgroups round-robin over 8 XCDs (linear block
// id % 8); emu_set_xcc(n) places every workgroup of the next launch on XCD n (n >= 0) or
// scatters them by a hash of the block id (n == -1). A kernel must be correct whichever it reads.
// Other hardware registers abort.
extern int g_emu_xcc_launch;
inline unsigned emu_s_getreg(int simm16) {
  const int id = simm16 & 63, offset = (simm16 >> 6) & 31, bits = ((simm16 >> 11) & 31) + 1;
  if (id != 20 || offset != 0) emu_fail("s_getreg: only HW_REG_XCC_ID from bit 0 is modelled");
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned xcc = block % 8;
  if (g_emu_xcc_launch >= 0) xcc = unsigned(g_emu_xcc_launch);
  if (g_emu_xcc_launch == -1) xcc = (block * 2654435761u >> 13) % 8;
  ++g_emu->events;
  return bits >= 32 ? xcc : xcc & ((1u << bits) - 1u);
}
#define __builtin_amdgcn_s_getreg emu_s_getreg
#endif
// -- the launcher: runs every block of a grid, its threads as fibers ---------------------------
Emu* g_emu = nullptr;
#define EMU_I8 int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t
typedef void (*UniversalFn)(EMU_I8, EMU_I8, EMU_I8, EMU_I8, EMU_I8, float, float, float, float);
static void emu_entry() {
  Emu* e = g_emu;
  // x86-64 SysV: integer-class arguments go to rdi.. then the stack in order, floats to xmm0.. in
  // order, so one universal signature calls any (pointers and integers..., floats...) kernel.
  const int64_t* i = e->ints;
  reinterpret_cast<UniversalFn>(e->fn)(
      i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7], i[8], i[9], i[10], i[11], i[12], i[13], i[14],
      i[15], i[16], i[17], i[18], i[19], i[20], i[21], i[22], i[23], i[24], i[25], i[26], i[27],
      i[28], i[29], i[30], i[31], i[32], i[33], i[34], i[35], i[36], i[37], i[38], i[39],
      e->flts[0], e->flts[1], e->flts[2], e->flts[3]);
  EmuThreadAsync& a = e->async[emu_fid()];
  if (!a.wgmma.empty()) emu_fail("the thread exits with wgmma still in flight (no wait_group)");
  if (!a.stores.empty()) { a.store_groups += 1; emu_bulk_wait(0); }   // stores complete anyway
  e->f[e->cur].done = true;
  ++e->events;
  unsigned w = emu_fid() / EMU_WARP;
  EmuBlock& b = emu_blk();
  --b.live;
  if (b.live && b.arrived == b.live) { b.arrived = 0; ++b.gen; }
  unsigned cluster_live = 0;
  for (const auto& other : e->blocks) cluster_live += other.live;
  if (cluster_live && e->c_arrived == cluster_live) { e->c_arrived = 0; ++e->c_gen; }
  --e->wlive[w];
  if (e->wlive[w] && e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; }
}
// the cluster size of the next launch (cuda_emulation.py reads a kernel's __cluster_dims__)
unsigned g_emu_cluster = 1;
extern "C" void emu_set_cluster(unsigned n) { g_emu_cluster = n ? n : 1; }
// the next launch runs its blocks (clusters) in reverse linear order: a kernel whose result must
// not depend on which block finishes last (a split-K ticket) is run both ways
bool g_emu_reverse_blocks = false;
extern "C" void emu_set_reverse_blocks(int on) { g_emu_reverse_blocks = on != 0; }
// the next launch's XCD placement for HW_REG_XCC_ID (HIP builds): -2 round-robin (the default),
// -1 scattered, n >= 0 all on XCD n
int g_emu_xcc_next = -2, g_emu_xcc_launch = -2;
extern "C" void emu_set_xcc(int mode) { g_emu_xcc_next = mode; }
extern "C" int emu_launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared_bytes, int nint, const int64_t* ints,
                          int nflt, const float* flts) {
  Emu e;
  g_emu = &e;
  e.fn = fn;
  e.cluster = g_emu_cluster;
  g_emu_cluster = 1;
  if (nint > EMU_INTS) { fprintf(stderr, "emu: more than %d integer arguments\n", EMU_INTS); abort(); }
  for (int i = 0; i < EMU_INTS; ++i) e.ints[i] = i < nint ? ints[i] : 0;
  for (int i = 0; i < 4; ++i) e.flts[i] = i < nflt ? flts[i] : 0.0f;
  e.grid = dim3{gx, gy, gz};
  e.block = dim3{bx, by, bz};
  const unsigned nt = bx * by * bz, nw = (nt + EMU_WARP - 1) / EMU_WARP, cl = e.cluster;
  if (cl > 1 && (gx % cl || nt % EMU_WARP)) {
    fprintf(stderr, "emu: a cluster of %u needs gridDim.x a multiple of it and whole warps\n", cl);
    abort();
  }
  e.nt = nt;
  e.smem_bytes = shared_bytes;
  e.blocks.resize(cl);
  // each block's dynamic shared memory starts EMU_SMEM_BASE bytes past a 1024-byte boundary, as
  // its shared addresses do, and is poisoned again for every block: a kernel writes before it reads
  for (auto& b : e.blocks) {
    b.smem_buf.assign(shared_bytes + 16 + 2048, 0xff);
    const uintptr_t raw = reinterpret_cast<uintptr_t>(b.smem_buf.data());
    b.smem = b.smem_buf.data() + ((1024 - raw % 1024) % 1024) + EMU_SMEM_BASE;
  }
  const unsigned nf = nt * cl;
  e.f.resize(nf);
  for (auto& fb : e.f) fb.stack.resize(64 * 1024);
  e.slot.assign(nf, 0);
  e.frag.assign(size_t(nf) * EMU_FRAG, 0);
  e.stm_addr.assign(nf, 0);
  e.stm_regs.assign(size_t(nf) * 4, 0);
  // clusters in linear order (x fastest), or last first after emu_set_reverse_blocks(1)
  const unsigned long ncx = gx / cl, nclusters = ncx * gy * gz;
  const bool reverse = g_emu_reverse_blocks;
  g_emu_reverse_blocks = false;
  g_emu_xcc_launch = g_emu_xcc_next;
  g_emu_xcc_next = -2;
  for (unsigned long lin = 0; lin < nclusters; ++lin) {
        const unsigned long at = reverse ? nclusters - 1 - lin : lin;
        const unsigned x0 = unsigned(at % ncx) * cl, y = unsigned((at / ncx) % gy), z = unsigned(at / (ncx * gy));
        e.wlive.assign(nw * cl, 0);
        e.warrived.assign(nw * cl, 0);
        e.wgen.assign(nw * cl, 0);
        e.c_arrived = 0;
        e.async.assign(nf, EmuThreadAsync{});
        for (unsigned r = 0; r < cl; ++r) {
          EmuBlock& b = e.blocks[r];
          b.bidx = dim3{x0 + r, y, z};
          b.rank = r;
          b.live = nt;
          b.arrived = 0;
          memset(b.smem, 0xff, shared_bytes + 16);
          b.barriers.clear();
          b.tma_loads.clear();
          b.tmem.clear();
          b.tmem_allocs.clear();
          b.tc_ops.clear();
          for (int i = 0; i < 16; ++i) { b.named_arrived[i] = 0; b.named_gen[i] = 0; }
        }
        for (unsigned i = 0; i < nf; ++i) {
          const unsigned t = i % nt;
          ++e.wlive[(i / nt) * nw + t / EMU_WARP];
          EmuFiber& fb = e.f[i];
          fb.done = false;
          fb.tid = dim3{t % bx, (t / bx) % by, t / (bx * by)};
          getcontext(&fb.ctx);
          fb.ctx.uc_stack.ss_sp = fb.stack.data();
          fb.ctx.uc_stack.ss_size = fb.stack.size();
          fb.ctx.uc_link = &e.sched;
          makecontext(&fb.ctx, emu_entry, 0);
        }
        unsigned remaining = nf;
        while (remaining) {
          const unsigned long before = e.events;
          // in the eager mode a cluster's blocks run one at a time for as long as each makes
          // progress, so one runs ahead of the other: a stage refilled before the peer is done
          // with it is overwritten under the peer
          for (unsigned r = 0; r < cl; ++r) {
            unsigned long round;
            do {
              round = e.events;
              for (unsigned i = r * nt; i < (r + 1) * nt; ++i) {
                if (e.f[i].done) continue;
                e.cur = int(i);
                swapcontext(&e.sched, &e.f[i].ctx);
                if (e.f[i].done) --remaining;
              }
            } while (cl > 1 && g_emu_eager_tma && e.events != round);
          }
          if (remaining && e.events == before) {
            fprintf(stderr, "emu: deadlock in block %u: threads wait at different barriers\n", x0);
            abort();
          }
        }
        for (const auto& b : e.blocks) {
          if (!b.tmem_allocs.empty()) {
            fprintf(stderr, "emu: block %u exits holding tensor memory (no tcgen05.dealloc)\n", b.bidx.x);
            abort();
          }
          for (const auto& op : b.tc_ops)
            if (op.type != 2) {
              fprintf(stderr, "emu: block %u exits with a tcgen05 operation nobody waited for\n", b.bidx.x);
              abort();
            }
        }
      }
  g_emu = nullptr;
  return 0;
}
