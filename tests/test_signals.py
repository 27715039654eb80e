"""A signal to regen takes its whole process tree down: the judge's child runs in a session of its
own (so a terminal's Ctrl-C misses it) with the artifact's process in its group, and only the
timeout used to kill them. Real CLI, real child, a cpu kernel that hangs on demand. And a reader
of stdout that goes away ends regen quietly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SCALE_RECIPE, make_project, regen, write_handoff

# Honest when accepted; spins forever in `regen verify` when REGEN_TEST_HANG is set (the artifact's
# process inherits regen's environment through the child).
HANGING_CPP = """\
#include <cstdint>
#include <cstdlib>
static volatile int never = 0;
extern "C" void scale_f32(const float* x, float* y, int64_t M, int64_t N, float alpha) {
  if (std::getenv("REGEN_TEST_HANG")) while (!never) {}
  for (int64_t i = 0; i < M * N; ++i) y[i] = alpha * x[i];
}
"""


@pytest.fixture(scope="module")
def accepted(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("signals") / "proj")
    folder = write_handoff(root / "handoffs" / "scale@cpu", "scale", "cpu", HANGING_CPP,
                           SCALE_RECIPE, root)
    regen(root, "accept", str(folder), check=True)
    return root


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _tree(pid: int) -> set[int]:
    kids, seen, todo = _children(), set(), [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _verify_until_hanging(root: Path):
    env = dict(os.environ, REGEN_TEST_HANG="1", REGEN_LOCAL_CACHE=str(root / ".local-cache"))
    proc = subprocess.Popen([sys.executable, "-m", "regen.cli", "--root", str(root), "verify",
                             "-t", "cpu", "--timeout", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # regen -> judge child -> the artifact's process
        tree = _tree(proc.pid)
        if any("host_exec.py" in _cmdline(p) for p in tree):
            time.sleep(2)  # the artifact is loaded and spinning in its launch
            return proc, _tree(proc.pid)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"regen verify never reached the artifact's process:\n{out}\n{err}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_kills_the_judge_and_the_artifact_and_exits_128_plus_it(accepted, sig):
    proc, tree = _verify_until_hanging(accepted)
    assert any("regen.judge.child" in _cmdline(p) for p in tree), tree
    started = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30  # not the 300 s timeout
    assert proc.returncode == 128 + sig, (out, err)
    assert err.strip().splitlines() == [
        f"regen: stopped by {sig.name}: the judge and the artifacts' processes were killed"], err
    deadline = time.monotonic() + 10
    while any(_running(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in tree if _running(p)], "a process of regen's tree outlived it"


def test_a_stopped_verify_records_no_verdict(accepted):
    """The interrupted run is not a crash of the artifact: nothing is written to the cache."""
    before = {p: p.stat().st_mtime_ns for p in (accepted / "cache").rglob("*") if p.is_file()}
    proc, _ = _verify_until_hanging(accepted)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    after = {p: p.stat().st_mtime_ns for p in (accepted / "cache").rglob("*") if p.is_file()}
    assert after == before


def test_a_reader_that_goes_away_ends_regen_quietly(project):
    """`regen status --json | head -1`: no BrokenPipeError traceback, the exit status of SIGPIPE."""
    env = dict(os.environ, REGEN_LOCAL_CACHE=str(project / ".local-cache"))
    proc = subprocess.Popen([sys.executable, "-m", "regen.cli", "--root", str(project), "status",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before regen writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 128 + signal.SIGPIPE
    assert err == ""


def test_a_regen_killed_outright_takes_the_judge_and_the_artifact_with_it(tmp_path):
    """SIGKILL runs no handler: the judge's child dies with regen by the kernel's death signal."""
    import signal as sig
    import subprocess
    import sys
    import time

    from conftest import SCALE_RECIPE, make_project, write_handoff

    root = make_project(tmp_path / "proj")
    spin = ('#include <cstdint>\nextern "C" void scale_f32(const float* x, float* y, int64_t M, '
            'int64_t N, float alpha) {\n  volatile double s = 0; for (long i = 0; i < 40000000000L; '
            '++i) s += i;\n  for (int64_t i = 0; i < M * N; ++i) y[i] = alpha * x[i];\n}\n')
    folder = write_handoff(tmp_path / "h", "scale", "cpu", spin, SCALE_RECIPE, root)
    proc = subprocess.Popen([sys.executable, "-m", "regen.cli", "--root", str(root), "accept",
                             str(folder)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    children = []
    while time.time() < deadline and not children:
        time.sleep(0.5)
        out = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "regen.judge.child"],
                             capture_output=True, text=True)
        children = [int(p) for p in out.stdout.split()]
    assert children, "the judge's child never started"
    proc.send_signal(sig.SIGKILL)
    proc.wait()
    deadline = time.time() + 20
    while time.time() < deadline:
        alive = [p for p in children if _alive(p)]
        if not alive:
            break
        time.sleep(0.2)
    assert not alive, f"judge child(ren) {alive} outlived a killed regen"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
