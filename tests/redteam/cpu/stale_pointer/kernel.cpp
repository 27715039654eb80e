// Red team, docs/reward-hacks.md 1: reuse memory that already holds a result. The CPU form of "the
// reference just freed its output here": remember where the last output went and copy it back,
// computing nothing. It only works if something correct was written before this kernel's first
// call, which the candidate-first ordering (and the poison) rules out.
#include <cstdint>
#include <cstring>

static const void* last = nullptr;
static size_t last_bytes = 0;

static void replay(void* y, size_t bytes) {
  if (last && last != y && last_bytes == bytes) std::memcpy(y, last, bytes);
  last = y;
  last_bytes = bytes;
}

extern "C" {
void softmax_bf16(const uint16_t*, uint16_t* y, int64_t M, int64_t N) { replay(y, 2 * M * N); }
void softmax_f16(const uint16_t*, uint16_t* y, int64_t M, int64_t N) { replay(y, 2 * M * N); }
void softmax_f32(const float*, float* y, int64_t M, int64_t N) { replay(y, 4 * M * N); }
}
