"""In-process launchers: a verified binary loaded into the caller's process and its launch recipe
bound to a call's shapes, once per shape (the hot path then only fills pointers and launches).

Standalone, like signature.py: ctypes, struct, cuda.bindings for CUDA (imported when a cubin is
first loaded), regen's expression parser and dtype table and its driver helpers (regen/cudadrv.py,
shared with the judge's runtime), which `regen export` ships with it.

CUDA: the cubin is loaded into torch's primary context of the tensors' device and launched with
the driver API on torch's current stream, exactly as the judge's runtime does
(regen/runtimes/cuda.py), so launches order with torch's work and are captured by CUDA graphs.
CPU: the shared library is loaded with ctypes and its extern "C" functions are called on the
tensors' memory, in this process. That is a trust decision (the judge itself never does it; it
runs host code in a sandboxed process of its own): regen.ops only ever loads a binary whose digest
is the one a passing verification record names, and the user asked for it by calling the op.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading

from ..cudadrv import TensorMapCache
from ..cudadrv import call as _call
from ..cudadrv import check as _check
from ..cudadrv import param_sizes
from ..dtypes import itemsize, short
from ..expr import evaluate
from ..tensormap import PARAM_BYTES, TensorMapError, bind_map  # noqa: F401 - dispatch's too

ARG_TYPES = ("int32", "int64", "float32", "float64")
_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
           "float64": ctypes.c_double}
# "view": a buffer's pointer plus a byte offset (a recipe's {tensor: NAME, offset: ELEMENTS},
# what unfused plans over layers pass), value (name, byte offset); "tensor" is the offset-0 case
_PACK = {"tensor": "Q", "view": "Q", "int32": "i4x", "int64": "q", "float32": "f4x",
         "float64": "d"}
_PARAM_SIZES = {"tensor": 8, "view": 8, "tensormap": PARAM_BYTES, "int32": 4, "int64": 8,
                "float32": 4, "float64": 8}
_POINTERS = ("tensor", "view")
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
DEFAULT_DYNAMIC_SHARED = 48 * 1024


class NoLaunch(ValueError):
    """The recipe has nothing to run for this call (every `when` is false, or an empty grid)."""


def _split_typed(arg: str):
    head, sep, rest = arg.partition(":")
    if sep and head.strip() in ARG_TYPES:
        return head.strip(), rest.strip()
    return None, arg


def bind_recipe(recipe: dict, env: dict, buffers, dtype: str, shapes: dict | None = None
                ) -> list[tuple]:
    """The recipe evaluated for one call, as regen.recipe.bind does for the judge:
    [(kernel, grid, block, shared_mem, [(kind, value), ...]), ...] where kind "tensor" carries a
    buffer name, "view" (buffer name, byte offset) and "tensormap" a
    regen.tensormap.BoundTensorMap; repeat groups are unrolled. `recipe` is the plain form of a
    launch.yaml (Recipe.model_dump()); `buffers` maps each buffer name to its dtype (a set of
    names does where no tensor map or view is passed), `shapes` each to its shape."""
    out: list = []
    maps = {m["name"]: m for m in recipe.get("tensor_maps") or []}
    timeline = (recipe.get("timeline") or {}).get("buffer")
    if timeline is not None:   # never profiled here: no records
        env = {**env, "timeline_slots": 0}
    bind = _Binder(maps, buffers, shapes, timeline, dtype)
    for item in recipe["launches"]:
        if "repeat" in item:
            count = evaluate(item["repeat"], env)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise NoLaunch(f"repeat {item['repeat']!r} gives {count!r}")
            for i in range(count):
                inner = {**env, item["index"]: i}
                bind.iteration_maps = {}   # a map's expressions may use the index
                out.extend(x for x in (bind.launch(launch, inner) for launch in item["launches"])
                           if x is not None)
        else:
            bind.iteration_maps = bind.top_maps
            launch = bind.launch(item, env)
            if launch is not None:
                out.append(launch)
    if not out:
        raise NoLaunch("no launch of the recipe applies (every `when` is false)")
    return out


class _Binder:
    """Binds one launch of a recipe to a call's symbols (what the launches of one call share)."""

    def __init__(self, maps, buffers, shapes, timeline, dtype):
        self.maps, self.buffers, self.shapes = maps, buffers, shapes
        self.timeline, self.dtype = timeline, dtype
        self.top_maps: dict = {}
        self.iteration_maps: dict = self.top_maps

    def launch(self, launch: dict, env: dict):
        when = launch.get("when")
        if when is not None and not evaluate(when, env):
            return None
        buffers = self.buffers
        args = []
        for a in launch["args"]:
            if isinstance(a, dict):   # a view: the buffer's pointer `offset` elements in
                name, offset = a["tensor"], evaluate(a.get("offset", 0), env)
                if not isinstance(offset, int) or isinstance(offset, bool):
                    raise NoLaunch(f"the offset of a view of {name!r} gives {offset!r}, not an "
                                   "integer")
                if offset == 0:
                    args.append(("tensor", name))
                    continue
                if not hasattr(buffers, "get"):
                    raise ValueError(f"a view of {name!r} needs the buffers' dtypes")
                shape = None if self.shapes is None else self.shapes.get(name)
                numel = None if shape is None else _product(shape)
                if offset < 0 or (numel is not None and offset >= numel):
                    raise NoLaunch(f"a view of {name!r} at offset {offset} is outside its "
                                   f"{numel} elements")
                args.append(("view", (name, offset * itemsize(buffers.get(name)))))
                continue
            if isinstance(a, str) and a in buffers:
                args.append(("tensor", a))
                continue
            if a == self.timeline:   # the instrumentation contract's buffer: null unless profiled
                args.append(("int64", 0))
                continue
            if isinstance(a, str) and a in self.maps:
                bound = self.iteration_maps
                if a not in bound:
                    decl = self.maps[a]
                    if not hasattr(buffers, "get"):
                        raise ValueError(f"tensor map {a!r} needs the buffers' dtypes")
                    bound[a] = bind_map(decl, env, buffers.get(decl["tensor"]),
                                        None if self.shapes is None
                                        else self.shapes.get(decl["tensor"]))
                args.append(("tensormap", bound[a]))
                continue
            typ, text = _split_typed(a) if isinstance(a, str) else (None, a)
            val = evaluate(text, env)
            if typ is None:
                typ = "float32" if isinstance(val, float) else "int64"
            args.append((typ, float(val) if typ.startswith("float") else int(val)))
        grid = tuple(int(evaluate(d, env)) for d in launch.get("grid", [1, 1, 1]))
        block = tuple(int(evaluate(d, env)) for d in launch.get("block", [1, 1, 1]))
        grid, block = (grid + (1, 1, 1))[:3], (block + (1, 1, 1))[:3]
        return (launch["kernel"].replace("{dtype}", short(self.dtype)), grid, block,
                int(evaluate(launch.get("shared_mem", 0), env)), args)


def buffers_used(launches: list[tuple]) -> set[str]:
    """The buffers the bound launches pass (plainly, as a view or under a tensor map)."""
    used = set()
    for *_launch, args in launches:
        for kind, v in args:
            used.add(v if kind == "tensor" else v[0] if kind == "view" else
                     v.tensor if kind == "tensormap" else None)
    used.discard(None)
    return used


def _product(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _pointer_slots(args, index) -> list[tuple[int, int, int]]:
    """(argument position, pointer index, byte offset) of each pointer argument."""
    return [(i, index[v], 0) if k == "tensor" else (i, index[v[0]], v[1])
            for i, (k, v) in enumerate(args) if k in _POINTERS]


def workspace(recipe: dict, env: dict) -> list[tuple[str, str, list[int], bool]]:
    """(name, dtype, shape, zero) of each scratch buffer the recipe asks for (dtype T: the
    call's)."""
    return [(w["name"], env["T"] if w["dtype"] == "T" else w["dtype"],
             [int(evaluate(d, env)) for d in w["shape"]], bool(w.get("zero")))
            for w in recipe.get("workspace", [])]


def _scalar_checked(kernel: str, i: int, kind: str, value):
    if kind in _INT_RANGE:
        low, high = _INT_RANGE[kind]
        if not low <= value <= high:
            raise ValueError(f"kernel {kernel!r} argument {i}: {value} does not fit in {kind}")
    return value


# -- CPU --------------------------------------------------------------------------------------
class CpuLibrary:
    """A host artifact (shared library) loaded into this process."""

    device_type = "cpu"

    def __init__(self, path: str):
        self.path = path
        self._lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        self._functions: dict[str, tuple] = {}

    def _function(self, name: str, kinds: tuple):
        fn_kinds = self._functions.get(name)
        if fn_kinds is None:
            try:
                fn = getattr(self._lib, name)
            except AttributeError:
                raise RuntimeError(f"kernel {name!r} is not exported by {self.path}") from None
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p if k in _POINTERS else _CTYPES[k] for k in kinds]
            self._functions[name] = fn_kinds = (fn, kinds)
        if fn_kinds[1] != kinds:
            raise RuntimeError(f"kernel {name!r} is called with argument kinds {kinds} and "
                               f"{fn_kinds[1]} by one recipe")
        return fn_kinds[0]

    def plan(self, launches: list[tuple], index: dict[str, int], device_index=None):
        """A callable(*pointers) making the recipe's calls; `index` maps a buffer name to the
        position of its data pointer among the callable's arguments."""
        calls = []
        for kernel, _grid, _block, _shared, args in launches:
            kinds = tuple("tensor" if k == "view" else k for k, _ in args)   # a pointer either way
            fn = self._function(kernel, kinds)
            template = [None if k in _POINTERS else _CTYPES[k](_scalar_checked(kernel, i, k, v))
                        for i, (k, v) in enumerate(args)]
            calls.append((fn, template, tuple(_pointer_slots(args, index))))

        def run(*ptrs):
            for fn, template, pointers in calls:
                values = list(template)
                for pos, b, offset in pointers:
                    values[pos] = ptrs[b] + offset
                fn(*values)
        return run


# -- CUDA -------------------------------------------------------------------------------------
def _driver():
    from cuda.bindings import driver

    return driver


def _raw_stream_getter():
    """device index -> the handle of torch's current stream there (what torch.compile's own
    generated code calls: a C function, not a Stream object per call)."""
    import torch

    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return get if get is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)


def _prefix_filler(pack, slots, pick, one: bool):
    """Fill the leading pointer slots from the call's pointers in one pack_into."""
    if one:
        return lambda ptrs: pack(slots, 0, pick(ptrs))
    return lambda ptrs: pack(slots, 0, *pick(ptrs))


def _slot_filler(slots, where: tuple):
    """Fill pointer slots anywhere in the argument list, one pack_into each; where: (slot byte
    position, pointer index, byte offset added to the pointer)."""
    pack = struct.Struct("<Q").pack_into

    def fill(ptrs):
        for at, b, offset in where:
            pack(slots, at, ptrs[b] + offset)
    return fill


def _current_device_getter():
    """() -> torch's current CUDA device index (a C function of torch)."""
    import torch

    return torch._C._cuda_getDevice


class CudaLibrary:
    """A cubin, loaded once per device into torch's primary context of that device."""

    device_type = "cuda"

    def __init__(self, image: bytes, name: str = "cubin"):
        self.image, self.name = image, name
        self._modules: dict[int, tuple] = {}   # device index -> (context, module)
        self._functions: dict[tuple, object] = {}
        self._local = threading.local()  # .devices: those whose context this thread made current
        self._tensor_maps = TensorMapCache()

    def _module(self, index: int):
        if index not in self._modules:
            import torch

            driver = _driver()
            with torch.cuda.device(index):
                torch.empty(1, device=f"cuda:{index}")  # torch's context exists on this device
                _call("cuInit", driver.cuInit, 0)
                dev = _call("cuDeviceGet", driver.cuDeviceGet, index)
                ctx = _call("cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain, dev)
                _check(driver.cuCtxPushCurrent(ctx)[0], "cuCtxPushCurrent")
                try:
                    module = _call(f"cuModuleLoadData({self.name})", driver.cuModuleLoadData,
                                   self.image)
                finally:
                    driver.cuCtxPopCurrent()
            self._modules[index] = (ctx, module)
        return self._modules[index]

    def _function(self, index: int, name: str, kinds: tuple, shared: int):
        driver = _driver()
        key = (index, name)
        if key not in self._functions:
            _ctx, module = self._module(index)
            err, fn = driver.cuModuleGetFunction(module, name.encode())
            if err == driver.CUresult.CUDA_ERROR_NOT_FOUND:
                raise RuntimeError(f"kernel {name!r} is not in {self.name}")
            _check(err, f"cuModuleGetFunction({name})")
            self._functions[key] = fn
            sizes = param_sizes(fn)
            given = [_PARAM_SIZES[k] for k in kinds]
            if sizes is not None and sizes != given:
                raise RuntimeError(f"kernel {name!r} takes parameters of {sizes} bytes, the recipe "
                                   f"passes {given}")
        fn = self._functions[key]
        if shared > DEFAULT_DYNAMIC_SHARED:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver.cuFuncSetAttribute(fn, attr, shared)[0],
                   f"kernel {name!r}: allowing {shared} bytes of dynamic shared memory")
        return fn

    def _ensure_context(self, index: int) -> None:
        """The calling thread's current context is torch's primary context of `index` (a thread
        that has not used the driver API before may have none current); once per thread (a
        thread-local set, so a new thread reusing a dead one's id is not mistaken for it)."""
        done = getattr(self._local, "devices", None)
        if done is None:
            done = self._local.devices = set()
        if index in done:
            return
        driver = _driver()
        ctx = self._modules[index][0]
        current = _call("cuCtxGetCurrent", driver.cuCtxGetCurrent)
        if int(current) != int(ctx):
            _check(driver.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
        done.add(index)

    def _mapped_launch(self, fn, grid, block, shared, kernel, args, index):
        """A prepared launch passing tensor maps: parameters at their own offsets (a map is 128
        bytes aligned to 64), each map encoded over the call's pointer of its buffer (memoised
        on the address and the map's figures, regen/cudadrv.TensorMapCache)."""
        offsets, end = [], 0
        for kind, _v in args:
            size = _PARAM_SIZES[kind]
            align = 64 if kind == "tensormap" else 8
            end = -(-end // align) * align
            offsets.append(end)
            end += max(size, 8)
        room = ctypes.create_string_buffer(end + 64)
        base = ctypes.addressof(room) + (-ctypes.addressof(room)) % 64
        params = (ctypes.c_void_p * len(args))(*[base + o for o in offsets])
        pack = struct.pack_into
        skew = base - ctypes.addressof(room)
        for i, (kind, v) in enumerate(args):
            if kind not in ("tensor", "view", "tensormap"):
                pack("<" + _PACK[kind], room, skew + offsets[i], _scalar_checked(kernel, i, kind, v))
        pointers = tuple((skew + offsets[i], b, off) for i, b, off in _pointer_slots(args, index))
        maps = tuple((base + offsets[i], index[v.tensor], v) for i, (k, v) in enumerate(args)
                     if k == "tensormap")
        cache = self._tensor_maps
        memmove = ctypes.memmove

        def fill(ptrs):
            for at, b, offset in pointers:
                pack("<Q", room, at, ptrs[b] + offset)
            for where, b, bound in maps:
                memmove(where, cache.get(bound, ptrs[b]), PARAM_BYTES)
        return (fn, *grid, *block, shared, fill, ctypes.addressof(params), kernel, (room, params))

    def plan(self, launches: list[tuple], index: dict[str, int], device_index: int):
        """A callable(*pointers) launching the recipe on the current stream of `device_index`.

        Each launch's parameters live in one buffer of 8-byte slots whose kernelParams array is
        built once; the scalars (fixed for a plan) are packed into it here, so a call packs only
        the tensor pointers: one struct.pack_into when they are the leading arguments (the usual
        recipe), one per pointer otherwise. Per call besides: the device check, the thread's
        context (a lookup after the thread's first call), the stream handle and cuLaunchKernel
        through cuda.bindings (a third of a microsecond of Python, less than a ctypes call)."""
        import operator

        driver = _driver()
        launch_kernel = driver.cuLaunchKernel
        success = driver.CUresult.CUDA_SUCCESS
        prepared = []
        for kernel, grid, block, shared, args in launches:
            if 0 in grid or 0 in block:
                raise NoLaunch(f"kernel {kernel!r} would launch an empty grid {grid} x {block}")
            kinds = tuple(k for k, _ in args)
            fn = self._function(device_index, kernel, kinds, shared)
            if "tensormap" in kinds:
                prepared.append(self._mapped_launch(fn, grid, block, shared, kernel, args, index))
                continue
            slots = ctypes.create_string_buffer(max(8 * len(args), 8))
            params = (ctypes.c_void_p * max(len(args), 1))(
                *[ctypes.addressof(slots) + 8 * i for i in range(len(args))])
            values = [0 if k in _POINTERS else _scalar_checked(kernel, i, k, v)
                      for i, (k, v) in enumerate(args)]
            struct.pack_into("<" + "".join(_PACK[k] for k in kinds), slots, 0, *values)
            tensors = _pointer_slots(args, index)
            leading = bool(tensors) and not any(o for _i, _b, o in tensors) and \
                [i for i, _b, _o in tensors] == list(range(len(tensors)))
            if leading and [b for _i, b, _o in tensors] == list(range(len(index))) \
                    == sorted(set(index.values())):
                # the kernel takes every pointer of the call, in the call's order, none aliased:
                # they are packed as they come (fill(*ptrs))
                fill = functools.partial(struct.Struct("<" + "Q" * len(tensors)).pack_into, slots, 0)
                fill.splat = True
            elif leading:
                fill = _prefix_filler(struct.Struct("<" + "Q" * len(tensors)).pack_into, slots,
                                      operator.itemgetter(*[b for _i, b, _o in tensors]),
                                      len(tensors) == 1)
            else:
                fill = _slot_filler(slots, tuple((8 * i, b, o) for i, b, o in tensors))
            prepared.append((fn, *grid, *block, shared, fill, ctypes.addressof(params), kernel,
                             (slots, params)))
        lock = threading.Lock()
        acquire, release = lock.acquire, lock.release
        raw_stream = _raw_stream_getter()
        current_device = _current_device_getter()
        local = self._local
        streams: dict = {}  # raw handle -> CUstream, as the judge's runtime passes it

        def new_stream(raw):  # a stream (or this thread's device) seen for the first time
            self._ensure_context(device_index)
            stream = streams[raw] = driver.CUstream(raw)
            return stream

        def on_device(ptrs):  # tensors on another GPU than the current one
            import torch

            with torch.cuda.device(device_index):
                return run(*ptrs)

        if len(prepared) == 1 and getattr(prepared[0][8], "splat", False):
            # the usual recipe: one launch taking the call's pointers in order; one frame, no loop
            (fn, gx, gy, gz, bx, by, bz, shared, fill, params, kernel, _) = prepared[0]

            def run(*ptrs):
                if current_device() != device_index:
                    return on_device(ptrs)
                ready = getattr(local, "devices", None)
                stream = streams.get(raw_stream(device_index))
                if stream is None or ready is None or device_index not in ready:
                    stream = new_stream(raw_stream(device_index))
                acquire()  # the slots are shared by every call of this shape
                try:
                    fill(*ptrs)
                    (err,) = launch_kernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
                finally:
                    release()
                if err != success:
                    _check(err, f"launching kernel {kernel!r} grid={(gx, gy, gz)} "
                                f"block={(bx, by, bz)}")
            run.keep_alive = prepared
            return run

        # each launch with whether its fill takes the call's pointers unpacked (fill(*ptrs))
        steps = tuple((entry, getattr(entry[8], "splat", False)) for entry in prepared)

        def run(*ptrs):
            if current_device() != device_index:
                return on_device(ptrs)
            ready = getattr(local, "devices", None)
            stream = streams.get(raw_stream(device_index))
            if stream is None or ready is None or device_index not in ready:
                stream = new_stream(raw_stream(device_index))
            acquire()  # the slots are shared by every call of this shape
            try:
                for (fn, gx, gy, gz, bx, by, bz, shared, fill, params, kernel, _), splat in steps:
                    if splat:
                        fill(*ptrs)
                    else:
                        fill(ptrs)
                    (err,) = launch_kernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
                    if err != success:
                        _check(err, f"launching kernel {kernel!r} grid={(gx, gy, gz)} "
                                    f"block={(bx, by, bz)}")
            finally:
                release()
        run.keep_alive = prepared
        return run

