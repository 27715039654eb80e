"""Bring problems in: a KernelBench problem or a GPU MODE task as a spec + oracle scaffold.

Each importer runs the problem's own code (in this process: the user named the file) to see its
tensors, infers shape symbols from how dimensions change between two runs, and writes
specs/<name>.yaml and oracles/<name>.py. The oracle carries the original reference code verbatim
(only the imports GPU MODE's harness provides are replaced by local definitions) and verifies
against it on the problem's own inputs; the problem's shapes become cases, its largest ones bench
cases. What the spec language cannot express is an Unsupported error naming what and why, and
nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

RESERVED = {"T", "ceil_div", "cdiv", "min", "max", "abs", "next_pow2", "int", "float", "log2",
            "sqrt", "dsize"}


class Unsupported(InputError):
    """Something the problem does that a spec cannot say yet."""


@dataclass
class Tensor:
    name: str
    dtype: str
    shape: list  # ints and symbol expressions


@dataclass
class Problem:
    name: str
    summary: str
    intent: str
    dtype: str                       # T
    inputs: list[Tensor]
    outputs: list[Tensor]
    cases: list[dict]
    tolerance: dict
    oracle: str                      # the oracle module's source
    params: list[dict] = field(default_factory=list)


def symbol_name(name: str) -> str:
    from ..dtypes import DTYPES

    return name + "_" if name in RESERVED or name in DTYPES else name


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def infer_shape(where: str, shapes: list[tuple], sizes: list[dict]) -> list:
    """A tensor's shape as symbols, from its shape in each run and each run's symbol values: a
    dimension is the first symbol it always equals, else k * S or S // k of one, else the
    constant it always is; otherwise Unsupported."""
    out = []
    for i in range(len(shapes[0])):
        values = [s[i] for s in shapes]
        found = None
        for sym in sizes[0]:
            if all(v == sz[sym] for v, sz in zip(values, sizes)):
                found = sym
                break
        if found is None and len(shapes) > 1:
            for sym in sizes[0]:
                for k in range(2, 9):
                    if all(v == k * sz[sym] for v, sz in zip(values, sizes)):
                        found = f"{k} * {sym}"
                    elif all(sz[sym] % k == 0 and v == sz[sym] // k for v, sz in zip(values, sizes)):
                        found = f"{sym} // {k}"
                    if found:
                        break
                if found:
                    break
        if found is None:
            if len(set(values)) == 1:
                found = values[0]
            else:
                runs = ", ".join(f"{v} for {', '.join(f'{k}={x}' for k, x in sz.items())}"
                                 for v, sz in zip(values, sizes))
                raise Unsupported(f"{where} dimension {i} is {runs}: not a symbol, k * symbol, "
                                  "symbol // k or a constant, which is what a spec shape can say "
                                  "without help; write that dimension's formula into the spec by hand")
        out.append(found)
    return out


def problem_code(where: str, what: str, fn, *args):
    """Run the problem's own code; its exception is an InputError naming the problem's line."""
    import traceback

    try:
        return fn(*args)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the problem's code, reported as its fault
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == where]
        raise InputError(f"{what} raised {type(exc).__name__}: {exc}", file=where,
                         line=frames[-1].lineno if frames else None) from None


def write(root: Path, problem: Problem, force: bool = False) -> tuple[Path, Path]:
    """Write the spec and oracle, then load them as regen would; on any error nothing stays."""
    import yaml

    from ..oracle import check_oracle, distributions
    from ..spec import load_spec

    spec_path = root / "specs" / f"{problem.name}.yaml"
    oracle_path = root / "oracles" / f"{problem.name}.py"
    for p in (spec_path, oracle_path):
        if p.exists() and not force:
            raise InputError("exists already (pass --force to replace it, or --name another)",
                             file=str(p))
    signature = {"dtypes": [problem.dtype],
                 "inputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape}
                            for t in problem.inputs],
                 "outputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape}
                             for t in problem.outputs]}
    if problem.params:
        signature["params"] = problem.params
    spec = {"name": problem.name, "summary": problem.summary, "intent": problem.intent,
            "signature": signature, "invariants": [], "cases": problem.cases,
            "tolerance": problem.tolerance}
    text = yaml.safe_dump(spec, sort_keys=False, width=100, allow_unicode=True)
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    oracle_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(text)
    oracle_path.write_text(problem.oracle)
    try:
        load_spec(spec_path)
        check_oracle(oracle_path)
        distributions(oracle_path)
    except InputError:
        spec_path.unlink(missing_ok=True)
        oracle_path.unlink(missing_ok=True)
        raise
    return spec_path, oracle_path
