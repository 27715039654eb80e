"""What the committed sources cost the hardware, checked without it: the h200 CUDA sources compile
for sm_90a with NVRTC without warnings, spills or stack, every entry point a recipe launches exists
and fits one SM (registers x threads, shared memory), and every compiled kernel is reachable from
the recipe; the cpu sources compile with the cpu target's flags without a warning."""

from __future__ import annotations

import math
import shutil
import subprocess

import pytest

from support.library import DTYPES, bound, committed, edge_cases, kernels, kernels_on, nvrtc_for_h200, spec, target


@pytest.fixture(scope="module")
def cubins():
    """kernel -> NVRTC's result for its committed h200 source (compiled on first use)."""
    toolchain, h200 = nvrtc_for_h200()

    class Compiled(dict):
        def __missing__(self, kernel):
            self[kernel] = toolchain.compile(committed(kernel, "h200")[0], h200)
            return self[kernel]

    return Compiled()


@pytest.mark.parametrize("kernel", kernels_on("h200"))
def test_committed_cuda_compiles_without_spills_and_launches_fit(cubins, kernel):
    result = cubins[kernel]
    assert result.ok, result.log
    assert "warning" not in result.log.lower(), result.log
    for name, res in result.resources.items():
        assert res["spill_bytes"] == 0 and res["stack_bytes"] == 0, f"{name}: {res}"
    s = spec(kernel)
    launched = set()
    for case in [*s.cases, *edge_cases(kernel)]:
        for dtype in s.signature.dtypes:  # every dtype's entry points, not only the case's
            launches, _, _ = bound(kernel, "h200", case.model_copy(update={"dtype": dtype}))
            for launch in launches:
                launched.add(launch.kernel)
                res = result.resources.get(launch.kernel)
                assert res is not None, f"{launch.kernel} is not an entry point of the cubin"
                threads = math.prod(launch.block)
                assert res["registers"] * threads <= 65536, f"{launch.kernel}: {res['registers']} " \
                    f"registers x {threads} threads do not fit one SM"
                # regen's runtime opts a launch in to dynamic shared memory beyond 48 KB
                assert res["shared_bytes"] + launch.shared_mem <= \
                    target("h200").limits["shared_memory_per_block"], launch.kernel
    if s.composition is None:  # an unfused plan carries its components' whole sources
        assert launched == set(result.resources), "every compiled kernel is reachable from the recipe"


@pytest.mark.parametrize("kernel", kernels())
def test_committed_cpu_source_compiles_without_warnings(kernel, tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    src = tmp_path / "kernel.cpp"
    src.write_text(committed(kernel, "cpu")[0])
    proc = subprocess.run(["g++", *target("cpu").toolchain.flags, "-Wall", "-Wextra", "-Werror",
                           str(src), "-o", str(tmp_path / "kernel.so")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
