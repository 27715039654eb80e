"""The committed implementations (cache/, read through regen's Store) agree with the oracle on
every correctness case, run as the judge runs them: the cpu ones compiled by regen's toolchain and
called by regen/runtimes/cpu.py in a process of their own; the h200 ones on the GPU (tests marked
gpu, on the device machine). Inputs stay untouched and outputs start NaN-poisoned."""

from __future__ import annotations

import pytest

from support import host
from support.library import (plain_kernels, kernels_on, assert_matches, bound, committed, edge_cases, kernels, nvrtc_for_h200,
                             oracle, oracle_case, poisoned_buffers, spec)

SEEDS = (0, 1)


# -- cpu: through the host runtime -------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_runtimes(tmp_path_factory):
    pytest.importorskip("torch", reason="the host runtime stages torch tensors")
    host.skip_unless_available()
    runtimes = host.Runtimes(tmp_path_factory)
    yield runtimes
    runtimes.close()


def _cpu_params():
    return [pytest.param(kernel, i, id=f"{kernel}-{case.label(spec(kernel).signature.dtypes[0])}")
            for kernel in plain_kernels() if spec(kernel).targets is None or "cpu" in spec(kernel).targets
            for i, case in enumerate(spec(kernel).correctness_cases())]


@pytest.mark.parametrize("kernel,index", _cpu_params())
def test_committed_cpu_implementation_matches_oracle(cpu_runtimes, kernel, index):
    s, o = spec(kernel), oracle(kernel)
    case = s.correctness_cases()[index]
    view = oracle_case(s, case)
    for seed in SEEDS:
        inputs = o.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        outputs = host.run(cpu_runtimes[kernel], kernel, case, inputs)
        for k, v in inputs.items():
            assert v.equal(pristine[k]), f"input {k} was modified"
        ref = o.reference(pristine, view)
        assert_matches(outputs, ref, s.case_tolerance(case), f"seed {seed}, ")
        if hasattr(o, "check"):
            assert o.check(pristine, outputs, view) == []


def test_committed_cpu_maxpool3d_is_bit_exact_against_torch(cpu_runtimes):
    import torch
    import torch.nn.functional as F
    from regen.spec import Case
    x = (torch.randn(2, 3, 9, 8, 11) * 1e-4).to(torch.float16)  # subnormal halves included
    case = Case.model_validate({"N": 2, "C": 3, "D": 9, "H": 8, "W": 11, "dtype": "float16"})
    y = host.run(cpu_runtimes["maxpool3d"], "maxpool3d", case, {"x": x})["y"]
    assert torch.equal(y.view(torch.int16), F.max_pool3d(x.float(), 3, 2).half().view(torch.int16))


# -- h200: on the GPU (the device machine runs these: pytest -m gpu) ----------------------------------

@pytest.fixture(scope="module")
def gpu_runtimes(tmp_path_factory):
    """kernel -> a CUDA Runtime holding its committed h200 source compiled by NVRTC (built on
    first use)."""
    from regen.runtimes.cuda import Runtime
    toolchain, target = nvrtc_for_h200()

    class Loaded(dict):
        def __missing__(self, kernel):
            result = toolchain.compile(committed(kernel, "h200")[0], target)
            assert result.ok, result.log
            path = tmp_path_factory.mktemp(kernel) / "kernel.cubin"
            path.write_bytes(result.binary)
            self[kernel] = Runtime(str(path))
            return self[kernel]

    return Loaded()


def _gpu_cases(kernel):
    return [*spec(kernel).correctness_cases(), *edge_cases(kernel)]


def _gpu_params():
    return [pytest.param(kernel, i, id=f"{kernel}-{c.label(spec(kernel).signature.dtypes[0])}")
            for kernel in plain_kernels() if kernel in kernels_on("h200") for i, c in enumerate(_gpu_cases(kernel))]


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,index", _gpu_params())
def test_committed_h200_implementation_matches_oracle_on_gpu(gpu_runtimes, kernel, index):
    import torch
    s, o = spec(kernel), oracle(kernel)
    case = _gpu_cases(kernel)[index]
    view = oracle_case(s, case, device="cuda")
    launches, recipe, env = bound(kernel, "h200", case)
    for seed in SEEDS:
        inputs = o.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        bufs = {**inputs, **poisoned_buffers(kernel, case, recipe, device="cuda")}
        gpu_runtimes[kernel].launch(launches, bufs)
        gpu_runtimes[kernel].synchronize()
        for k, v in inputs.items():
            assert torch.equal(v, pristine[k]), f"input {k} was modified"
        ref = o.reference(pristine, view)
        outputs = {t.name: bufs[t.name].cpu() for t in s.signature.outputs}
        assert_matches(outputs, {k: v.cpu() for k, v in ref.items()}, s.case_tolerance(case),
                       f"seed {seed}, ")
        assert o.check(pristine, {k: bufs[k] for k in outputs}, view) == []
