"""The Ray fleet on one GPU host (issue 22): verification of the h200 column fanned out over its GPUs.

Starts a Ray head here, then for each GPU set (the first GPU alone, then every GPU) a
`regen worker --column h200 --gpus SET` (Ray pins each verification to one GPU of the set), runs
`regen verify --executor ray -t h200 [KERNELS]`, and reports per run: wall time, records, the GPUs
the records name, and how the bench timings of the all-GPU run compare with the one-GPU run
(median and worst ratio per bench case: the host's timing lock, on by default with more than one
GPU, keeps timed loops apart; `--timing-lock off` measures without it). With --kill, the task
process of one running verification is killed mid-run in the all-GPU run: Ray retries it.

    python3 benchmarks/fleet_gpu.py [KERNEL ...] [--gpus 0,1,...] [--kill] [--timing-lock auto|off]
Output: a table on stdout; records in $OUT/fleet-<n>gpu.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/regen-out"))
PY = sys.executable


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for(pattern: str, log: Path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text() if log.exists() else "")
        if m:
            return m.group(1)
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {pattern!r} in {log}:\n{log.read_text()[-2000:]}")


def _slots(address: str) -> float:
    code = ("import ray; ray.init(address=%r, log_to_driver=False); "
            "print(ray.cluster_resources().get('regen/h200', 0))" % address)
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120).stdout
    return float(out.strip().splitlines()[-1]) if out.strip() else 0.0


def _killer(after_s: float) -> subprocess.Popen:
    """Kill one running verification task's process after `after_s` seconds (Ray retries it)."""
    code = (f"import time, subprocess, os, signal\ntime.sleep({after_s})\n"
            "for _ in range(600):\n"
            "    ps = subprocess.run(['ps','-eo','pid,args'], capture_output=True, text=True).stdout\n"
            "    pids = [int(l.split()[0]) for l in ps.splitlines()[1:] if 'ray::verify_task' in l]\n"
            "    if pids:\n"
            "        os.kill(pids[0], signal.SIGKILL); print('killed', pids[0], flush=True); break\n"
            "    time.sleep(0.5)\n")
    return subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)


def run(gpus: list[str], address: str, kernels: list[str], args) -> dict:
    n = len(gpus)
    worker = _start([PY, "-m", "regen.cli", "worker", "--column", "h200", "--gpus", ",".join(gpus),
                     "--address", address, "--timing-lock", args.timing_lock],
                    OUT / f"fleet-worker-{n}gpu.log")
    try:
        deadline = time.monotonic() + 180
        while _slots(address) < n and time.monotonic() < deadline:
            time.sleep(2)
        killer = _killer(args.kill_after) if args.kill and n > 1 else None
        export = OUT / f"fleet-{n}gpu.json"
        t = time.monotonic()
        proc = subprocess.run([PY, "-m", "regen.cli", "verify", *kernels, "-t", "h200",
                               "--executor", "ray", "--address", address, "--export", str(export),
                               "--timeout", "300", "--seeds", os.environ.get("REGEN_SEEDS", "2")],
                              capture_output=True, text=True)
        wall = time.monotonic() - t
        (OUT / f"fleet-verify-{n}gpu.log").write_text(proc.stdout + proc.stderr)
        killed = None
        if killer is not None:
            killer.kill()
            killed = (killer.communicate()[0] or "").strip() or "nothing was running to kill"
        records = json.loads(export.read_text())["records"] if export.exists() else []
        return {"gpus": n, "wall": wall, "rc": proc.returncode, "records": records, "killed": killed}
    finally:
        _stop(worker)
        deadline = time.monotonic() + 60
        while _slots(address) > 0 and time.monotonic() < deadline:
            time.sleep(2)


def _times(records) -> dict:
    return {(r["kernel"], b["case"]): b["median_s"] for r in records for b in r.get("bench") or []
            if b.get("median_s")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kernels", nargs="*", help="kernels (default: every kernel with an h200 entry)")
    ap.add_argument("--gpus", help="GPU indices (default: every GPU nvidia-smi lists)")
    ap.add_argument("--kill", action="store_true", help="kill one verification mid-run (all GPUs)")
    ap.add_argument("--kill-after", type=float, default=30.0, help="seconds into the run")
    ap.add_argument("--timing-lock", choices=("auto", "on", "off"), default="auto")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    gpus = args.gpus.split(",") if args.gpus else [
        line.split(",")[0].strip() for line in subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
            text=True).stdout.splitlines() if line.strip()]
    head_log = OUT / "fleet-head.log"
    head = _start([PY, "-m", "ray.scripts.scripts", "start", "--head", "--port=0", "--num-cpus=0",
                   "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats", "--block"],
                  head_log)
    try:
        address = _wait_for(r"ray start --address='([^']+)'", head_log)
        runs = [run(gpus[:1], address, args.kernels, args)]
        if len(gpus) > 1:
            runs.append(run(gpus, address, args.kernels, args))
    finally:
        _stop(head)
    base = runs[0]["wall"]
    print("| GPUs | wall s | speed-up | exit | records | ok | GPUs named by records | killed |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        named = sorted({str((rec.get("ran_on") or {}).get("gpu", {}).get("uuid")
                            or (rec.get("ran_on") or {}).get("gpu", {}).get("index", "none"))
                        for rec in r["records"]})
        print(f"| {r['gpus']} | {r['wall']:.0f} | {base / r['wall']:.2f}x | {r['rc']} | "
              f"{len(r['records'])} | {sum(bool(x.get('ok')) for x in r['records'])} | "
              f"{len(named)}: {', '.join(n[:12] for n in named)} | {r['killed'] or '-'} |")
    if len(runs) > 1:
        alone, busy = _times(runs[0]["records"]), _times(runs[1]["records"])
        ratios = [busy[k] / alone[k] for k in alone if k in busy]
        if ratios:
            worst = max(ratios, key=lambda x: abs(x - 1))
            print(f"\nbench cases timed in both runs: {len(ratios)}; all-GPU / one-GPU median time: "
                  f"median {statistics.median(ratios):.3f}, worst {worst:.3f} "
                  f"(timing lock: {args.timing_lock})")
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
