"""Host overhead of a regen.ops call against torch's own op on a tiny tensor (the claim: within
1.5x of the dispatch cost of the equivalent torch op, so small shapes are not lost to Python).

    python benchmarks/ops_overhead.py [--device cpu|cuda] [--calls N]

A tiny tensor makes the kernel's own time negligible: what is measured is the host path (torch's
dispatcher, regen.ops' plan lookup, output allocation, the launch). CUDA calls are launched
back to back and synchronised once, so the figure is the launch rate the host sustains. Each
figure is the best of several interleaved rounds (the machine may be shared). The ratio column
compares regen.ops with the torch op doing the same work; the goal is <= 1.5x. The issue
column is the host's own time per call before the final sync: a per-call figure well above it
means the GPU, not the host, set the rate (the kernel itself is slower than the launches).
"""

from __future__ import annotations

import argparse
import time

GOAL = 1.5  # regen.ops per call / the torch op's, on a tiny tensor

PAIRS = (  # (name, torch op, regen op) on a [1, 8] (or [1, 16] for swiglu) tensor
    "rmsnorm", "softmax", "swiglu",
)


def measure(device: str = "cpu", calls: int = 2000, rounds: int = 7) -> list[dict]:
    import torch
    import torch.nn.functional as F

    import regen.ops as ops

    x = torch.randn(1, 8, device=device)
    w = torch.randn(8, device=device)
    x2 = torch.randn(1, 16, device=device)
    fns = {
        "rmsnorm": (lambda: F.rms_norm(x, (8,), w, 1e-6), lambda: ops.rmsnorm(x, w, 1e-6),
                    "F.rms_norm"),
        "softmax": (lambda: torch.softmax(x, -1), lambda: ops.softmax(x), "torch.softmax"),
        "swiglu": (lambda: F.silu(x2[:, :8]) * x2[:, 8:], lambda: ops.swiglu(x2),
                   "F.silu(a) * b"),
    }
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    rows = []
    for name, (ref, mine, label) in fns.items():
        column = ops.runs(name, *((x, w, 1e-6) if name == "rmsnorm" else (x2,) if name == "swiglu"
                                  else (x,)))
        best = {"torch": float("inf"), "regen": float("inf")}
        issue = {"torch": float("inf"), "regen": float("inf")}  # host time before the sync
        for fn in (ref, mine):
            for _ in range(50):
                fn()
        sync()
        for _ in range(rounds):
            for key, fn in (("torch", ref), ("regen", mine)):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                t1 = time.perf_counter()
                sync()
                best[key] = min(best[key], (time.perf_counter() - t0) / calls)
                issue[key] = min(issue[key], (t1 - t0) / calls)
        rows.append({"kernel": name, "torch_op": label, "torch_us": best["torch"] * 1e6,
                     "regen_us": best["regen"] * 1e6, "ratio": best["regen"] / best["torch"],
                     "torch_issue_us": issue["torch"] * 1e6, "regen_issue_us": issue["regen"] * 1e6,
                     "runs": column or "torch baseline"})
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'kernel':9} {'torch op':15} {'torch us':>9} {'regen.ops us':>13} {'ratio':>6} "
             f"{'goal <= 1.5x':12}  {'issue us (torch/regen)':22}  runs"]
    for r in rows:
        verdict = "met" if r["ratio"] <= GOAL else "NOT met"
        lines.append(f"{r['kernel']:9} {r['torch_op']:15} {r['torch_us']:9.2f} {r['regen_us']:13.2f} "
                     f"{r['ratio']:5.2f}x {verdict:12}  "
                     f"{r['torch_issue_us']:9.2f} / {r['regen_issue_us']:9.2f}  {r['runs']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(table(measure(args.device, args.calls)), flush=True)


if __name__ == "__main__":
    main()
