"""HIP run stage for AMD GPUs (child process only): load a code object into torch's ROCm runtime
with hip-python and launch its recipe on the torch tensors regen allocated.

UNVERIFIED ON HARDWARE: written against hip-python 10's API as introspected here
(hipModuleLoadData, hipModuleGetFunction, hipModuleLaunchKernel with an `extra` argument buffer,
hipDeviceSynchronize, hipDriverGetVersion, hipRuntimeGetVersion) and never yet run on an AMD GPU.
The pure parts (argument packing, code-object metadata) are tested on CPU against real compiler
output; the rest waits for an MI300X/MI350 run (tests marked gpu). hip-python must match the
machine's ROCm major version (pip install hip-python==<ROCm version>).

Torch's ROCm build keeps the "cuda" device string: tensors are on "cuda", torch.cuda.Event times
HIP events, and kernels run on torch's current stream. hip-python has to drive the same HIP runtime
library as torch (a second copy would own a second set of streams and contexts), so before the
first HIP call ROCM_PATH is pointed at the directory of the libamdhip64 torch has loaded.

Kernel arguments travel as one buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER) laid out like the AMDGPU
kernarg segment: each argument at its natural alignment, pointers as 64-bit addresses. The layout
is checked against the argument offsets the compiler records in the code object's metadata.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

import torch

from ..recipe import BoundArg, tensor_pointer
from .events import Stall, Timer

# recipe argument kind -> (struct format, size): sizes double as alignments in the kernarg segment
ARG_FORMATS = {"tensor": ("<Q", 8), "int32": ("<i", 4), "int64": ("<q", 8),
               "float32": ("<f", 4), "float64": ("<d", 8)}
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
NT_AMDGPU_METADATA = 32


# --- kernel arguments (pure) ------------------------------------------------------------------
def arg_layout(kinds: list[str]) -> tuple[list[int], int]:
    """Offsets of arguments of these kinds in the kernarg segment, and the padded total size (a
    multiple of the largest alignment, as a C struct of the same members would be)."""
    offsets, end, align = [], 0, 1
    for kind in kinds:
        if kind not in ARG_FORMATS:
            raise ValueError(f"unknown argument kind {kind!r}")
        size = ARG_FORMATS[kind][1]
        end = (end + size - 1) // size * size
        offsets.append(end)
        end += size
        align = max(align, size)
    return offsets, (end + align - 1) // align * align


def pack_args(kernel: str, args, pointer_of) -> bytes:
    """The kernarg buffer for one launch. args: BoundArg sequence; pointer_of(name) -> device
    address of the tensor or workspace buffer called name."""
    offsets, total = arg_layout([a.kind for a in args])
    buffer = bytearray(total)
    for i, (arg, offset) in enumerate(zip(args, offsets)):
        where = f"kernel {kernel!r} argument {i}"
        fmt, _ = ARG_FORMATS[arg.kind]
        if arg.kind == "tensor":   # a view `offset` elements in: the runtime checks its range
            view = getattr(arg, "offset", 0)
            value = pointer_of(arg.value) if not view else pointer_of(arg.value, view)
        elif arg.kind in _INT_RANGE:
            low, high = _INT_RANGE[arg.kind]
            value = int(arg.value)
            if not low <= value <= high:
                raise RuntimeError(f"{where}: {value} does not fit in {arg.kind}")
        else:
            value = float(arg.value)
        struct.pack_into(fmt, buffer, offset, value)
    return bytes(buffer)


# --- code object metadata (pure) --------------------------------------------------------------
def _msgpack(data: bytes, pos: int = 0):
    """Decode one MessagePack value at pos: (value, next position). Enough for AMDGPU metadata."""
    b = data[pos]
    pos += 1

    def take(n):
        return data[pos:pos + n], pos + n

    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0x80 <= b <= 0x8F:
        return _msgpack_map(data, pos, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _msgpack_array(data, pos, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        raw, pos = take(b & 0x1F)
        return raw.decode(), pos
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if b in fixed:
        return fixed[b], pos
    sized = {0xCC: "<B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i",
             0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if b in sized:
        fmt = sized[b]
        n = struct.calcsize(fmt)
        return struct.unpack(fmt, data[pos:pos + n])[0], pos + n
    lengths = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I",
               0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if b in lengths:
        fmt = lengths[b]
        n = struct.calcsize(fmt)
        count = struct.unpack(fmt, data[pos:pos + n])[0]
        pos += n
        if b in (0xDC, 0xDD):
            return _msgpack_array(data, pos, count)
        if b in (0xDE, 0xDF):
            return _msgpack_map(data, pos, count)
        raw, pos = take(count)
        return (raw.decode() if b >= 0xD9 else bytes(raw)), pos
    raise ValueError(f"unsupported MessagePack type byte 0x{b:02x}")


def _msgpack_array(data: bytes, pos: int, count: int):
    out = []
    for _ in range(count):
        value, pos = _msgpack(data, pos)
        out.append(value)
    return out, pos


def _msgpack_map(data: bytes, pos: int, count: int):
    out = {}
    for _ in range(count):
        key, pos = _msgpack(data, pos)
        out[key], pos = _msgpack(data, pos)
    return out, pos


def code_object_metadata(binary: bytes) -> dict:
    """The NT_AMDGPU_METADATA note of an AMDGPU ELF code object (code object v3 and later)."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2:
        raise ValueError("not a 64-bit ELF code object")
    shoff, = struct.unpack_from("<Q", binary, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", binary, 0x3A)
    for i in range(shnum):
        sh = shoff + i * shentsize
        sh_type, = struct.unpack_from("<I", binary, sh + 4)
        if sh_type != 7:  # SHT_NOTE
            continue
        offset, size = struct.unpack_from("<QQ", binary, sh + 0x18)
        pos, end = offset, offset + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", binary, pos)
            name_at = pos + 12
            desc_at = name_at + (namesz + 3) // 4 * 4
            name = binary[name_at:name_at + namesz].rstrip(b"\x00")
            if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                return _msgpack(binary[desc_at:desc_at + descsz])[0]
            pos = desc_at + (descsz + 3) // 4 * 4
    raise ValueError("no AMDGPU metadata note in the code object")


def kernel_params(binary: bytes) -> dict[str, list[dict]]:
    """Kernel symbol -> its explicit parameters (offset, size, value_kind), hidden ones left out."""
    out = {}
    for kernel in code_object_metadata(binary).get("amdhsa.kernels", []):
        args = [{"offset": a.get(".offset"), "size": a.get(".size"), "kind": a.get(".value_kind")}
                for a in kernel.get(".args", [])]
        out[kernel.get(".name")] = [a for a in args if not str(a["kind"]).startswith("hidden_")]
    return out


def check_signature(kernel: str, args, params: list[dict]) -> None:
    """Raise RuntimeError when the recipe's arguments do not match the kernel's parameters."""
    if len(params) != len(args):
        raise RuntimeError(f"kernel {kernel!r} takes {len(params)} parameters, the recipe passes "
                           f"{len(args)}")
    offsets, _ = arg_layout([a.kind for a in args])
    for i, (param, arg, offset) in enumerate(zip(params, args, offsets)):
        size = ARG_FORMATS[arg.kind][1]
        if param["size"] != size or param["offset"] != offset:
            raise RuntimeError(
                f"kernel {kernel!r} parameter {i} is {param['size']} bytes at offset "
                f"{param['offset']}, the recipe passes {arg.kind} ({size} bytes at {offset})")


# --- the runtime (needs an AMD GPU, torch for ROCm and hip-python) ----------------------------
def _loaded_library(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.split()[-1] if "/" in line else ""
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def _share_torch_hip_runtime() -> str | None:
    """Make hip-python load the libamdhip64 torch already has (ROCM_PATH=<root of its lib dir>)."""
    torch.empty(1, device="cuda")  # torch loads and initialises its HIP runtime
    path = _loaded_library("libamdhip64.so")
    if path and "ROCM_PATH" not in os.environ and Path(path).parent.name == "lib":
        os.environ["ROCM_PATH"] = str(Path(path).parent.parent)
    return path


def _hip():
    from hip import hip
    return hip


def _check(hip, err, what: str) -> None:
    if err != hip.hipError_t.hipSuccess:
        try:
            _, text = hip.hipGetErrorString(err)
            text = str(text)
        except Exception:  # noqa: BLE001 - the name alone still says what went wrong
            text = ""
        raise RuntimeError(f"{what}: {getattr(err, 'name', err)} {text}".strip())


def _call(hip, what: str, fn, *args):
    out = fn(*args)
    _check(hip, out[0], what)
    return out[1] if len(out) == 2 else out[1:]


class Runtime:
    device = "cuda"

    def __init__(self, binary_path: str, limits: dict | None = None):
        torch.cuda.init()
        self.ordinal = torch.cuda.current_device()
        self._torch_hip = _share_torch_hip_runtime()
        self.hip = _hip()
        _check(self.hip, self.hip.hipSetDevice(self.ordinal)[0], "hipSetDevice")
        self._image = Path(binary_path).read_bytes()
        self._params = kernel_params(self._image)
        self._module = _call(self.hip, f"hipModuleLoadData({binary_path})",
                             self.hip.hipModuleLoadData, self._image)
        self._functions: dict[str, object] = {}
        self._flush_buffer = None
        self._flush_value = 0
        # the memory-side Infinity Cache (target limit infinity_cache_bytes): flushing L2 alone
        # leaves the data there
        self._memory_side_cache = int((limits or {}).get("infinity_cache_bytes", 256 << 20))
        self.stall = Stall()

    def function(self, name: str):
        if name not in self._functions:
            if name not in self._params:
                raise RuntimeError(f"kernel {name!r} is not in the code object (declare it "
                                   f'extern "C" __global__ with exactly this name)')
            self._functions[name] = _call(self.hip, f"hipModuleGetFunction({name})",
                                          self.hip.hipModuleGetFunction, self._module,
                                          name.encode())
        return self._functions[name]

    def launch(self, launches, buffers: dict) -> None:
        stream = self.hip.ihipStream_t.fromObj(torch.cuda.current_stream().cuda_stream)

        def pointer_of(name: str, offset: int = 0) -> int:
            tensor = buffers.get(name)
            if not isinstance(tensor, torch.Tensor):
                raise RuntimeError(f"no tensor buffer named {name!r}")
            return tensor_pointer(BoundArg("tensor", name, offset), tensor, f"buffer {name!r}")

        for launch in launches:
            fn = self.function(launch.kernel)
            check_signature(launch.kernel, launch.args, self._params[launch.kernel])
            args = pack_args(launch.kernel, launch.args, pointer_of)
            arg_buffer = ctypes.create_string_buffer(args, max(len(args), 1))
            arg_size = ctypes.c_size_t(len(args))
            config = (ctypes.c_void_p * 5)(
                self.hip.HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(arg_buffer),
                self.hip.HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(arg_size),
                self.hip.HIP_LAUNCH_PARAM_END)
            (err,) = self.hip.hipModuleLaunchKernel(fn, *launch.grid, *launch.block,
                                                    launch.shared_mem, stream, None, config)
            _check(self.hip, err, f"launching kernel {launch.kernel!r} grid={launch.grid} "
                                  f"block={launch.block} shared_mem={launch.shared_mem}")
            del arg_buffer, arg_size, config  # HIP copied the arguments at launch

    def synchronize(self) -> None:
        """Wait for all work on the device (every stream); asynchronous faults raise here."""
        _check(self.hip, self.hip.hipDeviceSynchronize()[0], "synchronize after kernel launches")
        torch.cuda.synchronize()

    def timer(self) -> Timer:
        # stop() waits for the whole device: work hidden on another stream is waited for
        return Timer(self.stall, self.synchronize)

    def flush_cache(self) -> None:
        """Evict L2 and the memory-side Infinity Cache by writing twice their size."""
        if self._flush_buffer is None:
            props = torch.cuda.get_device_properties(self.ordinal)
            l2 = int(getattr(props, "L2_cache_size", 0) or (32 << 20))
            size = 2 * (l2 + self._memory_side_cache)
            self._flush_buffer = torch.empty(size, dtype=torch.uint8, device=f"cuda:{self.ordinal}")
        self._flush_value = (self._flush_value + 1) & 0x7F
        self._flush_buffer.fill_(self._flush_value)

    def fingerprint(self) -> dict:
        return fingerprint(self.hip, self._torch_hip)

    def close(self) -> None:
        if self._module is not None:
            self.hip.hipModuleUnload(self._module)
            self._module = None
            self._functions.clear()


def fingerprint(hip=None, library: str | None = None) -> dict:
    """What identifies the hardware and software a verification ran on (no per-board serials)."""
    hip = hip or _hip()
    ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    driver = _call(hip, "hipDriverGetVersion", hip.hipDriverGetVersion)
    runtime = _call(hip, "hipRuntimeGetVersion", hip.hipRuntimeGetVersion)
    try:
        from importlib.metadata import version
        hip_python = version("hip-python")
    except Exception:  # noqa: BLE001
        hip_python = "unknown"
    return {
        "vendor": "amd",
        "device": torch.cuda.get_device_name(ordinal),
        "arch": str(getattr(props, "gcnArchName", "unknown")),
        "cu_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "driver": _amdgpu_driver_version(),
        "hip_driver_version": int(driver),
        "hip_runtime_version": int(runtime),
        "hip_library": os.path.basename(library) if library else "unknown",
        "torch": torch.__version__,
        "torch_hip": getattr(torch.version, "hip", None),
        "hip_python": hip_python,
    }


def _amdgpu_driver_version() -> str:
    """The amdgpu kernel module version (DKMS builds set it; in-tree kernels may not)."""
    try:
        return Path("/sys/module/amdgpu/version").read_text().strip() or "unknown"
    except OSError:
        return "unknown"
