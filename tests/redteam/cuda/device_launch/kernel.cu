// Red team, docs/reward-hacks.md 4 (work on another stream): without host code, the only way for a
// kernel to start work the timed stream does not wait for is a device-side launch (dynamic
// parallelism, e.g. into cudaStreamFireAndForget). NVRTC without -rdc and the device runtime
// library refuses it, and regen's recipe launches only the kernels it names on its own stream.
#include <cuda_runtime.h>

extern "C" __global__ void finish_later(const float* x, float* y, long long n) {
  for (long long i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) {
  if (threadIdx.x == 0 && blockIdx.x == 0) finish_later<<<1, 256>>>(x, y, M * N);
}
