// Red team (robustness): a kernel that never returns. It spins on a flag nobody sets (a volatile
// read, so the compiler cannot drop the loop). Verification must time out cleanly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ int never_set = 0;

__device__ void spin() {
  while (*static_cast<volatile int*>(&never_set) == 0) {}
}

extern "C" __global__ void softmax_f32(const float*, float*, long long, long long) { spin(); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16*, __nv_bfloat16*, long long, long long) { spin(); }
extern "C" __global__ void softmax_f16(const __half*, __half*, long long, long long) { spin(); }
