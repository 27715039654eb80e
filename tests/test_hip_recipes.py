"""The committed mi350 implementations against their own code objects: no AMD GPU is here, so
what can be checked before one runs them is checked by compiling (clang for gfx950, memoised by
regen's compile stage) and binding. Every launch a recipe binds, for every case, dispatch-boundary
shape and hidden variant the judge can draw, names a kernel of the code object, passes it as many
arguments as the kernel takes, fits the kernel's launch bounds and the workgroup's LDS, and no
kernel spills."""

from __future__ import annotations

import math
from functools import lru_cache

import pytest

from regen.compile import compile_source
from regen.runtimes.hip import code_object_metadata
from support.library import bound, committed, edge_cases, kernels_on, spec, target

TARGET = "mi350"


@lru_cache(maxsize=None)
def _kernels(kernel: str) -> dict[str, dict]:
    """Kernel name -> its code-object metadata (amdhsa.kernels) for kernel@mi350's source."""
    source, _ = committed(kernel, TARGET)
    compiled = compile_source(source, target(TARGET))
    if not compiled.result.ok and "not found" in compiled.result.log.lower():
        pytest.skip(f"no HIP compiler here: {compiled.result.log.splitlines()[0]}")
    assert compiled.result.ok, compiled.result.log
    return {k[".name"]: k for k in code_object_metadata(compiled.result.binary)["amdhsa.kernels"]}


def _shapes(kernel: str):
    from test_launch_recipes import _hidden_shapes

    s = spec(kernel)
    for case in s.cases:
        yield case
    yield from edge_cases(kernel)
    for case in s.correctness_cases():
        yield from _hidden_shapes(case, cap=9)


@pytest.mark.parametrize("kernel", kernels_on(TARGET))
def test_every_bound_launch_names_a_kernel_of_the_code_object_and_fits_it(kernel):
    objects = _kernels(kernel)
    lds = target(TARGET).limits["lds_per_workgroup"]
    dtype0 = spec(kernel).signature.dtypes[0]
    for case in _shapes(kernel):
        launches, _, _ = bound(kernel, TARGET, case)
        label = case.label(dtype0)
        for launch in launches:
            meta = objects.get(launch.kernel)
            assert meta is not None, f"{label}: the recipe launches {launch.kernel}, which the " \
                f"source does not define (it has {sorted(objects)})"
            explicit = [a for a in meta[".args"] if not a[".value_kind"].startswith("hidden_")]
            assert len(launch.args) == len(explicit), f"{label}: {launch.kernel} takes " \
                f"{len(explicit)} arguments, the recipe passes {len(launch.args)}"
            threads = math.prod(launch.block)
            assert threads <= meta[".max_flat_workgroup_size"], f"{label}: {launch.kernel}: block " \
                f"{launch.block} exceeds its __launch_bounds__ ({meta['.max_flat_workgroup_size']})"
            used = meta[".group_segment_fixed_size"] + launch.shared_mem
            assert used <= lds, f"{label}: {launch.kernel}: {used} bytes of LDS, a workgroup has {lds}"


@pytest.mark.parametrize("kernel", kernels_on(TARGET))
def test_no_kernel_of_the_code_object_spills_to_memory(kernel):
    """No VGPR spills and no scratch (the specs' max_spills: {amd: 0}). SGPRs the compiler parks in
    VGPR lanes (v_writelane) are register moves, not memory traffic, and are not counted."""
    for name, meta in _kernels(kernel).items():
        assert meta[".vgpr_spill_count"] == 0, \
            f"{kernel}@{TARGET}: {name} spills {meta['.vgpr_spill_count']} VGPRs"
        assert meta[".private_segment_fixed_size"] == 0, \
            f"{kernel}@{TARGET}: {name} uses {meta['.private_segment_fixed_size']} bytes of scratch"
