"""What running host artifacts in a process of their own costs the timings: the same compiled
cpu-column kernel timed by a direct in-process ctypes call (how judge 2 ran it) and through
regen/runtimes/cpu.py (judge 3: staged into a shared arena, called over a socket, timed as the
round trip, which includes one empty round trip of the control channel), alternating, on the kernel's largest correctness case (where a
fixed overhead weighs most) or, with --bench, its benchmark case.

    python benchmarks/host_process.py [--bench] [--sequential] [KERNEL ...]
                                                  # default: softmax rmsnorm swiglu, alternating
"""

from __future__ import annotations

import ctypes
import statistics
import types
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from regen.compile import compile_source  # noqa: E402
from regen.oracle import load_oracle  # noqa: E402
from regen.project import Project  # noqa: E402
from regen.recipe import bind, parse_recipe, workspace_shapes  # noqa: E402
from regen.runtimes.cpu import Runtime  # noqa: E402
from regen.store import Store  # noqa: E402

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
           "float64": ctypes.c_double}


def oracle_case(spec, case):
    """The case object an oracle receives (the shape the judge builds: regen/judge/buffers.py)."""
    env = spec.case_env(case)
    return types.SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]),
                                 params={p.name: env[p.name] for p in spec.signature.params},
                                 dist=case.dist, device="cpu", name=case.label(spec.signature.dtypes[0]))


def main(kernels: list[str], bench: bool, sequential: bool) -> None:
    project = Project(REPO)
    target = project.target("cpu")
    print(f"{'kernel':8} {'case':24} {'in-process us':>14} {'own process us':>15} {'ratio':>6}")
    for name in kernels:
        spec = project.spec(name)
        entry = Store(project.cache_dir).current(name, "cpu")
        compiled = compile_source(entry.source(), target)
        so = Path(tempfile.mkdtemp()) / "artifact.so"
        so.write_bytes(compiled.result.binary)
        case = spec.bench_cases()[0] if bench else max(spec.correctness_cases(), key=spec.case_bytes)
        view = oracle_case(spec, case)
        bufs = dict(load_oracle(project.oracle_path(name)).make_inputs(view, 1))
        env = spec.case_env(case)
        for t in spec.signature.outputs:
            bufs[t.name] = torch.empty(spec.tensor_shape(t, case), dtype=getattr(torch, spec.tensor_dtype(t, case)))
        recipe = parse_recipe(entry.recipe())
        for w, (dtype, shape, _zero) in workspace_shapes(recipe, env).items():
            bufs[w] = torch.zeros(shape, dtype=getattr(torch, dtype))
        launches = bind(recipe, env, set(bufs), env["T"])
        lib = ctypes.CDLL(str(so))

        flush = (ctypes.c_char * (64 * 2**20))()

        def direct():  # as judge 2 timed it: caches flushed, then the call
            ctypes.memset(flush, 1, len(flush))
            t0 = time.perf_counter()
            for launch in launches:
                getattr(lib, launch.kernel)(*[
                    ctypes.c_void_p(bufs[a.value].data_ptr()) if a.kind == "tensor"
                    else _CTYPES[a.kind](a.value) for a in launch.args])
            return time.perf_counter() - t0

        runtime = Runtime(str(so))

        def apart():  # as judge 3 times it
            runtime.flush_cache()
            timer = runtime.timer()
            timer.start()
            runtime.launch(launches, bufs)
            timer.stop()
            return timer.seconds()

        here, there = [], []
        if sequential:  # one after the other: neither process's idle OpenMP pool spins meanwhile
            here = [direct() for _ in range(43)][3:]
            time.sleep(0.5)
            there = [apart() for _ in range(43)][3:]
        for i in range(0 if sequential else 43):
            a, b = direct(), apart()
            if i >= 3:
                here.append(a)
                there.append(b)
        h, t = statistics.median(here), statistics.median(there)
        print(f"{name:8} {case.label(spec.signature.dtypes[0]):24} {h * 1e6:14.1f} {t * 1e6:15.1f} "
              f"{t / h:6.3f}")
        print(f"{'':8} empty round trip (included above): {runtime.empty_round_trip_s * 1e6:.1f} us")
        runtime.close()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args or ["softmax", "rmsnorm", "swiglu"], "--bench" in sys.argv, "--sequential" in sys.argv)
