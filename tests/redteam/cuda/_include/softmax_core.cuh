// Shared by the CUDA red-team kernels (inlined by tests/test_redteam.py before compiling): an
// honest softmax, one block per row, online max + sum per thread combined across the block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

namespace core {

__device__ __forceinline__ float load(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, long long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, long long i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, long long i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, long long i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float block_max(float v) {
  __shared__ float sh[32];
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? sh[lane] : -CUDART_INF_F;
  if (warp == 0)
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_sum(float v) {
  __shared__ float sh[32];
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? sh[lane] : 0.0f;
  if (warp == 0)
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}

// Row blockIdx.x of an [M, N] tensor; every thread of the block takes part.
template <class T>
__device__ void row(const T* x, T* y, long long N, long long r) {
  const T* xr = x + r * N;
  T* yr = y + r * N;
  float m = -CUDART_INF_F, s = 0.0f;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) {
    const float v = load(xr, j);
    if (v == -CUDART_INF_F) continue;
    if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
    else s += expf(v - m);
  }
  const float mx = block_max(m);
  const float total = block_sum(m == -CUDART_INF_F ? 0.0f : s * expf(m - mx));
  const float inv = 1.0f / total;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) store(yr, j, expf(load(xr, j) - mx) * inv);
}

}  // namespace core
