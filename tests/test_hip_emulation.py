"""The committed cdna (mi350/mi300x) HIP sources of the decode components, the bf16 GEMMs,
attention and fused_linear_cross_entropy (its chunk loop through the recipe's repeat groups),
compiled with clang++ against the emulation of the execution model with 64-lane wavefronts
(tests/support/cuda_emulation.h with EMU_HIP: threads as fibers, real barriers and wavefront
shuffles, MFMA with the CDNA3 register layouts, buffers ending at a PROT_NONE page) and run on the
CPU against the oracle through the mi350 launch recipe. No AMD GPU is within reach: this is the
only place these kernels run before one is. Kernels that use DPP or readlane builtins (the row
kernels) are not modelled."""

from __future__ import annotations

import ctypes

import pytest

from support import cuda_emulation
from support.library import assert_matches, committed, edge_cases, excess, oracle, oracle_case, spec

HIP_EMULATED = ["embedding", "kv_append", "residual_add", "gemv", "decode_attention",
                "gemm_bf16", "gemm_bf16_nn", "attention",   # the last three on the MFMA model
                "fused_linear_cross_entropy",               # MFMA (bf16, f16) and SIMT (f32) GEMMs
                # the cdna technique unit tests (taxonomy/gfx9*.yaml): every case of each spec
                "tx_amd_mfma_tile", "tx_amd_lds_tile"]
# fp8 MFMA: built once per arch, each reading e4m3 in its own format (FNUZ on gfx942, OCP on gfx950)
PER_ARCH = ["gemm_fp8", "mx_gemm"]


@pytest.fixture(scope="module")
def emulated_hip(tmp_path_factory):
    """kernel -> its committed mi350 source built against the wave64 emulation (on first use)."""
    cuda_emulation.skip_unless_hip_available()

    class Built(dict):
        def __missing__(self, key):
            kernel, arch = key
            source, _ = committed(kernel, "mi350")
            so = cuda_emulation.build_hip(source, tmp_path_factory.mktemp(f"hip-{kernel}"), arch=arch)
            self[key] = ctypes.CDLL(str(so))
            return self[key]

    return Built()


def _hidden_like(kernel):
    """Shapes the judge's hidden variants reach beyond the spec's cases (sizes moved up by
    multiples of their power-of-two factor): odd and large G, D past 256, K not a multiple of 8."""
    s = spec(kernel)
    extra = {
        "decode_attention": [{"B": 1, "Hkv": 1, "G": 12, "L": 5, "D": 256},
                             {"B": 2, "Hkv": 3, "G": 3, "L": 300, "D": 80}],
        "gemv": [{"B": 9, "N": 70, "K": 136}, {"B": 4, "N": 3, "K": 4104}],
        "residual_add": [{"M": 5, "N": 4103}],
        "kv_append": [{"B": 3, "H": 2, "L": 7, "D": 24, "params": {"pos": 6}}],
        # every kernel of the recipe: padded heads (D 8-120), D past 128 (the rows fallback, two
        # grid-z slices past 512), several query tiles under the causal mask, large G
        "attention": [{"B": 1, "Hkv": 1, "G": 3, "S": 129, "D": 96},
                      {"B": 2, "Hkv": 1, "G": 1, "S": 33, "D": 40, "params": {"causal": False}},
                      {"B": 1, "Hkv": 1, "G": 1, "S": 65, "D": 120},
                      {"B": 1, "Hkv": 1, "G": 12, "S": 40, "D": 8},
                      {"B": 1, "Hkv": 1, "G": 1, "S": 384, "D": 128},
                      {"B": 1, "Hkv": 2, "G": 2, "S": 200, "D": 192},
                      {"B": 1, "Hkv": 1, "G": 1, "S": 70, "D": 320, "params": {"causal": False}},
                      {"B": 1, "Hkv": 1, "G": 1, "S": 20, "D": 600}],
        "gemm_fp8": [{"M": 129, "N": 257, "K": 80}, {"M": 1, "N": 300, "K": 1040, "params": {"per_tensor": True}}],
        "mx_gemm": [{"M": 129, "N": 130, "K": 96}, {"M": 2, "N": 260, "K": 1088}],
        # two vocabulary chunks (the second one column wide) and two token tiles on the matrix
        # cores; rows that are not 16-byte aligned (H odd: the element-wise loads) in fp16
        "fused_linear_cross_entropy": [{"N": 130, "H": 24, "V": 8193, "dtype": "bfloat16"},
                                       {"N": 9, "H": 33, "V": 200, "dtype": "float16"}],
    }.get(kernel, [])
    base = s.correctness_cases()[-1]
    return [base.model_validate({**base.model_dump(mode="json"), "params": {}, **sizes, "name": None})
            for sizes in extra]


def _params():
    out = []
    for kernel in HIP_EMULATED + PER_ARCH:
        s = spec(kernel)
        cases = [*s.correctness_cases(), *edge_cases(kernel), *_hidden_like(kernel)]
        for arch in (cuda_emulation.HIP_ARCHS if kernel in PER_ARCH else (None,)):
            for i, case in enumerate(cases):
                label = f"{kernel}{'@' + arch if arch else ''}-{case.label(s.signature.dtypes[0])}"
                out.append(pytest.param(kernel, arch, i, id=label))
    return out


def _case(kernel, index):
    s = spec(kernel)
    return [*s.correctness_cases(), *edge_cases(kernel), *_hidden_like(kernel)][index]


@pytest.mark.parametrize("kernel,arch,index", _params())
def test_committed_hip_matches_oracle_under_wave64_emulation(emulated_hip, kernel, arch, index):
    s, o = spec(kernel), oracle(kernel)
    case = _case(kernel, index)
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    pristine = {k: v.clone() for k, v in inputs.items()}
    # twice on the same buffers, refilled between launches as the judge refills them
    outputs, changed, ran = cuda_emulation.run(emulated_hip[kernel, arch], kernel, case, inputs,
                                               target="mi350", repeat=2)
    assert not changed, f"inputs modified: {changed}"
    ref = o.reference(pristine, view)
    assert_matches(outputs, ref, s.case_tolerance(case), f"{ran}: ")
    if hasattr(o, "check"):
        assert o.check(pristine, outputs, view) == []


# wrong guesses of MFMA layouts in the committed mi350 kernels, each planted in turn:
# mistake -> (kernel, text, replacement, a case on the matrix-core path, the kernel it launches)
PLANTED = {
    "gemm: operand k split by lane parity": (
        "gemm_bf16", "ks + (lane / 32) * 4]", "ks + (lane % 2) * 4]",
        {"M": 128, "N": 256, "K": 64}, "gemm_bf16_tn_mfma_bf16"),
    "gemm: accumulator rows contiguous per half-wave": (
        "gemm_bf16", "(e / 4) * 8 + (lane / 32) * 4 + e % 4", "(lane / 32) * 16 + e",
        {"M": 128, "N": 256, "K": 64}, "gemm_bf16_tn_mfma_bf16"),
    "attention: S^T rows taken as keys in order": (
        "attention", "return 16 * (i >> 4) + 8 * ((i >> 2) & 1) + 4 * ((i >> 3) & 1) + (i & 3);",
        "return i;", {"B": 1, "Hkv": 1, "G": 1, "S": 64, "D": 64, "params": {"causal": False}},
        "attention_mfma_d64_bf16"),
    "tx_amd_mfma_tile: accumulator rows contiguous per half-wave": (
        "tx_amd_mfma_tile", "(r / 4) * 8 + (lane / 32) * 4 + r % 4", "(lane / 32) * 16 + r",
        {"M": 64, "N": 64, "K": 16}, "tx_amd_mfma_tile_bf16"),
    "tx_amd_lds_tile: both halves of a fragment read from the same 8 k": (
        "tx_amd_lds_tile", "acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(fa.hi, fb.hi, acc, 0, 0, 0);",
        "acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(fa.hi, fb.lo, acc, 0, 0, 0);",
        {"M": 64, "N": 64, "K": 32}, "tx_amd_lds_tile_bf16"),
}


@pytest.mark.parametrize("mistake", PLANTED)
def test_a_planted_mfma_layout_mistake_fails_the_oracle(tmp_path, mistake):
    """The emulation's MFMA layouts are a real check on the committed kernels: the same source with
    one layout assumption changed builds, runs its matrix-core path and no longer matches, where
    the committed source does."""
    cuda_emulation.skip_unless_hip_available()
    from regen.spec import Case
    kernel, old, new, sizes, fast = PLANTED[mistake]
    source, _ = committed(kernel, "mi350")
    assert old in source, f"the committed {kernel}@mi350 no longer has {old!r}"
    s, o = spec(kernel), oracle(kernel)
    case = Case.model_validate(sizes)
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    ref = o.reference({k: v.clone() for k, v in inputs.items()}, view)
    for text, should_match in ((source, True), (source.replace(old, new), False)):
        lib = ctypes.CDLL(str(cuda_emulation.build_hip(text, tmp_path / str(should_match))))
        outputs, _, ran = cuda_emulation.run(lib, kernel, case, inputs, target="mi350")
        assert ran == [fast]
        err = max(excess(outputs[n], ref[n], s.case_tolerance(case)) for n in outputs)
        assert (err <= 1) == should_match, f"{mistake}: worst error {err:.3g}x the tolerance"


def _fp8_case(kernel, sizes):
    from regen.spec import Case
    s, o = spec(kernel), oracle(kernel)
    case = Case.model_validate(sizes)
    view = oracle_case(s, case)
    return s, o, case, view, o.make_inputs(view, 0)


def test_gemm_fp8_reads_ocp_negative_zero_as_zero_on_gfx942_and_the_mapping_is_needed(tmp_path):
    """OCP e4m3 -0 (0x80) is NaN to gfx942's FNUZ matrix cores: the committed kernel maps it to 0
    while staging, so a with -0 codes gives the oracle's result on gfx942 (and on gfx950, which
    reads OCP); without the mapping the same inputs give NaN."""
    cuda_emulation.skip_unless_hip_available()
    import torch
    s, o, case, view, inputs = _fp8_case("gemm_fp8", {"M": 40, "N": 130, "K": 96})
    codes = inputs["a"].view(torch.uint8)
    zeros = codes == 0
    codes[::3, ::5] = 0x80                       # -0 in OCP e4m3fn: the value 0
    codes[zeros] = 0x80
    assert int((inputs["a"].view(torch.uint8) == 0x80).sum()) > 100
    ref = o.reference({k: v.clone() for k, v in inputs.items()}, view)
    source, _ = committed("gemm_fp8", "mi350")
    mapping = "return (w & ~negzero & ~nan_bytes) | nan;"
    assert mapping in source
    for arch, text, should_match in (("gfx942", source, True), ("gfx950", source, True),
                                     ("gfx942", source.replace(mapping, "return w;"), False)):
        lib = ctypes.CDLL(str(cuda_emulation.build_hip(text, tmp_path / f"{arch}-{should_match}", arch=arch)))
        outputs, _, _ = cuda_emulation.run(lib, "gemm_fp8", case, inputs, target="mi350")
        err = excess(outputs["c"], ref["c"], s.case_tolerance(case))
        assert (err <= 1) == should_match, f"{arch}: worst error {err:.3g}x the tolerance"


def test_gemm_fp8_on_gfx942_undoes_the_fnuz_halving_of_both_operands(tmp_path):
    """Every OCP code read as FNUZ is half its value, so each product is a quarter: the committed
    epilogue's factor 4 is what makes gfx942 match, and planting 1 instead fails."""
    cuda_emulation.skip_unless_hip_available()
    s, o, case, view, inputs = _fp8_case("gemm_fp8", {"M": 64, "N": 64, "K": 64})
    ref = o.reference({k: v.clone() for k, v in inputs.items()}, view)
    source, _ = committed("gemm_fp8", "mi350")
    factor = "constexpr float kFormatScale = 4.0f;"
    assert factor in source
    for text, should_match in ((source, True), (source.replace(factor, "constexpr float kFormatScale = 1.0f;"), False)):
        lib = ctypes.CDLL(str(cuda_emulation.build_hip(text, tmp_path / str(should_match), arch="gfx942")))
        outputs, _, _ = cuda_emulation.run(lib, "gemm_fp8", case, inputs, target="mi350")
        assert (excess(outputs["c"], ref["c"], s.case_tolerance(case)) <= 1) == should_match


@pytest.mark.parametrize("arch", cuda_emulation.HIP_ARCHS)
def test_mx_gemm_turns_a_nan_block_scale_into_nan_outputs_of_its_row_only(tmp_path, arch):
    """An E8M0 scale of 0xff is NaN (OCP MX): the rows (of c) whose blocks carry one are NaN, every
    other element still matches the oracle."""
    cuda_emulation.skip_unless_hip_available()
    import torch
    s, o, case, view, inputs = _fp8_case("mx_gemm", {"M": 70, "N": 40, "K": 128})
    inputs["a_scale"][5, 2] = 0xff               # row 5 of A, block 2
    inputs["b_scale"][33, 0] = 0xff              # row 33 of B: column 33 of c
    source, _ = committed("mx_gemm", "mi350")
    lib = ctypes.CDLL(str(cuda_emulation.build_hip(source, tmp_path / arch, arch=arch)))
    outputs, _, _ = cuda_emulation.run(lib, "mx_gemm", case, inputs, target="mi350")
    c = outputs["c"].float()
    nan = torch.zeros_like(c, dtype=torch.bool)
    nan[5, :] = True
    nan[:, 33] = True
    assert torch.equal(torch.isnan(c), nan)
    clean = {k: v.clone() for k, v in inputs.items()}
    clean["a_scale"][5, 2], clean["b_scale"][33, 0] = 127, 127
    ref = o.reference(clean, view)["c"]
    keep = ~nan
    assert excess(c[keep], ref[keep], s.case_tolerance(case)) <= 1
