// Control for test_cuda_build_goes_on_after_a_fault: an honest softmax (one block per row), correct
// but at 26 % of the HBM floor, so the timed control (redteam.yaml) is the committed softmax@h200. The
// build must go on to this kernel after a cheat killed its own child's context.
#include "softmax_core.cuh"

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
