"""The Python-side cost of one regen.ops call on CUDA, measured on a machine without a GPU.

    python benchmarks/ops_host_path.py [--calls N] [--rounds R] [--profile KERNEL]

What it runs is regen.ops' real call path (torch's dispatcher or the fast path, the plan cache,
output allocation, pointer packing, the stream handle, cuLaunchKernel through cuda.bindings) for
the h200 columns' committed recipes, with exactly two things stood in for, here only:
  * the CUDA driver: a "null driver" libcuda.so.1 built from C below, loaded through
    LD_LIBRARY_PATH, whose every entry point returns CUDA_SUCCESS without doing anything (so the
    cuda.bindings call, its argument conversion and the ctypes-free launch path are all real);
  * torch's current CUDA device and raw stream getters (no CUDA torch here): constants.
Tensors are CPU tensors, so allocation is the CPU allocator's (the torch op being compared
allocates its output too). The torch column is torch's own op on the same tiny CPU tensor, i.e.
its dispatcher + allocation + a tiny CPU kernel (one intra-op thread): the comparison the H200
figures (benchmarks/ops_overhead.py) make with real launches. Figures are this thread's CPU time
per call (time.thread_time: time spent waiting for a shared machine's cores is not counted), the
best of interleaved rounds. --profile KERNEL prints cProfile's view of that kernel's calls.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

NULL_DRIVER = r"""
/* A CUDA driver that does nothing: every entry point returns CUDA_SUCCESS (0), except
   cuFuncGetParamInfo, which says it cannot tell (the launcher then skips its size check). */
typedef int CUresult;
static CUresult ok(void) { return 0; }
static CUresult cannot(void) { return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
static void *entry(const char *s) {
  const char *p = "cuFuncGetParamInfo"; int i = 0;
  while (p[i] && s[i] == p[i]) i++;
  return (p[i] == 0 && s[i] == 0) ? (void *)cannot : (void *)ok;
}
CUresult cuGetProcAddress_v2(const char *s, void **pfn, int v, unsigned long long f, int *st) {
  *pfn = entry(s); if (st) *st = 0; return 0; }
CUresult cuGetProcAddress(const char *s, void **pfn, int v, unsigned long long f) {
  *pfn = entry(s); return 0; }
CUresult cuInit(unsigned f) { return 0; }
"""

KERNELS = ("rmsnorm", "softmax", "swiglu")


def _ensure_null_driver() -> None:
    """Re-run this script with the null driver first on the library path (once)."""
    if os.environ.get("REGEN_NULL_DRIVER"):
        return
    folder = Path(tempfile.mkdtemp(prefix="regen-null-driver-"))
    (folder / "null.c").write_text(NULL_DRIVER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "null.c")], check=True)
    env = {**os.environ, "REGEN_NULL_DRIVER": str(folder),
           "LD_LIBRARY_PATH": f"{folder}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _stub_torch_cuda_getters(torch) -> None:
    torch._C._cuda_getDevice = lambda: None             # the plan's device index on CPU tensors
    torch._C._cuda_getCurrentRawStream = lambda index: 0  # the legacy default stream


class NullCudaResolver:
    """Each kernel's h200 column: its committed recipe, launched on the null driver."""

    def __init__(self):
        from cuda.bindings import driver

        from regen import plan as planning
        from regen.ops.dispatch import Resolution
        from regen.ops.launch import CudaLibrary
        from regen.project import Project, find_root
        from regen.recipe import parse_recipe
        from regen.store import Store

        self.project = Project(find_root(REPO))
        store, target = Store(self.project.cache_dir), self.project.targets["h200"]
        self.resolutions = {}
        for k in KERNELS:
            node = planning.plan_node(self.project, store, self.project.spec(k), target)
            lib = CudaLibrary(b"", f"{k}@h200 on the null driver")
            lib._modules[None] = (driver.CUcontext(0), driver.CUmodule(0))  # nothing to load
            self.resolutions[k] = Resolution(
                column=f"{k}@h200 (null driver)", library=lib,
                recipe=parse_recipe(node.entry.recipe()).model_dump(mode="json"))

    def resolve(self, kernel, device_type, index):
        return self.resolutions[kernel]

    def fallback(self, kernel):
        return None


def build_ops():
    """{kernel: (regen.ops-style function, torch.ops overload)} registered as regen_hostpath::."""
    import torch

    from regen.export import signature_data
    from regen.ops.dispatch import KernelOp, python_function, register
    from regen.ops.signature import Signature

    resolver = NullCudaResolver()
    ops = {k: KernelOp(Signature(signature_data(resolver.project.spec(k)), "hostpath"), resolver,
                       "regen_hostpath", "hostpath") for k in KERNELS}
    build_ops.library = register("regen_hostpath", list(ops.values()))  # keep it alive
    return {k: (python_function(op, "hostpath"), torch.ops.regen_hostpath.__getattr__(k).default)
            for k, op in ops.items()}


def measure(calls: int, rounds: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    _stub_torch_cuda_getters(torch)
    torch.set_num_threads(1)
    ops = build_ops()
    x, w, x2 = torch.randn(1, 8), torch.randn(8), torch.randn(1, 16)
    cases = {
        "rmsnorm": ((x, w, 1e-6), lambda: F.rms_norm(x, (8,), w, 1e-6), "F.rms_norm"),
        "softmax": ((x,), lambda: torch.softmax(x, -1), "torch.softmax"),
        "swiglu": ((x2,), lambda: F.silu(x2[:, :8]) * x2[:, 8:], "F.silu(a) * b"),
    }
    rows = []
    for k, (args, ref, label) in cases.items():
        fn, overload = ops[k]
        variants = {"torch": ref, "function": lambda: fn(*args), "overload": lambda: overload(*args)}
        for v in variants.values():
            for _ in range(200):
                v()
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(rounds):
            for name, v in variants.items():
                t0 = time.thread_time()
                for _ in range(calls):
                    v()
                best[name] = min(best[name], (time.thread_time() - t0) / calls)
        rows.append({"kernel": k, "torch_op": label, **{n: t * 1e6 for n, t in best.items()}})
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'kernel':8} {'torch op (cpu)':15} {'torch us':>8} {'regen.ops.K us':>15} "
             f"{'torch.ops.regen.K us':>21}"]
    for r in rows:
        lines.append(f"{r['kernel']:8} {r['torch_op']:15} {r['torch']:8.2f} {r['function']:15.2f} "
                     f"{r['overload']:21.2f}")
    return "\n".join(lines)


def profile(kernel: str, calls: int) -> None:
    import cProfile
    import pstats

    import torch

    _stub_torch_cuda_getters(torch)
    fn, _ = build_ops()[kernel]
    x = torch.randn(1, 16 if kernel == "swiglu" else 8)
    args = (x, torch.randn(8)) if kernel == "rmsnorm" else (x,)
    fn(*args)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*args)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", choices=KERNELS)
    args = parser.parse_args()
    _ensure_null_driver()
    sys.path.insert(0, str(REPO))
    if args.profile:
        profile(args.profile, args.calls)
        return
    print(table(measure(args.calls, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
