"""The committed bf16 GEMMs, checked without their hardware: every shape the specs benchmark reaches
the tensor-core kernel of each column, odd shapes reach the bounds-checked one, and the machine
code of the tensor-core kernels shows the technique each claims (wgmma with register reallocation
and asynchronous copies on sm_90a, mma.sync on sm_100a, MFMA on CDNA). Correctness of both kernels
against the oracle is checked under the CUDA emulation (test_cuda_emulation.py) and by the host
judge (cpu column)."""

from __future__ import annotations

import pytest

from regen.recipe import bind, parse_recipe
from regen.sass import missing_instructions
from regen.spec import Case
from regen.store import Store

from support.library import ROOT, spec, target

GEMMS = ["gemm_bf16", "gemm_bf16_nn"]
FAST = {"h200": "gemm_bf16_tn_wgmma_bf16", "b200": "gemm_bf16_tn_mma_bf16",
        "mi350": "gemm_bf16_tn_mfma_bf16", "mi300x": "gemm_bf16_tn_mfma_bf16"}
GENERAL = "gemm_bf16_general_bf16"


def _entry(kernel: str, target_name: str):
    entry = Store(ROOT / "cache").current(kernel, target_name)
    if entry is None:
        pytest.fail(f"cache/ has no committed implementation of {kernel}@{target_name}")
    return entry


def _launched(kernel: str, target_name: str, sizes: dict) -> list[str]:
    s = spec(kernel)
    case = Case.model_validate({**sizes, "dtype": "bfloat16"})
    recipe = parse_recipe(_entry(kernel, target_name).recipe())
    env = s.case_env(case)
    names = {t.name for t in s.signature.tensors} | {w.name for w in recipe.workspace}
    return [launch.kernel for launch in bind(recipe, env, names, env["T"])]


def _targets(kernel: str) -> list[str]:
    return [t for t in FAST if Store(ROOT / "cache").current(kernel, t) is not None]


@pytest.mark.parametrize("kernel", GEMMS)
def test_every_bench_shape_reaches_the_tensor_core_kernel(kernel):
    targets = _targets(kernel)
    assert "h200" in targets
    for name in targets:
        for case in spec(kernel).bench_cases():
            ran = _launched(kernel, name, case.sizes)
            assert FAST[name] in ran and GENERAL not in ran, f"{name} {case.sizes}: {ran}"


@pytest.mark.parametrize("kernel", GEMMS)
@pytest.mark.parametrize("sizes", [{"M": 129, "N": 256, "K": 64}, {"M": 128, "N": 200, "K": 64},
                                   {"M": 128, "N": 256, "K": 72}, {"M": 1, "N": 4096, "K": 4096},
                                   {"M": 3, "N": 5, "K": 7}])
def test_shapes_off_the_tile_grid_take_the_bounds_checked_kernel_alone(kernel, sizes):
    for name in _targets(kernel):
        ran = _launched(kernel, name, sizes)
        assert GENERAL in ran and FAST[name] not in ran, f"{name} {sizes}: {ran}"


def test_the_nn_layout_transposes_b_before_either_kernel():
    for sizes in ({"M": 256, "N": 512, "K": 512}, {"M": 3, "N": 5, "K": 7}):
        assert _launched("gemm_bf16_nn", "h200", sizes)[0] == "transpose_kn_to_nk_bf16"


@pytest.fixture(scope="module")
def sass():
    """(kernel, target) -> the disassembly of its committed source (NVRTC + cuobjdump here)."""
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    cache = {}

    def get(kernel: str, target_name: str):
        if (kernel, target_name) not in cache:
            result = toolchain.compile(_entry(kernel, target_name).source(), target(target_name))
            assert result.ok, result.log
            if result.disassembly is None:
                pytest.skip("no SASS here: cuobjdump / nvdisasm missing")
            cache[kernel, target_name] = result
        return cache[kernel, target_name]

    return get


@pytest.mark.parametrize("kernel", GEMMS)
def test_h200_fast_kernel_shows_wgmma_register_reallocation_and_async_copies(sass, kernel):
    result = sass(kernel, "h200")
    fast = FAST["h200"]
    required = ["HGMMA.64x256x16.F32.BF16", "USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC",
                "LDGSTS", "SYNCS.PHASECHK", "WARPGROUP.DEPBAR"]
    assert missing_instructions(result.disassembly, required, kernel=fast) == []
    assert result.resources[fast]["spill_bytes"] == 0
    assert missing_instructions(result.disassembly, ["HGMMA"], kernel=GENERAL) == ["HGMMA"]


def test_b200_fast_kernel_is_mma_sync_not_tcgen05(sass):
    """What the b200 artifact is, stated by its machine code: HMMA, and no UTC*MMA (tcgen05)."""
    result = sass("gemm_bf16", "b200")
    fast = FAST["b200"]
    assert missing_instructions(result.disassembly, ["HMMA.16816.F32.BF16", "LDSM"], kernel=fast) == []
    assert missing_instructions(result.disassembly, ["UTCHMMA", "UTCQMMA"], kernel=fast) == \
        ["UTCHMMA", "UTCQMMA"]


@pytest.mark.parametrize("name", ["mi300x", "mi350"])
def test_cdna_fast_kernel_runs_on_the_matrix_cores(name):
    from regen.toolchains.hip import Toolchain
    toolchain = Toolchain(hipcc=(), use_hiprtc=False)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    result = toolchain.compile(_entry("gemm_bf16", name).source(), target(name))
    assert result.ok, result.log
    assert missing_instructions(result.disassembly, ["v_mfma_f32_32x32x8"], kernel=FAST[name]) == []
    assert all(r["spill_bytes"] == 0 for r in result.resources.values()), result.resources
