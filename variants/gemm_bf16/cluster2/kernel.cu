// Variant of the committed gemm_bf16@h200 kernel (timed beside it: h200_run.sh variants:gemm_bf16):
// clusters of two blocks share B through TMA multicast. The two blocks of a cluster take the
// vertically adjacent tiles (2 tp, tn) and (2 tp + 1, tn) of one tile column, so they need the
// same 256 rows of B per K slice: each block loads its own A (64 x 128 box) and one half of B
// (64 x 128 box), multicast into the same stage of both blocks, so L2 serves 32 KiB per block and
// slice instead of 48 KiB. A stage may be refilled only when the consumers of both blocks are done
// with it: each consumer warp arrives on its own block's empty barrier and on the peer's (mapa +
// a shared::cluster arrive), 16 arrivals per phase. Both blocks walk the same sequence of tile
// pairs (grouped order over pairs of tile rows); a cluster barrier after the barriers' init and
// before exit keeps either block from seeing the other's uninitialised or released shared memory.
// gemm_bf16 for Hopper (sm_90a): C = alpha * A B^T, A [M, K] and B [N, K] row-major bf16 (both
// K-major: the "TN" GEMM wgmma takes without transposes), float32 accumulation, bf16 C.
//
// Three kernels, chosen by the launch recipe's `when`:
//  * gemm_bf16_tn_tma_bf16 (K and N multiples of 8, so every row is 16-byte aligned, and M > 64):
//    persistent blocks (one per SM) of three warpgroups walk 128 x 256 output tiles in grouped
//    order (GEMM_GROUP_M tile rows at a time, so the blocks running together share A and B panels
//    in L2). Warpgroup 0 is the producer: it gives registers back (setmaxnreg.dec) and one thread
//    fills a GEMM_STAGES-deep ring of 64-wide K slices with two TMA tensor loads per slice (A:
//    box 64 x 128, B: box 64 x 256, 128-byte swizzle: the layout wgmma's descriptors read), each
//    slice completing on its stage's full mbarrier armed with the slice's bytes (expect_tx).
//    Warpgroups 1 and 2 are consumers (setmaxnreg.inc): each issues wgmma.m64n256k16 on its 64 rows
//    of A against all of B (the 64 x 256 float32 accumulator in 128 registers per thread) and hands
//    a stage back (its empty mbarrier) as soon as the wgmma reading it have retired. The epilogue
//    scales by alpha, rounds to bf16 and writes each 64 x 64 block with stmatrix into a swizzled
//    shared buffer (two per consumer, so the TMA store of one block overlaps the writing of the
//    next) and one TMA tensor store per block; stores outside C are dropped by the tensor map, and
//    the producer is already loading the next tile while the consumers store this one. Partial
//    tiles (M, N or K not multiples of the tile) need no other masking: TMA loads zeros outside
//    the tensor.
//  * gemm_bf16_tn_splitk_bf16 (same alignment, M <= 64, the decode shapes): one consumer
//    warpgroup per 64 x 128 tile (wgmma.m64n128k16) and a TMA producer warp, with K split over
//    gridDim.y slices so that the few tiles still occupy the SMs; each slice writes float32
//    partials to a workspace and gemm_bf16_splitk_reduce_bf16 adds them in slice order (fixed
//    order: the result does not depend on timing), scales and rounds. One slice writes C itself.
//  * gemm_bf16_general_bf16 (rows not 16-byte aligned): 64 x 64 tiles, K slices of 32 widened to
//    float32 in shared memory, 4 x 4 outputs per thread, every access bounds-checked; correct for
//    any M, N, K (K = 1, odd K, M from 1) but not tuned.
// Device-only instructions sit under #ifdef __CUDA_ARCH__; the #else branches call regen's CUDA
// emulation (tests/support/cuda_emulation.h), which models the same TMA copies and swizzle,
// mbarrier phases, wgmma descriptors and accumulator layout, stmatrix and named barriers, so the
// emulation runs this very schedule against the oracle.
#include <cuda_bf16.h>

#ifndef CU_TENSOR_MAP_NUM_QWORDS
struct __align__(64) CUtensorMap { unsigned long long opaque[16]; };
#endif

#ifndef GEMM_STAGES
#define GEMM_STAGES 4
#endif
#ifndef GEMM_GROUP_M
#define GEMM_GROUP_M 8
#endif
#ifndef GEMM_PRODUCER_REGS
#define GEMM_PRODUCER_REGS 40
#endif
#ifndef GEMM_CONSUMER_REGS
#define GEMM_CONSUMER_REGS 232
#endif
#define GEMM_BM 128
#define GEMM_BN 256
#define GEMM_BK 64
#define GEMM_A_BYTES (GEMM_BM * GEMM_BK * 2)
#define GEMM_B_BYTES (GEMM_BN * GEMM_BK * 2)
#define GEMM_STAGE_BYTES (GEMM_A_BYTES + GEMM_B_BYTES)
#define GEMM_EPI_BYTES (64 * 64 * 2)                 // one 64 x 64 bf16 block, 128-byte rows
#define GEMM_RING_BYTES (GEMM_STAGES * GEMM_STAGE_BYTES)
#define GEMM_BAR_OFFSET (GEMM_RING_BYTES + 4 * GEMM_EPI_BYTES)
// recipe shared_mem: GEMM_BAR_OFFSET + 2 * STAGES * 8 (full, empty) + 1024 (to align the ring)

// split-K kernel: 64 x 128 tiles, 64-wide K slices
#define SK_BN 128
#define SK_STAGES 6
#define SK_A_BYTES (64 * GEMM_BK * 2)
#define SK_B_BYTES (SK_BN * GEMM_BK * 2)
#define SK_STAGE_BYTES (SK_A_BYTES + SK_B_BYTES)
// recipe shared_mem: SK_STAGES * SK_STAGE_BYTES + 2 * SK_STAGES * 8 + 1024

typedef unsigned long long u64;

namespace {

// Output tile (tm, tn) of the t-th tile in grouped order: GROUP_M tile rows at a time, column by
// column, so the blocks running together read a few A and B panels from L2.
__device__ __forceinline__ void gemm_tile_coords(int t, int num_m, int num_n, int& tm, int& tn) {
  const int per_group = GEMM_GROUP_M * num_n;
  const int first_m = (t / per_group) * GEMM_GROUP_M;
  const int rows = (num_m - first_m) < GEMM_GROUP_M ? (num_m - first_m) : GEMM_GROUP_M;
  const int in_group = t % per_group;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// byte offset of (row, byte) in a block of 128-byte rows written with the 128-byte swizzle
__device__ __forceinline__ unsigned swz128(unsigned row, unsigned byte) {
  return row * 128 + (byte ^ ((row & 7) << 4));
}
// wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 B apart.
__device__ __forceinline__ u64 wgmma_desc(unsigned addr) {
  u64 desc = (u64)((addr & 0x3FFFF) >> 4);
  desc |= (u64)(16 >> 4) << 16;     // leading byte offset (unused when swizzled)
  desc |= (u64)(1024 >> 4) << 32;   // stride byte offset
  desc |= 1ull << 62;               // 128-byte swizzle
  return desc;
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// -- mbarriers, TMA, fences (PTX ISA 8.0, sm_90a) ------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
#else
  emu_mbar_init(bar, count);
#endif
}
// the initialised barriers become visible to the async proxy (the TMA unit)
__device__ __forceinline__ void mbar_fence_init() {
#ifdef __CUDA_ARCH__
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  emu_mbar_arrive(bar);
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
// one box of a 2-D tensor map into shared memory; coordinates innermost first (column, row)
__device__ __forceinline__ void tma_load_2d(unsigned dst, const CUtensorMap* map, int c0, int c1,
                                            unsigned bar) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar) : "memory");
#else
  emu_tma_load_2d(dst, map, c0, c1, bar);
#endif
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int c0, int c1, unsigned src) {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
#else
  emu_tma_store_2d(map, c0, c1, src);
#endif
}
__device__ __forceinline__ void bulk_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  emu_bulk_commit();
#endif
}
// the shared memory of every store group but the newest N has been read
template <int N> __device__ __forceinline__ void bulk_wait_read() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
#else
  emu_bulk_wait(N);
#endif
}
template <int N> __device__ __forceinline__ void bulk_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
#else
  emu_bulk_wait(N);
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
// named barrier among `count` threads (whole warps)
__device__ __forceinline__ void named_sync(unsigned id, unsigned count) {
#ifdef __CUDA_ARCH__
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
#else
  emu_named_arrive(id, count, true);
#endif
}
// four 8 x 8 bf16 matrices of a warp into shared memory (row addresses from lanes 8i..8i+7)
__device__ __forceinline__ void stmatrix_x4(unsigned addr, unsigned r0, unsigned r1, unsigned r2,
                                            unsigned r3) {
#ifdef __CUDA_ARCH__
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
#else
  const unsigned regs[4] = {r0, r1, r2, r3};
  emu_stmatrix(addr, regs, 4);
#endif
}

// -- clusters -------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned cluster_rank() {
#ifdef __CUDA_ARCH__
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return emu_cluster_rank();
#endif
}
// every thread of both blocks; release/acquire orders the barriers' init and the final arrivals
__device__ __forceinline__ void cluster_sync() {
#ifdef __CUDA_ARCH__
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  emu_cluster_sync();
#endif
}
// the shared::cluster address of `addr` in the block of rank `rank`
__device__ __forceinline__ unsigned mapa(unsigned addr, unsigned rank) {
#ifdef __CUDA_ARCH__
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
#else
  return emu_mapa(addr, rank);
#endif
}
__device__ __forceinline__ void mbar_arrive_cluster(unsigned remote_bar) {
#ifdef __CUDA_ARCH__
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar)
               : "memory");
#else
  emu_mbar_arrive(remote_bar);
#endif
}
// one box into the same offset of every block in `mask`, completing on each one's barrier there
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const CUtensorMap* map, int c0,
                                                      int c1, unsigned bar, unsigned short mask) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n"
      ::"r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
#else
  emu_tma_load_2d_multicast(dst, map, c0, c1, bar, mask);
#endif
}

// -- wgmma ---------------------------------------------------------------------------------------
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
// D[64 x 256] (+)= A[64 x 16] B[256 x 16]^T from shared memory; scale_d = 0 ignores D. Register
// 4j + {0,1}: row 16 warp + lane / 4, column 8j + 2 (lane % 4) + {0,1}; 4j + {2,3}: 8 rows down.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], u64 da, u64 db, int scale_d) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(scale_d));
#else
  emu_wgmma(d, 256, da, db, scale_d, 0, 0, 0);
#endif
}
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], u64 da, u64 db, int scale_d) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d));
#else
  emu_wgmma(d, 128, da, db, scale_d, 0, 0, 0);
#endif
}
// the accumulators are not touched by other instructions while a wgmma may still write them
template <int R> __device__ __forceinline__ void fence_operands(float (&d)[R]) {
#ifdef __CUDA_ARCH__
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}
__device__ __forceinline__ void setmaxnreg_dec() {
#ifdef __CUDA_ARCH__
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(GEMM_PRODUCER_REGS));
#endif
}
__device__ __forceinline__ void setmaxnreg_inc() {
#ifdef __CUDA_ARCH__
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(GEMM_CONSUMER_REGS));
#endif
}

}  // namespace

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
gemm_bf16_tn_tma_bf16(const __grid_constant__ CUtensorMap tma_a,
                      const __grid_constant__ CUtensorMap tma_b,
                      const __grid_constant__ CUtensorMap tma_c, long long M, long long N,
                      long long K, float alpha) {
  const int num_m = (int)((M + GEMM_BM - 1) / GEMM_BM), num_n = (int)((N + GEMM_BN - 1) / GEMM_BN);
  const int num_mp = (num_m + 1) / 2;   // pairs of tile rows: one tile of each pair per block
  const int pairs = num_mp * num_n, ktiles = (int)((K + GEMM_BK - 1) / GEMM_BK);
  const unsigned rank = cluster_rank(), peer = rank ^ 1u;
  const int cluster = blockIdx.x / 2, clusters = gridDim.x / 2;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned ring = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned epi = ring + GEMM_RING_BYTES;          // 4 blocks of 64 x 64: two per consumer
  const unsigned full = ring + GEMM_BAR_OFFSET;         // full[s] at full + 8 s
  const unsigned empty = full + GEMM_STAGES * 8;        // empty[s] at empty + 8 s
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < GEMM_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);     // the producer's arrive.expect_tx; then the TMA bytes
      mbar_init(empty + 8 * s, 16);   // each consumer warp of both blocks, once its wgmma retired
    }
    mbar_fence_init();
    prefetch_map(&tma_a);
    prefetch_map(&tma_b);
    prefetch_map(&tma_c);
  }
  cluster_sync();   // both blocks' barriers exist before either multicasts or arrives remotely

  if (wg == 0) {  // producer: one thread issues every load
    setmaxnreg_dec();
    if (tid == 0) {
      unsigned it = 0;  // K slices issued over all tiles of this block
      for (int p = cluster; p < pairs; p += clusters) {
        int tp, tn;
        gemm_tile_coords(p, num_mp, num_n, tp, tn);
        const int tm = 2 * tp + (int)rank;
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const unsigned slot = it % GEMM_STAGES;
          // its last use retired in both blocks (the peer's half of B lands here too)
          mbar_wait(empty + 8 * slot, ((it / GEMM_STAGES) & 1u) ^ 1u);
          const unsigned sa = ring + slot * GEMM_STAGE_BYTES, sb = sa + GEMM_A_BYTES;
          mbar_arrive_expect_tx(full + 8 * slot, GEMM_STAGE_BYTES);   // A + both halves of B
          tma_load_2d(sa, &tma_a, kt * GEMM_BK, tm * GEMM_BM, full + 8 * slot);
          tma_load_2d_multicast(sb + rank * (GEMM_B_BYTES / 2), &tma_b, kt * GEMM_BK,
                                tn * GEMM_BN + (int)rank * (GEMM_BN / 2), full + 8 * slot, 0x3);
        }
      }
    }
  } else {  // consumers: warpgroup 1 takes rows 0-63 of the tile, warpgroup 2 rows 64-127
    setmaxnreg_inc();
    const int half = wg - 1, warp = tid / 32, lane = tid % 32;
    const unsigned buf0 = epi + half * 2 * GEMM_EPI_BYTES;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    unsigned it = 0;
    // a stage goes back to both producers: this block's and the peer's (whose multicast fills it)
    auto release = [&](unsigned slot) {
      __syncwarp();
      if (lane == 0) {
        mbar_arrive(empty + 8 * slot);
        mbar_arrive_cluster(mapa(empty + 8 * slot, peer));
      }
    };
    for (int p = cluster; p < pairs; p += clusters) {
      int tp, tn;
      gemm_tile_coords(p, num_mp, num_n, tp, tn);
      const int tm = 2 * tp + (int)rank;
      for (int kt = 0; kt < ktiles; ++kt, ++it) {
        const unsigned slot = it % GEMM_STAGES;
        mbar_wait(full + 8 * slot, (it / GEMM_STAGES) & 1u);
        const unsigned sa = ring + slot * GEMM_STAGE_BYTES + half * 64 * 128;
        const unsigned sb = ring + slot * GEMM_STAGE_BYTES + GEMM_A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < GEMM_BK / 16; ++k)  // k16 steps: 32 bytes along the swizzled rows
          wgmma_m64n256k16(d, wgmma_desc(sa + 32 * k), wgmma_desc(sb + 32 * k),
                           (kt > 0 || k > 0) ? 1 : 0);
        wgmma_commit();
        if (kt > 0) {  // the previous slice's wgmma have retired: hand its stage back
          wgmma_wait<1>();
          release((it - 1) % GEMM_STAGES);
        }
      }
      wgmma_wait<0>();
      fence_operands(d);
      if (ktiles > 0) release((it - 1) % GEMM_STAGES);
      // epilogue: four 64 x 64 blocks, each through one of two swizzled buffers and a TMA store
      const int row0 = tm * GEMM_BM + half * 64, col0 = tn * GEMM_BN;
      const unsigned mat = lane / 8;
      const unsigned srow = 16 * warp + (mat & 1) * 8 + lane % 8;  // the row this lane addresses
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        const unsigned buf = buf0 + (ch & 1) * GEMM_EPI_BYTES;
        if (tid == 0) bulk_wait_read<1>();  // the store that last read `buf` is done with it
        named_sync(1 + half, 128);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {   // 16-column blocks: accumulator groups j, j + 1
          const int j = ch * 8 + jj * 2;
          stmatrix_x4(buf + swz128(srow, (jj * 16 + (mat >> 1) * 8) * 2),
                      pack_bf16(alpha * d[4 * j], alpha * d[4 * j + 1]),
                      pack_bf16(alpha * d[4 * j + 2], alpha * d[4 * j + 3]),
                      pack_bf16(alpha * d[4 * j + 4], alpha * d[4 * j + 5]),
                      pack_bf16(alpha * d[4 * j + 6], alpha * d[4 * j + 7]));
        }
        fence_proxy_async();
        named_sync(1 + half, 128);
        if (tid == 0) {
          tma_store_2d(&tma_c, col0 + 64 * ch, row0, buf);
          bulk_commit();
        }
      }
    }
    if (tid == 0) bulk_wait<0>();
  }
  cluster_sync();   // neither block leaves while the other may still arrive on its barriers
}

// M <= 64: 64 x 128 tiles, K split over gridDim.y. Warp 0 produces (TMA), warps 4-7 consume.
extern "C" __global__ void __launch_bounds__(256, 1)
gemm_bf16_tn_splitk_bf16(const __grid_constant__ CUtensorMap tma_a,
                         const __grid_constant__ CUtensorMap tma_b, float* __restrict__ partial,
                         __nv_bfloat16* __restrict__ c, long long M, long long N, long long K,
                         float alpha) {
  const int ktiles = (int)((K + GEMM_BK - 1) / GEMM_BK);
  const int per = (ktiles + gridDim.y - 1) / gridDim.y;
  const int k_begin = blockIdx.y * per;
  const int k_end = (k_begin + per) < ktiles ? (k_begin + per) : ktiles;
  const int n0 = blockIdx.x * SK_BN;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned ring = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const unsigned full = ring + SK_STAGES * SK_STAGE_BYTES, empty = full + SK_STAGES * 8;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < SK_STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 128);
    }
    mbar_fence_init();
  }
  __syncthreads();
  if (wg == 0) {
    if (tid == 0) {
      for (int kt = k_begin, it = 0; kt < k_end; ++kt, ++it) {
        const unsigned slot = it % SK_STAGES;
        mbar_wait(empty + 8 * slot, ((it / SK_STAGES) & 1u) ^ 1u);
        const unsigned sa = ring + slot * SK_STAGE_BYTES;
        mbar_arrive_expect_tx(full + 8 * slot, SK_STAGE_BYTES);
        tma_load_2d(sa, &tma_a, kt * GEMM_BK, 0, full + 8 * slot);
        tma_load_2d(sa + SK_A_BYTES, &tma_b, kt * GEMM_BK, n0, full + 8 * slot);
      }
    }
    return;
  }
  const int warp = tid / 32, lane = tid % 32;
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  for (int kt = k_begin, it = 0; kt < k_end; ++kt, ++it) {
    const unsigned slot = it % SK_STAGES;
    mbar_wait(full + 8 * slot, (it / SK_STAGES) & 1u);
    const unsigned sa = ring + slot * SK_STAGE_BYTES, sb = sa + SK_A_BYTES;
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < GEMM_BK / 16; ++k)
      wgmma_m64n128k16(d, wgmma_desc(sa + 32 * k), wgmma_desc(sb + 32 * k), 1);
    wgmma_commit();
    if (it > 0) {
      wgmma_wait<1>();
      mbar_arrive(empty + 8 * ((it - 1) % SK_STAGES));
    }
  }
  wgmma_wait<0>();
  fence_operands(d);
  // rows 16 warp + lane / 4 (+ 8), columns n0 + 8j + 2 (lane % 4) (+ 1); bounds-checked stores
  const long long r0 = 16 * warp + lane / 4;
  const bool one_slice = gridDim.y == 1;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const long long col = n0 + 8 * j + 2 * (lane % 4);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = r0 + 8 * h;
      if (row >= M) continue;
      const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
      if (one_slice) {
        if (col < N) c[row * N + col] = __float2bfloat16_rn(alpha * v0);
        if (col + 1 < N) c[row * N + col + 1] = __float2bfloat16_rn(alpha * v1);
      } else {
        float* p = partial + ((long long)blockIdx.y * M + row) * N + col;
        if (col < N) p[0] = v0;
        if (col + 1 < N) p[1] = v1;
      }
    }
  }
}

// c = alpha * (sum over the S slices of partial, in slice order), rounded once to bf16
extern "C" __global__ void __launch_bounds__(256)
gemm_bf16_splitk_reduce_bf16(const float* __restrict__ partial, __nv_bfloat16* __restrict__ c,
                             long long M, long long N, long long S, float alpha) {
  const long long total = M * N;
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < total; i += 256LL * gridDim.x) {
    float acc = 0.0f;
    for (long long s = 0; s < S; ++s) acc += partial[s * total + i];
    c[i] = __float2bfloat16_rn(alpha * acc);
  }
}

// Any shape: 64 x 64 output tile per 256-thread block, 4 x 4 per thread, K in slices of 32
// widened to float32 in shared memory; every global access is bounds-checked.
extern "C" __global__ void __launch_bounds__(256)
gemm_bf16_general_bf16(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b,
                       __nv_bfloat16* __restrict__ c, long long K, long long M, long long N,
                       float alpha) {
  __shared__ float as[32][64 + 4];  // as[k][m]
  __shared__ float bs[32][64 + 4];  // bs[k][n]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const long long m0 = (long long)blockIdx.y * 64, n0 = (long long)blockIdx.x * 64;
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (long long k0 = 0; k0 < K; k0 += 32) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // 64 rows x 32 k of A and of B, consecutive threads along k
      const int idx = i * 256 + tid, r = idx / 32, k = idx % 32;
      const long long gm = m0 + r, gn = n0 + r, gk = k0 + k;
      as[k][r] = (gm < M && gk < K) ? __bfloat162float(a[gm * K + gk]) : 0.0f;
      bs[k][r] = (gn < N && gk < K) ? __bfloat162float(b[gn * K + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < 32; ++k) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[k][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = bs[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const long long gm = m0 + ty * 4 + i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long gn = n0 + tx * 4 + j;
      if (gn < N) c[gm * N + gn] = __float2bfloat16_rn(alpha * acc[i][j]);
    }
  }
}
