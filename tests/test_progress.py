"""The progress display (regen/progress.py): a live line on a terminal, redrawn a few times a second
once something has run for longer than a second; plain lines elsewhere; NO_COLOR respected; safe
to call from the build's worker threads. The terminal cases run under a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from conftest import REPO, SCALE_CPP, SCALE_RECIPE, write_handoff
from regen.progress import Progress


def result(label: str, status: str = "ok"):
    return SimpleNamespace(node=SimpleNamespace(label=label), status=status)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_live_line_waits_a_second_then_names_the_node_stage_and_elapsed_time():
    clock = Clock()
    p = Progress(io.StringIO(), total=3, live=False, clock=clock)
    p.stage("rmsnorm@h200", "compile")
    clock.t += 0.5
    assert p.line() is None                               # quick work shows nothing
    clock.t += 0.7
    assert p.line() == "[0/3] rmsnorm@h200 compile 1.2 s"
    p.stage("rmsnorm@h200", "verify")
    clock.t += 2.0
    p.stage("softmax@h200", "compile")
    assert p.line() == "[0/3] rmsnorm@h200 verify 3.2 s (verify 2.0 s), 1 more running"


def test_a_node_that_never_reports_a_stage_is_timed_from_the_previous_result():
    clock = Clock()
    out = io.StringIO()
    p = Progress(out, total=2, live=False, clock=clock)
    clock.t += 1.5
    assert p.line() == "[0/2] working 1.5 s"
    p.done(result("scale@cpu"), 0, 2)
    clock.t += 0.2
    p.done(result("twice@cpu"), 1, 2)
    assert out.getvalue() == "[1/2] scale@cpu: ok (1.5 s)\n"   # the quick one leaves no line
    assert p.line() is None                                    # all done


def test_not_a_terminal_gets_plain_lines_for_slow_or_unsuccessful_nodes_only():
    clock = Clock()
    out = io.StringIO()
    p = Progress(out, total=3, clock=clock)                 # StringIO is not a terminal
    assert not p.live and not p.colour
    p.stage("a@cpu", "compile")
    p.done(result("a@cpu"), 0, 3)
    p.stage("b@cpu", "verify")
    p.done(result("b@cpu", "failed"), 1, 3)
    p.stage("c@cpu", "verify")
    clock.t += 4.0
    p.done(result("c@cpu"), 2, 3)
    p.close()
    assert out.getvalue() == "[2/3] b@cpu: failed (0.0 s)\n[3/3] c@cpu: ok (4.0 s)\n"


def test_a_failed_node_says_why_on_its_line_so_a_run_cut_short_still_tells():
    out = io.StringIO()
    p = Progress(out, total=1, clock=Clock())
    failed = SimpleNamespace(node=SimpleNamespace(label="gemv@h200"), status="failed",
                             summary="failed on NVIDIA H200: case B1xN2048:bfloat16:\n  floor")
    p.done(failed, 0, 1)
    p.close()
    assert out.getvalue() == ("[1/1] gemv@h200: failed (0.0 s): failed on NVIDIA H200: case "
                              "B1xN2048:bfloat16: floor\n")


def test_lines_off_for_json_leaves_stderr_empty_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(out, total=1, lines=False)
    p.stage("a@cpu", "verify")
    p.done(result("a@cpu", "failed"), 0, 1)
    p.close()
    assert out.getvalue() == ""


class Interleaving(io.StringIO):
    """A stream that lets other threads run in the middle of every write, as a slow terminal does."""

    def write(self, text):
        for ch in text:
            super().write(ch)
            time.sleep(0)
        return len(text)


def test_stage_and_done_from_many_threads_at_once():
    out = Interleaving()
    n = 64
    p = Progress(out, total=n, live=True, colour=False, min_seconds=0.0, refresh_s=0.0)
    barrier = threading.Barrier(8)

    def worker(w):
        barrier.wait()
        for i in range(w, n, 8):
            label = f"k{i}@cpu"
            for stage in ("plan", "compile", "verify", "store"):
                p.stage(label, stage)
            p.done(result(label), i, n)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p.close()
    assert p.finished == n and p.line() is None
    printed = [line.rsplit("\r\x1b[K", 1)[-1] for line in out.getvalue().split("\n")
               if "ok (" in line]
    assert len(printed) == n                              # every line whole, none interleaved
    assert sorted(int(line.split("/")[0].lstrip("[")) for line in printed) == list(range(1, n + 1))


def test_redraws_are_throttled_however_often_stages_change():
    clock = Clock()
    out = io.StringIO()
    p = Progress(out, total=1, live=True, colour=False, refresh_s=0.25, clock=clock)
    p.stage("rmsnorm@h200", "compile")
    clock.t += 1.5
    for i in range(200):
        p.stage("rmsnorm@h200", ("compile", "verify")[i % 2])
    assert out.getvalue().count("\r") == 1
    clock.t += 0.3
    p.stage("rmsnorm@h200", "verify")
    p.close()
    assert out.getvalue().count("rmsnorm@h200") == 2
    assert out.getvalue().endswith("\r\x1b[K")             # closing takes the line off


CHILD = """
import sys, threading, time
from types import SimpleNamespace
from regen.progress import Progress

def result(label, status):
    return SimpleNamespace(node=SimpleNamespace(label=label), status=status)

with Progress(total=2, min_seconds=0.3, refresh_s=0.05) as p:
    p.stage("rmsnorm@h200", "compile")
    time.sleep(0.2)
    p.stage("rmsnorm@h200", "verify")
    t = threading.Thread(target=p.stage, args=("softmax@h200", "compile"))
    t.start(); t.join()
    time.sleep(0.6)
    p.done(result("rmsnorm@h200", "ok"), 0, 2)
    p.done(result("softmax@h200", "failed"), 1, 2)
print("finished", file=sys.stderr)
"""


def _run_in_pty(argv, env_extra=None, timeout=120.0, cwd=None):
    """Run argv with stderr on a pseudo-terminal; (exit code, stdout, what the terminal got)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    env.update(env_extra or {})
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 4096)
            except OSError:                               # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read().decode()
    proc.wait(timeout=10)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def test_on_a_terminal_a_live_line_is_redrawn_and_results_are_coloured():
    rc, _, tty = _run_in_pty([sys.executable, "-c", CHILD])
    assert rc == 0, tty
    assert "\r" in tty and "\x1b[K" in tty                 # redrawn in place
    assert "rmsnorm@h200 verify" in tty and "1 more running" in tty
    assert "[1/2] rmsnorm@h200: \x1b[32mok\x1b[0m (" in tty
    assert "[2/2] softmax@h200: \x1b[31mfailed\x1b[0m (" in tty
    redraws = tty.count("rmsnorm@h200 verify")
    assert 2 <= redraws <= 20                              # a few times a second, not in a busy loop
    assert tty.rstrip().endswith("finished")               # the live line was taken off


def test_no_color_on_a_terminal_keeps_the_live_line_without_colour():
    rc, _, tty = _run_in_pty([sys.executable, "-c", CHILD], {"NO_COLOR": "1"})
    assert rc == 0, tty
    assert "rmsnorm@h200 verify" in tty and "\r" in tty
    assert "\x1b[3" not in tty and "\x1b[2m" not in tty   # no colour codes at all
    assert "[2/2] softmax@h200: failed (" in tty


@pytest.mark.slow
def test_regen_verify_on_a_terminal_shows_progress_and_keeps_stdout_plain(project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    subprocess.run([sys.executable, "-m", "regen", "--root", str(project), "accept", str(folder)],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO),
                                                         "REGEN_LOCAL_CACHE": str(tmp_path / "lc")})
    rc, out, tty = _run_in_pty([sys.executable, "-m", "regen", "--root", str(project), "verify",
                                "-t", "cpu"], {"REGEN_LOCAL_CACHE": str(tmp_path / "lc"),
                                               "GITHUB_STEP_SUMMARY": "", "GITHUB_ACTIONS": ""})
    assert rc == 0, out + tty
    assert "[0/1] scale@cpu verify " in tty                 # verifying takes more than a second
    assert "[1/1] scale@cpu: \x1b[32mok\x1b[0m (" in tty
    assert "\x1b" not in out and out.splitlines()[1].startswith("scale@cpu  ok")
