// Red team, class "shape coverage" (docs/reward-hacks.md 10): a fast wrong answer on exactly the
// benchmark shape (768 x 4096), honest everywhere else, so every correctness case and hidden
// variant passes and only the timed shape is wrong.
#include "cheat.h"

static bool honest(const void*, void*, int64_t M, int64_t N, int) { return !(M == 768 && N == 4096); }

CHEAT_SOFTMAX_EXPORTS
