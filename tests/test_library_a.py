"""Library A (softmax, rmsnorm, layernorm, swiglu): specs, oracles (checked against torch's own
functions, and their tolerances against honest and lossy float32 implementations), recipes bound
for every case, the h200 CUDA sources compiled for sm_90a and run on the CPU under an emulation of
the CUDA execution model, and the CPU implementations run through ctypes against the oracle.
The same CUDA sources run on the GPU in tests marked gpu."""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from regen.oracle import check_oracle, load_oracle
from regen.recipe import bind, parse_recipe, workspace_shapes
from regen.spec import Case, load_spec
from regen.target import load_target

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ["softmax", "rmsnorm", "layernorm", "swiglu"]
SEEDS = (0, 1)
# the benchmark shapes, floors (bytes that must move / 4.27 TB/s) and goals on the H200
BENCH = {
    "softmax": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 0.85),
    "rmsnorm": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 0.90),
    "layernorm": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 0.85),
    "swiglu": ({"M": 32768, "N": 4096}, "bfloat16", 188.4e-6, 0.95),
}
# row lengths at and around every dispatch boundary of the h200 recipes (warp / block sizes,
# register / split paths, 16-byte alignment, partial last chunks)
ROW_EDGES = [1, 2, 8, 255, 256, 257, 1024, 1025, 2048, 2047, 4096, 4097, 8192, 8200, 16384,
             16385, 32768, 32769, 36864, 36872]
SWIGLU_EDGES = [1, 2, 4, 8, 12, 4095, 4096, 4097, 2048, 2049, 8192, 8200]
DTYPES = ["bfloat16", "float16", "float32"]


def _spec(kernel):
    return load_spec(ROOT / "specs" / f"{kernel}.yaml")


def _oracle(kernel):
    return load_oracle(ROOT / "oracles" / f"{kernel}.py")


def _handoff(kernel, target) -> Path:
    """handoffs/<kernel>@<target>, or for h200 the folder in $REGEN_TRY_<KERNEL>: a variant under
    development runs through the same emulation tests before it is accepted."""
    override = os.environ.get(f"REGEN_TRY_{kernel.upper()}") if target == "h200" else None
    return Path(override) if override else ROOT / "handoffs" / f"{kernel}@{target}"


def _recipe(kernel, target):
    path = _handoff(kernel, target) / "launch.yaml"
    return parse_recipe(path.read_text(), str(path))


def oracle_case(spec, case, device="cpu"):
    """The case object an oracle receives (the shape regen's worker builds)."""
    import torch
    env = spec.case_env(case)
    params = {p.name: env[p.name] for p in spec.signature.params}
    return types.SimpleNamespace(sizes=dict(case.sizes), dtype=getattr(torch, env["T"]),
                                 params=params, dist=case.dist, device=device,
                                 name=case.label(spec.signature.dtypes[0]))


def excess(out, ref, tol) -> float:
    """max |out - ref| / (atol + rtol |ref|) over finite references (float64): > 1 fails allclose.
    A non-finite mismatch (NaN or inf where the reference has none) counts as infinite."""
    import torch
    o, r = out.to(torch.float64), ref.to(torch.float64)
    fin = torch.isfinite(r)
    if not torch.equal(torch.isfinite(o) | ~fin, torch.ones_like(fin)):
        return float("inf")
    if (~fin).any() and not torch.equal(o[~fin], r[~fin]):
        return float("inf")
    ratio = ((o - r).abs() / (tol.atol + tol.rtol * r.abs()))[fin]
    return ratio.max().item() if ratio.numel() else 0.0


def assert_matches(outputs, ref, tol, what=""):
    import torch
    for name, out in outputs.items():
        e = excess(out, ref[name], tol)
        if e > 1:
            o, r = out.to(torch.float64), ref[name].to(torch.float64)
            bad = ~((o - r).abs() <= tol.atol + tol.rtol * r.abs())
            i = tuple(bad.nonzero()[0].tolist())
            pytest.fail(f"{what}{name}: {int(bad.sum())} of {o.numel()} elements out of tolerance "
                        f"(worst {e:.3g}x); at {i} got {o[i].item()!r}, want {r[i].item()!r}")


def edge_cases(kernel) -> list[Case]:
    """Dispatch-boundary shapes beyond the spec's cases, dtypes rotating over the signature."""
    edges = SWIGLU_EDGES if kernel == "swiglu" else ROW_EDGES
    return [Case.model_validate({"M": 3 if n > 8 else 5, "N": n, "dtype": DTYPES[i % 3]})
            for i, n in enumerate(edges)]


# -- specs and oracles -----------------------------------------------------------------------

@pytest.mark.parametrize("kernel", KERNELS)
def test_spec_loads_with_goals_and_oracle_is_well_formed(kernel):
    spec = _spec(kernel)
    check_oracle(ROOT / "oracles" / f"{kernel}.py")
    shape, dtype, floor, goal = BENCH[kernel]
    bench = [c for c in spec.bench_cases() if c.sizes == shape and c.dtype == dtype]
    assert len(bench) == 1, f"the issue's bench case {shape} {dtype} is missing"
    assert spec.case_bytes(bench[0]) / 4.27e12 == pytest.approx(floor, rel=2e-3)
    assert spec.profile.floor_fraction == {"h200": goal}
    # swiglu: torch.compile already runs at the HBM limit there; parity within 2 % (see the spec)
    assert spec.profile.speedup == {"torch_compile": 0.98 if kernel == "swiglu" else 1.0}
    assert spec.profile.max_spills.get("nvidia") == 0
    dtypes = {c.dtype or spec.signature.dtypes[0] for c in spec.correctness_cases()}
    assert dtypes == set(DTYPES) == set(spec.signature.dtypes)
    sizes = [c.sizes for c in spec.correctness_cases()]
    assert {"M": 1, "N": 1} in sizes, "the tiny case"
    assert any(s["N"] % 8 for s in sizes), "a row length that is not a multiple of the vector width"
    assert any(s["N"] > 60000 for s in sizes), "a row too long to keep on chip"
    assert {inv.name for inv in spec.invariants}, "every spec states invariants its oracle checks"


@pytest.mark.parametrize("kernel", KERNELS)
def test_make_inputs_follow_the_signature_and_the_seed(kernel):
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    for case in spec.correctness_cases():
        if case.sizes["M"] * case.sizes["N"] > 300_000:
            continue
        view = oracle_case(spec, case)
        a, b, c = (oracle.make_inputs(view, s) for s in (0, 0, 1))
        for t in spec.signature.inputs:
            assert a[t.name].dtype == getattr(torch, spec.tensor_dtype(t, case))
            assert list(a[t.name].shape) == spec.tensor_shape(t, case)
            assert a[t.name].is_contiguous()
            assert torch.equal(a[t.name], b[t.name])
        if case.dist != "constant" and case.sizes["N"] > 1:
            assert any(not torch.equal(a[k], c[k]) for k in a), "inputs do not depend on the seed"


def torch_reference(kernel, inputs, view, dtype):
    """torch's own implementation of the kernel, in `dtype` arithmetic."""
    import torch
    import torch.nn.functional as F
    x = inputs["x"].to(dtype)
    if kernel == "softmax":
        return {"y": torch.softmax(x, -1)}
    n = x.shape[-1]
    if kernel == "rmsnorm":
        return {"y": F.rms_norm(x, (n,), inputs["weight"].to(dtype), view.params["eps"])}
    if kernel == "layernorm":
        return {"y": F.layer_norm(x, (n,), inputs["weight"].to(dtype), inputs["bias"].to(dtype),
                                  view.params["eps"])}
    return {"y": F.silu(x[:, : n // 2]) * x[:, n // 2:]}


@pytest.mark.parametrize("kernel", KERNELS)
def test_oracle_reference_agrees_with_torch(kernel):
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    for case in spec.correctness_cases():
        if case.sizes["M"] * case.sizes["N"] > 300_000:
            continue
        view = oracle_case(spec, case)
        inputs = oracle.make_inputs(view, 0)
        ref = oracle.reference(inputs, view)["y"]
        want = torch_reference(kernel, inputs, view, torch.float64)["y"]
        assert ref.dtype == torch.float64
        torch.testing.assert_close(ref, want, rtol=1e-10, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"{case.label('')}: {m}")
        assert oracle.check(inputs, {"y": ref}, view) == [], case.label("")


# Lossy implementations the tolerances must reject: the precision losses a generated kernel can
# hide (statistics or accumulation in the storage dtype, eps outside the square root, the naive
# one-pass variance, computing in bf16 when float32 is declared).
def _tree_sum_in(t, dtype):
    """Pairwise sum over the last dimension with every partial rounded to `dtype`."""
    import torch
    t = t.to(dtype)
    while t.shape[-1] > 1:
        if t.shape[-1] % 2:
            t = torch.cat([t, torch.zeros_like(t[..., :1])], -1)
        t = (t[..., 0::2].float() + t[..., 1::2].float()).to(dtype)
    return t.float()


def _narrow(view):
    import torch
    return torch.bfloat16 if view.dtype == torch.float32 else view.dtype


def lossy(kernel, name, inputs, view):
    import torch
    import torch.nn.functional as F
    xf = inputs["x"].float()
    n = xf.shape[-1]
    eps = view.params.get("eps")
    if name == "sum_in_storage_dtype" and kernel == "softmax":
        e = torch.exp(xf - xf.max(-1, keepdim=True).values)
        return e / _tree_sum_in(e, _narrow(view))
    if name == "exp_in_storage_dtype":
        d = (xf - xf.max(-1, keepdim=True).values).to(_narrow(view))
        e = torch.exp(d).float()
        return e / e.sum(-1, keepdim=True)
    if name == "sum_in_storage_dtype" and kernel == "rmsnorm":
        ms = _tree_sum_in(xf * xf, _narrow(view)) / n
        return xf * torch.rsqrt(ms + eps) * inputs["weight"].float()
    if name == "eps_outside_sqrt":
        rms = torch.sqrt((xf * xf).mean(-1, keepdim=True))
        return xf / (rms + eps) * inputs["weight"].float()
    if name == "one_pass_variance":
        mean = xf.mean(-1, keepdim=True)
        var = ((xf * xf).mean(-1, keepdim=True) - mean * mean).clamp_min(0)
        return (xf - mean) * torch.rsqrt(var + eps) * inputs["weight"].float() + inputs["bias"].float()
    if name == "stats_in_storage_dtype":
        mean = xf.mean(-1, keepdim=True).to(_narrow(view)).float()
        r = torch.rsqrt(((xf - mean) ** 2).mean(-1, keepdim=True) + eps).to(_narrow(view)).float()
        return (xf - mean) * r * inputs["weight"].float() + inputs["bias"].float()
    if name == "math_in_bfloat16":
        x = inputs["x"].to(_narrow(view))
        return (F.silu(x[:, : n // 2].float()).to(x.dtype) * x[:, n // 2:]).float()
    raise KeyError(name)


LOSSY = {"softmax": ["sum_in_storage_dtype", "exp_in_storage_dtype"],
         "rmsnorm": ["sum_in_storage_dtype", "eps_outside_sqrt"],
         "layernorm": ["one_pass_variance", "stats_in_storage_dtype"],
         "swiglu": ["math_in_bfloat16"]}


@pytest.mark.parametrize("kernel", KERNELS)
def test_tolerances_admit_float32_math_and_reject_precision_loss(kernel):
    """torch's float32 implementation, rounded once to the output dtype, stays within 60% of the
    tolerance on every case (honest error is at most ~half the tolerance: see the spec); every
    lossy implementation is out of tolerance somewhere."""
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    honest_worst = {}
    caught = {name: [] for name in LOSSY[kernel]}
    for case in spec.correctness_cases():
        if case.sizes["M"] * case.sizes["N"] > 300_000:
            continue
        view = oracle_case(spec, case)
        tol = spec.tolerance[spec.case_env(case)["T"]]
        inputs = oracle.make_inputs(view, 0)
        ref = oracle.reference(inputs, view)["y"]
        honest = torch_reference(kernel, inputs, view, torch.float32)["y"].to(view.dtype)
        e = excess(honest, ref, tol)
        if e > honest_worst.get(view.dtype, (0.0, ""))[0]:
            honest_worst[view.dtype] = (e, case.label(""))
        for name in LOSSY[kernel]:
            caught[name].append(excess(lossy(kernel, name, inputs, view).to(view.dtype), ref, tol))
    for dtype, (e, label) in honest_worst.items():
        assert e <= 0.6, f"{dtype}: torch's float32 math uses {e:.2f} of the tolerance on {label}"
    for name, excesses in caught.items():
        assert max(excesses) > 1, f"{name} passes every case (worst {max(excesses):.2f}x tolerance)"


@pytest.mark.parametrize("kernel", KERNELS)
def test_check_names_the_violated_invariant(kernel):
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    names = {inv.name for inv in spec.invariants}
    case = next(c for c in spec.correctness_cases() if c.sizes["N"] >= 1000 and c.dist == "normal")
    view = oracle_case(spec, case)
    inputs = oracle.make_inputs(view, 0)
    y = oracle.reference(inputs, view)["y"].to(view.dtype)
    assert oracle.check(inputs, {"y": y}, view) == []
    for broken in (y * 1.25, -y, torch.full_like(y, float("nan"))):
        problems = oracle.check(inputs, {"y": broken}, view)
        assert problems, "a wrong output passes every invariant"
        assert all(p.split(":")[0] in names for p in problems), problems


# -- launch recipes ----------------------------------------------------------------------------

def _bound(kernel, target, case):
    spec = _spec(kernel)
    recipe = _recipe(kernel, target)
    env = spec.case_env(case)
    buffers = {t.name for t in spec.signature.tensors} | set(workspace_shapes(recipe, env))
    return bind(recipe, env, buffers, env["T"]), recipe, env


@pytest.mark.parametrize("target", ["h200", "cpu"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_recipe_binds_every_case_to_one_variant(kernel, target):
    spec = _spec(kernel)
    for case in [*spec.cases, *edge_cases(kernel)]:
        launches, recipe, env = _bound(kernel, target, case)
        label = case.label(spec.signature.dtypes[0])
        names = [launch.kernel for launch in launches]
        assert len(names) == 1 or (len(names) == 2 and "_split_stats_" in names[0]
                                   and names[1] == names[0].replace("_stats_", "_apply_")), \
            f"{label}: overlapping `when` guards select {names}"
        for name, (_, shape, _) in workspace_shapes(recipe, env).items():
            assert all(d >= 1 for d in shape), f"{label}: workspace {name} {shape}"
        for launch in launches:
            assert launch.kernel.endswith("_" + {"bfloat16": "bf16", "float16": "f16",
                                                 "float32": "f32"}[env["T"]])
            if target == "cpu":
                continue
            threads = launch.block[0] * launch.block[1] * launch.block[2]
            assert threads % 32 == 0 and 32 <= threads <= 1024, f"{label}: block {launch.block}"
            assert 1 <= launch.grid[0] < 2**31 and launch.grid[1:] == (1, 1), f"{label}: {launch.grid}"
            vec = env["N"] * {"bfloat16": 2, "float16": 2, "float32": 4}[env["T"]] % 16 == 0
            assert ("_vec_" in launch.kernel) == vec, f"{label}: {launch.kernel}"


# -- CUDA: compile for sm_90a ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def nvrtc():
    from regen.toolchains.nvrtc import Toolchain
    toolchain = Toolchain(disassemble=False)
    problem = toolchain.problem()
    if problem:
        pytest.skip(problem)
    return toolchain, load_target(ROOT / "targets" / "h200.yaml")


@pytest.fixture(scope="module")
def cubins(nvrtc):
    toolchain, target = nvrtc
    return {k: toolchain.compile((ROOT / "handoffs" / f"{k}@h200" / "kernel.cu").read_text(), target)
            for k in KERNELS}


@pytest.mark.parametrize("kernel", KERNELS)
def test_cuda_source_compiles_without_spills_and_launches_fit(cubins, kernel):
    result = cubins[kernel]
    assert result.ok, result.log
    assert "warning" not in result.log.lower(), result.log
    for name, res in result.resources.items():
        assert res["spill_bytes"] == 0 and res["stack_bytes"] == 0, f"{name}: {res}"
    spec = _spec(kernel)
    for case in [*spec.cases, *edge_cases(kernel)]:
        for dtype in DTYPES:  # every dtype's entry points exist, not only the listed case's
            launches, _, _ = _bound(kernel, "h200", case.model_copy(update={"dtype": dtype}))
            for launch in launches:
                res = result.resources.get(launch.kernel)
                assert res is not None, f"{launch.kernel} is not in the cubin"
                threads = launch.block[0] * launch.block[1] * launch.block[2]
                assert res["registers"] * threads <= 65536, f"{launch.kernel}: {res['registers']} " \
                    f"registers x {threads} threads do not fit one SM"
                assert res["shared_bytes"] + launch.shared_mem <= 48 * 1024


# -- CUDA: run on the CPU under an emulation of the execution model --------------------------------
# Every CUDA thread is a ucontext fiber; __syncthreads and warp shuffles are real barriers (a
# deadlock aborts); 16-byte loads assert alignment; every buffer ends at a PROT_NONE page, so an
# access past its end faults. Fast intrinsics are modelled by their float32 library versions.

EMU_HEADER = r'''
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ucontext.h>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __shared__ static
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct __nv_bfloat16 { uint16_t b; };
struct __half { uint16_t b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __half2 { __half x, y; };
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned(h.b) << 16); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float __half2float(__half hh) {
  uint16_t h = hh.b;
  unsigned sign = unsigned(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { float v = float(mant) * 5.9604644775390625e-8f; return sign ? -v : v; }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
inline __half __float2half_rn(float f) {
  unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u >= 0x47800000u) return {uint16_t(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (u < 0x38800000u) {
    float t = __uint_as_float(u) + 0.5f;
    return {uint16_t(sign | (__float_as_uint(t) - 0x3f000000u))};
  }
  u += 0xc8000fffu + ((u >> 13) & 1u);
  return {uint16_t(sign | (u >> 13))};
}
inline __half __ushort_as_half(unsigned short s) { return {s}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
inline float __expf(float x) { return exp2f(x * 1.4426950408889634f); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
template <class T> inline T __ldg(const T* p) {
  if (sizeof(T) == 16 && (reinterpret_cast<uintptr_t>(p) & 15)) {
    fprintf(stderr, "emu: misaligned 16-byte load at %p\n", (const void*)p);
    abort();
  }
  return *p;
}
// cache-hinted loads and stores (streaming, L2-only, last-use...) move the same bits
template <class T> inline T __ldcs(const T* p) { return __ldg(p); }
template <class T> inline T __ldcg(const T* p) { return __ldg(p); }
template <class T> inline T __ldlu(const T* p) { return __ldg(p); }
template <class T> inline T __ldcv(const T* p) { return __ldg(p); }
template <class T> inline void __stcs(T* p, T v) {
  if (sizeof(T) == 16 && (reinterpret_cast<uintptr_t>(p) & 15)) {
    fprintf(stderr, "emu: misaligned 16-byte store at %p\n", (const void*)p);
    abort();
  }
  *p = v;
}
template <class T> inline void __stcg(T* p, T v) { __stcs(p, v); }
template <class T> inline void __stwt(T* p, T v) { __stcs(p, v); }
template <class T> inline void __stwb(T* p, T v) { __stcs(p, v); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.b; }
inline unsigned short __half_as_ushort(__half h) { return h.b; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { return {s}; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
struct EmuFiber { ucontext_t ctx; dim3 tid; bool done = false; std::vector<char> stack; };
struct Emu {
  dim3 grid, block, bidx;
  std::vector<EmuFiber> f;
  ucontext_t sched;
  int cur = -1;
  unsigned live = 0, arrived = 0;
  unsigned long gen = 0, events = 0;
  std::vector<unsigned> wlive, warrived;
  std::vector<unsigned long> wgen;
  std::vector<uint64_t> slot;
  void* fn; int64_t ints[10]; float flts[4];
};
extern Emu* g_emu;
#define threadIdx (g_emu->f[g_emu->cur].tid)
#define blockIdx (g_emu->bidx)
#define blockDim (g_emu->block)
#define gridDim (g_emu->grid)
inline void emu_yield() { swapcontext(&g_emu->f[g_emu->cur].ctx, &g_emu->sched); }
inline unsigned emu_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void __syncthreads() {
  Emu* e = g_emu;
  unsigned long g = e->gen;
  ++e->events;
  if (++e->arrived == e->live) { e->arrived = 0; ++e->gen; return; }
  while (e->gen == g) emu_yield();
}
inline void emu_warp_barrier() {
  Emu* e = g_emu;
  unsigned w = emu_lin() / 32;
  unsigned long g = e->wgen[w];
  ++e->events;
  if (++e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; return; }
  while (e->wgen[w] == g) emu_yield();
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o) {
  Emu* e = g_emu;
  unsigned me = emu_lin();
  if (mask != 0xffffffffu || e->wlive[me / 32] != 32) {
    fprintf(stderr, "emu: shuffle without the full warp\n");
    abort();
  }
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  e->slot[me] = bits;
  emu_warp_barrier();
  uint64_t other = e->slot[(me & ~31u) | ((me & 31u) ^ unsigned(o))];
  emu_warp_barrier();
  T r;
  memcpy(&r, &other, sizeof(T));
  return r;
}
'''

EMU_LAUNCHER = r'''
Emu* g_emu = nullptr;
typedef void (*UniversalFn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, float, float, float, float);
static void emu_entry() {
  Emu* e = g_emu;
  // x86-64 SysV: integer-class arguments go to rdi.. then the stack in order, floats to xmm0.. in
  // order, so one universal signature calls any (pointers and integers..., floats...) kernel.
  reinterpret_cast<UniversalFn>(e->fn)(e->ints[0], e->ints[1], e->ints[2], e->ints[3], e->ints[4],
                                       e->ints[5], e->ints[6], e->ints[7], e->ints[8], e->ints[9],
                                       e->flts[0], e->flts[1], e->flts[2], e->flts[3]);
  e->f[e->cur].done = true;
  ++e->events;
  unsigned w = emu_lin() / 32;
  --e->live;
  if (e->live && e->arrived == e->live) { e->arrived = 0; ++e->gen; }
  --e->wlive[w];
  if (e->wlive[w] && e->warrived[w] == e->wlive[w]) { e->warrived[w] = 0; ++e->wgen[w]; }
}
extern "C" int emu_launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, int nint, const int64_t* ints, int nflt, const float* flts) {
  Emu e;
  g_emu = &e;
  e.fn = fn;
  for (int i = 0; i < 10; ++i) e.ints[i] = i < nint ? ints[i] : 0;
  for (int i = 0; i < 4; ++i) e.flts[i] = i < nflt ? flts[i] : 0.0f;
  e.grid = dim3{gx, gy, gz};
  e.block = dim3{bx, by, bz};
  const unsigned nt = bx * by * bz, nw = (nt + 31) / 32;
  e.f.resize(nt);
  for (auto& fb : e.f) fb.stack.resize(64 * 1024);
  e.slot.assign(nt, 0);
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        e.bidx = dim3{x, y, z};
        e.live = nt;
        e.arrived = 0;
        e.wlive.assign(nw, 0);
        e.warrived.assign(nw, 0);
        e.wgen.assign(nw, 0);
        for (unsigned t = 0; t < nt; ++t) ++e.wlive[t / 32];
        for (unsigned t = 0; t < nt; ++t) {
          EmuFiber& fb = e.f[t];
          fb.done = false;
          fb.tid = dim3{t % bx, (t / bx) % by, t / (bx * by)};
          getcontext(&fb.ctx);
          fb.ctx.uc_stack.ss_sp = fb.stack.data();
          fb.ctx.uc_stack.ss_size = fb.stack.size();
          fb.ctx.uc_link = &e.sched;
          makecontext(&fb.ctx, emu_entry, 0);
        }
        unsigned remaining = nt;
        while (remaining) {
          const unsigned long before = e.events;
          for (unsigned t = 0; t < nt; ++t) {
            if (e.f[t].done) continue;
            e.cur = int(t);
            swapcontext(&e.sched, &e.f[t].ctx);
            if (e.f[t].done) --remaining;
          }
          if (remaining && e.events == before) {
            fprintf(stderr, "emu: deadlock in block %u: threads wait at different barriers\n", x);
            abort();
          }
        }
      }
  g_emu = nullptr;
  return 0;
}
'''


class GuardedBuffer:
    """A tensor whose storage ends exactly at a PROT_NONE page: an access past its end faults."""

    def __init__(self, shape, dtype):
        import torch
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        numel = 1
        for d in shape:
            numel *= d
        nbytes = max(numel * torch.empty(0, dtype=dtype).element_size(), 1)
        page = mmap.PAGESIZE
        body = -(-nbytes // page) * page
        self._map = mmap.mmap(-1, body + 2 * page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        assert libc.mprotect(base, page, 0) == 0 and libc.mprotect(base + page + body, page, 0) == 0
        raw = (ctypes.c_char * nbytes).from_address(base + page + body - nbytes)
        self.tensor = torch.frombuffer(raw, dtype=torch.uint8)[: numel * torch.empty(0, dtype=dtype)
                                                               .element_size()].view(dtype).reshape(shape)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """kernel -> its h200 kernel.cu built with g++ against the emulation (built on first use)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not shutil.which("g++"):
        pytest.skip("the CUDA emulation needs Linux on x86-64 and g++")

    class Built(dict):
        def __missing__(self, kernel):
            src = (_handoff(kernel, "h200") / "kernel.cu").read_text()
            body = "\n".join("" if line.strip().startswith("#include <cuda") else line
                             for line in src.splitlines())
            unit = tmp_path_factory.mktemp(kernel) / "emu.cpp"
            unit.write_text(EMU_HEADER + '\n#line 1 "kernel.cu"\n' + body + "\n" + EMU_LAUNCHER)
            so = unit.with_suffix(".so")
            proc = subprocess.run(["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-w", str(unit),
                                   "-o", str(so)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-4000:]
            self[kernel] = ctypes.CDLL(str(so))
            return self[kernel]

    return Built()


def run_emulated(lib, kernel, case, inputs):
    """The recipe's launches on guarded, NaN-poisoned buffers; returns outputs and kernels run."""
    import torch
    spec = _spec(kernel)
    launches, recipe, env = _bound(kernel, "h200", case)
    keep, bufs = [], {}

    def buffer(name, shape, dtype, fill):
        g = GuardedBuffer(shape, dtype)
        keep.append(g)
        bufs[name] = g.tensor
        return g.tensor.copy_(fill) if isinstance(fill, torch.Tensor) else g.tensor.fill_(fill)

    for name, x in inputs.items():
        buffer(name, list(x.shape), x.dtype, x)
    for t in spec.signature.outputs:
        buffer(t.name, spec.tensor_shape(t, case), getattr(torch, spec.tensor_dtype(t, case)), float("nan"))
    for name, (dtype, shape, zero) in workspace_shapes(recipe, env).items():
        buffer(name, shape, getattr(torch, dtype), 0.0 if zero else float("nan"))
    for launch in launches:
        ints = [bufs[a.value].data_ptr() if a.kind == "tensor" else int(a.value)
                for a in launch.args if a.kind in ("tensor", "int32", "int64")]
        flts = [float(a.value) for a in launch.args if a.kind == "float32"]
        assert len(ints) <= 10 and len(flts) <= 4 and len(ints) + len(flts) == len(launch.args)
        fn = ctypes.cast(getattr(lib, launch.kernel), ctypes.c_void_p).value
        lib.emu_launch(ctypes.c_void_p(fn), *[ctypes.c_uint(v) for v in (*launch.grid, *launch.block)],
                       len(ints), (ctypes.c_int64 * 10)(*ints), len(flts), (ctypes.c_float * 4)(*flts))
    outputs = {t.name: bufs[t.name].clone() for t in spec.signature.outputs}
    changed = [k for k, x in inputs.items() if not torch.equal(bufs[k], x)]
    return outputs, changed, [launch.kernel for launch in launches]


EMULATED = KERNELS + ["rope"]  # Library B's rope runs here too: plain loads, no atomics


def _emulation_params():
    out = []
    for kernel in EMULATED:
        spec = _spec(kernel)
        for i, case in enumerate(spec.correctness_cases()):
            out.append(pytest.param(kernel, "spec", i, id=f"{kernel}-{case.label(spec.signature.dtypes[0])}"))
        for i, case in enumerate(edge_cases(kernel) if kernel in KERNELS else []):
            out.append(pytest.param(kernel, "edge", i, id=f"{kernel}-edge-{case.label('')}",
                                    marks=pytest.mark.slow))
    return out


@pytest.mark.parametrize("kernel,kind,index", _emulation_params())
def test_cuda_handoff_matches_oracle_under_emulation(emulated, kernel, kind, index):
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = (spec.correctness_cases() if kind == "spec" else edge_cases(kernel))[index]
    view = oracle_case(spec, case)
    inputs = oracle.make_inputs(view, 0)
    pristine = {k: v.clone() for k, v in inputs.items()}
    outputs, changed, ran = run_emulated(emulated[kernel], kernel, case, inputs)
    assert not changed, f"inputs modified: {changed}"
    ref = oracle.reference(pristine, view)
    assert_matches(outputs, ref, spec.tolerance[spec.case_env(case)["T"]], f"{ran}: ")
    assert oracle.check(pristine, outputs, view) == []


def test_emulation_catches_an_out_of_bounds_kernel(tmp_path):
    """The emulation is a real check: a kernel that reads one element past its row faults."""
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not shutil.which("g++"):
        pytest.skip("the CUDA emulation needs Linux on x86-64 and g++")
    bad = (ROOT / "handoffs" / "swiglu@h200" / "kernel.cu").read_text().replace(
        "N - start));\n  const T* a", "N - start + 1));\n  const T* a")
    assert "N - start + 1" in bad
    body = "\n".join("" if line.strip().startswith("#include <cuda") else line for line in bad.splitlines())
    unit = tmp_path / "emu.cpp"
    unit.write_text(EMU_HEADER + body + EMU_LAUNCHER)
    so = tmp_path / "emu.so"
    subprocess.run(["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-w", str(unit), "-o", str(so)],
                   check=True)
    script = (f"import ctypes, sys, torch; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
              f"import test_library_a as t; from regen.spec import Case; "
              f"c = Case.model_validate({{'M': 2, 'N': 7, 'dtype': 'float32'}}); "
              f"t.run_emulated(ctypes.CDLL({str(so)!r}), 'swiglu', c, "
              f"{{'x': torch.randn(2, 14)}}); print('no fault')")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "no fault" not in proc.stdout, proc.stdout + proc.stderr


# -- CPU implementations, run through ctypes against the oracle ----------------------------------

@pytest.fixture(scope="module")
def cpu_libs(tmp_path_factory):
    """Compile each handoffs/<kernel>@cpu/kernel.cpp once with the cpu target's flags."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    flags = load_target(ROOT / "targets" / "cpu.yaml").toolchain.flags
    out = {}
    for kernel in KERNELS:
        so = tmp_path_factory.mktemp(kernel) / f"{kernel}.so"
        src = ROOT / "handoffs" / f"{kernel}@cpu" / "kernel.cpp"
        proc = subprocess.run(["g++", *flags, "-Wall", "-Werror", str(src), "-o", str(so)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        out[kernel] = ctypes.CDLL(str(so))
    return out


def run_cpu(lib, kernel, case, inputs):
    """NaN-poisoned outputs, the recipe's launches called the way the cpp runtime calls them."""
    import torch
    spec = _spec(kernel)
    launches, recipe, env = _bound(kernel, "cpu", case)
    bufs = dict(inputs)
    for t in spec.signature.outputs:
        bufs[t.name] = torch.full(spec.tensor_shape(t, case), float("nan"),
                                  dtype=getattr(torch, spec.tensor_dtype(t, case)))
    ctype = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
             "float64": ctypes.c_double}
    for launch in launches:
        args = [ctypes.c_void_p(bufs[a.value].data_ptr()) if a.kind == "tensor"
                else ctype[a.kind](a.value) for a in launch.args]
        getattr(lib, launch.kernel)(*args)
    return {t.name: bufs[t.name] for t in spec.signature.outputs}


def _cpu_params():
    return [pytest.param(kernel, i, id=f"{kernel}-{case.label(_spec(kernel).signature.dtypes[0])}")
            for kernel in KERNELS for i, case in enumerate(_spec(kernel).correctness_cases())]


@pytest.mark.parametrize("kernel,index", _cpu_params())
def test_cpu_handoff_matches_oracle(cpu_libs, kernel, index):
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = spec.correctness_cases()[index]
    view = oracle_case(spec, case)
    for seed in SEEDS:
        inputs = oracle.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        outputs = run_cpu(cpu_libs[kernel], kernel, case, inputs)
        for k, v in inputs.items():
            assert v.equal(pristine[k]), f"input {k} was modified"
        ref = oracle.reference(pristine, view)
        assert_matches(outputs, ref, spec.tolerance[spec.case_env(case)["T"]], f"seed {seed}, ")
        assert oracle.check(pristine, outputs, view) == []


# -- CUDA on the GPU (the device machine) -------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_runtimes(cubins, tmp_path_factory):
    from regen.runtimes.cuda import Runtime
    runtimes = {}
    for kernel, result in cubins.items():
        assert result.ok, result.log
        path = tmp_path_factory.mktemp(kernel) / "kernel.cubin"
        path.write_bytes(result.binary)
        runtimes[kernel] = Runtime(str(path))
    return runtimes


def _gpu_params():
    out = []
    for kernel in KERNELS:
        spec = _spec(kernel)
        cases = [*spec.correctness_cases(), *edge_cases(kernel)]
        out += [pytest.param(kernel, i, id=f"{kernel}-{c.label(spec.signature.dtypes[0])}")
                for i, c in enumerate(cases)]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("kernel,index", _gpu_params())
def test_cuda_handoff_matches_oracle_on_gpu(gpu_runtimes, kernel, index):
    import torch
    spec, oracle = _spec(kernel), _oracle(kernel)
    case = [*spec.correctness_cases(), *edge_cases(kernel)][index]
    view = oracle_case(spec, case, device="cuda")
    launches, recipe, env = _bound(kernel, "h200", case)
    for seed in SEEDS:
        inputs = oracle.make_inputs(view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        bufs = dict(inputs)
        for t in spec.signature.outputs:
            bufs[t.name] = torch.full(spec.tensor_shape(t, case), float("nan"), device="cuda",
                                      dtype=getattr(torch, spec.tensor_dtype(t, case)))
        for name, (dtype, shape, zero) in workspace_shapes(recipe, env).items():
            bufs[name] = torch.full(shape, 0.0 if zero else float("nan"), device="cuda",
                                    dtype=getattr(torch, dtype))
        gpu_runtimes[kernel].launch(launches, bufs)
        gpu_runtimes[kernel].synchronize()
        for k, v in inputs.items():
            assert torch.equal(v, pristine[k]), f"input {k} was modified"
        ref = oracle.reference(pristine, view)
        outputs = {t.name: bufs[t.name].cpu() for t in spec.signature.outputs}
        assert_matches(outputs, {k: v.cpu() for k, v in ref.items()}, spec.tolerance[env["T"]],
                       f"seed {seed}, ")
        assert oracle.check(pristine, {k: bufs[k] for k in outputs}, view) == []
