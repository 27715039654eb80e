"""Training steps of the Llama-style decoder (examples/llama.py) with forward AND backward through
regen ops, against the same steps in plain PyTorch.

    python examples/train_step.py [--ops regen.ops | --ops regen_kernels] [--device cpu|cuda]
                                  [--dtype float32|bfloat16] [--steps 3] [--size tiny|1b]
                                  [--layers N] [--batch 2] [--seq 32]

Two copies of the model start from the same random weights; one is patched (`patch(model)` of
regen.ops, or of a package written by `regen export`, which needs no regen installed). Each step
is forward, cross-entropy, backward (RMSNorm, RoPE, SwiGLU and cross-entropy differentiate
through their backward ops' autograd formulas) and an AdamW update. Printed per step: both
losses, the largest gradient difference, both step times; then what every op ran (verified
column, or torch's baseline and why: the RegenOpsWarnings seen). Attention is
F.scaled_dot_product_attention: softmax has no backward spec, so it is not used in training.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama import Config, build  # noqa: E402


def batch(cfg: Config, b: int, s: int, device, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab, (b, s), generator=g)
    targets = ids.roll(-1, dims=1)
    targets[:, -1] = -100  # no next token: ignored, as the spec's -100 says
    return ids.to(device), targets.to(device)


def step(model, opt, ids, targets) -> tuple[float, dict]:
    """One training step; (loss, {parameter name: its gradient before the update})."""
    opt.zero_grad(set_to_none=True)
    loss = model.loss(ids, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return loss.item(), grads


def compare(ops: str = "regen.ops", cfg: Config | None = None, device: str = "cpu",
            dtype=torch.float32, steps: int = 3, b: int = 2, s: int = 32, lr: float = 1e-3,
            out=None) -> list[dict]:
    """`steps` training steps of the plain and the patched model from one initialisation; per
    step the losses, the largest |gradient difference| over all parameters, and the times."""
    module = importlib.import_module(ops)
    cfg = cfg or Config.tiny()
    plain, patched = build(cfg, dtype, device), build(cfg, dtype, device)
    plain.train(), patched.train()
    # regen.patch for regen.ops (regen.ops.patch is the module it lives in); an exported
    # package's own patch()
    patch = importlib.import_module("regen").patch if ops == "regen.ops" else module.patch
    counts = patch(patched)
    if out:
        out(f"patched ({ops}): {counts}; differentiable ops: {', '.join(module.differentiable())}")
    opt_plain = torch.optim.AdamW(plain.parameters(), lr=lr)
    opt_patched = torch.optim.AdamW(patched.parameters(), lr=lr)
    ids, targets = batch(cfg, b, s, device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    rows = []
    for i in range(steps):
        sync()
        t0 = time.perf_counter()
        want, want_grads = step(plain, opt_plain, ids, targets)
        sync()
        t1 = time.perf_counter()
        got, got_grads = step(patched, opt_patched, ids, targets)
        sync()
        t2 = time.perf_counter()
        diff = max((got_grads[n].float() - g.float()).abs().max().item()
                   for n, g in want_grads.items())
        scale = max(g.float().abs().max().item() for g in want_grads.values())
        rows.append({"step": i, "loss_torch": want, "loss_regen": got, "max_grad_diff": diff,
                     "max_grad": scale, "torch_s": t1 - t0, "regen_s": t2 - t1})
        if out:
            out(f"step {i}: loss torch {want:.6f}  regen {got:.6f}  |dloss| {abs(got - want):.2e}  "
                f"max|dgrad| {diff:.2e} (max|grad| {scale:.2e})  "
                f"time torch {1e3 * (t1 - t0):.1f} ms  regen {1e3 * (t2 - t1):.1f} ms")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="regen.ops",
                        help="regen.ops, or the import name of an exported package")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", default="tiny", choices=["tiny", "1b"])
    parser.add_argument("--layers", type=int)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    args = parser.parse_args()
    cfg = Config.tiny() if args.size == "tiny" else Config()
    if args.layers:
        from dataclasses import replace

        cfg = replace(cfg, layers=args.layers)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        compare(args.ops, cfg, args.device, getattr(torch, args.dtype), args.steps, args.batch,
                args.seq, out=print)
    said = sorted({str(w.message) for w in seen if w.category.__name__ == "RegenOpsWarning"})
    print("what ran: every op its verified column" if not said else
          "what ran instead of a verified column:\n  " + "\n  ".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
