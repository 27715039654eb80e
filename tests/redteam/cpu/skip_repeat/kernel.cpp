// Red team, docs/reward-hacks.md 14 (near-zero time): compute once per (x, y, shape, first elements of
// x), and return at once when they come back, as in a timed loop that rotates a few input sets.
// The output still holds the earlier result, and each timed call takes nanoseconds.
#include <algorithm>
#include <set>
#include <tuple>
#include "softmax_core.h"

namespace {
using Key = std::tuple<const void*, const void*, int64_t, int64_t, uint64_t, uint64_t>;
std::set<Key> seen;

bool repeat(const void* x, const void* y, int64_t M, int64_t N, size_t esize) {
  uint64_t s[2] = {0, 0};
  std::memcpy(s, x, std::min<size_t>(sizeof s, esize * M * N));
  return !seen.insert(Key{x, y, M, N, s[0], s[1]}).second;
}
}  // namespace

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (!repeat(x, y, M, N, 2)) core::softmax<core::BF16>(x, y, M, N); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { if (!repeat(x, y, M, N, 2)) core::softmax<core::F16>(x, y, M, N); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) { if (!repeat(x, y, M, N, 4)) core::softmax<core::F32>(x, y, M, N); }
}
