"""The NVIDIA columns: they load and validate, and each listed feature really compiles for its arch."""

from __future__ import annotations

from pathlib import Path

import pytest

from regen.errors import InputError
from regen.target import load_target
from regen.toolchains.nvrtc import Toolchain

TARGETS = Path(__file__).resolve().parent.parent / "targets"
NVIDIA = {"a100": "sm_80", "h100": "sm_90a", "h200": "sm_90a", "b200": "sm_100a"}
PEAK_UNITS = {"memory_bandwidth": "B/s", "flops_float32": "FLOP/s", "flops_bfloat16": "FLOP/s",
              "flops_float16": "FLOP/s", "flops_float8": "FLOP/s"}
REQUIRED_LIMITS = {"shared_memory_per_block", "shared_memory_per_sm", "registers_per_thread",
                   "registers_per_sm", "max_threads_per_block", "sm_count", "l2_bytes",
                   "warp_size"}


def load(name: str):
    return load_target(TARGETS / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(NVIDIA))
def test_column_loads_with_its_arch_and_toolchain(name):
    t = load(name)
    assert (t.name, t.vendor, t.language, t.toolchain.name, t.arch) == \
        (name, "nvidia", "cuda", "nvrtc", NVIDIA[name])
    assert t.description and 'extern "C" __global__' in t.notes
    assert name.upper() in t.hardware.match


@pytest.mark.parametrize("name", sorted(NVIDIA))
def test_peaks_limits_and_taxonomy_are_complete(name):
    t = load(name)
    assert {"memory_bandwidth", "flops_float32", "flops_bfloat16", "flops_float16"} <= set(t.peaks)
    for key, peak in t.peaks.items():
        assert peak.unit == PEAK_UNITS[key], key
        assert peak.note, f"{key} needs a note saying where the figure comes from"
    assert ("flops_float8" in t.peaks) == ("fp8.e4m3" in t.features)
    assert REQUIRED_LIMITS <= set(t.limits)
    assert t.limits["registers_per_thread"] == 255 and t.limits["warp_size"] == 32
    assert t.limits["shared_memory_per_block"] < t.limits["shared_memory_per_sm"]
    ids = [c.id for c in t.taxonomy]
    assert len(ids) == len(set(ids)) and len(ids) >= 10
    assert all(c.technique.strip() for c in t.taxonomy)


def test_h200_figures_measured_on_the_lent_device():
    t = load("h200")
    assert t.peaks["memory_bandwidth"].value == 4.202e12  # benchmarks/ceilings.py, 2026-12-02
    assert t.peaks["memory_bandwidth"].source == "measured"
    assert t.peaks["flops_bfloat16"].value == 746e12
    assert t.peaks["flops_bfloat16"].source == "measured"
    assert {p.source for k, p in t.peaks.items()
            if k not in ("memory_bandwidth", "flops_bfloat16")} == {"datasheet"}


def test_h200_is_h100_with_other_memory():
    h100, h200 = load("h100").model_dump(), load("h200").model_dump()
    for key in ("name", "description", "peaks", "hardware"):
        h100.pop(key), h200.pop(key)
    assert h100 == h200
    assert load("h100").peaks["flops_float8"] == load("h200").peaks["flops_float8"]


def test_matmul_taxonomy_follows_the_tensor_core_generation():
    assert any("mma.sync" in c.technique for c in load("a100").taxonomy)
    assert any("wgmma" in c.technique for c in load("h100").taxonomy)
    assert any("tcgen05.mma" in c.technique for c in load("b200").taxonomy)


def test_abstract_base_is_not_a_column():
    with pytest.raises(InputError):
        load("_nvidia")


# One minimal kernel per feature; a column lists the feature exactly when NVRTC accepts it for
# the column's arch.
FEATURE_PROBES = {
    "cp.async": r"""
#include <cuda_pipeline.h>
extern "C" __global__ void k(float4* p) {
  __shared__ float4 s[128];
  __pipeline_memcpy_async(&s[threadIdx.x], &p[threadIdx.x], 16);
  __pipeline_commit(); __pipeline_wait_prior(0);
  p[threadIdx.x] = s[127 - threadIdx.x];
}""",
    "cp.async.bulk": r"""
extern "C" __global__ void k(float* p) {
  __shared__ alignas(128) float s[256];
  __shared__ alignas(8) unsigned long long bar;
  unsigned sb = (unsigned)__cvta_generic_to_shared(s), bb = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bb));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1024;" :: "r"(bb));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                 :: "r"(sb), "l"(p), "r"(bb) : "memory");
  }
  __syncthreads();
  asm volatile("{.reg .pred P; W: mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0; @!P bra W;}" :: "r"(bb));
  p[threadIdx.x] = s[threadIdx.x] * 2.f;
}""",
    "mma.sync.bf16": r"""
extern "C" __global__ void k(float* o, const unsigned* a) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  o[threadIdx.x] = d0 + d1 + d2 + d3;
}""",
    "mma.sync.fp8": r"""
extern "C" __global__ void k(float* o, const unsigned* a) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[4]), "r"(a[5]));
  o[threadIdx.x] = d0 + d1 + d2 + d3;
}""",
    "fp8.e4m3": r"""
extern "C" __global__ void k(unsigned short* o, const float* x) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(x[0]), "f"(x[1]));
  o[threadIdx.x] = r;
}""",
    "fp4": r"""
extern "C" __global__ void k(unsigned char* o, const float* x) {
  unsigned short r;
  asm("{.reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %1, %2; cvt.u16.u8 %0, t;}" : "=h"(r) : "f"(x[0]), "f"(x[1]));
  o[threadIdx.x] = (unsigned char)r;
}""",
    "wgmma": r"""
extern "C" __global__ void k(float* out, unsigned long long da, unsigned long long db) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{.reg .pred p; setp.ne.b32 p, %6, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;}"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}""",
    "tcgen05": r"""
extern "C" __global__ void k(unsigned* out) {
  __shared__ unsigned tmem;
  unsigned slot = (unsigned)__cvta_generic_to_shared(&tmem);
  if (threadIdx.x < 32) asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(slot));
  __syncthreads();
  out[threadIdx.x] = tmem;
  if (threadIdx.x < 32) asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(tmem));
}""",
    "setmaxnreg": r"""
extern "C" __global__ void k(float* p) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  p[threadIdx.x] = 1.f;
}""",
    "clusters": r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(float* p) { p[threadIdx.x] = 1.f; }""",
    "redux.sync.f32": r"""
extern "C" __global__ void k(float* p) {
  float r;
  asm volatile("redux.sync.max.f32 %0, %1, 0xffffffff;" : "=f"(r) : "f"(p[threadIdx.x]));
  p[threadIdx.x] = r;
}""",
}


@pytest.fixture(scope="module")
def probe_results():
    """(arch, feature) -> compiled ok, one compile per distinct arch."""
    toolchain = Toolchain(disassemble=False)
    results = {}
    for name in ("a100", "h100", "b200"):
        t = load(name)
        for feature, source in FEATURE_PROBES.items():
            results[t.arch, feature] = toolchain.compile(source, t)
    return results


@pytest.mark.parametrize("name", sorted(NVIDIA))
@pytest.mark.parametrize("feature", sorted(FEATURE_PROBES))
def test_feature_listed_exactly_when_it_compiles(probe_results, name, feature):
    t = load(name)
    result = probe_results[t.arch, feature]
    listed = feature in t.features
    assert result.ok == listed, (
        f"{name} {'lists' if listed else 'omits'} {feature}, but NVRTC "
        f"{'rejects' if listed else 'accepts'} it for {t.arch}:\n{result.log}")
