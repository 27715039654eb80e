// Red team, docs/reward-hacks.md 5: a background thread through C11 threads (thrd_create), an API
// the compile-time import list did not name: it compiles, and is refused when loaded.
#include "softmax_core.h"

extern "C" int thrd_create(unsigned long* thr, int (*func)(void*), void* arg);
extern "C" int thrd_detach(unsigned long thr);

struct Job { const float* x; float* y; int64_t M, N; };
static Job job;

static int work(void*) {
  core::softmax<core::F32>(job.x, job.y, job.M, job.N);
  return 0;
}

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { core::softmax<core::BF16>(x, y, M, N); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { core::softmax<core::F16>(x, y, M, N); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) {
  job = {x, y, M, N};
  unsigned long t;
  if (thrd_create(&t, work, nullptr) == 0) thrd_detach(t);
}
}
