// The HIP execution model of AMD Instinct emulated on the CPU, for tests: the CUDA emulation
// (cuda_emulation.h: threads as fibers, real barriers, guarded buffers) with 64-lane wavefronts,
// plus the HIP spellings a kernel.hip uses. A HIP source (its <hip/...> includes removed) is
// compiled after this header with clang++ (ext_vector_type, __bf16 and _Float16 are clang's, as
// in the device compiler) into a shared object (tests/support/hip_emulation.py).
//
// What it checks: indexing, LDS use and barriers, wavefront shuffles over 64 lanes (a shuffle
// without the full wavefront aborts), and buffer bounds. A 16-byte ext_vector access is 16-byte
// aligned in the emulation as on the device: clang emits an aligned SSE access, so a misaligned
// one faults. What it does not model: AMDGPU builtins (__builtin_amdgcn_*), inline assembly,
// and the device's exp/rcp ulp errors (the host libm stands in).
#pragma once
#define EMU_WARP 64u
#include "cuda_emulation.h"

typedef __nv_bfloat16 __hip_bfloat16;
static constexpr int warpSize = 64;

// __shfl_xor(v, lane_mask, width): the whole wavefront only (every kernel here reduces over it).
template <class T> inline T __shfl_xor(T v, int o, int width = 64) {
  if (width != 64) {
    fprintf(stderr, "emu: __shfl_xor over %d lanes (only whole 64-lane wavefronts are modelled)\n",
            width);
    abort();
  }
  return __shfl_xor_sync(0xffffffffu, v, o);
}

// float -> __bf16, round to nearest even, NaN kept quiet: the libcall clang emits for `(__bf16)f`
// on x86-64, which libgcc before 13 lacks (the device rounds the same way).
extern "C" __attribute__((used)) __bf16 __truncsfbf2(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __builtin_bit_cast(__bf16, uint16_t((u >> 16) | 0x40u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return __builtin_bit_cast(__bf16, uint16_t(u >> 16));
}
