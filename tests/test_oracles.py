"""The library's oracles: inputs follow the signature and the seed, references agree with torch's
own functions (float64), tolerances admit honest float32 math and reject the precision losses a
generated kernel can hide, and check() stays quiet on the truth and names the invariant a corrupt
output breaks."""

from __future__ import annotations

import pytest

from support.library import ROW_KERNELS, excess, kernels, oracle, oracle_case, spec

BIG = 300_000  # row-kernel cases with more elements are left to the emulation and runtime tests


def _small(kernel, case) -> bool:
    return kernel not in ROW_KERNELS or case.sizes["M"] * case.sizes["N"] <= BIG


# -- inputs ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", kernels())
def test_make_inputs_follow_the_signature_and_the_seed(kernel):
    import torch
    s, o = spec(kernel), oracle(kernel)
    for case in s.correctness_cases():
        if not _small(kernel, case):
            continue
        view = oracle_case(s, case)
        a, b, c = (o.make_inputs(view, seed) for seed in (5, 5, 6))
        for t in s.signature.inputs:
            assert a[t.name].dtype == getattr(torch, s.tensor_dtype(t, case))
            assert list(a[t.name].shape) == s.tensor_shape(t, case)
            assert a[t.name].is_contiguous()
            assert torch.equal(a[t.name], b[t.name]), "same seed, same inputs"
        if case.dist != "constant":
            assert any(not torch.equal(a[t.name], c[t.name]) for t in s.signature.inputs), \
                f"{view.name}: inputs do not depend on the seed"


def test_cross_entropy_inputs_keep_targets_live():
    import torch
    s, o = spec("cross_entropy"), oracle("cross_entropy")
    for case in s.correctness_cases():
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 0)
        t = inputs["targets"]
        counted = t != -100
        assert counted.any(), "a batch with no counted token is undefined"
        assert bool(((t >= 0) & (t < case.sizes["V"]) | ~counted).all())
        picked = inputs["logits"].gather(1, t.clamp(min=0)[:, None]).squeeze(1)
        assert torch.isfinite(picked[counted].float()).all(), "a target is masked"
        if case.dist == "neg_inf_mask":
            assert torch.isinf(inputs["logits"].float()).any()
        if case.dist == "ignore":
            assert (~counted).any()


# -- references against torch's own functions ---------------------------------------------------------

def torch_reference(kernel, inputs, view, dtype):
    """torch's own implementation of a row kernel, in `dtype` arithmetic."""
    import torch
    import torch.nn.functional as F
    x = inputs["x"].to(dtype)
    if kernel == "softmax":
        return {"y": torch.softmax(x, -1)}
    n = x.shape[-1]
    if kernel == "rmsnorm":
        return {"y": F.rms_norm(x, (n,), inputs["weight"].to(dtype), view.params["eps"])}
    if kernel == "layernorm":
        return {"y": F.layer_norm(x, (n,), inputs["weight"].to(dtype), inputs["bias"].to(dtype),
                                  view.params["eps"])}
    return {"y": F.silu(x[:, : n // 2]) * x[:, n // 2:]}


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_row_kernel_reference_agrees_with_torch(kernel):
    import torch
    s, o = spec(kernel), oracle(kernel)
    for case in s.correctness_cases():
        if not _small(kernel, case):
            continue
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 0)
        ref = o.reference(inputs, view)["y"]
        want = torch_reference(kernel, inputs, view, torch.float64)["y"]
        assert ref.dtype == torch.float64
        torch.testing.assert_close(ref, want, rtol=1e-10, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"{case.label('')}: {m}")
        assert o.check(inputs, {"y": ref}, view) == [], case.label("")


def test_cross_entropy_reference_matches_torch():
    import torch
    import torch.nn.functional as F
    s, o = spec("cross_entropy"), oracle("cross_entropy")
    for case in s.correctness_cases():
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 3)
        want = F.cross_entropy(inputs["logits"].to(torch.float64), inputs["targets"],
                               ignore_index=-100, reduction="mean")
        got = o.reference(inputs, view)["loss"]
        assert got.shape == (1,)
        torch.testing.assert_close(got[0], want, rtol=1e-12, atol=1e-12, msg=view.name)


def test_maxpool3d_reference_matches_torch():
    import torch
    import torch.nn.functional as F
    s, o = spec("maxpool3d"), oracle("maxpool3d")
    for case in s.correctness_cases():
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 3)
        want = F.max_pool3d(inputs["x"].to(torch.float32), kernel_size=3, stride=2)
        got = o.reference(inputs, view)["y"]
        assert torch.equal(got, want.to(torch.float64)), view.name
        assert list(got.shape) == s.tensor_shape(s.signature.outputs[0], case)


def test_rope_reference_matches_complex_rotation():
    """Rotate-half RoPE is multiplication of (x_i + j x_(i+half)) by (cos + j sin)."""
    import torch
    s, o = spec("rope"), oracle("rope")
    for case in s.correctness_cases():
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 3)
        x = inputs["x"].to(torch.float64)
        half = x.shape[-1] // 2
        z = torch.complex(x[..., :half], x[..., half:])
        w = torch.complex(inputs["cos"].to(torch.float64), inputs["sin"].to(torch.float64))
        rotated = z * w[None, :, None, :]
        want = torch.cat([rotated.real, rotated.imag], dim=-1)
        torch.testing.assert_close(o.reference(inputs, view)["y"], want, rtol=1e-12,
                                   atol=1e-12, msg=view.name)
        # the tables are Llama's: position 0 is the identity
        assert torch.equal(inputs["cos"][0].float(), torch.ones(half))
        assert torch.equal(inputs["sin"][0].float(), torch.zeros(half))


# -- tolerances ---------------------------------------------------------------------------------------
# Lossy implementations the tolerances must reject: the precision losses a generated kernel can
# hide (statistics or accumulation in the storage dtype, eps outside the square root, the naive
# one-pass variance, computing in bf16 when float32 is declared).

def _tree_sum_in(t, dtype):
    """Pairwise sum over the last dimension with every partial rounded to `dtype`."""
    import torch
    t = t.to(dtype)
    while t.shape[-1] > 1:
        if t.shape[-1] % 2:
            t = torch.cat([t, torch.zeros_like(t[..., :1])], -1)
        t = (t[..., 0::2].float() + t[..., 1::2].float()).to(dtype)
    return t.float()


def _narrow(view):
    import torch
    return torch.bfloat16 if view.dtype == torch.float32 else view.dtype


def lossy(kernel, name, inputs, view):
    import torch
    import torch.nn.functional as F
    xf = inputs["x"].float()
    n = xf.shape[-1]
    eps = view.params.get("eps")
    if name == "sum_in_storage_dtype" and kernel == "softmax":
        e = torch.exp(xf - xf.max(-1, keepdim=True).values)
        return e / _tree_sum_in(e, _narrow(view))
    if name == "exp_in_storage_dtype":
        d = (xf - xf.max(-1, keepdim=True).values).to(_narrow(view))
        e = torch.exp(d).float()
        return e / e.sum(-1, keepdim=True)
    if name == "sum_in_storage_dtype" and kernel == "rmsnorm":
        ms = _tree_sum_in(xf * xf, _narrow(view)) / n
        return xf * torch.rsqrt(ms + eps) * inputs["weight"].float()
    if name == "eps_outside_sqrt":
        rms = torch.sqrt((xf * xf).mean(-1, keepdim=True))
        return xf / (rms + eps) * inputs["weight"].float()
    if name == "one_pass_variance":
        mean = xf.mean(-1, keepdim=True)
        var = ((xf * xf).mean(-1, keepdim=True) - mean * mean).clamp_min(0)
        return (xf - mean) * torch.rsqrt(var + eps) * inputs["weight"].float() + inputs["bias"].float()
    if name == "stats_in_storage_dtype":
        mean = xf.mean(-1, keepdim=True).to(_narrow(view)).float()
        r = torch.rsqrt(((xf - mean) ** 2).mean(-1, keepdim=True) + eps).to(_narrow(view)).float()
        return (xf - mean) * r * inputs["weight"].float() + inputs["bias"].float()
    if name == "math_in_bfloat16":
        x = inputs["x"].to(_narrow(view))
        return (F.silu(x[:, : n // 2].float()).to(x.dtype) * x[:, n // 2:]).float()
    raise KeyError(name)


LOSSY = {"softmax": ["sum_in_storage_dtype", "exp_in_storage_dtype"],
         "rmsnorm": ["sum_in_storage_dtype", "eps_outside_sqrt"],
         "layernorm": ["one_pass_variance", "stats_in_storage_dtype"],
         "swiglu": ["math_in_bfloat16"]}


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_tolerances_admit_float32_math_and_reject_precision_loss(kernel):
    """torch's float32 implementation, rounded once to the output dtype, stays within 60% of the
    tolerance on every case (honest error is at most ~half the tolerance: see the spec); every
    lossy implementation is out of tolerance somewhere."""
    import torch
    s, o = spec(kernel), oracle(kernel)
    honest_worst = {}
    caught = {name: [] for name in LOSSY[kernel]}
    for case in s.correctness_cases():
        if not _small(kernel, case):
            continue
        view = oracle_case(s, case)
        tol = s.case_tolerance(case)
        inputs = o.make_inputs(view, 0)
        ref = o.reference(inputs, view)["y"]
        honest = torch_reference(kernel, inputs, view, torch.float32)["y"].to(view.dtype)
        e = excess(honest, ref, tol)
        if e > honest_worst.get(view.dtype, (0.0, ""))[0]:
            honest_worst[view.dtype] = (e, case.label(""))
        for name in LOSSY[kernel]:
            caught[name].append(excess(lossy(kernel, name, inputs, view).to(view.dtype), ref, tol))
    for dtype, (e, label) in honest_worst.items():
        assert e <= 0.6, f"{dtype}: torch's float32 math uses {e:.2f} of the tolerance on {label}"
    for name, excesses in caught.items():
        assert max(excesses) > 1, f"{name} passes every case (worst {max(excesses):.2f}x tolerance)"


# -- invariants: quiet on the truth, loud on corruption -------------------------------------------

def _reference_as_outputs(s, case, o, view, inputs):
    import torch
    ref = o.reference(inputs, view)
    return {t.name: ref[t.name].to(getattr(torch, s.tensor_dtype(t, case)))
            for t in s.signature.outputs}


@pytest.mark.parametrize("kernel", kernels())
def test_check_accepts_the_reference_in_the_output_dtype(kernel):
    from regen.oracle import run_check
    from support.library import judged_oracle

    s, o = spec(kernel), judged_oracle(kernel)   # a composed spec: its reference is composed
    if not hasattr(o, "check"):
        pytest.skip("check() is optional in the oracle contract")
    for case in s.correctness_cases():
        if not _small(kernel, case):
            continue
        view = oracle_case(s, case)
        inputs = o.make_inputs(view, 1)
        ref = o.reference({k: v.clone() for k, v in inputs.items()}, view)
        outputs = _reference_as_outputs(s, case, o, view, inputs)
        assert run_check(o, inputs, outputs, view, ref) == [], view.name


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_row_kernel_check_names_the_violated_invariant(kernel):
    import torch
    s, o = spec(kernel), oracle(kernel)
    names = {inv.name for inv in s.invariants}
    case = next(c for c in s.correctness_cases() if c.sizes["N"] >= 1000 and c.dist == "normal")
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    y = o.reference(inputs, view)["y"].to(view.dtype)
    assert o.check(inputs, {"y": y}, view) == []
    for broken in (y * 1.25, -y, torch.full_like(y, float("nan"))):
        problems = o.check(inputs, {"y": broken}, view)
        assert problems, "a wrong output passes every invariant"
        assert all(p.split(":")[0] in names for p in problems), problems


def _first_message(kernel, case_name, corrupt):
    s, o = spec(kernel), oracle(kernel)
    case = next(c for c in s.correctness_cases() if c.label(s.signature.dtypes[0]) == case_name)
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 1)
    outputs = _reference_as_outputs(s, case, o, view, inputs)
    corrupt(outputs)
    return " ".join(o.check(inputs, outputs, view))


def test_check_names_the_broken_invariant():
    nan = lambda o: o["loss"].fill_(float("nan"))  # noqa: E731
    assert _first_message("cross_entropy", "large_logits", nan).startswith("finite:")
    neg = lambda o: o["loss"].fill_(-0.5)  # noqa: E731
    assert "nonnegative:" in _first_message("cross_entropy", "N3xV7:float32", neg)
    off = lambda o: o["loss"].add_(0.01)  # noqa: E731
    assert "uniform_rows_give_log_v:" in _first_message("cross_entropy", "all_equal", off)
    big = lambda o: o["loss"].add_(100.0)  # noqa: E731
    assert "within_logit_gap:" in _first_message("cross_entropy", "N17xV1000:float32", big)

    stretch = lambda o: o["y"].mul_(1.05)  # noqa: E731
    assert _first_message("rope", "B1xS33xH4xD128:bfloat16", stretch).startswith("preserves_pair_norm:")
    shift = lambda o: o["y"][:, 0].copy_(o["y"][:, 0].roll(1, dims=-1))  # noqa: E731
    assert "identity_at_position_zero:" in _first_message("rope", "B2xS7xH3xD64:float32", shift)

    lower = lambda o: o["y"].sub_(0.25)  # noqa: E731
    msg = _first_message("maxpool3d", "N1xC4xD33xH33xW33:float32", lower)
    assert "attained:" in msg and "dominates_window:" in msg


def test_an_oracle_baseline_traces_under_torch_compile():
    """torch.compile re-imports the module of a function it traces; a loaded oracle must be
    importable by its name (the decode bench and regen.ops compile baselines)."""
    import torch

    from regen.oracle import load_oracle
    from support.library import ROOT

    o = load_oracle(ROOT / "oracles" / "swiglu.py")
    s = spec("swiglu")
    case = s.correctness_cases()[0]
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    torch._dynamo.reset()
    got = torch.compile(o.baseline, backend="eager", fullgraph=True)(inputs, view)
    want = o.baseline(inputs, view)
    assert all(torch.equal(got[k], want[k]) for k in want)
