"""Which SDPA backend torch picks for specs/attention.yaml's GPU bench shapes, and what each backend
reaches there: per shape, the backend of torch._fused_sdp_choice, then the public
scaled_dot_product_attention timed with torch's choice and with each backend forced (flash,
cuDNN, memory-efficient; a backend that refuses the shape prints why), in TFLOP/s (the spec's
FLOP count: causal counts only the unmasked pairs) and % of the target's measured bf16 peak.
regen's own kernel is timed by `regen verify attention -t h200` (its bench rows, beside the
oracle's baseline: torch's choice called through the aten op that also returns lse).

    python benchmarks/attention_sdpa.py [--target h200]     # on the GPU machine
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed(fn, iters: int = 20, warmup: int = 3) -> float:
    """Median CUDA-event time of fn (the ceilings benchmark's timer, one method for both)."""
    from benchmarks.ceilings import timed as event_timed
    return event_timed(fn, iters, warmup)


def main() -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from regen.spec import load_spec
    from regen.target import load_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h200")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    spec = load_spec(REPO / "specs" / "attention.yaml")
    peak = load_target(REPO / "targets" / f"{args.target}.yaml").peak("flops_bfloat16").value
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, peak {peak / 1e12:.0f} TFLOP/s")
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for case in spec.cases:
        if not case.bench or (case.targets and "nvidia" not in case.targets):
            continue
        env = spec.case_env(case)
        b, hkv, g, s, d = (case.sizes[n] for n in ("B", "Hkv", "G", "S", "D"))
        causal, scale = bool(env["causal"]), float(env["scale"])
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, hkv * g, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        flops = spec.case_flops(case)
        choice = SDPBackend(int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale,
                                                        enable_gqa=g > 1))).name

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=g > 1)

        row = [f"{case.label('bfloat16')}: torch picks {choice}"]
        for name, backend in [("default", None), *backends.items()]:
            try:
                if backend is None:
                    sec = timed(sdpa)
                else:
                    with sdpa_kernel([backend]):
                        sec = timed(sdpa)
                row.append(f"{name} {sec * 1e6:.0f} us {flops / sec / 1e12:.0f} TFLOP/s "
                           f"({100 * flops / sec / peak:.0f}%)")
            except RuntimeError as exc:
                row.append(f"{name}: {str(exc).splitlines()[0][:80]}")
        print("\n    ".join(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
