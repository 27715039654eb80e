"""`--executor ray`: a local Ray cluster started here (a head with no slots and worker processes
advertising different `regen/<column>` resources) builds example kernels' cpu column with each
verification routed to a worker offering it; a column no worker can verify waits for hardware;
a worker killed mid-verification is survived. The local executor needs no Ray (`--jobs N`).

CPU only and bounded for a 2-core CI runner: one cluster per module, seeds 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, make_project

EXAMPLES = ("rmsnorm", "softmax")   # kernels examples/llama.py runs, with cpu and h200 entries


def _project(root: Path, kernels=EXAMPLES, drop=("cpu",)) -> Path:
    """A copy of this repository's kernels with their committed entries, the records of the
    columns in `drop` removed: those nodes need verification."""
    for name in ("specs", "oracles"):
        (root / name).mkdir(parents=True)
    for k in kernels:
        shutil.copy(REPO / "specs" / f"{k}.yaml", root / "specs")
        shutil.copy(REPO / "oracles" / f"{k}.py", root / "oracles")
        shutil.copytree(REPO / "cache" / k, root / "cache" / k)
        for t in drop:
            shutil.rmtree(root / "cache" / k / t / "records", ignore_errors=True)
    shutil.copytree(REPO / "targets", root / "targets")
    shutil.copytree(REPO / "cache" / "objects", root / "cache" / "objects")
    return root


def _regen(root: Path, *args: str, timeout: float = 240, **kw):
    env = {**os.environ, "REGEN_LOCAL_CACHE": str(root.parent / "lc"), "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen([sys.executable, "-m", "regen.cli", "--root", str(root), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


def _records(root: Path, kernel: str, target: str) -> list[dict]:
    folder = root / "cache" / kernel / target / "records"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


@pytest.fixture(scope="module")
def cluster():
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    c = cluster_utils.Cluster(initialize_head=True, connect=False,
                              head_node_args={"num_cpus": 0, "include_dashboard": False})
    cpu = c.add_node(num_cpus=1, resources={"regen/cpu": 1})
    gpu = c.add_node(num_cpus=1, resources={"regen/h200": 1})   # says h200, has no GPU
    c.wait_for_nodes()
    try:
        yield c, cpu, gpu
    finally:
        c.shutdown()


@pytest.mark.slow
def test_cpu_column_is_verified_only_on_the_worker_offering_regen_cpu(cluster, tmp_path):
    c, cpu, _gpu = cluster
    # every column's records removed (the h100 column has committed ones): all three need hardware
    root = _project(tmp_path / "proj", drop=("cpu", "h200", "h100"))
    proc = _regen(root, "build", "-t", "cpu", "-t", "h200", "-t", "h100", "--executor", "ray",
                  "--address", c.address, "--seeds", "1", "--generator", "none")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    lines = {ln.split()[0]: ln for ln in out.splitlines() if "@" in ln.split()[0]}
    for k in EXAMPLES:
        assert "verified on worker" in lines[f"{k}@cpu"], lines[f"{k}@cpu"]
        (rec,) = _records(root, k, "cpu")
        assert rec["ok"] and rec["ran_on"]["node"] == cpu.node_id[:16]
        # the h200 worker is asked (the probe runs there) and has no H200: waiting, not failed
        assert lines[f"{k}@h200"].split()[1] == "waiting", lines[f"{k}@h200"]
        assert "workers offering regen/h200 have no device matching" in lines[f"{k}@h200"]
        assert _records(root, k, "h200") == []
    # no worker offers h100 at all: its entries are compiled and wait for hardware
    h100 = [ln for key, ln in lines.items() if key.endswith("@h100")]
    assert h100 and all("waiting for hardware: no worker offers regen/h100" in ln for ln in h100), h100


@pytest.mark.slow
def test_a_worker_killed_mid_verification_is_survived_without_a_half_written_record(cluster, tmp_path):
    c, cpu, _gpu = cluster
    spare = c.add_node(num_cpus=1, resources={"regen/cpu": 1})
    c.wait_for_nodes()
    root = _project(tmp_path / "proj", kernels=("rmsnorm",))
    proc = _regen(root, "build", "rmsnorm", "-t", "cpu", "--executor", "ray", "--address",
                  c.address, "--seeds", "1", "--generator", "none")
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in (cpu, spare)}
    victim, deadline = None, time.monotonic() + 120
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        ps = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
        for line in ps.splitlines()[1:]:
            pid, ppid, args = line.split(None, 2)
            if "ray::verify_task" in args and int(ppid) in raylets:
                victim = raylets[int(ppid)]
        time.sleep(0.2)
    assert victim is not None, "no verification task was seen running"
    time.sleep(1.0)                                       # mid-task: the judge is running
    c.remove_node(victim, allow_graceful=False)           # the worker node dies, raylet and all
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    survivor = spare if victim is cpu else cpu
    (rec,) = _records(root, "rmsnorm", "cpu")             # one record, from the retry
    assert rec["ok"] and rec["ran_on"]["node"] == survivor.node_id[:16]
    assert not list((root / "cache").rglob(".tmp-*"))


def test_local_executor_needs_no_ray_and_jobs_still_work(tmp_path):
    """Ray made unimportable: `--jobs 2` builds as before, `--executor ray` says what to install."""
    root = make_project(tmp_path / "proj")
    code = ("import sys; sys.modules['ray'] = None; from regen.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "REGEN_LOCAL_CACHE": str(tmp_path / "lc")}
    ok = subprocess.run([sys.executable, "-c", code, "--root", str(root), "build", "--jobs", "2",
                         "--generator", "none", "--no-remote"],
                        capture_output=True, text=True, env=env, timeout=240)
    assert "scale@cpu" in ok.stdout and "Traceback" not in ok.stderr, ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-c", code, "--root", str(root), "build", "--executor",
                          "ray", "--generator", "none"],
                         capture_output=True, text=True, env=env, timeout=240)
    assert bad.returncode == 2 and "--executor ray needs Ray: pip install 'regen[fleet]'" in bad.stderr
    assert "Traceback" not in bad.stderr
