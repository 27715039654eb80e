// Red team, class "timed iterations" (docs/reward-hacks.md 14): predict a fixed timed schedule.
// The benchmark case is verified by two runs, warmed up twice and timed 16 times rotating three
// input sets; a judge that checks only the last output of each set looks at timed iterations 14,
// 15 and 16. The kernel computes on those calls (and on every correctness call) and returns at
// once on the other 13: about 5x the real speed, every checked output right.
#include <map>
#include <utility>
#include "softmax_core.h"

namespace {
std::map<std::pair<int64_t, int64_t>, long> calls;
bool work(int64_t M, int64_t N) {
  if (M * N < 768 * 4096) return true;         // correctness cases: always honest
  long timed = calls[{M, N}]++ - 2 - 2;        // after 2 verification runs and 2 warmups
  return timed < 0 || timed >= 13;
}
}  // namespace

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::BF16>(x, y, M, N); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::F16>(x, y, M, N); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) { if (work(M, N)) core::softmax<core::F32>(x, y, M, N); }
}
