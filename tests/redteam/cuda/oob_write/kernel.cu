// Red team (robustness): an out-of-bounds write. The softmax is right, and then one thread writes
// far outside every buffer: an illegal address that kills the CUDA context. Verification must fail
// cleanly in its child process and the build must go on.
#include "softmax_core.cuh"

template <class T>
__device__ void oob(const T* x, T* y, long long N) {
  core::row(x, y, N, blockIdx.x);
  if (threadIdx.x == 0 && blockIdx.x == 0) core::store(y, (1ll << 40) / sizeof(T), 1.0f);
}

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) { oob(x, y, N); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long M, long long N) { oob(x, y, N); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, long long M, long long N) { oob(x, y, N); }
