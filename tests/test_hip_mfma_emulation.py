"""The HIP emulation's MFMA model (tests/support/cuda_emulation.h) against a scalar matmul, lane by
lane and register by register, so that HIP sources on the matrix cores (gemm_bf16@mi350,
attention@mi350) can run against their oracles on the CPU. The layouts below are transcribed from
AMD's matrix instruction calculator (CDNA3, "matrix element to register mapping"): the direction
opposite to the header's model, which reads registers back into matrix elements. The same test
source is compiled for gfx942 and gfx950 by regen's HIP toolchain, so the builtins modelled are the
ones the device compiler takes, with the operand types it takes. gfx950's block-scaled MFMA with
FP4 operands is tested the same way at the end, with what its model assumes said there."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from support import cuda_emulation
from support.library import ROOT, target


# builtin -> (M (= N), K, elements per lane and operand, element dtype, calculator mnemonic)
MFMA = {
    "mfma_f32_32x32x8bf16_1k": (32, 8, 4, "bfloat16", "v_mfma_f32_32x32x8_bf16"),
    "mfma_f32_16x16x16bf16_1k": (16, 16, 4, "bfloat16", "v_mfma_f32_16x16x16_bf16"),
    "mfma_f32_32x32x8f16": (32, 8, 4, "float16", "v_mfma_f32_32x32x8_f16"),
    "mfma_f32_16x16x16f16": (16, 16, 4, "float16", "v_mfma_f32_16x16x16_f16"),
    "mfma_f32_32x32x16_fp8_fp8": (32, 16, 8, "e4m3", "v_mfma_f32_32x32x16_fp8_fp8"),
    "mfma_f32_16x16x32_fp8_fp8": (16, 32, 8, "e4m3", "v_mfma_f32_16x16x32_fp8_fp8"),
}
ARCHS = {"gfx942": "mi300x", "gfx950": "mi350"}
# e4m3 as each arch's matrix cores read it: FNUZ on gfx942 (CDNA3), OCP e4m3fn on gfx950 (CDNA4)
E4M3 = {"gfx942": "float8_e4m3fnuz", "gfx950": "float8_e4m3fn"}


def _element(name, k):
    """(lane group, element) of k: 16-bit operands: GPR floor(k / 2) % 2, bits 16 (k % 2), lane
    group floor(k / 4); 8-bit (fp8): GPR floor(k / 4) % 2, bits 8 (k % 4), lane group floor(k / 8).
    Element = the GPR's position in the lane's vector times its elements per GPR, plus the bits'."""
    if MFMA[name][3] == "e4m3":
        return k // 8, 4 * ((k // 4) % 2) + k % 4
    return k // 4, 2 * ((k // 2) % 2) + k % 2


def a_slot(name, i, k):
    """(lane, element) holding A[i][k]: lane M * group + i."""
    m = MFMA[name][0]
    group, e = _element(name, k)
    return m * group + i, e


def b_slot(name, k, j):
    """(lane, element) holding B[k][j]: lane M * group + j, same GPR and bits as A."""
    m = MFMA[name][0]
    group, e = _element(name, k)
    return m * group + j, e


def d_slot(name, i, j):
    """(lane, register) holding C/D[i][j]: 32 x 32: GPR 4 floor(i / 8) + i % 4, lane
    (32 floor(i / 4)) % 64 + j; 16 x 16: GPR i % 4, lane 16 floor(i / 4) + j."""
    m = MFMA[name][0]
    if m == 32:
        return (32 * (i // 4)) % 64 + j, 4 * (i // 8) + i % 4
    return 16 * (i // 4) + j, i % 4


def _operand_bytes(name):
    per, dtype = MFMA[name][2], MFMA[name][3]
    return per * (1 if dtype == "e4m3" else 2)


VECTOR = {"bfloat16": "short __attribute__((ext_vector_type(4)))",
          "float16": "_Float16 __attribute__((ext_vector_type(4)))", "e4m3": "long"}


def _source() -> str:
    """One kernel per builtin: block b is one wavefront whose lane l takes its A and B operand
    bytes and C registers from row b * 64 + l of the operand arrays and writes D there."""
    out = ["#include <hip/hip_runtime.h>"]
    for name, (m, _, per, dtype, _) in MFMA.items():
        regs, nb = m * m // 64, _operand_bytes(name)
        out.append(f"""
typedef {VECTOR[dtype]} in_{name};
typedef float acc_{name} __attribute__((ext_vector_type({regs})));
extern "C" __global__ void __launch_bounds__(64)
run_{name}(const unsigned char* a, const unsigned char* b, const float* c, float* d) {{
  const long long row = (long long)blockIdx.x * 64 + threadIdx.x;
  in_{name} va, vb;
  acc_{name} vc;
  __builtin_memcpy(&va, a + row * {nb}, {nb});
  __builtin_memcpy(&vb, b + row * {nb}, {nb});
  for (int r = 0; r < {regs}; ++r) vc[r] = c[row * {regs} + r];
  acc_{name} vd = __builtin_amdgcn_{name}(va, vb, vc, 0, 0, 0);
  for (int r = 0; r < {regs}; ++r) d[row * {regs} + r] = vd[r];
}}""")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """arch -> the test kernels built against the emulation for that arch."""
    cuda_emulation.skip_unless_hip_available()
    return {arch: ctypes.CDLL(str(cuda_emulation.build_hip(_source(), tmp_path_factory.mktemp(arch),
                                                           arch=arch))) for arch in ARCHS}


def _launch(lib, name, a_regs, b_regs, c_regs, threads=64):
    """Run kernel run_<name> over len(a_regs) // 64 wavefronts; returns D's registers [rows, regs]."""
    import torch
    rows = a_regs.shape[0]
    d = torch.full_like(c_regs, float("nan"))
    ptrs = [t.data_ptr() for t in (a_regs, b_regs, c_regs, d)]
    fn = ctypes.cast(getattr(lib, f"run_{name}"), ctypes.c_void_p).value
    lib.emu_launch(ctypes.c_void_p(fn), rows // threads, 1, 1, threads, 1, 1, 0, len(ptrs),
                   (ctypes.c_int64 * 32)(*ptrs), 0, (ctypes.c_float * 4)())
    return d


def _codes(x, name, arch):
    """Values -> their element codes as bytes [..., width]: bf16/f16 little-endian, e4m3 in the
    arch's format."""
    import torch
    dtype = MFMA[name][3]
    if dtype == "e4m3":
        return x.to(getattr(torch, E4M3[arch])).view(torch.uint8).unsqueeze(-1)
    return x.to(getattr(torch, dtype)).view(torch.uint8).reshape(*x.shape, 2)


def _scatter(name, arch, a, b, c):
    """Matrices (one set per wavefront: a [W, M, K], b [W, K, M], c [W, M, M]) -> the operand
    bytes and C registers each lane holds, placed by the calculator's layout."""
    import torch
    m, k_dim, per, _, _ = MFMA[name]
    w, nb = a.shape[0], _operand_bytes(name)
    width = nb // per
    a_regs = torch.zeros(w, 64, nb, dtype=torch.uint8)
    b_regs = torch.zeros(w, 64, nb, dtype=torch.uint8)
    c_regs = torch.zeros(w, 64, m * m // 64, dtype=torch.float32)
    ab, bb = _codes(a, name, arch), _codes(b, name, arch)
    for i in range(m):
        for k in range(k_dim):
            lane, e = a_slot(name, i, k)
            a_regs[:, lane, e * width:(e + 1) * width] = ab[:, i, k]
            lane, e = b_slot(name, k, i)
            b_regs[:, lane, e * width:(e + 1) * width] = bb[:, k, i]
        for j in range(m):
            lane, r = d_slot(name, i, j)
            c_regs[:, lane, r] = c[:, i, j]
    return a_regs.reshape(w * 64, nb), b_regs.reshape(w * 64, nb), c_regs.reshape(w * 64, -1)


def _gather(name, d_regs, waves):
    import torch
    m = MFMA[name][0]
    d_regs = d_regs.reshape(waves, 64, -1)
    out = torch.empty(waves, m, m)
    for i in range(m):
        for j in range(m):
            lane, r = d_slot(name, i, j)
            out[:, i, j] = d_regs[:, lane, r]
    return out


@pytest.mark.parametrize("name", MFMA)
def test_calculator_layout_is_a_bijection_onto_the_wavefronts_registers(name):
    m, k_dim, per, _, _ = MFMA[name]
    a = {a_slot(name, i, k) for i in range(m) for k in range(k_dim)}
    b = {b_slot(name, k, j) for k in range(k_dim) for j in range(m)}
    d = {d_slot(name, i, j) for i in range(m) for j in range(m)}
    every_input = {(lane, e) for lane in range(64) for e in range(per)}
    assert a == every_input and b == every_input
    assert d == {(lane, r) for lane in range(64) for r in range(m * m // 64)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", MFMA)
def test_emulated_mfma_equals_a_scalar_matmul_with_the_calculators_layout(libs, name, arch):
    """Random small integers (every product and sum exact in float32, every value exact in the
    element format), then random normals rounded to it, in 8 wavefronts at once: D read back
    through the calculator's layout is A B + C, with fp8 read as the arch's e4m3."""
    import torch
    m, k_dim, _, dtype, _ = MFMA[name]
    store = getattr(torch, E4M3[arch] if dtype == "e4m3" else dtype)
    g = torch.Generator().manual_seed(7)
    waves = 8
    for kind in ("integers", "normal"):
        if kind == "integers":
            a = torch.randint(-8, 9, (waves, m, k_dim), generator=g).float()
            b = torch.randint(-8, 9, (waves, k_dim, m), generator=g).float()
            c = torch.randint(-64, 65, (waves, m, m), generator=g).float()
        else:
            a = torch.randn(waves, m, k_dim, generator=g).to(store).float()
            b = torch.randn(waves, k_dim, m, generator=g).to(store).float()
            c = torch.randn(waves, m, m, generator=g)
        d = _gather(name, _launch(libs[arch], name, *_scatter(name, arch, a, b, c)), waves)
        want = (a.double() @ b.double() + c.double()).float()
        if kind == "integers":
            assert torch.equal(d, want), f"{name}: {(d != want).sum().item()} elements differ"
        else:
            assert torch.allclose(d, want, rtol=1e-5, atol=1e-5), (d - want).abs().max()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", MFMA)
@pytest.mark.parametrize("operand", ["A", "B"])
def test_every_lane_and_element_of_an_operand_reaches_the_matrix_element_it_holds(libs, name, arch,
                                                                                operand):
    """One wavefront per input slot (lane, element): that slot alone is 1 and the other operand
    holds integers that name their k (fp8 cannot hold K * M distinct values), so D is one row of
    B (or one column of A), and where it lands and what it holds says which A[i][k] (B[k][j]) the
    slot is. Every slot of the wavefront is tried."""
    import torch
    m, k_dim, per, _, _ = MFMA[name]
    slots = [(lane, e) for lane in range(64) for e in range(per)]
    waves = len(slots)
    ks = torch.arange(k_dim, dtype=torch.float32)                    # distinct, 4 significant
    k_code = (1 + (ks % 8) / 8) * torch.exp2(ks // 8)                # bits: exact in e4m3 too
    if operand == "A":
        other = k_code.reshape(k_dim, 1).expand(k_dim, m)            # B[k][j] names k
        zero_a = torch.zeros(waves, m, k_dim)
        _, b_regs, _ = _scatter(name, arch, zero_a, other.expand(waves, k_dim, m), torch.zeros(waves, m, m))
    else:
        other = k_code.reshape(1, k_dim).expand(m, k_dim)            # A[i][k] names k
        zero_b = torch.zeros(waves, k_dim, m)
        a_regs, _, _ = _scatter(name, arch, other.expand(waves, m, k_dim), zero_b, torch.zeros(waves, m, m))
    nb, width = _operand_bytes(name), _operand_bytes(name) // per
    one_hot = torch.zeros(waves, 64, nb, dtype=torch.uint8)
    one = _codes(torch.ones(1), name, arch)[0]
    for w, (lane, e) in enumerate(slots):
        one_hot[w, lane, e * width:(e + 1) * width] = one
    one_hot = one_hot.reshape(waves * 64, nb)
    if operand == "A":
        a_regs = one_hot
    else:
        b_regs = one_hot
    d = _gather(name, _launch(libs[arch], name, a_regs, b_regs, torch.zeros(waves * 64, m * m // 64)),
                waves)
    for w, (lane, e) in enumerate(slots):
        want = torch.zeros(m, m)
        if operand == "A":
            i, k = next((i, k) for i in range(m) for k in range(k_dim) if a_slot(name, i, k) == (lane, e))
            want[i, :] = k_code[k]
        else:
            k, j = next((k, j) for k in range(k_dim) for j in range(m) if b_slot(name, k, j) == (lane, e))
            want[:, j] = k_code[k]
        assert torch.equal(d[w], want), f"{name} on {arch}: {operand} slot lane {lane} element {e}"


def test_fp8_codes_are_read_in_each_archs_format(libs):
    """The same bytes mean different numbers on gfx942 (FNUZ: bias 8, 0x80 NaN) and gfx950 (OCP
    e4m3fn: bias 7, 0x7f NaN): one MFMA of 0x40 (2.0 in OCP, 1.0 in FNUZ) times 1.0, and the NaN
    codes of each format."""
    import torch
    name = "mfma_f32_32x32x16_fp8_fp8"
    for arch, want, nan_code, finite_code in (("gfx950", 2.0, 0x7f, 0x80), ("gfx942", 1.0, 0x80, 0x7f)):
        one = _codes(torch.ones(1), name, arch)[0]
        a = torch.zeros(64, 8, dtype=torch.uint8)
        b = torch.zeros(64, 8, dtype=torch.uint8)
        a[0, 0], b[0, 0] = 0x40, one                      # A[0][0] * B[0][0]
        d = _gather(name, _launch(libs[arch], name, a, b, torch.zeros(64, 16)), 1)[0]
        assert d[0, 0].item() == want and int((d != 0).sum()) == 1, arch
        a[0, 0] = nan_code
        d = _gather(name, _launch(libs[arch], name, a, b, torch.zeros(64, 16)), 1)[0]
        assert torch.isnan(d[0, 0]), arch
        a[0, 0] = finite_code                              # the other format's NaN: a number here
        d = _gather(name, _launch(libs[arch], name, a, b, torch.zeros(64, 16)), 1)[0]
        assert torch.isfinite(d).all(), arch


def test_an_mfma_over_half_a_wavefront_is_refused(tmp_path):
    """32 lanes (a CUDA warp) cannot issue a wavefront's MFMA: the emulation aborts, as a kernel
    whose block is not whole wavefronts would compute garbage on the device."""
    cuda_emulation.skip_unless_hip_available()
    so = cuda_emulation.build_hip(_source(), tmp_path / "k", arch="gfx950")
    script = ("import ctypes, sys, torch; sys.path.insert(0, {tests!r}); "
              "from test_hip_mfma_emulation import _launch; lib = ctypes.CDLL({so!r}); "
              "a = torch.zeros(64, 8, dtype=torch.uint8); c = torch.zeros(64, 16); "
              "_launch(lib, 'mfma_f32_32x32x8bf16_1k', a, a, c, threads={n}); print('ran')")
    whole = subprocess.run([sys.executable, "-c", script.format(tests=str(ROOT / "tests"), so=str(so), n=64)],
                           capture_output=True, text=True, cwd=ROOT)
    assert whole.returncode == 0 and "ran" in whole.stdout, whole.stderr
    half = subprocess.run([sys.executable, "-c", script.format(tests=str(ROOT / "tests"), so=str(so), n=32)],
                          capture_output=True, text=True, cwd=ROOT)
    assert half.returncode != 0 and "without the full wavefront" in half.stderr, half.stderr


@pytest.mark.parametrize("arch_target", ARCHS.values())
def test_the_modelled_builtins_compile_to_mfma_on_the_device(arch_target):
    """The test kernels, compiled by regen's HIP toolchain for gfx942 and gfx950, take the same
    builtins with the same operand types, and each becomes the calculator's instruction."""
    from regen.sass import missing_instructions
    from regen.toolchains.hip import Toolchain
    toolchain = Toolchain(hipcc=(), use_hiprtc=False)
    if toolchain.problem(target(arch_target)):
        pytest.skip(toolchain.problem(target(arch_target)))
    result = toolchain.compile(_source(), target(arch_target))
    assert result.ok, result.log
    for name, (*_, mnemonic) in MFMA.items():
        assert missing_instructions(result.disassembly, [mnemonic], kernel=f"run_{name}") == [], name


# -- gfx950's block-scaled MFMA, FP4 x FP4 (v_mfma_scale_f32_32x32x64_f8f6f4, cbsz = blgp = 4) ----
# The model's layout, written in the direction opposite to the header's: an FP4 operand is the low
# 128 bits of the 8-dword argument (the device compiler passes it in four registers), 32 e2m1
# codes per lane, two per byte, the lower k in the low nibble. A[i][k] is nibble k % 32 of lane
# 32 (k / 32) + i, B[k][j] nibble k % 32 of lane 32 (k / 32) + j, and byte 0 of the scale_a
# (scale_b) register of the same lane is the E8M0 scale of that 32-element block. The operand
# layout is the one the instruction's FP4 form is documented with; the scale's lane mapping (the
# lane holding a block supplies its scale) is an assumption no source here states and no machine
# here can check: a kernel that passes these tests is right on the device only if it holds.
SCALED = "mfma_scale_f32_32x32x64_f8f6f4"
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def fp4_a_slot(i, k):
    """(lane, nibble) holding A[i][k] (A is 32 x 64)."""
    return 32 * (k // 32) + i, k % 32


def fp4_b_slot(k, j):
    """(lane, nibble) holding B[k][j] (B is 64 x 32)."""
    return 32 * (k // 32) + j, k % 32


def scale_lane(index, k):
    """The lane whose scale byte 0 scales row `index` of A (column of B) for k's 32-block."""
    return 32 * (k // 32) + index


def _scaled_source() -> str:
    """Block b is one wavefront; lane l takes 16 bytes of A and B codes, its two scale words and 16
    C registers from row b * 64 + l, and writes D there. The unused upper half of each operand and
    the scale words' upper bytes hold junk, which the instruction must ignore."""
    return """#include <hip/hip_runtime.h>
typedef int i32x8 __attribute__((ext_vector_type(8)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
extern "C" __global__ void __launch_bounds__(64)
run_scaled(const unsigned char* a, const unsigned char* b, const int* scales, const float* c, float* d) {
  const long long row = (long long)blockIdx.x * 64 + threadIdx.x;
  i32x8 va, vb;
  for (int w = 0; w < 8; ++w) { va[w] = 0x5a5a5a5a; vb[w] = 0x3c3c3c3c; }
  __builtin_memcpy(&va, a + row * 16, 16);
  __builtin_memcpy(&vb, b + row * 16, 16);
  f32x16 vc;
  for (int r = 0; r < 16; ++r) vc[r] = c[row * 16 + r];
  f32x16 vd = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(va, vb, vc, 4, 4, 0, scales[2 * row], 0,
                                                              scales[2 * row + 1]);
  for (int r = 0; r < 16; ++r) d[row * 16 + r] = vd[r];
}
"""


@pytest.fixture(scope="module")
def scaled_lib(tmp_path_factory):
    cuda_emulation.skip_unless_hip_available()
    return ctypes.CDLL(str(cuda_emulation.build_hip(_scaled_source(), tmp_path_factory.mktemp("scaled"),
                                                    arch="gfx950")))


def _e2m1_codes(x):
    """e2m1 values (each one of E2M1) -> their 4-bit codes, as uint8."""
    import torch
    codes = torch.zeros(x.shape, dtype=torch.uint8)
    for code, v in enumerate(E2M1[:8]):
        codes[x.abs() == v] = code
    codes[x < 0] |= 8
    return codes


def _scaled_run(lib, a, b, sa, sb, c):
    """Matrices per wavefront (a [W, 32, 64] and b [W, 64, 32] of e2m1 values, sa [W, 32, 2] and
    sb [W, 32, 2] scale bytes per (row or column, block), c [W, 32, 32]) placed by the layout above
    and run; returns D [W, 32, 32] read back through the 32 x 32 MFMA's accumulator layout."""
    import torch
    w = a.shape[0]
    a_codes = torch.zeros(w, 64, 32, dtype=torch.uint8)
    b_codes = torch.zeros(w, 64, 32, dtype=torch.uint8)
    scales = torch.full((w, 64, 2), 0x7a7a7a00, dtype=torch.int32)   # junk in bytes 1-3
    ac, bc = _e2m1_codes(a), _e2m1_codes(b)
    for i in range(32):
        for k in range(64):
            lane, nib = fp4_a_slot(i, k)
            a_codes[:, lane, nib] = ac[:, i, k]
            lane, nib = fp4_b_slot(k, i)
            b_codes[:, lane, nib] = bc[:, k, i]
        for g in range(2):
            scales[:, scale_lane(i, 32 * g), 0] |= sa[:, i, g].to(torch.int32)
            scales[:, scale_lane(i, 32 * g), 1] |= sb[:, i, g].to(torch.int32)
    pack = lambda codes: (codes[..., 0::2] | (codes[..., 1::2] << 4)).reshape(w * 64, 16)  # noqa: E731
    c_regs = torch.zeros(w, 64, 16)
    for i in range(32):
        for j in range(32):
            lane, r = d_slot("mfma_f32_32x32x8bf16_1k", i, j)
            c_regs[:, lane, r] = c[:, i, j]
    d = torch.full((w * 64, 16), float("nan"))
    args = [pack(a_codes).contiguous(), pack(b_codes).contiguous(), scales.reshape(w * 64, 2).contiguous(),
            c_regs.reshape(w * 64, 16).contiguous(), d]
    fn = ctypes.cast(lib.run_scaled, ctypes.c_void_p).value
    lib.emu_launch(ctypes.c_void_p(fn), w, 1, 1, 64, 1, 1, 0, len(args),
                   (ctypes.c_int64 * 40)(*[t.data_ptr() for t in args]), 0, (ctypes.c_float * 4)())
    return _gather("mfma_f32_32x32x8bf16_1k", d, w)


def _scaled_reference(a, b, sa, sb, c):
    import torch
    sa_k = torch.exp2(sa.double() - 127).repeat_interleave(32, dim=2)          # [W, 32, 64]
    sb_k = torch.exp2(sb.double() - 127).repeat_interleave(32, dim=2)          # [W, 32 (j), 64]
    return ((a.double() * sa_k) @ (b.double() * sb_k.transpose(1, 2)) + c.double()).float()


def test_scaled_fp4_layout_is_a_bijection_onto_the_wavefronts_nibbles():
    every = {(lane, n) for lane in range(64) for n in range(32)}
    assert {fp4_a_slot(i, k) for i in range(32) for k in range(64)} == every
    assert {fp4_b_slot(k, j) for k in range(64) for j in range(32)} == every
    assert {scale_lane(i, k) for i in range(32) for k in (0, 32)} == set(range(64))


def test_emulated_scaled_mfma_equals_a_scalar_block_scaled_matmul(scaled_lib):
    """Random e2m1 codes, scale bytes from 2^-6 to 2^6 and integer C in 8 wavefronts: D is
    C + (A 2^(sa - 127)) (B 2^(sb - 127)) (exact: block sums of e2m1 products are, and the scales
    are powers of two)."""
    import torch
    g = torch.Generator().manual_seed(11)
    w = 8
    values = torch.tensor(E2M1)
    a = values[torch.randint(0, 16, (w, 32, 64), generator=g)]
    b = values[torch.randint(0, 16, (w, 64, 32), generator=g)]
    sa = torch.randint(121, 134, (w, 32, 2), generator=g)
    sb = torch.randint(121, 134, (w, 32, 2), generator=g)
    c = torch.randint(-64, 65, (w, 32, 32), generator=g).float()
    d = _scaled_run(scaled_lib, a, b, sa, sb, c)
    want = _scaled_reference(a, b, sa, sb, c)
    assert torch.allclose(d, want, rtol=1e-6, atol=1e-6), (d - want).abs().max()


@pytest.mark.parametrize("operand", ["A", "B"])
def test_every_fp4_slot_reaches_the_element_it_holds(scaled_lib, operand):
    """One wavefront per (lane, nibble): that code alone is 1.0; the other operand is 1 where its
    row (column) index equals k % 32 and its block-g scale is 2^(3 g), so the single non-zero
    output's position and value name (i, k) of A (or (k, j) of B)."""
    import torch
    slots = [(lane, n) for lane in range(64) for n in range(32)]
    w = len(slots)
    a = torch.zeros(w, 32, 64)
    b = torch.zeros(w, 64, 32)
    ones = torch.full((w, 32, 2), 127)
    ladder = torch.tensor([127, 130]).expand(w, 32, 2)
    for x, (lane, n) in enumerate(slots):
        if operand == "A":
            i, k = next((i, k) for i in range(32) for k in range(64) if fp4_a_slot(i, k) == (lane, n))
            a[x, i, k] = 1.0
        else:
            k, j = next((k, j) for k in range(64) for j in range(32) if fp4_b_slot(k, j) == (lane, n))
            b[x, k, j] = 1.0
    kk = torch.arange(64)
    if operand == "A":
        b[:, kk, kk % 32] = 1.0
        d = _scaled_run(scaled_lib, a, b, ones, ladder, torch.zeros(w, 32, 32))
    else:
        a[:, kk % 32, kk] = 1.0
        d = _scaled_run(scaled_lib, a, b, ladder, ones, torch.zeros(w, 32, 32))
    for x, (lane, n) in enumerate(slots):
        want = torch.zeros(32, 32)
        if operand == "A":
            i, k = next((i, k) for i in range(32) for k in range(64) if fp4_a_slot(i, k) == (lane, n))
            want[i, k % 32] = 2.0 ** (3 * (k // 32))
        else:
            k, j = next((k, j) for k in range(64) for j in range(32) if fp4_b_slot(k, j) == (lane, n))
            want[k % 32, j] = 2.0 ** (3 * (k // 32))
        assert torch.equal(d[x], want), f"{operand} slot lane {lane} nibble {n}"


@pytest.mark.parametrize("operand", ["A", "B"])
def test_every_lanes_scale_byte_scales_the_block_it_holds(scaled_lib, operand):
    """One wavefront per lane: every code 1.0 in block 0 and 0.5 in block 1, every scale 2^0 but
    that lane's (for A, or for B) 2^1: the row (column) it scales gets 32 * 2 + 16 (block 0) or
    32 + 32 (block 1) where the others get 48. A NaN scale (0xff) makes that row (column) NaN."""
    import torch
    w = 64
    a = torch.cat([torch.ones(w, 32, 32), torch.full((w, 32, 32), 0.5)], dim=2)
    b = torch.cat([torch.ones(w, 32, 32), torch.ones(w, 32, 32)], dim=1)
    sa, sb = torch.full((w, 32, 2), 127), torch.full((w, 32, 2), 127)
    mine = sa if operand == "A" else sb
    for lane in range(64):
        mine[lane, lane % 32, lane // 32] = 128
    d = _scaled_run(scaled_lib, a, b, sa, sb, torch.zeros(w, 32, 32))
    for lane in range(64):
        want = torch.full((32, 32), 48.0)
        line = want[lane % 32, :] if operand == "A" else want[:, lane % 32]
        line.fill_(80.0 if lane < 32 else 64.0)
        assert torch.equal(d[lane], want), f"{operand} scale of lane {lane}"
    mine.fill_(127)
    mine[0, 5, 1] = 0xff
    d = _scaled_run(scaled_lib, a[:1], b[:1], sa[:1], sb[:1], torch.zeros(1, 32, 32))[0]
    nan = torch.zeros(32, 32, dtype=torch.bool)
    if operand == "A":
        nan[5, :] = True
    else:
        nan[:, 5] = True
    assert torch.equal(torch.isnan(d), nan)


def test_the_scaled_builtin_compiles_to_the_fp4_scaled_mfma_on_gfx950():
    """The test kernel, compiled by regen's HIP toolchain for gfx950, takes the builtin with the
    same operand types and becomes v_mfma_scale_f32_32x32x64_f8f6f4 with FP4 operands (cbsz:4
    blgp:4) read from four registers each; gfx942 has no such instruction."""
    import re
    from regen.toolchains.hip import Toolchain
    toolchain = Toolchain(hipcc=(), use_hiprtc=False)
    if toolchain.problem(target("mi350")):
        pytest.skip(toolchain.problem(target("mi350")))
    result = toolchain.compile(_scaled_source(), target("mi350"))
    assert result.ok, result.log
    line = next(x for x in result.disassembly.splitlines() if "v_mfma_scale_f32_32x32x64_f8f6f4" in x)
    assert "cbsz:4" in line and "blgp:4" in line, line
    operands = re.search(r"v_mfma_scale_f32_32x32x64_f8f6f4\s+v\[\d+:\d+\], v\[(\d+):(\d+)\], v\[(\d+):(\d+)\]", line)
    assert operands and all(int(operands.group(2 * n + 2)) - int(operands.group(2 * n + 1)) == 3
                            for n in range(2)), line
    assert not toolchain.compile(_scaled_source(), target("mi300x")).ok


def test_an_unmodelled_scaled_format_aborts(tmp_path):
    """An fp8 (cbsz 0) scaled MFMA is not modelled: the emulation stops with a message."""
    cuda_emulation.skip_unless_hip_available()
    source = _scaled_source().replace("(va, vb, vc, 4, 4,", "(va, vb, vc, 0, 0,")
    so = cuda_emulation.build_hip(source, tmp_path / "k", arch="gfx950")
    script = ("import ctypes, torch; lib = ctypes.CDLL({so!r}); "
              "bufs = [torch.zeros(64, 16, dtype=torch.uint8), torch.zeros(64, 16, dtype=torch.uint8), "
              "torch.full((64, 2), 127, dtype=torch.int32), torch.zeros(64, 16), torch.zeros(64, 16)]; "
              "fn = ctypes.cast(lib.run_scaled, ctypes.c_void_p).value; "
              "lib.emu_launch(ctypes.c_void_p(fn), 1, 1, 1, 64, 1, 1, 0, 5, "
              "(ctypes.c_int64 * 40)(*[t.data_ptr() for t in bufs]), 0, (ctypes.c_float * 4)()); print('ran')")
    done = subprocess.run([sys.executable, "-c", script.format(so=str(so))], capture_output=True, text=True)
    assert done.returncode != 0 and "only FP4" in done.stderr, done.stderr
