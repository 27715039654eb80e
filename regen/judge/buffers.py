"""Child side: the buffers one launch sees. Inputs come from the oracle (checked against the
signature), outputs and workspaces are fresh and filled, in-place outputs start as input clones;
the timed loop perturbs inputs between iterations so no two see the same contents.

Nothing a launch sees tells it it is being judged. Every buffer is placed at a random offset
(a multiple of the alignment the target notes promise: 256 bytes on a GPU, 64 on the host) inside
a padded allocation, so no pointer is page-aligned by rule. Every output is filled before every
launch with a fill drawn per run (`Fill`): NaN with a random payload, a random finite value, a
random value per element, zeros, or (in the timed loop) whatever the previous launch left. A fill
is never a fixed value a kernel can probe for, and half the kinds are what a production buffer
holds (zeros of fresh memory, leftovers). What the fill was is kept, so an element the candidate
never wrote is still found (compare.py).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

from .compare import OracleError

# what an output may be filled with before a run; "keep" (the previous launch's outputs) only in
# the timed loop, where production calls see exactly that
FILL_KINDS = ("nan", "value", "noise", "zeros")
TIMED_FILL_KINDS = FILL_KINDS + ("keep",)
GPU_ALIGN, HOST_ALIGN = 256, 64   # what the target notes promise of a base pointer (and TMA's 16)
MAX_SLACK = 4096                   # offsets vary over a page


class Fills(dict):
    """Per output name, a copy of what the buffer held before the launch (None: not kept)."""


class Buffers:
    def __init__(self, spec, recipe, oracle, device: str, rng: random.Random | None = None):
        import torch

        self.torch, self.spec, self.recipe, self.oracle, self.device = torch, spec, recipe, oracle, device
        self.inplace = {t.inplace_of for t in spec.signature.outputs if t.inplace_of}
        self.rng = rng or random.SystemRandom()
        self.align = HOST_ALIGN if device == "cpu" else GPU_ALIGN
        self._noise: dict[tuple, object] = {}

    def dtype(self, name: str):
        return getattr(self.torch, name)

    # -- placement -------------------------------------------------------------------------
    def empty(self, shape, dtype):
        """A contiguous tensor at a random aligned offset inside a padded allocation."""
        torch = self.torch
        numel = 1
        for s in shape:
            numel *= int(s)
        esize = torch.empty(0, dtype=dtype).element_size()
        step = max(1, self.align // esize)
        slots = MAX_SLACK // self.align
        raw = torch.empty(numel + step * slots + step, dtype=dtype, device=self.device)
        # the allocation's own base alignment (torch: 64 bytes host, 512 device) is rounded to ours
        skew = (-(raw.data_ptr() % self.align) // esize) % step if raw.data_ptr() % esize == 0 else 0
        start = skew + step * self.rng.randrange(slots)
        return raw[start:start + numel].view(*shape) if shape else raw[start:start + 1].view(())

    def place(self, t):
        """A copy of `t` at a random offset (inputs, their clones)."""
        out = self.empty(list(t.shape), t.dtype)
        return out.copy_(t)

    def case_view(self, case):
        """The case object the oracle receives."""
        env = self.spec.case_env(case)
        params = {p.name: env[p.name] for p in self.spec.signature.params}
        bound = self.spec.case_tolerance(case)
        return SimpleNamespace(sizes=dict(case.sizes), dtype=self.dtype(env["T"]),
                               params=params, dist=case.dist, device=self.device,
                               name=case.label(self.spec.signature.dtypes[0]),
                               tolerance=None if bound is None else
                               SimpleNamespace(atol=bound.atol, rtol=bound.rtol))

    def make_inputs(self, case, view, seed: int) -> dict:
        torch = self.torch
        inputs = self.oracle.make_inputs(view, seed)
        for t in self.spec.signature.inputs:
            if t.name not in inputs:
                raise OracleError(f"make_inputs() did not return input {t.name!r}")
            x = inputs[t.name]
            want_dtype = self.dtype(self.spec.tensor_dtype(t, case))
            want_shape = list(self.spec.tensor_shape(t, case))
            if type(x) is not torch.Tensor:
                raise OracleError(f"make_inputs() returned {type(x).__name__} for {t.name!r}")
            if x.dtype != want_dtype or list(x.shape) != want_shape:
                raise OracleError(f"make_inputs() returned {t.name} as {x.dtype} {list(x.shape)}; "
                                  f"the signature says {want_dtype} {want_shape}")
            inputs[t.name] = self.place(x.to(self.device))
        return inputs

    def clones(self, inputs: dict) -> dict:
        return {k: self.place(v) for k, v in inputs.items()}

    # -- fills -----------------------------------------------------------------------------
    def draw_kind(self, timed: bool = False) -> str:
        return self.rng.choice(TIMED_FILL_KINDS if timed else FILL_KINDS)

    def fill(self, buf, kind: str, avoid=None):
        """Fill `buf` with one run's fill of `kind`; where `avoid` (an earlier fill) holds the
        same bits, change them, so two runs never share a fill element."""
        from .compare import bits_of

        torch, rng = self.torch, self.rng
        if kind == "keep" or buf.numel() == 0:
            return buf
        if buf.dtype == torch.bool:
            buf.copy_(torch.rand(buf.shape, device=buf.device) < rng.random()) if kind != "zeros" \
                else buf.fill_(False)
        elif not buf.dtype.is_floating_point:
            info = torch.iinfo(buf.dtype)
            if kind == "zeros":
                buf.zero_()
            elif kind == "noise":
                buf.copy_(torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1),
                                        buf.shape, device=buf.device, dtype=torch.int64))
            else:
                buf.fill_(rng.randint(max(info.min, -2**31), min(info.max, 2**31 - 1)))
        elif kind == "zeros":
            buf.zero_()
        elif kind == "nan":
            _fill_nan(buf, rng)
        elif kind == "value":
            buf.fill_(_random_value(buf.dtype, rng))
        else:  # noise: plausible values, a scaled draw (kept per shape: drawing is not free)
            key = (tuple(buf.shape), buf.dtype)
            base = self._noise.get(key)
            if base is None:
                base = self._noise[key] = torch.randn(buf.shape, device=buf.device).to(buf.dtype)
            buf.copy_(base).mul_(_random_scale(rng))
        if avoid is not None:
            same = bits_of(buf) == bits_of(avoid)
            if bool(same.any()):
                flat = bits_of(buf)
                flat[same] ^= 1 if buf.dtype != torch.bool else True
        return buf

    def outputs(self, case, inputs: dict, kind=None) -> dict:
        """Fresh output and workspace buffers (filled with `kind` if given: refresh() otherwise);
        in-place outputs start as input clones."""
        from regen.recipe import workspace_shapes

        bufs = {}
        for t in self.spec.signature.outputs:
            if t.inplace_of:
                bufs[t.name] = inputs[t.inplace_of]
                continue
            bufs[t.name] = self.empty(self.spec.tensor_shape(t, case),
                                      self.dtype(self.spec.tensor_dtype(t, case)))
        for name, (dtype, shape, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            bufs[name] = self.empty(shape, self.dtype(dtype))
        if kind is not None:
            self.refresh(case, bufs, kind)
        return bufs

    def refresh(self, case, bufs: dict, kind: str, keep: bool = False, avoid: Fills | None = None
                ) -> Fills | None:
        """Fill outputs and workspaces (zeroed ones re-zeroed) before another launch; with `keep`,
        return a copy of each output's fill (what compare.py needs to find unwritten elements)."""
        from regen.recipe import workspace_shapes

        fills = Fills() if keep else None
        for t in self.spec.signature.outputs:
            if t.inplace_of:
                continue
            self.fill(bufs[t.name], kind, avoid.get(t.name) if avoid else None)
            if keep:
                fills[t.name] = bufs[t.name].clone()
        for name, (_, _, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            bufs[name].zero_() if zero else self.fill(bufs[name], kind)
        return fills

    def restore_inplace(self, inputs: dict, shadow: dict) -> None:
        for name in self.inplace:
            inputs[name].copy_(shadow[name])

    def perturb(self, inputs: dict, shadow: dict, donor: dict) -> None:
        """Swap a random 1/512 of the positions of every floating-point input with the donor set.
        Both are independent draws of the oracle's distribution, so the inputs stay valid (per
        position), but no two timed iterations see the same contents: a cache keyed on pointers,
        shapes or sampled elements returns stale outputs, which the checked iterations catch."""
        torch = self.torch
        positions: dict[int, object] = {}
        for t in self.spec.signature.inputs:
            x = inputs[t.name]
            if t.name in self.inplace or not x.dtype.is_floating_point or x.numel() == 0:
                continue
            n = x.numel()
            if n not in positions:  # same positions in same-sized inputs: relations per position hold
                positions[n] = torch.randint(n, (max(1, n // 512),), device=x.device)
            idx = positions[n]
            mine, theirs = shadow[t.name].view(-1)[idx].clone(), donor[t.name].view(-1)[idx].clone()
            x.view(-1)[idx] = theirs
            shadow[t.name].view(-1)[idx] = theirs
            donor[t.name].view(-1)[idx] = mine


# -- fill values -------------------------------------------------------------------------------
_NAN = {  # dtype name: (exponent-all-ones pattern, mantissa bits, quiet bit, integer view)
    "float32": (0x7F800000, 23, 0x00400000, "int32"),
    "float64": (0x7FF0000000000000, 52, 0x0008000000000000, "int64"),
    "float16": (0x7C00, 10, 0x0200, "int16"),
    "bfloat16": (0x7F80, 7, 0x0040, "int16"),
}


def _fill_nan(buf, rng) -> None:
    """NaN with a random sign and payload, never the canonical quiet NaN a computation gives."""
    import torch

    name = str(buf.dtype).removeprefix("torch.")
    if name not in _NAN:
        buf.fill_(float("nan"))
        return
    exp, mbits, quiet, iview = _NAN[name]
    while True:
        mant = rng.randrange(1, 1 << mbits)
        if mant != quiet:
            break
    pattern = exp | mant | (rng.getrandbits(1) << (mbits + (8 if name == "float32" else
                                                             11 if name == "float64" else
                                                             5 if name == "float16" else 8)))
    width = buf.element_size() * 8
    if pattern >= 1 << (width - 1):
        pattern -= 1 << width  # as a signed integer of the view
    buf.view(getattr(torch, iview)).fill_(pattern)


def _random_scale(rng) -> float:
    return rng.choice((1.0, -1.0)) * 10 ** rng.uniform(-3, 3)


def _random_value(dtype, rng) -> float:
    """A finite value of random sign and magnitude that the dtype can hold."""
    import torch

    hi = 4.0 if dtype == torch.float16 else 30.0
    return rng.choice((1.0, -1.0)) * 10 ** rng.uniform(-hi, hi)
