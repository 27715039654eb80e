"""The HIP emulation's MFMA model (tests/support/cuda_emulation.h) against a scalar matmul, lane by
lane and register by register, so that HIP sources on the matrix cores (gemm_bf16@mi350,
attention@mi350) can run against their oracles on the CPU. The layouts below are transcribed from
AMD's matrix instruction calculator (CDNA3, "matrix element to register mapping"): the direction
opposite to the header's model, which reads registers back into matrix elements. The same test
source is compiled for gfx942 and gfx950 by regen's HIP toolchain, so the builtins modelled are the
ones the device compiler takes, with the operand types it takes."""

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
