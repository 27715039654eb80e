"""Child side: the buffers one launch sees. Inputs come from the oracle (checked against the
signature), outputs and workspaces are fresh and poisoned, in-place outputs start as input clones;
the timed loop perturbs inputs between iterations so no two see the same contents."""

from __future__ import annotations

from types import SimpleNamespace

from .compare import OracleError, poison


class Buffers:
    def __init__(self, spec, recipe, oracle, device: str):
        import torch

        self.torch, self.spec, self.recipe, self.oracle, self.device = torch, spec, recipe, oracle, device
        self.inplace = {t.inplace_of for t in spec.signature.outputs if t.inplace_of}

    def dtype(self, name: str):
        return getattr(self.torch, name)

    def case_view(self, case):
        """The case object the oracle receives."""
        env = self.spec.case_env(case)
        params = {p.name: env[p.name] for p in self.spec.signature.params}
        return SimpleNamespace(sizes=dict(case.sizes), dtype=self.dtype(env["T"]),
                               params=params, dist=case.dist, device=self.device,
                               name=case.label(self.spec.signature.dtypes[0]))

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
            inputs[t.name] = x.to(self.device).contiguous()
        return inputs

    def poisoned(self, case, inputs: dict, kind: str) -> dict:
        """Fresh output and workspace buffers, poisoned; in-place outputs start as input clones."""
        from regen.recipe import workspace_shapes

        torch = self.torch
        bufs = {}
        for t in self.spec.signature.outputs:
            if t.inplace_of:
                bufs[t.name] = inputs[t.inplace_of]
                continue
            dtype = self.dtype(self.spec.tensor_dtype(t, case))
            shape = self.spec.tensor_shape(t, case)
            bufs[t.name] = poison(torch.empty(shape, dtype=dtype, device=self.device), kind)
        for name, (dtype, shape, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            buf = torch.empty(shape, dtype=self.dtype(dtype), device=self.device)
            bufs[name] = buf.zero_() if zero else poison(buf, kind)
        return bufs

    def refresh(self, case, bufs: dict, kind: str) -> None:
        """Re-poison outputs and workspaces (zeroed ones re-zeroed) before another launch."""
        from regen.recipe import workspace_shapes

        for t in self.spec.signature.outputs:
            if not t.inplace_of:
                poison(bufs[t.name], kind)
        for name, (_, _, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            bufs[name].zero_() if zero else poison(bufs[name], kind)

    def restore_inplace(self, inputs: dict, shadow: dict) -> None:
        for name in self.inplace:
            inputs[name].copy_(shadow[name])

    def perturb(self, inputs: dict, shadow: dict, donor: dict) -> None:
        """Swap a random 1/512 of the positions of every floating-point input with the donor set.
        Both are independent draws of the oracle's distribution, so the inputs stay valid (per
        position), but no two timed iterations see the same contents: a cache keyed on pointers,
        shapes or sampled elements returns stale outputs, which the check after timing catches."""
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
