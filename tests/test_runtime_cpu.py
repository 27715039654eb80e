"""The host runtime runs an artifact in a process of its own (regen/runtimes/cpu.py and
host_exec.py): calls, staging, crashes, late writes, threads and the Python tripwire, on shared
objects built here with g++ (no regen toolchain checks in the way)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch", reason="the host runtime stages torch tensors")

from regen.judge.guards import Rejected  # noqa: E402
from regen.judge.watch import LaunchWatch  # noqa: E402
from regen.runtimes.cpu import (  # noqa: E402
    ArtifactDied, ControlChannelForged, PythonAPIUsed, Runtime, SandboxViolation)

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None,
    reason="g++ (the host column's compiler) is not installed: these tests build their shared objects with it")

SOURCE = r"""
#include <dlfcn.h>
#include <csignal>
#include <pthread.h>
#include <cerrno>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sched.h>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <unistd.h>
#include <cstdint>
extern "C" {
void axpy(const float* x, float* y, int64_t n, float a) { for (int64_t i = 0; i < n; ++i) y[i] += a * x[i]; }
void segfault(float*) { *(volatile int*)nullptr = 1; }
static float* later_target;
static void* later(void*) { usleep(50000); later_target[0] = 42.0f; return nullptr; }
void write_later(float* y) { later_target = y; pthread_t t; pthread_create(&t, nullptr, later, nullptr); pthread_detach(t); }
void run_python(float*) {  // ctypes released the GIL for this call: take it, as a cheat would
  auto ensure = (int (*)())dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
  auto release = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
  auto run = (int (*)(const char*))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
  if (!ensure || !release || !run) return;
  int state = ensure();
  run("x = 1");
  release(state);
}
void pid_into(int64_t* out) { out[0] = getpid(); }
static void on_alarm(int) {}
void escape(int64_t* which) {  // one thing the allowlist refuses (host_exec.py): the process dies
  siginfo_t info{};
  info.si_code = -1;  // SI_QUEUE
  switch (which[0]) {
    case 0: open("/tmp/regen-escape-test", O_WRONLY | O_CREAT, 0644); break;
    case 1: fork(); break;
    case 2: ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr); break;
    case 3: kill(getppid(), 0); break;
    case 4: syscall(SYS_rt_sigqueueinfo, getppid(), 0, &info); break;  // the one a denylist forgot
    case 5: kill(-1, 0); break;
    case 6: kill(0, 0); break;
    case 7: syscall(SYS_tgkill, getppid(), getppid(), 0); break;
    case 8: syscall(SYS_tkill, getppid(), 0); break;
    case 9: syscall(SYS_pidfd_open, getppid(), 0); break;
    case 10: signal(SIGALRM, on_alarm); break;
    case 11: setsid(); break;
    case 12: prctl(PR_SET_PDEATHSIG, 0); break;
    case 13: socket(AF_INET, SOCK_STREAM, 0); break;
    case 14: syscall(SYS_process_vm_readv, getppid(), nullptr, 0, nullptr, 0, 0); break;
    case 15: fcntl(1, F_SETOWN, getppid()); break;  // SIGIO to another process
    case 16: mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); break;
    case 17: { struct itimerval t{}; t.it_value.tv_usec = 1000; setitimer(ITIMER_REAL, &t, nullptr); break; }
  }
}
void allowed(int64_t* out) {  // what an honest kernel and its runtime do: no verdict, no death
  int fd = open("/proc/self/status", O_RDONLY);  // after the load: refused, not fatal
  out[0] = fd < 0 ? errno : 0;
  out[1] = kill(getpid(), 0) < 0 ? errno : 0;
  cpu_set_t set;
  out[2] = sched_getaffinity(0, sizeof set, &set) < 0 ? errno : 0;
  struct timespec ts{0, 1000};
  out[3] = nanosleep(&ts, nullptr) < 0 ? errno : 0;
  volatile char* big = static_cast<volatile char*>(malloc(256 << 20));
  for (size_t i = 0; i < (256u << 20); i += 4096) big[i] = 1;
  free(const_cast<char*>(big));
  out[4] = syscall(435, nullptr, 0) < 0 ? errno : 0;  // clone3: ENOSYS, glibc falls back to clone
  int64_t sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (int i = 0; i < 1000; ++i) sum += i;
  out[5] = sum;
}
void omp_late(float* y, int64_t n) {  // the pool starts only on a large enough launch
#pragma omp parallel for if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * 2.0f + 1.0f;
}
static void* sleeper(void* y) { sleep(5); static_cast<float*>(y)[0] = 42.0f; return nullptr; }
void sleep_then_write(float* y) { pthread_t t; pthread_create(&t, nullptr, sleeper, y); pthread_detach(t); }
static void* spinner(void*) { for (volatile long i = 0; i < 2000000000L; ++i) {} return nullptr; }
void spin_after(float*) { pthread_t t; pthread_create(&t, nullptr, spinner, nullptr); pthread_detach(t); }
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void* never(void*) { pthread_mutex_lock(&mu); for (;;) pthread_cond_wait(&cv, &mu); }
void park_own_thread(float*) { pthread_t t; pthread_create(&t, nullptr, never, nullptr); pthread_detach(t); usleep(20000); }
static void forge_ok() {  // "ok" on every socket, as the interpreter replies
  for (int fd = 3; fd < 4096; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) send(fd, "ok\n", 3, 0);
  }
}
void reply_early(float* y) { forge_ok(); usleep(1000000); y[0] = 1.0f; }  // then the real work
void reply_early_long(float* y) { forge_ok(); usleep(4000000); y[0] = 1.0f; }
}
"""


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("host")
    (d / "k.cpp").write_text(SOURCE)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-pthread", "-fopenmp", "-o", str(d / "k.so"),
                    str(d / "k.cpp"), "-ldl"], check=True)
    return str(d / "k.so")


def call(kernel, *args):
    return NS(kernel=kernel, args=[NS(kind="tensor", value=a) if isinstance(a, str)
                                   else NS(kind=a[0], value=a[1]) for a in args])


def test_calls_run_in_another_process_and_results_come_back(artifact):
    rt = Runtime(artifact)
    x, y = torch.randn(1000), torch.ones(1000)
    want = y + 2 * x
    pid = torch.zeros(1, dtype=torch.int64)
    rt.launch([call("axpy", "x", "y", ("int64", 1000), ("float32", 2.0)), call("pid_into", "pid")],
              {"x": x, "y": y, "pid": pid})
    assert torch.allclose(y, want)
    assert int(pid) == rt.proc.pid != os.getpid()
    assert rt.late_writes() == []
    # the same tensor passed twice is staged once (in-place arguments keep their aliasing)
    rt.launch([call("axpy", "y", "y", ("int64", 1000), ("float32", 1.0))], {"y": y})
    assert torch.allclose(y, 2 * want)
    rt.close()


def test_timer_counts_the_call_not_the_staging(artifact):
    rt = Runtime(artifact)
    n = 1 << 24  # 64 MiB per buffer: staging them takes far longer than one empty round trip
    x, y = torch.randn(n), torch.zeros(n)
    rt.launch([call("axpy", "x", "y", ("int64", n), ("float32", 1.0))], {"x": x, "y": y})  # map pages
    timer = rt.timer()
    timer.start()
    rt.launch([call("axpy", "x", "y", ("int64", n), ("float32", 1.0))], {"x": x, "y": y})
    timer.stop()
    assert torch.equal(y, 2 * x)
    assert timer.seconds() >= rt.empty_round_trip_s
    assert timer.stall_seconds() > 0  # the judge's own copies, taken out of the wall time
    rt.close()


def test_a_crash_ends_the_process_and_is_reported(artifact):
    rt = Runtime(artifact)
    with pytest.raises(ArtifactDied, match="SIGSEGV") as err:
        rt.launch([call("segfault", "y")], {"y": torch.zeros(4)})
    assert err.value.guard == "crash"


def test_a_background_write_after_the_reply_is_a_late_write(artifact):
    rt = Runtime(artifact)
    y = torch.zeros(16)
    rt.launch([call("write_later", "y")], {"y": y})
    assert rt.late_writes() == []  # not yet: the thread sleeps 50 ms
    assert len(rt.thread_ids() - rt.threads_before_load) >= 1  # and it is counted where it runs
    time.sleep(0.2)
    assert rt.late_writes() == ["y"]
    assert float(y[0]) == 0.0  # the judge's tensor kept what came back with the reply
    rt.close()


def test_reaching_the_interpreter_trips_the_python_api_guard(artifact):
    rt = Runtime(artifact)
    with pytest.raises(PythonAPIUsed) as err:
        rt.launch([call("run_python", "y")], {"y": torch.zeros(4)})
    assert err.value.guard == "python-api"


def confined(rt):
    if rt.confinement != "seccomp":
        pytest.skip(f"no seccomp filter here: {rt.confinement}")


ESCAPES = ["open for writing", "fork", "ptrace the judge", "kill the judge",
           "rt_sigqueueinfo to the judge", "kill every process", "kill the process group",
           "tgkill the judge", "tkill", "pidfd_open", "install a signal handler", "setsid",
           "change the death signal", "socket", "process_vm_readv", "SIGIO owner",
           "executable memory after the load", "interval timer"]


@pytest.mark.parametrize("which", range(len(ESCAPES)), ids=ESCAPES)
def test_a_call_outside_the_allowlist_kills_only_the_artifacts_process(artifact, which):
    """Each of these kills the artifact's process (SIGSYS, the `sandbox` guard); the judge (this
    process, the artifact's parent) lives on and the next Runtime works."""
    rt = Runtime(artifact)
    confined(rt)
    with pytest.raises(SandboxViolation) as err:
        rt.launch([call("escape", "which")], {"which": torch.tensor([which], dtype=torch.int64)})
    assert err.value.guard == "sandbox"
    assert not os.path.exists("/tmp/regen-escape-test")
    again = Runtime(artifact)
    y = torch.zeros(4)
    again.launch([call("axpy", "y", "y", ("int64", 4), ("float32", 1.0))], {"y": y})
    again.close()


def test_what_an_honest_kernel_needs_is_allowed(artifact):
    """Memory, threads (OpenMP), clocks and sleeps, its own signals and affinity; files are
    refused once the artifact is loaded (EPERM, which glibc's probes survive); clone3 answers
    ENOSYS so glibc falls back to clone with thread flags."""
    rt = Runtime(artifact)
    confined(rt)
    out = torch.full((6,), -1, dtype=torch.int64)
    rt.launch([call("allowed", "out")], {"out": out})
    assert out.tolist() == [errno.EPERM, 0, 0, 0, errno.ENOSYS, sum(range(1000))], out.tolist()
    rt.close()


def watched(artifact):
    rt = Runtime(artifact)
    watch = LaunchWatch(Runtime, host_code=True, omp_pool=1)
    watch.loaded(rt)
    return rt, watch


def test_an_openmp_pool_started_on_a_later_launch_is_honest(artifact):
    """`omp parallel for if (n > 65536)`: small launches run serially, a larger one after them
    starts the pool, which then idles in libgomp between calls."""
    rt, watch = watched(artifact)
    for n in (1000, 5000, 1 << 18, 1000, 1 << 18):
        y = torch.ones(n)
        rt.launch([call("omp_late", "y", ("int64", n))], {"y": y})
        watch.after_launch()
        assert torch.equal(y, torch.full((n,), 3.0))
    assert len(rt.thread_ids()) > 1 or os.cpu_count() == 1  # the pool exists, and passed
    assert watch.stray_threads() is None
    rt.close()


@pytest.mark.parametrize("kernel,why", [
    ("sleep_then_write", "sleeping"),
    ("spin_after", "of CPU after the call returned"),
    ("park_own_thread", "not OpenMP's pool"),
])
def test_a_thread_that_sleeps_after_the_call_is_not_idle(artifact, kernel, why):
    """A thread of the artifact's own after the call: sleeping, computing, or parked outside
    OpenMP's runtime (it never joins) is refused by the threads guard, whatever the pool size."""
    rt, watch = watched(artifact)
    with pytest.raises(Rejected, match=why) as err:
        rt.launch([call(kernel, "y")], {"y": torch.zeros(4)})
        watch.after_launch()
    assert err.value.guard == "threads"
    rt.proc.kill()


@pytest.mark.parametrize("kernel,why", [
    ("reply_early", "a reply the judge did not ask for"),       # back at its socket after 1 s
    ("reply_early_long", "stayed blocked in system call"),      # still sleeping 2 s later
])
def test_a_forged_early_reply_is_caught(artifact, kernel, why):
    """A reply written on the control socket before the work is done, then the work: the call
    ends only when the interpreter is back at its socket, so the early reply is found (or the
    process that never gets back is refused), never timed as the call."""
    rt = Runtime(artifact)
    timer = rt.timer()
    timer.start()
    with pytest.raises(ControlChannelForged) as err:
        rt.launch([call(kernel, "y")], {"y": torch.zeros(4)})
    assert err.value.guard == "result-integrity"
    assert why in str(err.value)
    assert rt.call_s == 0.0  # the call never completed as a call
    rt.close()


def test_an_unknown_kernel_is_a_clear_error_and_the_process_lives_on(artifact):
    rt = Runtime(artifact)
    with pytest.raises(RuntimeError, match="not exported"):
        rt.launch([call("nope")], {})
    y = torch.zeros(4)
    rt.launch([call("axpy", "y", "y", ("int64", 4), ("float32", 1.0))], {"y": y})
    rt.close()
