"""The NVRTC toolchain on a CPU-only machine: real compiles for sm_80/sm_90a/sm_100a."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from regen.target import load_target
from regen.toolchains import get_toolchain
from regen.toolchains.nvrtc import Toolchain, parse_ptxas_log

TARGETS = Path(__file__).resolve().parent.parent / "targets"

ADD = r"""
#include <cuda_bf16.h>
extern "C" __global__ void add_one(const __nv_bfloat16* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = __bfloat162float(x[i]) + 1.0f;
}
extern "C" __global__ void reverse_block(float* p) {
  __shared__ float tile[256];
  tile[threadIdx.x] = p[threadIdx.x];
  __syncthreads();
  p[threadIdx.x] = tile[255 - threadIdx.x];
}
"""

# 96 live floats per thread under __launch_bounds__(1024, 2) (at most 32 registers): ptxas spills.
SPILLS = r"""
extern "C" __global__ void __launch_bounds__(1024, 2) spill(float* p, int n) {
  float acc[96];
  #pragma unroll
  for (int i = 0; i < 96; ++i) acc[i] = p[i * n + threadIdx.x];
  float s = 0.f;
  #pragma unroll
  for (int j = 0; j < 8; ++j)
    #pragma unroll
    for (int i = 0; i < 96; ++i) s += acc[i] * acc[(i * 7 + j) % 96];
  p[threadIdx.x] = s;
}
"""


def target(name: str, **changes):
    t = load_target(TARGETS / f"{name}.yaml")
    if "flags" in changes:
        changes["toolchain"] = t.toolchain.model_copy(update={"flags": changes.pop("flags")})
    return t.model_copy(update=changes)


@pytest.fixture(scope="module")
def toolchain():
    tc = Toolchain()
    assert tc.problem() is None, tc.problem()
    return tc


def test_targets_select_this_toolchain():
    tc = get_toolchain(target("h100"))
    assert tc.name == "nvrtc" and tc.binary_suffix == ".cubin"


@pytest.mark.parametrize("name,arch", [("a100", "sm_80"), ("h100", "sm_90a"), ("b200", "sm_100a")])
def test_compiles_a_cubin_per_arch(toolchain, name, arch):
    result = toolchain.compile(ADD, target(name))
    assert result.ok, result.log
    assert result.binary[:4] == b"\x7fELF"
    assert 0 < result.seconds < 60
    assert f"Compiling entry function 'add_one' for '{arch}'" in result.log
    assert set(result.resources) == {"add_one", "reverse_block"}
    if result.disassembly is not None:
        assert f"code for {arch}" in result.disassembly


def test_resources_are_the_numbers_ptxas_reported(toolchain):
    result = toolchain.compile(ADD, target("h100"))
    assert result.ok, result.log
    used = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"Function properties for (\w+)\n.*\n.*Used (\d+) registers", result.log)}
    assert used and {k: r["registers"] for k, r in result.resources.items()} == used
    assert result.resources["reverse_block"]["shared_bytes"] == 256 * 4
    assert result.resources["reverse_block"]["barriers"] == 1
    assert result.resources["add_one"]["shared_bytes"] == 0
    assert all(r["spill_bytes"] == 0 for r in result.resources.values())


def test_spills_are_reported(toolchain):
    result = toolchain.compile(SPILLS, target("a100"))
    assert result.ok, result.log
    spill = result.resources["spill"]
    assert spill["registers"] <= 32
    assert spill["spill_store_bytes"] > 0 and spill["spill_load_bytes"] > 0
    assert spill["spill_bytes"] == spill["spill_store_bytes"] + spill["spill_load_bytes"]
    assert spill["stack_bytes"] >= spill["spill_store_bytes"] // 2


def test_a_syntax_error_is_a_failed_result_with_the_log(toolchain):
    result = toolchain.compile('extern "C" __global__ void k(float* p) { p[0] = q }\n',
                               target("h100"))
    assert not result.ok
    assert result.binary == b""
    assert 'identifier "q" is undefined' in result.log
    assert "kernel.cu(1)" in result.log


def test_an_instruction_the_arch_lacks_fails_in_ptxas(toolchain):
    source = 'extern "C" __global__ void k() { asm volatile("wgmma.fence.sync.aligned;"); }\n'
    result = toolchain.compile(source, target("b200"))
    assert not result.ok
    assert "not supported on .target 'sm_100a'" in result.log


def test_an_unknown_flag_is_a_failed_result(toolchain):
    result = toolchain.compile(ADD, target("h100", flags=["-O3"]))
    assert not result.ok
    assert "unrecognized option -O3" in result.log


def test_same_source_gives_the_same_bytes(toolchain):
    a = toolchain.compile(ADD, target("h100"))
    b = toolchain.compile(ADD, target("h100"))
    assert a.ok and a.binary == b.binary


def test_identity_covers_what_changes_the_binary(toolchain):
    h100 = toolchain.identity(target("h100"))
    assert h100 == toolchain.identity(target("h100"))
    assert h100["tool"] == "nvrtc" and h100["arch"] == "sm_90a"
    assert re.fullmatch(r"\d+\.\d+", h100["version"])
    assert "--gpu-architecture=sm_90a" in h100["flags"]
    assert "--ptxas-options=-v" in h100["flags"]
    assert set(h100["headers"]) >= {"cuda-runtime", "cccl"}
    assert toolchain.identity(target("h100", flags=["-std=c++17", "-lineinfo"])) != h100
    assert toolchain.identity(target("a100"))["flags"] != h100["flags"]
    assert not any(f.startswith("-I") for f in h100["flags"])  # paths are machine-local


# Real `--ptxas-options=-v` output of NVRTC 13.0 for sm_80: a kernel calling a non-inlined device
# function (which gets its own "Function properties" block) and a kernel that spills.
CAPTURED_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'calls' for 'sm_80'
ptxas info    : Function properties for calls
ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 256 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compile time = 17.065 ms
ptxas info    : Function properties for _Z6helper3Bigi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     2088 bytes stack frame, 2176 bytes spill stores, 4784 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 2088 bytes cumulative stack size, 364 bytes cmem[0]
ptxas info    : Compile time = 295.066 ms
"""

# Real output for sm_90a of a wgmma kernel whose accumulator was written outside the wgmma fence:
# the advisory comes before the kernel's own lines.
CAPTURED_ADVISORY_LOG = """\
ptxas info    : (C7519) warpgroup.arrive is injected in around line 40 by compiler to allow use of registers in GMMA in function 'wgmma_tile'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'wgmma_tile' for 'sm_90a'
ptxas info    : Function properties for wgmma_tile
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 0 barriers
ptxas info    : Compile time = 7.754 ms
"""


def test_parse_captured_ptxas_log():
    assert parse_ptxas_log(CAPTURED_LOG) == {
        "calls": {"registers": 72, "barriers": 0, "spill_store_bytes": 0, "spill_load_bytes": 0,
                  "spill_bytes": 0, "stack_bytes": 256, "shared_bytes": 0, "constant_bytes": 360},
        "spill": {"registers": 32, "barriers": 0, "spill_store_bytes": 2176,
                  "spill_load_bytes": 4784, "spill_bytes": 6960, "stack_bytes": 2088,
                  "shared_bytes": 0, "constant_bytes": 364},
    }


def test_parse_keeps_advisories_for_their_kernel():
    parsed = parse_ptxas_log(CAPTURED_ADVISORY_LOG)
    assert parsed["wgmma_tile"]["registers"] == 30
    (advisory,) = parsed["wgmma_tile"]["advisories"]
    assert advisory.startswith("(C7519) warpgroup.arrive is injected")


def test_parse_of_an_empty_log_finds_no_kernels():
    assert parse_ptxas_log("") == {}


def test_without_cuda_bindings_the_problem_names_the_wheels():
    """In a child whose cuda.bindings cannot be imported (as on a machine without the extras)."""
    import subprocess
    import sys
    child = (
        "import sys; sys.modules['cuda.bindings'] = None\n"
        "from pathlib import Path\n"
        "from regen.target import load_target\n"
        "from regen.toolchains.nvrtc import Toolchain\n"
        "t = load_target(Path('targets/h100.yaml'))\n"
        "tc = Toolchain()\n"
        "print(tc.identity(t)['version'])\n"
        "r = tc.compile('extern \"C\" __global__ void k() {}', t)\n"
        "print(r.ok)\n"
        "print(tc.problem())\n")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr
    version, ok, problem = out.stdout.splitlines()
    assert (version, ok) == ("unavailable", "False")
    assert "NVRTC is not usable" in problem
    for wheel in ("cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl"):
        assert wheel in problem
