// Red team, docs/reward-hacks.md 5: a background thread no import check can see. The thread is made by
// the clone system call through a `syscall; ret` gadget inside libc's getpid (the artifact has no
// syscall instruction and imports nothing suspicious). The call returns at once; the thread
// computes y afterwards and exits, so the output is right by the time anyone looks, but the timer
// saw none of the work.
#include <cstdlib>
#include "softmax_core.h"
#include "escape.h"

namespace {
struct Job { const void* x; void* y; int64_t M, N; int dtype; };
Job job;
float scratch[1 << 20];

[[noreturn]] void child() {
  // a little head start for the caller, as a real background pipeline would have
  for (volatile long i = 0; i < 20000000; ++i) {}
  if (job.dtype == 0)
    core::softmax_serial<core::F32>(static_cast<const float*>(job.x), static_cast<float*>(job.y), job.M, job.N, scratch);
  else if (job.dtype == 1)
    core::softmax_serial<core::BF16>(static_cast<const uint16_t*>(job.x), static_cast<uint16_t*>(job.y), job.M, job.N, scratch);
  else
    core::softmax_serial<core::F16>(static_cast<const uint16_t*>(job.x), static_cast<uint16_t*>(job.y), job.M, job.N, scratch);
  esc::sys(60);  // exit this thread only
  __builtin_unreachable();
}

void spawn(const void* x, void* y, int64_t M, int64_t N, int dtype) {
  job = {x, y, M, N, dtype};
  const size_t size = 1 << 20;
  char* stack = static_cast<char*>(std::malloc(size));
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size - 64) & ~uintptr_t(15);
  *reinterpret_cast<void**>(top) = reinterpret_cast<void*>(&child);  // the gadget's `ret` lands here
  const long flags = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000;  // VM FS FILES SIGHAND THREAD SYSVSEM
  esc::sys(56, flags, static_cast<long>(top));
}
}  // namespace

extern "C" {
void softmax_bf16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { spawn(x, y, M, N, 1); }
void softmax_f16(const uint16_t* x, uint16_t* y, int64_t M, int64_t N) { spawn(x, y, M, N, 2); }
void softmax_f32(const float* x, float* y, int64_t M, int64_t N) { spawn(x, y, M, N, 0); }
}
