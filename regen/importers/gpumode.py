"""A GPU MODE reference-kernels task (task.yml + reference.py with generate_input(**sizes, seed)
and ref_kernel(data)) as a spec + oracle. task.yml's `tests` are the correctness cases and its
`benchmarks` the bench cases; generate_input's integer arguments are the shape symbols, and two
of its configurations show how each dimension follows them. reference.py is carried verbatim but
for two things the task's harness would provide: its `from utils import ...` and
`from task import ...` lines become local definitions, and its "cuda" device literals become the
case's device (so the host column can verify against it too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from . import Problem, Tensor, Unsupported, dtype_name, infer_shape, problem_code, symbol_name

UTILS = {  # what reference.py may import from the harness's utils.py, defined in the oracle
    "make_match_reference": "def make_match_reference(reference, **kwargs):\n    return None\n",
    "verbose_allclose": ("def verbose_allclose(received, expected, rtol=1e-05, atol=1e-08, "
                         "max_print=5):\n    return [] if torch.allclose(received, expected, "
                         "rtol=rtol, atol=atol) else ['mismatch']\n"),
    "DeterministicContext": ("import contextlib\nDeterministicContext = contextlib.nullcontext\n"),
}

ORACLE = '''"""Oracle for specs/{name}.yaml: GPU MODE task {task}, its reference.py below is the reference.

reference.py is verbatim except: its imports from the harness (utils, task) are defined here, and
its "cuda" device literals read the case's device (_DEVICE), so any column can verify against it.
make_inputs() calls generate_input(**sizes, seed=seed); reference() and baseline() call ref_kernel.
"""

import torch

_DEVICE = "cuda"
input_t = output_t = object
{utils}
# ---- {task}/reference.py ----
{source}
# ---- the oracle contract over it (written by `regen import gpumode`) ----
_SIZES = {sizes!r}  # spec symbol -> generate_input argument
_INPUTS = {inputs!r}
_OUTPUTS = {outputs!r}


def make_inputs(case, seed):
    global _DEVICE
    _DEVICE = case.device
    data = generate_input(**{{arg: case.sizes[s] for s, arg in _SIZES.items()}}, seed=seed)
    data = data if isinstance(data, (tuple, list)) else (data,)
    return {{n: t.contiguous() for n, t in zip(_INPUTS, data)}}


def reference(inputs, case):
    data = tuple(inputs[n] for n in _INPUTS)
    got = ref_kernel(data if len(data) > 1 else data[0])
    got = got if isinstance(got, (tuple, list)) else (got,)
    return dict(zip(_OUTPUTS, got))


def baseline(inputs, case):
    """What a user runs without regen: the task's own ref_kernel."""
    return reference(inputs, case)
'''


def _rewrite(source: str, where: str) -> tuple[str, str, dict]:
    """(source with harness imports removed and device literals replaced, the definitions the
    oracle adds, make_match_reference's keyword arguments)."""
    tree = ast.parse(source)
    defs, tolerance, drop = [], {}, set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in ("utils", "task"):
            drop.update(range(node.lineno, node.end_lineno + 1))
            if node.module == "utils":
                for alias in node.names:
                    if alias.name not in UTILS:
                        raise Unsupported(f"reference.py imports {alias.name} from the harness's "
                                          f"utils; the importer defines {', '.join(UTILS)}",
                                          file=where, line=node.lineno)
                    defs.append(UTILS[alias.name])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "make_match_reference"):
            for kw in node.keywords:
                if kw.arg in ("rtol", "atol") and isinstance(kw.value, ast.Constant):
                    tolerance[kw.arg] = float(kw.value.value)
    lines = [ln for i, ln in enumerate(source.splitlines(), 1) if i not in drop]
    text = "\n".join(lines) + "\n"
    text = re.sub(r"""device\s*=\s*(["'])cuda\1""", "device=_DEVICE", text)
    text = text.replace(".cuda()", ".to(_DEVICE)")
    return text, "\n".join(defs), tolerance


def _run(module, kwargs: dict, where: str):
    import torch

    data = module["generate_input"](**kwargs)
    data = list(data) if isinstance(data, (tuple, list)) else [data]
    for i, t in enumerate(data):
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"generate_input returns a {type(t).__name__} as item {i}: spec "
                              "inputs are tensors (scalars would be params)", file=where)
    got = module["ref_kernel"](tuple(data) if len(data) > 1 else data[0])
    outs = list(got) if isinstance(got, (tuple, list)) else [got]
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            raise Unsupported(f"ref_kernel returns a {type(o).__name__} as output {i}", file=where)
        if any(o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for t in data):
            raise Unsupported(f"ref_kernel writes output {i} into one of its inputs (an output "
                              "buffer passed in data): in-place results are not expressible as a "
                              "separate spec output yet", file=where)
    return data, outs


def load(folder: Path, name: str | None = None) -> Problem:
    import torch

    from ..yamlio import read_mapping

    task_path, ref_path = folder / "task.yml", folder / "reference.py"
    for p in (task_path, ref_path):
        if not p.is_file():
            raise Unsupported("not found (a GPU MODE task folder has task.yml and reference.py)",
                              file=str(p))
    task = read_mapping(task_path)
    tests, benches = task.get("tests") or [], task.get("benchmarks") or []
    if not tests:
        raise Unsupported("no tests: they are the correctness cases", file=str(task_path),
                          field="tests")
    source, defs, tol = _rewrite(ref_path.read_text(), str(ref_path))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module: dict = {"__name__": "regen_gpumode_task", "_DEVICE": device,
                    "input_t": object, "output_t": object}
    code = compile("import torch\n" + defs + "\n" + source, str(ref_path), "exec")
    problem_code(str(ref_path), "reference.py", exec, code, module)
    for fn in ("generate_input", "ref_kernel"):
        if fn not in module:
            raise Unsupported(f"no {fn}(): reference.py defines generate_input and ref_kernel",
                              file=str(ref_path), field=fn)
    configs = []
    for where, items, bench in (("tests", tests, False), ("benchmarks", benches, True)):
        for i, item in enumerate(items):
            sizes = {k: v for k, v in item.items() if k != "seed"}
            for k, v in sizes.items():
                if type(v) is not int:
                    raise Unsupported(f"{k} is {v!r}: only integer generate_input arguments "
                                      "become shape symbols", file=str(task_path),
                                      field=f"{where}[{i}].{k}")
            if sizes not in [c[0] for c in configs]:
                configs.append((sizes, bench))
    runs = []
    for sizes, _ in configs[:2]:
        data, outs = problem_code(str(ref_path), f"generate_input/ref_kernel at {sizes}", _run,
                                  module, {**sizes, "seed": 1}, str(ref_path))
        runs.append((data, outs, {symbol_name(k): v for k, v in sizes.items()}))
    T = dtype_name(next((t.dtype for t in runs[0][0] if t.is_floating_point()), torch.float32))
    in_names = ["x"] if len(runs[0][0]) == 1 else [f"in{i}" for i in range(len(runs[0][0]))]
    out_names = ["out"] if len(runs[0][1]) == 1 else [f"out{i}" for i in range(len(runs[0][1]))]
    sizes = [r[2] for r in runs]

    def tensor(tname, ts):
        dt = dtype_name(ts[0].dtype)
        return Tensor(tname, "T" if dt == T else dt,
                      infer_shape(f"{tname}: shape", [tuple(t.shape) for t in ts], sizes))

    inputs = [tensor(n, [r[0][i] for r in runs]) for i, n in enumerate(in_names)]
    outputs = [tensor(n, [r[1][i] for r in runs]) for i, n in enumerate(out_names)]
    symbols = {symbol_name(k): k for k in configs[0][0]}
    cases = [{**{symbol_name(k): v for k, v in c.items()}, "dtype": T, **({"bench": True} if b else {})}
             for c, b in configs]
    name = name or re.sub(r"[^a-z0-9_]+", "_", folder.resolve().name.lower()).strip("_") or "task"
    if not re.match(r"^[a-z]", name):
        name = f"t_{name}"
    description = str(task.get("description") or "").strip()
    intent = (f"{description}\n\n" if description else "") + (
        f"Compute what ref_kernel computes (GPU MODE task {folder.name}) on the tensors "
        f"generate_input makes; checked with allclose(rtol={tol.get('rtol', 1e-5):g}, "
        f"atol={tol.get('atol', 1e-8):g}), the task's own check.\n\n```python\n{source}```\n")
    oracle = ORACLE.format(name=name, task=folder.name, utils=defs, source=source.rstrip() + "\n",
                           sizes=symbols, inputs=in_names, outputs=out_names)
    summary = (description.splitlines()[0] if description else f"GPU MODE task {folder.name}")[:120]
    return Problem(name=name, summary=summary, intent=intent, dtype=T, inputs=inputs,
                   outputs=outputs, cases=cases, oracle=oracle,
                   tolerance={T: {"atol": tol.get("atol", 1e-8), "rtol": tol.get("rtol", 1e-5)}})
