"""Backward passes against Liger-Kernel (and torch eager/compile autograd) on the H200, and the
peak memory of fused linear + cross-entropy against Liger's LigerFusedLinearCrossEntropyLoss.

    python benchmarks/peers_backward.py            # on the device machine, about 3 minutes

Claim checked: regen's backward artifacts are at or above Liger's backward on the same shapes,
and the fused linear-CE needs less memory than Liger's. For each backward kernel with an artifact
for this GPU's column (REGEN_TARGET, default h200) in cache/, `regen bench K -t T` times it, torch
eager/compile and the oracle's peers with one method (flushed L2, the start event behind a stall,
the median); a kernel without one gets the same baselines and peers timed here with CUDA events
around a flushed L2 (the oracle's peers(): Liger through autograd with its forward untimed).
Prints as it goes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
TARGET = os.environ.get("REGEN_TARGET", "h200")  # h200_run.sh sets the column of this GPU
sys.path.insert(0, str(ROOT))

KERNELS = ["rmsnorm_bwd", "layernorm_bwd", "swiglu_bwd", "rope_bwd", "cross_entropy_bwd",
           "fused_linear_cross_entropy"]
BUDGET_S = 220.0          # stop starting new work after this (the whole run stays under 4 min)
ITERS = {"fused_linear_cross_entropy": 5}   # a second or more per call before it is fast


def say(*a):
    print(*a, flush=True)


def us(s):
    return f"{s * 1e6:9.1f}" if s else "        —"


def regen_bench(kernel: str, timeout: float) -> list[dict] | None:
    cmd = [sys.executable, "-m", "regen.cli", "bench", kernel, "-t", TARGET, "--json",
           "--iters", str(ITERS.get(kernel, 20))]
    try:
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        say(f"  regen bench {kernel}: timed out after {timeout:.0f} s")
        return None
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        say(f"  regen bench {kernel} failed: {(out.stderr or out.stdout).strip()[-400:]}")
        return None


def has_artifact(kernel: str) -> bool:
    return (ROOT / "cache" / kernel / TARGET / "current.json").exists()


def _time(torch, fn, args, iters: int) -> float | None:
    """Median device time of fn(*args), L2 flushed before each sample (a 512 MiB write)."""
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    try:
        for _ in range(2):
            fn(*args)
        samples = []
        for _ in range(iters):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args)
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3)
        return statistics.median(samples)
    except Exception as exc:  # noqa: BLE001
        say(f"    raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        return None


def direct(kernel: str, torch) -> None:
    """No artifact for the target yet: the torch baselines and the peers on the GPU bench case."""
    from regen.oracle import load_oracle
    from regen.project import Project

    spec = Project(ROOT).spec(kernel)
    oracle = load_oracle(ROOT / "oracles" / f"{kernel}.py")
    target = Project(ROOT).target(TARGET)
    for case in spec.bench_cases(target):
        env = spec.case_env(case)
        view = SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]),
                               params={p.name: env[p.name] for p in spec.signature.params},
                               dist=case.dist, device="cuda", name=case.label(env["T"]))
        inputs = oracle.make_inputs(view, 1)
        iters = ITERS.get(kernel, 20)
        say(f"  {kernel} {view.name} (no {TARGET} artifact: baselines and peers only)")
        say(f"    torch eager   {us(_time(torch, oracle.baseline, (inputs, view), iters))} µs")
        say(f"    torch.compile {us(_time(torch, torch.compile(oracle.baseline), (inputs, view), iters))} µs")
        for name, peer in sorted(oracle.peers().items()):
            prepare, fn = peer if isinstance(peer, tuple) else (None, peer)
            try:
                args = prepare({k: v.clone() for k, v in inputs.items()}, view) if prepare else inputs
            except ImportError as exc:
                say(f"    {name:13s} skipped: not installed ({exc})")
                continue
            say(f"    {name:13s} {us(_time(torch, fn, (args, view), iters))} µs")
        del inputs
        torch.cuda.empty_cache()


def flce_memory(torch) -> None:
    """Peak bytes allocated during one forward + backward beyond the inputs, N=8192, H=4096,
    V=128256 bf16: torch eager (materialised logits), Liger's loss module, and regen's bound
    (outputs + recipe workspaces; a kernel allocates nothing else)."""
    from regen.profile import memory_bytes
    from regen.project import Project
    from regen.spec import Case
    from regen.store import Store
    from regen import expr

    n, h, v = 8192, 4096, 128256
    hid = torch.randn(n, h, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(v, h, device="cuda", dtype=torch.bfloat16) * (2 / h ** 0.5))
    t = torch.randint(0, v, (n,), device="cuda")

    def peak(run) -> int | None:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        try:
            run()
        except Exception as exc:  # noqa: BLE001
            say(f"    raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            return None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    def eager():
        hh, ww = hid.detach().requires_grad_(True), w.detach().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy((hh @ ww.T).float(), t)
        loss.backward()

    def liger():
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        hh, ww = hid.detach().requires_grad_(True), w.detach().requires_grad_(True)
        LigerFusedLinearCrossEntropyLoss()(ww, hh, t).backward()

    say("fused linear cross-entropy, N=8192 H=4096 V=128256 bf16: peak memory beyond the inputs")
    for name, run in (("torch eager", eager), ("liger", liger)):
        try:
            b = peak(run)
        except ImportError as exc:
            say(f"  {name:12s} skipped: not installed ({exc})")
            continue
        say(f"  {name:12s} {b / 2**30:8.2f} GiB" if b is not None else f"  {name:12s} failed")
    project = Project(ROOT)
    spec = project.spec("fused_linear_cross_entropy")
    case = Case.model_validate({"N": n, "H": h, "V": v, "dtype": "bfloat16"})
    bound = expr.evaluate(spec.profile.memory, spec.case_env(case))
    entry = Store(ROOT / "cache").current("fused_linear_cross_entropy", TARGET)
    if entry is not None:
        say(f"  {'regen':12s} {memory_bytes(spec, entry.recipe(), case) / 2**30:8.2f} GiB "
            f"(outputs + workspaces of its recipe; the spec allows {bound / 2**30:.2f} GiB)")
    else:
        say(f"  {'regen':12s} no {TARGET} artifact; the spec allows {bound / 2**30:.2f} GiB")


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        say("needs a CUDA GPU")
        return 2
    t0 = time.monotonic()
    say(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for kernel in KERNELS:
        left = BUDGET_S - (time.monotonic() - t0)
        if left < 20:
            say(f"{kernel}: skipped, the time budget is spent")
            continue
        say(f"{kernel}:")
        if has_artifact(kernel):
            rows = regen_bench(kernel, min(left, 90.0)) or []
            for r in rows:
                b, peers = r.get("baselines") or {}, r.get("peers") or {}
                say(f"  {r['case']}: regen {us(r.get('median_s'))} µs, eager "
                    f"{us(b.get('torch_eager'))}, compile {us(b.get('torch_compile'))}, "
                    + ", ".join(f"{k} {us(v)}" for k, v in sorted(peers.items())))
                best = r.get("best_peer")
                if best and r.get("median_s"):
                    say(f"    best peer {best}: regen is {peers[best] / r['median_s']:.2f}x")
                for k, note in sorted((r.get("peer_notes") or {}).items()):
                    say(f"    {k}: {note}")
        else:
            direct(kernel, torch)
    if BUDGET_S - (time.monotonic() - t0) > 15:
        flce_memory(torch)
    say(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
