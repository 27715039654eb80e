"""The committed mi350 (HIP, wave64) backward kernels run on the CPU under the HIP emulation
(tests/support/cuda_emulation.h with EMU_HIP: fibers, real barriers, 64-lane wavefront shuffles,
guarded buffers) through their own launch recipes and match the oracle: no AMD GPU is here, so this is
where their indexing, LDS reductions and workspaces are checked before one runs them."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from support import cuda_emulation
from regen.spec import Case
from support.library import ROOT, assert_matches, committed, edge_cases, oracle, oracle_case, spec

# the kernels whose HIP sources use no AMDGPU builtins (the emulation cannot run those)
EMULATED = ["swiglu_bwd", "rope_bwd", "rmsnorm_bwd", "layernorm_bwd", "cross_entropy_bwd"]

# The norm backward recipes give each row variant G = min(M, 2048 | 512 | 256 | 512) workgroups;
# these shapes make every variant take several rows per workgroup (its dweight/dbias partials
# then accumulate across rows, and the row reduction's LDS halves alternate), which the spec's
# cases reach only for N <= 1024.
MANY_ROWS = [{"M": 1100, "N": 2050, "dtype": "float16"}, {"M": 600, "N": 8192, "dtype": "bfloat16"},
             {"M": 1030, "N": 9000, "dtype": "float32"}]


def _cases(kernel: str, kind: str) -> list[Case]:
    if kind == "spec":
        return spec(kernel).correctness_cases()
    if kind == "edge":
        return edge_cases(kernel)
    return [Case.model_validate(sizes) for sizes in MANY_ROWS]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """kernel -> its committed mi350 source built against the emulation (built on first use)."""
    cuda_emulation.skip_unless_hip_available()

    class Built(dict):
        def __missing__(self, kernel):
            source, _ = committed(kernel, "mi350")
            self[kernel] = ctypes.CDLL(str(cuda_emulation.build_hip(source, tmp_path_factory.mktemp(kernel))))
            return self[kernel]

    return Built()


def _params():
    out = []
    for kernel in EMULATED:
        s = spec(kernel)
        for i, case in enumerate(s.correctness_cases()):
            out.append(pytest.param(kernel, "spec", i, id=f"{kernel}-{case.label(s.signature.dtypes[0])}"))
        for i, case in enumerate(edge_cases(kernel)):
            out.append(pytest.param(kernel, "edge", i, id=f"{kernel}-edge-{case.label('')}",
                                    marks=pytest.mark.slow))
        if kernel.endswith("norm_bwd"):
            for i, case in enumerate(_cases(kernel, "many_rows")):
                out.append(pytest.param(kernel, "many_rows", i, id=f"{kernel}-rows-{case.label('')}",
                                        marks=pytest.mark.slow))
    return out


@pytest.mark.parametrize("kernel,kind,index", _params())
def test_committed_hip_matches_oracle_under_emulation(emulated, kernel, kind, index):
    s, o = spec(kernel), oracle(kernel)
    case = _cases(kernel, kind)[index]
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    pristine = {k: v.clone() for k, v in inputs.items()}
    # twice on the same buffers, refilled between launches as the judge refills them
    outputs, changed, ran = cuda_emulation.run(emulated[kernel], kernel, case, inputs, target="mi350",
                                               repeat=2)
    assert not changed, f"inputs modified: {changed}"
    assert_matches(outputs, o.reference(pristine, view), s.case_tolerance(case), f"{ran}: ")
    if hasattr(o, "check"):
        assert o.check(pristine, outputs, view) == []


def test_emulation_aborts_a_reduction_over_half_a_wavefront(tmp_path):
    """A block of 32 lanes (a CUDA warp, half a wavefront) reducing with __shfl_xor is refused:
    the emulation models whole 64-lane wavefronts, as the device runs them."""
    cuda_emulation.skip_unless_hip_available()
    source = ('extern "C" __global__ void k(float* y) {\n'
              '  float v = 1.0f;\n'
              '  for (int o = 32; o > 0; o >>= 1) v += __shfl_xor(v, o, 64);\n'
              '  y[threadIdx.x] = v;\n}\n')
    so = cuda_emulation.build_hip(source, tmp_path / "k")
    run = ("import ctypes; lib = ctypes.CDLL({so!r}); y = (ctypes.c_float * 64)(); "
           "fn = ctypes.cast(lib.k, ctypes.c_void_p).value; "
           "lib.emu_launch(ctypes.c_void_p(fn), 1, 1, 1, {n}, 1, 1, 0, 1, "
           "(ctypes.c_int64 * 32)(ctypes.addressof(y)), 0, (ctypes.c_float * 4)()); "
           "print(sorted(set(y)))")
    whole = subprocess.run([sys.executable, "-c", run.format(so=str(so), n=64)],
                           capture_output=True, text=True, cwd=ROOT)
    assert whole.returncode == 0 and whole.stdout.strip() == "[64.0]", whole.stderr
    half = subprocess.run([sys.executable, "-c", run.format(so=str(so), n=32)],
                          capture_output=True, text=True, cwd=ROOT)
    assert half.returncode != 0 and "shuffle without the full warp" in half.stderr
