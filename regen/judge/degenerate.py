"""The `degenerate-oracle` guard, both halves. The child notes, per case, whether the reference
output is constant (within tolerance) and whether it changes with the seed, and which inputs are the
same bits for every seed; the parent fails a run whose every case is constant or seed-independent
(such an oracle verifies nothing, since a kernel could pass it without reading its inputs), or
where a normal-distribution case has an input the seed does not change (a kernel could recompute
that input, e.g. a rotary table from a fixed base, instead of reading it)."""

from __future__ import annotations

DEGENERATE = ("the oracle is degenerate: on every case the reference output is constant within "
              "tolerance or does not depend on the seed, so a kernel can pass without reading "
              "its inputs (fix the oracle's reference or make_inputs)")


def degenerate_oracle(results: list[dict]) -> str | None:
    """Parent side. The reason an oracle verifies nothing: on every case (every normal-distribution
    case when there are any) its reference output is constant within tolerance or the same for
    every seed."""
    noted = [r for r in results if "ref_constant" in r]
    normal = [r for r in noted if r.get("dist", "normal") == "normal"]
    considered = normal or noted
    if not considered:
        return None
    if all(r["ref_constant"] or r.get("seed_dependent") is False for r in considered):
        return DEGENERATE
    return fixed_inputs(results)


def fixed_inputs(results: list[dict]) -> str | None:
    """The first normal-distribution case with an input identical across its seeds."""
    for r in results:
        if r.get("dist", "normal") == "normal" and r.get("fixed_inputs"):
            names = ", ".join(r["fixed_inputs"])
            return (f"the oracle is degenerate: make_inputs returns the same {names} for every "
                    f"seed (case {r['case']}); every input must be drawn from the seed, or a "
                    "kernel can recompute it instead of reading it")
    return None


class ReferenceNotes:
    """Child side, computed where the reference lives; large outputs are compared across seeds by
    their sums only."""

    def __init__(self, spec):
        import torch

        self.torch, self.spec = torch, spec
        self.notes: dict[str, dict] = {}

    def note(self, case, want: dict) -> None:
        torch = self.torch
        label = case.label(self.spec.signature.dtypes[0])
        tol = self.spec.case_tolerance(case)
        atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
        note = self.notes.setdefault(label, {"dist": case.dist, "constant": True,
                                             "seed_dependent": None, "first": None})
        outs = {k: v.detach().to(torch.float64) for k, v in want.items()}
        for w in outs.values():
            note["constant"] = note["constant"] and self._constant(w, atol, rtol)
        small = sum(w.numel() for w in outs.values()) <= 1 << 24
        kept = outs if small else {k: self._sums(w) for k, w in outs.items()}
        if note["first"] is None:
            note["first"] = kept
            return
        differs = any(self._differs(w, note["first"][k], small, atol, rtol) for k, w in kept.items())
        note["seed_dependent"] = bool(note["seed_dependent"]) or differs

    def note_inputs(self, case, inputs: dict) -> None:
        """Remember each input's bits (a digest) to learn which inputs the seed never changes.
        Inputs under 8 elements are left out: a small discrete draw may repeat honestly."""
        label = case.label(self.spec.signature.dtypes[0])
        note = self.notes.setdefault(label, {"dist": case.dist, "constant": True,
                                             "seed_dependent": None, "first": None})
        seen = note.setdefault("inputs", {})
        for name, x in inputs.items():
            if x.numel() >= 8:
                seen.setdefault(name, set()).add(self._digest(x))
        note["input_sets"] = note.get("input_sets", 0) + 1

    def _digest(self, x) -> str:
        import hashlib

        from .compare import bits_of

        ints = bits_of(x.detach().contiguous())
        if ints.numel() <= 1 << 22:
            return hashlib.blake2b(ints.cpu().numpy().tobytes(), digest_size=16).hexdigest()
        wide = ints.to(self.torch.int64)  # benchmark-sized: sums of the bits, on the device
        weights = self.torch.arange(wide.numel(), device=wide.device, dtype=self.torch.int64) % 65521
        return f"{int(wide.sum())}:{int((wide * weights).sum())}"

    def _fixed(self, note: dict) -> list[str]:
        if note.get("input_sets", 0) < 2:
            return []
        return sorted(n for n, digests in note.get("inputs", {}).items() if len(digests) == 1)

    def _sums(self, w) -> tuple[float, float]:
        """(sum, sum of squares) of a benchmark-sized output, non-finite elements as 0; without
        a full-size temporary where every element is finite (a 10^9-element GEMM output)."""
        torch = self.torch
        if not bool(torch.isfinite(w).all()):
            w = torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)
        return float(w.sum()), float(torch.linalg.vector_norm(w)) ** 2

    def _constant(self, w, atol: float, rtol: float) -> bool:
        torch = self.torch
        finite = w if bool(torch.isfinite(w).all()) else w[torch.isfinite(w)]
        if w.numel() <= 1 or finite.numel() < w.numel() or finite.numel() == 0:
            return w.numel() > 1 and finite.numel() == 0
        lo, hi = float(finite.min()), float(finite.max())
        return (hi - lo) / 2 <= atol + rtol * abs((lo + hi) / 2)

    def _differs(self, w, f, small: bool, atol: float, rtol: float) -> bool:
        torch = self.torch
        if not small or not isinstance(f, torch.Tensor):
            return w != f
        both = torch.isfinite(w) & torch.isfinite(f)
        return not torch.equal(torch.isfinite(w), torch.isfinite(f)) or \
            bool(((w - f).abs() > atol + rtol * f.abs())[both].any())

    def of(self, label: str) -> dict | None:
        """What a case's entry reports: ref_constant and seed_dependent (None: never noted)."""
        note = self.notes.get(label)
        if note is None:
            return None
        out = {"ref_constant": note["constant"], "seed_dependent": note["seed_dependent"]}
        fixed = self._fixed(note)
        if fixed:
            out["fixed_inputs"] = fixed
        return out

    def lint_report(self) -> list[dict]:
        return [{"case": k, "dist": n["dist"], **self.of(k)} for k, n in self.notes.items()]
