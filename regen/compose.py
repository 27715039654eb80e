"""Composed specs: a kernel declared as a dataflow of other specs (`composition:` in its spec).

Three things come from one resolved composition (`resolve`):
- the checks a spec alone cannot make: every component exists, every input of every step is
  bound, producer and consumer agree on dtype and shape (on every case of the composed spec),
  no cycle, and in-place updates are routed soundly;
- the job the judge's child uses to build the composed reference from the components' oracles
  (`oracle_job`; regen.oracle.compose runs it);
- the unfused plan (`unfused`): one artifact whose source is the components' current sources
  and whose launch recipe is their recipes in order, rewritten over the composed spec's symbols,
  with the intermediate tensors as workspaces. It is made with no generator call and verified by
  the same judge as any artifact.

Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import expr, keys
from .errors import InputError

COMPOSER = "composed"   # provenance `generator` of an unfused plan


@dataclass
class BoundStep:
    """A step with its component spec, in execution order."""
    index: int              # where it is written in composition.steps (for error fields)
    step: object            # spec.Step
    spec: object            # the component's Spec
    buffers: dict[str, str] = field(default_factory=dict)   # component tensor -> buffer name


@dataclass
class Resolved:
    spec: object
    steps: list[BoundStep]
    outputs: dict[str, str]                     # composed output -> "step.tensor"
    workspaces: dict[str, tuple[str, str]]      # buffer name -> (step name, tensor)


def _err(spec, message: str, field: str) -> InputError:
    return InputError(message, file=f"specs/{spec.name}.yaml", field=field)


def resolve(project, spec) -> Resolved:
    """The composition of `spec` checked against its components (InputError naming the field)."""
    import networkx as nx

    comp = spec.composition
    if comp is None:
        raise ValueError(f"{spec.name} has no composition")
    bound: dict[str, BoundStep] = {}
    for i, step in enumerate(comp.steps):
        where = f"composition.steps[{i}]"
        if step.kernel not in project.kernel_names():
            raise _err(spec, f"unknown component {step.kernel!r}: no specs/{step.kernel}.yaml",
                       f"{where}.kernel")
        cspec = project.spec(step.kernel)
        if cspec.composition is not None:   # nested: its own composition is checked first
            inner = project.composition(step.kernel)
            if step.repeat is not None and any(b.step.repeat is not None for b in inner.steps):
                raise _err(spec, f"component {step.kernel!r} has a repeated step of its own; a "
                           "repeated step inside a repeated step is not supported",
                           f"{where}.repeat")
        _check_bindings(spec, step, cspec, where)
        _check_carry(spec, step, cspec, where)
        bound[step.name] = BoundStep(i, step, cspec)
    graph = nx.DiGraph()
    for name, b in bound.items():
        graph.add_node(name, order=b.index)
        for k, edge in b.step.inputs.items():
            if edge.step is not None:
                producer = bound[edge.step]
                if edge.tensor not in {t.name for t in producer.spec.signature.outputs}:
                    raise _err(spec, f"step {edge.step!r} ({producer.step.kernel}) has no output "
                               f"{edge.tensor!r}; its outputs: "
                               f"{[t.name for t in producer.spec.signature.outputs]}",
                               f"composition.steps[{b.index}].inputs.{k}")
                graph.add_edge(edge.step, name)
    try:
        order = list(nx.lexicographical_topological_sort(graph, key=lambda n: bound[n].index))
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(graph)
        path = " -> ".join([cycle[0][0], *(v for _, v in cycle)])
        raise _err(spec, f"the steps form a cycle: {path}",
                   f"composition.steps[{bound[cycle[0][1]].index}].inputs") from None
    for k, edge in comp.outputs.items():
        producer = bound[edge.step]
        if edge.tensor not in {t.name for t in producer.spec.signature.outputs}:
            raise _err(spec, f"step {edge.step!r} ({producer.step.kernel}) has no output "
                       f"{edge.tensor!r}", f"composition.outputs.{k}")
    steps = [bound[n] for n in order]
    res = Resolved(spec, steps, {k: e.source for k, e in comp.outputs.items()}, {})
    _assign_buffers(spec, res)
    for case_index, case in enumerate(spec.cases):
        _check_case(spec, res, case, case_index)
    return res


def _check_bindings(spec, step, cspec, where: str) -> None:
    syms = cspec.signature.symbols()
    params = {p.name: p for p in cspec.signature.params}
    missing = sorted(syms - set(step.sizes))
    if missing:
        raise _err(spec, f"shape symbols {missing} of {step.kernel} are not bound "
                   f"(give them as expressions of this spec's symbols)", f"{where}.sizes")
    extra = sorted(set(step.sizes) - syms)
    if extra:
        raise _err(spec, f"{step.kernel} has no shape symbols {extra} (its symbols: "
                   f"{sorted(syms)})", f"{where}.sizes")
    unknown = sorted(set(step.params) - set(params))
    if unknown:
        raise _err(spec, f"{step.kernel} has no parameters {unknown} (its parameters: "
                   f"{sorted(params)})", f"{where}.params")
    unbound = [p for p in params.values() if p.default is None and p.name not in step.params]
    if unbound:
        raise _err(spec, f"parameter {unbound[0].name!r} of {step.kernel} has no default and is "
                   "not bound", f"{where}.params")
    ins = {t.name for t in cspec.signature.inputs}
    missing = sorted(ins - set(step.inputs))
    if missing:
        raise _err(spec, f"inputs {missing} of {step.kernel} are unbound (each input comes from "
                   "an input of this spec or an earlier step's output)", f"{where}.inputs")
    extra = sorted(set(step.inputs) - ins)
    if extra:
        raise _err(spec, f"{step.kernel} has no inputs {extra} (its inputs: {sorted(ins)})",
                   f"{where}.inputs")


def _check_carry(spec, step, cspec, where: str) -> None:
    """A carried value: an output of the component feeding one of its inputs on the next
    iteration (their shapes and dtypes are compared per case)."""
    outs = {t.name for t in cspec.signature.outputs}
    for k, out in step.carry.items():
        if k not in {t.name for t in cspec.signature.inputs}:
            raise _err(spec, f"{step.kernel} has no input {k!r} to carry into", f"{where}.carry.{k}")
        if out not in outs:
            raise _err(spec, f"{step.kernel} has no output {out!r} to carry (its outputs: "
                       f"{sorted(outs)})", f"{where}.carry.{k}")


def _assign_buffers(spec, res: Resolved) -> None:
    """Which buffer each step tensor lives in: a composed input or output, the buffer an in-place
    output updates, or a workspace `<step>__<tensor>`. Refuses a read of a buffer's old contents
    after a step updated it in place, and in-place updates of inputs the spec does not declare."""
    comp_outputs = {t.name: t for t in spec.signature.outputs}
    source_of_output: dict[str, str] = {}
    for out, src in res.outputs.items():
        if src in source_of_output:
            raise _err(spec, f"{src} feeds two outputs ({source_of_output[src]} and {out}); an "
                       "output needs a buffer of its own", f"composition.outputs.{out}")
        source_of_output[src] = out
    inputs = {t.name for t in spec.signature.inputs}
    inplace_inputs = {t.inplace_of for t in spec.signature.outputs if t.inplace_of}
    where_is: dict[str, str] = {t.name: t.name for t in spec.signature.inputs}  # source -> buffer
    version: dict[str, str] = {t.name: t.name for t in spec.signature.inputs}   # buffer -> source
    for b in res.steps:
        field0 = f"composition.steps[{b.index}]"
        for k, edge in b.step.inputs.items():
            buf = where_is[edge.source]
            if version[buf] != edge.source:
                raise _err(spec, f"reads {edge.source!r}, but step {version[buf].split('.')[0]!r} "
                           f"already updated that buffer in place (read "
                           f"{version[buf]!r}, or order the steps the other way)",
                           f"{field0}.inputs.{k}")
            b.buffers[k] = buf
        for t in b.spec.signature.outputs:
            src = f"{b.step.name}.{t.name}"
            if t.name in b.step.carry.values() and src in source_of_output:
                raise _err(spec, f"{src} is carried from iteration to iteration; an output needs "
                           "a buffer of its own (feed it through a later step)",
                           f"composition.outputs.{source_of_output[src]}")
            if t.inplace_of:
                buf = b.buffers[t.inplace_of]
                if buf in inputs and buf not in inplace_inputs:
                    raise _err(spec, f"step {b.step.name!r} updates input {buf!r} in place "
                               f"({b.step.kernel}.{t.name} is inplace_of {t.inplace_of}), but no "
                               f"output of this spec is declared inplace_of {buf}", field0)
                out = source_of_output.get(src)
                if out is not None and comp_outputs[out].inplace_of != buf:
                    raise _err(spec, f"output {out} comes from an in-place update of {buf!r}; "
                               f"declare it inplace_of: {buf}", f"composition.outputs.{out}")
            elif src in source_of_output:
                out = source_of_output[src]
                if comp_outputs[out].inplace_of:
                    raise _err(spec, f"output {out} is inplace_of {comp_outputs[out].inplace_of}, "
                               f"but {src} is a new tensor, not an update of it",
                               f"composition.outputs.{out}")
                buf = out
            else:
                buf = f"{b.step.name}__{t.name}"
                res.workspaces[buf] = (b.step.name, t.name)
            where_is[src] = buf
            version[buf] = src
            b.buffers[t.name] = buf
    for out, src in res.outputs.items():
        t = comp_outputs[out]
        if t.inplace_of and where_is[src] != t.inplace_of:
            raise _err(spec, f"output {out} is inplace_of {t.inplace_of}, but {src} does not "
                       f"update {t.inplace_of}", f"composition.outputs.{out}")
        if version[where_is[src]] != src:
            raise _err(spec, f"{src} is overwritten in place later by "
                       f"{version[where_is[src]]!r}; name that one", f"composition.outputs.{out}")


def step_env(step, cspec, env: dict) -> dict:
    """The component's case environment for one case of the composed spec (`env`: its symbols,
    parameters and T)."""
    out: dict = {p.name: p.default for p in cspec.signature.params}
    for k, text in step.params.items():
        out[k] = expr.evaluate(text, env)
    for k, text in step.sizes.items():
        out[k] = int(expr.evaluate(text, env))
    out["T"] = env["T"] if step.dtype == "T" else step.dtype
    return out


def _shape(tensor, env: dict) -> list[int]:
    return [int(expr.evaluate(d, env)) for d in tensor.shape]


def _dtype(tensor, env: dict) -> str:
    return env["T"] if tensor.dtype == "T" else tensor.dtype


def _check_case(spec, res: Resolved, case, ci: int) -> None:
    """Dtypes and shapes agree along every edge for one case of the composed spec."""
    env = spec.case_env(case)
    label = case.label(spec.signature.dtypes[0])
    known: dict[str, tuple[str, list[int]]] = {
        t.name: (spec.tensor_dtype(t, case), spec.tensor_shape(t, case)) for t in spec.signature.inputs}
    for b in res.steps:
        where = f"composition.steps[{b.index}]"
        try:
            senv = step_env(b.step, b.spec, env)
        except expr.ExprError as exc:
            raise _err(spec, f"case {label}: {exc}", where) from None
        if senv["T"] not in b.spec.signature.dtypes:
            raise _err(spec, f"case {label}: {b.step.kernel} runs in {senv['T']}, which its "
                       f"signature.dtypes {b.spec.signature.dtypes} does not list", f"{where}.dtype")
        count = repeat_count(b.step, env, spec, label, where)
        layered = {k for k, e in b.step.inputs.items() if e.layer}
        for t in b.spec.signature.inputs:
            edge = b.step.inputs[t.name]
            have_dtype, have_shape = known[edge.source]
            want_dtype, want_shape = _dtype(t, senv), _shape(t, senv)
            f = f"{where}.inputs.{t.name}"
            if have_dtype != want_dtype:
                raise _err(spec, f"case {label}: {edge.source} is {have_dtype}, but "
                           f"{b.step.kernel}.{t.name} takes {want_dtype}", f)
            if edge.layer:   # one slice per iteration along the first dimension
                if not have_shape or have_shape[0] != count:
                    raise _err(spec, f"case {label}: {edge.source} has shape {have_shape}; a "
                               f"per-layer input of {count} iterations needs a first dimension "
                               f"of {count}", f)
                have_shape = have_shape[1:]
            if have_shape != want_shape and not (edge.view and _numel(have_shape) == _numel(want_shape)):
                hint = (" (same number of elements: add view: true to reshape)"
                        if _numel(have_shape) == _numel(want_shape) else "")
                what = f"a slice of {edge.source}" if edge.layer else edge.source
                raise _err(spec, f"case {label}: {what} has shape {have_shape}, but "
                           f"{b.step.kernel}.{t.name} takes {want_shape}{hint}", f)
        outs = {t.name: t for t in b.spec.signature.outputs}
        for k, out in b.step.carry.items():
            t_in = next(t for t in b.spec.signature.inputs if t.name == k)
            have = (_dtype(outs[out], senv), _shape(outs[out], senv))
            want = (_dtype(t_in, senv), _shape(t_in, senv))
            if have != want:
                raise _err(spec, f"case {label}: {b.step.kernel}.{out} is {have[0]} {have[1]}, "
                           f"but the {k} it is carried into takes {want[0]} {want[1]}",
                           f"{where}.carry.{k}")
        for t in b.spec.signature.outputs:
            shape = _shape(t, senv)
            if t.inplace_of in layered:   # the whole stacked buffer, every slice updated
                shape = [count, *shape]
            known[f"{b.step.name}.{t.name}"] = (_dtype(t, senv), shape)
    for out in spec.signature.outputs:
        src = res.outputs[out.name]
        edge = spec.composition.outputs[out.name]
        have_dtype, have_shape = known[src]
        want_dtype, want_shape = spec.tensor_dtype(out, case), spec.tensor_shape(out, case)
        if have_dtype != want_dtype or (have_shape != want_shape and not (
                edge.view and _numel(have_shape) == _numel(want_shape))):
            raise _err(spec, f"case {label}: {src} is {have_dtype} {have_shape}, but output "
                       f"{out.name} is {want_dtype} {want_shape}", f"composition.outputs.{out.name}")


def repeat_count(step, env: dict, spec=None, label: str = "", where: str = "") -> int | None:
    """How many times a step runs for one case of the composed spec (None: not repeated)."""
    if step.repeat is None:
        return None
    try:
        n = expr.evaluate(step.repeat, env)
    except expr.ExprError as exc:
        raise _err(spec, f"case {label}: {exc}", f"{where}.repeat") from None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _err(spec, f"case {label}: repeat {step.repeat!r} gives {n!r}; expected a whole "
                   "number of iterations, at least 1", f"{where}.repeat")
    return n


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# -- the composed reference (run by regen.oracle.compose in the judge's child) ---------------------
def oracle_job(project, spec) -> dict:
    """What the child needs to compose the reference: the steps in order with their component
    specs and oracle files (a composed component: its own job, nested), and for a repeated step
    its count, per-layer inputs and carried values. JSON only."""
    res = resolve(project, spec)
    steps = []
    for b in res.steps:
        step = {"name": b.step.name, "kernel": b.step.kernel,
                "spec": b.spec.model_dump(mode="json"),
                "oracle": str(project.oracle_path(b.step.kernel).resolve()),
                "sizes": dict(b.step.sizes), "params": dict(b.step.params),
                "dtype": b.step.dtype,
                "inputs": {k: e.source for k, e in b.step.inputs.items()}}
        if b.spec.composition is not None:
            step["job"] = oracle_job(project, b.spec)
        if b.step.repeat is not None:
            step.update({"repeat": b.step.repeat, "carry": dict(b.step.carry),
                         "layer": sorted(k for k, e in b.step.inputs.items() if e.layer)})
        steps.append(step)
    return {"steps": steps, "outputs": dict(res.outputs)}


# -- the unfused plan ------------------------------------------------------------------------------
class ComposeError(Exception):
    """The unfused plan cannot be made on this target (a component has no artifact)."""


def unfused(project, store, spec, target) -> tuple[str, str, dict]:
    """(source, launch.yaml, provenance) of the unfused plan of `spec` on `target`: the leaf
    components' current entries (a composed component is expanded into its own steps), launched
    in the composition's order with the intermediates as workspaces; a repeated step is a repeat
    group whose per-layer inputs are views into the stacked buffers."""
    from . import yamlio
    from .recipe import parse_recipe

    plan = _Plan(project, store, target)
    top = resolve(project, spec)
    plan.emit(top, {}, {t.name: _Ref(t.name) for t in spec.signature.tensors}, "", None,
              plan.launches)
    recipe_text = ("# the unfused plan of " + spec.name + ": made by regen from the components' "
                   "entries (regen/compose.py), not generated\n"
                   + yamlio.yaml.safe_dump({"launches": plan.launches,
                                            "workspace": plan.workspace + plan.intermediates},
                                           sort_keys=False, width=100))
    parse_recipe(recipe_text, f"the unfused plan of {spec.name}")   # what the judge will read
    source = combine_sources([(name, e.source()) for name, e in sorted(plan.entries.items())],
                             target.language)
    provenance = {"generator": COMPOSER,
                  "note": "the unfused plan: the components' verified kernels launched in order, "
                          "with the intermediates as workspaces; made by regen, no generator call",
                  "components": {name: {"entry": e.id, "source": e.source_digest,
                                        "recipe": e.recipe_digest}
                                 for name, e in sorted(plan.entries.items())},
                  "steps": [f"{b.step.name}: {b.step.kernel}" + (f" x {b.step.repeat}"
                                                                   if b.step.repeat else "")
                            for b in top.steps],
                  "composition": keys.digest(spec.composition.key_dump())}
    return source, recipe_text, provenance


@dataclass
class _Ref:
    """Where a tensor of some level of the plan lives: a buffer of the top-level recipe, `offset`
    elements in (an expression of the top level's names and repeat indices); `first`: where it
    lives on a repeat group's first iteration instead (a carried input)."""
    buffer: str
    offset: str = "0"
    first: "_Ref | None" = None

    def arg(self):
        return self.buffer if self.offset == "0" else {"tensor": self.buffer, "offset": self.offset}


def _mul(a: str, b: str) -> str:
    return f"({a}) * ({b})"


def _add(a: str, b: str) -> str:
    return b if a == "0" else f"({a}) + ({b})"


class _Plan:
    """The unfused plan being written: launches (and repeat groups), workspaces, the leaf entries."""

    def __init__(self, project, store, target):
        self.project, self.store, self.target = project, store, target
        self.launches: list = []
        self.workspace: list = []       # the components' own workspaces, in step order
        self.intermediates: list = []   # the tensors between steps, after them
        self.entries: dict = {}

    def entry(self, kernel: str):
        if kernel not in self.entries:
            e = self.store.current(kernel, self.target.name)
            if e is None:
                raise ComposeError(f"component {kernel} has no artifact for {self.target.name} "
                                   f"(build it first: regen build {kernel} -t {self.target.name})")
            self.entries[kernel] = e
        return self.entries[kernel]

    def emit(self, res: Resolved, sym: dict, refs: dict, prefix: str,
             group: tuple[str, str] | None, out: list) -> None:
        """Append the launches of one level to `out`. sym: this level's symbols and parameters ->
        expressions of the top level's names; refs: this level's inputs and outputs -> _Ref;
        prefix: its workspaces' name prefix; group: the enclosing repeat group's (index, count)."""
        level: dict[str, _Ref] = dict(refs)
        for buf, (step_name, tensor) in res.workspaces.items():
            b = next(x for x in res.steps if x.step.name == step_name)
            t = next(x for x in b.spec.signature.outputs if x.name == tensor)
            mapping = _over(_symbol_map(b), sym)
            shape = [expr.substitute(d, mapping) for d in t.shape]
            name = prefix + buf
            if tensor in b.step.carry.values():   # ping-pong: iteration i writes slot i % 2
                count = expr.substitute(b.step.repeat, sym)
                shape = [2, *shape]
                level[buf] = _Ref(name, _mul(f"(({count}) - 1) % 2", _numel_expr(shape[1:])))
            else:
                level[buf] = _Ref(name)
            self.intermediates.append({"name": name, "dtype": mapping["T"] if t.dtype == "T"
                                       else t.dtype, "shape": shape})
        for b in res.steps:
            mapping = _over(_symbol_map(b), sym)
            step_refs = {k: level[buf] for k, buf in b.buffers.items()}
            if b.step.repeat is None:
                self.component(b, mapping, step_refs, prefix + b.step.name + "__", group, out)
                continue
            if group is not None:
                raise ComposeError(f"step {b.step.name}: a repeated step inside a repeated step")
            idx = f"{b.step.name}_index"
            count = expr.substitute(b.step.repeat, sym)
            shapes = {t.name: [expr.substitute(d, mapping) for d in t.shape]
                      for t in b.spec.signature.tensors}
            layered = {k for k, e in b.step.inputs.items() if e.layer}
            for t in b.spec.signature.inputs:
                if t.name in layered:
                    r = step_refs[t.name]
                    step_refs[t.name] = _Ref(r.buffer, _add(r.offset, _mul(idx, _numel_expr(
                        shapes[t.name]))))
            for t in b.spec.signature.outputs:
                if t.inplace_of in layered:
                    step_refs[t.name] = step_refs[t.inplace_of]
                elif t.name in b.step.carry.values():
                    r = step_refs[t.name]   # the workspace's two slots
                    step_refs[t.name] = _Ref(r.buffer, _mul(f"{idx} % 2", _numel_expr(shapes[t.name])))
            for k, o in b.step.carry.items():
                r = level[b.buffers[o]]
                step_refs[k] = _Ref(r.buffer, _mul(f"({idx} - 1) % 2", _numel_expr(shapes[o])),
                                    first=step_refs[k])
            inner: list = []
            self.component(b, mapping, step_refs, prefix + b.step.name + "__", (idx, count), inner)
            out.append({"repeat": count, "index": idx, "launches": inner})

    def component(self, b: BoundStep, mapping: dict, refs: dict, prefix: str,
                  group: tuple[str, str] | None, out: list) -> None:
        """One step's component: a composed one expanded, a leaf one's recipe rewritten."""
        from .dtypes import short
        from .recipe import Repeat, TensorArg, parse_recipe

        if b.spec.composition is not None:
            inner = self.project.composition(b.spec.name)
            self.emit(inner, mapping, refs, prefix, group, out)
            return
        e = self.entry(b.step.kernel)
        recipe = parse_recipe(e.recipe(), f"cache entry {e.id} launch.yaml")
        mapping = {**mapping, "timeline_slots": "0"}   # a component is never profiled here
        timeline = recipe.timeline.buffer if recipe.timeline is not None else None
        local = dict(refs)
        for w in recipe.workspace:
            shape = [expr.substitute(d, mapping) for d in w.shape]
            name = prefix + w.name
            item = {"name": name, "dtype": mapping["T"] if w.dtype == "T" else w.dtype,
                    "shape": shape, "zero": w.zero}
            local[w.name] = _Ref(name)
            if w.zero and group is not None:   # zeroed before every iteration: a slice each
                item["shape"] = [group[1], *shape]
                local[w.name] = _Ref(name, _mul(group[0], _numel_expr(shape)))
            self.workspace.append(item)
        for item in recipe.launches:
            if isinstance(item, Repeat):
                raise ComposeError(f"component {b.step.kernel}'s recipe has a repeat group; an "
                                   "unfused plan does not nest one")
            kernel = item.kernel if b.step.dtype == "T" else \
                item.kernel.replace("{dtype}", short(b.step.dtype))
            args = [a.tensor if isinstance(a, TensorArg) and a.offset == 0 else a
                    for a in item.args]
            if any(isinstance(a, TensorArg) for a in args):
                raise ComposeError(f"component {b.step.kernel}'s recipe passes a tensor at an "
                                   "offset; an unfused plan does not rewrite such views")
            first = any(isinstance(a, str) and a in local and local[a].first is not None
                        for a in args)
            variants = [(None, False)] if not first else [(f"{group[0]} == 0", True),
                                                         (f"{group[0]} > 0", False)]
            for cond, on_first in variants:
                launch = {"kernel": kernel,
                          "grid": [expr.substitute(d, mapping) for d in item.grid],
                          "block": [expr.substitute(d, mapping) for d in item.block],
                          "shared_mem": expr.substitute(item.shared_mem, mapping),
                          "args": [self._arg(a, local, mapping, timeline, on_first)
                                   for a in args]}
                when = expr.substitute(item.when, mapping) if item.when is not None else None
                if cond is not None:
                    when = cond if when is None else f"({when}) and {cond}"
                if when is not None:
                    launch["when"] = when
                out.append(launch)

    @staticmethod
    def _arg(a, local: dict, mapping: dict, timeline: str | None, on_first: bool):
        from .recipe import split_typed

        if isinstance(a, str) and a in local:
            r = local[a]
            return (r.first if on_first and r.first is not None else r).arg()
        if a == timeline:
            return "int64:0"
        if not isinstance(a, str):
            return a
        typ, text = split_typed(a)
        out = expr.substitute(text, mapping)
        return f"{typ}:{out}" if typ else out


def _over(mapping: dict, sym: dict) -> dict:
    """A component's names -> expressions of the top level (through this level's `sym`)."""
    return {k: expr.substitute(v, sym) if isinstance(v, str) and sym else v
            for k, v in mapping.items()}


def _numel_expr(shape: list) -> str:
    return " * ".join(f"({d})" for d in shape) if shape else "1"


def _symbol_map(b: BoundStep) -> dict[str, str]:
    """Component name -> expression over the composed spec's names."""
    mapping = {k: f"({v})" if isinstance(v, str) else str(v) for k, v in b.step.sizes.items()}
    for p in b.spec.signature.params:
        if p.name in b.step.params:
            v = b.step.params[p.name]
            mapping[p.name] = f"({v})" if isinstance(v, str) else repr(v)
        else:
            mapping[p.name] = repr(p.default)
    mapping["T"] = "T" if b.step.dtype == "T" else b.step.dtype
    return mapping


_INCLUDE = re.compile(r"^\s*#\s*(include|pragma\s+once)\b")
_IF = re.compile(r"^\s*#\s*if")
_ENDIF = re.compile(r"^\s*#\s*endif\b")


def combine_sources(parts: list[tuple[str, str]], language: str) -> str:
    """One translation unit from several components' sources: each body in a namespace of its own
    (their helpers may share names), their #include lines first. extern "C" kernels keep their
    names (namespaces do not change C linkage), so each component's recipe finds its kernels."""
    head, bodies = [], []
    for name, source in parts:
        body, depth, block = [], 0, None
        for line in source.splitlines():
            if _IF.match(line):
                depth += 1
            if block is not None:            # a top-level #if ... #endif around an #include
                block.append(line)
                if _ENDIF.match(line):
                    depth -= 1
                    if depth == 0:
                        if any(_INCLUDE.match(x) for x in block):
                            head.extend(block)
                        else:
                            body.extend(block)
                        block = None
                continue
            if _IF.match(line) and depth == 1:
                block = [line]
                continue
            if _ENDIF.match(line):
                depth -= 1
            if _INCLUDE.match(line):
                if "pragma" not in line and line.strip() not in head:
                    head.append(line.strip())
                continue
            body.append(line)
        bodies.append(f"// ---- component {name} ----\nnamespace regen_component_{name} {{\n"
                      + "\n".join(body) + f"\n}}  // namespace regen_component_{name}\n")
    return ("// The unfused plan: the components' sources as stored in the cache, each in a "
            "namespace of its own.\n" + "\n".join(head) + "\n\n" + "\n".join(bodies))
