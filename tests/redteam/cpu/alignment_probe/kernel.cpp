// Red team, class "judge distinguishable": probe pointer alignment. The old host arena put the
// first buffer of every launch at offset 0 of a fresh mapping, so x was always page-aligned,
// which a caller's allocator rarely gives. Honest only when x is page-aligned.
#include <cstdint>
#include "cheat.h"

static bool honest(const void* x, void*, int64_t, int64_t, int) {
  return (reinterpret_cast<uintptr_t>(x) & 4095u) == 0;
}

CHEAT_SOFTMAX_EXPORTS
