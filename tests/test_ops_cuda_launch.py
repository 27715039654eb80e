"""regen.ops' CUDA launch path without a GPU: the h200 columns' committed recipes are planned and
launched through cuda.bindings against a recording driver (a libcuda.so.1 built here whose
cuLaunchKernel writes down the function's name, grid, block, shared memory and the parameter
slots' bytes). What the driver saw must be exactly what each recipe says for the call's tensors:
the pointers in the kernel's argument order (fast paths that pack them as they come included), the
scalars, the launch shape, every launch of a multi-launch recipe, on every call (the slots are
reused between calls of one shape).

The child process is needed because the driver library is chosen at load time (LD_LIBRARY_PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

pytest.importorskip("torch")
pytest.importorskip("cuda.bindings")

RECORDING_DRIVER = r"""
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef struct { const char *name; unsigned dims[7]; unsigned long long slots[16]; } Launch;
static Launch log_[64];
static int launches = 0, counts[64], ncounts = 0;
/* the test says how many 8-byte slots each coming launch has (the driver cannot know) */
void regen_test_expect(const int *c, int n) { memcpy(counts, c, n * sizeof(int)); ncounts = n; launches = 0; }
int regen_test_launches(void) { return launches; }
const char *regen_test_name(int i) { return log_[i].name; }
unsigned regen_test_dim(int i, int j) { return log_[i].dims[j]; }
unsigned long long regen_test_slot(int i, int j) { return log_[i].slots[j]; }
static CUresult ok(void) { return 0; }
static CUresult cannot(void) { return 801; }
static CUresult get_function(void **f, void *module, const char *name) { *f = strdup(name); return 0; }
static CUresult launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  if (launches >= 64 || launches >= ncounts) return 1; /* CUDA_ERROR_INVALID_VALUE: unexpected */
  Launch *l = &log_[launches];
  unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
  l->name = (const char *)f; memcpy(l->dims, d, sizeof d);
  for (int j = 0; j < counts[launches] && j < 16; ++j) memcpy(&l->slots[j], params[j], 8);
  launches++;
  return 0;
}
static void *entry(const char *s) {
  if (!strcmp(s, "cuFuncGetParamInfo")) return (void *)cannot;
  if (!strcmp(s, "cuModuleGetFunction")) return (void *)get_function;
  if (!strcmp(s, "cuLaunchKernel")) return (void *)launch;
  return (void *)ok;
}
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuGetProcAddress_v2(const char *s, void **pfn, int v, unsigned long long f, int *st) {
  *pfn = entry(s); if (st) *st = 0; return 0; }
CUresult cuGetProcAddress(const char *s, void **pfn, int v, unsigned long long f) {
  *pfn = entry(s); return 0; }
CUresult cuInit(unsigned f) { return 0; }
"""

# The child: each kernel's h200 recipe behind a KernelOp whose library is a CudaLibrary on the
# recording driver; calls on CPU tensors (torch's CUDA device and stream getters stood in for),
# through the op's Python function (its fast path) and torch's dispatcher; prints what was seen.
CHILD = textwrap.dedent(r"""
    import ctypes, json, os, sys
    sys.path.insert(0, sys.argv[1])
    import torch
    from cuda.bindings import driver
    from regen import plan as planning
    from regen.export import signature_data
    from regen.ops.dispatch import KernelOp, Resolution, python_function, register
    from regen.ops.launch import CudaLibrary
    from regen.ops.signature import Signature
    from regen.project import Project, find_root
    from regen.recipe import parse_recipe
    from regen.store import Store

    torch._C._cuda_getDevice = lambda: None
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    rec = ctypes.CDLL(os.path.join(os.environ["RECORDING_DRIVER"], "libcuda.so.1"))
    rec.regen_test_name.restype = ctypes.c_char_p
    rec.regen_test_slot.restype = ctypes.c_ulonglong
    from pathlib import Path
    project = Project(find_root(Path(sys.argv[1])))
    store, target = Store(project.cache_dir), project.targets["h200"]

    class Resolver:
        def __init__(self):
            self.res = {}
        def resolve(self, kernel, device_type, index):
            if kernel not in self.res:
                node = planning.plan_node(project, store, project.spec(kernel), target)
                lib = CudaLibrary(b"", kernel + "@h200 on the recording driver")
                lib._modules[None] = (driver.CUcontext(0), driver.CUmodule(0))
                self.res[kernel] = Resolution(column=kernel + "@h200", library=lib,
                                              recipe=parse_recipe(node.entry.recipe()).model_dump(mode="json"))
            return self.res[kernel]
        def fallback(self, kernel):
            return None

    calls = json.loads(sys.argv[2])
    resolver = Resolver()
    kernels = sorted({c["kernel"] for c in calls})
    ops = {k: KernelOp(Signature(signature_data(project.spec(k)), "launchtest"), resolver,
                       "regen_launchtest", "launchtest") for k in kernels}
    keep = register("regen_launchtest", list(ops.values()))
    seen = []
    for c in calls:
        gen = torch.Generator().manual_seed(len(seen))
        args = []
        for a in c["args"]:
            if isinstance(a, dict):
                t = torch.randint(0, a["high"], a["shape"], generator=gen) if "high" in a else \
                    torch.randn(a["shape"], generator=gen)
                args.append(t.to(getattr(torch, a["dtype"])))
            else:
                args.append(a)
        fn = python_function(ops[c["kernel"]], "launchtest") if c["path"] == "function" else \
            getattr(torch.ops.regen_launchtest, c["kernel"]).default
        counts = (ctypes.c_int * len(c["counts"]))(*c["counts"])
        rec.regen_test_expect(counts, len(c["counts"]))
        out = fn(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        launches = []
        for i in range(rec.regen_test_launches()):
            launches.append({"name": rec.regen_test_name(i).decode(),
                             "dims": [rec.regen_test_dim(i, j) for j in range(7)],
                             "slots": [rec.regen_test_slot(i, j) for j in range(c["counts"][i])]})
        seen.append({"inputs": [a.data_ptr() for a in args if isinstance(a, torch.Tensor)],
                     "outputs": [o.data_ptr() for o in outs], "launches": launches})
    print(json.dumps(seen))
""")


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the recording driver")
    folder = tmp_path_factory.mktemp("recording-driver")
    (folder / "driver.c").write_text(RECORDING_DRIVER)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
                    str(folder / "driver.c")], check=True)
    return folder


def _run(driver_dir, calls: list[dict]) -> list[dict]:
    env = {**os.environ, "RECORDING_DRIVER": str(driver_dir),
           "LD_LIBRARY_PATH": f"{driver_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(REPO), json.dumps(calls)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _f32(value: float) -> int:
    """A float32 scalar as the low bytes of its 8-byte slot."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _low(slot: int, nbytes: int) -> int:
    return slot & ((1 << (8 * nbytes)) - 1)


def _t(shape, dtype="float32", **kw):
    return {"shape": shape, "dtype": dtype, **kw}


@pytest.mark.parametrize("path", ["function", "overload"])
def test_single_input_op_launches_its_pointers_and_sizes_in_recipe_order(driver_dir, path):
    # softmax M 3 N 8 float32: softmax_r256_vec_f32, grid ceil(3 / 8), block 256, (x, y, M, N)
    calls = [{"kernel": "softmax", "path": path, "args": [_t([3, 8])], "counts": [4]}] * 3
    for seen in _run(driver_dir, calls):
        (launch,) = seen["launches"]
        assert launch["name"] == "softmax_r256_vec_f32"
        assert launch["dims"] == [1, 1, 1, 256, 1, 1, 0]
        x, y, m, n = launch["slots"]
        assert [x, y] == seen["inputs"] + seen["outputs"]
        assert (m, n) == (3, 8)


def test_rmsnorm_packs_weight_output_and_eps_bits(driver_dir):
    calls = [{"kernel": "rmsnorm", "path": p, "args": [_t([5, 16]), _t([16]), 1e-5], "counts": [6]}
             for p in ("function", "overload", "function")]
    for seen in _run(driver_dir, calls):
        (launch,) = seen["launches"]
        assert launch["name"] == "rmsnorm_r256_vec_f32"
        assert launch["dims"] == [1, 1, 1, 256, 1, 1, 0]
        x, w, y, m, n, eps = launch["slots"]
        assert [x, w, y] == seen["inputs"] + seen["outputs"]
        assert (m, n, _low(eps, 4)) == (5, 16, _f32(1e-5))


def test_output_not_shaped_like_an_input_is_allocated_and_passed(driver_dir):
    # swiglu [4, 2 * 12] bfloat16 -> [4, 12]: 24-byte rows are not 16-byte multiples, scalar path
    calls = [{"kernel": "swiglu", "path": "function", "args": [_t([4, 24], "bfloat16")],
              "counts": [4]}] * 2
    for seen in _run(driver_dir, calls):
        (launch,) = seen["launches"]
        assert launch["name"] == "swiglu_sca_bf16"
        assert launch["dims"] == [4, 1, 1, 256, 1, 1, 0]
        x, y, m, n = launch["slots"]
        assert [x, y] == seen["inputs"] + seen["outputs"]
        assert (m, n) == (4, 12)


def test_multi_launch_recipe_passes_its_workspace_between_launches(driver_dir):
    # cross_entropy N 3 V 100: per-row losses into a workspace, then their mean into the loss
    calls = [{"kernel": "cross_entropy", "path": p,
              "args": [_t([3, 100]), _t([3], "int64", high=100)], "counts": [5, 4]}
             for p in ("function", "function", "overload")]
    for seen in _run(driver_dir, calls):
        rows, mean = seen["launches"]
        assert rows["name"] == "ce_rows_warp_f32" and mean["name"] == "ce_mean_f32"
        logits, targets, row_loss, n, v = rows["slots"]
        assert [logits, targets] == seen["inputs"] and (n, v) == (3, 100)
        ws, targets2, loss, n2 = mean["slots"]
        assert ws == row_loss and ws not in seen["inputs"] + seen["outputs"]
        assert targets2 == targets and [loss] == seen["outputs"] and n2 == 3
