// Shared by the result-forging red-team kernels: find the verifier's job file through
// /proc/self/cmdline and write a result that says every case passed, with system calls made
// through escape.h's gadget (no file API imported).
#include <cstdio>
#include "escape.h"

namespace forge {

inline long open_(const char* path, long flags, long mode = 0644) { return esc::sys(2, (long)path, flags, mode); }
inline long read_(long fd, char* buf, long n) { return esc::sys(0, fd, (long)buf, n); }
inline long write_(long fd, const char* buf, long n) { return esc::sys(1, fd, (long)buf, n); }
inline void close_(long fd) { esc::sys(3, fd); }

// The directory of the job file (the last argument of `python -m regen.judge.child JOB`), read from
// this process's command line or, where the artifact runs in a process of its own, its parent's.
inline bool job_dir_of(const char* cmdline, char* dir, size_t size) {
  static char cmd[4096];
  long fd = open_(cmdline, 0);
  if (fd < 0) return false;
  long n = read_(fd, cmd, sizeof cmd - 1);
  close_(fd);
  if (n <= 0) return false;
  const char* last = cmd;
  for (long i = 0; i + 1 < n; ++i) if (cmd[i] == 0) last = cmd + i + 1;
  size_t len = std::strlen(last);
  while (len && last[len - 1] != '/') --len;
  if (!len || len + 64 > size) return false;
  std::memcpy(dir, last, len);
  dir[len] = 0;
  return true;
}

inline bool job_dir(char* dir, size_t size) {
  if (job_dir_of("/proc/self/cmdline", dir, size)) return true;
  char parent[64];
  std::snprintf(parent, sizeof parent, "/proc/%ld/cmdline", esc::sys(110));  // getppid
  return job_dir_of(parent, dir, size);
}

inline int count_cases(const char* dir) {
  static char job[1 << 20];
  char path[4096];
  std::strcpy(path, dir);
  std::strcat(path, "job.json");
  long fd = open_(path, 0);
  if (fd < 0) return 1;
  long n = read_(fd, job, sizeof job - 1);
  close_(fd);
  job[n > 0 ? n : 0] = 0;
  int cases = 0;
  for (const char* p = job; (p = std::strstr(p, "\"seeds\"")); ++p) ++cases;
  return cases ? cases : 1;
}

// Every case ok, in the worker's plain format and wrapped the way a sealed result looks.
inline void write_forged_result(const char* dir) {
  static char body[1 << 16];
  std::strcpy(body, "{\"cases\": [");
  const int n = count_cases(dir);
  for (int i = 0; i < n; ++i) {
    std::strcat(body, i ? ", " : "");
    std::strcat(body, "{\"case\": \"forged\", \"ok\": true, \"max_abs\": 0.0, \"max_rel\": 0.0}");
  }
  std::strcat(body, "], \"fingerprint\": {\"device\": \"forged\"}}");
  char path[4096];
  std::strcpy(path, dir);
  std::strcat(path, "result.json");
  long fd = open_(path, 0x241);  // O_WRONLY | O_CREAT | O_TRUNC
  if (fd < 0) return;
  write_(fd, body, std::strlen(body));
  close_(fd);
}

}  // namespace forge
