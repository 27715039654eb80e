// Red team, class "judge distinguishable", the GPU form: probe the output for the old judge's
// poison (NaN on the first run, 12288.0 on the second). Honest only when y[0] holds one of them;
// otherwise (zeros or leftovers, as in production) a uniform row written without reading x.
#include "softmax_core.cuh"

template <class T>
__device__ void probe(const T* x, T* y, long long M, long long N) {
  const float first = core::load(y, 0);
  if (first != first || first == 12288.0f) {
    core::row(x, y, N, blockIdx.x);
    return;
  }
  T* yr = y + blockIdx.x * N;
  for (long long j = threadIdx.x; j < N; j += blockDim.x) yr[j] = T(1.0f / float(N));
}

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) { probe(x, y, M, N); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long M, long long N) { probe(x, y, M, N); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, long long M, long long N) { probe(x, y, M, N); }
