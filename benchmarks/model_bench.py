"""Forward (prefill) time of examples/llama.py: eager, torch.compile, regen.patch()ed (eager and
compiled), and Liger-Kernel's kernels in the same places when liger_kernel is importable.

    python benchmarks/model_bench.py [--layers 16] [--batch 8] [--seq 2048] [--device cuda]
                                     [--dtype bfloat16] [--tiny] [--iters 10]

Forward only; examples/train_step.py times training steps (forward and backward through the
backward specs) against plain PyTorch. Each row: median forward time over --iters
timed runs after warm-up, tokens per second, and the logits' largest difference from eager
relative to the largest eager logit. Rows print as they finish.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _timer(device: str):
    import torch

    if device.startswith("cuda"):
        def timed(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            return out, start.elapsed_time(end) / 1e3
    else:
        def timed(fn):
            t0 = time.perf_counter()
            out = fn()
            return out, time.perf_counter() - t0
    return timed


def liger_patch(model) -> str:
    """Liger-Kernel's RMSNorm and SwiGLU (SiLU * mul) in the example's modules; RoPE and softmax
    stay torch's (Liger's RoPE takes HF's [B, H, S, D] layout with full-width cos/sin)."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    from torch import nn

    class Norm(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.weight, self.eps = m.weight, m.eps

        def forward(self, x):
            return LigerRMSNormFunction.apply(x, self.weight, self.eps)

    class Act(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, dim=-1)
            return LigerSiLUMulFunction.apply(a.contiguous(), b.contiguous())

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            kind = getattr(child, "regen_kernel", None)
            if kind in ("rmsnorm", "swiglu"):
                setattr(parent, name, Norm(child) if kind == "rmsnorm" else Act())
                swapped += 1
    return f"{swapped} modules (RMSNorm, SwiGLU)"


def run(layers=16, batch=8, seq=2048, device="cuda", dtype="bfloat16", tiny=False, iters=10,
        variants=("eager", "torch.compile", "regen", "regen + compile", "liger"), out=print):
    import torch

    import regen
    from examples.llama import Config, build

    cfg = Config.tiny(layers=layers) if tiny else Config(layers=layers)
    base = build(cfg, dtype=getattr(torch, dtype), device=device)
    ids = torch.randint(0, cfg.vocab, (batch, seq), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    timed = _timer(device)
    out(f"model: {cfg.layers} layers, hidden {cfg.hidden}, vocab {cfg.vocab}; prefill "
        f"{batch} x {seq} tokens, {dtype} on {device}; forward only (training steps: examples/train_step.py)")
    out(f"{'variant':16} {'median ms':>10} {'tokens/s':>12} {'vs eager':>9} {'max |dlogit|/max|logit|':>24}  note")
    reference, eager_s, rows = None, None, []
    for variant in variants:
        model, note = copy.deepcopy(base), ""
        try:
            if variant.startswith("regen"):
                note = ", ".join(f"{n} {k}" for k, n in regen.patch(model).items())
            if variant == "liger":
                note = liger_patch(model)
            if "compile" in variant:
                model = torch.compile(model)
        except ImportError as exc:
            out(f"{variant:16} skipped: {exc}")
            continue
        with torch.no_grad():
            t0 = time.perf_counter()
            logits, _ = timed(lambda: model(ids))     # first call: compiles, loads binaries
            first = time.perf_counter() - t0
            for _ in range(2):
                timed(lambda: model(ids))
            times = [timed(lambda: model(ids))[1] for _ in range(iters)]
        median = statistics.median(times)
        if reference is None:
            reference, eager_s = logits.float(), median
            err = 0.0
        else:
            err = ((logits.float() - reference).abs().max() / reference.abs().max()).item()
        row = {"variant": variant, "median_ms": median * 1e3, "tokens_per_s": batch * seq / median,
               "speedup": eager_s / median, "rel_err": err, "first_call_s": first, "note": note}
        rows.append(row)
        out(f"{variant:16} {row['median_ms']:10.2f} {row['tokens_per_s']:12.0f} "
            f"{row['speedup']:8.2f}x {err:24.2e}  first call {first:.1f} s{'; ' + note if note else ''}")
        del model, logits
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--tiny", action="store_true", help="Config.tiny() widths (CPU smoke run)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--variants", default="eager,torch.compile,regen,regen + compile,liger")
    a = p.parse_args()
    run(a.layers, a.batch, a.seq, a.device, a.dtype, a.tiny, a.iters,
        tuple(v.strip() for v in a.variants.split(",")), out=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
