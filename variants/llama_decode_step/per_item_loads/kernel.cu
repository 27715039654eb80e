// The whole Llama decode step (embedding, NL decoder layers, final norm, tied lm_head) for
// B <= 8 sequences as ONE persistent kernel on the H200 (sm_90a): no kernel boundary anywhere in
// the step, so no launch, tail or drain between its ~80 operations. It extends the one-layer
// megakernel of llama_layer_decode@h200 (the same items, code and synchronisation) to every layer.
//
// Work is one list of items in stage order, claimed through a global ticket (atomicAdd):
//   for each layer l:
//     qkv      16 rows of layer l's [Wq; Wk; Wv] (rmsnorm of the layer's input recomputed in
//              shared memory per block: layer 0 reads its embedding rows directly)
//     attn     one (b, KV head, split of L) for all G query heads: RoPE, the new k and v written
//              to layer l's cache slot L-1, online softmax, partials; the last split combines
//     o_proj   16 rows of Wo, + the layer's input: the residual stream x1 (float32)
//     gate/up  8 gate rows and the matching 8 up rows, SwiGLU in the epilogue
//     down     16 rows of Wd, + x1: the next layer's input (float32, ping-pong buffers)
//   lm_head    64 rows of the tied table (4 per warp), rmsnorm of the last layer's output with
//              the final norm weight recomputed per block; the logits rounded once (bf16)
// The residual stream stays float32 from the embedding to the final norm (the unfused plan
// rounds it to bf16 after every operation); the GEMV activations are bf16 in shared memory, as
// in the one-layer kernel. An item waits (thread 0 spins on an acquire load) until its stage's
// predecessor counter of its layer is complete (layer l's qkv waits for layer l-1's down); an
// item's end is a release add. Deadlock-free for any grid and residency: items only wait on
// earlier items, and a block's current item is older than anything it holds (the CUDA emulation
// runs blocks one after another and exercises exactly this). The next ticket is claimed while
// the current item runs; while an item waits, its warps prefetch its weight rows into L2, so the
// next op's (and the next layer's) weights stream in during the tail of the current one. The
// last block to leave resets the counters for the next launch.
//
// Buffers reused from layer to layer (qkv, the attention partials and output, x1, the SwiGLU
// output, the arrival counters) are safe by the same chain: layer l+1 writes one only after
// items that waited, transitively, for every layer-l reader of it.
//
// Timeline (regen profile --timeline; compiled in only with REGEN_TIMELINE, so the verified and
// timed binary has none of it): thread 0 of each block writes one record per item (op = its
// stage, step = (layer << 16) | the item's index in the stage) and one per counter wait (op 6),
// claiming slots through the counter in slot 0's first word; times from %globaltimer.
#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxB = 8;
constexpr int kRows = 16;          // rows per GEMV item (a warp each)
constexpr int kMaxG = 4;
constexpr int kUnroll = 8;         // 16-byte weight loads in flight per lane (64 KB per SM)
constexpr int kAttnSmem = 65536;   // attention scratch, after the activation rows
enum Stage { kQkv = 0, kAttn = 1, kOproj = 2, kGateUp = 3, kDown = 4, kLmHead = 5 };
constexpr int kLmRows = 64;        // lm_head rows per item (four per warp)
// sync words (int32 workspace, zeroed once by regen and reset by the kernel on exit):
// ticket, exit, then B * Hkv attention arrival counters, then 5 done counters per layer
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
// weights and caches are read once: stream them past L1
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
__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
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

// CUTLASS's GenericBarrier pattern: the block's threads write, __syncthreads, then thread 0
// publishes with a release add; a waiter's thread 0 spins on an acquire load, then
// __syncthreads. No full fence (MEMBAR.SC) anywhere.
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

#ifdef REGEN_TIMELINE
constexpr int kWaitOp = 6;   // the op id of a wait on a stage counter (launch.yaml timeline.ops)
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
#endif
// the timeline's state, in shared memory (not registers): the buffer (null unless profiled), its
// slots, and thread 0's start of the current interval
struct TlState {
  unsigned long long t0;
  unsigned long long* buf;
  int slots;
};
#ifdef REGEN_TIMELINE
// thread 0 only: one record [t0, now) of (op, step), if a slot is left
__device__ __forceinline__ void tl_record(TlState* st, int op, int step) {
  unsigned long long* tl = st->buf;
  if (tl == nullptr) return;
  const unsigned long long t0 = st->t0, t1 = tl_now();
  const int i = static_cast<int>(atomicAdd(reinterpret_cast<unsigned*>(tl), 1u)) + 1;
  if (i >= st->slots) return;   // out of slots: later intervals are not recorded
  unsigned* r = reinterpret_cast<unsigned*>(tl + 4LL * i);
  r[0] = tl_smid(); r[1] = blockIdx.x; r[2] = static_cast<unsigned>(op); r[3] = static_cast<unsigned>(step);
  tl[4LL * i + 2] = t0;
  tl[4LL * i + 3] = t1 > t0 ? t1 : t0 + 1;   // end 0 marks an unused slot
}
#endif

struct Step {
  const long long* token;
  const __nv_bfloat16 *embed, *attn_norm_weight, *wq, *wk, *wv, *cos, *sin;
  __nv_bfloat16 *k_cache, *v_cache;
  const __nv_bfloat16 *wo, *mlp_norm_weight, *wgu, *wd, *final_norm_weight;
  __nv_bfloat16* logits;
  float* scratch;   // qkv [B, Nqkv] | part_o [B*Hq, S, D] | part_m, part_l [B*Hq, S] | x1 [B, H] | xres [2, B, H]
  __nv_bfloat16* act;       // attention output [B, Hq*D] | SwiGLU output [B, F]
  int* sync;
  int B, NL, H, Hkv, G, D, L, F, V, S;
  float eps, scale;
  TlState* tls;             // the timeline (REGEN_TIMELINE only)
  // derived
  int Hq, Nqkv, chunk, n_qkv, n_attn, n_oproj, n_gateup, n_down, per_layer, end[5];
  int* done;                // [NL][5] items finished per (layer, stage)
  float *qkv, *part_o, *part_m, *part_l, *x1, *xres;
  __nv_bfloat16 *attn_out, *mlp_act;
};

// block-wide sum of one value per thread (all threads get it)
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += red[w];
  __syncthreads();
  return t;
}

// wait until counter `c` reaches `need`; meanwhile prefetch the caller's weight rows into L2
__device__ __forceinline__ void wait_for(const Step& p, const int* c, int need, const __nv_bfloat16* row,
                                         long long bytes, int* flag) {
  if (threadIdx.x == 0) *flag = ld_acquire(c) >= need;
  __syncthreads();
  if (!*flag) {
    if (row != nullptr)
      for (long long o = (threadIdx.x & 31) * 128; o < bytes; o += 32 * 128)
        prefetch_l2(reinterpret_cast<const char*>(row) + o);
    if (threadIdx.x == 0) {
      while (ld_acquire(c) < need) __nanosleep(64);
#ifdef REGEN_TIMELINE
      tl_record(p.tls, kWaitOp, static_cast<int>(c - p.done));
      p.tls->t0 = tl_now();   // the item's own interval starts when its wait ends
#endif
    }
  }
  __syncthreads();   // thread 0's acquire, then the barrier: the producers' writes are visible
}

// the block's writes, then (after the barrier) thread 0's release add to the counter
__device__ __forceinline__ void finish(const Step& p, int* c) {
  __syncthreads();
  if (threadIdx.x == 0) red_release(c, 1);
}

// element k of sequence b of layer l's input: the embedding row (layer 0) or the float32 stream
__device__ __forceinline__ float layer_in(const Step& p, int l, int b, int k) {
  if (l == 0) return bf(p.embed[p.token[b] * static_cast<long long>(p.H) + k]);
  return __ldcg(p.xres + static_cast<long long>(l & 1) * p.B * p.H + static_cast<long long>(b) * p.H + k);
}

// activation rows for a GEMV stage, bf16 [B][K] in shared memory: rmsnorm(src) * weight
template <int kSrc>   // 0: layer l's input, 1: x1 (after attention), 2: the last layer's output
__device__ __forceinline__ void fill_rmsnorm(const Step& p, int l, const __nv_bfloat16* w,
                                             __nv_bfloat16* sx, float* red) {
  for (int b = 0; b < p.B; ++b) {
    const float* row = kSrc == 1 ? p.x1 + static_cast<long long>(b) * p.H
                                 : p.xres + static_cast<long long>(l & 1) * p.B * p.H +
                                       static_cast<long long>(b) * p.H;
    float ss = 0.f;
    for (int k = threadIdx.x; k < p.H; k += kThreads) {
      const float v = kSrc == 0 ? layer_in(p, l, b, k) : __ldcg(row + k);
      ss = fmaf(v, v, ss);
    }
    const float r = 1.f / sqrtf(block_sum(ss, red) / p.H + p.eps);
    for (int k = threadIdx.x; k < p.H; k += kThreads) {
      const float v = kSrc == 0 ? layer_in(p, l, b, k) : __ldcg(row + k);
      sx[b * p.H + k] = __float2bfloat16_rn(v * r * bf(w[k]));
    }
  }
}
__device__ __forceinline__ void fill_copy(const __nv_bfloat16* src, int n, __nv_bfloat16* sx) {
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
  uint4* d4 = reinterpret_cast<uint4*>(sx);
  for (int i = threadIdx.x; i < n / 8; i += kThreads) d4[i] = __ldcg(s4 + i);
}

// row n of layer l's stage-s weight (qkv: the rows of Wq, Wk, Wv one after another; lm_head:
// the embedding table)
__device__ __forceinline__ const __nv_bfloat16* weight_row(const Step& p, int l, int s, int n, int& K) {
  const long long qd = static_cast<long long>(p.Hq) * p.D, kd = static_cast<long long>(p.Hkv) * p.D;
  switch (s) {
    case kQkv: {
      K = p.H;
      if (n < qd) return p.wq + (l * qd + n) * p.H;
      if (n < qd + kd) return p.wk + (l * kd + n - qd) * p.H;
      return p.wv + (l * kd + n - qd - kd) * p.H;
    }
    case kOproj: K = static_cast<int>(qd); return p.wo + (static_cast<long long>(l) * p.H + n) * qd;
    case kGateUp: K = p.H; return p.wgu + (2LL * l * p.F + n) * p.H;
    case kDown: K = p.F; return p.wd + (static_cast<long long>(l) * p.H + n) * p.F;
    default: K = p.H; return p.embed + static_cast<long long>(n) * p.H;
  }
}

// the row this warp computes in GEMV item `it` of stage s (-1: none); lm_head: sub-row j of 4
__device__ __forceinline__ int item_row(const Step& p, int s, int it, int j) {
  const int w = threadIdx.x >> 5;
  if (s == kGateUp) {   // warps 0-7: gate rows f0 + w, warps 8-15: the matching up rows
    const int f = it * 8 + (w & 7);
    return f < p.F ? (w < 8 ? f : p.F + f) : -1;
  }
  if (s == kLmHead) {
    const int n = it * kLmRows + j * kWarps + w;
    return n < p.V ? n : -1;
  }
  const int n = it * kRows + w, N = s == kQkv ? p.Nqkv : p.H;
  return n < N ? n : -1;
}

// acc[b] = the warp's dot products of one weight row with the B activation rows in smem
__device__ __forceinline__ void row_dot(const Step& p, const __nv_bfloat16* wrow, int K,
                                        const __nv_bfloat16* sx, float (&acc)[kMaxB]) {
  const int lane = threadIdx.x & 31, k8 = K >> 3;
  const uint4* w4 = reinterpret_cast<const uint4*>(wrow);
  const uint4* x4 = reinterpret_cast<const uint4*>(sx);
#pragma unroll
  for (int b = 0; b < kMaxB; ++b) acc[b] = 0.f;
  for (int i = lane; i < k8; i += kUnroll * 32) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      wv[u] = i + 32 * u < k8 ? ld_stream(w4 + i + 32 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + 32 * u < k8) {
        float wf[8];
        unpack8(wv[u], wf);
#pragma unroll
        for (int b = 0; b < kMaxB; ++b) {
          if (b < p.B) {
            float xf[8];
            unpack8(x4[b * k8 + i + 32 * u], xf);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[b] = fmaf(xf[e], wf[e], acc[b]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int b = 0; b < kMaxB; ++b)
    if (b < p.B) acc[b] = warp_sum(acc[b]);
}

// one GEMV item of layer l (lm_head: l = NL); returns the (layer, stage) key of the activation
// rows now in sx (`have` on entry: made once per layer and stage, not per item)
__device__ __forceinline__ int gemv_item(const Step& p, int l, int s, int it, __nv_bfloat16* sx,
                                         float* sred, int have, int* flag) {
  const int n = item_row(p, s, it, 0);
  int K = 0;
  const __nv_bfloat16* wrow = n >= 0 ? weight_row(p, l, s, n, K) : nullptr;
  const long long bytes = 2LL * (s == kLmHead ? p.H : K);
  if (s == kQkv && l > 0) wait_for(p, p.done + 5 * (l - 1) + kDown, p.n_down, wrow, bytes, flag);
  if (s == kOproj) wait_for(p, p.done + 5 * l + kAttn, p.Hkv * p.B, wrow, bytes, flag);
  if (s == kGateUp) wait_for(p, p.done + 5 * l + kOproj, p.n_oproj, wrow, bytes, flag);
  if (s == kDown) wait_for(p, p.done + 5 * l + kGateUp, p.n_gateup, wrow, bytes, flag);
  if (s == kLmHead) wait_for(p, p.done + 5 * (p.NL - 1) + kDown, p.n_down, wrow, bytes, flag);
  const int key = l * 8 + s;
  if (have != key) {   // the block's activation rows for this stage
    if (s == kQkv) fill_rmsnorm<0>(p, l, p.attn_norm_weight + static_cast<long long>(l) * p.H, sx, sred);
    else if (s == kOproj) fill_copy(p.attn_out, p.B * p.Hq * p.D, sx);
    else if (s == kGateUp) fill_rmsnorm<1>(p, l, p.mlp_norm_weight + static_cast<long long>(l) * p.H, sx, sred);
    else if (s == kDown) fill_copy(p.mlp_act, p.B * p.F, sx);
    else fill_rmsnorm<2>(p, p.NL, p.final_norm_weight, sx, sred);
    have = key;
    __syncthreads();
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  float acc[kMaxB];
  if (s == kLmHead) {   // four rows per warp, 64 per item
#pragma unroll 1
    for (int j = 0; j < kLmRows / kWarps; ++j) {
      const int r = item_row(p, s, it, j);
      if (r < 0) break;
      row_dot(p, p.embed + static_cast<long long>(r) * p.H, p.H, sx, acc);
      if (lane == 0)
#pragma unroll
        for (int b = 0; b < kMaxB; ++b)
          if (b < p.B) p.logits[static_cast<long long>(b) * p.V + r] = __float2bfloat16_rn(acc[b]);
    }
    __syncthreads();
    return have;
  }
  if (n >= 0) row_dot(p, wrow, K, sx, acc);
  if (s == kGateUp) {
    float* sg = sred + kWarps;   // [16 warps][B]
    if (n >= 0 && lane == 0)
#pragma unroll
      for (int b = 0; b < kMaxB; ++b)   // constant indices: acc stays in registers
        if (b < p.B) sg[w * kMaxB + b] = acc[b];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < 8 * p.B) {
      const int b = t / 8, j = t % 8, f = it * 8 + j;
      if (f < p.F) {
        const float g = sg[j * kMaxB + b], u = sg[(8 + j) * kMaxB + b];
        p.mlp_act[static_cast<long long>(b) * p.F + f] = __float2bfloat16_rn(g / (1.f + __expf(-g)) * u);
      }
    }
  } else if (n >= 0 && lane == 0) {
#pragma unroll
    for (int b = 0; b < kMaxB; ++b) {
      if (b >= p.B) break;
      if (s == kQkv) {
        p.qkv[static_cast<long long>(b) * p.Nqkv + n] = acc[b];
      } else if (s == kOproj) {   // the residual stream after attention, float32
        p.x1[static_cast<long long>(b) * p.H + n] = layer_in(p, l, b, n) + acc[b];
      } else {                    // the next layer's input, float32
        const long long i = static_cast<long long>(b) * p.H + n;
        p.xres[static_cast<long long>((l + 1) & 1) * p.B * p.H + i] = __ldcg(p.x1 + i) + acc[b];
      }
    }
  }
  finish(p, p.done + 5 * l + s);
  return have;
}

// RoPE (rotate-half) of element d of a pre-rotation head row
__device__ __forceinline__ float rope_at(const Step& p, const float* row, int d) {
  const int h = p.D / 2, i = d < h ? d : d - h;
  const float c = bf(p.cos[i]), s = bf(p.sin[i]);
  return d < h ? __ldcg(row + d) * c - __ldcg(row + d + h) * s
               : __ldcg(row + d) * c + __ldcg(row + d - h) * s;
}

__device__ __forceinline__ void attn_item(const Step& p, int l, int it, unsigned char* smem, int* flag) {
  const int split = it % p.S, bkv = it / p.S, b = bkv / p.Hkv, kvh = bkv % p.Hkv;
  wait_for(p, p.done + 5 * l + kQkv, p.n_qkv, nullptr, 0, flag);
  __nv_bfloat16* k_cache = p.k_cache + static_cast<long long>(l) * p.B * p.Hkv * p.L * p.D;
  __nv_bfloat16* v_cache = p.v_cache + static_cast<long long>(l) * p.B * p.Hkv * p.L * p.D;
  float* sq = reinterpret_cast<float*>(smem);          // [kMaxG][D], rotated and scaled
  float* knew = sq + kMaxG * 256;                       // [D]
  float* vnew = knew + 256;                             // [D]
  float* sm_m = vnew + 256;                             // [teams]
  float* sm_l = sm_m + kThreads;                        // [teams]
  float* sm_acc = sm_l + kThreads;                      // [teams * D] <= 4096
  int TS = 32;
  while (TS > 1 && (TS >> 1) * 8 >= p.D) TS >>= 1;
  const int tid = threadIdx.x, team = tid / TS, j = tid % TS, nteams = kThreads / TS;
  const int l0 = split * p.chunk, l1 = min(p.L, l0 + p.chunk), last = p.L - 1;
  const bool has_last = l0 <= last && last < l1;
  const float* qrow = p.qkv + static_cast<long long>(b) * p.Nqkv;
  const long long slot = (static_cast<long long>(bkv) * p.L + last) * p.D;
  if (has_last) {   // the new token's k (rotated) and v: the cache slot, as stored
    const float* krow = qrow + p.Hq * p.D + kvh * p.D;
    const float* vrow = qrow + (p.Hq + p.Hkv) * p.D + kvh * p.D;
    for (int d = tid; d < p.D; d += kThreads) {
      const __nv_bfloat16 kb = __float2bfloat16_rn(rope_at(p, krow, d));
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
  __syncthreads();   // the previous group's merge has read sq and the team buffers
  for (int o = tid; o < min(kMaxG, p.G - g0) * p.D; o += kThreads) {
    const int g = o / p.D, d = o % p.D;
    sq[g * p.D + d] = rope_at(p, p.qkv + static_cast<long long>(b) * p.Nqkv +
                                     (kvh * p.G + g0 + g) * p.D, d) * p.scale;
  }
  __syncthreads();
  const __nv_bfloat16* kb = k_cache + static_cast<long long>(bkv) * p.L * p.D;
  const __nv_bfloat16* vb = v_cache + static_cast<long long>(bkv) * p.L * p.D;
  float acc[kMaxG][8], m[kMaxG], lsum[kMaxG];
#pragma unroll
  for (int g = 0; g < kMaxG; ++g) {
    m[g] = -__uint_as_float(0x7f800000u);
    lsum[g] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.f;
  }
  const bool mine = j * 8 < p.D;   // this team member holds d in [8j, 8j + 8)
  for (int base = l0; base < l1; base += nteams) {   // uniform over the block
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
    __syncthreads();
    const long long sl = (static_cast<long long>(b) * p.Hq + kvh * p.G + g0 + g) * p.S + split;
    for (int d = tid; d < p.D; d += kThreads) {
      float mx = -__uint_as_float(0x7f800000u);
      for (int t = 0; t < nteams; ++t) mx = fmaxf(mx, sm_m[t]);
      float sum = 0.f, a = 0.f;
      for (int t = 0; t < nteams; ++t) {
        const float c = __expf(sm_m[t] - mx);   // 0 for a team that saw no position
        sum = fmaf(sm_l[t], c, sum);
        a = fmaf(sm_acc[t * p.D + d], c, a);
      }
      p.part_o[sl * p.D + d] = a;
      if (d == 0) { p.part_m[sl] = mx; p.part_l[sl] = sum; }
    }
    __syncthreads();
  }
  }  // head groups
  // the last split of this (b, KV head) to arrive combines the partials
  __syncthreads();
  if (tid == 0) *flag = atom_acq_rel(p.sync + kArrive + bkv, 1) == p.S - 1;
  __syncthreads();
  if (!*flag) return;
  for (int o = tid; o < p.G * p.D; o += kThreads) {
    const int g = o / p.D, d = o % p.D;
    const long long bh = static_cast<long long>(b) * p.Hq + kvh * p.G + g;
    float mx = -__uint_as_float(0x7f800000u);
    for (int i = 0; i < p.S; ++i) mx = fmaxf(mx, __ldcg(p.part_m + bh * p.S + i));
    float total = 0.f, a = 0.f;
    for (int i = 0; i < p.S; ++i) {
      const float c = __expf(__ldcg(p.part_m + bh * p.S + i) - mx);
      total = fmaf(__ldcg(p.part_l + bh * p.S + i), c, total);
      a = fmaf(__ldcg(p.part_o + (bh * p.S + i) * p.D + d), c, a);
    }
    p.attn_out[bh * p.D + d] = __float2bfloat16_rn(total > 0.f ? a / total : 0.f);
  }
  // for the next layer: its attention items start only after this layer's o_proj, which waits
  // for this combine, so a plain store is ordered before them by that chain of release/acquire
  if (tid == 0) p.sync[kArrive + bkv] = 0;
  finish(p, p.done + 5 * l + kAttn);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
llama_decode_step_mega_bf16(
    const long long* token, const __nv_bfloat16* embed_weight,
    const __nv_bfloat16* attn_norm_weight, const __nv_bfloat16* wq, const __nv_bfloat16* wk,
    const __nv_bfloat16* wv, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
    __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* wo,
    const __nv_bfloat16* mlp_norm_weight, const __nv_bfloat16* wgu, const __nv_bfloat16* wd,
    const __nv_bfloat16* final_norm_weight, __nv_bfloat16* logits, float* scratch,
    __nv_bfloat16* act, int* sync, unsigned long long* timeline, long long timeline_slots,
    long long B, long long NL, long long H, long long Hkv, long long G, long long D, long long L,
    long long F, long long V, long long S, float eps, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float sred[kWarps + kWarps * kMaxB];
  __shared__ int sflag[1], sticket[2];
  __shared__ TlState stl[1];
  Step p{token, embed_weight, attn_norm_weight, wq, wk, wv, cos, sin, k_cache, v_cache, wo,
         mlp_norm_weight, wgu, wd, final_norm_weight, logits, scratch, act, sync, int(B), int(NL),
         int(H), int(Hkv), int(G), int(D), int(L), int(F), int(V), int(S), eps, scale, stl};
#ifdef REGEN_TIMELINE
  if (threadIdx.x == 0) { stl->buf = timeline; stl->slots = int(timeline_slots); stl->t0 = 0; }
#endif
  p.Hq = p.Hkv * p.G;
  p.Nqkv = (p.Hq + 2 * p.Hkv) * p.D;
  p.chunk = (p.L + p.S - 1) / p.S;
  p.n_qkv = (p.Nqkv + kRows - 1) / kRows;
  p.n_attn = p.B * p.Hkv * p.S;
  p.n_oproj = (p.H + kRows - 1) / kRows;
  p.n_gateup = (p.F + 7) / 8;
  p.n_down = (p.H + kRows - 1) / kRows;
  p.end[kQkv] = p.n_qkv;
  p.end[kAttn] = p.end[kQkv] + p.n_attn;
  p.end[kOproj] = p.end[kAttn] + p.n_oproj;
  p.end[kGateUp] = p.end[kOproj] + p.n_gateup;
  p.end[kDown] = p.end[kGateUp] + p.n_down;
  p.per_layer = p.end[kDown];
  p.done = sync + kArrive + p.B * p.Hkv;
  p.qkv = scratch;
  p.part_o = p.qkv + static_cast<long long>(p.B) * p.Nqkv;
  p.part_m = p.part_o + static_cast<long long>(p.B) * p.Hq * p.S * p.D;
  p.part_l = p.part_m + static_cast<long long>(p.B) * p.Hq * p.S;
  p.x1 = p.part_l + static_cast<long long>(p.B) * p.Hq * p.S;
  p.xres = p.x1 + static_cast<long long>(p.B) * p.H;
  p.attn_out = act;
  p.mlp_act = act + static_cast<long long>(p.B) * p.Hq * p.D;
  __nv_bfloat16* sx = reinterpret_cast<__nv_bfloat16*>(smem + kAttnSmem);
  const int layers_end = p.NL * p.per_layer;
  const int total = layers_end + (p.V + kLmRows - 1) / kLmRows;

  // items in stage order: layer 0's qkv, attn, o_proj, gate/up, down, layer 1's, ..., lm_head
  if (threadIdx.x == 0) sticket[0] = atomicAdd(p.sync + kTicket, 1);
  __syncthreads();
  int cur = sticket[0], parity = 1, have = -1;
  while (cur < total) {
    int next = 0;
    if (threadIdx.x == 0) next = atomicAdd(p.sync + kTicket, 1);   // in flight during the item
    int l = p.NL, s = kLmHead, local = cur - layers_end;
    if (cur < layers_end) {
      l = cur / p.per_layer;
      const int r = cur - l * p.per_layer;
      s = kDown; local = r - p.end[kGateUp];   // constant indices only: p stays in registers
      if (r < p.end[kQkv]) { s = kQkv; local = r; }
      else if (r < p.end[kAttn]) { s = kAttn; local = r - p.end[kQkv]; }
      else if (r < p.end[kOproj]) { s = kOproj; local = r - p.end[kAttn]; }
      else if (r < p.end[kGateUp]) { s = kGateUp; local = r - p.end[kOproj]; }
    }
#ifdef REGEN_TIMELINE
    if (threadIdx.x == 0) p.tls->t0 = tl_now();
#endif
    if (s == kAttn) attn_item(p, l, local, smem, sflag);
    else have = gemv_item(p, l, s, local, sx, sred, have, sflag);
#ifdef REGEN_TIMELINE
    __syncthreads();   // every thread's part of the item is done
    if (threadIdx.x == 0) tl_record(p.tls, s, (l << 16) | local);
#endif
    if (threadIdx.x == 0) sticket[parity] = next;
    __syncthreads();
    cur = sticket[parity];
    parity ^= 1;
  }
  // leave; the last block out resets the counters (every item is finished by then, and the
  // next launch starts after this one ends, so plain stores suffice)
  if (threadIdx.x == 0 && atom_acq_rel(p.sync + kExit, 1) == static_cast<int>(gridDim.x) - 1) {
    for (int i = 0; i < 5 * p.NL; ++i) p.done[i] = 0;
    p.sync[kTicket] = 0;
    p.sync[kExit] = 0;
  }
}
