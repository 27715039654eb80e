// variants/attention/tma_overlap: variants/attention/tma_pingpong with ATTN_PINGPONG 0 (no named
// barriers between the consumer warpgroups: each overlaps its own softmax with its own GEMMs only),
// kept to time the ping-pong's effect side by side. Everything below the define is that source.
#define ATTN_PINGPONG 0
// Variant of the committed attention@h200 kernel (timed beside it: benchmarks/variants.py
// attention --target h200 committed variants/attention/*): the same FlashAttention-3 schedule, fed
// by TMA tensor loads instead of cp.async, with ping-pong scheduling of the two consumer
// warpgroups and a TMA store epilogue.
//
// Fast path, D = 64 and 128 (`attention_tma_d{64,128}`): a persistent block (one per SM) walks
// work tiles of 128 query rows of one (b, query head), longest causal first, with three
// warpgroups.
//  * Warpgroup 0 is the producer (setmaxnreg.dec to 24 registers): one thread issues every copy.
//    Q, K and V are seen through 3-D tensor maps over [D, S, heads] (innermost first; heads =
//    B * Hq for q and out, B * Hkv for k and v), boxes of 64 d x 128 rows x 1 head with the
//    128-byte swizzle (the layout the wgmma descriptors read: [D / 64][128 rows][128 bytes],
//    chunk c of row r at chunk c ^ (r % 8)). A box starting past S, or running past it, is
//    zero-filled by TMA in the S dimension: it never reaches the next head's rows, so partial
//    tiles need no other copy path. GQA is the head coordinate: query head h of batch b reads
//    K/V head b * Hkv + h / G. Per tile: the Q tile (D / 64 boxes, once the consumers released the
//    previous one), then per key tile its K and its V into a kStages-deep ring, each completing
//    on its own full mbarrier armed with the tile's bytes (arrive.expect_tx).
//  * Warpgroups 1 and 2 are consumers (setmaxnreg.inc to 240), 64 query rows each: S = Q K^T with
//    wgmma m64n128k16 (both operands in shared memory), the online softmax on the accumulator
//    registers (float32, ex2.approx with log2(e) folded into the scale, the row sums kept per
//    thread and reduced over the quad once per tile), P rounded to bf16 and kept in registers as
//    wgmma's A operand, O += P V with wgmma m64n64k16 (V read MN-major, transposed by the
//    instruction). Within a warpgroup (FA3's intra-warpgroup overlap) S(j) = Q K(j)^T and
//    O += P(j-1) V(j-1) are in flight while the warpgroup runs the softmax of S(j). Between the
//    two warpgroups (FA3's ping-pong), named barriers 1 and 2 order their GEMM issues: warpgroup
//    1 issues S(j) and P V(j-1), lets warpgroup 2 issue its pair, and runs its softmax while the
//    tensor cores work on warpgroup 2's GEMMs, and the other way round. Stages are handed back
//    (empty mbarriers, every consumer thread) as soon as the wgmma reading them have retired.
//  * Under the causal mask a tile walks key tiles 0..its own (BM = BN = 128: the diagonal tile
//    is the last) and masks only that one; keys past S (zeros from TMA) are masked in the last
//    tile. The epilogue writes lse with plain stores and O / l, rounded to bf16, through stmatrix
//    into a swizzled shared buffer per consumer and one TMA tensor store per 64-wide d slice
//    (rows past S are dropped by the map), overlapping the producer's loads for the next tile.
//
// Device-only instructions sit under #ifdef __CUDA_ARCH__; the #else branches call regen's CUDA
// emulation (tests/support/cuda_emulation.h), which models the same TMA copies and swizzle,
// mbarrier phases and transaction counts, wgmma from descriptors (and with A from registers),
// stmatrix, TMA stores and named barriers, so the emulation runs this very schedule.
//
// Fallback (`attention_rows`), any other D: the committed kernel's warp per query row and slice
// of 256 d, lanes over d, online softmax over every key the row attends, plain loads.
#include <cuda_bf16.h>

#ifndef CU_TENSOR_MAP_NUM_QWORDS
struct __align__(64) CUtensorMap { unsigned long long opaque[16]; };
#endif

namespace {

constexpr int kBM = 128;   // query rows per work tile (two consumer warpgroups of 64)
constexpr int kBN = 128;   // keys per tile
constexpr int kThreads = 384;
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
// ping-pong between the consumer warpgroups (variants/attention/tma_overlap is this source with 0:
// the intra-warpgroup overlap alone, for timing the two side by side)
#ifndef ATTN_PINGPONG
#define ATTN_PINGPONG 1
#endif
constexpr bool kPingPong = ATTN_PINGPONG != 0;
constexpr unsigned kSlice = 128 * 128;   // bytes of one 64-wide d slice of a 128-row tile

typedef unsigned u32;
typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

// -- mbarriers, TMA, fences (PTX ISA 8.0, sm_90a) ------------------------------------------------
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  emu_mbar_init(bar, count);
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  emu_mbar_arrive(bar);
#endif
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  emu_mbar_arrive_expect_tx(bar, bytes);
#endif
}
// wait until the phase with this parity has completed
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
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
// one box of a 3-D tensor map into shared memory; coordinates innermost first (d, row, head)
__device__ __forceinline__ void tma_load_3d(u32 dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            u32 bar) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
#else
  emu_tma_load_3d(dst, map, c0, c1, c2, bar);
#endif
}
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, int c0, int c1, int c2, u32 src) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
               ::"l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");
#else
  emu_tma_store_3d(map, c0, c1, c2, src);
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  emu_bulk_commit();
#endif
}
// the shared memory of every store group has been read (the buffer may be written again)
__device__ __forceinline__ void bulk_wait_read_all() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#else
  emu_bulk_wait(0);
#endif
}
__device__ __forceinline__ void bulk_wait_all() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#else
  emu_bulk_wait(0);
#endif
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
#endif
}
// generic-proxy writes to shared memory become visible to the TMA unit
__device__ __forceinline__ void fence_proxy_async() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// named barriers over `count` threads (whole warps): bar.sync waits, bar.arrive does not
__device__ __forceinline__ void named_sync(u32 id, u32 count) {
#ifdef __CUDA_ARCH__
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#else
  emu_named_arrive(id, count, true);
#endif
}
__device__ __forceinline__ void named_arrive(u32 id, u32 count) {
#ifdef __CUDA_ARCH__
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#else
  emu_named_arrive(id, count, false);
#endif
}
// four 8 x 8 bf16 matrices of a warp into shared memory (row addresses from lanes 8i..8i+7)
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 r0, u32 r1, u32 r2, u32 r3) {
#ifdef __CUDA_ARCH__
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
#else
  const u32 regs[4] = {r0, r1, r2, r3};
  emu_stmatrix(addr, regs, 4);
#endif
}
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef __CUDA_ARCH__
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
#endif
}
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef __CUDA_ARCH__
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
#endif
}
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// -- wgmma ---------------------------------------------------------------------------------------
// byte offset of (row, byte) in a block of 128-byte rows written with the 128-byte swizzle
__device__ __forceinline__ u32 swz128(u32 row, u32 byte) { return row * 128u + (byte ^ ((row & 7u) << 4)); }
// descriptor: start address >> 4, leading and stride byte offsets 1024 (the stride between 8-row
// atoms; no instruction here spans two 64-wide atoms in its contiguous dimension, so the leading
// offset is never used), 128-byte swizzle (mode 1 in bits 62-63)
__device__ __forceinline__ u64 make_desc(u32 addr) {
  return u64((addr & 0x3ffffu) >> 4) | (u64(1024 >> 4) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef __CUDA_ARCH__
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  emu_wgmma_commit();
#endif
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  emu_wgmma_wait(N);
#endif
}
// registers an in-flight wgmma reads or writes are not touched by other code before the wait
template <int R> __device__ __forceinline__ void fence_operands(float (&d)[R]) {
#ifdef __CUDA_ARCH__
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}
__device__ __forceinline__ void fence_operands(u32 (&p)[8][4]) {
#ifdef __CUDA_ARCH__
#pragma unroll
  for (int k = 0; k < 8; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(p[k][i])::"memory");
#endif
}

// S[64 x 128] (+)= A[64 x 16] B[128 x 16]^T, both K-major in shared memory. Register 4j + {0,1}:
// row 16 warp + lane / 4, column 8j + 2 (lane % 4) + {0,1}; 4j + {2,3}: 8 rows down.
__device__ __forceinline__ void wgmma_qk(float (&d)[64], u32 a_addr, u32 b_addr, int accumulate) {
  const u64 da = make_desc(a_addr), db = make_desc(b_addr);
#ifdef __CUDA_ARCH__
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
#else
  emu_wgmma(d, 128, da, db, accumulate, 0, 0, 0);
#endif
}

// O[64 x 64] += P[64 x 16] (registers: wgmma's A fragment, bf16 pairs) V[16 x 64] (MN-major in
// shared memory, transposed by the instruction)
__device__ __forceinline__ void wgmma_pv(float (&d)[32], const u32 (&a)[4], u32 b_addr) {
  const u64 db = make_desc(b_addr);
#ifdef __CUDA_ARCH__
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#else
  emu_wgmma_rs(d, 64, a, db, 1, 1, 0);
#endif
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const u32*>(&v);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// S[64 x 128] = Q[64 x D] K(j)[128 x D]^T: D / 16 wgmma steps along d (issued, not waited)
template <int D>
__device__ __forceinline__ void issue_qk(float (&sc)[64], u32 q_addr, u32 k_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const u32 off = u32(kk / 4) * kSlice + u32(kk % 4) * 32u;
    wgmma_qk(sc, q_addr + off, k_addr + off, kk > 0);
  }
}

// O[64 x D] += P[64 x 128] V(j)[128 x D]: 8 steps along the keys, one m64n64 per 64 columns of d
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 64][32], const u32 (&p)[8][4], u32 v_addr) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
#pragma unroll
    for (int db = 0; db < D / 64; ++db) wgmma_pv(o[db], p[kk], v_addr + u32(db) * kSlice + u32(kk) * 2048u);
}

// mask (keys past the end of the sequence; under the causal mask keys after the query row, only
// in the last, diagonal tile), then the online softmax of one tile in place: sc becomes
// exp2(s * scale_log2 - m), alpha the factor O must be rescaled by, l_run this thread's part of
// the row sum (its quad's four parts add up to the row's). A row's 32 values sit in a quad.
__device__ __forceinline__ void softmax_tile(float (&sc)[64], float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2], bool mask, int col0,
                                             const int (&my_row)[2], int t, int S, bool causal,
                                             float scale_log2) {
  if (mask) {
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int col = col0 + 8 * (i / 4) + 2 * (t % 4) + (i % 2);
      const int row = my_row[(i % 4) / 2];
      if (col >= S || (causal && col > row)) sc[i] = neg_inf();
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = neg_inf();
#pragma unroll
    for (int i = 0; i < 64; ++i)
      if ((i % 4) / 2 == h) mx = fmaxf(mx, sc[i]);
    mx = quad_max(mx * scale_log2);
    const float m_new = fmaxf(m_run[h], mx);
    const float m_use = m_new == neg_inf() ? 0.f : m_new;  // a row with no key yet
    alpha[h] = fast_exp2(m_run[h] - m_use);
    m_run[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i)
      if ((i % 4) / 2 == h) {
        sc[i] = fast_exp2(fmaf(sc[i], scale_log2, -m_use));
        sum += sc[i];
      }
    l_run[h] = l_run[h] * alpha[h] + sum;
  }
}

// P in bf16 as wgmma's A operand: the accumulator layout of keys 16kk..16kk+15 is the A fragment
__device__ __forceinline__ void pack_p(u32 (&p)[8][4], const float (&sc)[64]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    p[kk][0] = pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
    p[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
    p[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
    p[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

// O *= alpha, done before the wgmma.fence that precedes the next P V (the operand fence keeps the
// compiler from sinking the products past it, which would need another fence)
template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 64][32], const float (&alpha)[2]) {
#pragma unroll
  for (int db = 0; db < D / 64; ++db) {
#pragma unroll
    for (int i = 0; i < 32; ++i) o[db][i] *= alpha[(i % 4) / 2];
    fence_operands(o[db]);
  }
}

// One work tile: 128 query rows of one (b, query head). Tiles are numbered longest causal first
// (all heads' last query tiles, then the ones before), and a persistent block takes every
// gridDim.x-th of them, so the unequal causal tiles balance across SMs; consecutive numbers are
// consecutive query heads, which share K/V heads (GQA) in L2.
struct Tile {
  int q_tile, row0, n_kv, bh, kvh;  // kvh: the K/V head coordinate b * Hkv + h / G
};
__device__ __forceinline__ Tile tile_of(int index, int BH, int Hq, int Hkv, int G, int n_q, bool causal) {
  Tile w;
  w.q_tile = n_q - 1 - index / BH;
  w.bh = index % BH;
  const int b = w.bh / Hq, h = w.bh % Hq;
  w.kvh = b * Hkv + h / G;
  w.row0 = w.q_tile * kBM;
  w.n_kv = causal ? w.q_tile + 1 : n_q;  // BM = BN: the diagonal tile is the last
  return w;
}

// Shared memory (from a 1024-aligned base): Q [D/64][128][64], kStages K and kStages V tiles of
// the same shape, two O staging buffers [D/64][64][64] (one per consumer), then the mbarriers.
template <int D, int kStages>
__device__ __forceinline__ void attention_tma(const CUtensorMap* map_q, const CUtensorMap* map_k,
                                              const CUtensorMap* map_v, const CUtensorMap* map_o,
                                              float* __restrict__ lse, i64 B_, i64 Hkv_, i64 G_,
                                              i64 S_, float scale_log2, i64 causal_) {
  constexpr u32 kTile = kBN * D * 2;  // bytes of one 128-row tile
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const u32 sq = base, sk = sq + kTile, sv = sk + kStages * kTile, so = sv + kStages * kTile;
  const u32 q_full = so + kTile, q_empty = q_full + 8;
  const u32 k_full = q_empty + 8, k_empty = k_full + 8 * kStages;   // [kStages] each, 8 bytes apart
  const u32 v_full = k_empty + 8 * kStages, v_empty = v_full + 8 * kStages;

  const int Hkv = int(Hkv_), G = int(G_), S = int(S_), Hq = Hkv * G, BH = int(B_) * Hq;
  const bool causal = causal_ != 0;
  const int n_q = (S + kBM - 1) / kBM, n_work = n_q * BH;
  const int tid = int(threadIdx.x), wg = tid / 128, t = tid % 128;

  if (tid == 0) {
    mbar_init(q_full, 1);      // the producer's arrive.expect_tx; then the TMA bytes
    mbar_init(q_empty, 256);   // every consumer thread, after its last Q K^T of the tile
    for (int s = 0; s < kStages; ++s) {
      mbar_init(k_full + 8 * s, 1);
      mbar_init(k_empty + 8 * s, 256);
      mbar_init(v_full + 8 * s, 1);
      mbar_init(v_empty + 8 * s, 256);
    }
    mbar_fence_init();
    prefetch_map(map_q);
    prefetch_map(map_k);
    prefetch_map(map_v);
    prefetch_map(map_o);
  }
  __syncthreads();

  // Stage and phase bookkeeping runs across tiles: key tile number `it` (counted over all of this
  // block's work) uses stage it % kStages at phase (it / kStages) % 2; the block's n-th work tile
  // uses the Q buffer at phase n % 2.
  if (wg == 0) {  // ---------------- producer: one thread issues every copy ----------------
    setmaxnreg_dec();
    if (t == 0) {
      u32 it = 0, n = 0;
      for (int index = int(blockIdx.x); index < n_work; index += int(gridDim.x), ++n) {
        const Tile w = tile_of(index, BH, Hq, Hkv, G, n_q, causal);
        mbar_wait(q_empty, (n & 1u) ^ 1u);  // the first use does not wait
        mbar_arrive_expect_tx(q_full, kTile);
#pragma unroll
        for (int ds = 0; ds < D / 64; ++ds) tma_load_3d(sq + ds * kSlice, map_q, ds * 64, w.row0, w.bh, q_full);
        for (int j = 0; j < w.n_kv; ++j, ++it) {
          const u32 s = it % kStages, parity = ((it / kStages) & 1u) ^ 1u;
          mbar_wait(k_empty + 8 * s, parity);
          mbar_arrive_expect_tx(k_full + 8 * s, kTile);
#pragma unroll
          for (int ds = 0; ds < D / 64; ++ds)
            tma_load_3d(sk + s * kTile + ds * kSlice, map_k, ds * 64, j * kBN, w.kvh, k_full + 8 * s);
          mbar_wait(v_empty + 8 * s, parity);
          mbar_arrive_expect_tx(v_full + 8 * s, kTile);
#pragma unroll
          for (int ds = 0; ds < D / 64; ++ds)
            tma_load_3d(sv + s * kTile + ds * kSlice, map_v, ds * 64, j * kBN, w.kvh, v_full + 8 * s);
        }
      }
    }
    return;
  }

  // ---------------- consumers: warpgroup 1 rows 0-63, warpgroup 2 rows 64-127 ----------------
  setmaxnreg_inc();
  const int cw = wg - 1, warp = t / 32, lane = t % 32;
  const u32 q_addr = sq + u32(cw) * 64u * 128u;   // this warpgroup's 64 rows of each d slice
  const u32 obuf = so + u32(cw) * (kTile / 2);    // [D/64][64 rows][128 bytes]
  // ping-pong: a warpgroup issues its GEMMs after bar.sync on its own barrier (1 + cw) and lets
  // the other one go with bar.arrive on the other's; warpgroup 1 goes first
  const u32 my_turn = 1 + u32(cw), their_turn = 2 - u32(cw);
  if (kPingPong && cw == 1) named_arrive(1, 256);
  u32 it = 0, n = 0;
  for (int index = int(blockIdx.x); index < n_work; index += int(gridDim.x), ++n) {
    const Tile w = tile_of(index, BH, Hq, Hkv, G, n_q, causal);
    float o[D / 64][32];  // O[64 x D]: D / 64 tiles of m64n64
#pragma unroll
    for (int db = 0; db < D / 64; ++db)
#pragma unroll
      for (int i = 0; i < 32; ++i) o[db][i] = 0.f;
    float m_run[2] = {neg_inf(), neg_inf()}, l_run[2] = {0.f, 0.f}, alpha[2] = {0.f, 0.f};
    const int my_row[2] = {w.row0 + cw * 64 + 16 * warp + lane / 4, w.row0 + cw * 64 + 16 * warp + lane / 4 + 8};
    float sc[64];
    u32 p[8][4];

    mbar_wait(q_full, n & 1u);
    {  // S(0)
      const u32 s = it % kStages;
      mbar_wait(k_full + 8 * s, (it / kStages) & 1u);
      if (kPingPong) named_sync(my_turn, 256);
      wgmma_fence();
      issue_qk<D>(sc, q_addr, sk + s * kTile);
      wgmma_commit();
      if (kPingPong) named_arrive(their_turn, 256);
      wgmma_wait<0>();
      fence_operands(sc);
      mbar_arrive(k_empty + 8 * s);
      if (w.n_kv == 1) mbar_arrive(q_empty);  // the last read of this Q tile is done
      softmax_tile(sc, m_run, l_run, alpha, kBN > S || (causal && w.n_kv == 1), 0, my_row, t, S,
                   causal, scale_log2);
      pack_p(p, sc);
      fence_operands(p);
    }
    // S(j) and P(j-1) V(j-1) in flight while the softmax of S(j) runs; O is rescaled by the
    // previous tile's factor while S(j) runs, before P(j-1) V(j-1) adds to it
    for (int j = 1; j < w.n_kv; ++j) {
      const u32 cur = it + u32(j), prev = cur - 1, sc_stage = cur % kStages, pv_stage = prev % kStages;
      mbar_wait(k_full + 8 * sc_stage, (cur / kStages) & 1u);
      if (kPingPong) named_sync(my_turn, 256);
      wgmma_fence();
      issue_qk<D>(sc, q_addr, sk + sc_stage * kTile);
      wgmma_commit();
      rescale<D>(o, alpha);
      mbar_wait(v_full + 8 * pv_stage, (prev / kStages) & 1u);
      wgmma_fence();
      issue_pv<D>(o, p, sv + pv_stage * kTile);
      wgmma_commit();
      if (kPingPong) named_arrive(their_turn, 256);
      wgmma_wait<1>();  // S(j) is in
      fence_operands(sc);
      mbar_arrive(k_empty + 8 * sc_stage);
      if (j == w.n_kv - 1) mbar_arrive(q_empty);
      softmax_tile(sc, m_run, l_run, alpha, (j + 1) * kBN > S || (causal && j == w.n_kv - 1), j * kBN,
                   my_row, t, S, causal, scale_log2);
      wgmma_wait<0>();  // P(j-1) V(j-1) is in: O and P may change
#pragma unroll
      for (int db = 0; db < D / 64; ++db) fence_operands(o[db]);
      fence_operands(p);
      mbar_arrive(v_empty + 8 * pv_stage);
      pack_p(p, sc);
      fence_operands(p);
    }
    {  // P(last) V(last)
      const u32 last = it + u32(w.n_kv) - 1, stage = last % kStages;
      rescale<D>(o, alpha);
      mbar_wait(v_full + 8 * stage, (last / kStages) & 1u);
      if (kPingPong) named_sync(my_turn, 256);
      wgmma_fence();
      issue_pv<D>(o, p, sv + stage * kTile);
      wgmma_commit();
      if (kPingPong) named_arrive(their_turn, 256);
      wgmma_wait<0>();
#pragma unroll
      for (int db = 0; db < D / 64; ++db) fence_operands(o[db]);
      fence_operands(p);
      mbar_arrive(v_empty + 8 * stage);
    }
    it += u32(w.n_kv);

    // epilogue: lse = (m + log2 l) ln 2; O / l in bf16 through the staging buffer and TMA stores
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l_run[h] = quad_sum(l_run[h]);
      inv[h] = l_run[h] > 0.f ? 1.f / l_run[h] : 0.f;
    }
    if (t % 4 == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (my_row[h] < S) lse[i64(w.bh) * S + my_row[h]] = (m_run[h] + log2f(l_run[h])) * 0.6931471805599453f;
    if (t == 0) bulk_wait_read_all();  // the previous tile's stores have read the buffer
    named_sync(3 + u32(cw), 128);
    const u32 mat = u32(lane) / 8, srow = 16u * u32(warp) + (mat & 1u) * 8u + u32(lane) % 8u;
#pragma unroll
    for (int db = 0; db < D / 64; ++db)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {  // 16-column blocks: accumulator groups j, j + 1
        const int j = 2 * jj;
        stmatrix_x4(obuf + u32(db) * 8192u + swz128(srow, (u32(jj) * 16u + (mat >> 1) * 8u) * 2u),
                    pack_bf16(o[db][4 * j] * inv[0], o[db][4 * j + 1] * inv[0]),
                    pack_bf16(o[db][4 * j + 2] * inv[1], o[db][4 * j + 3] * inv[1]),
                    pack_bf16(o[db][4 * j + 4] * inv[0], o[db][4 * j + 5] * inv[0]),
                    pack_bf16(o[db][4 * j + 6] * inv[1], o[db][4 * j + 7] * inv[1]));
      }
    fence_proxy_async();
    named_sync(3 + u32(cw), 128);
    if (t == 0 && w.row0 + cw * 64 < S) {  // rows past S are dropped by the map
#pragma unroll
      for (int db = 0; db < D / 64; ++db)
        tma_store_3d(map_o, db * 64, w.row0 + cw * 64, w.bh, obuf + u32(db) * 8192u);
      bulk_commit();
    }
  }
  if (kPingPong && cw == 0) named_sync(1, 256);  // warpgroup 2's last hand-over: both barriers end balanced
  if (t == 0) bulk_wait_all();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
attention_tma_d128_bf16(const __grid_constant__ CUtensorMap tma_q, const __grid_constant__ CUtensorMap tma_k,
                        const __grid_constant__ CUtensorMap tma_v, const __grid_constant__ CUtensorMap tma_o,
                        float* __restrict__ lse, long long B, long long Hkv, long long G, long long S,
                        float scale_log2, long long causal) {
  attention_tma<128, 2>(&tma_q, &tma_k, &tma_v, &tma_o, lse, B, Hkv, G, S, scale_log2, causal);
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
attention_tma_d64_bf16(const __grid_constant__ CUtensorMap tma_q, const __grid_constant__ CUtensorMap tma_k,
                       const __grid_constant__ CUtensorMap tma_v, const __grid_constant__ CUtensorMap tma_o,
                       float* __restrict__ lse, long long B, long long Hkv, long long G, long long S,
                       float scale_log2, long long causal) {
  attention_tma<64, 4>(&tma_q, &tma_k, &tma_v, &tma_o, lse, B, Hkv, G, S, scale_log2, causal);
}

// Fallback for any other D: a warp per (query row, slice of 256 d), 4 rows per block; lane l owns
// d = slice * 256 + l + 32e of the output. Every warp of a row scores the keys over the whole D
// (plain loads through L1) and runs the same online softmax; the first slice writes lse.
extern "C" __global__ void __launch_bounds__(128)
attention_rows_bf16(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                    const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out,
                    float* __restrict__ lse, i64 Hkv, i64 G, i64 S, i64 D, float scale_log2,
                    i64 causal) {
  const int lane = int(threadIdx.x) % 32;
  const i64 row = i64(blockIdx.x) * 4 + threadIdx.x / 32, bh = blockIdx.y, d0 = i64(blockIdx.z) * 256;
  if (row >= S) return;  // whole warps leave together
  const i64 Hq = Hkv * G, b = bh / Hq, kvh = (bh % Hq) / G;
  const __nv_bfloat16* qr = q + (bh * S + row) * D;
  const __nv_bfloat16* kb = k + (b * Hkv + kvh) * S * D;
  const __nv_bfloat16* vb = v + (b * Hkv + kvh) * S * D;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;
  float m = neg_inf(), l = 0.f;
  const i64 end = causal ? row + 1 : S;
  for (i64 j = 0; j < end; ++j) {
    float dot = 0.f;
    for (i64 d = lane; d < D; d += 32) dot += __bfloat162float(qr[d]) * __bfloat162float(kb[j * D + d]);
    const float s = warp_sum(dot) * scale_log2;
    const float m_new = fmaxf(m, s);
    const float alpha = exp2f(m - m_new), pj = exp2f(s - m_new);
    l = l * alpha + pj;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const i64 d = d0 + lane + 32 * e;
      acc[e] = acc[e] * alpha + (d < D ? pj * __bfloat162float(vb[j * D + d]) : 0.f);
    }
    m = m_new;
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const i64 d = d0 + lane + 32 * e;
    if (d < D) out[(bh * S + row) * D + d] = __float2bfloat16_rn(acc[e] * inv);
  }
  if (lane == 0 && d0 == 0) lse[bh * S + row] = (m + log2f(l)) * 0.6931471805599453f;
}
