"""Instruction checks: on SASS that NVRTC + cuobjdump produce here, and on captured AMDGPU text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from regen import sass
from regen.target import load_target
from regen.toolchains.nvrtc import Toolchain, find_tool

TARGETS = Path(__file__).resolve().parent.parent / "targets"

needs_sass = pytest.mark.skipif(
    not (find_tool("cuobjdump") and find_tool("nvdisasm")),
    reason="SASS needs the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels")

PLAIN = r"""
extern "C" __global__ void add(const float* a, float* b, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + 1.0f;
}
"""

# The smallest real wgmma: one m64n8k16 bf16 MMA from shared-memory descriptors (a warpgroup).
WGMMA = r"""
extern "C" __global__ void wgmma_tile(float* out, unsigned long long desc_a,
                                      unsigned long long desc_b) {
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(desc_a), "l"(desc_b), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  float* o = out + 4 * threadIdx.x;
  o[0] = d0; o[1] = d1; o[2] = d2; o[3] = d3;
}
"""

# One tcgen05 MMA into tensor memory (Blackwell): alloc, mma from descriptors, dealloc.
TCGEN05 = r"""
extern "C" __global__ void tc_tile(unsigned* out, unsigned long long desc_a,
                                   unsigned long long desc_b, unsigned idesc) {
  __shared__ unsigned tmem;
  unsigned slot = (unsigned)__cvta_generic_to_shared(&tmem);
  if (threadIdx.x < 32) {
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(slot));
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
  }
  __syncthreads();
  unsigned t = tmem;
  if (threadIdx.x == 0) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
                 "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
                 :: "r"(t), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(0));
  }
  __syncthreads();
  out[threadIdx.x] = t;
  if (threadIdx.x < 32) {
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(t));
  }
}
"""


def compiled(source: str, target_name: str):
    result = Toolchain().compile(source, load_target(TARGETS / f"{target_name}.yaml"))
    assert result.ok, result.log
    assert result.disassembly, result.log
    return result


@needs_sass
def test_wgmma_kernel_shows_hgmma_on_sm90a():
    result = compiled(WGMMA, "h100")
    assert sass.missing_instructions(result.disassembly, ["HGMMA"]) == []
    assert sass.missing_instructions(result.disassembly, ["HGMMA"], kernel="wgmma_tile") == []
    counts = sass.mnemonic_counts(result.disassembly, "wgmma_tile")
    assert counts["HGMMA.64x8x16.F32.BF16"] == 1
    assert sass.count_matching(counts, "WARPGROUP") >= 1


@needs_sass
def test_plain_kernel_reports_hgmma_missing():
    result = compiled(PLAIN, "h100")
    required = ["HGMMA", "LDG", "EXIT", "UTCHMMA"]
    assert sass.missing_instructions(result.disassembly, required) == ["HGMMA", "UTCHMMA"]
    assert sass.missing_instructions(result.disassembly, ["ldg", "exit"], kernel="add") == []
    assert sass.missing_instructions(result.disassembly, ["LDG"], kernel="nonexistent") == ["LDG"]


@needs_sass
def test_tcgen05_kernel_shows_utc_mma_on_sm100a():
    result = compiled(TCGEN05, "b200")
    assert sass.missing_instructions(result.disassembly, ["UTCHMMA", "HGMMA"]) == ["HGMMA"]
    assert sass.count_matching(sass.mnemonic_counts(result.disassembly, "tc_tile"), "UTC") >= 3


@needs_sass
def test_nvdisasm_and_cuobjdump_formats_agree(tmp_path):
    result = compiled(WGMMA + PLAIN, "h100")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(result.binary)
    text = subprocess.run([find_tool("nvdisasm"), str(cubin)], capture_output=True,
                          text=True, check=True).stdout
    assert sass.parse(text) == sass.parse(result.disassembly)
    assert set(sass.parse(text)) == {"wgmma_tile", "add"}


# Lines of real `cuobjdump --dump-sass` output (sm_90a), with the encoding lines between them.
CUOBJDUMP_TEXT = """\

\tcode for sm_90a
\t.target\tsm_90a

\t\tFunction : add
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
                                                                               /* 0x000fe20000000800 */
        /*0070*/                   ISETP.GE.U32.AND P0, PT, R2, UR4, PT ;      /* 0x0000000402007c0c */
                                                                               /* 0x000fc8000bf06070 */
        /*0090*/               @P0 EXIT ;                                      /* 0x000000000000094d */
                                                                               /* 0x000fea0003800000 */
        /*00a0*/                   IMAD.SHL.U32 R4, R2.reuse, 0x4, RZ ;        /* 0x0000000402047824 */
                                                                               /* 0x040fe200078e00ff */
        /*0110*/                   LDG.E R2, desc[UR4][R2.64] ;                /* 0x0000000402027981 */
                                                                               /* 0x000ea2000c1e1900 */
        /*0180*/                   EXIT ;                                      /* 0x000000000000794d */
                                                                               /* 0x000fea0003800000 */
"""

# Lines of real `llvm-objdump-22 -d --mcpu=gfx942` output of a HIP kernel using MFMA.
AMDGPU_TEXT = """\

k.hsaco:\tfile format elf64-amdgpu

Disassembly of section .text:

0000000000001600 <mf>:
\ts_load_dwordx4 s[0:3], s[0:1], 0x0                         // 000000001600: C00A0000 00000000
\tv_lshlrev_b32_e32 v1, 2, v0                                // 000000001608: 24020082
\ts_waitcnt lgkmcnt(0)                                       // 00000000160C: BF8CC07F
\tglobal_load_dword v1, v1, s[2:3]                           // 000000001610: DC508000 01020001
\tv_mfma_f32_16x16x16_bf16 v[2:5], v[2:3], v[2:3], 0         // 000000001634: D3E10002 02020502
\ts_cbranch_execz 5                                          // 000000001640: BF880005 <mf+0x58>
\tglobal_store_dword v0, v1, s[0:1]                          // 000000001650: DC708000 00000100
\ts_endpgm                                                   // 000000001658: BF810000
\ts_nop 0                                                    // 00000000165C: BF800000
"""


def test_parse_cuobjdump_text_counts_predicated_instructions():
    assert sass.parse(CUOBJDUMP_TEXT) == {"add": {
        "LDC": 1, "ISETP.GE.U32.AND": 1, "EXIT": 2, "IMAD.SHL.U32": 1, "LDG.E": 1}}


def test_parse_amdgpu_objdump_text():
    counts = sass.mnemonic_counts(AMDGPU_TEXT, "mf")
    assert counts["v_mfma_f32_16x16x16_bf16"] == 1
    assert counts["s_nop"] == 1 and sum(counts.values()) == 9
    assert sass.missing_instructions(AMDGPU_TEXT, ["v_mfma", "V_MFMA_F32_32X32", "s_endpgm"]) \
        == ["V_MFMA_F32_32X32"]


def test_text_without_instructions_misses_everything():
    assert sass.parse("") == {}
    assert sass.missing_instructions("nothing here\n", ["HGMMA"]) == ["HGMMA"]
