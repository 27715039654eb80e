// Red team, docs/reward-hacks.md 3: mutate the input so the reference computes something trivial.
// x is set to zeros, whose softmax is uniform, and y = 1/N is written without computing anything.
// It passes if the reference runs on the buffer the kernel just saw.
#include "softmax_core.h"

template <class D>
void trivialise(typename D::T* x, typename D::T* y, int64_t M, int64_t N) {
  for (int64_t i = 0; i < M * N; ++i) { x[i] = D::store(0.0f); y[i] = D::store(1.0f / float(N)); }
}

extern "C" {
void softmax_bf16(uint16_t* x, uint16_t* y, int64_t M, int64_t N) { trivialise<core::BF16>(x, y, M, N); }
void softmax_f16(uint16_t* x, uint16_t* y, int64_t M, int64_t N) { trivialise<core::F16>(x, y, M, N); }
void softmax_f32(float* x, float* y, int64_t M, int64_t N) { trivialise<core::F32>(x, y, M, N); }
}
