"""Evidence for regen.ops on the lent H200, in one run of under four minutes, printed as it goes:

  1. what each kernel runs on this GPU (regen.ops.status, in `regen status` words)
  2. every op on CUDA against torch (column, largest error), one on a side stream
  3. the fallback warning of a column that is not verified here, and of a misaligned input
  4. a CUDA graph capturing regen ops, replayed on new data
  5. torch._dynamo.explain of the patched example model: one graph, no breaks
  6. host overhead per call against torch's own ops (benchmarks/ops_overhead.py)
  7. `regen export -t TARGET`, imported in a process where regen cannot be imported, on CUDA
  8. the model bench table (benchmarks/model_bench.py; OPS_DEVICE_LAYERS layers, default 4,
     prefill 8 x 2048, forward only)
  9. training steps through regen ops, forward and backward (examples/train_step.py: Llama-3.2-1B
     shapes, 2 layers, batch 2 x 512, bfloat16) against plain PyTorch: losses, gradient
     difference, step times, and which backward ops ran a verified column or the baseline

    bash benchmarks/h200_run.sh ops        (or: python3 benchmarks/ops_device.py, same env)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
T0 = time.perf_counter()
TARGET = os.environ.get("REGEN_TARGET", "h200")  # h200_run.sh sets the column of this GPU


def say(text: str = "") -> None:
    print(text, flush=True)


def step(title: str) -> None:
    say(f"\n== {title}  [{time.perf_counter() - T0:.0f} s]")


def main() -> int:
    import torch
    import torch.nn.functional as F

    step("environment")
    say(f"torch {torch.__version__}; {torch.cuda.get_device_name()} "
        f"(sm_{''.join(map(str, torch.cuda.get_device_capability()))})")
    import regen.ops as ops

    step("1. regen.ops.status('cuda')")
    for s in ops.status("cuda"):
        say(f"  {s['kernel']:14} {s['runs']:16} {s['column'] or '-':20} {s['why']}")

    step("2. every op on CUDA")
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(64, 4096, device=dev, dtype=bf, generator=g)
    w = torch.randn(4096, device=dev, dtype=bf, generator=g)
    b = torch.randn(4096, device=dev, dtype=bf, generator=g)
    q = torch.randn(2, 128, 8, 64, device=dev, dtype=bf, generator=g)
    ang = torch.arange(128, device=dev)[:, None] * torch.rand(32, device=dev, generator=g)[None]
    cos, sin = ang.cos().to(bf), ang.sin().to(bf)
    tgt = torch.randint(0, 4096, (64,), device=dev, generator=g)
    vol = torch.randn(2, 4, 9, 9, 9, device=dev, dtype=bf, generator=g)

    def rope_ref(t, c, s):
        c, s = c[None, :, None, :], s[None, :, None, :]
        t1, t2 = t.float().chunk(2, -1)
        return torch.cat([t1 * c - t2 * s, t2 * c + t1 * s], -1)

    checks = {
        "rmsnorm": ((x, w), lambda: F.rms_norm(x.float(), (4096,), w.float(), 1e-6)),
        "layernorm": ((x, w, b), lambda: F.layer_norm(x.float(), (4096,), w.float(), b.float(), 1e-5)),
        "softmax": ((x,), lambda: torch.softmax(x.float(), -1)),
        "swiglu": ((x,), lambda: F.silu(x[:, :2048].float()) * x[:, 2048:].float()),
        "cross_entropy": ((x, tgt), lambda: F.cross_entropy(x.float(), tgt).reshape(1)),
        "rope": ((q, cos, sin), lambda: rope_ref(q, cos.float(), sin.float())),
        "maxpool3d": ((vol,), lambda: F.max_pool3d(vol.float(), 3, 2)),
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ops.RegenOpsWarning)
        side = torch.cuda.Stream()
        for name, (args, ref) in checks.items():
            with torch.cuda.stream(side):
                got = getattr(ops, name)(*args)
            side.synchronize()
            err = (got.float() - ref()).abs().max().item()
            say(f"  {name:14} runs {ops.runs(name, *args) or 'torch baseline':22} "
                f"max |regen - torch fp32| = {err:.3g}")

        step("3. fallback warnings")
        for wmsg in caught:
            say(f"  RegenOpsWarning: {wmsg.message}")
        caught.clear()
        mis = torch.empty(64 * 4096 + 8, device=dev, dtype=bf)[8:].view(64, 4096).copy_(x)
        ops.rmsnorm(mis, w)
        for wmsg in caught:
            say(f"  RegenOpsWarning: {wmsg.message}")

    step("4. CUDA graph")
    xs, ws = torch.randn(8, 1024, device=dev), torch.randn(1024, device=dev)
    ops.softmax(ops.rmsnorm(xs, ws))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.softmax(ops.rmsnorm(xs, ws))
    xs.copy_(torch.randn_like(xs))
    graph.replay()
    torch.cuda.synchronize()
    want = torch.softmax(F.rms_norm(xs, (1024,), ws, 1e-6), -1)
    say(f"  captured rmsnorm -> softmax ({ops.runs('rmsnorm', xs, ws)}, "
        f"{ops.runs('softmax', xs)}); replay on new data: max error {(out - want).abs().max().item():.3g}")

    step("5. torch._dynamo.explain(patched example model)")
    import regen
    from examples.llama import Config, build

    cfg = Config.tiny(layers=2)
    model = build(cfg, dtype=bf, device=dev)
    say(f"  patched: {regen.patch(model)}")
    ids = torch.randint(0, cfg.vocab, (2, 64), device=dev)
    explained = torch._dynamo.explain(model)(ids)
    say(f"  graphs: {explained.graph_count}, graph breaks: {explained.graph_break_count}, "
        f"ops in graph: {explained.op_count}, break reasons: {explained.break_reasons}")
    with torch.no_grad():
        err = (torch.compile(model)(ids).float() - model(ids).float()).abs().max().item()
    say(f"  torch.compile(model) vs eager patched model: max |dlogit| {err:.3g}")

    step("6. host overhead per call (tiny tensor, best of 7 rounds)")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import ops_overhead

    say(ops_overhead.table(ops_overhead.measure("cuda", calls=2000)))

    step(f"7. regen export -t {TARGET}, imported without regen")
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "pkg"
        proc = subprocess.run([sys.executable, "-m", "regen.cli", "export", "-t", TARGET, "-o",
                               str(pkg)], capture_output=True, text=True, cwd=REPO, timeout=300)
        say("  " + (proc.stdout + proc.stderr).strip().replace("\n", "\n  "))
        blocker = Path(tmp) / "blocker"
        for m in ("regen", "yaml", "pydantic"):
            (blocker / m).mkdir(parents=True)
            (blocker / m / "__init__.py").write_text(f"raise ImportError('{m} is not importable')\n")
        code = ("import torch, regen_kernels as rk\n"
                "x = torch.randn(64, 4096, device='cuda', dtype=torch.bfloat16)\n"
                "w = torch.randn(4096, device='cuda', dtype=torch.bfloat16)\n"
                "y = rk.rmsnorm(x, w)\n"
                "err = (y.float() - torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), 1e-6)).abs().max()\n"
                "print('regen_kernels.rmsnorm runs', rk.runs('rmsnorm', x, w), 'max error', float(err))\n"
                "try:\n    import regen\nexcept ImportError as e:\n    print('import regen:', e)\n")
        site = [p for p in sys.path if p.endswith("site") or "site-packages" in p]
        env = {**os.environ, "PYTHONPATH": ":".join([str(blocker), str(pkg), *site])}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=tmp, env=env, timeout=300)
        say("  " + (proc.stdout + proc.stderr[-2000:]).strip().replace("\n", "\n  "))

    step("8. model bench (forward prefill)")
    import model_bench

    model_bench.run(layers=int(os.environ.get("OPS_DEVICE_LAYERS", "4")), batch=8, seq=2048,
                    device=dev, dtype="bfloat16", iters=10, out=lambda s: say("  " + s))
    step("9. training steps, forward and backward through regen ops")
    from dataclasses import replace

    from examples.llama import Config as LlamaConfig
    from examples.train_step import compare

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ops.RegenOpsWarning)
        compare("regen.ops", replace(LlamaConfig(), layers=2), "cuda", bf, steps=4, b=2, s=512,
                out=lambda s: say("  " + s))
    for wmsg in {str(w.message) for w in caught}:
        say(f"  RegenOpsWarning: {wmsg}")
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
