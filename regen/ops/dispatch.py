"""One torch.library custom op per spec: the call path, its per-shape plan cache, the fallback and
the fake (meta) implementation torch.compile and CUDA graphs need.

Standalone, like signature.py and launch.py (`regen export` ships it): what a call runs comes from
a *resolver* object, which regen.ops builds from the project and the cache (regen/ops/library.py)
and an exported package from the verification record it carries:

    resolver.resolve(kernel, device_type, device_index) -> Resolution
    resolver.fallback(kernel) -> callable(inputs: dict, case) -> dict | None

The hot path: one dict lookup keyed by (params, each tensor's shape, dtype, device, contiguity);
on a hit, an alignment check per tensor, the outputs allocated, the bound launch run. Everything
else (validation against the signature, choosing the column, binding the recipe, loading the
binary) happens once per key, in _plan(), and only a call that went through torch's dispatcher
makes a plan. The Python function per kernel (python_function) skips the dispatcher when it would
only have routed the call to impl() and the plan already exists: eager mode, plain tensors, no
autograd to record (backward or forward-mode), no torch function/dispatch mode, functorch
transform, jit tracer or profiler watching.
Anything else takes torch.ops.<namespace>.<kernel>, so validation and the verified-only rule are
the same on both paths: a plan is made by impl() and nowhere else.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

from .launch import NoLaunch, TensorMapError, bind_recipe, buffers_used, workspace
from .signature import ALIGN, Signature, SignatureError, shape_eval

MAX_PLANS = 4096  # per op: shapes seen; beyond it the cache starts again (dynamic shapes)


@contextlib.contextmanager
def _autograd_for_baseline():
    """Grad mode on and autograd dispatch back for a baseline: a backward op's baseline
    differentiates leaves of its own (torch.autograd.grad), while autograd calls a backward op
    with grad mode off and a custom op's implementation runs below autograd's dispatch key."""
    import torch

    force = getattr(torch._C, "_ForceDispatchKeyGuard", None)
    if force is None:   # a torch without the guard: grad mode only (forward baselines need no more)
        with torch.enable_grad():
            yield
        return
    keys = torch._C.DispatchKey
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for k in (keys.AutogradFunctionality, keys.AutogradOther, keys.AutogradNestedTensor):
        excluded = excluded.remove(k)
    with torch.enable_grad(), force(torch._C._dispatch_tls_local_include_set(), excluded):
        yield


class RegenOpsWarning(UserWarning):
    """An op ran something other than a verified kernel: torch's baseline, or (opted into) an
    unverified artifact."""


_WARNED: set = set()


def warn_once(key, message: str) -> None:
    """One warning per (kernel, reason) per process."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RegenOpsWarning, stacklevel=3)


def reset_warnings() -> None:
    """Warn again (what runs may have changed: regen.ops.configure)."""
    _WARNED.clear()


@dataclass
class Resolution:
    """What a kernel runs on one device: a loaded binary and its recipe, or why not."""

    column: str | None = None        # "rmsnorm@h200"
    library: object | None = None    # launch.CpuLibrary / launch.CudaLibrary
    recipe: dict | None = None
    reason: str | None = None        # set when there is no library: why (status wording)
    note: str | None = None          # a warning to give once when it is used (unverified opt-in)


class KernelOp:
    """The implementation registered for CPU and CUDA, and the fake one, of one spec's op."""

    def __init__(self, signature: Signature, resolver, namespace: str, label: str | None = None):
        import torch

        self.torch = torch
        self.sig, self.resolver, self.namespace = signature, resolver, namespace
        self.name = signature.name
        self.label = f"{label or namespace}.{signature.name}"  # how messages name the op
        self._n = len(signature.inputs)
        self._input_names = [t["name"] for t in signature.inputs]
        self._single = len(signature.outputs) == 1
        self._defaults = tuple(p.get("default") for p in signature.params)
        self._plans: dict = {}

    # -- the call path -----------------------------------------------------------------------
    def params(self, args) -> tuple:
        """A call's params as torch hands them to impl(): without trailing ones equal to their
        default (so rmsnorm(x, w) and rmsnorm(x, w, 1e-6) share one plan on both paths)."""
        params = args[self._n:]
        while params and params[-1] == self._defaults[len(params) - 1]:
            params = params[:-1]
        return params

    def key(self, args) -> tuple:
        """The plan cache's key of a call: its params, then per tensor shape, dtype, device and
        whether it is contiguous (a non-contiguous tensor's key leads to _plan's error)."""
        n = self._n
        params = args[n:]
        if params:
            params = self.params(args)
        if n == 1:
            x = args[0]
            return (params, x.shape, x.dtype, x.device, x.is_contiguous())
        if n == 2:
            x, y = args[0], args[1]
            return (params, x.shape, x.dtype, x.device, x.is_contiguous(),
                    y.shape, y.dtype, y.device, y.is_contiguous())
        key = [params]
        for t in args[:n]:
            key += (t.shape, t.dtype, t.device, t.is_contiguous())
        return tuple(key)

    def impl(self, *args):
        n = self._n
        tensors = args[:n]
        key = self.key(args)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(tensors, args[n:], key)
        return plan(tensors)

    def _check_contiguous(self, tensors):
        for name, t in zip(self._input_names, tensors):
            if not t.is_contiguous():
                raise SignatureError(
                    f"{self.label}: {name} is not contiguous (strides {t.stride()} for shape "
                    f"{list(t.shape)}); the spec's layout is contiguous row-major: pass "
                    f"{name}.contiguous()")

    def fake(self, *args):
        """Output shapes and dtypes from the signature alone (meta and fake tensors, symbolic
        sizes): what torch.compile traces and CUDA graph capture sizes."""
        n = self._n
        tensors = args[:n]
        env = self.sig.bind(tensors, args[n:])
        torch = self.torch
        outs = [tensors[0].new_empty(shape, dtype=getattr(torch, dt))
                for shape, dt in zip(self.sig.output_shapes(env), self.sig.output_dtypes(env))]
        if not outs:  # only in-place outputs: the op returns nothing
            return None
        return outs[0] if self._single else tuple(outs)

    # -- plans, once per key -------------------------------------------------------------------
    def _plan(self, tensors, params, key):
        self._check_contiguous(tensors)
        env = self.sig.bind(tensors, params)
        device = tensors[0].device
        res = self.resolver.resolve(self.name, device.type, device.index)
        if res.library is None:
            plan = self._fallback_plan(env, device, (self.name, res.reason), res.reason)
        else:
            try:
                plan = self._kernel_plan(env, device, res)
            except (NoLaunch, TensorMapError) as exc:  # no launch, or none whose maps bind
                why = f"{res.column}: {exc} for {self.sig.describe(env)}"
                plan = self._fallback_plan(env, device, (self.name, res.column, "no-launch"), why)
            else:
                if res.note:
                    warn_once((self.name, res.column, "note"), res.note)
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        self._plans[key] = plan
        return plan

    def _kernel_plan(self, env, device, res: Resolution):
        """The callable(tensors) of one key: everything that does not depend on the tensors'
        addresses is decided here, so a call allocates its outputs (and the scratch buffers the
        chosen launches name; a variant that needs none allocates none), checks alignment and
        launches."""
        torch = self.torch
        sig = self.sig
        # each output allocated like an input of its shape and dtype where there is one
        # (empty_like is the cheapest allocation torch has), else with torch.empty
        inputs = [(list(shape), dt) for shape, dt in zip(
            [[shape_eval(d, env) for d in t["shape"]] for t in sig.inputs],
            [env["T"] if t["dtype"] == "T" else t["dtype"] for t in sig.inputs])]
        outputs = []
        for shape, dt in zip(sig.output_shapes(env), sig.output_dtypes(env)):
            like = next((i for i, spec in enumerate(inputs) if spec == (list(shape), dt)), None)
            outputs.append((like, shape, getattr(torch, dt)))
        scratch_names = [w[0] for w in workspace(res.recipe, env)]
        names = [*self._input_names, *(t["name"] for t in sig.outputs), *scratch_names]
        # each buffer's dtype and shape, for the tensor maps a recipe may pass
        dtypes = dict(zip(self._input_names, (dt for _shape, dt in inputs)))
        shapes = dict(zip(self._input_names, (shape for shape, _dt in inputs)))
        for t, shape, dt in zip(sig.outputs, sig.output_shapes(env), sig.output_dtypes(env)):
            dtypes[t["name"]], shapes[t["name"]] = dt, list(shape)
        for name, dt, shape, _zero in workspace(res.recipe, env):
            dtypes[name], shapes[name] = dt, shape
        launches = bind_recipe(res.recipe, env, dtypes, env["T"], shapes)
        used = buffers_used(launches)
        scratch = [(shape, getattr(torch, dt), zero) for name, dt, shape, zero in
                   workspace(res.recipe, env) if name in used]
        names = [*names[:len(names) - len(scratch_names)],
                 *(name for name in scratch_names if name in used)]
        index = {name: i for i, name in enumerate(names)}
        for out in sig.inplace:  # an output written over an input is that input's buffer
            index[out["name"]] = index[out["inplace_of"]]
        run = res.library.plan(launches, index, device.index)
        align = ALIGN[device.type]
        empty, empty_like, zeros, single = torch.empty, torch.empty_like, torch.zeros, self._single
        outputs = [(like, tuple(shape), dt) for like, shape, dt in outputs]
        misaligned = []  # the fallback plan, made on the first misaligned call

        if single and not scratch and outputs[0][0] == 0 and self._n == 1:
            def kernel(tensors):  # one input, one output shaped like it (softmax, swiglu, ...)
                x = tensors[0]
                p = x.data_ptr()
                if p % align:
                    return self._misaligned(misaligned, env, device, align)(tensors)
                out = empty_like(x)
                run(p, out.data_ptr())
                return out
        elif single and not scratch and outputs[0][0] is not None:
            like = outputs[0][0]

            def kernel(tensors):  # the common case: one output shaped like an input
                ptrs = [t.data_ptr() for t in tensors]
                for p in ptrs:
                    if p % align:
                        return self._misaligned(misaligned, env, device, align)(tensors)
                out = empty_like(tensors[like])
                run(*ptrs, out.data_ptr())
                return out
        else:
            def kernel(tensors):
                ptrs = [t.data_ptr() for t in tensors]
                for p in ptrs:
                    if p % align:
                        return self._misaligned(misaligned, env, device, align)(tensors)
                first = tensors[0]
                outs = [empty_like(tensors[like]) if like is not None else
                        first.new_empty(shape, dtype=dt) for like, shape, dt in outputs]
                ptrs += [o.data_ptr() for o in outs]
                if scratch:
                    ws = [(zeros if zero else empty)(shape, dtype=dt, device=device)
                          for shape, dt, zero in scratch]
                    ptrs += [w.data_ptr() for w in ws]
                run(*ptrs)
                return outs[0] if single else tuple(outs) if outs else None

        kernel.column = res.column
        return kernel

    def _misaligned(self, made: list, env, device, align: int):
        if not made:
            made.append(self._fallback_plan(
                env, device, (self.name, "misaligned"),
                f"an input is not {align}-byte aligned (a view at an offset); the kernel was "
                "verified on aligned buffers only"))
        return made[0]

    def _fallback_plan(self, env, device, warn_key, reason: str):
        """torch's baseline (the oracle's baseline()) for this key, warned about once."""
        from types import SimpleNamespace

        torch = self.torch
        fn = self.resolver.fallback(self.name)
        op = self.label
        if fn is None:
            def refuse(_tensors):
                raise RuntimeError(f"{op}: no verified kernel for {device} ({reason}) and no "
                                   "fallback in this package")
            return refuse
        warn_once(warn_key, f"{op} runs torch's baseline on {device.type}: {reason}")
        sig = self.sig
        case = SimpleNamespace(sizes=sig.sizes(env), dtype=getattr(torch, env["T"]),
                               params={p["name"]: env[p["name"]] for p in sig.params},
                               dist="normal", device=str(device), name=f"{op}({sig.describe(env)})")
        shapes, dtypes = sig.output_shapes(env), sig.output_dtypes(env)
        names, single = self._input_names, self._single
        inplace = [(out["name"], names.index(out["inplace_of"])) for out in sig.inplace]

        def fallback(tensors):
            with _autograd_for_baseline():
                got = fn(dict(zip(names, tensors)), case)
            outs = []
            for spec, shape, dt in zip(sig.outputs, shapes, dtypes):
                out = got[spec["name"]]
                want = getattr(torch, dt)
                if out.dtype != want:
                    out = out.to(want)
                if list(out.shape) != list(shape):
                    raise RuntimeError(f"{op}: the baseline returned {spec['name']} of shape "
                                       f"{list(out.shape)}, the signature says {list(shape)}")
                # a custom op's outputs may alias neither its inputs nor each other
                base = out.untyped_storage().data_ptr()
                if any(base == t.untyped_storage().data_ptr() for t in (*tensors, *outs)):
                    out = out.clone()
                outs.append(out.contiguous())
            for name, i in inplace:  # what the kernel would have written over an input
                got_inplace = got[name]
                if got_inplace.data_ptr() != tensors[i].data_ptr():
                    tensors[i].copy_(got_inplace)
            return outs[0] if single else tuple(outs) if outs else None

        fallback.column = None
        return fallback

    def plan_for(self, *args):
        """The plan a call with these arguments runs (tests, `regen.ops.explain`)."""
        n = self._n
        key = self.key(args)
        return self._plans.get(key) or self._plan(args[:n], args[n:], key)


def register(namespace: str, ops: list[KernelOp]):
    """Define `torch.ops.<namespace>.<kernel>` for every op: the schema, the CPU and CUDA
    implementations, the fake one. Returns the Library (keep it alive: dropping it unregisters)."""
    import torch

    lib = torch.library.Library(namespace, "DEF")
    for op in ops:
        lib.define(op.sig.schema())
        lib.impl(op.name, op.impl, "CPU")
        lib.impl(op.name, op.impl, "CUDA")
        torch.library.register_fake(f"{namespace}::{op.name}", op.fake, lib=lib)
    return lib


def python_function(op: KernelOp, module: str, summary: str = ""):
    """`module.<kernel>(x, weight, eps=1e-06)`, with the spec's signature for help() and IDEs.

    It calls the op's overload (torch's dispatcher: autograd, torch.compile, modes, profiling)
    unless the call is one the dispatcher would only hand to impl() unchanged and impl() has
    planned it already; then it runs that plan directly. Which calls those are is decided per
    call by cheap checks, and dynamo sees is_compiling() true, so a traced call is always the
    overload."""
    import torch

    overload = getattr(getattr(torch.ops, op.namespace), op.name).default
    sig = op.sig
    plans, key_of, n = op._plans, op.key, op._n  # op._plans is only ever cleared in place
    Tensor = torch.Tensor
    compiling = torch.compiler.is_compiling
    grad_enabled = torch._C.is_grad_enabled
    function_mode = torch._C._is_torch_function_mode_enabled
    dispatch_modes = torch._C._len_torch_dispatch_stack
    transforms = torch._C._functorch.peek_interpreter_stack
    tracing = torch._C._get_tracing_state
    import torch.autograd.forward_ad as forward_ad
    import torch.autograd.profiler as profiler

    if n == 1 and not sig.params:  # softmax, swiglu: the key inlined (KernelOp.key's, no params)
        def call(*args, **kwargs):
            if (not kwargs and len(args) == 1 and not compiling() and not function_mode()
                    and not dispatch_modes() and transforms() is None and tracing() is None
                    and not profiler._is_profiler_enabled and forward_ad._current_level < 0):
                x = args[0]
                if type(x) is Tensor and not (x.requires_grad and grad_enabled()):
                    plan = plans.get(((), x.shape, x.dtype, x.device, x.is_contiguous()))
                    if plan is not None:
                        return plan(args)
            return overload(*args, **kwargs)
        return _named(call, op, module, summary)

    def call(*args, **kwargs):
        if (not kwargs and len(args) >= n and not compiling() and not function_mode()
                and not dispatch_modes() and transforms() is None and tracing() is None
                and not profiler._is_profiler_enabled and forward_ad._current_level < 0):
            grad = grad_enabled()
            for t in args[:n]:
                if type(t) is not Tensor or (grad and t.requires_grad):
                    break
            else:
                plan = plans.get(key_of(args))
                if plan is not None:
                    return plan(args[:n])
        return overload(*args, **kwargs)
    return _named(call, op, module, summary)


def _named(call, op: KernelOp, module: str, summary: str):
    """`call` with the op's name, the spec's signature and a docstring (help(), IDEs)."""
    import inspect

    sig = op.sig
    params = [inspect.Parameter(t["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD)
              for t in sig.inputs]
    for p in sig.params:
        default = inspect.Parameter.empty if p.get("default") is None else p["default"]
        params.append(inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=default))
    call.__name__ = call.__qualname__ = op.name
    call.__signature__ = inspect.Signature(params)
    shapes = "; ".join(f"{t['name']}: {t['dtype']} {t['shape']}" for t in sig.inputs + sig.outputs)
    call.__doc__ = (f"{summary}\n\ntorch.ops.{op.namespace}.{sig.schema()}\n"
                    f"dtypes: {', '.join(sig.dtypes)}; {shapes}")
    call.__module__ = module
    return call
