"""The host runtime runs an artifact in a process of its own (regen/runtimes/cpu.py and
host_exec.py): calls, staging, crashes, late writes, threads and the Python tripwire, on shared
objects built here with g++ (no regen toolchain checks in the way)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from types import SimpleNamespace as NS

import pytest

torch = pytest.importorskip("torch", reason="the host runtime stages torch tensors")

from regen.runtimes.cpu import ArtifactDied, ControlChannelForged, PythonAPIUsed, Runtime  # noqa: E402

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
#include <sys/syscall.h>
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
void escapes(int64_t* out) {  // what the seccomp filter refuses (and one thing it allows)
  out[0] = open("/tmp/regen-escape-test", O_WRONLY | O_CREAT, 0644) < 0 ? errno : 0;
  out[1] = fork() < 0 ? errno : 0;
  out[2] = ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr) < 0 ? errno : 0;
  out[3] = kill(getppid(), 0) < 0 ? errno : 0;
  out[4] = syscall(SYS_process_vm_readv, getppid(), nullptr, 0, nullptr, 0, 0) < 0 ? errno : 0;
  int fd = open("/proc/self/status", O_RDONLY);
  out[5] = fd < 0 ? errno : 0;
  out[6] = setsid() < 0 ? errno : 0;
  out[7] = prctl(PR_SET_PDEATHSIG, 0) < 0 ? errno : 0;
  if (fd >= 0) close(fd);
}
void reply_early(float* y) {  // a forged "ok" on the control socket, then the real work
  for (int fd = 3; fd < 64; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) write(fd, "ok\n", 3);
  }
  usleep(100000);
  y[0] = 1.0f;
}
}
"""


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    d = tmp_path_factory.mktemp("host")
    (d / "k.cpp").write_text(SOURCE)
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(d / "k.so"),
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


def test_the_artifacts_process_cannot_reach_past_itself(artifact):
    rt = Runtime(artifact)
    if rt.confinement != "seccomp":
        pytest.skip(f"no seccomp filter here: {rt.confinement}")
    out = torch.full((8,), -1, dtype=torch.int64)
    rt.launch([call("escapes", "out")], {"out": out})
    eperm = 1
    assert out.tolist() == [eperm, eperm, eperm, eperm, eperm, 0, eperm, eperm], out.tolist()
    assert not os.path.exists("/tmp/regen-escape-test")
    rt.close()


def test_a_forged_early_reply_is_caught(artifact):
    rt = Runtime(artifact)
    timer = rt.timer()
    timer.start()
    with pytest.raises(ControlChannelForged) as err:
        rt.launch([call("reply_early", "y")], {"y": torch.zeros(4)})
    assert err.value.guard == "result-integrity"
    assert rt.call_s == 0.0  # the call never completed as a call
    rt.close()


def test_an_unknown_kernel_is_a_clear_error_and_the_process_lives_on(artifact):
    rt = Runtime(artifact)
    with pytest.raises(RuntimeError, match="not exported"):
        rt.launch([call("nope")], {})
    y = torch.zeros(4)
    rt.launch([call("axpy", "y", "y", ("int64", 4), ("float32", 1.0))], {"y": y})
    rt.close()
