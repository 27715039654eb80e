"""The project on disk: specs/, oracles/, targets/, cache/. Loads and cross-checks them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .errors import InputError

# Loaders (pydantic models, networkx) are imported where used: `regen build` with nothing to do
# answers from the build log without them.


def find_root(start: Path | None = None) -> Path:
    """The nearest folder holding specs/ (or REGEN_ROOT)."""
    env = os.environ.get("REGEN_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / "specs").is_dir() and (p / "targets").is_dir():
            return p
    raise InputError("no regen project here: expected specs/ and targets/ in this folder or a parent "
                     "(run `regen new KERNEL` in an empty folder to start one)")


@dataclass
class Project:
    root: Path
    _specs: dict = field(default_factory=dict)
    _oracle_digests: dict[str, str] = field(default_factory=dict)
    _compositions: dict = field(default_factory=dict)

    @property
    def spec_dir(self) -> Path:
        return self.root / "specs"

    @property
    def oracle_dir(self) -> Path:
        return self.root / "oracles"

    @property
    def target_dir(self) -> Path:
        return self.root / "targets"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    # -- discovery ---------------------------------------------------------------------
    def kernel_names(self) -> list[str]:
        return sorted(p.stem for p in self.spec_dir.glob("*.yaml"))

    def library_names(self) -> list[str]:
        """The kernels a user calls (regen.ops, export): not the technique unit tests."""
        return [k for k in self.kernel_names() if self.spec(k).library]

    def target_names(self) -> list[str]:
        return sorted(p.stem for p in self.target_dir.glob("*.yaml") if not p.stem.startswith("_"))

    def spec(self, name: str):
        from .spec import load_spec

        if name not in self._specs:
            path = self.spec_dir / f"{name}.yaml"
            if not path.exists():
                raise InputError(f"unknown kernel {name!r}; known: {', '.join(self.kernel_names())}",
                                 file=str(path))
            self._specs[name] = load_spec(path)
        return self._specs[name]

    @cached_property
    def targets(self) -> dict:
        from .target import check_family, load_target

        targets = {n: load_target(self.target_dir / f"{n}.yaml") for n in self.target_names()}
        files = {n: str(self.target_dir / f"{n}.yaml") for n in targets}
        for members in _families(targets).values():
            check_family(members, files)
        return targets

    def family(self, target) -> list:
        """The targets that share `target`'s generation (itself included), by name."""
        return _families(self.targets)[target.family_name]

    def generation_view(self, target) -> dict:
        """What the generator is shown for `target`'s family (regen.target.generation_view)."""
        from .target import generation_view

        return generation_view(self.family(target))

    def technique_cells(self, target) -> dict:
        """arch -> the technique grid's cells (taxonomy/) for each arch of `target`'s family: what
        the generator is shown and what a refinement may name (regen/taxonomy.py)."""
        from .taxonomy import load_grid

        grid = load_grid(self.root)
        out = {}
        for member in self.family(target):
            column = grid.column_for(member)
            if column is not None:
                out.setdefault(member.arch, list(column.cells))
        return out

    def target(self, name: str):
        if name not in self.target_names():
            raise InputError(f"unknown target {name!r}; known: {', '.join(self.target_names())}",
                             file=str(self.target_dir / f"{name}.yaml"))
        return self.targets[name]

    def oracle_path(self, name: str) -> Path:
        return self.oracle_dir / f"{name}.py"

    def oracle_digest(self, name: str) -> str:
        if name not in self._oracle_digests:
            from .localcache import memo
            from .oracle import check_oracle, distributions, oracle_digest

            path = self.oracle_path(name)
            composed = self.spec(name).composition is not None
            try:
                content = path.read_bytes()
            except FileNotFoundError:
                check_oracle(path, composed)  # raises the clear error
                raise
            digest, known = memo("oracle-2" + ("-composed" if composed else ""), content,
                                 lambda: (check_oracle(path, composed), oracle_digest(path),
                                          distributions(path))[1:])
            self._check_distributions(name, tuple(known))
            self._oracle_digests[name] = digest
        return self._oracle_digests[name]

    def _check_distributions(self, name: str, known: tuple[str, ...]) -> None:
        """A case's `dist` names a distribution the oracle draws; a misspelt one would silently
        test the default."""
        for i, case in enumerate(self.spec(name).cases):
            if case.dist not in known:
                raise InputError(f"unknown input distribution {case.dist!r}; "
                                 f"{self.oracle_path(name).name} knows {', '.join(known)} "
                                 "(its DISTRIBUTIONS)", file=str(self.spec_dir / f"{name}.yaml"),
                                 field=f"cases[{i}].dist")

    # -- composed specs ----------------------------------------------------------------
    def composition(self, name: str):
        """The spec's composition checked against its components (regen.compose.Resolved), or
        None for a spec that is not composed."""
        spec = self.spec(name)
        if spec.composition is None:
            return None
        if name not in self._compositions:
            from .compose import resolve

            self.component_order([name])  # unknown components and cycles between specs first
            self._compositions[name] = resolve(self, spec)
        return self._compositions[name]

    def composed_verify(self, spec) -> dict:
        """A composed spec's verify-key components from its components (regen.keys)."""
        from .keys import composed_verify

        return composed_verify(spec, self.oracle_digest, self.spec)

    def oracle_job(self, spec) -> dict | None:
        """What the judge's child needs to compose a composed spec's reference (None otherwise)."""
        if spec.composition is None:
            return None
        from .compose import oracle_job

        self.composition(spec.name)
        return oracle_job(self, spec)

    # -- cross-checks ------------------------------------------------------------------
    def component_order(self, names: list[str] | None = None) -> list[str]:
        """Kernels in dependency order (components first); a cycle is an input error."""
        import networkx as nx

        graph = nx.DiGraph()
        todo = list(names or self.kernel_names())
        while todo:
            name = todo.pop()
            if name in graph and graph.nodes[name].get("seen"):
                continue
            graph.add_node(name, seen=True)
            spec = self.spec(name)
            for comp in spec.components:
                if comp not in self.kernel_names():
                    field = "components"
                    if spec.composition is not None:
                        field = next(f"composition.steps[{i}].kernel" for i, s in
                                     enumerate(spec.composition.steps) if s.kernel == comp)
                    raise InputError(f"unknown component {comp!r}: no specs/{comp}.yaml",
                                     file=str(self.spec_dir / f"{name}.yaml"), field=field)
                graph.add_edge(comp, name)
                todo.append(comp)
        try:
            return list(nx.lexicographical_topological_sort(graph))
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(graph)
            path = " -> ".join([cycle[0][0], *(v for _, v in cycle)])
            raise InputError(f"components form a cycle: {path}",
                             file=str(self.spec_dir / f"{cycle[0][1]}.yaml"),
                             field="components") from None

    def applies(self, spec, target) -> str | None:
        """None if the target column applies to the kernel, else why not."""
        if spec.targets is not None:
            unknown = [t for t in spec.targets if t not in self.target_names()]
            if unknown:
                raise InputError(f"unknown targets {unknown}; known: {self.target_names()}",
                                 file=str(self.spec_dir / f"{spec.name}.yaml"), field="targets")
            if target.name not in spec.targets:
                return f"spec.targets does not list {target.name}"
        return None

    def pairs(self, kernels: list[str] | None = None, targets: list[str] | None = None):
        """(spec, target) pairs to consider, components before their users."""
        kernels = kernels or self.kernel_names()
        for k in kernels:
            self.spec(k)
        tnames = targets or self.target_names()
        for t in tnames:
            self.target(t)
        for k in self.component_order(kernels):
            if kernels and k not in kernels and k not in self._needed_components(kernels):
                continue
            for t in tnames:
                yield self.spec(k), self.targets[t]

    def _needed_components(self, kernels: list[str]) -> set[str]:
        out, todo = set(), list(kernels)
        while todo:
            for c in self.spec(todo.pop()).components:
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out


def _families(targets: dict) -> dict[str, list]:
    out: dict[str, list] = {}
    for name in sorted(targets):
        out.setdefault(targets[name].family_name, []).append(targets[name])
    return out
