"""A fleet worker's setup without starting Ray: `regen worker` pins GPUs and advertises its
column's slots, several GPUs of a host take turns at timing (the host timing lock), and a task
knows which GPU it was pinned to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import make_project, regen


def test_worker_pins_its_gpus_and_offers_one_slot_per_gpu(tmp_path):
    root = make_project(tmp_path / "proj", targets=("cpu", "h200"))
    proc = regen(root, "worker", "--column", "h200", "--gpus", "2,3", "--address", "10.0.0.1:6379",
                 "--name", "box-1", "--dry-run", check=True)
    line = proc.stderr.strip().splitlines()[-1]
    assert "CUDA_VISIBLE_DEVICES=2,3" in line and "REGEN_WORKER_NAME=box-1" in line
    assert "REGEN_TIMING_LOCK=" in line                      # two GPUs: timings take turns
    assert "--num-gpus 2" in line and '--resources {"regen/h200": 2}' in line
    one = regen(root, "worker", "--column", "h200", "--gpus", "0", "--address", "10.0.0.1:6379",
                "--dry-run", check=True).stderr
    assert "REGEN_TIMING_LOCK" not in one and '{"regen/h200": 1}' in one
    host = regen(root, "worker", "--column", "cpu", "--address", "10.0.0.1:6379", "--dry-run",
                 check=True).stderr
    assert "--num-gpus" not in host and '{"regen/cpu": 1}' in host


def test_worker_without_an_address_or_with_an_unknown_column_says_what_to_pass(tmp_path, monkeypatch):
    root = make_project(tmp_path / "proj")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    proc = regen(root, "worker", "--column", "cpu")
    assert proc.returncode == 2 and "--address" in proc.stderr and "Traceback" not in proc.stderr
    proc = regen(root, "worker", "--column", "nosuch", "--address", "x:1")
    assert proc.returncode == 2 and "nosuch" in proc.stderr and "Traceback" not in proc.stderr


def test_timed_loops_of_one_host_take_turns_under_the_timing_lock(tmp_path):
    lock = tmp_path / "timing.lock"
    code = ("import json, sys, time\n"
            "from regen.judge.timing import host_timing_lock\n"
            "with host_timing_lock():\n"
            "    t0 = time.time(); time.sleep(1.5); t1 = time.time()\n"
            "print(json.dumps([t0, t1]))\n")
    env = {**os.environ, "REGEN_TIMING_LOCK": str(lock)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(3)]
    spans = sorted(json.loads(p.communicate(timeout=60)[0]) for p in procs)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 0.01, spans                       # no two overlap
    # without the variable there is no lock: the loops overlap
    env.pop("REGEN_TIMING_LOCK")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=env) for _ in range(2)]
    t = time.time()
    spans = sorted(json.loads(p.communicate(timeout=60)[0]) for p in procs)
    assert spans[1][0] < spans[0][1], spans
    assert time.time() - t < 60


def test_a_task_names_the_gpu_it_was_pinned_to(monkeypatch):
    from regen import hardware

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    got = hardware.visible_gpu()
    assert got is not None and got["cuda_visible_devices"] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert hardware.visible_gpu() is None


def test_executor_ray_without_a_cluster_says_so_at_once(tmp_path):
    import pytest

    pytest.importorskip("ray")
    root = make_project(tmp_path / "proj")
    import socket

    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.time()
    proc = regen(root, "build", "--executor", "ray", "--address", f"127.0.0.1:{port}",
                 "--generator", "none")
    assert proc.returncode == 2 and "no Ray cluster answers at" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and time.time() - t < 60
    proc = regen(root, "build", "--address", f"127.0.0.1:{port}", "--generator", "none")
    assert proc.returncode == 2 and "--address needs --executor ray" in proc.stderr
