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
}


def a_slot(name, i, k):
    """(lane, element) holding A[i][k]: lane M * floor(k / 4) + i, GPR floor(k / 2) % 2, bits
    16 (k % 2) (element 2 GPR + k % 2 = k % 4 of the lane's four)."""
    m, _, _, _, _ = MFMA[name]
    return m * (k // 4) + i, 2 * ((k // 2) % 2) + k % 2


def b_slot(name, k, j):
    """(lane, element) holding B[k][j]: lane M * floor(k / 4) + j, same GPR and bits as A."""
    m, _, _, _, _ = MFMA[name]
    return m * (k // 4) + j, 2 * ((k // 2) % 2) + k % 2


def d_slot(name, i, j):
    """(lane, register) holding C/D[i][j]: 32 x 32: GPR 4 floor(i / 8) + i % 4, lane
    (32 floor(i / 4)) % 64 + j; 16 x 16: GPR i % 4, lane 16 floor(i / 4) + j."""
    m, _, _, _, _ = MFMA[name]
    if m == 32:
        return (32 * (i // 4)) % 64 + j, 4 * (i // 8) + i % 4
    return 16 * (i // 4) + j, i % 4


TYPES = {"bfloat16": "short", "float16": "_Float16"}


def _source() -> str:
    """One kernel per builtin: block b is one wavefront whose lane l takes its A and B elements and
    C registers from row b * 64 + l of the operand arrays and writes D there."""
    out = ["#include <hip/hip_runtime.h>"]
    for name, (m, _, per, dtype, _) in MFMA.items():
        regs = m * m // 64
        out.append(f"""
typedef {TYPES[dtype]} in_{name} __attribute__((ext_vector_type({per})));
typedef float acc_{name} __attribute__((ext_vector_type({regs})));
extern "C" __global__ void __launch_bounds__(64)
run_{name}(const unsigned short* a, const unsigned short* b, const float* c, float* d) {{
  const long long row = (long long)blockIdx.x * 64 + threadIdx.x;
  in_{name} va, vb;
  acc_{name} vc;
  for (int e = 0; e < {per}; ++e) {{
    va[e] = __builtin_bit_cast({TYPES[dtype]}, a[row * {per} + e]);
    vb[e] = __builtin_bit_cast({TYPES[dtype]}, b[row * {per} + e]);
  }}
  for (int r = 0; r < {regs}; ++r) vc[r] = c[row * {regs} + r];
  acc_{name} vd = __builtin_amdgcn_{name}(va, vb, vc, 0, 0, 0);
  for (int r = 0; r < {regs}; ++r) d[row * {regs} + r] = vd[r];
}}""")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cuda_emulation.skip_unless_hip_available()
    return ctypes.CDLL(str(cuda_emulation.build_hip(_source(), tmp_path_factory.mktemp("mfma"))))


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


def _bits(x, dtype):
    import torch
    return x.to(getattr(torch, dtype)).view(torch.int16).contiguous()


def _scatter(name, a, b, c):
    """Matrices (one set per wavefront: a [W, M, K], b [W, K, M], c [W, M, M]) -> the registers
    each lane holds, placed by the calculator's layout."""
    import torch
    m, k_dim, per, dtype, _ = MFMA[name]
    w = a.shape[0]
    a_regs = torch.zeros(w, 64, per, dtype=torch.int16)
    b_regs = torch.zeros(w, 64, per, dtype=torch.int16)
    c_regs = torch.zeros(w, 64, m * m // 64, dtype=torch.float32)
    ab, bb = _bits(a, dtype), _bits(b, dtype)
    for i in range(m):
        for k in range(k_dim):
            lane, e = a_slot(name, i, k)
            a_regs[:, lane, e] = ab[:, i, k]
            lane, e = b_slot(name, k, i)
            b_regs[:, lane, e] = bb[:, k, i]
        for j in range(m):
            lane, r = d_slot(name, i, j)
            c_regs[:, lane, r] = c[:, i, j]
    return a_regs.reshape(w * 64, per), b_regs.reshape(w * 64, per), c_regs.reshape(w * 64, -1)


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


@pytest.mark.parametrize("name", MFMA)
def test_emulated_mfma_equals_a_scalar_matmul_with_the_calculators_layout(lib, name):
    """Random small integers (every product and sum exact in float32) and then random normals, in
    8 wavefronts at once: D read back through the calculator's layout is A B + C."""
    import torch
    m, k_dim, _, dtype, _ = MFMA[name]
    g = torch.Generator().manual_seed(7)
    waves = 8
    for kind in ("integers", "normal"):
        if kind == "integers":
            a = torch.randint(-8, 9, (waves, m, k_dim), generator=g).float()
            b = torch.randint(-8, 9, (waves, k_dim, m), generator=g).float()
            c = torch.randint(-64, 65, (waves, m, m), generator=g).float()
        else:
            a = torch.randn(waves, m, k_dim, generator=g).to(getattr(torch, dtype)).float()
            b = torch.randn(waves, k_dim, m, generator=g).to(getattr(torch, dtype)).float()
            c = torch.randn(waves, m, m, generator=g)
        d = _gather(name, _launch(lib, name, *_scatter(name, a, b, c)), waves)
        want = (a.double() @ b.double() + c.double()).float()
        if kind == "integers":
            assert torch.equal(d, want), f"{name}: {(d != want).sum().item()} elements differ"
        else:
            assert torch.allclose(d, want, rtol=1e-5, atol=1e-5), (d - want).abs().max()


@pytest.mark.parametrize("name", MFMA)
@pytest.mark.parametrize("operand", ["A", "B"])
def test_every_lane_and_element_of_an_operand_reaches_the_matrix_element_it_holds(lib, name, operand):
    """One wavefront per input slot (lane, element): that slot alone is 1 and the other operand
    holds distinct integers, so D is one row of B (or one column of A), and where it lands and
    what it holds says which A[i][k] (B[k][j]) the slot is. Every slot of the wavefront is tried."""
    import torch
    m, k_dim, per, dtype, _ = MFMA[name]
    slots = [(lane, e) for lane in range(64) for e in range(per)]
    waves = len(slots)
    code = (torch.arange(k_dim * m, dtype=torch.float32) + 1)   # 1..256, exact in bf16 and f16
    other = code.reshape(k_dim, m) if operand == "A" else code.reshape(m, k_dim)
    other_regs = torch.zeros(waves, 64, per, dtype=torch.int16)
    for i in range(m):
        for k in range(k_dim):
            if operand == "A":   # B[k][i] = code
                lane, e = b_slot(name, k, i)
                other_regs[:, lane, e] = _bits(other[k, i].reshape(1), dtype)
            else:                # A[i][k] = code
                lane, e = a_slot(name, i, k)
                other_regs[:, lane, e] = _bits(other[i, k].reshape(1), dtype)
    one_hot = torch.zeros(waves, 64, per, dtype=torch.int16)
    for w, (lane, e) in enumerate(slots):
        one_hot[w, lane, e] = _bits(torch.ones(1), dtype)
    a_regs, b_regs = (one_hot, other_regs) if operand == "A" else (other_regs, one_hot)
    c_regs = torch.zeros(waves * 64, m * m // 64)
    d = _gather(name, _launch(lib, name, a_regs.reshape(-1, per), b_regs.reshape(-1, per), c_regs),
                waves)
    for w, (lane, e) in enumerate(slots):
        want = torch.zeros(m, m)
        if operand == "A":
            i, k = next((i, k) for i in range(m) for k in range(k_dim) if a_slot(name, i, k) == (lane, e))
            want[i, :] = other[k, :]
        else:
            k, j = next((k, j) for k in range(k_dim) for j in range(m) if b_slot(name, k, j) == (lane, e))
            want[:, j] = other[:, k]
        assert torch.equal(d[w], want), f"{name}: {operand} slot lane {lane} element {e}"


def test_an_mfma_over_half_a_wavefront_is_refused(tmp_path):
    """32 lanes (a CUDA warp) cannot issue a wavefront's MFMA: the emulation aborts, as a kernel
    whose block is not whole wavefronts would compute garbage on the device."""
    cuda_emulation.skip_unless_hip_available()
    so = cuda_emulation.build_hip(_source(), tmp_path / "k")
    script = ("import ctypes, sys, torch; sys.path.insert(0, {tests!r}); "
              "from test_hip_mfma_emulation import _launch; lib = ctypes.CDLL({so!r}); "
              "a = torch.zeros(64, 4, dtype=torch.int16); c = torch.zeros(64, 16); "
              "_launch(lib, 'mfma_f32_32x32x8bf16_1k', a, a, c, threads={n}); print('ran')")
    whole = subprocess.run([sys.executable, "-c", script.format(tests=str(ROOT / "tests"), so=str(so), n=64)],
                           capture_output=True, text=True, cwd=ROOT)
    assert whole.returncode == 0 and "ran" in whole.stdout, whole.stderr
    half = subprocess.run([sys.executable, "-c", script.format(tests=str(ROOT / "tests"), so=str(so), n=32)],
                          capture_output=True, text=True, cwd=ROOT)
    assert half.returncode != 0 and "without the full wavefront" in half.stderr, half.stderr


@pytest.mark.parametrize("arch_target", ["mi300x", "mi350"])
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
