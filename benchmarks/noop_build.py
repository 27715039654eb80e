"""No-op `regen build` on a fully cached synthetic project, as a ratio to bare imports.

200 specs x 5 target columns = 1000 artifacts, all in cache/ and all compiled once into the local
cache (the columns' hardware is absent, as on a CPU CI runner, so a no-op build compile-checks from
the local cache and reports each artifact's level). The claim: the median no-op build takes at most
2x `python -c "import networkx, pydantic, yaml"` measured in the same run.

    python benchmarks/noop_build.py [--specs 200] [--targets 5] [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import CPU_TARGET, SCALE_CPP, SCALE_ORACLE, SCALE_RECIPE, SCALE_SPEC  # noqa: E402


def make(root: Path, n_specs: int, n_targets: int) -> None:
    from regen import keys, plan as planning
    from regen.project import Project
    from regen.store import Store

    for d in ("specs", "oracles", "targets"):
        (root / d).mkdir(parents=True)
    for i in range(n_specs):
        name = f"k{i:03d}"
        (root / "specs" / f"{name}.yaml").write_text(SCALE_SPEC.replace("name: scale", f"name: {name}"))
        (root / "oracles" / f"{name}.py").write_text(SCALE_ORACLE)
    for j in range(n_targets):
        text = CPU_TARGET.replace('match: ["x86_64"]', 'match: ["no-such-machine"]')
        text = text.replace('"-O3"', f'"-O{1 + j % 3}"', 1) + f"# column {j}\n"
        (root / "targets" / f"host{j}.yaml").write_text(text)
    project = Project(root)
    store = Store(project.cache_dir)
    for node in planning.plan(project, store):
        src = SCALE_CPP.replace("scale_f32", f"{node.kernel}_f32")
        rec = SCALE_RECIPE.replace("scale_{dtype}", f"{node.kernel}_{{dtype}}")
        store.put(node.kernel, node.target, "cpp", src, rec,
                  {"generator": "benchmark-fixture", "note": "synthetic, temporary folder only"},
                  node.generate_components, node.generate_key)
    assert keys  # imported for the side effect of nothing; keeps the import list honest


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--specs", type=int, default=200)
    ap.add_argument("--targets", type=int, default=5)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        env = dict(os.environ, REGEN_LOCAL_CACHE=str(Path(tmp) / "local"))
        t0 = time.perf_counter()
        make(root, args.specs, args.targets)
        build = [sys.executable, "-m", "regen.cli", "--root", str(root), "build", "--jobs", "2"]
        first = timed(build, env)
        print(f"setup: {args.specs} specs x {args.targets} targets stored in "
              f"{time.perf_counter() - t0 - first:.1f} s; first build (compiles all) {first:.1f} s")
        imports = [sys.executable, "-c", "import networkx, pydantic, yaml"]
        noop = [sys.executable, "-m", "regen.cli", "--root", str(root), "build"]
        base, ours = [], []
        for _ in range(args.runs):  # interleaved, so machine noise hits both alike
            base.append(timed(imports, env))
            ours.append(timed(noop, env))
        b, o = statistics.median(base), statistics.median(ours)
        print(f"import networkx, pydantic, yaml: median {b * 1000:.0f} ms over {args.runs} runs")
        print(f"no-op regen build ({args.specs * args.targets} artifacts): median {o * 1000:.0f} ms")
        print(f"ratio: {o / b:.2f}x (goal <= 2x)")


if __name__ == "__main__":
    main()
