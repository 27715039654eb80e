"""The Llama-3.2-1B decode step on one GPU, in one run: regen's fused megakernel, regen's unfused
plan replayed as a CUDA graph and launched op by op, and the same model in plain PyTorch, eager and
under torch.compile(mode="reduce-overhead"), in microseconds per token and % of the floor (the
spec's bytes over the target's measured copy bandwidth), for each benchmark case of
specs/llama_decode_step.yaml (L = 1024 and 4096).

    python benchmarks/decode_step.py [--target h200] [--cases 1024,4096] [--iters 20] [--variant DIR]
    python benchmarks/decode_step.py --dry-run      # no GPU: compile both plans, bind the recipes

Every regen plan is first checked against the float64 reference composed from the components'
oracles, with the spec's tolerance and its invariants (the argmax where the margin is clear, the
cache slots); a plan that fails is still timed and marked. Every row is timed as the judge times
(regen/judge/timing.py): an L2 read flush before each call, the start event behind a spin kernel
so the host's enqueue time (a Python launch per op of the unfused plan) is not counted, the median
of --iters calls. The megakernel's and the plan's counters reset themselves, so replays need no
re-zeroing. torch.compile's CUDA graphs can be skipped (inputs it
mutates); the table says when inductor reports skipping them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
KERNEL = "llama_decode_step"


def plans(project, store, spec, target) -> dict:
    """name -> (source, recipe text): the current (fused) entry, the entries pending verification
    on this column, and the unfused plan composed now from the components' current entries."""
    from regen.compose import unfused

    out = {}
    entry = store.current(KERNEL, target.name)
    if entry is not None:
        out["fused" if entry.provenance().get("generator") != "composed" else "unfused"] = \
            (entry.source(), entry.recipe())
    for e in store.pending(KERNEL, target.name):   # newer entries waiting for this hardware
        out[f"fused, pending {e.id}"] = (e.source(), e.recipe())
    source, recipe, _ = unfused(project, store, spec, target)
    out["unfused"] = (source, recipe)
    return out


def buffers_for(spec, recipe, case, inputs, device):
    """Outputs (in-place ones are their inputs) and workspaces, as the judge allocates them."""
    import torch

    from regen.recipe import workspace_shapes

    bufs = dict(inputs)
    for t in spec.signature.outputs:
        if not t.inplace_of:
            bufs[t.name] = torch.empty(spec.tensor_shape(t, case), device=device,
                                       dtype=getattr(torch, spec.tensor_dtype(t, case)))
    for name, (dtype, shape, zero) in workspace_shapes(recipe, spec.case_env(case)).items():
        bufs[name] = (torch.zeros if zero else torch.empty)(shape, device=device,
                                                            dtype=getattr(torch, dtype))
    return bufs


def timed(fn, runtime, iters: int, warmup: int = 3) -> float:
    """Median device seconds of fn with the judge's method: an L2 read flush before each call and
    the start event behind a spin kernel, lengthened until the host's enqueue time (a Python
    launch per op of an unfused plan, a compile guard) stays outside the events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        while True:
            runtime.flush_cache()
            runtime.synchronize()
            timer = runtime.timer()
            timer.start()
            fn()
            timer.stop()
            runtime.synchronize()
            if timer.hidden() or not runtime.stall.lengthen():
                break
        out.append(timer.seconds())
    return statistics.median(out)


def check(spec, oracle, case, view, pristine, got) -> str:
    """'ok (max abs E)' or why not: the spec's tolerance on every output, then the invariants."""
    import torch

    from regen.oracle import run_check

    ref = oracle.reference({k: v.clone() for k, v in pristine.items()}, view)
    tol = spec.case_tolerance(case)
    worst = 0.0
    for name, want in ref.items():
        g = got[name].to(torch.float64)
        w = want.to(g.device, torch.float64)
        err = (g - w).abs()
        bad = int((err > tol.atol + tol.rtol * w.abs()).sum())
        if bad:
            return f"FAIL: {name} {bad} elements out of tolerance (max abs {err.max().item():.3g})"
        worst = max(worst, err.max().item())
    problems = run_check(oracle, pristine, got, view, ref)
    return f"FAIL: {'; '.join(problems)}" if problems else f"ok (max abs {worst:.3g})"


def plain_model(inputs, case):
    """The step as a PyTorch module: weights and caches as buffers (static addresses, as a serving
    engine holds them), the caches written in place; forward(token) -> logits."""
    import torch

    from regen.oracle import load_oracle

    base = load_oracle(REPO / "oracles" / f"{KERNEL}.py").baseline
    names = [k for k in inputs if k != "token"]

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for k in names:
                self.register_buffer(k, inputs[k])

        def forward(self, token):
            return base({"token": token, **{k: getattr(self, k) for k in names}}, case)["logits"]

    return Step()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h200")
    ap.add_argument("--cases", default="1024,4096", help="the bench cases' L (default: 1024,4096)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per row (default: 20)")
    ap.add_argument("--no-check", action="store_true", help="skip the reference checks")
    ap.add_argument("--variant", action="append", default=[], metavar="DIR",
                    help="also time the fused kernel in DIR (kernel.cu + launch.yaml, or launch.yaml "
                         "alone with the committed source), e.g. "
                         "variants/llama_decode_step/attn_pool; repeatable")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: compile the plans and bind their recipes for every case")
    args = ap.parse_args()

    from regen.compile import compile_source
    from regen.project import Project
    from regen import variant
    from regen.recipe import bind, parse_recipe
    from regen.store import Store

    project = Project(REPO)
    store = Store(project.cache_dir)
    spec, target = project.spec(KERNEL), project.target(args.target)
    cases = [c for c in spec.bench_cases(target) if str(c.sizes["L"]) in args.cases.split(",")]
    compiled = {}
    timed_plans = plans(project, store, spec, target)
    for folder in args.variant:   # another fused kernel, timed and checked like the committed one
        folder = Path(folder)
        timed_plans[f"variant {folder.name}"] = variant.read(folder, store, KERNEL, args.target)[1:]
    for name, (source, recipe) in timed_plans.items():
        c = compile_source(source, target)
        if not c.result.ok:
            print(f"{name}: does not compile:\n{c.result.log[-3000:]}")
            return 1
        regs = max((r.get("registers", 0) for r in c.result.resources.values()), default=0)
        compiled[name] = (c.result.binary, parse_recipe(recipe), regs)
        print(f"{name}: compiled, {len(c.result.resources)} kernels, at most {regs} registers")
    if args.dry_run:
        for case in cases:
            env = spec.case_env(case)
            names = {t.name for t in spec.signature.tensors}
            for name, (_b, recipe, _r) in compiled.items():
                ws = {w.name for w in recipe.workspace}
                n = len(bind(recipe, env, names | ws, env["T"]))
                print(f"  L={case.sizes['L']}: {name} binds {n} launches")
        return 0
    return _run(args, spec, target, cases, compiled)


def _run(args, spec, target, cases, compiled) -> int:
    import torch

    from regen.oracle import ComposedOracle, load_oracle
    from regen.project import Project
    from regen.recipe import bind
    from regen.runtimes.cuda import Runtime

    if not torch.cuda.is_available():
        print("needs a CUDA GPU (or --dry-run)")
        return 1
    project = Project(REPO)
    oracle = ComposedOracle(load_oracle(project.oracle_path(KERNEL)), project.oracle_job(spec))
    bandwidth = target.peak("memory_bandwidth").value
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, floor at "
          f"{bandwidth / 1e12:.2f} TB/s ({target.name}'s measured copy bandwidth)")
    tmp = Path(tempfile.mkdtemp(prefix="regen-decode-"))
    runtimes = {}
    for name, (binary, _recipe, _regs) in compiled.items():
        path = tmp / f"{name}.cubin"
        path.write_bytes(binary)
        runtimes[name] = Runtime(str(path))
    clock = next(iter(runtimes.values()))   # its flush, stall and timer time every row

    class Rows(list):
        """The table's rows, each also printed when measured (a run cut short keeps them)."""

        def append(self, row):
            super().append(row)
            label, what, t, floor, verdict = row
            print(f"  {label:<8} {what:<42} {t * 1e6:10.1f} us {100 * floor / t:6.1f}% of floor"
                  f"  {verdict}", flush=True)

    rows = Rows()
    for case in cases:
        env = spec.case_env(case)
        label = f"L={case.sizes['L']}"
        floor = spec.case_bytes(case) / bandwidth
        view = _view(spec, case)
        pristine = oracle.make_inputs(view, 0)
        results = {}
        for name, (_binary, recipe, _regs) in compiled.items():
            inputs = {k: v.clone() for k, v in pristine.items()}
            bufs = buffers_for(spec, recipe, case, inputs, "cuda")
            launches = bind(recipe, env, set(bufs), env["T"])
            rt = runtimes[name]
            rt.launch(launches, bufs)
            torch.cuda.synchronize()
            got = {t.name: bufs[t.inplace_of or t.name] for t in spec.signature.outputs}
            verdict = "not checked" if args.no_check else check(spec, oracle, case, view,
                                                                  pristine, got)
            results[name] = timed(lambda: rt.launch(launches, bufs), clock, args.iters)
            rows.append((label, f"regen {name} ({len(launches)} launch"
                                f"{'es' if len(launches) > 1 else ''})", results[name], floor,
                         verdict))
            if len(launches) > 1:   # the same launches captured once, replayed as a CUDA graph
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.stream(stream):
                    rt.launch(launches, bufs)   # warm: functions loaded, attributes set
                    torch.cuda.synchronize()
                    with torch.cuda.graph(graph, stream=stream):
                        rt.launch(launches, bufs)
                torch.cuda.synchronize()
                results[name + "_graph"] = timed(graph.replay, clock, args.iters)
                rows.append((label, f"regen {name}, CUDA graph", results[name + "_graph"],
                             floor, "same launches"))
            del bufs, inputs
            torch.cuda.empty_cache()
        inputs = {k: v.clone() for k, v in pristine.items()}
        model = plain_model(inputs, view)
        token = inputs["token"]
        with torch.no_grad():
            eager = timed(lambda: model(token), clock, args.iters)
            rows.append((label, "torch eager", eager, floor, "the oracle's baseline()"))
            from torch._dynamo.utils import counters

            counters.clear()
            compiled_model = torch.compile(model, mode="reduce-overhead")
            ro = timed(lambda: compiled_model(token), clock, args.iters, warmup=5)
            skipped = bool(counters["inductor"].get("cudagraph_skips"))
            note = ("inductor skipped its CUDA graphs (see its log)" if skipped else
                    "inductor's CUDA graphs")
            rows.append((label, 'torch.compile(mode="reduce-overhead")', ro, floor, note))
        fused = results.get("fused")
        if fused:
            print(f"{label}: fused vs unfused CUDA graph {results.get('unfused_graph', 0) / fused:.2f}x, "
                  f"vs unfused {results['unfused'] / fused:.2f}x, vs reduce-overhead {ro / fused:.2f}x, "
                  f"vs eager {eager / fused:.2f}x")
        del model, inputs, pristine
        torch.cuda.empty_cache()
    print(f"\n{'case':<8} {'implementation':<42} {'us/token':>10} {'% floor':>8}  check")
    for label, what, t, floor, verdict in rows:
        print(f"{label:<8} {what:<42} {t * 1e6:10.1f} {100 * floor / t:7.1f}%  {verdict}")
    return 0


def _view(spec, case):
    """The case object an oracle receives (what the judge's child builds)."""
    from types import SimpleNamespace

    import torch

    env = spec.case_env(case)
    bound = spec.case_tolerance(case)
    return SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]),
                           params={p.name: env[p.name] for p in spec.signature.params},
                           dist=case.dist, device="cuda", name=case.label(spec.signature.dtypes[0]),
                           tolerance=SimpleNamespace(atol=bound.atol, rtol=bound.rtol))


if __name__ == "__main__":
    sys.exit(main())
