"""attention (specs/attention.yaml): the float64 oracle against torch, its invariant checks, the
causal compute floor, and the committed h200 source under the CUDA emulation on the shapes at its
tile boundaries (the TMA, wgmma and mbarrier primitives run their host-pass meaning there),
including proof that the emulated wgmma really reads through the 128-byte swizzle; the committed
cdna (mi350/mi300x) source under the HIP emulation's MFMA model at its own tile boundaries, its
head-size dispatch, and its machine code for gfx942 and gfx950; the b200 (mma.sync) source under the
CUDA emulation's ldmatrix and mma.sync models, and its SASS."""

from __future__ import annotations

import ctypes
import re

import pytest

from regen.spec import Case
from regen.store import Store
from support import cuda_emulation
from support.library import ROOT, assert_matches, committed, excess, oracle, oracle_case, spec


def _case(**fields) -> Case:
    params = fields.pop("params", {})
    return Case.model_validate({**fields, "params": params})


def _inputs(case, seed=0):
    view = oracle_case(spec("attention"), case)
    return view, oracle("attention").make_inputs(view, seed)


@pytest.mark.parametrize("causal", [True, False])
def test_reference_matches_torch_sdpa_with_grouped_heads(causal):
    import torch
    case = _case(B=2, Hkv=2, G=4, S=37, D=16, params={"causal": causal, "scale": 0.3})
    view, x = _inputs(case)
    ref = oracle("attention").reference(x, view)
    q, k, v = (x[n].to(torch.float64) for n in ("q", "k", "v"))
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1), is_causal=causal, scale=0.3)
    assert torch.allclose(ref["out"], want, atol=1e-12, rtol=1e-12)
    s = (q @ k.repeat_interleave(4, dim=1).transpose(-1, -2)) * 0.3
    if causal:
        s = s.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(ref["lse"], torch.logsumexp(s, dim=-1), atol=1e-12, rtol=1e-12)
    assert ref["lse"].shape == (2, 8, 37)


def test_causal_mask_hides_later_keys():
    """Row i of a causal output does not change when keys and values after i do."""
    case = _case(B=1, Hkv=1, G=1, S=9, D=8, params={"causal": True})
    view, x = _inputs(case)
    a = oracle("attention").reference(x, view)
    x2 = {n: t.clone() for n, t in x.items()}
    x2["k"][:, :, 5:] = 7.0
    x2["v"][:, :, 5:] = -3.0
    b = oracle("attention").reference(x2, view)
    assert bool((a["out"][:, :, :5] == b["out"][:, :, :5]).all())
    assert not bool((a["out"][:, :, 5:] == b["out"][:, :, 5:]).all())


def test_check_names_each_broken_invariant():
    import torch
    case = _case(B=1, Hkv=1, G=2, S=20, D=16, params={"causal": True})
    view, x = _inputs(case)
    o = oracle("attention")
    good = o.reference(x, view)
    good = {"out": good["out"].to(torch.bfloat16), "lse": good["lse"].float()}
    assert o.check(x, good, view) == []
    bad_out = dict(good, out=good["out"].clone())
    bad_out["out"][0, 1, 3, 2] = 50.0
    assert [m.split(":")[0] for m in o.check(x, bad_out, view)] == ["convex_combination"]
    bad_lse = dict(good, lse=good["lse"] - 1.0)
    assert [m.split(":")[0] for m in o.check(x, bad_lse, view)] == ["lse_bounds"]


def test_compute_floor_counts_only_unmasked_pairs():
    s = spec("attention")
    causal = _case(B=2, Hkv=8, G=4, S=1024, D=128)
    full = _case(B=2, Hkv=8, G=4, S=1024, D=128, params={"causal": False})
    assert s.case_flops(full) == 4 * 2 * 32 * 128 * 1024 * 1024
    assert s.case_flops(causal) == 4 * 2 * 32 * 128 * (1024 * 1025 // 2)


def test_baseline_returns_out_and_lse_within_tolerance_on_cpu():
    import torch
    s = spec("attention")
    case = _case(B=1, Hkv=2, G=2, S=70, D=64, dtype="bfloat16", params={"scale": 0.125})
    view, x = _inputs(case)
    got = oracle("attention").baseline(x, view)
    ref = oracle("attention").reference(x, view)
    assert got["out"].dtype == torch.bfloat16 and got["lse"].dtype == torch.float32
    assert got["lse"].is_contiguous()
    assert excess(got["out"], ref["out"], s.case_tolerance(case)) <= 1
    assert excess(got["lse"], ref["lse"], s.case_tolerance(case)) <= 1


# Tile boundaries of the h200 recipe (128-row query and key tiles, a 2-stage ring, so 3+ key
# tiles reuse a stage, persistent blocks that take several tiles), each fast path and the
# fallback, causal and not, GQA and batches.
EMULATED_SHAPES = [
    {"B": 1, "Hkv": 1, "G": 2, "S": 128, "D": 64},
    {"B": 2, "Hkv": 1, "G": 1, "S": 129, "D": 128, "params": {"causal": False}},
    {"B": 1, "Hkv": 2, "G": 2, "S": 256, "D": 128},
    {"B": 1, "Hkv": 1, "G": 1, "S": 383, "D": 64, "params": {"causal": False, "scale": 0.125}},
    {"B": 1, "Hkv": 1, "G": 1, "S": 520, "D": 128, "params": {"scale": 0.3}},
    {"B": 1, "Hkv": 1, "G": 2, "S": 33, "D": 200, "params": {"causal": False}},
    {"B": 2, "Hkv": 1, "G": 1, "S": 21, "D": 320},  # the fallback's two d slices
    # more work tiles than the 132 persistent blocks: blocks take 2-3 tiles of unequal length
    {"B": 2, "Hkv": 2, "G": 18, "S": 200, "D": 64},
    {"B": 1, "Hkv": 2, "G": 25, "S": 300, "D": 128, "params": {"causal": False}},
]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    cuda_emulation.skip_unless_available()
    source, _ = committed("attention", "h200")
    return ctypes.CDLL(str(cuda_emulation.build(source, tmp_path_factory.mktemp("attention"))))


def _shape_params():
    out = []
    for f in EMULATED_SHAPES:
        tiles = f["B"] * f["Hkv"] * f["G"] * -(-f["S"] // 128)
        out.append(pytest.param(f, id="S{S}-D{D}".format(**f),
                                marks=[pytest.mark.slow] if tiles > 132 else []))
    return out


@pytest.mark.parametrize("fields", _shape_params())
def test_h200_source_matches_oracle_at_tile_boundaries_under_emulation(emulated, fields):
    case = _case(**fields)
    view, x = _inputs(case, seed=3)
    pristine = {n: t.clone() for n, t in x.items()}
    outputs, changed, ran = cuda_emulation.run(emulated, "attention", case, x)
    assert not changed
    want = 64 if fields["D"] == 64 else 128 if fields["D"] == 128 else None
    assert ran == [f"attention_tma_d{want}_bf16" if want else "attention_rows_bf16"]
    assert_matches(outputs, oracle("attention").reference(pristine, view),
                   spec("attention").case_tolerance(case), f"{ran}: ")


def test_emulated_wgmma_reads_through_the_swizzle(tmp_path):
    """The emulation is a real check of the shared-memory layout: the committed source with its
    tensor maps declared unswizzled (so TMA places the tiles plainly) computes wrong outputs,
    because the emulated wgmma reads each operand through the descriptor's 128-byte swizzle as the
    tensor cores do."""
    cuda_emulation.skip_unless_available()
    source, _ = committed("attention", "h200")
    recipe = Store(ROOT / "cache").current("attention", "h200").recipe()
    assert recipe.count("swizzle: 128B") == 4
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "kernel.cu").write_text(source)
    (tmp_path / "plain" / "launch.yaml").write_text(recipe.replace("swizzle: 128B", "swizzle: none"))
    lib = ctypes.CDLL(str(cuda_emulation.build(source, tmp_path / "build")))
    case = _case(B=1, Hkv=1, G=1, S=64, D=64)
    view, x = _inputs(case)
    pristine = {n: t.clone() for n, t in x.items()}
    outputs, _, ran = cuda_emulation.run(lib, "attention", case, x, folder=tmp_path / "plain")
    assert ran == ["attention_tma_d64_bf16"]
    assert excess(outputs["out"], oracle("attention").reference(pristine, view)["out"],
                  spec("attention").case_tolerance(case)) > 1


# -- mi350 / mi300x (one cdna entry): MFMA flash kernels and the rows fallback ---------------------

# Tile boundaries of the cdna recipe: 32-key tiles (one, two, a 2-stage LDS ring reused from the
# third on), 128-row query tiles of 4 wavefronts (a wavefront wholly past S; under the causal mask
# wavefronts that stop at their own diagonal while the workgroup walks on), padded heads and the
# rows fallback's key blocks of 64.
CDNA_SHAPES = [
    {"B": 1, "Hkv": 1, "G": 1, "S": 32, "D": 64},
    {"B": 1, "Hkv": 1, "G": 1, "S": 33, "D": 128, "params": {"causal": False}},
    {"B": 1, "Hkv": 1, "G": 2, "S": 97, "D": 64},
    {"B": 1, "Hkv": 1, "G": 1, "S": 128, "D": 128},
    {"B": 2, "Hkv": 1, "G": 1, "S": 161, "D": 64, "params": {"causal": False, "scale": 0.3}},
    {"B": 1, "Hkv": 2, "G": 2, "S": 255, "D": 128, "params": {"scale": 0.2}},
    {"B": 1, "Hkv": 1, "G": 1, "S": 100, "D": 48},
    {"B": 1, "Hkv": 1, "G": 1, "S": 130, "D": 136, "params": {"causal": False}},
]
CDNA_KERNEL = {64: "attention_mfma_d64_bf16", 128: "attention_mfma_d128_bf16",
               48: "attention_mfma_p64_bf16", 136: "attention_rows_bf16"}


@pytest.fixture(scope="module")
def emulated_cdna(tmp_path_factory):
    cuda_emulation.skip_unless_hip_available()
    source, _ = committed("attention", "mi350")
    return ctypes.CDLL(str(cuda_emulation.build_hip(source, tmp_path_factory.mktemp("attention-hip"))))


@pytest.mark.parametrize("fields", CDNA_SHAPES, ids=lambda f: "S{S}-D{D}-G{G}".format(**f))
def test_cdna_source_matches_oracle_at_tile_boundaries_under_the_hip_emulation(emulated_cdna, fields):
    case = _case(**fields)
    view, x = _inputs(case, seed=3)
    pristine = {n: t.clone() for n, t in x.items()}
    outputs, changed, ran = cuda_emulation.run(emulated_cdna, "attention", case, x, target="mi350",
                                               repeat=2)
    assert not changed
    assert ran == [CDNA_KERNEL[fields["D"]]] * 2
    assert_matches(outputs, oracle("attention").reference(pristine, view),
                   spec("attention").case_tolerance(case), f"{ran}: ")


def test_cdna_recipe_sends_every_head_size_up_to_128_to_the_matrix_cores():
    """D a multiple of 8 up to 128 takes an MFMA kernel (the exact 64 and 128 ones for the bench
    heads), anything else the rows fallback; one launch for each."""
    from support.library import bound
    for d in range(1, 330):
        case = _case(B=1, Hkv=1, G=1, S=5, D=d)
        names = [launch.kernel for launch in bound("attention", "mi350", case)[0]]
        want = ("attention_mfma_d64_bf16" if d == 64 else "attention_mfma_d128_bf16" if d == 128
                else "attention_rows_bf16" if d % 8 or d > 128 else None)
        assert len(names) == 1, f"D={d}: {names}"
        assert names[0] == want if want else names[0].startswith("attention_mfma_p"), f"D={d}: {names}"


@pytest.mark.parametrize("name", ["mi300x", "mi350"])
def test_cdna_flash_kernels_run_on_the_matrix_cores_without_spills(name):
    """Both products of every flash kernel are v_mfma_f32_32x32x8_bf16 (gfx942 and gfx950), no
    kernel spills or uses scratch, and the fallback has no MFMA at all."""
    from regen.sass import missing_instructions
    from regen.toolchains.hip import Toolchain
    from support.library import target
    toolchain = Toolchain(hipcc=(), use_hiprtc=False)
    if toolchain.problem(target(name)):
        pytest.skip(toolchain.problem(target(name)))
    source, _ = committed("attention", "mi350")
    result = toolchain.compile(source, target(name))
    assert result.ok, result.log
    flash = [k for k in result.resources if k.startswith("attention_mfma_")]
    assert len(flash) == 6
    for kernel in flash:
        assert missing_instructions(result.disassembly, ["v_mfma_f32_32x32x8_bf16", "ds_read_b128"],
                                    kernel=kernel) == [], kernel
    assert missing_instructions(result.disassembly, ["v_mfma"], kernel="attention_rows_bf16") == ["v_mfma"]
    for kernel, res in result.resources.items():
        assert res["scratch_bytes"] == 0 and res["vgpr_spills"] == 0, (kernel, res)
        assert res["shared_bytes"] <= target(name).limits["lds_per_workgroup"]


# -- b200: mma.sync.m16n8k16 flash kernels (not tcgen05) and the warp-per-row fallback -----------

# Tile boundaries of the b200 recipe: 64-key tiles in a two-stage ring (one, two, reused from the
# third), 64-row query tiles of 4 warps (a warp wholly past S; causal warps stopping at their own
# diagonal), GQA, the fallback.
B200_SHAPES = [
    {"B": 1, "Hkv": 1, "G": 1, "S": 64, "D": 64},
    {"B": 1, "Hkv": 1, "G": 2, "S": 65, "D": 128, "params": {"causal": False}},
    {"B": 2, "Hkv": 1, "G": 1, "S": 100, "D": 64, "params": {"scale": 0.3}},
    {"B": 1, "Hkv": 2, "G": 2, "S": 193, "D": 128},
    {"B": 1, "Hkv": 1, "G": 1, "S": 17, "D": 96, "params": {"causal": False}},
]


@pytest.fixture(scope="module")
def emulated_b200(tmp_path_factory):
    cuda_emulation.skip_unless_available()
    source, _ = committed("attention", "b200")
    return ctypes.CDLL(str(cuda_emulation.build(source, tmp_path_factory.mktemp("attention-b200"),
                                                cuda_arch=1000)))


@pytest.mark.parametrize("fields", B200_SHAPES, ids=lambda f: "S{S}-D{D}-G{G}".format(**f))
def test_b200_source_matches_oracle_at_tile_boundaries_under_emulation(emulated_b200, fields):
    """The host pass runs the device's tiling, swizzle, masks and softmax, with ldmatrix and
    mma.sync through the emulation's fragment models (tests/test_cuda_fragment_emulation.py)."""
    case = _case(**fields)
    view, x = _inputs(case, seed=5)
    pristine = {n: t.clone() for n, t in x.items()}
    outputs, changed, ran = cuda_emulation.run(emulated_b200, "attention", case, x, target="b200",
                                               repeat=2)
    assert not changed
    want = {64: "attention_mma_d64_bf16", 128: "attention_mma_d128_bf16"}.get(fields["D"],
                                                                            "attention_rows_bf16")
    assert ran == [want] * 2
    assert_matches(outputs, oracle("attention").reference(pristine, view),
                   spec("attention").case_tolerance(case), f"{ran}: ")


def test_b200_flash_kernels_are_mma_sync_not_tcgen05():
    """What the b200 artifact is, stated by its machine code: HMMA fed by ldmatrix (LDSM, .trans
    for V) from cp.async tiles (LDGSTS), no UTC*MMA (tcgen05), no spills."""
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    from support.library import target
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    source, _ = committed("attention", "b200")
    result = toolchain.compile(source, target("b200"))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    for kernel in ("attention_mma_d64_bf16", "attention_mma_d128_bf16"):
        assert missing_instructions(result.disassembly, ["HMMA.16816.F32.BF16", "LDSM.16.M88.4",
                                                         "LDSM.16.MT88.4", "LDGSTS"], kernel=kernel) == []
        assert missing_instructions(result.disassembly, ["UTCHMMA", "UTCQMMA"], kernel=kernel) == \
            ["UTCHMMA", "UTCQMMA"]
    assert all(r["spill_bytes"] == 0 for r in result.resources.values()), result.resources


# -- h200 variants (variants/attention/tma_*): TMA producer, consumers with and without ping-pong --
# (their emulation runs are in tests/test_cuda_emulation.py, with every variants/attention folder)
TMA_VARIANTS = ["tma_pingpong", "tma_overlap"]


@pytest.mark.parametrize("variant", TMA_VARIANTS)
def test_h200_tma_variant_recipe_sends_each_head_size_to_one_launch(variant):
    """D 64 and 128 take the TMA kernels, any other D the warp-per-row fallback, one launch each,
    and the TMA kernels' maps bind for the shapes at the ends of the spec's range."""
    from support.library import ROOT, bound
    folder = ROOT / "variants" / "attention" / variant
    for d in range(8, 330, 8):
        case = _case(B=1, Hkv=1, G=1, S=5, D=d)
        names = [launch.kernel for launch in bound("attention", "h200", case, folder)[0]]
        assert names == [{64: "attention_tma_d64_bf16", 128: "attention_tma_d128_bf16"}.get(
            d, "attention_rows_bf16")], f"D={d}: {names}"
    for fields in ({"B": 16, "Hkv": 8, "G": 4, "S": 1024, "D": 128}, {"B": 1, "Hkv": 8, "G": 4, "S": 16384, "D": 128},
                   {"B": 2, "Hkv": 1, "G": 1, "S": 1, "D": 64}, {"B": 1, "Hkv": 1, "G": 8, "S": 16385, "D": 64}):
        launches = bound("attention", "h200", _case(**fields), folder)[0]
        maps = [a.value for a in launches[0].args if a.kind == "tensormap"]
        assert [m.name for m in maps] == ["tma_q", "tma_k", "tma_v", "tma_o"]
        heads = {"tma_q": fields["B"] * fields["Hkv"] * fields["G"], "tma_o": fields["B"] * fields["Hkv"] * fields["G"],
                 "tma_k": fields["B"] * fields["Hkv"], "tma_v": fields["B"] * fields["Hkv"]}
        for m in maps:   # [D, S, heads]: a box is clipped at S, never reading the next head's rows
            assert m.dims == (fields["D"], fields["S"], heads[m.name]), m
            assert m.box[0] * 2 == 128 and m.swizzle == "128B"


@pytest.mark.parametrize("variant", ["committed", "tma_overlap"])   # committed: tma_pingpong's source
def test_h200_tma_variant_loads_by_tma_and_runs_both_gemms_on_wgmma(variant):
    """What the variant is, stated by its machine code (NVRTC for sm_90a, cuobjdump): in both fast
    kernels the copies are TMA tensor loads (UTMALDG.3D) and stores (UTMASTG.3D, after STSM), not
    cp.async; S is HGMMA.64x128x16 from two descriptors, O += P V HGMMA.64x64x16 with P in
    registers and V transposed (tnspB); the warpgroups reallocate registers (USETMAXREG down for
    the producer, up for the consumers) and wait on mbarriers; nothing spills; the fallback has no
    HGMMA."""
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    from support.library import ROOT, target
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    source = committed("attention", "h200")[0] if variant == "committed" else \
        (ROOT / "variants" / "attention" / variant / "kernel.cu").read_text()
    result = toolchain.compile(source, target("h200"))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert all(r["spill_bytes"] == 0 for r in result.resources.values()), result.resources
    # setmaxnreg moves registers within the block's allocation: 128 x (168 - 24) given back by
    # the producer are exactly the 256 x (240 - 168) the consumers ask for; at another launch
    # count the consumers' setmaxnreg.inc would wait for registers that never come
    for kernel in ("attention_tma_d64_bf16", "attention_tma_d128_bf16"):
        assert result.resources[kernel]["registers"] == 168, result.resources[kernel]
    required = ["UTMALDG.3D", "UTMASTG.3D", "STSM.16.M88.4", "HGMMA.64x128x16.F32.BF16",
                "HGMMA.64x64x16.F32.BF16", "USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC",
                "SYNCS.PHASECHK", "WARPGROUP.DEPBAR"]
    functions = {}
    name = None
    for line in result.disassembly.splitlines():
        if "Function :" in line:
            name = line.split(":", 1)[1].strip()
        elif name and "HGMMA.64x64x16" in line:
            functions.setdefault(name, []).append(line)
    for kernel in ("attention_tma_d64_bf16", "attention_tma_d128_bf16"):
        assert missing_instructions(result.disassembly, required, kernel=kernel) == [], kernel
        assert missing_instructions(result.disassembly, ["LDGSTS"], kernel=kernel) == ["LDGSTS"]
        pv = functions[kernel]
        assert pv and all(".tnspB" in line and re.search(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, R\d+, gdesc", line)
                          for line in pv), pv
    assert missing_instructions(result.disassembly, ["HGMMA"], kernel="attention_rows_bf16") == ["HGMMA"]
