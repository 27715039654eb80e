"""examples/llama.py patched with regen.patch(): the host column's verified kernels run in place
of RMSNorm, RoPE, SwiGLU, softmax and cross-entropy, and the logits match the unpatched model."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from examples.llama import Config, build  # noqa: E402


@pytest.fixture
def ops(verified_cpu_project, monkeypatch):
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(verified_cpu_project.parent / "lc"))
    import regen.ops as ops

    ops.configure(allow_unverified=False, root=verified_cpu_project)
    yield ops
    ops.configure(allow_unverified=False)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_patched_llama_runs_verified_kernels_and_matches_the_unpatched_logits(ops, attn):
    import regen

    cfg = Config.tiny(attn=attn)
    plain, patched = build(cfg), build(cfg)
    counts = regen.patch(patched)
    assert counts == {"RMSNorm": 2 * cfg.layers + 1, "RoPE": cfg.layers, "SwiGLU": cfg.layers,
                      "Softmax": cfg.layers + 1, "CrossEntropy": 1}
    ids = torch.randint(0, cfg.vocab, (2, 24), generator=torch.Generator().manual_seed(1))
    targets = ids.roll(-1, dims=1)
    targets[:, -1] = -100
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", ops.RegenOpsWarning)  # no baseline anywhere
        got, want = patched(ids), plain(ids)
        loss, want_loss = patched.loss(ids, targets), plain.loss(ids, targets)
        probs, want_probs = patched.next_token_probs(ids), plain.next_token_probs(ids)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(probs, want_probs, rtol=1e-4, atol=1e-7)
    x = torch.randn(2, 5, cfg.hidden)
    assert ops.runs("rmsnorm", x.view(-1, cfg.hidden), patched.norm.weight, cfg.eps) == "rmsnorm@cpu"


def test_patching_twice_changes_nothing_more(ops):
    import regen

    model = build(Config.tiny())
    regen.patch(model)
    assert regen.patch(model) == {}


def test_patched_model_compiles_to_one_graph(ops):
    import regen

    cfg = Config.tiny()
    model = build(cfg)
    regen.patch(model)
    ids = torch.randint(0, cfg.vocab, (1, 16))
    explained = torch._dynamo.explain(model)(ids)
    assert explained.graph_break_count == 0, explained.break_reasons
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model)(ids), model(ids), rtol=1e-4, atol=1e-5)


def test_a_training_step_through_regen_ops_matches_plain_pytorch_and_runs_the_backward_ops(ops):
    from torch.utils._python_dispatch import TorchDispatchMode

    from examples.train_step import compare

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    calls = Calls()
    with warnings.catch_warnings(record=True) as seen, calls:
        warnings.simplefilter("always", ops.RegenOpsWarning)
        rows = compare("regen.ops", Config.tiny(), steps=2, b=2, s=24)
    # the forward ops run their verified columns (the fixture verified them here); a backward op
    # runs its column where the committed record was made on this machine, else the baseline,
    # with the warning saying why: either way it is the backward op autograd called
    forward = ("rmsnorm", "swiglu", "rope", "cross_entropy")
    baseline = [str(w.message) for w in seen if issubclass(w.category, ops.RegenOpsWarning)]
    assert not [m for m in baseline if m.startswith(tuple(f"regen.ops.{k} " for k in forward))], \
        baseline
    backward = {f"regen.{k}_bwd" for k in forward}
    assert backward <= calls.seen, sorted(calls.seen)
    assert ops.differentiable() == ["cross_entropy", "layernorm", "rmsnorm", "rope", "swiglu"]
    for r in rows:  # float32: the kernels' own rounding only
        assert abs(r["loss_regen"] - r["loss_torch"]) <= 1e-5 * abs(r["loss_torch"]), r
        assert r["max_grad_diff"] <= 1e-4 * r["max_grad"], r
    assert rows[-1]["loss_regen"] < rows[0]["loss_regen"]  # the updates from regen's gradients train


def test_a_gradient_the_backward_spec_does_not_give_is_refused_not_zero(ops):
    x = torch.randn(1, 4, 2, 8)
    cos, sin = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4)
    y = ops.rope(x, cos, sin)
    with pytest.raises(RuntimeError, match=r"regen.ops.rope: no gradient for cos"):
        y.sum().backward()
