"""A KernelBench problem (a module with `Model`, `get_inputs()` and `get_init_inputs()`) as a spec +
oracle. Shape symbols are the module's integer globals that tensor dimensions equal; a second run
with those globals made small (and distinct, so two globals of one value are told apart) shows
how every dimension follows them and gives the correctness case; the problem's own sizes are the
bench case. The module's parameters and buffers become inputs drawn by its own initialisation."""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

from ..errors import InputError
from . import (Problem, Tensor, Unsupported, dtype_name, infer_shape, problem_code as _problem_code,
               symbol_name)

ORACLE = '''"""Oracle for specs/{name}.yaml: KernelBench problem {file}, verbatim below, is the reference.

make_inputs() sets the problem's size globals to the case's symbols and calls its own get_inputs()
and Model(*get_init_inputs()) under the case's seed (the module's parameters and buffers are inputs
of the spec); reference() runs Model on them in float64, baseline() in the storage dtype.
"""

import torch

# ---- KernelBench problem {file}, verbatim ----
{source}
# ---- the oracle contract over it (written by `regen import kernelbench`) ----
_SIZES = {sizes!r}  # spec symbol -> the problem's global
_INPUTS = {inputs!r}  # forward() arguments, in order
_STATE = {state!r}  # spec input -> Model state_dict key
_OUTPUTS = {outputs!r}


def _set_sizes(case):
    for symbol, name in _SIZES.items():
        globals()[name] = case.sizes[symbol]


def _cast(t, case):
    return (t.to(case.dtype) if t.is_floating_point() else t).to(case.device).contiguous()


def make_inputs(case, seed):
    _set_sizes(case)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        args = get_inputs()
        model = Model(*get_init_inputs())
    state = model.state_dict()
    out = {{name: _cast(a, case) for name, a in zip(_INPUTS, args)}}
    out.update({{name: _cast(state[key], case) for name, key in _STATE.items()}})
    return out


def _run(inputs, case, dtype):
    _set_sizes(case)
    model = Model(*get_init_inputs()).to(device=case.device, dtype=dtype)
    state = {{key: inputs[name].to(dtype) if inputs[name].is_floating_point() else inputs[name]
             for name, key in _STATE.items()}}
    args = tuple(inputs[n].to(dtype) if inputs[n].is_floating_point() else inputs[n]
                 for n in _INPUTS)
    with torch.no_grad():
        got = torch.func.functional_call(model, state, args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    return dict(zip(_OUTPUTS, got))


def reference(inputs, case):
    return _run(inputs, case, torch.float64)


def baseline(inputs, case):
    """What a user runs without regen: the problem's Model in the storage dtype."""
    return _run(inputs, case, case.dtype)
'''


def _name(text: str) -> str:
    out = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")
    return out if re.match(r"^[a-z]", out or "") else f"t_{out}"


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"regen_kernelbench_{_name(path.stem)}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def _run(module, where: str):
    import torch

    def inputs():
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return list(module.get_init_inputs()), list(module.get_inputs())

    init, args = _problem_code(where, "get_init_inputs()/get_inputs()", inputs)
    for i, a in enumerate(init):
        if isinstance(a, torch.Tensor):
            raise Unsupported(f"get_init_inputs()[{i}] is a tensor: a spec has no construction "
                              "tensors (make it a parameter of Model, which becomes an input)",
                              file=where)
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise Unsupported(f"get_inputs()[{i}] is a {type(a).__name__}, not a tensor: scalar "
                              "inputs are spec params, which this importer does not infer yet",
                              file=where)
        if not a.is_contiguous():
            raise Unsupported(f"get_inputs()[{i}] is not contiguous: spec tensors are contiguous "
                              "row-major", file=where)

    def forward():
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = module.Model(*init)
            with torch.no_grad():
                return model, model(*args)

    model, out = _problem_code(where, "Model(*get_init_inputs())(*get_inputs())", forward)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise Unsupported(f"forward() returns a {type(o).__name__} as output {i}: spec "
                              "outputs are tensors", file=where)
        if any(o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for a in args):
            raise Unsupported(f"forward() output {i} is (a view of) one of its inputs: in-place "
                              "results are not expressible as a separate output yet", file=where)
    return model, args, list(outs)


def load(path: Path, name: str | None = None) -> Problem:
    where = str(path)
    try:
        source = path.read_text()
    except FileNotFoundError:
        raise Unsupported("file not found", file=where) from None
    module = _problem_code(where, "importing the problem", _load, path)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise Unsupported(f"no {attr}: a KernelBench problem defines Model, get_inputs and "
                              "get_init_inputs", file=where, field=attr)
    for attr in ("make_inputs", "reference", "baseline", "check"):
        if attr in vars(module):
            raise Unsupported(f"the problem defines {attr}, which the oracle contract needs",
                              file=where, field=attr)
    model, args, outs = _run(module, where)
    ints = {k: v for k, v in vars(module).items()
            if type(v) is int and not k.startswith("_") and k.isidentifier()}
    dims = {d for t in args + outs for d in t.shape}
    size_globals = [k for k, v in ints.items() if v in dims]
    runs = [(args, outs, {k: ints[k] for k in size_globals})]
    small = {k: max(1, ints[k] // 4 if ints[k] >= 64 else ints[k] // 2) + i
             for i, k in enumerate(size_globals)}
    for k, v in small.items():
        setattr(module, k, v)
    try:
        _m2, args2, outs2 = _run(module, where)
        runs.append((args2, outs2, small))
    except Unsupported:
        raise
    except InputError:  # the problem does not run at other sizes: its own case only
        pass
    finally:
        for k in size_globals:
            setattr(module, k, ints[k])

    symbols = {symbol_name(k): k for k in size_globals}
    sizes = [{symbol_name(k): v for k, v in r[2].items()} for r in runs]
    params = [p for p in inspect.signature(module.Model.forward).parameters.values()][1:]
    names = [_name(p.name) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else
             f"x{i}" for i, p in enumerate(params)]
    names = (names + [f"x{i}" for i in range(len(names), len(args))])[:len(args)]
    floats = [a for a in args if a.is_floating_point()] + \
        [t for t in model.state_dict().values() if t.is_floating_point()]
    T = dtype_name(floats[0].dtype) if floats else "float32"

    def tensor(tname, i_run_tensors):
        t0 = i_run_tensors[0]
        shape = infer_shape(f"{tname}: shape", [tuple(t.shape) for t in i_run_tensors], sizes)
        dt = dtype_name(t0.dtype)
        return Tensor(tname, "T" if dt == T else dt, shape)

    inputs = [tensor(n, [r[0][i] for r in runs]) for i, n in enumerate(names)]
    state, taken = {}, set(names)
    states = [model.state_dict()]
    if len(runs) > 1:
        for k, v in small.items():
            setattr(module, k, v)
        try:
            states.append(module.Model(*module.get_init_inputs()).state_dict())
        finally:
            for k in size_globals:
                setattr(module, k, ints[k])
    for key in states[0]:
        n = _name(key)
        while n in taken:
            n = f"p_{n}"
        taken.add(n)
        state[n] = key
        inputs.append(tensor(n, [s[key] for s in states]))
    out_names = ["y"] if len(outs) == 1 else [f"y{i}" for i in range(len(outs))]
    outputs = [tensor(n, [r[1][i] for r in runs]) for i, n in enumerate(out_names)]
    used = {s for t in inputs + outputs for d in t.shape if isinstance(d, str)
            for s in symbols if re.search(rf"\b{s}\b", d)}
    cases = []
    if len(runs) > 1:
        cases.append({**{s: sizes[1][s] for s in symbols if s in used}, "dtype": T})
    cases.append({**{s: sizes[0][s] for s in symbols if s in used}, "dtype": T})
    if len(runs) > 1:
        cases[-1]["bench"] = True
    name = name or _name(re.sub(r"^\d+_", "", path.stem))
    tolerance = {T: {"atol": 1e-2, "rtol": 1e-2}}
    import ast

    model_src = next((ast.get_source_segment(source, n) + "\n" for n in ast.parse(source).body
                      if isinstance(n, ast.ClassDef) and n.name == "Model"), source)
    intent = (f"Compute exactly what this PyTorch module computes (KernelBench problem "
              f"{path.name}), on contiguous row-major tensors; the module's parameters and buffers "
              f"({', '.join(state) or 'none'}) are inputs. Sizes: {', '.join(sorted(used)) or 'fixed'}. "
              f"The tolerance is KernelBench's own check, allclose(atol=1e-2, rtol=1e-2).\n\n"
              f"```python\n{model_src}```\n")
    oracle = ORACLE.format(name=name, file=path.name, source=source.rstrip() + "\n",
                           sizes={s: g for s, g in symbols.items() if s in used},
                           inputs=names, state=state, outputs=out_names)
    doc = (module.Model.__doc__ or "Model.forward").strip().splitlines()[0]
    return Problem(name=name, summary=f"KernelBench {path.stem}: {doc}"[:120],
                   intent=intent, dtype=T, inputs=inputs, outputs=outputs, cases=cases,
                   tolerance=tolerance, oracle=oracle)
