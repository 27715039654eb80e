"""The technique grid: taxonomy/<column>.yaml, optimisation-strategy rows x architecture columns.

A cell is a technique on one architecture: a prompt-visible description, a unit-test spec (a small
kernel in specs/ that exercises exactly that technique, with its oracle), the solution (that
spec's cached artifact for the column's targets) and a proof that the solution really uses the
technique: a regular expression its disassembly must match (HGMMA, UBLKCP, SETMAXNREG, v_mfma...)
or a profiler metric. A cell's level says how far it got:

    described            the description only
    unit-tested          a unit-test spec with an oracle exists for the column
    solved-and-verified  its solution is verified (up to date, record ok) on the column's hardware
    proven               ... and the solution's disassembly shows the proof
    failed               a solution exists whose disassembly does not show the proof

A solution that is compiled but not yet verified stays unit-tested; the grid says whether its
proof already shows. Which library kernels use a cell is read from their binaries, not declared:
a kernel uses a cell when its current artifact's disassembly matches the cell's proof. A declared
list would drift from the code; the disassembly cannot. Cells whose proof is a profiler metric
cannot be detected that way, and say so.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import InputError, pydantic_to_input_error
from .yamlio import read_mapping

LEVELS = ("described", "unit-tested", "solved-and-verified", "proven")
FAILED = "failed"
ID_RE = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Proof(Strict):
    """What shows that a solution uses the technique: exactly one of a disassembly pattern
    (Python regular expression, searched line by line in cuobjdump / llvm-objdump / objdump
    output) or a profiler metric with its bound. `also` adds patterns that must each match a line
    of the same disassembly too, for a technique no single instruction shows but a set of them
    does (an in-register 4 x 4 transpose: four different shuffles). `per` with `at_least` makes
    the pattern a ratio: the lines `sass` matches over the lines `per` matches, for a technique
    that shows as a proportion of instructions rather than one (register tiling: FMAs per
    shared-memory load). Static counts over the whole disassembly, so a loop the compiler left
    rolled counts once per body: the ratio of the unrolled hot loop is what it reads."""
    sass: str | None = None
    also: list[str] = Field(default_factory=list)
    per: str | None = None
    metric: str | None = None
    at_least: float | None = None
    note: str = ""

    @field_validator("sass", "per")
    @classmethod
    def _regex(cls, v):
        if v is not None:
            _compiles(v)
        return v

    @field_validator("also")
    @classmethod
    def _regexes(cls, v):
        for pattern in v:
            _compiles(pattern)
        return v

    @model_validator(mode="after")
    def _one(self):
        if (self.sass is None) == (self.metric is None):
            raise ValueError("expected exactly one of `sass: REGEX` (a disassembly pattern) or "
                             "`metric: NAME` with `at_least: VALUE` (a profiler metric)")
        if self.metric is not None and self.at_least is None:
            raise ValueError(f"metric {self.metric!r} needs `at_least: VALUE`")
        if self.also and self.sass is None:
            raise ValueError("`also:` adds disassembly patterns to `sass:`; a metric proof has none")
        if self.per is not None and (self.sass is None or self.at_least is None or self.also):
            raise ValueError("`per: REGEX` makes `sass:` a ratio: it needs `sass:` and "
                             "`at_least: VALUE`, and no `also:`")
        if self.sass is not None and self.at_least is not None and self.per is None:
            raise ValueError("`at_least:` with `sass:` bounds a ratio: add `per: REGEX` (the "
                             "instructions it is counted over)")
        return self

    def label(self) -> str:
        if self.sass is None:
            return f"{self.metric} >= {self.at_least:g}"
        if self.per is not None:
            return f"/{self.sass}/ per /{self.per}/ >= {self.at_least:g}"
        return " and ".join(f"/{p}/" for p in (self.sass, *self.also))

    def match(self, disassembly: str) -> str | None:
        """The evidence: the first line each pattern matches (joined by ' | '), or None when one
        of them matches no line; for a ratio, the counts and the ratio, or None below its bound
        (or with nothing to count it over). Only for a disassembly proof."""
        if self.per is not None:
            n, d = proof_count(self.sass, disassembly), proof_count(self.per, disassembly)
            if d == 0 or n / d < self.at_least:
                return None
            return f"{n} /{self.sass}/ per {d} /{self.per}/ = {n / d:.1f} >= {self.at_least:g}"
        lines = []
        for pattern in (self.sass, *self.also):
            line = proof_match(pattern, disassembly)
            if line is None:
                return None
            lines.append(line)
        return " | ".join(lines)


def _compiles(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc}): {pattern!r}") from None


class Cell(Strict):
    id: str = Field(pattern=ID_RE)
    row: str
    title: str
    description: str             # shown to the generator
    applicability: str = ""       # when the technique applies
    unit_test: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    proof: Proof | None = None
    users: list[str] = Field(default_factory=list)   # library kernels expected to use it


class Column(Strict):
    column: str
    title: str
    archs: list[str] = Field(min_length=1)
    cells: list[Cell]

    @model_validator(mode="after")
    def _unique(self):
        seen = set()
        for i, cell in enumerate(self.cells):
            if cell.id in seen:
                raise ValueError(f"cells[{i}].id: {cell.id!r} appears twice")
            seen.add(cell.id)
        return self


class Row(Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str


@dataclass
class Grid:
    rows: list[Row]
    columns: dict[str, Column]     # column name -> column, in file-name order
    files: dict[str, str] = field(default_factory=dict)

    def column_for(self, target) -> Column | None:
        """The column whose archs include the target's arch."""
        return next((c for c in self.columns.values() if target.arch in c.archs), None)


def _validate(model, data: dict, path: Path):
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, str(path)) from None


def load_grid(root: Path) -> Grid:
    """taxonomy/rows.yaml (the strategy rows, in display order) and one file per column. Every
    cell's row must be a declared row; a column file's name is its `column`."""
    folder = root / "taxonomy"
    rows_path = folder / "rows.yaml"
    if not folder.is_dir():
        return Grid([], {})
    raw = read_mapping(rows_path)
    if not isinstance(raw.get("rows"), list):
        raise InputError("expected `rows:` a list of {id, title}", file=str(rows_path), field="rows")
    rows = []
    for i, r in enumerate(raw["rows"]):
        if not isinstance(r, dict):
            raise InputError("expected a mapping {id, title}", file=str(rows_path), field=f"rows[{i}]")
        try:
            rows.append(Row.model_validate(r))
        except ValidationError as exc:
            raise pydantic_to_input_error(exc, str(rows_path), prefix=f"rows[{i}]") from None
    row_ids = [r.id for r in rows]
    columns, files = {}, {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "rows.yaml":
            continue
        col = _validate(Column, read_mapping(path), path)
        if col.column != path.stem:
            raise InputError(f"expected column {path.stem!r} (the file name), got {col.column!r}",
                             file=str(path), field="column")
        for i, cell in enumerate(col.cells):
            if cell.row not in row_ids:
                raise InputError(f"unknown row {cell.row!r}; expected one of {', '.join(row_ids)} "
                                 "(taxonomy/rows.yaml)", file=str(path), field=f"cells[{i}].row")
        for other in columns.values():
            shared = set(other.archs) & set(col.archs)
            if shared:
                raise InputError(f"arch {sorted(shared)[0]} is already in column {other.column!r}",
                                 file=str(path), field="archs")
        columns[col.column], files[col.column] = col, str(path)
    return Grid(rows, columns, files)


# -- evaluation -------------------------------------------------------------------------------

@dataclass
class Use:
    kernel: str
    state: str          # "proof shown" | "no proof" | "no library kernel yet" | "no artifact" | "not checked"


@dataclass
class CellState:
    cell: Cell
    column: str
    target: str
    level: str
    notes: list[str] = field(default_factory=list)
    proof_shown: bool | None = None      # None: not checked (no solution, no disassembler, metric)
    evidence: str = ""                   # the first disassembly line that matched
    users: list[Use] = field(default_factory=list)

    def as_dict(self) -> dict:
        c = self.cell
        return {"id": c.id, "row": c.row, "column": self.column, "target": self.target,
                "title": c.title, "level": self.level, "unit_test": c.unit_test,
                "proof": c.proof.label() if c.proof else None, "proof_shown": self.proof_shown,
                "evidence": self.evidence, "notes": list(self.notes),
                "users": [{"kernel": u.kernel, "state": u.state} for u in self.users]}


# what a disassembly line holds besides its instruction, removed over the whole text at once
# (multi-line mode, never crossing a line): cuobjdump's /*address*/ and /* 0x... */ encoding
# words, llvm-objdump's trailing // address: encoding comment, objdump's address: [bytes] prefix
_ADDRESS = re.compile(r"^[ \t]*/\*[0-9a-fA-F]+\*/[ \t]*", re.MULTILINE)
_ENCODING = re.compile(r"[ \t]*/\*[ \t]*0x[0-9a-fA-F]+[ \t]*\*/[ \t]*$", re.MULTILINE)
_COMMENT = re.compile(r"[ \t]*//.*$", re.MULTILINE)
_OBJDUMP = re.compile(r"^[ \t]*[0-9a-fA-F]+:[ \t]*(?:(?:[0-9a-fA-F]{2} )+[ \t]*\t)?", re.MULTILINE)


@functools.lru_cache(maxsize=256)
def _instructions(disassembly: str) -> str:
    """The disassembly's instruction text, one per line: addresses, encodings and llvm-objdump's
    trailing comments removed (what the evidence shows, and all a pattern should see), blank
    lines (sm_90's second encoding word) dropped. Whole-text substitutions, memoised: every
    cell reads the same binaries, some of them 40 000 lines."""
    text = _OBJDUMP.sub("", _COMMENT.sub("", _ENCODING.sub("", _ADDRESS.sub("", disassembly))))
    return "\n".join(line for line in (" ".join(x.split()) for x in text.split("\n")) if line)


def _matching_lines(pattern: str, disassembly: str):
    """Each instruction the pattern matches, in order, as if each were searched alone, never-
    executed @!PT placeholders left out. The whole text is searched and each hit checked on its
    own line: a scan line by line took seconds over the library's larger binaries."""
    rx = re.compile(pattern, re.MULTILINE)
    text = _instructions(disassembly)
    pos, end = 0, len(text)
    while pos <= end:
        m = rx.search(text, pos)
        if m is None:
            return
        start = text.rfind("\n", 0, m.start()) + 1
        stop = text.find("\n", m.start())
        stop = end if stop < 0 else stop
        line = text[start:stop]
        if "@!PT " not in line and rx.search(line):
            yield line
        pos = stop + 1


def proof_match(pattern: str, disassembly: str) -> str | None:
    """The first instruction of the disassembly the pattern matches, without its address and
    encoding, or None. Instructions predicated on @!PT never execute (ptxas emits them as
    placeholders, e.g. `@!PT LDS RZ, [RZ]`) and prove nothing."""
    return next(_matching_lines(pattern, disassembly), None)


def proof_count(pattern: str, disassembly: str) -> int:
    """How many instructions of the disassembly the pattern matches (never-executed @!PT
    placeholders left out, as in proof_match)."""
    return sum(1 for _ in _matching_lines(pattern, disassembly))


class Evaluator:
    """Levels of a column's cells for one target, reading the cache and compiling (memoised per
    machine by compile key) what it must disassemble."""

    def __init__(self, project, store, unit_tests: set[str], users: bool = True):
        self.project, self.store, self.unit_tests = project, store, unit_tests
        self.detect_users = users
        self._disasm: dict[tuple[str, str], tuple[str | None, str]] = {}

    def disassembly(self, kernel: str, target) -> tuple[str | None, str]:
        """(disassembly of the kernel's current artifact for target, or None; why not)."""
        k = (kernel, target.name)
        if k not in self._disasm:
            self._disasm[k] = self._disassemble(kernel, target)
        return self._disasm[k]

    def _disassemble(self, kernel, target):
        from .compile import compile_source, toolchain_problem

        entry = self.store.current(kernel, target.name)
        if entry is None:
            return None, "no artifact"
        why = toolchain_problem(target)
        if why:
            return None, f"cannot compile for {target.arch} here: {why}"
        compiled = compile_source(entry.source(), target)
        if not compiled.result.ok:
            return None, "its artifact does not compile"
        if compiled.result.disassembly is None:
            return None, "no disassembler here"
        return compiled.result.disassembly, ""

    def cell(self, cell: Cell, column: str, target) -> CellState:
        from . import plan as planning

        st = CellState(cell, column, target.name, "described")
        if cell.unit_test is not None:
            names = self.project.kernel_names()
            if cell.unit_test not in names:
                st.notes.append(f"unit test {cell.unit_test!r} has no specs/{cell.unit_test}.yaml")
            else:
                spec = self.project.spec(cell.unit_test)
                why_not = self.project.applies(spec, target)
                if why_not:
                    st.notes.append(f"unit test {cell.unit_test} does not apply: {why_not}")
                else:
                    st.level = "unit-tested"
                    self._solution(st, spec, target, planning)
        self._users(st, target)
        return st

    def _solution(self, st: CellState, spec, target, planning) -> None:
        cell = st.cell
        node = planning.plan_node(self.project, self.store, spec, target)
        if node.entry is None:
            st.notes.append("no solution yet")
            return
        verified = node.action == planning.UP_TO_DATE and bool(node.record and node.record.get("ok"))
        if cell.proof is None:
            st.notes.append("no proof declared")
        elif cell.proof.metric is not None:
            st.notes.append(f"proof {cell.proof.label()} needs a profiler run on the hardware")
        else:
            text, why = self.disassembly(spec.name, target)
            if text is None:
                st.notes.append(f"proof not checked: {why}")
            else:
                line = cell.proof.match(text)
                st.proof_shown = line is not None
                if line is None:
                    st.level = FAILED
                    st.notes.append(f"its solution's disassembly does not match {cell.proof.label()}")
                    return
                st.evidence = line
        if verified:
            st.level = "proven" if st.proof_shown else "solved-and-verified"
        else:
            why = "; ".join(node.reasons)
            st.notes.append(f"solution {node.action}" + (f": {why}" if why else ""))

    def _users(self, st: CellState, target) -> None:
        """Declared users first (a kernel that does not exist yet is named as such), then any
        other library kernel whose artifact for this target shows the proof."""
        cell, names = st.cell, self.project.kernel_names()
        library = [k for k in names if k not in self.unit_tests]
        proof = cell.proof if cell.proof is not None and cell.proof.sass is not None else None
        for k in cell.users:
            if k not in names:
                st.users.append(Use(k, "no library kernel yet"))
            elif proof is None:
                st.users.append(Use(k, "not checked"))
            else:
                st.users.append(Use(k, self._shows(k, target, proof)))
        if proof is None or proof.per is not None:
            # a ratio is no fingerprint: any FMA-heavy loop (a norm's sum of squares) reaches
            # it, so only the declared users are checked against it
            return
        for k in library if self.detect_users else []:
            if k in cell.users:
                continue
            if self.project.applies(self.project.spec(k), target) is None \
                    and self._shows(k, target, proof) == "proof shown":
                st.users.append(Use(k, "proof shown"))

    def _shows(self, kernel: str, target, proof: Proof) -> str:
        text, why = self.disassembly(kernel, target)
        if text is None:
            return why
        return "proof shown" if proof.match(text) is not None else "no proof"


def unit_test_names(grid: Grid) -> set[str]:
    return {c.unit_test for col in grid.columns.values() for c in col.cells if c.unit_test}


def evaluate(project, store, grid: Grid, targets: list, users: bool = True) -> list[CellState]:
    """Every cell of each target's column, in row order. users=False: only the declared users are
    checked, the rest of the library is not compiled and read."""
    ev = Evaluator(project, store, unit_test_names(grid), users)
    order = {r.id: i for i, r in enumerate(grid.rows)}
    out = []
    for target in targets:
        column = grid.column_for(target)
        if column is None:
            continue
        for cell in sorted(column.cells, key=lambda c: order[c.row]):
            out.append(ev.cell(cell, column.column, target))
    return out


def prompt_cells(root: Path, arch: str) -> list[Cell]:
    """The cells of the column holding `arch` (none when the project has no grid): what the
    generator is shown and what a refinement may name."""
    grid = load_grid(root)
    for col in grid.columns.values():
        if arch in col.archs:
            return list(col.cells)
    return []
