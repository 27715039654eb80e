// Red team, class "timed iterations" (docs/reward-hacks.md 14): count the calls per shape; the
// first six of a shape are honest (every correctness run comes first), after that only every
// 16th call does the work and the others return at once, so a timed loop that looks only at the
// last output of each input set would report ~16x the real speed.
#include <map>
#include <utility>
#include "softmax_core.h"

namespace {
std::map<std::pair<int64_t, int64_t>, long> calls;
bool work(int64_t M, int64_t N) {
  long n = calls[{M, N}]++;
  return n < 6 || n % 16 == 15;
}
}  // namespace

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::BF16>(x, y, M, N); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::F16>(x, y, M, N); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::F32>(x, y, M, N); }
}
