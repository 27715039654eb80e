"""HIP compile stage for AMD Instinct (gfx942, gfx950): source -> code object (.hsaco), no GPU.

Three compilers can do it; the first usable one is selected and named in the identity, because
each builds a different binary from the same source:
  1. hipcc from a ROCm install (full HIP headers and ROCm device libraries);
  2. hiprtc through hip-python, when a ROCm libhiprtc is actually loadable;
  3. clang >= 20 (Debian's clang-22 + lld-22) with the HIP headers of libamdhip64-dev (ROCm 5.2).
Path 3 is what a CPU-only Debian machine has. It compiles device code only (`--cuda-device-only
--no-gpu-bundle-output`) and without ROCm device libraries (`-nogpulib`: Debian's are ROCm 5.2 and
have nothing for gfx942/gfx950). A small force-included header (COMPAT_HEADER) supplies what
those headers expect from the device libraries: work-item ids, sizes and fences from clang
builtins, plus the math functions that are exact or map to one hardware instruction. Everything
else in ocml (sinf, tanhf, powf, erff, double-precision transcendentals...) fails to link with
"undefined hidden symbol: __ocml_...": the target notes tell the generator what to avoid. Those
headers also predate <hip/hip_bf16.h>; regen supplies it over clang's __bf16 (BF16_COMPAT_HEADER).

`-Rpass-analysis=kernel-resource-usage` remarks give VGPRs, AGPRs, SGPRs, scratch, spills, LDS and
occupancy per kernel; llvm-objdump gives the disassembly the instruction checks read.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import CompileResult

MIN_CLANG_MAJOR = 20
CLANG_CANDIDATES = ("clang-22", "clang-21", "clang-20", "clang")
HIP_PATH_CANDIDATES = ("/usr",)          # where Debian's libamdhip64-dev puts include/hip
SOURCE_NAME = "kernel.hip"
COMPAT_NAME = "regen_hip_compat.h"
INSTALL_HINT = ("apt-get install clang-22 lld-22 libamdhip64-dev (Debian bookworm-security), "
                "or install ROCm (hipcc)")
# Always passed: the resource report is parsed from the remarks they print.
FORCED_FLAGS = ("-Rpass-analysis=kernel-resource-usage",)
# Device code only, one plain code object (no offload bundle), for the target's arch. A fixed
# compilation-unit id keeps the binary reproducible (the default hashes the temporary path).
_DEVICE_ONLY = ("-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", "-cuid=regen")

COMPAT_HEADER = r"""// regen: HIP device code with clang >= 20, the HIP headers of Debian's libamdhip64-dev (ROCm 5.2)
// and no ROCm device libraries (-nogpulib). Defines what those headers take from the device
// libraries, using clang builtins only. Math beyond this (sinf, tanhf, powf, erff, double
// transcendentals, half math) stays undefined and fails to link on purpose.
#pragma once
#ifndef __AMDGCN_WAVEFRONT_SIZE
#define __AMDGCN_WAVEFRONT_SIZE 64
#endif
typedef _Float16 __2f16 __attribute__((ext_vector_type(2)));
extern "C" __attribute__((device)) inline _Float16 __llvm_amdgcn_rcp_f16(_Float16 x) {
  return (_Float16)__builtin_amdgcn_rcph(x);
}
extern "C" __attribute__((device)) inline __2f16 __llvm_amdgcn_rcp_2f16(__2f16 x) {
  return __2f16{__llvm_amdgcn_rcp_f16(x.x), __llvm_amdgcn_rcp_f16(x.y)};
}
#include <hip/hip_runtime.h>
extern "C" {
__device__ size_t __ockl_get_local_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y()
       : d == 2 ? __builtin_amdgcn_workitem_id_z() : 0;
}
__device__ size_t __ockl_get_group_id(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y()
       : d == 2 ? __builtin_amdgcn_workgroup_id_z() : 0;
}
__device__ size_t __ockl_get_local_size(uint d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y()
       : d == 2 ? __builtin_amdgcn_workgroup_size_z() : 1;
}
__device__ size_t __ockl_get_global_size(uint d) {
  return d == 0 ? __builtin_amdgcn_grid_size_x() : d == 1 ? __builtin_amdgcn_grid_size_y()
       : d == 2 ? __builtin_amdgcn_grid_size_z() : 1;
}
__device__ size_t __ockl_get_num_groups(uint d) {
  size_t n = __ockl_get_global_size(d), w = __ockl_get_local_size(d);
  return n / w + (n % w != 0);
}
__device__ size_t __ockl_get_global_id(uint d) {
  return __ockl_get_group_id(d) * __ockl_get_local_size(d) + __ockl_get_local_id(d);
}
__device__ uint __ockl_lane_u32() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
__device__ uint __ockl_activelane_u32() {
  unsigned long long e = __builtin_amdgcn_read_exec();
  return __builtin_amdgcn_mbcnt_hi((uint)(e >> 32), __builtin_amdgcn_mbcnt_lo((uint)e, 0u));
}
__device__ bool __ockl_wfany_i32(int x) { return __builtin_amdgcn_ballot_w64(x != 0) != 0; }
__device__ bool __ockl_wfall_i32(int x) { return __builtin_amdgcn_ballot_w64(x != 0) == __builtin_amdgcn_read_exec(); }
__device__ uint __ockl_mul_hi_u32(uint a, uint b) { return (uint)(((unsigned long long)a * b) >> 32); }
__device__ int __ockl_mul_hi_i32(int a, int b) { return (int)(((long long)a * b) >> 32); }
__device__ uint __ockl_mul24_u32(uint a, uint b) { return (a & 0xffffffu) * (b & 0xffffffu); }
__device__ int __ockl_mul24_i32(int a, int b) { return ((a << 8) >> 8) * ((b << 8) >> 8); }
__device__ uint __ockl_clz_u32(uint x) { return x ? __builtin_clz(x) : 32u; }
__device__ uint64_t __ockl_clz_u64(uint64_t x) { return x ? __builtin_clzll(x) : 64u; }
__device__ void __ockl_atomic_add_noret_f32(float* p, float v) {
  __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
#define __REGEN_FENCE(order) \
  switch (scope) { \
  case __memory_scope_work_item: break; \
  case __memory_scope_sub_group: __builtin_amdgcn_fence(order, "wavefront"); break; \
  case __memory_scope_work_group: __builtin_amdgcn_fence(order, "workgroup"); break; \
  case __memory_scope_device: __builtin_amdgcn_fence(order, "agent"); break; \
  default: __builtin_amdgcn_fence(order, ""); break; }
__device__ void __atomic_work_item_fence(__cl_mem_fence_flags, __memory_order order, __memory_scope scope) {
  switch (order) {
  case __memory_order_relaxed: break;
  case __memory_order_acquire: __REGEN_FENCE(__ATOMIC_ACQUIRE) break;
  case __memory_order_release: __REGEN_FENCE(__ATOMIC_RELEASE) break;
  case __memory_order_acq_rel: __REGEN_FENCE(__ATOMIC_ACQ_REL) break;
  default: __REGEN_FENCE(__ATOMIC_SEQ_CST) break;
  }
}
#undef __REGEN_FENCE
// exact operations and single hardware instructions, as ocml defines them
__device__ float __ocml_rint_f32(float x) { return __builtin_rintf(x); }
__device__ float __ocml_floor_f32(float x) { return __builtin_floorf(x); }
__device__ float __ocml_ceil_f32(float x) { return __builtin_ceilf(x); }
__device__ float __ocml_trunc_f32(float x) { return __builtin_truncf(x); }
__device__ float __ocml_fmin_f32(float x, float y) { return __builtin_fminf(x, y); }
__device__ float __ocml_fmax_f32(float x, float y) { return __builtin_fmaxf(x, y); }
__device__ double __ocml_rint_f64(double x) { return __builtin_rint(x); }
__device__ double __ocml_floor_f64(double x) { return __builtin_floor(x); }
__device__ double __ocml_ceil_f64(double x) { return __builtin_ceil(x); }
__device__ double __ocml_trunc_f64(double x) { return __builtin_trunc(x); }
__device__ double __ocml_fmin_f64(double x, double y) { return __builtin_fmin(x, y); }
__device__ double __ocml_fmax_f64(double x, double y) { return __builtin_fmax(x, y); }
__device__ float __ocml_native_sqrt_f32(float x) { return __builtin_sqrtf(x); }
__device__ float __ocml_rsqrt_f32(float x) { return __builtin_amdgcn_rsqf(x); }
__device__ float __ocml_native_sin_f32(float x) { return __builtin_amdgcn_sinf(x * 0.15915494309189535f); }
__device__ float __ocml_native_cos_f32(float x) { return __builtin_amdgcn_cosf(x * 0.15915494309189535f); }
}
"""


# ROCm >= 5.7 has <hip/hip_bf16.h> (__hip_bfloat16); Debian's ROCm 5.2 headers do not. On the clang
# path regen supplies it (when the HIP headers lack it) over clang's built-in __bf16, with the
# conversion functions kernels use, so the same source compiles with hipcc and with clang.
BF16_COMPAT_HEADER = r"""// regen: <hip/hip_bf16.h> for HIP headers older than ROCm 5.7, over clang's __bf16.
#pragma once
#include <hip/hip_runtime.h>
typedef __bf16 __hip_bfloat16;
typedef __bf16 __hip_bfloat162 __attribute__((ext_vector_type(2)));
__host__ __device__ inline float __bfloat162float(__hip_bfloat16 a) { return (float)a; }
__host__ __device__ inline __hip_bfloat16 __float2bfloat16(float f) { return (__bf16)f; }
__host__ __device__ inline float2 __bfloat1622float2(__hip_bfloat162 a) {
  return make_float2((float)a.x, (float)a.y);
}
__host__ __device__ inline __hip_bfloat162 __float22bfloat162_rn(float2 f) {
  return __hip_bfloat162{(__bf16)f.x, (__bf16)f.y};
}
__host__ __device__ inline __hip_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  return __builtin_bit_cast(__bf16, u);
}
__host__ __device__ inline unsigned short __bfloat16_as_ushort(__hip_bfloat16 b) {
  return __builtin_bit_cast(unsigned short, b);
}
"""


@dataclass(frozen=True)
class Selection:
    """The compiler this machine uses for HIP, with a version string free of local paths."""
    tool: str            # "hipcc" | "hiprtc" | "clang"
    path: str | None     # executable (None for hiprtc, a library)
    version: str
    hip_path: str | None = None  # HIP headers root for the clang path (--hip-path)
    hip_version: str | None = None

    @property
    def needs_bf16_header(self) -> bool:
        return self.tool == "clang" and not (
            Path(self.hip_path) / "include" / "hip" / "hip_bf16.h").is_file()

    def compat_headers(self) -> dict[str, str]:
        """Headers regen writes next to the source on the clang path: name -> text."""
        if self.tool != "clang":
            return {}
        out = {COMPAT_NAME: COMPAT_HEADER}
        if self.needs_bf16_header:
            out["hip/hip_bf16.h"] = BF16_COMPAT_HEADER
        return out


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _version_lines(text: str) -> str:
    """`--version` output without the lines naming local paths (InstalledDir, config files)."""
    keep = [ln.strip() for ln in text.splitlines()
            if ln.strip() and not re.match(r"(InstalledDir|Configuration file|Thread model|"
                                           r"Target|Build config)\b", ln.strip())]
    return " | ".join(keep)


@functools.lru_cache(maxsize=16)
def _clang_version(path: str) -> tuple[int, str] | None:
    done = _run([path, "--version"])
    if done is None or done.returncode != 0:
        return None
    m = re.search(r"clang version (\d+)\.", done.stdout)
    return (int(m.group(1)), _version_lines(done.stdout)) if m else None


@functools.lru_cache(maxsize=16)
def known_archs(compiler: str) -> frozenset[str]:
    """The AMDGPU processors a clang (or hipcc) can compile for."""
    done = _run([compiler, "--target=amdgcn-amd-amdhsa", "--print-supported-cpus"])
    if done is None:
        return frozenset()
    return frozenset(re.findall(r"\bgfx[0-9a-f]+\b", done.stdout + done.stderr))


def _has_lld(clang: str) -> bool:
    done = _run([clang, "-print-prog-name=ld.lld"])
    found = done.stdout.strip() if done and done.returncode == 0 else ""
    return bool(found) and (os.path.isfile(found) or shutil.which(found) is not None)


def _hip_header_version(root: str) -> str | None:
    try:
        text = (Path(root) / "include" / "hip" / "hip_version.h").read_text(errors="replace")
    except OSError:
        return None
    parts = [re.search(rf"#\s*define\s+HIP_VERSION_{p}\s+(\d+)", text) for p in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) or "unknown"


def _rocm_hipcc_candidates() -> list[str]:
    roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"]
    return ["hipcc", *[str(Path(r) / "bin" / "hipcc") for r in roots if r]]


def _resolve(candidate: str) -> str | None:
    if os.sep in candidate:
        return candidate if os.path.isfile(candidate) and os.access(candidate, os.X_OK) else None
    return shutil.which(candidate)


@functools.lru_cache(maxsize=8)
def _hipcc_version(path: str) -> str | None:
    done = _run([path, "--version"], timeout=120)
    if done is None or done.returncode != 0:
        return None
    return _version_lines(done.stdout) or "unknown"


def hiprtc_problem() -> str | None:
    """None when hip-python's hiprtc can load a ROCm libhiprtc here, else why not."""
    try:
        from hip import hiprtc
        err, major, minor = hiprtc.hiprtcVersion()
    except Exception as exc:  # noqa: BLE001 - import error or libhiprtc that cannot be dlopened
        return f"hiprtc not loadable ({type(exc).__name__}: {exc})"
    if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
        return f"hiprtcVersion failed: {err.name}"
    return None


def _hiprtc_version() -> str:
    from hip import hiprtc
    _, major, minor = hiprtc.hiprtcVersion()
    return f"hiprtc {major}.{minor}"


@functools.lru_cache(maxsize=32)
def select(hipcc: tuple[str, ...] | None = None, clang: tuple[str, ...] = CLANG_CANDIDATES,
           use_hiprtc: bool = True, hip_paths: tuple[str, ...] = HIP_PATH_CANDIDATES,
           ) -> tuple[Selection | None, tuple[str, ...]]:
    """The first usable HIP compiler in order hipcc, hiprtc, clang >= 20, and why the ones tried
    before it (or all of them) were passed over. Memoised per process: probing runs compilers."""
    reasons: list[str] = []
    hipccs = tuple(_rocm_hipcc_candidates()) if hipcc is None else hipcc
    found = False
    for candidate in hipccs:
        path = _resolve(candidate)
        if path is None:
            continue
        found = True
        version = _hipcc_version(path)
        if version is None:
            reasons.append(f"{candidate}: `--version` failed")
            continue
        return Selection("hipcc", path, version), tuple(reasons)
    if not found:
        reasons.append("hipcc: not found (no ROCm install)")
    if use_hiprtc:
        why = hiprtc_problem()
        if why is None:
            return Selection("hiprtc", None, _hiprtc_version()), tuple(reasons)
        reasons.append(why)
    hip_path = next((p for p in hip_paths
                     if (Path(p) / "include" / "hip" / "hip_runtime.h").is_file()), None)
    for candidate in clang:
        path = _resolve(candidate)
        if path is None:
            continue
        got = _clang_version(path)
        if got is None:
            reasons.append(f"{candidate}: `--version` failed")
            continue
        major, version = got
        if major < MIN_CLANG_MAJOR:
            reasons.append(f"{candidate}: clang {major} is older than {MIN_CLANG_MAJOR} "
                           "(no gfx950; no gfx942 features it needs)")
            continue
        if not _has_lld(path):
            reasons.append(f"{candidate}: ld.lld for clang {major} not found (lld-{major})")
            continue
        if hip_path is None:
            reasons.append(f"{candidate}: HIP headers (include/hip/hip_runtime.h) not found under "
                           f"{', '.join(hip_paths)} (libamdhip64-dev)")
            continue
        return (Selection("clang", path, version, hip_path, _hip_header_version(hip_path)),
                tuple(reasons))
    if not any(_resolve(c) for c in clang):
        reasons.append(f"clang: none of {', '.join(clang)} found")
    return None, tuple(reasons)


# --- the resource remarks ---------------------------------------------------------------------
_REMARK = re.compile(r"remark:\s*(.+?):\s+(.*?)\s*(?:\[-Rpass-analysis=kernel-resource-usage\])?$")
_FIELDS = {  # remark label -> resources key
    "TotalSGPRs": "sgprs", "VGPRs": "registers", "AGPRs": "agprs",
    "ScratchSize [bytes/lane]": "scratch_bytes", "Occupancy [waves/SIMD]": "occupancy",
    "SGPRs Spill": "sgpr_spills", "VGPRs Spill": "vgpr_spills",
    "LDS Size [bytes/block]": "shared_bytes",
}


def parse_resource_remarks(log: str) -> dict[str, dict]:
    """Function name -> resources from `-Rpass-analysis=kernel-resource-usage` remarks.

    Keys: registers (VGPRs), agprs, sgprs, scratch_bytes (per lane), vgpr_spills and sgpr_spills
    (the compiler's spill counts), spill_bytes (the kernel's scratch bytes per lane when it spills
    VGPRs to memory, else 0: what specs' max_spills compare, like NVIDIA's spill bytes per thread;
    VGPRs parked in AGPRs are not memory spills), shared_bytes (static LDS), occupancy (waves per
    SIMD), dynamic_stack. Values the compiler could only print symbolically (a call to an undefined
    function) are left out."""
    out: dict[str, dict] = {}
    current: dict | None = None
    for line in log.splitlines():
        m = _REMARK.search(line)
        if not m:
            continue
        label, value = m.group(1).strip(), m.group(2).strip()
        if label == "Function Name":
            current = out.setdefault(value, {})
        elif current is None:
            continue
        elif label == "Dynamic Stack":
            current["dynamic_stack"] = value == "True"
        elif label in _FIELDS and re.fullmatch(r"\d+", value):
            current[_FIELDS[label]] = int(value)
    for r in out.values():
        if "vgpr_spills" in r and "scratch_bytes" in r:
            r["spill_bytes"] = r["scratch_bytes"] if r["vgpr_spills"] else 0
    return out


# --- disassembly ------------------------------------------------------------------------------
def _objdump_for(selection: Selection) -> str | None:
    """llvm-objdump of the same LLVM as the compiler when there is one, else any new enough."""
    candidates = []
    if selection.path:
        real = Path(selection.path).resolve()
        candidates += [real.parent / "llvm-objdump",                  # /usr/lib/llvm-22/bin
                       real.parent.parent / "llvm" / "bin" / "llvm-objdump"]  # /opt/rocm/bin/hipcc
    for c in candidates:
        if c.is_file():
            return str(c)
    for name in ("llvm-objdump-22", "llvm-objdump-21", "llvm-objdump-20"):
        if found := shutil.which(name):
            return found
    rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "llvm" / "bin" / "llvm-objdump"
    return str(rocm) if rocm.is_file() else None


def disassemble(binary: bytes, arch: str, objdump: str | None) -> tuple[str | None, str]:
    """(llvm-objdump -d text or None, a note when a disassembler was there but failed)."""
    if objdump is None:
        return None, ""
    with tempfile.TemporaryDirectory(prefix="regen-hip-dis-") as tmp:
        path = Path(tmp) / "kernel.hsaco"
        path.write_bytes(binary)
        done = _run([objdump, "-d", f"--mcpu={arch}", str(path)], timeout=120)
        if done is None or done.returncode != 0:
            why = done.stderr.strip() if done else "did not run"
            return None, f"regen: no disassembly: llvm-objdump failed: {why}"
        return done.stdout.replace(tmp + "/", ""), ""


# --- the toolchain ----------------------------------------------------------------------------
class Toolchain:
    name = "hip"
    binary_suffix = ".hsaco"

    def __init__(self, hipcc: tuple[str, ...] | None = None,
                 clang: tuple[str, ...] = CLANG_CANDIDATES, use_hiprtc: bool = True,
                 hip_paths: tuple[str, ...] = HIP_PATH_CANDIDATES):
        """Candidates are parameters so tests can restrict what selection may find."""
        self._candidates = (None if hipcc is None else tuple(hipcc), tuple(clang), use_hiprtc,
                            tuple(hip_paths))
        self._selected: tuple[Selection | None, tuple[str, ...]] | None = None

    def selection(self) -> tuple[Selection | None, tuple[str, ...]]:
        if self._selected is None:
            hipcc, clang, use_hiprtc, hip_paths = self._candidates
            self._selected = select(hipcc, clang, use_hiprtc, hip_paths)
        return self._selected

    def problem(self, target=None) -> str | None:
        chosen, reasons = self.selection()
        if chosen is None:
            return f"no HIP compiler found ({'; '.join(reasons)}). {INSTALL_HINT}"
        if target is not None and chosen.path and chosen.tool in ("clang", "hipcc"):
            archs = known_archs(chosen.path)
            if archs and target.arch not in archs:
                return (f"{chosen.tool} ({chosen.version}) cannot compile for {target.arch}. "
                        f"{INSTALL_HINT}")
        return None

    def flags(self, target) -> list[str]:
        """Every option that changes the binary (paths are machine-local and left out)."""
        chosen, _ = self.selection()
        given = list(target.toolchain.flags)
        own = [*given, *[f for f in FORCED_FLAGS if f not in given]]
        if chosen is not None and chosen.tool == "hiprtc":
            return [f"--offload-arch={target.arch}", *own]
        extra = ["-nogpulib", "-include", COMPAT_NAME] if chosen and chosen.tool == "clang" else []
        return [*_DEVICE_ONLY, f"--offload-arch={target.arch}", *extra, *own]

    def identity(self, target) -> dict:
        chosen, reasons = self.selection()
        out = {"tool": "hip", "arch": target.arch, "flags": self.flags(target)}
        if chosen is None:
            return {**out, "compiler": None, "problem": "; ".join(reasons)}
        out.update(compiler=chosen.tool, version=chosen.version)
        if chosen.tool == "clang":
            out["hip_headers"] = chosen.hip_version
            out["compat_headers"] = {Path(name).name: hashlib.sha256(text.encode()).hexdigest()[:16]
                                     for name, text in sorted(chosen.compat_headers().items())}
        return out

    def compile(self, source: str, target) -> CompileResult:
        problem = self.problem(target)
        if problem:
            return CompileResult(ok=False, log=problem)
        chosen, _ = self.selection()
        if chosen.tool == "hiprtc":
            result = _compile_hiprtc(source, self.flags(target))
        else:
            result = self._compile_driver(chosen, source, target)
        if result.ok:
            result.resources = parse_resource_remarks(result.log)
            result.disassembly, note = disassemble(result.binary, target.arch, _objdump_for(chosen))
            if note:
                result.log = f"{result.log}\n{note}".strip()
        return result

    def _compile_driver(self, chosen: Selection, source: str, target) -> CompileResult:
        with tempfile.TemporaryDirectory(prefix="regen-hip-") as tmp:
            src, out = Path(tmp) / SOURCE_NAME, Path(tmp) / "kernel.hsaco"
            src.write_text(source)
            cmd = [chosen.path, *self.flags(target)]
            if chosen.tool == "clang":
                for name, text in chosen.compat_headers().items():
                    (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / name).write_text(text)
                cmd += [f"--hip-path={chosen.hip_path}", f"-I{tmp}"]
            # no crash reproducers left in /tmp when the backend rejects a builtin for this arch
            cmd += [f"-ffile-prefix-map={tmp}=.", "-fno-crash-diagnostics",
                    "-c", str(src), "-o", str(out)]
            start = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
            except subprocess.TimeoutExpired:
                return CompileResult(ok=False, log=f"{chosen.tool} timed out after 300 s",
                                     seconds=time.perf_counter() - start)
            seconds = time.perf_counter() - start
            log = (done.stdout + done.stderr).replace(tmp + "/", "").strip()
            if done.returncode != 0 or not out.is_file():
                return CompileResult(ok=False, log=log or f"{chosen.tool} exited {done.returncode}",
                                     seconds=seconds)
            return CompileResult(ok=True, binary=out.read_bytes(), log=log, seconds=seconds)


def _compile_hiprtc(source: str, options: list[str]) -> CompileResult:
    """hiprtc through hip-python (a ROCm install's libhiprtc); unverified on this project's CI."""
    from hip import hiprtc
    ok = hiprtc.hiprtcResult.HIPRTC_SUCCESS
    start = time.perf_counter()
    err, program = hiprtc.hiprtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    if err != ok:
        return CompileResult(ok=False, log=f"hiprtcCreateProgram failed: {err.name}")
    try:
        encoded = [o.encode() for o in options]
        (result,) = hiprtc.hiprtcCompileProgram(program, len(encoded), encoded)
        log = ""
        err, size = hiprtc.hiprtcGetProgramLogSize(program)
        if err == ok and size > 1:
            buffer = bytearray(size)
            hiprtc.hiprtcGetProgramLog(program, buffer)
            log = bytes(buffer).rstrip(b"\x00").decode(errors="replace").strip()
        if result != ok:
            return CompileResult(ok=False, log=log or result.name,
                                 seconds=time.perf_counter() - start)
        err, size = hiprtc.hiprtcGetCodeSize(program)
        if err != ok:
            return CompileResult(ok=False, log=f"hiprtcGetCodeSize failed: {err.name}")
        code = bytearray(size)
        (err,) = hiprtc.hiprtcGetCode(program, code)
        if err != ok:
            return CompileResult(ok=False, log=f"hiprtcGetCode failed: {err.name}")
    finally:
        hiprtc.hiprtcDestroyProgram(program.createRef())
    return CompileResult(ok=True, binary=bytes(code), log=log, seconds=time.perf_counter() - start)
