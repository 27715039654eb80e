"""Calibrates specs/attention.yaml's tolerance: the error of an honest flash-style kernel (float32
scores and statistics, key tiles of 128 with an online softmax, probabilities rounded to bf16
before P V as a tensor-core kernel does, out rounded to bf16 once) against the float64 oracle,
over the spec's correctness cases and seeds. Prints, per case, the max |err| and the smallest
atol (given rtol) and rtol (given atol) that admit it, and the ratio to the spec's bound.

    python benchmarks/attention_tolerance.py [--seeds 8]
"""

import argparse
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]


def flash_bf16(q, k, v, scale, causal, grp, tile=128):
    """float32 online softmax over key tiles, bf16 probabilities into P V."""
    k = k.float().repeat_interleave(grp, dim=1)
    v = v.float().repeat_interleave(grp, dim=1)
    q = q.float()
    b, h, s, d = q.shape
    m = torch.full((b, h, s, 1), float("-inf"))
    l = torch.zeros(b, h, s, 1)
    acc = torch.zeros(b, h, s, d)
    rows = torch.arange(s).view(s, 1)
    for j0 in range(0, s, tile):
        j1 = min(s, j0 + tile)
        sc = torch.einsum("bhid,bhjd->bhij", q, k[:, :, j0:j1]) * scale
        if causal:
            sc = sc.masked_fill(torch.arange(j0, j1).view(1, -1) > rows, float("-inf"))
        m_new = torch.maximum(m, sc.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new).nan_to_num(0.0)
        p = torch.exp(sc - m_new).nan_to_num(0.0)
        l = l * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + torch.einsum("bhij,bhjd->bhid", p.bfloat16().float(), v[:, :, j0:j1])
        m = m_new
    return {"out": (acc / l).bfloat16(), "lse": (m + torch.log(l)).squeeze(-1)}


def main() -> None:
    from regen.spec import load_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args()
    spec = load_spec(ROOT / "specs" / "attention.yaml")
    mod = importlib.util.spec_from_file_location("attention_oracle", ROOT / "oracles" / "attention.py")
    oracle = importlib.util.module_from_spec(mod)
    mod.loader.exec_module(oracle)
    print(f"{'case':<58} {'max|err|':>9} {'atol@rtol':>10} {'rtol@atol':>10} {'/bound':>7}")
    for case in spec.correctness_cases():
        env = spec.case_env(case)
        tol = spec.case_tolerance(case)
        view = SimpleNamespace(sizes=dict(case.sizes), dtype=torch.bfloat16, dist=case.dist,
                               device="cpu", params={p.name: env[p.name] for p in spec.signature.params})
        worst = [0.0, 0.0, 0.0, 0.0]
        for seed in range(args.seeds):
            x = oracle.make_inputs(view, seed)
            want = oracle.reference(x, view)
            got = flash_bf16(x["q"], x["k"], x["v"], view.params["scale"], view.params["causal"],
                             case.sizes["G"])
            for name in ("out", "lse"):
                w, g = want[name], got[name].double()
                err = (g - w).abs()
                worst[0] = max(worst[0], float(err.max()))
                worst[1] = max(worst[1], float((err - tol.rtol * w.abs()).max()))
                worst[2] = max(worst[2], float(((err - tol.atol) / w.abs().clamp_min(1e-30)).max()))
                worst[3] = max(worst[3], float((err / (tol.atol + tol.rtol * w.abs())).max()))
        print(f"{case.label('bfloat16'):<58} {worst[0]:9.2e} {worst[1]:10.2e} {worst[2]:10.2e} "
              f"{worst[3]:7.3f}")


if __name__ == "__main__":
    main()
