"""Soak: SIGKILL a whole `regen build` (planner, generator, compiler, judge and all) at random
moments, then check the cache: no corrupt or half-written entry, and the next build finishes the
work. Also runs two builds of one project at once and checks that no record or pointer is lost.

    python benchmarks/soak_kill_build.py --kills 100

Prints one line per kill (when it landed, what the cache held) and a summary. Exit 1 on any
corruption or an unfinished final build.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import SCALE_CPP, SCALE_ORACLE, SCALE_RECIPE, SCALE_SPEC, CPU_TARGET  # noqa: E402
from regen.store import CorruptCache, Store  # noqa: E402

KERNELS = [f"k{i}" for i in range(4)]


def make_project(root: Path) -> Path:
    for d in ("specs", "oracles", "targets"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "targets" / "cpu.yaml").write_text(CPU_TARGET)
    for k in KERNELS:
        (root / "specs" / f"{k}.yaml").write_text(SCALE_SPEC.replace("name: scale", f"name: {k}"))
        (root / "oracles" / f"{k}.py").write_text(SCALE_ORACLE)
    agent = root / "agent.py"
    agent.write_text(
        "import os, sys\nfrom pathlib import Path\nsys.stdin.read()\n"
        "k = os.environ['REGEN_KERNEL']\ntask = Path(os.environ['REGEN_TASK_DIR'])\n"
        f"(task / 'kernel.cpp').write_text({SCALE_CPP!r}.replace('scale_f32', k + '_f32'))\n"
        f"(task / 'launch.yaml').write_text({SCALE_RECIPE!r}.replace('scale_', k + '_'))\n")
    return root


def build_cmd(root: Path) -> list[str]:
    return [sys.executable, "-m", "regen.cli", "--root", str(root), "build", "-j", "2",
            "--generator", f"command:{sys.executable} {root / 'agent.py'}"]


def inspect(root: Path) -> tuple[int, list[str]]:
    """(entries live, problems): every pointer names a complete entry whose bytes match."""
    store = Store(root / "cache")
    problems = []
    try:
        problems += store.check()
        live = sum(1 for k in KERNELS if store.current(k, "cpu") is not None)
    except CorruptCache as exc:
        return 0, [str(exc)]
    # files no pointer names (temporaries of the killed build; entries whose pointer this soak
    # deleted) are not corruption: `regen gc` removes them
    return live, problems


def kill_at_random(root: Path, kills: int, rnd: random.Random, env: dict) -> int:
    bad = 0
    for i in range(kills):
        # each round starts from a cache that needs work: drop one kernel's pointer at random
        store = Store(root / "cache")
        k = rnd.choice(KERNELS)
        ptr = root / "cache" / k / "cpu" / "current.json"
        if ptr.exists() and rnd.random() < 0.7:
            ptr.unlink()
        proc = subprocess.Popen(build_cmd(root), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        delay = rnd.uniform(0.2, 6.0)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)   # the build and everything it started
        proc.wait()
        live, problems = inspect(root)
        bad += bool(problems)
        print(f"kill {i + 1:3d} at {delay:4.1f} s: {live}/{len(KERNELS)} entries live, "
              f"{'OK' if not problems else 'CORRUPT: ' + '; '.join(problems)}", flush=True)
        del store
    return bad


def two_builds_at_once(root: Path, env: dict) -> list[str]:
    for k in KERNELS:
        (root / "cache" / k / "cpu" / "current.json").unlink(missing_ok=True)
    procs = [subprocess.Popen(build_cmd(root), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    problems = inspect(root)[1]
    store = Store(root / "cache")
    for k in KERNELS:
        e = store.current(k, "cpu")
        if e is None or not any(r.get("ok") for r in store.records(k, "cpu", e.id)):
            problems.append(f"{k}: no verified current entry after two concurrent builds")
    if any(p.returncode != 0 for p in procs):
        problems.append("a concurrent build failed:\n" + "\n".join(outs))
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=100, help="how many builds to kill")
    ap.add_argument("--seed", type=int, default=1, help="random seed for the kill times")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="regen-soak-") as tmp:
        root = make_project(Path(tmp) / "proj")
        env = {**os.environ, "PYTHONPATH": str(REPO), "REGEN_LOCAL_CACHE": str(Path(tmp) / "lc")}
        t0 = time.time()
        bad = kill_at_random(root, args.kills, random.Random(args.seed), env)
        final = subprocess.run(build_cmd(root), env=env, capture_output=True, text=True)
        live, problems = inspect(root)
        finished = final.returncode == 0 and live == len(KERNELS) and not problems
        concurrent = two_builds_at_once(root, env)
        print(f"\n{args.kills} kills in {time.time() - t0:.0f} s: {bad} left a corrupt or half "
              f"entry; the next build {'finished the work' if finished else 'DID NOT finish'} "
              f"({live}/{len(KERNELS)} live); two builds at once: "
              f"{'no loss' if not concurrent else '; '.join(concurrent)}")
        return 0 if bad == 0 and finished and not concurrent else 1


if __name__ == "__main__":
    sys.exit(main())
