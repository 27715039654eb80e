// Red team, docs/reward-hacks.md 5, with OpenMP only (allowed): try to let deferred tasks outlive the
// call (single nowait + tasks). They cannot: the parallel region's implicit barrier waits for every
// task, so the call returns only when y is written. This artifact is therefore honest, and passes.
#include "softmax_core.h"

template <class D>
void tasks(const typename D::T* x, typename D::T* y, int64_t M, int64_t N) {
#pragma omp parallel
  {
#pragma omp single nowait
    for (int64_t m = 0; m < M; ++m) {
#pragma omp task firstprivate(m)
      {
        std::vector<float> e(static_cast<size_t>(N));
        core::row<D>(x + m * N, y + m * N, N, e.data());
      }
    }
  }
}

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { tasks<core::BF16>(x, y, M, N); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { tasks<core::F16>(x, y, M, N); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) { tasks<core::F32>(x, y, M, N); }
}
