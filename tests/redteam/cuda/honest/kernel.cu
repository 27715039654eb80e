// Control for the CUDA red team: an honest softmax (one block per row). It must pass every guard
// the cheats trip, and the build must go on to it after a cheat killed its own child's context.
#include "softmax_core.cuh"

extern "C" __global__ void softmax_f32(const float* x, float* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
extern "C" __global__ void softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
extern "C" __global__ void softmax_f16(const __half* x, __half* y, long long M, long long N) { core::row(x, y, N, blockIdx.x); }
