"""The writer of an unfused plan (regen.compose.unfused): a composition's steps, level by level,
become one launch recipe over the composed spec's names, its intermediates workspaces, and the
leaf components' sources one translation unit. Nothing here imports torch."""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import expr
from .compose import BoundStep, ComposeError, Resolved


@dataclass
class Ref:
    """Where a tensor of some level of the plan lives: a buffer of the top-level recipe, `offset`
    elements in (an expression of the top level's names and repeat indices); `first`: where it
    lives on a repeat group's first iteration instead (a carried input)."""
    buffer: str
    offset: str = "0"
    first: "Ref | None" = None

    def arg(self):
        return self.buffer if self.offset == "0" else {"tensor": self.buffer, "offset": self.offset}


def _mul(a: str, b: str) -> str:
    return f"({a}) * ({b})"


def _add(a: str, b: str) -> str:
    return b if a == "0" else f"({a}) + ({b})"


class PlanWriter:
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
        expressions of the top level's names; refs: this level's inputs and outputs -> Ref;
        prefix: its workspaces' name prefix; group: the enclosing repeat group's (index, count)."""
        level: dict[str, Ref] = dict(refs)
        for buf, (step_name, tensor) in res.workspaces.items():
            b = next(x for x in res.steps if x.step.name == step_name)
            t = next(x for x in b.spec.signature.outputs if x.name == tensor)
            mapping = _over(_symbol_map(b), sym)
            shape = [expr.substitute(d, mapping) for d in t.shape]
            name = prefix + buf
            if tensor in b.step.carry.values():   # ping-pong: iteration i writes slot i % 2
                count = expr.substitute(b.step.repeat, sym)
                shape = [2, *shape]
                level[buf] = Ref(name, _mul(f"(({count}) - 1) % 2", _numel_expr(shape[1:])))
            else:
                level[buf] = Ref(name)
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
                    step_refs[t.name] = Ref(r.buffer, _add(r.offset, _mul(idx, _numel_expr(
                        shapes[t.name]))))
            for t in b.spec.signature.outputs:
                if t.inplace_of in layered:
                    step_refs[t.name] = step_refs[t.inplace_of]
                elif t.name in b.step.carry.values():
                    r = step_refs[t.name]   # the workspace's two slots
                    step_refs[t.name] = Ref(r.buffer, _mul(f"{idx} % 2", _numel_expr(shapes[t.name])))
            for k, o in b.step.carry.items():
                r = level[b.buffers[o]]
                step_refs[k] = Ref(r.buffer, _mul(f"({idx} - 1) % 2", _numel_expr(shapes[o])),
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
            local[w.name] = Ref(name)
            if w.zero and group is not None:   # zeroed before every iteration: a slice each
                item["shape"] = [group[1], *shape]
                local[w.name] = Ref(name, _mul(group[0], _numel_expr(shape)))
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
