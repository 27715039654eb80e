// (variant: the committed kernel (parallel_staging) with a layer's attention items taken from a
// per-layer pool by whichever blocks are free. On the lent H100 (2026-12-08, L = 1024) the
// ladder this came from measured parallel_staging 1692 us, + an L2 look-ahead of the weights
// 2020 us (slower: the look-ahead is dropped here), + this pool 1816 us: the pool took 204 us off
// the look-ahead kernel. parallel_staging's timeline still waits 316 us per SM for attention
// (items ~10.5 us, the layer's attention phase 30.9 us, p90 start 12.7 us after the qkv items:
// a second wave). Here an attention ticket, and a block's first o_proj item of the layer before
// its wait, each take one item from the pool while any is left; there are more takers than
// items, so the items go to the blocks that get there first. The attention-only arguments live
// in shared memory (AttnArgs), which kept this at 0 spills. The CUDA emulation runs blocks one
// after another, so there every item is taken at an attention ticket; the o_proj path runs the
// same attn_item.)
// (parallel_staging: the per-batch-size kernel with its staging loads issued together. Its H200
// timeline showed the first item of every (layer, stage) on a block far slower than the rest,
// because staging read a few KB from L2 one dependent load at a time behind the weight stream: down
// 19.9 against 1.6 us (the SwiGLU of 2 x 8192 floats, 32 loads in a row per thread), qkv 5.7
// against 1.0, gate_up 5.3, o_proj 3.6, and the attention combine looped over the splits' partials
// one load at a time. Here each thread issues kU loads before it uses any, with the arithmetic and
// its order unchanged, so the results are bit for bit those of the per-batch-size kernel.)
// The whole Llama decode step (embedding, NL decoder layers, final norm, tied lm_head) for
// B <= 8 sequences as ONE persistent kernel on the H200 (sm_90a), with the weights streamed into
// shared memory by the TMA engine ahead of the dependencies that gate their use.
//
// Why: a decode step reads every weight once, so it is bounded by HBM bandwidth; what loses
// bandwidth is any moment an SM has no weight bytes in flight. In a kernel whose items load
// their weights after their inputs are ready, every item is one DRAM round trip plus its
// synchronisation, and every stage boundary (about 80 of them) drains the memory pipe. Here the
// weights do not wait for anything: they do not depend on the activations.
//
// Work is one list of items in stage order, claimed through a global ticket:
//   for each layer l:
//     qkv      rows of layer l's [Wq; Wk; Wv] (rmsnorm of the layer's input, recomputed per block)
//     attn     one (b, KV head, split of L) for all G query heads: RoPE, the new k and v written
//              to layer l's cache slot L-1, online softmax, partials; the last split combines
//     o_proj   rows of Wo, + the layer's input: the residual stream x1 (float32)
//     gate_up  rows of [Wgate; Wup] (rmsnorm of x1), float32 results, silu applied to the gate
//              rows as they are stored; the product is taken when the down stage stages them
//     down     rows of Wd, + x1: the next layer's input (float32, ping-pong buffers)
//   lm_head    rows of the tied table (rmsnorm of the last layer's output, final norm weight);
//              the logits rounded once (bf16)
// A GEMV item is as many whole rows as fill one shared-memory slot (a row longer than a slot is
// one item in several slot-sized chunks).
//
// Each block is one producer warp and eight consumer warps. The producer claims tickets up to
// kQueue items ahead of the consumers, passes them through a shared queue, and streams each GEMV
// item's weight rows into a ring of slots with 1-D bulk copies (cp.async.bulk, UBLKCP) that
// complete on the slot's "full" mbarrier; it refills a slot once the consumers' "empty" arrive
// says they are done with it. It never waits for a stage counter, so while the consumers wait
// for a stage's inputs, the ring keeps filling with the next items' weights (including the next
// layer's). The consumers take items in claim order: wait on the stage counter (thread 0 spins on
// an acquire load), stage the activation rows in shared memory (bf16, as the unfused plan rounds
// them), then per slot: wait full, dot products from shared memory, release the slot.
// Finishing an item is a release add on its (layer, stage) counter.
// Deadlock-free for any grid and residency: items only wait on items of earlier stages (smaller
// tickets), a block takes its items in ticket order, and a slot is refilled only with a later
// chunk of the same order, so the oldest unfinished item always has its inputs and its weights
// coming. The CUDA emulation runs blocks one after another and exercises exactly this. The last
// block to leave resets the counters for the next launch.
//
// The residual stream stays float32 from the embedding to the final norm; every sum is in a fixed
// order (no atomics on data), so the result is the same run to run.
//
// Timeline (regen profile --timeline; compiled in only with REGEN_TIMELINE, so the verified and
// timed binary has none of it): consumer thread 0 writes one record per item (op = its stage,
// step = (layer << 16) | item index), one per wait on a stage counter (op 6) and one per wait for
// weights still in flight (op 7). Slots are claimed through the counter in slot 0's first word,
// kTlChunk at a time: a global atomic per record would sit between the items it measures.
//
// Device-only instructions sit under #ifdef __CUDA_ARCH__; the #else branches call regen's CUDA
// emulation (tests/support/cuda_emulation.h), which models the bulk copies, mbarrier phases and
// named barriers, so the emulation runs this very schedule against the oracle.
#include <cuda_bf16.h>

namespace {

constexpr int kCWarps = 8;                   // consumer warps
constexpr int kCThreads = kCWarps * 32;
constexpr int kThreads = kCThreads + 32;     // + the producer warp
constexpr int kMaxB = 8;
constexpr int kMaxG = 4;
constexpr int kQueue = 8;                    // items claimed ahead of the consumers
constexpr int kMaxSlots = 8;
constexpr int kMaxRows = 64;                 // rows per GEMV item at most
constexpr int kCtrl = 1024;                  // control block at the start of shared memory
enum Stage { kQkv = 0, kAttn = 1, kOproj = 2, kGateUp = 3, kDown = 4, kLmHead = 5 };
// sync words (int32 workspace, zeroed once by regen and reset by the kernel on exit):
// ticket, exit, then B * Hkv attention arrival counters, then 5 done counters per layer, then
// one attention pool counter per layer
constexpr int kTicket = 0, kExit = 1, kArrive = 8;

__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  f[0] = bf_lo(v.x); f[1] = bf_hi(v.x); f[2] = bf_lo(v.y); f[3] = bf_hi(v.y);
  f[4] = bf_lo(v.z); f[5] = bf_hi(v.z); f[6] = bf_lo(v.w); f[7] = bf_hi(v.w);
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float team_sum(float v, int ts) {
  for (int o = ts >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float bf(const __nv_bfloat16 h) { return __bfloat162float(h); }
// the KV cache is read once: stream it past L1
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
__device__ __forceinline__ int ld_acquire(const int* p) {
#ifdef __CUDA_ARCH__
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return *reinterpret_cast<const volatile int*>(p);
#endif
}
// CUTLASS's GenericBarrier pattern: the consumers write, meet at their barrier, then thread 0
// publishes with a release add; a waiter's thread 0 spins on an acquire load, then the barrier.
__device__ __forceinline__ void red_release(int* p, int v) {
#ifdef __CUDA_ARCH__
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
#else
  atomicAdd(p, v);
#endif
}
__device__ __forceinline__ int atom_acq_rel(int* p, int v) {
#ifdef __CUDA_ARCH__
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
#else
  return atomicAdd(p, v);
#endif
}

// -- shared-memory barriers and bulk copies (PTX ISA 8.0, sm_90) ------------------------------
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
// 1-D bulk copy global -> shared on the TMA engine; addresses and size multiples of 16 bytes
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
#else
  emu_bulk_load(dst, src, bytes, bar);
#endif
}
// the consumer warps' own barrier (the producer warp never takes part)
__device__ __forceinline__ void csync() {
#ifdef __CUDA_ARCH__
  asm volatile("bar.sync 1, %0;\n" ::"n"(kCThreads) : "memory");
#else
  emu_named_arrive(1, kCThreads, true);
#endif
}

// -- the timeline (REGEN_TIMELINE only) -------------------------------------------------------
struct TlState {
  unsigned long long t0;
  unsigned long long* buf;
  int slots;
  int next, end;   // the block's claimed slots not yet written: [next, end)
};
#ifdef REGEN_TIMELINE
constexpr int kWaitOp = 6, kWeightsOp = 7;   // launch.yaml timeline.ops
constexpr int kTlChunk = 32;                  // slots a block claims at a time
__device__ __forceinline__ unsigned long long tl_now() {
#ifdef __CUDA_ARCH__
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return emu_globaltimer();   // the CUDA emulation's clock (tests/support/cuda_emulation.h)
#endif
}
__device__ __forceinline__ unsigned tl_smid() {
#ifdef __CUDA_ARCH__
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
#else
  return emu_smid();
#endif
}
// consumer thread 0 only: one record [t0, t1) of (op, step), if a slot is left
__device__ __forceinline__ void tl_record(TlState* st, int op, int step, unsigned long long t0,
                                          unsigned long long t1) {
  unsigned long long* tl = st->buf;
  if (tl == nullptr) return;
  if (st->next >= st->end) {   // claim the next kTlChunk slots (slot 0 holds the counter)
    const int base = static_cast<int>(atomicAdd(reinterpret_cast<unsigned*>(tl), unsigned(kTlChunk))) + 1;
    st->next = base;
    st->end = min(base + kTlChunk, st->slots);
    if (st->next >= st->end) return;   // out of slots: later intervals are not recorded
  }
  const int i = st->next++;
  unsigned* r = reinterpret_cast<unsigned*>(tl + 4LL * i);
  r[0] = tl_smid(); r[1] = blockIdx.x; r[2] = static_cast<unsigned>(op); r[3] = static_cast<unsigned>(step);
  tl[4LL * i + 2] = t0;
  tl[4LL * i + 3] = t1 > t0 ? t1 : t0 + 1;   // end 0 marks an unused slot
}
#endif

// the control block at the start of dynamic shared memory
// what only attention uses, kept in shared memory and read where an item starts: as Step fields
// they would hold registers through the whole item loop, and taking attention items from a pool
// in two places of that loop made the kernel spill
struct AttnArgs {
  const __nv_bfloat16 *cos, *sin;
  __nv_bfloat16 *k_cache, *v_cache;
  float *part_o, *part_m, *part_l;
  int S, L, chunk;
  float scale;
};

struct Ctrl {
  unsigned long long full[kMaxSlots], empty[kMaxSlots];   // per slot: bytes landed / slot free
  unsigned long long qfull[kQueue], qempty[kQueue];       // per queue entry
  int queue[kQueue];
  int flag;
  int claim;                       // the attention item thread 0 took from the pool
  AttnArgs attn;
  float red[kCWarps];
  float part[kCWarps * kMaxB];     // per warp: partial dot products of a row split across warps
  TlState tl;
};
static_assert(sizeof(Ctrl) <= kCtrl, "the control block fits its kCtrl bytes");

struct Step {
  const long long* token;
  const __nv_bfloat16 *embed, *attn_norm_weight, *wq, *wk, *wv, *cos, *sin;
  __nv_bfloat16 *k_cache, *v_cache;
  const __nv_bfloat16 *wo, *mlp_norm_weight, *wgu, *wd, *final_norm_weight;
  __nv_bfloat16* logits;
  float* scratch;   // qkv [B, Nqkv] | part_o [B*Hq, S, D] | part_m, part_l [B*Hq, S] | x1 [B, H] | xres [2, B, H] | gu [B, 2F]
  __nv_bfloat16* act;   // the attention output [B, Hq*D]
  int* sync;
  int B, NL, H, Hkv, G, D, L, F, V, S, slot, nslots;
  float eps, scale;
  // derived
  int Hq, Nqkv, chunk;
  int rows[6], items[6];   // per GEMV stage: rows per item, items (per layer; lm_head: in all)
  int end[5], per_layer, layers_end, total;
  int* done;               // [NL][5] items finished per (layer, stage), then [NL] attention
                           // items taken from each layer's pool
  float *qkv, *part_o, *part_m, *part_l, *x1, *xres, *gu;
  __nv_bfloat16* attn_out;
  Ctrl* ctrl;
  unsigned char* ring;     // nslots x slot bytes
  __nv_bfloat16* sx;       // activation rows [B][K]
  float* sres;             // the residual rows an o_proj or down item adds to, float32 [B][H]
  float* attn;             // attention scratch (16 KB of shared memory; may alias sx and sres)
};

__device__ __forceinline__ int stage_k(const Step& p, int s) {
  return s == kOproj ? p.Hq * p.D : s == kDown ? p.F : p.H;
}
__device__ __forceinline__ int stage_n(const Step& p, int s) {
  return s == kQkv ? p.Nqkv : s == kGateUp ? 2 * p.F : s == kLmHead ? p.V : p.H;
}
// per-stage values by a constant index, so the Step stays in registers (no local-memory copy)
__device__ __forceinline__ int rows_of(const Step& p, int s) {
  switch (s) {
    case kQkv: return p.rows[kQkv];
    case kOproj: return p.rows[kOproj];
    case kGateUp: return p.rows[kGateUp];
    case kDown: return p.rows[kDown];
    default: return p.rows[kLmHead];
  }
}
// whole rows of K bf16 that fill one slot (at least one: a longer row is chunked)
__device__ __forceinline__ int rows_per_item(const Step& p, int K) {
  const int r = p.slot / (2 * K);
  return r < 1 ? 1 : r > kMaxRows ? kMaxRows : r;
}

// row n of layer l's stage-s weight (qkv: the rows of Wq, Wk, Wv one after another; gate_up:
// the gate rows then the up rows; lm_head: the embedding table)
__device__ __forceinline__ const __nv_bfloat16* weight_row(const Step& p, int l, int s, int n) {
  const long long qd = static_cast<long long>(p.Hq) * p.D, kd = static_cast<long long>(p.Hkv) * p.D;
  switch (s) {
    case kQkv:
      if (n < qd) return p.wq + (l * qd + n) * p.H;
      if (n < qd + kd) return p.wk + (l * kd + n - qd) * p.H;
      return p.wv + (l * kd + n - qd - kd) * p.H;
    case kOproj: return p.wo + (static_cast<long long>(l) * p.H + n) * qd;
    case kGateUp: return p.wgu + (2LL * l * p.F + n) * p.H;
    case kDown: return p.wd + (static_cast<long long>(l) * p.H + n) * p.F;
    default: return p.embed + static_cast<long long>(n) * p.H;
  }
}
// the end of the run of rows from n that lie in one matrix (qkv crosses Wq/Wk/Wv), capped at n1
__device__ __forceinline__ int run_end(const Step& p, int s, int n, int n1) {
  if (s != kQkv) return n1;
  const int qd = p.Hq * p.D, kd = p.Hkv * p.D;
  const int edge = n < qd ? qd : n < qd + kd ? qd + kd : n1;
  return edge < n1 ? edge : n1;
}

// ticket -> (layer, stage, index within the stage); lm_head items have layer NL
__device__ __forceinline__ void decode(const Step& p, int t, int& l, int& s, int& local) {
  l = p.NL; s = kLmHead; local = t - p.layers_end;
  if (t < p.layers_end) {
    l = t / p.per_layer;
    const int r = t - l * p.per_layer;
    s = kDown; local = r - p.end[kGateUp];   // constant indices only: p stays in registers
    if (r < p.end[kQkv]) { s = kQkv; local = r; }
    else if (r < p.end[kAttn]) { s = kAttn; local = r - p.end[kQkv]; }
    else if (r < p.end[kOproj]) { s = kOproj; local = r - p.end[kAttn]; }
    else if (r < p.end[kGateUp]) { s = kGateUp; local = r - p.end[kOproj]; }
  }
}

// -- the producer -----------------------------------------------------------------------------
// lane 0 of the producer warp: the slot for chunk number u (its previous use released)
__device__ __forceinline__ int acquire_slot(const Step& p, long long u) {
  const int i = static_cast<int>(u % p.nslots);
  const long long use = u / p.nslots;
  if (use > 0) mbar_wait(saddr(&p.ctrl->empty[i]), static_cast<unsigned>((use - 1) & 1));
  return i;
}
__device__ void produce(const Step& p) {
  long long u = 0;   // chunks issued so far (the consumers count the same sequence)
  for (int q = 0;; ++q) {
    const int qs = q % kQueue, quse = q / kQueue;
    if (quse > 0) mbar_wait(saddr(&p.ctrl->qempty[qs]), static_cast<unsigned>((quse - 1) & 1));
    const int t = atomicAdd(p.sync + kTicket, 1);
    p.ctrl->queue[qs] = t;
    mbar_arrive(saddr(&p.ctrl->qfull[qs]));   // release: the consumers read the ticket after
    if (t >= p.total) return;
    int l, s, local;
    decode(p, t, l, s, local);
    if (s == kAttn) continue;
    const int K = stage_k(p, s), N = stage_n(p, s), r = rows_of(p, s);
    const int n0 = local * r, n1 = min(N, n0 + r);
    const long long row_bytes = 2LL * K;
    if (row_bytes > p.slot) {   // one row in slot-sized chunks
      const char* src = reinterpret_cast<const char*>(weight_row(p, l, s, n0));
      for (long long off = 0; off < row_bytes; off += p.slot, ++u) {
        const int i = acquire_slot(p, u);
        const unsigned bytes = static_cast<unsigned>(min(static_cast<long long>(p.slot), row_bytes - off));
        const unsigned bar = saddr(&p.ctrl->full[i]);
        mbar_arrive_expect_tx(bar, bytes);
        bulk_load(saddr(p.ring + static_cast<long long>(i) * p.slot), src + off, bytes, bar);
      }
    } else {                    // whole rows, one bulk copy per run of rows in one matrix
      const int i = acquire_slot(p, u++);
      const unsigned bar = saddr(&p.ctrl->full[i]);
      mbar_arrive_expect_tx(bar, static_cast<unsigned>((n1 - n0) * row_bytes));
      for (int a = n0; a < n1;) {
        const int b = run_end(p, s, a, n1);
        bulk_load(saddr(p.ring + static_cast<long long>(i) * p.slot + (a - n0) * row_bytes),
                  weight_row(p, l, s, a), static_cast<unsigned>((b - a) * row_bytes), bar);
        a = b;
      }
    }
  }
}

// -- the consumers ----------------------------------------------------------------------------
__device__ __forceinline__ int ctid() { return threadIdx.x; }   // consumers are threads 0..255

// block-wide (consumers) sum of one value per thread; every consumer gets it
__device__ __forceinline__ float block_sum(const Step& p, float v) {
  v = warp_sum(v);
  if ((ctid() & 31) == 0) p.ctrl->red[ctid() >> 5] = v;
  csync();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kCWarps; ++w) t += p.ctrl->red[w];
  csync();
  return t;
}

// wait until counter `c` reaches `need` (thread 0 spins; the barrier makes the producers' writes
// visible to every consumer)
__device__ __forceinline__ void dep_wait(const Step& p, const int* c, int need) {
  if (ctid() == 0 && ld_acquire(c) < need) {
    while (ld_acquire(c) < need) __nanosleep(64);
#ifdef REGEN_TIMELINE
    const unsigned long long now = tl_now();
    tl_record(&p.ctrl->tl, kWaitOp, static_cast<int>(c - p.done), p.ctrl->tl.t0, now);
    p.ctrl->tl.t0 = now;   // the item's own interval starts when its wait ends
#endif
  }
  csync();
}
// the consumers' writes, then (after their barrier) thread 0's release add to the counter
__device__ __forceinline__ void finish(const Step& p, int* c) {
  csync();
  if (ctid() == 0) red_release(c, 1);
}

// element k of sequence b of layer l's input: the embedding row (layer 0) or the float32 stream
__device__ __forceinline__ float layer_in(const Step& p, int l, int b, int k) {
  if (l == 0) return bf(p.embed[p.token[b] * static_cast<long long>(p.H) + k]);
  return __ldcg(p.xres + static_cast<long long>(l & 1) * p.B * p.H + static_cast<long long>(b) * p.H + k);
}

// Staging reads each block's activation rows (a few KB, from L2) while the memory system is
// full of the weight stream, where one round trip takes most of a microsecond: every loop below
// issues kU independent loads per thread before it uses any of them.
constexpr int kU = 8;

template <int kSrc>   // 0: layer l's input, 1: x1 (after attention), 2: the last layer's output
__device__ __forceinline__ float norm_in(const Step& p, int l, int b, const float* row, int k) {
  return kSrc == 0 ? layer_in(p, l, b, k) : __ldcg(row + k);
}
// activation rows, bf16 [B][H] in shared memory: rmsnorm(src) * weight. The sum of squares runs
// over k = tid, tid + 256, ... in that order, as before (the zeros past H add nothing).
template <int kSrc>
__device__ __forceinline__ void fill_rmsnorm(const Step& p, int l, const __nv_bfloat16* w) {
  for (int b = 0; b < p.B; ++b) {
    const float* row = kSrc == 1 ? p.x1 + static_cast<long long>(b) * p.H
                                 : p.xres + static_cast<long long>(l & 1) * p.B * p.H +
                                       static_cast<long long>(b) * p.H;
    if (p.H <= kU * kCThreads) {   // one pass: the row stays in registers
      float v[kU], wv[kU];
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int k = ctid() + j * kCThreads;
        v[j] = k < p.H ? norm_in<kSrc>(p, l, b, row, k) : 0.f;
        wv[j] = k < p.H ? bf(w[k]) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) ss = fmaf(v[j], v[j], ss);
      const float r = 1.f / sqrtf(block_sum(p, ss) / p.H + p.eps);
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int k = ctid() + j * kCThreads;
        if (k < p.H) p.sx[b * p.H + k] = __float2bfloat16_rn(v[j] * r * wv[j]);
      }
      continue;
    }
    float ss = 0.f;
    for (int k0 = ctid(); k0 < p.H; k0 += kU * kCThreads) {
      float v[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int k = k0 + j * kCThreads;
        v[j] = k < p.H ? norm_in<kSrc>(p, l, b, row, k) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) ss = fmaf(v[j], v[j], ss);
    }
    const float r = 1.f / sqrtf(block_sum(p, ss) / p.H + p.eps);
    for (int k0 = ctid(); k0 < p.H; k0 += kU * kCThreads) {
      float v[kU], wv[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int k = k0 + j * kCThreads;
        v[j] = k < p.H ? norm_in<kSrc>(p, l, b, row, k) : 0.f;
        wv[j] = k < p.H ? bf(w[k]) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int k = k0 + j * kCThreads;
        if (k < p.H) p.sx[b * p.H + k] = __float2bfloat16_rn(v[j] * r * wv[j]);
      }
    }
  }
}
// the residual rows of an o_proj stage (layer l's input) or a down stage (x1), float32 [B][H]
__device__ __forceinline__ void fill_residual(const Step& p, int l, bool x1) {
  const int n = p.B * p.H;
  for (int i0 = ctid(); i0 < n; i0 += kU * kCThreads) {
    float v[kU];
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const int i = i0 + j * kCThreads, b = i / p.H;
      v[j] = i >= n ? 0.f : x1 ? __ldcg(p.x1 + i) : layer_in(p, l, b, i - b * p.H);
    }
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const int i = i0 + j * kCThreads;
      if (i < n) p.sres[i] = v[j];
    }
  }
}
__device__ __forceinline__ void fill_copy(const Step& p, const __nv_bfloat16* src, int n) {
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(p.sx);
  for (int i = ctid(); i < n / 8; i += kCThreads) d4[i] = __ldcg(s4 + i);
}
// the down stage's activations: SwiGLU of the gate/up results, rounded to bf16 [B][F]. The gate
// rows' silu was applied when they were stored (store_out), so staging is loads and a multiply:
// a division here, a call into its slow path with eight values live, made the kernel spill
__device__ __forceinline__ void fill_swiglu(const Step& p) {
  constexpr int kU = 8;
  for (int b = 0; b < p.B; ++b) {
    const float* sg = p.gu + 2LL * b * p.F;
    const float* up = sg + p.F;
    __nv_bfloat16* out = p.sx + static_cast<long long>(b) * p.F;
    for (int i0 = ctid(); i0 < p.F; i0 += kU * kCThreads) {
      float g[kU], u[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j) {
        const int i = i0 + j * kCThreads;
        g[j] = i < p.F ? __ldcg(sg + i) : 0.f;
        u[j] = i < p.F ? __ldcg(up + i) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kU; ++j)
        if (i0 + j * kCThreads < p.F) out[i0 + j * kCThreads] = __float2bfloat16_rn(g[j] * u[j]);
    }
  }
}

// acc[b] += the dot products of weight uint4s [i0, i1) (shared memory) with the activation rows
// at the same positions (x4 [B][k8row]), lanes strided
// The batch as a template argument: kB > 0 is a batch of exactly kB sequences, so the loops over
// it hold no predicated work for absent ones (a batch of one paid for eight before: the timeline
// showed every 64 KB item bound by the consumers at ~4.4 µs, with its weights already in shared
// memory); kB == 0 is the runtime batch p.B <= kMaxB, for B = 7 and 8, whose specialised loops
// would not fit the registers a warp has beside eight others (168) without spilling.
template <int kB> constexpr int kSlots = kB > 0 ? kB : kMaxB;   // accumulators

// acc[b] += the dot products of weight uint4s [i0, i1) (shared memory) with the activation rows
// at the same positions (x4 [nb][k8row]), lanes strided
template <int kB>
__device__ __forceinline__ void dot_range(const uint4* w4, const uint4* x4, int k8row, int i0, int i1,
                                          int nb, float (&acc)[kSlots<kB>]) {
  const int lane = ctid() & 31;
  // loads in flight per lane, as many as the registers allow without spilling (kB 0: as before)
  constexpr int kUnroll = kB <= 2 ? 4 : kB <= 4 ? 2 : 1;
#pragma unroll kUnroll
  for (int i = i0 + lane; i < i1; i += 32) {
    float wf[8];
    unpack8(w4[i], wf);
#pragma unroll
    for (int b = 0; b < kSlots<kB>; ++b) {
      if (kB > 0 || b < nb) {
        float xf[8];
        unpack8(x4[b * k8row + i], xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[b] = fmaf(xf[e], wf[e], acc[b]);
      }
    }
  }
}

// one result of a GEMV stage: row n of layer l, sequence b
__device__ __forceinline__ void store_out(const Step& p, int l, int s, int n, int b, float v) {
  if (s == kQkv) {
    p.qkv[static_cast<long long>(b) * p.Nqkv + n] = v;
  } else if (s == kOproj) {   // the residual stream after attention, float32
    p.x1[static_cast<long long>(b) * p.H + n] = p.sres[b * p.H + n] + v;
  } else if (s == kGateUp) {   // a gate row's result leaves as silu(g), computed once here
    p.gu[2LL * b * p.F + n] = n < p.F ? v / (1.f + __expf(-v)) : v;
  } else if (s == kDown) {    // the next layer's input, float32
    const long long i = static_cast<long long>(b) * p.H + n;
    p.xres[static_cast<long long>((l + 1) & 1) * p.B * p.H + i] = p.sres[i] + v;
  } else {
    p.logits[static_cast<long long>(b) * p.V + n] = __float2bfloat16_rn(v);
  }
}

// wait for chunk u's slot to be full (timeline: a wait that took longer than 0.1 us)
__device__ __forceinline__ int slot_wait(const Step& p, long long u) {
  const int i = static_cast<int>(u % p.nslots);
  const unsigned bar = saddr(&p.ctrl->full[i]), parity = static_cast<unsigned>((u / p.nslots) & 1);
#ifdef REGEN_TIMELINE
  if (ctid() == 0) {
    const unsigned long long t0 = tl_now();
    mbar_wait(bar, parity);
    const unsigned long long t1 = tl_now();
    // over 100 ns, not 500: the per-batch-size kernel's timeline had no wait over 500 ns, yet its
    // 32 KB items took 1.06 us where their arithmetic needs about a third of that
    if (t1 - t0 > 100) tl_record(&p.ctrl->tl, kWeightsOp, static_cast<int>(u & 0x7fffffff), t0, t1);
  }
#endif
  mbar_wait(bar, parity);
  return i;
}
// every consumer is done reading slot i: hand it back to the producer
__device__ __forceinline__ void slot_release(const Step& p, int i) {
  csync();
  if (ctid() == 0) mbar_arrive(saddr(&p.ctrl->empty[i]));
}

// the rows of one GEMV item (its activation rows staged): dot products from the slots, results
// stored; `u`: the consumers' chunk count, advanced past this item's chunks
template <int kB>
__device__ __forceinline__ void gemv_rows(const Step& p, int l, int s, int it, long long& u) {
  constexpr int kN = kSlots<kB>;
  const int nb = kB > 0 ? kB : p.B;
  const int K = stage_k(p, s), N = stage_n(p, s), r = rows_of(p, s), k8 = K / 8;
  const int n0 = it * r, nrows = min(N, n0 + r) - n0;
  const int lane = ctid() & 31, w = ctid() >> 5;
  const uint4* x4 = reinterpret_cast<const uint4*>(p.sx);
  float acc[kN];
  if (r >= kCWarps) {   // whole rows per warp, one slot
    const int i = slot_wait(p, u++);
    const uint4* w4 = reinterpret_cast<const uint4*>(p.ring + static_cast<long long>(i) * p.slot);
    for (int j = w; j < nrows; j += kCWarps) {
#pragma unroll
      for (int b = 0; b < kN; ++b) acc[b] = 0.f;
      dot_range<kB>(w4 + static_cast<long long>(j) * k8, x4, k8, 0, k8, nb, acc);
#pragma unroll
      for (int b = 0; b < kN; ++b)
        if (kB > 0 || b < nb) acc[b] = warp_sum(acc[b]);
      if (lane == 0)
#pragma unroll
        for (int b = 0; b < kN; ++b)
          if (kB > 0 || b < nb) store_out(p, l, s, n0 + j, b, acc[b]);
    }
    slot_release(p, i);
  } else {              // a row split across wpr warps (and, longer than a slot, over chunks)
    const int wpr = kCWarps / r, j = w / wpr, part = w % wpr;
    const bool active = j < nrows;
#pragma unroll
    for (int b = 0; b < kN; ++b) acc[b] = 0.f;
    const int per = p.slot / 16;                   // uint4s per slot
    const int chunks = r == 1 ? (k8 + per - 1) / per : 1;
    for (int c = 0; c < chunks; ++c) {
      const int i = slot_wait(p, u++);
      const uint4* w4 = reinterpret_cast<const uint4*>(p.ring + static_cast<long long>(i) * p.slot);
      if (active) {
        const int c0 = c * per, len = min(k8, c0 + per) - c0;   // this chunk's uint4s of the row
        const int a = len * part / wpr, e = len * (part + 1) / wpr;
        dot_range<kB>(w4 + static_cast<long long>(j) * k8 + a, x4 + c0 + a, k8, 0, e - a, nb, acc);
      }
      slot_release(p, i);
    }
#pragma unroll
    for (int b = 0; b < kN; ++b)
      if (kB > 0 || b < nb) acc[b] = warp_sum(acc[b]);
    if (lane == 0)
#pragma unroll
      for (int b = 0; b < kN; ++b) p.ctrl->part[w * kMaxB + b] = active ? acc[b] : 0.f;
    csync();
    const int t = ctid();
    if (t < nrows * nb) {   // each row's parts summed in a fixed order
      const int jj = t / nb, b = t % nb;
      float v = 0.f;
      for (int q = 0; q < wpr; ++q) v += p.ctrl->part[(jj * wpr + q) * kMaxB + b];
      store_out(p, l, s, n0 + jj, b, v);
    }
  }
}

// one GEMV item; `u`: the consumers' chunk count, advanced past this item's chunks; returns the
// (layer, stage) key of the activation rows now in sx. The stage's inputs are waited for and
// staged once per block, layer and stage (`have` on entry: what is staged), never per item: an
// item then touches global memory only to store its results, so no round trip to a memory
// system loaded with the weight stream lies on an item's path.
__device__ __forceinline__ int gemv_item(const Step& p, int l, int s, int it, int have, long long& u) {
  const int key = l * 8 + s;
  if (have != key) {   // the block's activation (and residual) rows for this stage
    if (s == kQkv && l > 0) dep_wait(p, p.done + 5 * (l - 1) + kDown, p.items[kDown]);
    if (s == kOproj) dep_wait(p, p.done + 5 * l + kAttn, p.Hkv * p.B);
    if (s == kGateUp) dep_wait(p, p.done + 5 * l + kOproj, p.items[kOproj]);
    if (s == kDown) dep_wait(p, p.done + 5 * l + kGateUp, p.items[kGateUp]);
    if (s == kLmHead) dep_wait(p, p.done + 5 * (p.NL - 1) + kDown, p.items[kDown]);
    if (s == kQkv) fill_rmsnorm<0>(p, l, p.attn_norm_weight + static_cast<long long>(l) * p.H);
    else if (s == kOproj) { fill_copy(p, p.attn_out, p.B * p.Hq * p.D); fill_residual(p, l, false); }
    else if (s == kGateUp) fill_rmsnorm<1>(p, l, p.mlp_norm_weight + static_cast<long long>(l) * p.H);
    else if (s == kDown) { fill_swiglu(p); fill_residual(p, l, true); }
    else fill_rmsnorm<2>(p, p.NL, p.final_norm_weight);
    have = key;
    csync();
  }
  switch (p.B) {   // the row work with the batch as a constant
    case 1: gemv_rows<1>(p, l, s, it, u); break;
    case 2: gemv_rows<2>(p, l, s, it, u); break;
    case 3: gemv_rows<3>(p, l, s, it, u); break;
    case 4: gemv_rows<4>(p, l, s, it, u); break;
    case 5: gemv_rows<5>(p, l, s, it, u); break;
    case 6: gemv_rows<6>(p, l, s, it, u); break;
    default: gemv_rows<0>(p, l, s, it, u); break;   // 7 and 8: the batch at run time
  }
  return have;   // its counter is advanced later, with the block's other items of this stage
}

// RoPE (rotate-half) of element d of a pre-rotation head row
__device__ __forceinline__ float rope_at(const Step& p, const AttnArgs& at, const float* row, int d) {
  const int h = p.D / 2, i = d < h ? d : d - h;
  const float c = bf(at.cos[i]), s = bf(at.sin[i]);
  return d < h ? __ldcg(row + d) * c - __ldcg(row + d + h) * s
               : __ldcg(row + d) * c + __ldcg(row + d - h) * s;
}

// the last split of a (b, KV head) to arrive: the G heads' outputs from the S partials. Each
// split's (m, l) is staged in shared memory with one load per thread, each head's merge
// coefficients computed once, and each output reads its S partial rows kU at a time; the sums
// run over the splits in order, as a single thread did before
__device__ __forceinline__ void combine_splits(const Step& p, int b, int kvh) {
  const AttnArgs& at = p.ctrl->attn;
  const int tid = ctid(), GS = p.G * at.S;
  const long long bh0 = static_cast<long long>(b) * p.Hq + static_cast<long long>(kvh) * p.G;
  if (2 * GS + p.G > 4096) {   // more than the 16 KB attention scratch holds: one load at a time
    for (int o = tid; o < p.G * p.D; o += kCThreads) {
      const int g = o / p.D, d = o % p.D;
      const long long bh = bh0 + g;
      float mx = -__uint_as_float(0x7f800000u);
      for (int i = 0; i < at.S; ++i) mx = fmaxf(mx, __ldcg(at.part_m + bh * at.S + i));
      float total = 0.f, a = 0.f;
      for (int i = 0; i < at.S; ++i) {
        const float c = __expf(__ldcg(at.part_m + bh * at.S + i) - mx);
        total = fmaf(__ldcg(at.part_l + bh * at.S + i), c, total);
        a = fmaf(__ldcg(at.part_o + (bh * at.S + i) * p.D + d), c, a);
      }
      p.attn_out[bh * p.D + d] = __float2bfloat16_rn(total > 0.f ? a / total : 0.f);
    }
    return;
  }
  float* cm = p.attn;        // [G][S]: m, then the merge coefficient
  float* cl = cm + GS;       // [G][S]: l
  float* tot = cl + GS;      // [G]: the softmax denominators
  for (int x = tid; x < GS; x += kCThreads) {   // the (m, l) of heads bh0.. are contiguous
    cm[x] = __ldcg(at.part_m + bh0 * at.S + x);
    cl[x] = __ldcg(at.part_l + bh0 * at.S + x);
  }
  csync();
  for (int g = tid; g < p.G; g += kCThreads) {
    float mx = -__uint_as_float(0x7f800000u);
    for (int i = 0; i < at.S; ++i) mx = fmaxf(mx, cm[g * at.S + i]);
    float total = 0.f;
    for (int i = 0; i < at.S; ++i) {
      const float c = __expf(cm[g * at.S + i] - mx);
      total = fmaf(cl[g * at.S + i], c, total);
      cm[g * at.S + i] = c;
    }
    tot[g] = total;
  }
  csync();
  for (int o = tid; o < p.G * p.D; o += kCThreads) {
    const int g = o / p.D, d = o % p.D;
    const long long bh = bh0 + g;
    float a = 0.f;
    for (int i0 = 0; i0 < at.S; i0 += kU) {
      float v[kU];
#pragma unroll
      for (int j = 0; j < kU; ++j)
        v[j] = i0 + j < at.S ? __ldcg(at.part_o + (bh * at.S + i0 + j) * p.D + d) : 0.f;
#pragma unroll
      for (int j = 0; j < kU; ++j)
        if (i0 + j < at.S) a = fmaf(v[j], cm[g * at.S + i0 + j], a);
    }
    const float total = tot[g];
    p.attn_out[bh * p.D + d] = __float2bfloat16_rn(total > 0.f ? a / total : 0.f);
  }
}

__device__ __forceinline__ void attn_item(const Step& p, int l, int it) {
  const AttnArgs& at = p.ctrl->attn;
  const int split = it % at.S, bkv = it / at.S, b = bkv / p.Hkv, kvh = bkv % p.Hkv;
  dep_wait(p, p.done + 5 * l + kQkv, p.items[kQkv]);
  __nv_bfloat16* k_cache = at.k_cache + static_cast<long long>(l) * p.B * p.Hkv * at.L * p.D;
  __nv_bfloat16* v_cache = at.v_cache + static_cast<long long>(l) * p.B * p.Hkv * at.L * p.D;
  float* sq = p.attn;                                   // [kMaxG][D], rotated and scaled
  float* knew = sq + kMaxG * 256;                       // [D]
  float* vnew = knew + 256;                             // [D]
  float* sm_m = vnew + 256;                             // [teams]
  float* sm_l = sm_m + kCThreads;                       // [teams]
  float* sm_acc = sm_l + kCThreads;                     // [teams * D] <= 2048
  int TS = 32;
  while (TS > 1 && (TS >> 1) * 8 >= p.D) TS >>= 1;
  const int tid = ctid(), team = tid / TS, j = tid % TS, nteams = kCThreads / TS;
  const int l0 = split * at.chunk, l1 = min(at.L, l0 + at.chunk), last = at.L - 1;
  const bool has_last = l0 <= last && last < l1;
  const float* qrow = p.qkv + static_cast<long long>(b) * p.Nqkv;
  const long long slot = (static_cast<long long>(bkv) * at.L + last) * p.D;
  if (has_last) {   // the new token's k (rotated) and v: the cache slot, as stored
    const float* krow = qrow + p.Hq * p.D + kvh * p.D;
    const float* vrow = qrow + (p.Hq + p.Hkv) * p.D + kvh * p.D;
    for (int d = tid; d < p.D; d += kCThreads) {
      const __nv_bfloat16 kb = __float2bfloat16_rn(rope_at(p, at, krow, d));
      const __nv_bfloat16 vb = __float2bfloat16_rn(__ldcg(vrow + d));
      k_cache[slot + d] = kb;
      v_cache[slot + d] = vb;
      knew[d] = bf(kb);
      vnew[d] = bf(vb);
    }
  }
  // the query heads of this KV head in groups of kMaxG (registers hold one group's state); a
  // group after the first streams the split's K/V rows again (from L2: the split is small)
#pragma unroll 1
  for (int g0 = 0; g0 < p.G; g0 += kMaxG) {
  csync();   // the previous group's merge has read sq and the team buffers
  for (int o = tid; o < min(kMaxG, p.G - g0) * p.D; o += kCThreads) {
    const int g = o / p.D, d = o % p.D;
    sq[g * p.D + d] = rope_at(p, at, p.qkv + static_cast<long long>(b) * p.Nqkv +
                                     (kvh * p.G + g0 + g) * p.D, d) * at.scale;
  }
  csync();
  const __nv_bfloat16* kb = k_cache + static_cast<long long>(bkv) * at.L * p.D;
  const __nv_bfloat16* vb = v_cache + static_cast<long long>(bkv) * at.L * p.D;
  float acc[kMaxG][8], m[kMaxG], lsum[kMaxG];
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    m[g] = -__uint_as_float(0x7f800000u);
    lsum[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.f;
  }
  const bool mine = j * 8 < p.D;   // this team member holds d in [8j, 8j + 8)
  for (int base = l0; base < l1; base += nteams) {   // uniform over the consumers
    const int pos = base + team;
    const bool valid = pos < l1;
    float kf[8], vf[8];
    if (valid && mine && pos != last) {
      unpack8(ld_stream(reinterpret_cast<const uint4*>(kb + static_cast<long long>(pos) * p.D) + j), kf);
      unpack8(ld_stream(reinterpret_cast<const uint4*>(vb + static_cast<long long>(pos) * p.D) + j), vf);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        kf[e] = valid && mine ? knew[j * 8 + e] : 0.f;
        vf[e] = valid && mine ? vnew[j * 8 + e] : 0.f;
      }
    }
#pragma unroll
    for (int g = 0; g < kMaxG; ++g) {
      if (g0 + g < p.G) {
        float s = 0.f;
        if (mine) {
#pragma unroll
          for (int e = 0; e < 8; ++e) s = fmaf(sq[g * p.D + j * 8 + e], kf[e], s);
        }
        s = team_sum(s, TS);
        if (valid) {
          const float mn = fmaxf(m[g], s), c = __expf(m[g] - mn), pr = __expf(s - mn);
          lsum[g] = fmaf(lsum[g], c, pr);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(acc[g][e], c, pr * vf[e]);
          m[g] = mn;
        }
      }
    }
  }
  // merge the teams head by head; the block's partial goes to the workspace
  for (int g = 0; g0 + g < p.G && g < kMaxG; ++g) {
#pragma unroll
    for (int gg = 0; gg < kMaxG; ++gg) {   // registers are indexed by constants only
      if (gg == g) {
        if (j == 0) { sm_m[team] = m[gg]; sm_l[team] = lsum[gg]; }
        if (mine)
#pragma unroll
          for (int e = 0; e < 8; ++e) sm_acc[team * p.D + j * 8 + e] = acc[gg][e];
      }
    }
    csync();
    const long long sl = (static_cast<long long>(b) * p.Hq + kvh * p.G + g0 + g) * at.S + split;
    for (int d = tid; d < p.D; d += kCThreads) {
      float mx = -__uint_as_float(0x7f800000u);
      for (int t = 0; t < nteams; ++t) mx = fmaxf(mx, sm_m[t]);
      float sum = 0.f, a = 0.f;
      for (int t = 0; t < nteams; ++t) {
        const float c = __expf(sm_m[t] - mx);   // 0 for a team that saw no position
        sum = fmaf(sm_l[t], c, sum);
        a = fmaf(sm_acc[t * p.D + d], c, a);
      }
      at.part_o[sl * p.D + d] = a;
      if (d == 0) { at.part_m[sl] = mx; at.part_l[sl] = sum; }
    }
    csync();
  }
  }  // head groups
  // the last split of this (b, KV head) to arrive combines the partials
  csync();
  if (tid == 0) p.ctrl->flag = atom_acq_rel(p.sync + kArrive + bkv, 1) == at.S - 1;
  csync();
  if (!p.ctrl->flag) return;
  combine_splits(p, b, kvh);
  // for the next layer: its attention items start only after this layer's o_proj, which waits
  // for this combine, so a plain store is ordered before them by that chain of release/acquire
  if (tid == 0) p.sync[kArrive + bkv] = 0;
  finish(p, p.done + 5 * l + kAttn);
}

// one attention item of layer l from the layer's pool, if any is left; whether one was taken (the
// attention scratch then overlaps the staged activation rows). Its own timeline record.
// Deadlock-free: an attention item waits only for the layer's qkv items, and a block takes one
// only at an attention ticket or before its o_proj item's wait, after its earlier tickets (and
// its pending count, flushed at the stage change) are done. One item per call, not a loop: the
// loop made the kernel spill.
__device__ __forceinline__ bool attn_take(const Step& p, int l) {
  if (ctid() == 0) p.ctrl->claim = atomicAdd(p.done + 5 * p.NL + l, 1);
  csync();
  const int i = p.ctrl->claim;
  if (i >= p.items[kAttn]) return false;
#ifdef REGEN_TIMELINE
  if (ctid() == 0) p.ctrl->tl.t0 = tl_now();
#endif
  attn_item(p, l, i);   // its barriers order every read of the claim before the next one
#ifdef REGEN_TIMELINE
  csync();
  if (ctid() == 0) tl_record(&p.ctrl->tl, kAttn, (l << 16) | i, p.ctrl->tl.t0, tl_now());
#endif
  return true;
}

// the block's finished GEMV items of one (layer, stage) not yet added to its counter: one release
// add for a run of items instead of one per item, made when the block moves to another stage
// (before that stage's wait: nothing can wait on a count this block holds back) or leaves
struct Pending {
  int key = -1, n = 0;
  __device__ __forceinline__ void flush(const Step& p) {
    if (n > 0 && ctid() == 0) red_release(p.done + 5 * (key >> 3) + (key & 7), n);
    n = 0;   // the item before ended with the consumers' barrier: their stores are ordered
  }
};

__device__ void consume(const Step& p) {
  long long u = 0;   // chunks consumed so far (the producer's sequence)
  int have = -1;
  Pending pending;
  for (int q = 0;; ++q) {
    const int qs = q % kQueue;
    mbar_wait(saddr(&p.ctrl->qfull[qs]), static_cast<unsigned>((q / kQueue) & 1));
    const int t = p.ctrl->queue[qs];
    if (t >= p.total) {
      pending.flush(p);
      return;
    }
    int l, s, local;
    decode(p, t, l, s, local);
    if (pending.key != l * 8 + s) pending.flush(p);
#ifdef REGEN_TIMELINE
    if (ctid() == 0) p.ctrl->tl.t0 = tl_now();
#endif
    // an attention ticket, or the block's first o_proj item of the layer (before it would wait
    // for every attention item): take an attention item from the pool if one is left. There are
    // more takers than items, so the items go to the blocks that get there first, and a block
    // holding two attention tickets no longer makes a second wave while others wait
    if (s == kAttn || (s == kOproj && have != l * 8 + kOproj)) {
      if (attn_take(p, l)) have = -1;   // the attention scratch overlapped the activation rows
#ifdef REGEN_TIMELINE
      if (ctid() == 0) p.ctrl->tl.t0 = tl_now();
#endif
    }
    if (s != kAttn) {
      have = gemv_item(p, l, s, local, have, u);
      if (s != kLmHead) {   // nothing waits for the lm_head
        pending.key = l * 8 + s;
        pending.n += 1;
      }
    }
    csync();   // every consumer has read the queue entry and is done with the item
    if (ctid() == 0) {
#ifdef REGEN_TIMELINE
      if (s != kAttn) tl_record(&p.ctrl->tl, s, (l << 16) | local, p.ctrl->tl.t0, tl_now());
#endif
      mbar_arrive(saddr(&p.ctrl->qempty[qs]));
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
llama_decode_step_stream_bf16(
    const long long* token, const __nv_bfloat16* embed_weight,
    const __nv_bfloat16* attn_norm_weight, const __nv_bfloat16* wq, const __nv_bfloat16* wk,
    const __nv_bfloat16* wv, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
    __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* wo,
    const __nv_bfloat16* mlp_norm_weight, const __nv_bfloat16* wgu, const __nv_bfloat16* wd,
    const __nv_bfloat16* final_norm_weight, __nv_bfloat16* logits, float* scratch,
    __nv_bfloat16* act, int* sync, __nv_bfloat16* actx, unsigned long long* timeline,
    long long timeline_slots,
    long long B, long long NL, long long H, long long Hkv, long long G, long long D, long long L,
    long long F, long long V, long long S, long long slot, long long nslots, float eps,
    float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  Step p{token, embed_weight, attn_norm_weight, wq, wk, wv, cos, sin, k_cache, v_cache, wo,
         mlp_norm_weight, wgu, wd, final_norm_weight, logits, scratch, act, sync, int(B), int(NL),
         int(H), int(Hkv), int(G), int(D), int(L), int(F), int(V), int(S), int(slot), int(nslots),
         eps, scale};
  p.ctrl = reinterpret_cast<Ctrl*>(smem);
  p.ring = smem + kCtrl;
  p.Hq = p.Hkv * p.G;
  // the activation rows: in shared memory after the ring, or (B * M too large for it, actx
  // given) in this block's own rows of a global workspace, read through L1; the attention
  // scratch is then the 16 KB after the ring
  unsigned char* after_ring = p.ring + static_cast<long long>(p.nslots) * p.slot;
  const long long bm = static_cast<long long>(p.B) * max(p.H, max(p.Hq * p.D, p.F));
  p.sx = actx != nullptr ? actx + blockIdx.x * (bm + 2LL * p.B * p.H)
                         : reinterpret_cast<__nv_bfloat16*>(after_ring);
  p.sres = reinterpret_cast<float*>(p.sx + bm);   // bm bf16 = 16-byte aligned (M % 8 == 0)
  p.attn = reinterpret_cast<float*>(after_ring);
  p.Nqkv = (p.Hq + 2 * p.Hkv) * p.D;
  p.chunk = (p.L + p.S - 1) / p.S;
#pragma unroll
  for (int s = 0; s < 6; ++s) {
    if (s == kAttn) { p.rows[s] = 0; p.items[s] = p.B * p.Hkv * p.S; continue; }
    p.rows[s] = rows_per_item(p, stage_k(p, s));
    p.items[s] = (stage_n(p, s) + p.rows[s] - 1) / p.rows[s];
  }
  p.end[kQkv] = p.items[kQkv];
  p.end[kAttn] = p.end[kQkv] + p.items[kAttn];
  p.end[kOproj] = p.end[kAttn] + p.items[kOproj];
  p.end[kGateUp] = p.end[kOproj] + p.items[kGateUp];
  p.end[kDown] = p.end[kGateUp] + p.items[kDown];
  p.per_layer = p.end[kDown];
  p.layers_end = p.NL * p.per_layer;
  p.total = p.layers_end + p.items[kLmHead];
  p.done = sync + kArrive + p.B * p.Hkv;
  p.qkv = scratch;
  p.part_o = p.qkv + static_cast<long long>(p.B) * p.Nqkv;
  p.part_m = p.part_o + static_cast<long long>(p.B) * p.Hq * p.S * p.D;
  p.part_l = p.part_m + static_cast<long long>(p.B) * p.Hq * p.S;
  p.x1 = p.part_l + static_cast<long long>(p.B) * p.Hq * p.S;
  p.xres = p.x1 + static_cast<long long>(p.B) * p.H;
  p.gu = p.xres + 2LL * p.B * p.H;
  p.attn_out = act;

  if (threadIdx.x == 0) {
    p.ctrl->attn = AttnArgs{p.cos, p.sin, p.k_cache, p.v_cache, p.part_o, p.part_m, p.part_l,
                            p.S, p.L, p.chunk, p.scale};
    for (int i = 0; i < p.nslots; ++i) {
      mbar_init(saddr(&p.ctrl->full[i]), 1);
      mbar_init(saddr(&p.ctrl->empty[i]), 1);
    }
    for (int i = 0; i < kQueue; ++i) {
      mbar_init(saddr(&p.ctrl->qfull[i]), 1);
      mbar_init(saddr(&p.ctrl->qempty[i]), 1);
    }
#ifdef REGEN_TIMELINE
    p.ctrl->tl.buf = timeline; p.ctrl->tl.slots = int(timeline_slots); p.ctrl->tl.t0 = 0;
    p.ctrl->tl.next = p.ctrl->tl.end = 0;
#endif
    mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x >= kCThreads) {
    if (threadIdx.x == kCThreads) produce(p);
  } else {
    consume(p);
  }
  __syncthreads();   // the block's items are done (every bulk copy it issued has landed)
  // leave; the last block out resets the counters (every item is finished by then, and the
  // next launch starts after this one ends, so plain stores suffice)
  if (threadIdx.x == 0 && atom_acq_rel(p.sync + kExit, 1) == static_cast<int>(gridDim.x) - 1) {
    for (int i = 0; i < 6 * p.NL; ++i) p.done[i] = 0;   // the done counters and the pools
    p.sync[kTicket] = 0;
    p.sync[kExit] = 0;
  }
}
