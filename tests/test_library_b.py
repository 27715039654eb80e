"""Library B (cross_entropy, rope, maxpool3d): specs, oracles checked against torch's own
functions, recipes bound for every case, the h200 CUDA sources compiled for sm_90a (run only on a
GPU machine, tests marked gpu) and the CPU implementations run through ctypes against the oracle."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
import types
from pathlib import Path

import pytest

from regen.oracle import check_oracle, load_oracle
from regen.recipe import bind, parse_recipe, workspace_shapes
from regen.spec import Case, load_spec
from regen.target import load_target

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ["cross_entropy", "rope", "maxpool3d"]
H200_BANDWIDTH = 4.27e12  # measured copy bandwidth, targets/h200.yaml
# the benchmark shapes, floors (bytes that must move / measured bandwidth) and goals
BENCH = {
    "cross_entropy": ({"N": 8192, "V": 128256}, "bfloat16", 491.7e-6, 0.85),
    "rope": ({"B": 8, "S": 4096, "H": 32, "D": 128}, "bfloat16", 125.6e-6, 0.90),
    "maxpool3d": ({"N": 16, "C": 32, "D": 64, "H": 64, "W": 64}, "float32", 139.9e-6, 0.80),
}
SEEDS = (0, 1)


def _spec(kernel):
    return load_spec(ROOT / "specs" / f"{kernel}.yaml")


def _oracle(kernel):
    return load_oracle(ROOT / "oracles" / f"{kernel}.py")


def _handoffs(language_dir_suffix):
    return sorted(p for p in (ROOT / "handoffs").glob(f"*@{language_dir_suffix}")
                  if p.name.split("@")[0] in KERNELS)


def oracle_case(spec, case, device="cpu"):
    """The case object an oracle receives (the shape regen's worker builds)."""
    import torch
    env = spec.case_env(case)
    params = {p.name: env[p.name] for p in spec.signature.params}
    return types.SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]),
                                 params=params, dist=case.dist, device=device,
                                 name=case.label(spec.signature.dtypes[0]))


def out_of_tolerance(out, ref, tol):
    """None when |out - ref| <= atol + rtol |ref| everywhere (float64), else a description."""
    import torch
    o, r = out.to(torch.float64), ref.to(torch.float64)
    if o.shape != r.shape:
        return f"shape {tuple(o.shape)} != {tuple(r.shape)}"
    bad = ~((o - r).abs() <= tol.atol + tol.rtol * r.abs())
    bad &= ~(torch.isinf(r) & (o == r))
    if bad.any():
        i = tuple(bad.nonzero()[0].tolist())
        return f"{int(bad.sum())} elements out of tolerance; at {i} got {o[i].item()!r}, want {r[i].item()!r}"
    return None


def _cases(kernel, bench=False):
    spec = _spec(kernel)
    return spec.cases if bench else spec.correctness_cases()


# -- specs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", KERNELS)
def test_spec_loads_and_oracle_is_well_formed(kernel):
    spec = _spec(kernel)
    check_oracle(ROOT / "oracles" / f"{kernel}.py")
    assert spec.invariants and spec.correctness_cases()
    assert {c.dtype or spec.signature.dtypes[0] for c in spec.correctness_cases()} == \
        set(spec.signature.dtypes), "every declared dtype has a correctness case"
    assert spec.profile.max_spills == {"nvidia": 0}
    assert spec.profile.speedup == {"torch_compile": 1.0}


def test_signatures_are_the_contract():
    ce = _spec("cross_entropy").signature
    assert ce.dtypes == ["bfloat16", "float16", "float32"]
    assert [(t.name, t.dtype) for t in ce.inputs] == [("logits", "T"), ("targets", "int64")]
    assert [(t.name, t.dtype, t.shape) for t in ce.outputs] == [("loss", "float32", [1])]
    assert _spec("rope").signature.dtypes == ["bfloat16", "float16", "float32"]
    assert "float32" in _spec("maxpool3d").signature.dtypes


@pytest.mark.parametrize("kernel", KERNELS)
def test_bench_case_encodes_the_goal(kernel):
    sizes, dtype, floor_s, goal = BENCH[kernel]
    spec = _spec(kernel)
    (case,) = spec.bench_cases()
    assert case.sizes == sizes and case.dtype == dtype
    assert spec.profile.floor_fraction == {"h200": goal}
    floor = spec.case_bytes(case) / H200_BANDWIDTH
    assert floor == pytest.approx(floor_s, rel=5e-3), "bytes formula disagrees with the floor"


def test_cases_cover_what_users_hit():
    ce = _spec("cross_entropy").correctness_cases()
    assert {1000, 50257}.issubset({c.sizes["V"] for c in ce})
    assert {"large", "neg_inf_mask", "constant", "ignore"}.issubset({c.dist for c in ce})
    rope = _spec("rope").correctness_cases()
    assert {64, 128}.issubset({c.sizes["D"] for c in rope})
    assert any(c.sizes["S"] % 2 for c in rope)
    assert any((c.sizes["D"] // 2) % 8 for c in rope), "a half-row that is not whole vectors"
    pool = _spec("maxpool3d").correctness_cases()
    spatial = {c.sizes[k] for c in pool for k in "DHW"}
    assert {5, 7, 33}.issubset(spatial)
    assert any(c.sizes["W"] % 4 for c in pool) and any(c.sizes["W"] % 4 == 0 for c in pool)


# -- oracles against torch's own functions ---------------------------------------------------------

def test_cross_entropy_reference_matches_torch():
    import torch
    import torch.nn.functional as F
    spec, oracle = _spec("cross_entropy"), _oracle("cross_entropy")
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 3)
        want = F.cross_entropy(inputs["logits"].to(torch.float64), inputs["targets"],
                               ignore_index=-100, reduction="mean")
        got = oracle.reference(inputs, view)["loss"]
        assert got.shape == (1,)
        torch.testing.assert_close(got[0], want, rtol=1e-12, atol=1e-12, msg=view.name)


def test_maxpool3d_reference_matches_torch():
    import torch
    import torch.nn.functional as F
    spec, oracle = _spec("maxpool3d"), _oracle("maxpool3d")
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 3)
        want = F.max_pool3d(inputs["x"].to(torch.float32), kernel_size=3, stride=2)
        got = oracle.reference(inputs, view)["y"]
        assert torch.equal(got, want.to(torch.float64)), view.name
        assert list(got.shape) == spec.tensor_shape(spec.signature.outputs[0], case)


def test_rope_reference_matches_complex_rotation():
    """Rotate-half RoPE is multiplication of (x_i + j x_(i+half)) by (cos + j sin)."""
    import torch
    spec, oracle = _spec("rope"), _oracle("rope")
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 3)
        x = inputs["x"].to(torch.float64)
        half = x.shape[-1] // 2
        z = torch.complex(x[..., :half], x[..., half:])
        w = torch.complex(inputs["cos"].to(torch.float64), inputs["sin"].to(torch.float64))
        rotated = z * w[None, :, None, :]
        want = torch.cat([rotated.real, rotated.imag], dim=-1)
        torch.testing.assert_close(oracle.reference(inputs, view)["y"], want, rtol=1e-12,
                                   atol=1e-12, msg=view.name)
        # the tables are Llama's: position 0 is the identity
        assert torch.equal(inputs["cos"][0].float(), torch.ones(half))
        assert torch.equal(inputs["sin"][0].float(), torch.zeros(half))


@pytest.mark.parametrize("kernel", KERNELS)
def test_make_inputs_is_seeded_and_typed(kernel):
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        a, b, c = (oracle.make_inputs(view, s) for s in (5, 5, 6))
        for t in spec.signature.inputs:
            assert a[t.name].dtype == getattr(torch, spec.tensor_dtype(t, case))
            assert list(a[t.name].shape) == spec.tensor_shape(t, case)
            assert a[t.name].is_contiguous()
            assert torch.equal(a[t.name], b[t.name]), "same seed, same inputs"
        if sum(a[t.name].numel() for t in spec.signature.inputs) > 8 and case.dist != "constant":
            assert any(not torch.equal(a[t.name], c[t.name]) for t in spec.signature.inputs), \
                f"{view.name}: inputs do not depend on the seed"


def test_cross_entropy_inputs_keep_targets_live():
    import torch
    spec, oracle = _spec("cross_entropy"), _oracle("cross_entropy")
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 0)
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


# -- invariants: quiet on the truth, loud on corruption ------------------------------------------

def _reference_as_outputs(spec, case, oracle, view, inputs):
    import torch
    ref = oracle.reference(inputs, view)
    return {t.name: ref[t.name].to(getattr(torch, spec.tensor_dtype(t, case)))
            for t in spec.signature.outputs}


@pytest.mark.parametrize("kernel", KERNELS)
def test_check_accepts_the_reference(kernel):
    spec, oracle = _spec(kernel), _oracle(kernel)
    for case in spec.correctness_cases():
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 1)
        outputs = _reference_as_outputs(spec, case, oracle, view, inputs)
        assert oracle.check(inputs, outputs, view) == [], view.name


def _first_message(kernel, case_name, corrupt):
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = next(c for c in spec.correctness_cases() if c.label(spec.signature.dtypes[0]) == case_name)
    view = oracle_case(spec, case)
    inputs = oracle.make_inputs(view, 1)
    outputs = _reference_as_outputs(spec, case, oracle, view, inputs)
    corrupt(outputs)
    return " ".join(oracle.check(inputs, outputs, view))


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


# -- recipes ---------------------------------------------------------------------------------------

def _bound(handoff, case):
    kernel = handoff.name.split("@")[0]
    spec = _spec(kernel)
    recipe = parse_recipe((handoff / "launch.yaml").read_text(), str(handoff / "launch.yaml"))
    env = spec.case_env(case)
    buffers = {t.name for t in spec.signature.tensors} | set(workspace_shapes(recipe, env))
    return bind(recipe, env, buffers, env["T"]), recipe, env


@pytest.mark.parametrize("handoff", _handoffs("h200"), ids=lambda p: p.name)
def test_cuda_recipe_binds_every_case(handoff):
    spec = _spec(handoff.name.split("@")[0])
    for case in spec.cases:
        launches, recipe, env = _bound(handoff, case)
        for launch in launches:
            threads = math.prod(launch.block)
            assert 32 <= threads <= 1024 and threads % 32 == 0, (case, launch)
            assert 1 <= launch.grid[0] < 2**31 and all(1 <= g <= 65535 for g in launch.grid[1:])
            assert launch.shared_mem == 0
        for name, (dtype, shape, _) in workspace_shapes(recipe, env).items():
            assert all(d >= 1 for d in shape), name


@pytest.mark.parametrize("handoff", _handoffs("cpu"), ids=lambda p: p.name)
def test_cpu_recipe_binds_every_case(handoff):
    spec = _spec(handoff.name.split("@")[0])
    for case in spec.cases:
        launches, _, _ = _bound(handoff, case)
        assert len(launches) == 1


def test_cross_entropy_recipe_reduces_in_a_second_launch():
    spec = _spec("cross_entropy")
    handoff = ROOT / "handoffs" / "cross_entropy@h200"
    for case in spec.cases:
        launches, recipe, env = _bound(handoff, case)
        assert [l.kernel for l in launches][-1] == "ce_mean_f32"
        assert len(launches) == 2
        assert workspace_shapes(recipe, env) == {"row_loss": ("float32", [case.sizes["N"]], False)}


def test_maxpool3d_recipe_covers_every_output_vector():
    """Blocks along W overlap by one vector; their stored vectors must tile [0, Q) exactly once."""
    spec = _spec("maxpool3d")
    handoff = ROOT / "handoffs" / "maxpool3d@h200"
    for case in spec.cases:
        (launch,), _, env = _bound(handoff, case)
        if "_vec_" not in launch.kernel:
            continue
        vec = 16 // {"float32": 4, "bfloat16": 2, "float16": 2}[env["T"]]
        q_count, tx = case.sizes["W"] // vec, launch.block[0]
        stored = []
        for z in range(launch.grid[2]):
            for x in range(tx):
                q = z * (tx - 1) + x
                if q < q_count and (x + 1 < tx or q == q_count - 1):
                    stored.append(q)
        assert sorted(stored) == list(range(q_count)), case
        assert 32 % tx == 0, "a row of lanes must not straddle warps"
        oh = (case.sizes["H"] - 3) // 2 + 1
        assert launch.grid[1] * launch.block[1] * 2 >= oh
        od = (case.sizes["D"] - 3) // 2 + 1
        odc = launch.args[-1].value
        volumes = case.sizes["N"] * case.sizes["C"]
        assert launch.grid[0] == volumes * -(-od // odc)


# -- CUDA: compile for sm_90a (NVRTC, no GPU needed) ------------------------------------------------

@pytest.fixture(scope="module")
def nvrtc():
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=False)
    problem = toolchain.problem()
    if problem:
        pytest.skip(problem)
    return toolchain, load_target(ROOT / "targets" / "h200.yaml")


@pytest.mark.parametrize("handoff", _handoffs("h200"), ids=lambda p: p.name)
def test_cuda_source_compiles_without_spills(nvrtc, handoff):
    toolchain, target = nvrtc
    result = toolchain.compile((handoff / "kernel.cu").read_text(), target)
    assert result.ok, result.log
    spec = _spec(handoff.name.split("@")[0])
    launched = set()
    for case in spec.cases:
        launches, _, _ = _bound(handoff, case)
        for launch in launches:
            launched.add(launch.kernel)
            res = result.resources.get(launch.kernel)
            assert res is not None, f"{launch.kernel} is not an entry point of the cubin"
            # the block must be launchable with the registers ptxas chose
            assert res["registers"] * math.prod(launch.block) <= 65536, launch.kernel
    for name, res in result.resources.items():
        assert res["spill_bytes"] == 0 and res["stack_bytes"] == 0, (name, res)
    assert launched == set(result.resources), "every compiled kernel is reachable from the recipe"


# -- CPU implementations through ctypes -------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_libs(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    flags = load_target(ROOT / "targets" / "cpu.yaml").toolchain.flags
    libs = {}
    for handoff in _handoffs("cpu"):
        so = tmp_path_factory.mktemp(handoff.name.replace("@", "_")) / "kernel.so"
        proc = subprocess.run(["g++", *flags, "-Wall", "-Wextra", "-Werror",
                               str(handoff / "kernel.cpp"), "-o", str(so)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        libs[handoff.name.split("@")[0]] = (ctypes.CDLL(str(so)), handoff)
    return libs


def run_cpu(lib, spec, case, launches, inputs):
    """NaN-poisoned outputs, then the recipe's calls the way the cpp runtime makes them."""
    import torch
    bufs = dict(inputs)
    for t in spec.signature.outputs:
        bufs[t.name] = torch.full(spec.tensor_shape(t, case), float("nan"),
                                  dtype=getattr(torch, spec.tensor_dtype(t, case)))
    ctypes_of = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
                 "float64": ctypes.c_double}
    for launch in launches:
        args = [ctypes.c_void_p(bufs[a.value].data_ptr()) if a.kind == "tensor"
                else ctypes_of[a.kind](a.value) for a in launch.args]
        getattr(lib, launch.kernel)(*args)
    return {t.name: bufs[t.name] for t in spec.signature.outputs}


def _cpu_params():
    out = []
    for handoff in _handoffs("cpu"):
        kernel = handoff.name.split("@")[0]
        spec = _spec(kernel)
        for i, case in enumerate(spec.correctness_cases()):
            out.append(pytest.param(kernel, i, id=f"{kernel}-{case.label(spec.signature.dtypes[0])}"))
    return out


@pytest.mark.parametrize("kernel,index", _cpu_params())
def test_cpu_handoff_matches_oracle(cpu_libs, kernel, index):
    lib, handoff = cpu_libs[kernel]
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = spec.correctness_cases()[index]
    view = oracle_case(spec, case)
    launches, _, env = _bound(handoff, case)
    for seed in SEEDS:
        inputs = oracle.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        outputs = run_cpu(lib, spec, case, launches, inputs)
        for k, v in inputs.items():
            assert v.equal(pristine[k]), f"input {k} was modified"
        ref = oracle.reference(pristine, view)
        for name, out in outputs.items():
            problem = out_of_tolerance(out, ref[name], spec.tolerance[env["T"]])
            assert problem is None, f"seed {seed}, {name}: {problem}"
        assert oracle.check(pristine, outputs, view) == []


def test_cpu_maxpool3d_is_bit_exact_against_torch(cpu_libs):
    import torch
    import torch.nn.functional as F
    assert "maxpool3d" in cpu_libs, "handoffs/maxpool3d@cpu is committed and must build"
    lib, handoff = cpu_libs["maxpool3d"]
    spec = _spec("maxpool3d")
    x = (torch.randn(2, 3, 9, 8, 11) * 1e-4).to(torch.float16)  # subnormal halves included
    case = Case.model_validate({"N": 2, "C": 3, "D": 9, "H": 8, "W": 11, "dtype": "float16"})
    launches, _, _ = _bound(handoff, case)
    y = run_cpu(lib, spec, case, launches, {"x": x})["y"]
    assert torch.equal(y.view(torch.int16), F.max_pool3d(x.float(), 3, 2).half().view(torch.int16))


# -- on the GPU (the device machine runs these: pytest -m gpu) -------------------------------------

def _gpu_params():
    out = []
    for handoff in _handoffs("h200"):
        kernel = handoff.name.split("@")[0]
        spec = _spec(kernel)
        for i, case in enumerate(spec.correctness_cases()):
            out.append(pytest.param(kernel, i, id=f"{kernel}-{case.label(spec.signature.dtypes[0])}"))
    return out


@pytest.fixture(scope="module")
def gpu_runtimes(nvrtc, tmp_path_factory):
    from regen.runtimes.cuda import Runtime
    toolchain, target = nvrtc
    runtimes = {}
    for handoff in _handoffs("h200"):
        result = toolchain.compile((handoff / "kernel.cu").read_text(), target)
        assert result.ok, result.log
        path = tmp_path_factory.mktemp(handoff.name.replace("@", "_")) / "kernel.cubin"
        path.write_bytes(result.binary)
        runtimes[handoff.name.split("@")[0]] = (Runtime(str(path)), handoff)
    return runtimes


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,index", _gpu_params())
def test_cuda_handoff_matches_oracle_on_gpu(gpu_runtimes, kernel, index):
    import torch
    runtime, handoff = gpu_runtimes[kernel]
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = spec.correctness_cases()[index]
    view = oracle_case(spec, case, device="cuda")
    launches, recipe, env = _bound(handoff, case)
    for seed in SEEDS:
        inputs = oracle.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        bufs = dict(inputs)
        for t in spec.signature.outputs:
            bufs[t.name] = torch.full(spec.tensor_shape(t, case), float("nan"), device="cuda",
                                      dtype=getattr(torch, spec.tensor_dtype(t, case)))
        for name, (dtype, shape, zero) in workspace_shapes(recipe, env).items():
            bufs[name] = torch.full(shape, 0.0 if zero else float("nan"), device="cuda",
                                    dtype=getattr(torch, dtype))
        runtime.launch(launches, bufs)
        runtime.synchronize()
        for k, v in inputs.items():
            assert torch.equal(v, pristine[k]), f"input {k} was modified"
        ref = oracle.reference(pristine, view)
        for t in spec.signature.outputs:
            problem = out_of_tolerance(bufs[t.name].cpu(), ref[t.name].cpu(), spec.tolerance[env["T"]])
            assert problem is None, f"seed {seed}, {t.name}: {problem}"
        outputs = {t.name: bufs[t.name] for t in spec.signature.outputs}
        assert oracle.check(pristine, outputs, view) == []
