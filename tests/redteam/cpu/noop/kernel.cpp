// Red team, docs/reward-hacks.md 15 (ghost replay) and 2 (unwritten output): a kernel that does nothing.
// If the harness compared the reference with itself, or left the output holding a previous
// result, this would pass.
#include <cstdint>
extern "C" {
void softmax_bf16(const uint16_t*, uint16_t*, int64_t, int64_t) {}
void softmax_f16(const uint16_t*, uint16_t*, int64_t, int64_t) {}
void softmax_f32(const float*, float*, int64_t, int64_t) {}
}
