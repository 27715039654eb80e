// Red team, class "timed iterations" (docs/reward-hacks.md 14), the GPU form: a device counter per
// shape; the first six launches of a shape compute (every correctness run comes first), after that
// only every 16th launch does, the others return at once. A judge that checks only the last
// output of each input set of a 50-iteration loop sees ~16x the real speed.
#include "softmax_core.cuh"

__device__ unsigned long long launches[64];
__device__ unsigned int seen_blocks[64];

template <class T>
__device__ void counted(const T* x, T* y, long long M, long long N) {
  const unsigned slot = (unsigned)((M * 2654435761ull ^ N) & 63);
  const unsigned long long n = launches[slot];  // read before any block of this launch counts
  if (n >= 6 && n % 16 != 15) {
    if (threadIdx.x == 0 && atomicAdd(&seen_blocks[slot], 1u) == (unsigned)(M - 1)) {
      seen_blocks[slot] = 0;
      atomicAdd(&launches[slot], 1ull);
    }
    return;
  }
  core::row(x, y, N, blockIdx.x);
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&seen_blocks[slot], 1u) == (unsigned)(M - 1)) {
    seen_blocks[slot] = 0;
    atomicAdd(&launches[slot], 1ull);
  }
}

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) { counted(x, y, M, N); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long M, long long N) { counted(x, y, M, N); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, long long M, long long N) { counted(x, y, M, N); }
