"""The AMD columns: they load and validate, their figures are consistent, and every listed
feature really compiles to its instruction for its arch (through the selected HIP toolchain)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from regen.runtimes.hip import code_object_metadata
from regen.target import load_target
from regen.toolchains.hip import Toolchain

TARGETS = Path(__file__).resolve().parent.parent / "targets"
AMD = {"mi300x": "gfx942", "mi350": "gfx950"}
PEAK_UNITS = {"memory_bandwidth": "B/s", "flops_float32": "FLOP/s", "flops_bfloat16": "FLOP/s",
              "flops_float16": "FLOP/s", "flops_float8": "FLOP/s", "flops_mxfp4": "FLOP/s",
              "flops_mxfp6": "FLOP/s"}


def load(name: str):
    return load_target(TARGETS / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(AMD))
def test_column_loads_with_its_arch_and_toolchain(name):
    t = load(name)
    assert (t.name, t.vendor, t.language, t.toolchain.name, t.arch) == \
        (name, "amd", "hip", "hip", AMD[name])
    assert "-mcode-object-version=5" in t.toolchain.flags
    for phrase in ('extern "C" __global__', "warpSize == 64", "__launch_bounds__", "no host code",
                   "hipModuleLaunchKernel", "__hip_bfloat16", "__bf16", "do NOT link"):
        assert phrase in t.notes, phrase
    assert AMD[name] in t.hardware.match
    assert name.upper().replace("MI350", "MI355X") in t.hardware.match


@pytest.mark.parametrize("name", sorted(AMD))
def test_peaks_limits_and_taxonomy_are_complete(name):
    t = load(name)
    assert {"memory_bandwidth", "flops_float32", "flops_bfloat16", "flops_float16",
            "flops_float8"} <= set(t.peaks)
    for key, peak in t.peaks.items():
        assert peak.unit == PEAK_UNITS[key], key
        assert peak.source == "datasheet" and peak.note, key
    # dense matrix-core rates: fp8 twice bf16, bf16 = fp16, far above the vector fp32 rate
    assert t.peaks["flops_float8"].value == pytest.approx(2 * t.peaks["flops_bfloat16"].value, rel=1e-3)
    assert t.peaks["flops_float16"].value == t.peaks["flops_bfloat16"].value
    assert t.peaks["flops_bfloat16"].value > 5 * t.peaks["flops_float32"].value
    assert t.limits["wavefront_size"] == 64 and t.limits["vgprs_per_lane"] == 512
    assert t.limits["arch_vgprs_max"] + t.limits["agprs_max"] == t.limits["vgprs_per_lane"]
    assert t.limits["l2_bytes"] == t.limits["xcds"] * t.limits["l2_bytes_per_xcd"]
    ids = [c.id for c in t.taxonomy]
    assert len(ids) == len(set(ids)) and len(ids) >= 10
    assert all(i.startswith("amd.") and c.technique.strip() and c.when.strip()
               for i, c in zip(ids, t.taxonomy))
    assert {"amd.wave_reduce", "amd.vector_access", "amd.lds_padding", "amd.mfma_tiles",
            "amd.occupancy_vgprs", "amd.nontemporal"} <= set(ids)
    view = t.arch_view()
    assert view["taxonomy"] and view["limits"]["compute_units"] and t.family_name == "cdna"


def test_mi300x_and_mi350_differ_where_the_hardware_does():
    a, b = load("mi300x"), load("mi350")
    assert (a.limits["compute_units"], b.limits["compute_units"]) == (304, 256)
    assert (a.limits["lds_per_workgroup"], b.limits["lds_per_workgroup"]) == (64 * 1024, 160 * 1024)
    assert (a.peaks["memory_bandwidth"].value, b.peaks["memory_bandwidth"].value) == (5.3e12, 8.0e12)
    assert {"fp8.fnuz.e4m3", "mfma.xf32"} <= set(a.features)
    assert not {"fp8.ocp.e4m3", "mxfp4", "mfma.scale.f8f6f4", "lds_transpose_read"} & set(a.features)
    assert {"fp8.ocp.e4m3", "mxfp4", "mxfp6", "mfma.scale.f8f6f4", "lds_transpose_read"} <= set(b.features)
    assert "mfma.xf32" not in b.features and "fp8.fnuz.e4m3" not in b.features
    assert b.peaks["flops_mxfp4"].value == pytest.approx(2 * b.peaks["flops_float8"].value, rel=1e-3)
    assert {"amd.lds_transpose", "amd.mx_scaled_mfma", "amd.direct_to_lds"} <= {c.id for c in b.taxonomy}
    assert "amd.fp8_fnuz" in {c.id for c in a.taxonomy}


# One kernel per feature: its body, and the instruction (regex over that kernel's disassembly)
# that proves the feature compiled to what the target says. Feature names not listed here are in
# COVERED_ELSEWHERE with the reason.
PRELUDE = """
#include <hip/hip_runtime.h>
typedef short s4 __attribute__((ext_vector_type(4)));
typedef _Float16 h4 __attribute__((ext_vector_type(4)));
typedef _Float16 h8 __attribute__((ext_vector_type(8)));
typedef __bf16 b8 __attribute__((ext_vector_type(8)));
typedef float f2 __attribute__((ext_vector_type(2)));
typedef float f4 __attribute__((ext_vector_type(4)));
typedef float f16 __attribute__((ext_vector_type(16)));
typedef double d4 __attribute__((ext_vector_type(4)));
typedef int i8 __attribute__((ext_vector_type(8)));
#define LDS(p) ((__attribute__((address_space(3))) void*)(p))
"""
FEATURES = {
    "mfma.f32.32x32x8.bf16": ("const s4* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x8_?bf16"),
    "mfma.f32.16x16x16.bf16": ("const s4* a, f4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_16x16x16_?bf16"),
    "mfma.f32.32x32x8.f16": ("const h4* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x8f16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x8_?f16"),
    "mfma.f32.16x16x16.f16": ("const h4* a, f4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x16f16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_16x16x16_?f16"),
    "mfma.f32.32x32x16.fp8": ("const long* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x16_fp8_fp8"),
    "mfma.f32.16x16x32.fp8": ("const long* a, f4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_16x16x32_fp8_fp8"),
    "mfma.xf32": ("const f2* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x4_xf32(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x4_?xf32"),
    "mfma.f64.16x16x4": ("const double* a, d4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f64_16x16x4f64(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f64_16x16x4_?f64"),
    "mfma.f32.32x32x16.bf16": ("const b8* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x16_bf16"),
    "mfma.f32.16x16x32.bf16": ("const b8* a, f4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x32_bf16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_16x16x32_bf16"),
    "mfma.f32.32x32x16.f16": ("const h8* a, f16* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_32x32x16_f16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_32x32x16_f16"),
    "mfma.f32.16x16x32.f16": ("const h8* a, f4* c", "c[threadIdx.x] = __builtin_amdgcn_mfma_f32_16x16x32_f16(a[0], a[1], c[threadIdx.x], 0, 0, 0);", r"v_mfma_f32_16x16x32_f16"),
    "mfma.scale.f8f6f4": ("const i8* a, f16* c, int s", "c[threadIdx.x] = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[0], a[1], c[threadIdx.x], 0, 0, 0, s, 0, s);", r"v_mfma_scale_f32_32x32x64_f8f6f4"),
    "mxfp4": ("const i8* a, f16* c, int s", "c[threadIdx.x] = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[0], a[1], c[threadIdx.x], 4, 4, 0, s, 0, s);", r"v_mfma_scale_f32_32x32x64_f8f6f4"),
    "mxfp6": ("const i8* a, f16* c, int s", "c[threadIdx.x] = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[0], a[1], c[threadIdx.x], 2, 3, 0, s, 0, s);", r"v_mfma_scale_f32_32x32x64_f8f6f4"),
    "fp8.fnuz.e4m3": ("const float* x, int* y", "y[threadIdx.x] = __builtin_amdgcn_cvt_pk_fp8_f32(x[0], x[1], y[threadIdx.x], false);", r"v_cvt_pk_fp8_f32"),
    "fp8.fnuz.e5m2": ("const float* x, int* y", "y[threadIdx.x] = __builtin_amdgcn_cvt_pk_bf8_f32(x[0], x[1], y[threadIdx.x], false);", r"v_cvt_pk_bf8_f32"),
    "fp8.ocp.e4m3": ("const float* x, int* y", "y[threadIdx.x] = __builtin_amdgcn_cvt_pk_fp8_f32(x[0], x[1], y[threadIdx.x], false);", r"v_cvt_pk_fp8_f32"),
    "fp8.ocp.e5m2": ("const float* x, int* y", "y[threadIdx.x] = __builtin_amdgcn_cvt_pk_bf8_f32(x[0], x[1], y[threadIdx.x], false);", r"v_cvt_pk_bf8_f32"),
    "packed_fp32": ("const f2* x, f2* y", "y[threadIdx.x] = __builtin_elementwise_fma(x[threadIdx.x], x[threadIdx.x + 64], y[threadIdx.x]);", r"v_pk_fma_f32"),
    "dpp": ("int* x", "x[threadIdx.x] = __builtin_amdgcn_update_dpp(0, x[threadIdx.x], 0x111, 0xf, 0xf, false);", r"_dpp\b"),
    "ds_swizzle": ("int* x", "x[threadIdx.x] = __builtin_amdgcn_ds_swizzle(x[threadIdx.x], 0x041F);", r"ds_swizzle_b32"),
    "ds_bpermute": ("int* x", "x[threadIdx.x] = __builtin_amdgcn_ds_bpermute((threadIdx.x ^ 1) * 4, x[threadIdx.x]);", r"ds_bpermute_b32"),
    "buffer_load": ("float* p, f4* out, int n", "__amdgpu_buffer_rsrc_t r = __builtin_amdgcn_make_buffer_rsrc(p, 0, n * 4, 0x00020000); out[threadIdx.x] = __builtin_bit_cast(f4, __builtin_amdgcn_raw_buffer_load_b128(r, threadIdx.x * 16, 0, 0));", r"buffer_load_dwordx4"),
    "global_load_lds.dword": ("const float* x, float* y", "__shared__ float s[64]; __builtin_amdgcn_global_load_lds((void*)(x + threadIdx.x), LDS(s), 4, 0, 0); __syncthreads(); y[threadIdx.x] = s[threadIdx.x ^ 1];", r"global_load_lds_dword\b"),
    "global_load_lds.dwordx4": ("const f4* x, f4* y", "__shared__ f4 s[64]; __builtin_amdgcn_global_load_lds((void*)(x + threadIdx.x), LDS(s), 16, 0, 0); __syncthreads(); y[threadIdx.x] = s[threadIdx.x ^ 1];", r"global_load_lds_dwordx4"),
    "lds_transpose_read": ("s4* out", "__shared__ short s[4096]; s[threadIdx.x] = threadIdx.x; __syncthreads(); out[threadIdx.x] = __builtin_amdgcn_ds_read_tr16_b64_v4i16((__attribute__((address_space(3))) s4*)((__attribute__((address_space(3))) short*)s + threadIdx.x * 4));", r"ds_read_b64_tr_b16"),
    "bf16_convert": ("const float* x, __bf16* y", "y[2 * threadIdx.x] = (__bf16)x[2 * threadIdx.x]; y[2 * threadIdx.x + 1] = (__bf16)x[2 * threadIdx.x + 1];", r"v_cvt_pk_bf16_f32"),
    "nontemporal": ("const f4* __restrict__ x, f4* __restrict__ y", "__builtin_nontemporal_store(__builtin_nontemporal_load(&x[threadIdx.x]), &y[threadIdx.x]);", r"global_load_dwordx4 [^\n]* nt\b[^\n]*\n[\s\S]*global_store_dwordx4 [^\n]* nt\b"),
    "atomics.fp32.fp64": ("float* x, double* y", "unsafeAtomicAdd(x, 1.0f); unsafeAtomicAdd(y, 1.0);", r"global_atomic_add_f32[\s\S]*global_atomic_add_f64"),
}
COVERED_ELSEWHERE = {"wave64": "the code object metadata says .wavefront_size 64 (checked below)"}


def _kernel_name(feature: str) -> str:
    return "feat_" + re.sub(r"\W", "_", feature)


def _kernel_disassembly(disassembly: str, kernel: str) -> str:
    m = re.search(rf"^[0-9a-f]+ <{kernel}>:\n(.*?)(?=^[0-9a-f]+ <|\Z)", disassembly, re.S | re.M)
    return m.group(1) if m else ""


@pytest.mark.parametrize("name", sorted(AMD))
def test_every_listed_feature_compiles_to_its_instruction(name):
    t = load(name)
    unknown = [f for f in t.features if f not in FEATURES and f not in COVERED_ELSEWHERE]
    assert not unknown, f"features without a compile check: {unknown}"
    source = PRELUDE + "\n".join(
        f'extern "C" __global__ void __launch_bounds__(64) {_kernel_name(f)}({FEATURES[f][0]}) '
        f"{{ {FEATURES[f][1]} }}" for f in t.features if f in FEATURES)
    result = Toolchain().compile(source, t)
    assert result.ok, result.log
    assert result.disassembly is not None
    for feature in t.features:
        if feature in FEATURES:
            body = _kernel_disassembly(result.disassembly, _kernel_name(feature))
            assert re.search(FEATURES[feature][2], body), f"{feature}: no {FEATURES[feature][2]}"
    kernels = code_object_metadata(result.binary)["amdhsa.kernels"]
    assert {k[".wavefront_size"] for k in kernels} == {64}


def test_features_of_the_other_arch_do_not_compile_here():
    """The lists are not just generous: gfx950's double-K bf16 MFMA fails on gfx942 and gfx942's
    xf32 MFMA fails on gfx950."""
    for name, feature in (("mi300x", "mfma.f32.32x32x16.bf16"), ("mi350", "mfma.xf32")):
        params, body, _ = FEATURES[feature]
        source = PRELUDE + f'extern "C" __global__ void k({params}) {{ {body} }}'
        result = Toolchain().compile(source, load(name))
        assert not result.ok and result.log, (name, feature)
