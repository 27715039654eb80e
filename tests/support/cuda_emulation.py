"""Run CUDA sources on the CPU: compile one with g++ against cuda_emulation.h (the CUDA execution
model as fibers and real barriers) and launch its kernels on guarded, NaN-poisoned buffers, so a
kernel's indexing, synchronisation and alignment are checked without a GPU. HIP sources (the cdna
column, which no machine here can run) go through the same model with 64-lane wavefronts, built
with clang++ (`build_hip`)."""

from __future__ import annotations

import ctypes
import mmap
import platform
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from regen.recipe import tensor_pointer, workspace_shapes

from . import library

HEADER = Path(__file__).with_name("cuda_emulation.h")


def problem() -> str | None:
    """Why the emulation cannot run here (None when it can)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64" or not shutil.which("g++"):
        return "the CUDA emulation needs Linux on x86-64 and g++"
    return None


def skip_unless_available() -> None:
    why = problem()
    if why:
        pytest.skip(why)


HIP_COMPILERS = ("clang++-22", "clang++-21", "clang++-20", "clang++")


def hip_compiler() -> str | None:
    """A clang++ for the HIP emulation (HIP sources use clang's vector types and __bf16)."""
    return next((c for c in HIP_COMPILERS if shutil.which(c)), None)


def skip_unless_hip_available() -> None:
    skip_unless_available()
    if not hip_compiler():
        pytest.skip("the HIP emulation needs clang++ (clang-22 is regen's HIP toolchain)")


def _host_line(line: str) -> str:
    """The emulation is a host pass that selects one arch's sections: `#if __CUDA_ARCH__ >= 900`
    sees the emulated arch (build's -D__CUDA_ARCH__), while `#ifdef __CUDA_ARCH__`, which guards
    inline PTX only a device compiler can take, stays false as in a host pass."""
    stripped = line.strip()
    if stripped.startswith(("#include <cuda", "#include <hip/")):
        return ""
    if stripped.replace(" ", "") in ("#ifdef__CUDA_ARCH__", "#ifdefined(__CUDA_ARCH__)"):
        return "#if 0"
    dynamic = _DYNAMIC_SHARED.match(line)
    if dynamic:   # extern __shared__ T name[]; -> the launch's dynamic shared memory buffer
        indent, _align, dtype, name, _comment = dynamic.groups()
        return f"{indent}{dtype}* const {name} = reinterpret_cast<{dtype}*>(emu_dynamic_smem());"
    return line


_DYNAMIC_SHARED = re.compile(
    r"^(\s*)extern\s+__shared__\s+(__align__\(\d+\)\s+)?([A-Za-z_][\w :]*?)\s+(\w+)\[\];\s*(//.*)?$")


# a kernel parameter `const __grid_constant__ CUtensorMap name` (either order): 128 bytes by value
# on the device, by reference here (the launcher passes integer-class arguments only)
_GRID_CONSTANT_MAP = re.compile(
    r"\bconst\s+__grid_constant__\s+CUtensorMap\s+(\w+)|\b__grid_constant__\s+const\s+CUtensorMap\s+(\w+)")


def unit(source: str, name: str = "kernel.cu") -> str:
    """The translation unit g++ compiles: the emulation header, then the CUDA (or HIP) source
    without its <cuda*> (<hip/*>) includes (the header stands in for them), line numbers kept for
    compiler errors."""
    body = "\n".join(_host_line(line) for line in source.splitlines())
    body = _GRID_CONSTANT_MAP.sub(lambda m: f"const CUtensorMap& {m.group(1) or m.group(2)}", body)
    # a kernel declared __cluster_dims__(n, 1, 1) runs its blocks n at a time, concurrently
    clusters = "".join(f'extern "C" unsigned emu_cluster_dims_{kernel}() {{ return {n}; }}\n'
                       for n, kernel in _CLUSTER_DIMS.findall(source))
    return f'#include "{HEADER.name}"\n#line 1 "{name}"\n{body}\n{clusters}'


_CLUSTER_DIMS = re.compile(r"__cluster_dims__\(\s*(\d+)\s*,\s*1\s*,\s*1\s*\)[^;{(]*?(?:__launch_bounds__\([^)]*\)\s*)?"
                           r"(?:\w+\s+)*?(\w+)\s*\(")


EMU_MAP_MAGIC = 0x70614D726F736E65
_EMU_MAP = struct.Struct("<QQII5Q4Q5III")


def emulated_map(bound, tensor) -> ctypes.Array:
    """The emulation's encoding of a bound tensor map over `tensor` (cuda_emulation.h's
    EmuTensorMap in a 64-byte aligned CUtensorMap), checked as the CUDA runtime checks it."""
    from regen.recipe import dtype_name
    from regen.tensormap import check_buffer

    check_buffer(bound, dtype_name(tensor), tensor.numel(), tensor.data_ptr())
    args = bound.encode_args(tensor.data_ptr())
    rank = args["rank"]
    pad = lambda xs, n: list(xs) + [0] * (n - len(xs))  # noqa: E731
    data = _EMU_MAP.pack(EMU_MAP_MAGIC, args["address"], rank, bound.element_bytes,
                         *pad(args["dims"], 5), *pad(args["strides"], 4), *pad(args["box"], 5),
                         args["swizzle"], int(args["oob_nan"]))
    room = (ctypes.c_ubyte * 192)()
    value = (ctypes.c_ubyte * 128).from_buffer(room, (-ctypes.addressof(room)) % 64)
    ctypes.memmove(value, data, len(data))
    return value


def build(source: str, folder: Path, cuda_arch: int = 900) -> Path:
    """Compile a CUDA source against the emulation into folder/emu.so, with the __CUDA_ARCH__ of
    the target it is compiled for (900: sm_90a, the h200 recipes'); fails the test with the
    compiler's errors if it does not build."""
    folder.mkdir(parents=True, exist_ok=True)
    cpp = folder / "emu.cpp"
    cpp.write_text(unit(source))
    so = folder / "emu.so"
    proc = subprocess.run(["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-w", f"-I{HEADER.parent}",
                           f"-D__CUDA_ARCH__={cuda_arch}",
                           str(cpp), "-o", str(so)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return so


HIP_ARCHS = ("gfx942", "gfx950")


def build_hip(source: str, folder: Path, arch: str | None = None) -> Path:
    """Compile a HIP source against the emulation with 64-lane wavefronts into folder/emu.so (the
    cdna column's execution model: __shfl_xor over 64 lanes, LDS as static __shared__ arrays,
    MFMA); fails the test with the compiler's errors if it does not build. `arch` (gfx942 or
    gfx950) defines __gfx942__ or __gfx950__ as the device compiler does, which selects a source's
    per-arch sections and the fp8 format of the emulated fp8 MFMA; without it neither is defined."""
    if arch is not None and arch not in HIP_ARCHS:
        raise ValueError(f"build_hip: arch {arch!r}: expected one of {', '.join(HIP_ARCHS)}")
    folder.mkdir(parents=True, exist_ok=True)
    cpp = folder / "emu.cpp"
    cpp.write_text(unit(source, "kernel.hip"))
    so = folder / "emu.so"
    proc = subprocess.run([hip_compiler(), "-O1", "-std=c++17", "-shared", "-fPIC", "-w",
                           f"-I{HEADER.parent}", "-DEMU_HIP", "-DEMU_WARP=64",
                           *([f"-D__{arch}__"] if arch else []),
                           str(cpp), "-o", str(so)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return so


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


def run(lib, kernel: str, case, inputs: dict, folder: Path | None = None, target: str = "h200",
        repeat: int = 1, rezero: bool = True, timeline: bool = False):
    """The committed recipe for `target` (default h200), or that of the variant in `folder`, on
    guarded, NaN-poisoned buffers (TMA loads landing when waited for in the first repetition, at
    issue in the second, alternating) (workspaces zeroed where the recipe asks; an in-place output is
    its input's buffer, as the judge passes it), `repeat` times on the same buffers, outputs
    poisoned again before each and zeroed workspaces zeroed again, as the judge does before every
    checked launch. `rezero=False` keeps the workspaces' state instead: a kernel that promises to
    leave its zeroed workspace ready for the next launch (a persistent kernel's counters) is held to
    that. Returns (outputs, names of the other inputs the kernels changed, kernels run), and with
    `timeline` (a build with REGEN_TIMELINE) the timeline buffer's int64 words as a fourth item:
    a guarded buffer of the recipe's `timeline.slots` records, zeroed before every launch."""
    import torch

    from regen.recipe import timeline_slots
    s = library.spec(kernel)
    recipe = library.committed(kernel, target, folder)[1]
    tl_name = recipe.timeline.buffer if timeline else None
    launches, recipe, env = library.bound(kernel, target, case, folder,
                                          extra={tl_name} if tl_name else ())
    keep, bufs = [], {}

    def buffer(name, shape, dtype, fill):
        g = GuardedBuffer(shape, dtype)
        keep.append(g)
        bufs[name] = g.tensor
        if isinstance(fill, torch.Tensor):
            return g.tensor.copy_(fill)
        if fill != fill and not g.tensor.dtype.is_floating_point:   # poison an integer buffer
            return g.tensor.fill_(torch.iinfo(g.tensor.dtype).max)
        return g.tensor.fill_(fill)

    for name, x in inputs.items():
        buffer(name, list(x.shape), x.dtype, x)
    for t in s.signature.outputs:
        if not t.inplace_of:   # an in-place output is its input's buffer
            buffer(t.name, s.tensor_shape(t, case), getattr(torch, s.tensor_dtype(t, case)), float("nan"))
    for name, (dtype, shape, zero) in workspace_shapes(recipe, env).items():
        buffer(name, shape, getattr(torch, dtype), 0.0 if zero else float("nan"))
    if tl_name:
        buffer(tl_name, [timeline_slots(recipe, env) * 4], torch.int64, 0)
    once = launches
    launches = [launch for _ in range(repeat) for launch in launches]
    eager = getattr(lib, "emu_set_eager_tma", None)
    for i, launch in enumerate(launches):
        if eager is not None:   # TMA loads land lazily, then eagerly, launch after launch
            eager(ctypes.c_int((i // len(once)) % 2))
        if i and i % len(once) == 0:   # outputs poisoned again, zeroed workspaces zeroed again
            for t in s.signature.outputs:
                if not t.inplace_of:
                    bufs[t.name].fill_(float("nan"))
            for name, (_, _, zero) in workspace_shapes(recipe, env).items():
                if zero and rezero:
                    bufs[name].zero_()
            for t in s.signature.outputs:  # an input written over is restored, as the judge does
                if t.inplace_of:
                    bufs[t.inplace_of].copy_(inputs[t.inplace_of])
            if tl_name:
                bufs[tl_name].zero_()
        ints = []
        for a in launch.args:
            if a.kind == "tensormap":   # passed by reference (unit() rewrites the parameter)
                keep.append(emulated_map(a.value, bufs[a.value.tensor]))
                ints.append(ctypes.addressof(keep[-1]))
            elif a.kind == "tensor":
                ints.append(tensor_pointer(a, bufs[a.value], launch.kernel))
            elif a.kind in ("int32", "int64"):
                ints.append(int(a.value))
        flts = [float(a.value) for a in launch.args if a.kind == "float32"]
        assert len(ints) <= 40 and len(flts) <= 4 and len(ints) + len(flts) == len(launch.args)
        fn = ctypes.cast(getattr(lib, launch.kernel), ctypes.c_void_p).value
        cluster = getattr(lib, f"emu_cluster_dims_{launch.kernel}", None)
        if cluster is not None:
            cluster.restype = ctypes.c_uint
            lib.emu_set_cluster(ctypes.c_uint(cluster()))
        lib.emu_launch(ctypes.c_void_p(fn), *[ctypes.c_uint(v) for v in (*launch.grid, *launch.block)],
                       ctypes.c_uint(launch.shared_mem), len(ints), (ctypes.c_int64 * 40)(*ints),
                       len(flts), (ctypes.c_float * 4)(*flts))
    outputs = {t.name: bufs[t.inplace_of or t.name].clone() for t in s.signature.outputs}
    inplace = {t.inplace_of for t in s.signature.outputs if t.inplace_of}
    changed = [k for k, x in inputs.items() if k not in inplace and not torch.equal(bufs[k], x)]
    ran = [launch.kernel for launch in launches]
    return (outputs, changed, ran, bufs[tl_name].clone()) if tl_name else (outputs, changed, ran)

