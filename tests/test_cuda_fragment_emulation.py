"""The CUDA emulation's models of the warp-collective fragment instructions (tests/support/
cuda_emulation.h): mma.sync.m16n8k16 (bf16 and f16, float32 accumulators) and ldmatrix.m8n8
(x1, x2, x4, with and without .trans), and on sm_90a the e4m3 wgmma.m64n64k32 (operands through
no-swizzle K-major descriptors, the float32 accumulator fragment), the bf16 wgmma.m64n64k16 with
A from registers (B N-major through the 128-byte swizzle) and stmatrix.m8n8 (x1, x2, x4), against
the fragment layouts of the PTX ISA transcribed here, lane by lane and register by register.
Kernels that reach the models from the `#else` branch of their inline PTX
(fused_linear_cross_entropy@h200, attention@b200, variants/attention/tma_pingpong) are only as
right as these layouts. The same test source is compiled for sm_90a and sm_100a by NVRTC, so the PTX
the device branch issues is accepted and becomes HMMA and LDSM."""

from __future__ import annotations

import ctypes

import pytest

from support import cuda_emulation
from support.library import target

SOURCE = r"""
#include <cuda_bf16.h>
// one warp per block: lane l's A registers (4 words), B registers (2) and C values (4) from row
// blockIdx.x * 32 + l of the arrays, D written there
extern "C" __global__ void __launch_bounds__(32)
mma(const unsigned* a, const unsigned* b, const float* c, float* d, long long f16) {
  const long long row = (long long)blockIdx.x * 32 + threadIdx.x;
  const unsigned ar[4] = {a[row * 4], a[row * 4 + 1], a[row * 4 + 2], a[row * 4 + 3]};
  const unsigned br[2] = {b[row * 2], b[row * 2 + 1]};
  float acc[4] = {c[row * 4], c[row * 4 + 1], c[row * 4 + 2], c[row * 4 + 3]};
#ifdef __CUDA_ARCH__
  if (f16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
#else
  emu_mma_m16n8k16(acc, ar, br, f16 != 0);
#endif
  for (int i = 0; i < 4; ++i) d[row * 4 + i] = acc[i];
}

// one warp per block: 32 rows of 8 16-bit values (4 matrices of 8 rows) into shared memory, row
// `place[l]` holding row l, then lane l addresses shared row place[l] (lane 8m + r: row r of
// matrix m) and receives 4 registers of ldmatrix.x4 (.trans when trans), or 2 of .x2, 1 of .x1
extern "C" __global__ void __launch_bounds__(32)
ldm(const unsigned short* src, const long long* place, unsigned* dst, long long count,
    long long trans) {
  __shared__ __align__(16) unsigned short tile[32][8];
  const int lane = threadIdx.x;
  const long long w = blockIdx.x;
  for (int e = 0; e < 8; ++e) tile[place[w * 32 + lane]][e] = src[(w * 32 + lane) * 8 + e];
  __syncwarp();
  const unsigned short* row = &tile[place[w * 32 + lane]][0];
  unsigned r[4] = {0, 0, 0, 0};
#ifdef __CUDA_ARCH__
  const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
  if (count == 4 && trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if (count == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else if (count == 2 && trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else if (count == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  else if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
#else
  emu_ldmatrix(r, int(count), trans != 0, row);
#endif
  for (int i = 0; i < 4; ++i) dst[(w * 32 + lane) * 4 + i] = r[i];
}
"""


# PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (groupID = lane >> 2,
# threadID_in_group = lane % 4): element (lane, register, half) -> matrix position
def a_element(lane, reg, half):
    """A (16 x 16, row-major): a0..a7 two per register; rows g (a0, a1, a4, a5) or g + 8 (a2, a3,
    a6, a7); columns 2 t + (i & 1), plus 8 for a4..a7."""
    g, t = lane >> 2, lane % 4
    i = 2 * reg + half
    return g + (8 if i in (2, 3, 6, 7) else 0), 2 * t + (i & 1) + (8 if i >= 4 else 0)


def b_element(lane, reg, half):
    """B (16 x 8, k by n): b0..b3; row k = 2 t + (i & 1), plus 8 for b2, b3; column n = g."""
    g, t = lane >> 2, lane % 4
    i = 2 * reg + half
    return 2 * t + (i & 1) + (8 if i >= 2 else 0), g


def d_element(lane, i):
    """C/D (16 x 8): c0..c3; row g for c0, c1, g + 8 for c2, c3; column 2 t + (i & 1)."""
    g, t = lane >> 2, lane % 4
    return g + (8 if i >= 2 else 0), 2 * t + (i & 1)


def ldmatrix_element(lane, reg, half, trans):
    """ldmatrix.m8n8: register m of a lane holds two 16-bit elements of matrix m: (row lane / 4,
    columns 2 (lane % 4) + half), or with .trans (rows 2 (lane % 4) + half, column lane / 4)."""
    if trans:
        return reg, 2 * (lane % 4) + half, lane // 4
    return reg, lane // 4, 2 * (lane % 4) + half


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cuda_emulation.skip_unless_available()
    return ctypes.CDLL(str(cuda_emulation.build(SOURCE, tmp_path_factory.mktemp("frag"))))


def _launch(lib, name, blocks, tensors, ints):
    args = [t.data_ptr() for t in tensors] + list(ints)
    fn = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    lib.emu_launch(ctypes.c_void_p(fn), blocks, 1, 1, 32, 1, 1, 0, len(args),
                   (ctypes.c_int64 * 32)(*args), 0, (ctypes.c_float * 4)())


def _pack(matrix, element, lanes, regs, dtype):
    """[W, rows, cols] values -> [W * 32, regs] 32-bit registers, through element(lane, reg, half)."""
    import torch
    w = matrix.shape[0]
    bits = matrix.to(getattr(torch, dtype)).view(torch.int16).to(torch.int64) & 0xffff
    out = torch.zeros(w, lanes, regs, dtype=torch.int64)
    for lane in range(lanes):
        for reg in range(regs):
            for half in range(2):
                r, c = element(lane, reg, half)
                out[:, lane, reg] |= bits[:, r, c] << (16 * half)
    return out.to(torch.int32).reshape(w * lanes, regs).contiguous()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_emulated_mma_sync_equals_a_scalar_matmul_with_the_ptx_layout(lib, dtype):
    """Random small integers (exact in float32), then normals: D read through the PTX layout is
    A B + C, in 16 warps at once."""
    import torch
    g = torch.Generator().manual_seed(11)
    w = 16
    for kind in ("integers", "normal"):
        if kind == "integers":
            a = torch.randint(-8, 9, (w, 16, 16), generator=g).float()
            b = torch.randint(-8, 9, (w, 16, 8), generator=g).float()
            c = torch.randint(-64, 65, (w, 16, 8), generator=g).float()
        else:
            a = torch.randn(w, 16, 16, generator=g).to(getattr(torch, dtype)).float()
            b = torch.randn(w, 16, 8, generator=g).to(getattr(torch, dtype)).float()
            c = torch.randn(w, 16, 8, generator=g)
        c_regs = torch.zeros(w, 32, 4)
        for lane in range(32):
            for i in range(4):
                r, col = d_element(lane, i)
                c_regs[:, lane, i] = c[:, r, col]
        d = torch.full((w * 32, 4), float("nan"))
        _launch(lib, "mma", w, [_pack(a, a_element, 32, 4, dtype), _pack(b, b_element, 32, 2, dtype),
                                c_regs.reshape(w * 32, 4).contiguous(), d], [int(dtype == "float16")])
        d = d.reshape(w, 32, 4)
        got = torch.empty(w, 16, 8)
        for lane in range(32):
            for i in range(4):
                r, col = d_element(lane, i)
                got[:, r, col] = d[:, lane, i]
        want = (a.double() @ b.double() + c.double()).float()
        if kind == "integers":
            assert torch.equal(got, want), f"{(got != want).sum().item()} elements differ"
        else:
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


def test_every_register_half_of_an_mma_operand_reaches_the_element_the_ptx_layout_names(lib):
    """One warp per (lane, register, half) of A, then of B: that half alone is 1, the other
    operand holds distinct integers, so D is one row of B (one column of A) and shows which
    element the slot is."""
    import torch
    for operand, regs, element in (("A", 4, a_element), ("B", 2, b_element)):
        slots = [(lane, reg, half) for lane in range(32) for reg in range(regs) for half in range(2)]
        w = len(slots)
        code = torch.arange(1, 129, dtype=torch.float32)   # distinct and exact in bf16
        one_hot = torch.zeros(w, 32, regs, dtype=torch.int64)
        for k, (lane, reg, half) in enumerate(slots):
            one_hot[k, lane, reg] = 0x3f80 << (16 * half)          # bf16 1.0
        one_hot = one_hot.to(torch.int32).reshape(w * 32, regs).contiguous()
        if operand == "A":
            other = code.reshape(16, 8).expand(w, 16, 8)           # B[k][n]
            a_regs, b_regs = one_hot, _pack(other, b_element, 32, 2, "bfloat16")
        else:
            other = code.reshape(16, 8).expand(w, 16, 8)           # A[m][k] for k < 8 ...
            other = torch.cat([other, other + 128], dim=2)         # ... and k >= 8: 16 x 16
            a_regs, b_regs = _pack(other, a_element, 32, 4, "bfloat16"), one_hot
        d = torch.full((w * 32, 4), float("nan"))
        _launch(lib, "mma", w, [a_regs, b_regs, torch.zeros(w * 32, 4), d], [0])
        d = d.reshape(w, 32, 4)
        for k, (lane, reg, half) in enumerate(slots):
            got = torch.empty(16, 8)
            for ln in range(32):
                for i in range(4):
                    r, col = d_element(ln, i)
                    got[r, col] = d[k, ln, i]
            want = torch.zeros(16, 8)
            r, col = element(lane, reg, half)
            if operand == "A":
                want[r, :] = other[0, col, :]
            else:
                want[:, col] = other[0, :, r]
            assert torch.equal(got, want), f"{operand} lane {lane} register {reg} half {half}"


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_emulated_ldmatrix_hands_each_lane_the_elements_the_ptx_layout_names(lib, count, trans):
    """Rows of distinct values placed in a scrambled order, each lane addressing its row where it
    was placed: every register half of every lane holds the element the PTX ISA gives it."""
    import torch
    g = torch.Generator().manual_seed(5)
    w = 8
    values = torch.randperm(w * 32 * 8, generator=g).reshape(w, 32, 8)   # matrix m row r = row 8m + r
    place = torch.stack([torch.randperm(32, generator=g) for _ in range(w)])
    dst = torch.zeros(w * 32, 4, dtype=torch.int32)
    _launch(lib, "ldm", w, [values.to(torch.int16).reshape(-1).contiguous(),
                            place.to(torch.int64).reshape(-1).contiguous(), dst], [count, int(trans)])
    got = dst.to(torch.int64).reshape(w, 32, 4) & 0xffffffff
    for lane in range(32):
        for reg in range(count):
            for half in range(2):
                m, r, c = ldmatrix_element(lane, reg, half, trans)
                want = values[:, 8 * m + r, c]
                assert torch.equal((got[:, lane, reg] >> (16 * half)) & 0xffff, want), \
                    f"x{count}{' trans' if trans else ''}: lane {lane} register {reg} half {half}"


@pytest.mark.parametrize("arch_target", ["h200", "b200"])
def test_the_modelled_ptx_becomes_hmma_and_ldsm_on_the_device(arch_target):
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    result = toolchain.compile(SOURCE, target(arch_target))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert missing_instructions(result.disassembly, ["HMMA.16816.F32.BF16", "HMMA.16816.F32"],
                                kernel="mma") == []
    assert missing_instructions(result.disassembly, ["LDSM.16.M88.4", "LDSM.16.MT88.4",
                                                     "LDSM.16.M88.2", "LDSM.16.M88"], kernel="ldm") == []



# -- sm_90a only: e4m3 wgmma and stmatrix --------------------------------------------------------
SOURCE_SM90 = r"""
// one warpgroup per block: a 64 x 32 e4m3 A and a 64 x 32 e4m3 B (both K-major, row-major in
// global memory) staged into the no-swizzle K-major core-matrix layout (8 rows x 16 bytes per
// core matrix; element (r, k) at ((r / 8) * 2 + k / 16) * 128 + (r % 8) * 16 + k % 16: leading
// byte offset 128, stride byte offset 256), then D = A B^T + C by one
// wgmma.m64n64k32.f32.e4m3.e4m3, thread t's 32 accumulator registers read from and written to
// row blockIdx.x * 128 + t of c and d
extern "C" __global__ void __launch_bounds__(128)
qgmma(const unsigned char* a, const unsigned char* b, const float* c, float* d) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int t = threadIdx.x;
  const long long w = blockIdx.x;
  for (int i = t; i < 64 * 32; i += 128) {
    const int r = i / 32, k = i % 32, off = ((r / 8) * 2 + k / 16) * 128 + (r % 8) * 16 + k % 16;
    smem[off] = a[w * 2048 + i];
    smem[2048 + off] = b[w * 2048 + i];
  }
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = c[(w * 128 + t) * 32 + i];
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned long long lead = (128ull >> 4) << 16, stride = (256ull >> 4) << 32;
  const unsigned long long da = ((base & 0x3FFFF) >> 4) | lead | stride;
  const unsigned long long db = (((base + 2048) & 0x3FFFF) >> 4) | lead | stride;
  __syncthreads();
#ifdef __CUDA_ARCH__
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1;\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
        "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]),
        "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]),
        "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]),
        "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31])
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#else
  emu_wgmma(acc, 64, da, db, 1, 0, 0, 2);
  emu_wgmma_commit();
  emu_wgmma_wait(0);
#endif
  for (int i = 0; i < 32; ++i) d[(w * 128 + t) * 32 + i] = acc[i];
}

// one warp per block: lane l holds 4 registers (row blockIdx.x * 32 + l of src) and addresses
// shared row place[l] of a 32 x 8 tile of 16-bit values (lane 8m + r: row r of matrix m);
// stmatrix.x4 (x2, x1) writes the warp's matrices there, then the tile (poisoned before) goes
// to dst, rows in shared order
extern "C" __global__ void __launch_bounds__(32)
stm(const unsigned* src, const long long* place, unsigned short* dst, long long count) {
  extern __shared__ __align__(16) unsigned short tile[];
  const int lane = threadIdx.x;
  const long long w = blockIdx.x;
  for (int e = 0; e < 8; ++e) tile[lane * 8 + e] = 0xdead;
  __syncwarp();
  const unsigned r[4] = {src[(w * 32 + lane) * 4], src[(w * 32 + lane) * 4 + 1],
                         src[(w * 32 + lane) * 4 + 2], src[(w * 32 + lane) * 4 + 3]};
  const unsigned addr = (unsigned)__cvta_generic_to_shared(tile + place[w * 32 + lane] * 8);
#ifdef __CUDA_ARCH__
  if (count == 4)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
  else if (count == 2)
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]) : "memory");
  else
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" ::"r"(addr), "r"(r[0]) : "memory");
#else
  emu_stmatrix(addr, r, int(count));
#endif
  __syncwarp();
  for (int e = 0; e < 8; ++e) dst[(w * 32 + lane) * 8 + e] = tile[lane * 8 + e];
}
"""


def wgmma_d_element(thread, reg):
    """wgmma .m64nN f32 accumulator D (PTX ISA, "Register fragments ... for matrix D"): thread
    t = 32 w + l holds d[i]; 8-column block j = i / 4, row 16 w + l / 4 (+ 8 for i % 4 >= 2),
    column 8 j + 2 (l % 4) + i % 2."""
    w, lane = thread // 32, thread % 32
    j = reg // 4
    return 16 * w + lane // 4 + (8 if reg % 4 >= 2 else 0), 8 * j + 2 * (lane % 4) + reg % 2


@pytest.fixture(scope="module")
def lib90(tmp_path_factory):
    cuda_emulation.skip_unless_available()
    return ctypes.CDLL(str(cuda_emulation.build(SOURCE_SM90, tmp_path_factory.mktemp("frag90"))))


def _launch_threads(lib, name, blocks, threads, shared, tensors, ints):
    args = [t.data_ptr() for t in tensors] + list(ints)
    fn = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    lib.emu_launch(ctypes.c_void_p(fn), blocks, 1, 1, threads, 1, 1, shared, len(args),
                   (ctypes.c_int64 * 40)(*args), 0, (ctypes.c_float * 4)())


def _qgmma(lib, a_codes, b_codes, c):
    """D for W warpgroups: a_codes, b_codes [W, 64, 32] uint8 e4m3 codes, c [W, 64, 64] float32
    laid into the accumulator fragment; D read back through the same fragment."""
    import torch
    w = a_codes.shape[0]
    c_regs = torch.zeros(w, 128, 32)
    for t in range(128):
        for i in range(32):
            r, col = wgmma_d_element(t, i)
            c_regs[:, t, i] = c[:, r, col]
    d = torch.full((w * 128, 32), float("nan"))
    _launch_threads(lib, "qgmma", w, 128, 4096, [a_codes.contiguous(), b_codes.contiguous(),
                                                 c_regs.reshape(w * 128, 32).contiguous(), d], [])
    d = d.reshape(w, 128, 32)
    got = torch.empty(w, 64, 64)
    for t in range(128):
        for i in range(32):
            r, col = wgmma_d_element(t, i)
            got[:, r, col] = d[:, t, i]
    return got


def _e4m3(codes):
    import torch
    return codes.view(torch.float8_e4m3fn).to(torch.float64)


def test_emulated_e4m3_wgmma_equals_a_scalar_matmul_with_the_ptx_layout(lib90):
    """Integer-valued e4m3 operands (every product and sum exact in float32), then codes drawn
    from every finite e4m3 value: D read through the PTX accumulator layout is A B^T + C, in 8
    warpgroups at once."""
    import torch
    g = torch.Generator().manual_seed(3)
    w = 8
    small = torch.arange(-16, 17, dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)
    for kind in ("integers", "codes"):
        if kind == "integers":   # -16..16 are exact e4m3 values
            a = small[torch.randint(0, 33, (w, 64, 32), generator=g)]
            b = small[torch.randint(0, 33, (w, 64, 32), generator=g)]
            c = torch.randint(-1000, 1001, (w, 64, 64), generator=g).float()
        else:                    # any code but the NaNs 0x7f and 0xff
            a = torch.randint(0, 127, (w, 64, 32), generator=g).to(torch.uint8) \
                | (torch.randint(0, 2, (w, 64, 32), generator=g).to(torch.uint8) << 7)
            b = torch.randint(0, 127, (w, 64, 32), generator=g).to(torch.uint8) \
                | (torch.randint(0, 2, (w, 64, 32), generator=g).to(torch.uint8) << 7)
            c = torch.randn(w, 64, 64, generator=g)
        got = _qgmma(lib90, a, b, c)
        want = _e4m3(a) @ _e4m3(b).transpose(1, 2) + c.double()
        if kind == "integers":
            assert torch.equal(got.double(), want), f"{(got.double() != want).sum().item()} elements differ"
        else:
            scale = (_e4m3(a).abs() @ _e4m3(b).abs().transpose(1, 2) + c.double().abs())
            assert ((got.double() - want).abs() <= 1e-6 * scale + 1e-30).all()


def test_every_e4m3_code_reaches_the_element_the_descriptor_layout_names(lib90):
    """A holds every finite code at scrambled (row, k) places; B is one-hot (B[n][k] = 1 for k =
    n % 32), so D[m][n] = A[m][n % 32] exactly: each code decodes as torch's float8_e4m3fn
    (subnormals, -0 and 448 included) and sits where the no-swizzle K-major layout puts it. (A
    NaN code, 0x7f or 0xff, would make its whole row NaN, so they are left out.)"""
    import torch
    g = torch.Generator().manual_seed(4)
    w = 8
    finite = torch.tensor([c for c in range(256) if c & 0x7f != 0x7f], dtype=torch.uint8)
    slots = w * 64 * 32
    a = finite.repeat(slots // len(finite) + 1)[:slots][torch.randperm(slots, generator=g)]
    a = a.reshape(w, 64, 32)
    assert set(a.unique().tolist()) == set(finite.tolist())
    one = torch.tensor([1.0]).to(torch.float8_e4m3fn).view(torch.uint8)[0]
    b = torch.zeros(w, 64, 32, dtype=torch.uint8)
    for n in range(64):
        b[:, n, n % 32] = one
    got = _qgmma(lib90, a, b, torch.zeros(w, 64, 64)).double()
    want = _e4m3(a)[:, :, torch.arange(64) % 32]
    assert torch.equal(got, want)


@pytest.mark.parametrize("count", [1, 2, 4])
def test_emulated_stmatrix_writes_each_lanes_elements_where_the_ptx_layout_names(lib90, count):
    """stmatrix is ldmatrix's inverse: register m of lane l holds (row l / 4, columns 2 (l % 4)
    and + 1) of matrix m, lane 8 m + r addresses row r of matrix m. Distinct values, rows placed
    in a scrambled order: each lands at its row's address and column; rows of matrices past
    `count` are not written."""
    import torch
    g = torch.Generator().manual_seed(6)
    w = 8
    values = torch.randperm(1 << 15, generator=g)[: w * 32 * 8].reshape(w, 32, 8)  # matrix m row r = row 8m + r
    src = torch.zeros(w, 32, 4, dtype=torch.int64)
    for lane in range(32):
        for reg in range(4):
            for half in range(2):
                m, r, col = ldmatrix_element(lane, reg, half, False)
                src[:, lane, reg] |= values[:, 8 * m + r, col] << (16 * half)
    place = torch.stack([torch.randperm(32, generator=g) for _ in range(w)])
    dst = torch.zeros(w * 32 * 8, dtype=torch.int16)
    _launch_threads(lib90, "stm", w, 32, 32 * 8 * 2,
                    [src.to(torch.int32).reshape(-1).contiguous(),
                     place.to(torch.int64).reshape(-1).contiguous(), dst], [count])
    got = dst.to(torch.int64).reshape(w, 32, 8) & 0xffff
    for k in range(w):
        for lane in range(32):
            row = got[k, place[k, lane]]
            if lane // 8 < count:
                assert torch.equal(row, values[k, lane]), f"x{count}: block {k} lane {lane}"
            else:
                assert (row == 0xdead).all(), f"x{count}: block {k} lane {lane}'s row written"


def test_the_modelled_sm90_ptx_becomes_qgmma_and_stsm_on_the_device():
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    result = toolchain.compile(SOURCE_SM90, target("h200"))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert missing_instructions(result.disassembly, ["QGMMA.64x64x32.F32.E4M3.E4M3"], kernel="qgmma") == []
    assert missing_instructions(result.disassembly, ["STSM.16.M88.4", "STSM.16.M88.2", "STSM.16.M88"],
                                kernel="stm") == []



# -- sm_90a: wgmma with A from registers (what a flash-attention kernel's O += P V issues) ---------
SOURCE_RS = r"""
#include <cuda_bf16.h>
// one warpgroup per block: thread t's four A registers (the m64k16 register fragment) from row
// blockIdx.x * 128 + t of `a`; B, 16 k x 64 n bf16, staged N-major (MN-major): row k of 128 bytes
// holds n = 0..63, 128-byte swizzled (16-byte chunk c of row k at chunk c ^ (k % 8)); D = A B + C
// by one wgmma.m64n64k16.f32.bf16.bf16 with A from registers and B transposed through its
// descriptor (leading and stride byte offsets 1024, 128-byte swizzle). clobber != 0 changes an A
// register between the issue and the wait (undefined in the PTX ISA; the emulation reports it).
extern "C" __global__ void __launch_bounds__(128)
rsgmma(const unsigned* a, const unsigned short* b, const float* c, float* d, long long clobber) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  unsigned char* smem = smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  const int t = threadIdx.x;
  const long long w = blockIdx.x;
  for (int i = t; i < 16 * 64; i += 128) {
    const int k = i / 64, n = i % 64;
    *(unsigned short*)(smem + k * 128 + ((((n * 2) >> 4) ^ (k % 8)) << 4) + (n * 2) % 16) = b[w * 1024 + i];
  }
  unsigned ar[4] = {a[(w * 128 + t) * 4], a[(w * 128 + t) * 4 + 1], a[(w * 128 + t) * 4 + 2],
                    a[(w * 128 + t) * 4 + 3]};
  float acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = c[(w * 128 + t) * 32 + i];
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned long long db = (unsigned long long)((base & 0x3FFFF) >> 4) | ((1024ull >> 4) << 16) |
                                ((1024ull >> 4) << 32) | (1ull << 62);
  __syncthreads();
#ifdef __CUDA_ARCH__
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]),
        "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]),
        "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]),
        "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]),
        "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31])
      : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  if (clobber) ar[0] ^= 0x8000u;
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#else
  emu_wgmma_rs(acc, 64, ar, db, 1, 1, 0);
  emu_wgmma_commit();
  if (clobber) ar[0] ^= 0x8000u;
  emu_wgmma_wait(0);
#endif
  for (int i = 0; i < 32; ++i) d[(w * 128 + t) * 32 + i] = acc[i];
  if (clobber) d[w * 128 * 32] += (float)ar[0];
}
"""


def wgmma_a_element(thread, reg, half):
    """wgmma .m64k16 register fragment A (PTX ISA, "Register fragments ... for matrix A", 16-bit
    types): thread t = 32 w + l, register i holds two elements; row 16 w + l / 4 (+ 8 for odd i),
    column 2 (l % 4) + half (+ 8 for i >= 2)."""
    w, lane = thread // 32, thread % 32
    return 16 * w + lane // 4 + (8 if reg % 2 else 0), 2 * (lane % 4) + half + (8 if reg >= 2 else 0)


@pytest.fixture(scope="module")
def lib_rs(tmp_path_factory):
    cuda_emulation.skip_unless_available()
    return ctypes.CDLL(str(cuda_emulation.build(SOURCE_RS, tmp_path_factory.mktemp("rs"))))


def _rsgmma(lib, a, b, c, clobber=0):
    """D for W warpgroups: a [W, 64, 16] and b [W, 16, 64] bf16 (A through the register fragment,
    B k by n), c [W, 64, 64] through the accumulator fragment; D read back through it."""
    import torch
    w = a.shape[0]
    bits = a.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xffff
    regs = torch.zeros(w, 128, 4, dtype=torch.int64)
    c_regs = torch.zeros(w, 128, 32)
    for t in range(128):
        for i in range(4):
            for half in range(2):
                r, k = wgmma_a_element(t, i, half)
                regs[:, t, i] |= bits[:, r, k] << (16 * half)
        for i in range(32):
            r, col = wgmma_d_element(t, i)
            c_regs[:, t, i] = c[:, r, col]
    d = torch.full((w * 128, 32), float("nan"))
    _launch_threads(lib, "rsgmma", w, 128, 2048 + 1024,
                    [regs.to(torch.int32).reshape(-1).contiguous(),
                     b.to(torch.bfloat16).view(torch.int16).reshape(-1).contiguous(),
                     c_regs.reshape(-1).contiguous(), d], [clobber])
    d = d.reshape(w, 128, 32)
    got = torch.empty(w, 64, 64)
    for t in range(128):
        for i in range(32):
            r, col = wgmma_d_element(t, i)
            got[:, r, col] = d[:, t, i]
    return got


def test_emulated_wgmma_with_a_from_registers_equals_a_scalar_matmul_with_the_ptx_layout(lib_rs):
    """Integer-valued bf16 operands (every product and sum exact in float32): A laid into the
    register fragment of the PTX ISA, B read N-major through the 128-byte swizzle, D = A B + C
    read through the accumulator fragment, in 8 warpgroups at once; then a one-hot A (A[m][k] = 1
    for k = m % 16) so that D's row m is B's row m % 16: each register half reaches its (row, k)."""
    import torch
    g = torch.Generator().manual_seed(8)
    w = 8
    a = torch.randint(-8, 9, (w, 64, 16), generator=g).float()
    b = torch.randint(-8, 9, (w, 16, 64), generator=g).float()
    c = torch.randint(-1000, 1001, (w, 64, 64), generator=g).float()
    got = _rsgmma(lib_rs, a, b, c)
    want = a.double() @ b.double() + c.double()
    assert torch.equal(got.double(), want), f"{(got.double() != want).sum().item()} elements differ"
    one_hot = torch.zeros(w, 64, 16)
    one_hot[:, torch.arange(64), torch.arange(64) % 16] = 1.0
    got = _rsgmma(lib_rs, one_hot, b, torch.zeros(w, 64, 64))
    assert torch.equal(got, b[:, torch.arange(64) % 16, :])


def test_emulation_reports_an_a_register_changed_before_the_wait(lib_rs, tmp_path):
    """Changing a register of A between wgmma's issue and the wait that retires it is undefined in
    the PTX ISA (the tensor cores may still read it); the model aborts with a message."""
    import subprocess
    import sys
    so = cuda_emulation.build(SOURCE_RS, tmp_path / "rs")
    script = (f"import ctypes, sys, torch; sys.path.insert(0, {str(cuda_emulation.HEADER.parent.parent)!r}); "
              f"import test_cuda_fragment_emulation as t; lib = ctypes.CDLL({str(so)!r}); "
              f"z = torch.zeros(1, 64, 16); t._rsgmma(lib, z, torch.zeros(1, 16, 64), "
              f"torch.zeros(1, 64, 64), clobber={{c}}); print('returned')")
    honest = subprocess.run([sys.executable, "-c", script.format(c=0)], capture_output=True, text=True)
    assert honest.returncode == 0 and "returned" in honest.stdout, honest.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", script.format(c=1)], capture_output=True, text=True)
    assert bad.returncode != 0 and "changed before wgmma.wait_group" in bad.stderr, bad.stderr[-2000:]


def test_the_modelled_register_a_wgmma_becomes_hgmma_on_the_device():
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    result = toolchain.compile(SOURCE_RS, target("h200"))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert missing_instructions(result.disassembly, ["HGMMA.64x64x16.F32.BF16"], kernel="rsgmma") == []
    # A in registers: the instruction names a register where a descriptor-read A shows gdesc
    hgmma = [line for line in result.disassembly.splitlines() if "HGMMA." in line]
    assert hgmma and all("gdesc" in line and ", R" in line.split("gdesc")[0] for line in hgmma), hgmma

# -- sm_100a: tcgen05.mma.cta_group::2 over a CTA pair ---------------------------------------------
SOURCE_PAIR = r"""
#include <cuda_bf16.h>
// a 2-CTA cluster: CTA r stages rows 128 r .. + 127 of a [256, 16] bf16 A and rows 64 r .. + 63
// of a [128, 16] B (K-major, no-swizzle core matrices: element (r, k) at ((r / 8) * 2 + k / 8) *
// 128 + (r % 8) * 16 + (k % 8) * 2; leading byte offset 128, stride byte offset 256), the same
// offsets in both; CTA 0 issues one tcgen05.mma.cta_group::2.kind::f16 (M = 256, N = 128) and a
// commit multicast to both CTAs' mbarrier; CTA r writes lane l, column j of its tensor memory to
// d[(128 r + l) * 128 + j]
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
pair(const unsigned short* a, const unsigned short* b, float* d) {
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned bar = base + 6144, slot = base + 6152;
  const int t = threadIdx.x, w = t / 32, l = t % 32;
#ifdef __CUDA_ARCH__
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (w == 0) {
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], 128;" ::"r"(slot) : "memory");
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
  }
  if (t == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
#else
  const unsigned rank = emu_cluster_rank();
  if (w == 0) emu_tcgen05_alloc(slot, 128);
  if (t == 0) emu_mbar_init(bar, 1);
#endif
  for (int i = t; i < 128 * 16; i += 128) {
    const int r = i / 16, k = i % 16, off = ((r / 8) * 2 + k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2;
    *(unsigned short*)(smem + off) = a[(128 * rank + r) * 16 + k];
    if (r < 64) *(unsigned short*)(smem + 4096 + off) = b[(64 * rank + r) * 16 + k];
  }
#ifdef __CUDA_ARCH__
  asm volatile("fence.proxy.async.shared::cta;\ntcgen05.fence::before_thread_sync;" ::: "memory");
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
#else
  emu_cluster_sync();
#endif
  const unsigned tmem = *(const unsigned*)(smem + 6152);
  const unsigned long long lead = (128ull >> 4) << 16, stride = (256ull >> 4) << 32, version = 1ull << 46;
  const unsigned long long da = ((base & 0x3FFFF) >> 4) | lead | stride | version;
  const unsigned long long db = (((base + 4096) & 0x3FFFF) >> 4) | lead | stride | version;
  const unsigned idesc = (1u << 4) | (1u << 7) | (1u << 10) | ((128u >> 3) << 17) | ((256u >> 4) << 24);
  if (rank == 0 && t == 0) {
#ifdef __CUDA_ARCH__
    asm volatile("tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, 0;" ::"r"(tmem), "l"(da), "l"(db), "r"(idesc) : "memory");
    asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                 ::"r"(bar), "h"((unsigned short)3) : "memory");
#else
    emu_tcgen05_mma(tmem, da, db, idesc, 0, 0, 0, 0, 2);
    emu_tcgen05_commit_multicast(bar, 3);
#endif
  }
#ifdef __CUDA_ARCH__
  asm volatile("{\n.reg .pred p;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W_%=;\n}"
               ::"r"(bar) : "memory");
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
#else
  while (!emu_mbar_try_wait(bar, 0)) {
  }
#endif
  for (int j0 = 0; j0 < 128; j0 += 32) {
    unsigned v[32];
#ifdef __CUDA_ARCH__
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n"
                 "tcgen05.wait::ld.sync.aligned;"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]), "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]), "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]), "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
                 : "r"(tmem + ((32u * w) << 16) + j0));
#else
    emu_tcgen05_ld_32x32b(v, 32, tmem + ((32u * w) << 16) + j0);
#endif
    for (int j = 0; j < 32; ++j) d[(128 * rank + 32 * w + l) * 128 + j0 + j] = __uint_as_float(v[j]);
  }
#ifdef __CUDA_ARCH__
  asm volatile("tcgen05.fence::before_thread_sync;\nbarrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (w == 0) asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, 128;" ::"r"(tmem) : "memory");
#else
  emu_cluster_sync();
  if (w == 0) emu_tcgen05_dealloc(tmem, 128);
#endif
}
"""


def pair_d_location(row):
    """tcgen05.mma.cta_group::2 with M = 256 (PTX ISA, the data-path layout of the pair): row i of
    D is lane i % 128 of the tensor memory of CTA i // 128."""
    return row // 128, row % 128


def pair_b_source(row, n):
    """B's N rows are split between the pair: rows 0 .. N/2 - 1 from the descriptor in CTA 0's
    shared memory, the rest at the same offsets in CTA 1's (row j - N/2 there); A's rows 0..127
    come from CTA 0 and 128..255 from CTA 1, as D's rows are placed."""
    return row // (n // 2), row % (n // 2)


def test_emulated_cta_pair_mma_splits_a_b_and_d_over_the_pair_as_the_ptx_layout_names(tmp_path):
    """Integer-valued bf16 operands (exact in float32), each CTA holding its rows of A and its
    half of B: D, read from both CTAs' tensor memories through pair_d_location, is A B^T exactly;
    B's halves swapped (the pair_b_source split read the other way) is not."""
    import torch
    cuda_emulation.skip_unless_available()
    lib = ctypes.CDLL(str(cuda_emulation.build(SOURCE_PAIR, tmp_path, cuda_arch=1000)))
    g = torch.Generator().manual_seed(9)
    a = torch.randint(-8, 9, (256, 16), generator=g).float()
    b = torch.randint(-8, 9, (128, 16), generator=g).float()
    bits = lambda x: x.to(torch.bfloat16).view(torch.int16).contiguous()  # noqa: E731
    # CTA c stages B rows 64 c .. + 63, which pair_b_source says are rows of the pair's B
    staged = torch.empty_like(b)
    for j in range(128):
        cta, r = pair_b_source(j, 128)
        staged[64 * cta + r] = b[j]
    d = torch.full((256 * 128,), float("nan"))
    lib.emu_set_cluster(ctypes.c_uint(2))
    a_bits, b_bits = bits(a), bits(staged)   # kept alive while the kernel reads them
    args = [a_bits.data_ptr(), b_bits.data_ptr(), d.data_ptr()]
    fn = ctypes.cast(lib.pair, ctypes.c_void_p).value
    lib.emu_launch(ctypes.c_void_p(fn), 2, 1, 1, 128, 1, 1, 6160, len(args),
                   (ctypes.c_int64 * 40)(*args), 0, (ctypes.c_float * 4)())
    d = d.reshape(2, 128, 128)
    got = torch.empty(256, 128)
    for i in range(256):
        cta, lane = pair_d_location(i)
        got[i] = d[cta, lane]
    want = a.double() @ b.double().T
    assert torch.equal(got.double(), want), f"{(got.double() != want).sum().item()} elements differ"
    swapped = torch.cat([b[64:], b[:64]])
    assert not torch.equal(got.double(), a.double() @ swapped.double().T)


def test_the_modelled_cta_pair_ptx_becomes_utchmma_2cta_on_the_device():
    from regen.sass import missing_instructions
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=True)
    if toolchain.problem():
        pytest.skip(toolchain.problem())
    result = toolchain.compile(SOURCE_PAIR, target("b200"))
    assert result.ok, result.log
    if result.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert missing_instructions(result.disassembly, ["UTCHMMA.2CTA", "LDTM"], kernel="pair") == []
