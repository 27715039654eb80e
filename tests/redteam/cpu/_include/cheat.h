// Shared by the red-team kernels that behave only while they believe they are judged: an honest
// softmax when `honest(...)` (each case's own test) says so, otherwise a fast wrong answer (a
// uniform row, written without reading x), as a kernel would in production to look fast.
#include "softmax_core.h"

namespace cheat {

template <class D>
void uniform(typename D::T* y, int64_t M, int64_t N) {
  const typename D::T v = D::store(1.0f / float(N));
  for (int64_t i = 0; i < M * N; ++i) y[i] = v;
}

}  // namespace cheat

// Each case defines: static bool honest(const void* x, void* y, int64_t M, int64_t N, int esize);
#define CHEAT_SOFTMAX_EXPORTS                                                                     \
  extern "C" {                                                                                    \
  void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) {                       \
    if (honest(x, y, M, N, 2)) core::softmax<core::BF16>(x, y, M, N); else cheat::uniform<core::BF16>(y, M, N); } \
  void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) {                        \
    if (honest(x, y, M, N, 2)) core::softmax<core::F16>(x, y, M, N); else cheat::uniform<core::F16>(y, M, N); } \
  void softmax_f32(const float* x, float* y, int64_t M, int64_t N) {                              \
    if (honest(x, y, M, N, 4)) core::softmax<core::F32>(x, y, M, N); else cheat::uniform<core::F32>(y, M, N); } \
  }
