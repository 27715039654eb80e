"""The HIP toolchain and runtime: compiler selection, real gfx942/gfx950 compiles, the resource
remarks, instruction checks, and kernel-argument packing checked against the code object."""

from __future__ import annotations

import functools
import json
import os
import struct
import textwrap
from pathlib import Path

import pytest

from regen.recipe import BoundArg, BoundLaunch
from regen.runtimes import hip as hip_runtime
from regen.sass import missing_instructions
from regen.target import load_target
from regen.toolchains import hip as hip_toolchain
from regen.toolchains.hip import INSTALL_HINT, Toolchain, parse_resource_remarks

TARGETS = Path(__file__).resolve().parent.parent / "targets"
EF_AMDGPU_MACH = {"gfx942": 0x04C, "gfx950": 0x04F}
EM_AMDGPU = 224


def target(name: str):
    return load_target(TARGETS / f"{name}.yaml")


def clang_only() -> Toolchain:
    """The CPU path explicitly (a machine with ROCm would otherwise select hipcc)."""
    return Toolchain(hipcc=(), use_hiprtc=False)


@functools.lru_cache(maxsize=None)
def compiled(source: str, name: str):
    """One clang compile per (source, target) for the whole module: compiles take seconds."""
    return clang_only().compile(source, target(name))


def fake_tool(tmp_path: Path, name: str, version_text: str) -> str:
    """An executable that only answers --version: enough for selection, never asked to compile."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\ncat <<'EOF'\n" + version_text + "\nEOF\n")
    path.chmod(0o755)
    return str(path)


ROW_SUM = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    // one workgroup of 256 threads (4 wavefronts) per row: bf16 in, float32 sum out
    extern "C" __global__ void __launch_bounds__(256)
    row_sum_bf16(const __bf16* __restrict__ x, float* __restrict__ y, long long N) {
      const __bf16* row = x + (long long)blockIdx.x * N;
      float acc = 0.f;
      for (long long i = threadIdx.x; i < N; i += blockDim.x) acc += (float)row[i];
      for (int mask = warpSize / 2; mask > 0; mask >>= 1) acc += __shfl_xor(acc, mask);
      __shared__ float partial[256];
      if (threadIdx.x % warpSize == 0) partial[threadIdx.x / warpSize] = acc;
      __syncthreads();
      if (threadIdx.x == 0) {
        float total = 0.f;
        for (int w = 0; w < blockDim.x / warpSize; ++w) total += partial[w];
        y[blockIdx.x] = total;
      }
    }
    """)

MFMA = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    typedef short short4_t __attribute__((ext_vector_type(4)));
    typedef float float16_t __attribute__((ext_vector_type(16)));
    // one 32x32 fp32 tile of A[32, K] * B[K, 32] per wavefront (B stored transposed), K % 8 == 0
    extern "C" __global__ void __launch_bounds__(64)
    mm_bf16(const __bf16* __restrict__ A, const __bf16* __restrict__ Bt, float* __restrict__ C, long long K) {
      int lane = threadIdx.x;
      float16_t acc = {};
      for (long long k = 0; k < K; k += 8) {
        short4_t a, b;
        for (int i = 0; i < 4; ++i) {
          a[i] = __builtin_bit_cast(short, A[(lane % 32) * K + k + (lane / 32) * 4 + i]);
          b[i] = __builtin_bit_cast(short, Bt[(lane % 32) * K + k + (lane / 32) * 4 + i]);
        }
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, acc, 0, 0, 0);
      }
      for (int i = 0; i < 16; ++i) C[((i / 4) * 8 + (lane / 32) * 4 + i % 4) * 32 + lane % 32] = acc[i];
    }
    """)

SCALE = textwrap.dedent("""\
    #include <hip/hip_runtime.h>
    extern "C" __global__ void __launch_bounds__(256)
    scale_f32(const float* __restrict__ x, int n32, float alpha, long long n, double unused,
              float* __restrict__ y, int tail) {
      long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = alpha * x[i] + (float)(n32 - tail);
    }
    """)


# --- selection --------------------------------------------------------------------------------
def test_hipcc_is_selected_before_clang(tmp_path):
    hipcc = fake_tool(tmp_path, "hipcc", "HIP version: 6.2.41133-dd7f95766\n"
                      "AMD clang version 18.0.0git\nInstalledDir: /opt/rocm-6.2.0/llvm/bin")
    chosen, _ = Toolchain(hipcc=(hipcc,), use_hiprtc=False).selection()
    assert (chosen.tool, chosen.path) == ("hipcc", hipcc)
    assert "HIP version: 6.2.41133" in chosen.version and "/opt/rocm" not in chosen.version


def test_clang_is_selected_without_hipcc_and_names_the_headers():
    chosen, reasons = clang_only().selection()
    assert chosen.tool == "clang" and chosen.hip_version and chosen.hip_version.startswith("5.")
    assert any("hipcc: not found" in r for r in reasons)


def test_clang_older_than_20_is_passed_over(tmp_path):
    old = fake_tool(tmp_path, "clang-19", "Debian clang version 19.1.7\nTarget: x86_64-pc-linux-gnu")
    chosen, reasons = Toolchain(hipcc=(), clang=(old, "clang-22"), use_hiprtc=False).selection()
    assert chosen.tool == "clang" and chosen.path.endswith("clang-22")
    assert any("clang 19 is older than 20" in r for r in reasons)
    only_old = Toolchain(hipcc=(), clang=(old,), use_hiprtc=False)
    assert "clang 19 is older than 20" in only_old.problem() and INSTALL_HINT in only_old.problem()


def test_hiprtc_is_tried_before_clang_and_says_why_it_is_unusable():
    why = hip_toolchain.hiprtc_problem()
    if why is None:
        chosen, _ = Toolchain(hipcc=()).selection()
        assert chosen.tool == "hiprtc"
        return
    assert "hiprtc" in why
    chosen, reasons = Toolchain(hipcc=(), use_hiprtc=True).selection()
    assert chosen.tool == "clang" and why in reasons


def test_no_compiler_gives_a_clear_problem_and_a_failed_result():
    none = Toolchain(hipcc=(), clang=(), use_hiprtc=False)
    problem = none.problem()
    assert "no HIP compiler found" in problem
    assert "apt-get install clang-22 lld-22" in problem and "hipcc" in problem
    result = none.compile(ROW_SUM, target("mi350"))
    assert not result.ok and result.log == problem
    assert none.identity(target("mi350"))["compiler"] is None


def test_missing_hip_headers_name_the_package(tmp_path):
    tc = Toolchain(hipcc=(), use_hiprtc=False, hip_paths=(str(tmp_path),))
    assert "libamdhip64-dev" in tc.problem()


def test_an_arch_the_compiler_does_not_know_is_a_problem_not_a_crash():
    t = target("mi350").model_copy(update={"arch": "gfx9999"})
    tc = clang_only()
    assert "cannot compile for gfx9999" in tc.problem(t)
    assert not tc.compile(ROW_SUM, t).ok


def test_the_handoff_scaffold_compiles_for_both_arches():
    """regen's own stub (hip_bf16.h, __hip_bfloat16, __half, int64_t) builds on the CPU path."""
    from regen.generators.handoff import stub
    from regen.spec import load_spec
    spec = load_spec(TARGETS.parent / "specs" / "softmax.yaml")
    for name in ("mi300x", "mi350"):
        source, _ = stub(spec, target(name))
        assert "__hip_bfloat16" in source
        result = clang_only().compile(source, target(name))
        assert result.ok, result.log
        assert {"softmax_bf16", "softmax_f16", "softmax_f32"} <= set(result.resources)


def test_hip_bf16_header_works_over_clangs_bf16():
    source = textwrap.dedent("""\
        #include <hip/hip_runtime.h>
        #include <hip/hip_bf16.h>
        extern "C" __global__ void __launch_bounds__(64)
        twice(const __hip_bfloat16* __restrict__ x, __hip_bfloat16* __restrict__ y) {
          float v = __bfloat162float(x[threadIdx.x]);
          y[threadIdx.x] = __float2bfloat16(2.f * v);
          __hip_bfloat162 pair = {x[0], __ushort_as_bfloat16(__bfloat16_as_ushort(x[1]))};
          y[64 + threadIdx.x] = __float22bfloat162_rn(__bfloat1622float2(pair)).y;
        }
        """)
    result = compiled(source, "mi350")
    assert result.ok, result.log
    assert missing_instructions(result.disassembly, ["v_cvt_pk_bf16_f32"], kernel="twice") == []


# --- identity ---------------------------------------------------------------------------------
def test_identity_names_compiler_arch_flags_and_changes_with_them():
    tc = clang_only()
    t = target("mi350")
    ident = tc.identity(t)
    assert ident["compiler"] == "clang" and ident["arch"] == "gfx950"
    assert "--offload-arch=gfx950" in ident["flags"] and "-O3" in ident["flags"]
    assert ident["hip_headers"] and hip_toolchain.COMPAT_NAME in ident["compat_headers"]
    assert "/" not in json.dumps(ident), "identity must not depend on where tools are installed"
    other_flags = t.model_copy(update={"toolchain": t.toolchain.model_copy(
        update={"flags": ["-O2", "-mcode-object-version=5"]})})
    assert tc.identity(other_flags) != ident
    assert tc.identity(target("mi300x")) != ident


# --- compiling --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mi300x", "mi350"])
def test_a_real_kernel_compiles_to_a_code_object_for_the_arch(name):
    t = target(name)
    result = compiled(ROW_SUM, name)
    assert result.ok, result.log
    binary = result.binary
    assert binary[:4] == b"\x7fELF"
    e_machine, = struct.unpack_from("<H", binary, 0x12)
    e_flags, = struct.unpack_from("<I", binary, 0x30)
    assert e_machine == EM_AMDGPU and e_flags & 0xFF == EF_AMDGPU_MACH[t.arch]
    meta = hip_runtime.code_object_metadata(binary)
    assert meta["amdhsa.target"].startswith(f"amdgcn-amd-amdhsa--{t.arch}")
    assert meta["amdhsa.version"] == [1, 2]   # code object v5, loadable by ROCm >= 6.0
    res = result.resources["row_sum_bf16"]
    assert res["shared_bytes"] == 256 * 4
    assert 0 < res["registers"] <= 64 and res["sgprs"] > 0 and res["agprs"] == 0
    assert res["occupancy"] == 8 and res["spill_bytes"] == 0 and res["scratch_bytes"] == 0
    assert res["dynamic_stack"] is False
    assert "v_mfma" in missing_instructions(result.disassembly, ["v_mfma"], kernel="row_sum_bf16")
    assert result.seconds > 0


def test_builds_are_reproducible():
    assert clang_only().compile(ROW_SUM, target("mi350")).binary == compiled(ROW_SUM, "mi350").binary


@pytest.mark.parametrize("name", ["mi300x", "mi350"])
def test_mfma_kernel_shows_v_mfma_and_a_plain_kernel_does_not(name):
    mfma = compiled(MFMA, name)
    assert mfma.ok, mfma.log
    assert missing_instructions(mfma.disassembly, ["v_mfma_f32_32x32x8"], kernel="mm_bf16") == []
    plain = compiled(SCALE, name)
    assert plain.ok, plain.log
    assert missing_instructions(plain.disassembly, ["v_mfma"], kernel="scale_f32") == ["v_mfma"]


def test_register_pressure_and_spills_are_reported_from_the_remarks():
    """The notes' claim: without __launch_bounds__ the compiler budgets for 1024 threads (128 VGPRs)
    and spills; with the real block size it may use more registers and does not."""
    body = """{ float acc[160];
      for (int i = 0; i < 160; ++i) acc[i] = x[threadIdx.x * 160 + i];
      for (int k = 0; k < 64; ++k) for (int i = 0; i < 160; ++i) acc[i] = acc[i] * x[k] + acc[(i + 1) % 160];
      for (int i = 0; i < 160; ++i) y[threadIdx.x * 160 + i] = acc[i]; }"""
    tc, t = clang_only(), target("mi350")
    results = {}
    for bounds in ("", "__launch_bounds__(256)"):
        src = ('#include <hip/hip_runtime.h>\nextern "C" __global__ void ' + bounds +
               " k(float* __restrict__ y, const float* __restrict__ x) " + body)
        result = tc.compile(src, t)
        assert result.ok, result.log
        results[bounds] = result.resources["k"]
    unbounded, bounded = results[""], results["__launch_bounds__(256)"]
    assert unbounded["registers"] <= 128 and unbounded["vgpr_spills"] > 0
    assert unbounded["spill_bytes"] == unbounded["scratch_bytes"] > 0
    assert bounded["registers"] > 128 and bounded["spill_bytes"] == 0
    assert bounded["occupancy"] < unbounded["occupancy"]


def test_bad_source_fails_with_the_compiler_log():
    result = clang_only().compile(ROW_SUM.replace("acc += (float)row[i];", "acc += undefined_thing;"),
                                  target("mi350"))
    assert not result.ok
    assert "kernel.hip:" in result.log and "error" in result.log and "undefined_thing" in result.log
    assert "regen-hip-" not in result.log, "temporary paths are stripped from the log"


def test_math_the_notes_promise_links_and_device_library_math_does_not():
    """The lists in the target notes are what the CPU toolchain really does."""
    unary = ("expf exp2f exp10f __expf logf log2f log10f __logf sqrtf __fsqrt_rn rsqrtf "
             "__frsqrt_rn __frcp_rn fabsf floorf ceilf truncf roundf rintf __saturatef "
             "__sinf __cosf").split()
    binary = "fminf fmaxf copysignf __fdividef".split()
    notes = target("mi350").notes
    for name in unary + binary + ["fmaf", "ldexpf", "__float2int_rn", "__popcll"]:
        assert name in notes, name
    body = " ".join(f"r += {f}(a);" for f in unary) + " ".join(f"r += {f}(a, b);" for f in binary)
    body += (" r += fmaf(a, b, r) + ldexpf(a, 3) + (float)(isnan(a) + isinf(b) + isfinite(a));"
             " r += (float)__float2int_rn(a) + (float)__popcll((unsigned long long)b);"
             " atomicAdd(y + 1, r);")
    source = ('#include <hip/hip_runtime.h>\nextern "C" __global__ void __launch_bounds__(64) '
              "m(float* y, const float* x) { float a = x[threadIdx.x], b = x[threadIdx.x + 64], "
              "r = 0.f; " + body + " y[threadIdx.x] = r; }\n")
    tc, t = clang_only(), target("mi350")
    result = tc.compile(source, t)
    assert result.ok, result.log
    calls = {"tanhf(a)": "__ocml_tanh_f32", "powf(a, b)": "__ocml_pow_f32",
             "(float)exp((double)a)": "__ocml_exp_f64"}
    for name in ("tanhf", "powf", "exp", "sinf", "erff", "hexp", "printf"):
        assert name in notes
    bad = source.replace("y[threadIdx.x] = r;", f"y[threadIdx.x] = r + {' + '.join(calls)};")
    result = tc.compile(bad, t)
    assert not result.ok
    for symbol in calls.values():
        assert f"undefined hidden symbol: {symbol}" in result.log


def test_resource_remarks_with_symbolic_values_are_left_out():
    log = textwrap.dedent("""\
        kernel.hip:4:1: remark: Function Name: k [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:4:1: remark:     TotalSGPRs: k.numbered_sgpr+6 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:4:1: remark:     VGPRs: 12 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:4:1: remark:     ScratchSize [bytes/lane]: 0 [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:4:1: remark:     Dynamic Stack: True [-Rpass-analysis=kernel-resource-usage]
        kernel.hip:4:1: remark:     VGPRs Spill: 0 [-Rpass-analysis=kernel-resource-usage]
        """)
    assert parse_resource_remarks(log) == {"k": {"registers": 12, "scratch_bytes": 0,
                                                 "dynamic_stack": True, "vgpr_spills": 0,
                                                 "spill_bytes": 0}}


# --- runtime: argument packing and the code object's own record of the parameters ---------------
KINDS = ["tensor", "int32", "float32", "int64", "float64", "tensor", "int32"]


def test_arg_layout_is_natural_alignment_padded_like_a_struct():
    offsets, total = hip_runtime.arg_layout(KINDS)
    assert offsets == [0, 8, 12, 16, 24, 32, 40] and total == 48
    assert hip_runtime.arg_layout(["int32", "float32"]) == ([0, 4], 8)
    assert hip_runtime.arg_layout(["int32", "tensor"]) == ([0, 8], 16)
    with pytest.raises(ValueError):
        hip_runtime.arg_layout(["int16"])


def test_pack_args_writes_each_value_at_its_offset():
    args = [BoundArg("tensor", "x"), BoundArg("int32", -7), BoundArg("float32", 0.5),
            BoundArg("int64", 2**40), BoundArg("float64", -1.25), BoundArg("tensor", "y"),
            BoundArg("int32", 3)]
    addresses = {"x": 0x7F0000001000, "y": 0x7F0000002000}
    packed = hip_runtime.pack_args("k", args, addresses.__getitem__)
    assert len(packed) == 48
    assert struct.unpack_from("<QifqdQi", packed) == (0x7F0000001000, -7, 0.5, 2**40, -1.25,
                                                        0x7F0000002000, 3)
    with pytest.raises(RuntimeError, match="does not fit in int32"):
        hip_runtime.pack_args("k", [BoundArg("int32", 2**31)], addresses.__getitem__)


@pytest.mark.parametrize("name", ["mi300x", "mi350"])
def test_packing_matches_the_parameter_offsets_the_compiler_recorded(name):
    result = compiled(SCALE, name)
    assert result.ok, result.log
    params = hip_runtime.kernel_params(result.binary)["scale_f32"]
    offsets, _ = hip_runtime.arg_layout(KINDS)
    assert [p["offset"] for p in params] == offsets
    assert [p["size"] for p in params] == [8, 4, 4, 8, 8, 8, 4]
    assert [p["kind"] for p in params] == ["global_buffer", "by_value", "by_value", "by_value",
                                           "by_value", "global_buffer", "by_value"]
    args = [BoundArg(k, "x" if k == "tensor" else 1) for k in KINDS]
    hip_runtime.check_signature("scale_f32", args, params)
    with pytest.raises(RuntimeError, match="takes 7 parameters, the recipe passes 6"):
        hip_runtime.check_signature("scale_f32", args[:-1], params)
    wrong = args[:1] + [BoundArg("int64", 1)] + args[2:]
    with pytest.raises(RuntimeError, match="parameter 1 is 4 bytes"):
        hip_runtime.check_signature("scale_f32", wrong, params)


def test_metadata_of_something_else_is_a_clear_error():
    with pytest.raises(ValueError, match="not a 64-bit ELF"):
        hip_runtime.code_object_metadata(b"not an elf at all")


# --- on an AMD GPU (device machine with torch for ROCm and hip-python) -------------------------
def _rocm_torch() -> bool:
    import torch
    return bool(getattr(torch.version, "hip", None)) and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _rocm_torch(), reason="needs an AMD GPU with torch for ROCm")
def test_scale_kernel_runs_on_the_amd_gpu(tmp_path):
    import torch
    arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
    name = {"gfx942": "mi300x", "gfx950": "mi350"}[arch]
    result = Toolchain().compile(SCALE, target(name))
    assert result.ok, result.log
    path = tmp_path / "kernel.hsaco"
    path.write_bytes(result.binary)
    runtime = hip_runtime.Runtime(str(path))
    n = 1000
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    launch = BoundLaunch(kernel="scale_f32", grid=((n + 255) // 256, 1, 1), block=(256, 1, 1),
                         shared_mem=0, args=(BoundArg("tensor", "x"), BoundArg("int32", 5),
                                             BoundArg("float32", 2.0), BoundArg("int64", n),
                                             BoundArg("float64", 0.0), BoundArg("tensor", "y"),
                                             BoundArg("int32", 2)))
    timer = runtime.timer()
    timer.start()
    runtime.launch([launch], {"x": x, "y": y})
    timer.stop()
    seconds = timer.seconds()
    runtime.synchronize()
    assert torch.equal(y, 2.0 * x + 3.0) and seconds > 0
    runtime.flush_cache()
    fp = runtime.fingerprint()
    assert fp["vendor"] == "amd" and fp["arch"].startswith(arch) and fp["device"]
    runtime.close()
    assert os.environ.get("ROCM_PATH") or fp["hip_library"] != "unknown"
