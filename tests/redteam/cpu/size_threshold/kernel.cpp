// Red team, class "shape coverage" (docs/reward-hacks.md 10): correct only below a size. Every
// listed correctness case and its hidden variant is small; above 2^21 elements (the benchmark
// case) the kernel writes a uniform row without reading x.
#include "cheat.h"

static bool honest(const void*, void*, int64_t M, int64_t N, int) { return M * N <= (int64_t(1) << 21); }

CHEAT_SOFTMAX_EXPORTS
