"""`regen taxonomy`: the technique grid (taxonomy/) per hardware column, each cell's level and the
library kernels whose binaries show its proof. Reads the cache and compiles what it must
disassemble (memoised per machine); needs no GPU."""

from __future__ import annotations

import json

from . import _common

HELP = "the technique grid: rows x columns, each cell's level, proof and users"

_SHORT = {"described": "described", "unit-tested": "unit-tested",
          "solved-and-verified": "verified", "proven": "PROVEN", "failed": "FAILED"}


def add_arguments(parser) -> None:
    parser.add_argument("--target", "-t", action="append", metavar="T",
                        help="target column, repeatable (default: every target with a column)")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                        help="output format (default: text)")
    parser.add_argument("--declared-users", action="store_true",
                        help="check only the users each cell names, without compiling and reading "
                             "every library kernel's binary (faster)")


def run(args) -> int:
    from .. import taxonomy
    from ..errors import InputError

    project = _common.project(args)
    grid = taxonomy.load_grid(project.root)
    if not grid.columns:
        raise InputError("no technique grid here: expected taxonomy/rows.yaml and one "
                         "taxonomy/<column>.yaml per architecture", file=str(project.root / "taxonomy"))
    names = args.target or project.target_names()
    targets = [project.target(n) for n in names]
    if args.target:
        for t in targets:
            if grid.column_for(t) is None:
                raise InputError(f"no column holds {t.name}'s arch {t.arch}; columns: "
                                 + ", ".join(f"{c.column} ({', '.join(c.archs)})"
                                             for c in grid.columns.values()),
                                 file=str(project.root / "taxonomy"), field="archs")
    targets = [t for t in targets if grid.column_for(t) is not None]
    for column in grid.columns.values():   # a unit test named by a cell must exist
        for i, cell in enumerate(column.cells):
            if cell.unit_test and cell.unit_test not in project.kernel_names():
                raise InputError(f"unit test {cell.unit_test!r}: no specs/{cell.unit_test}.yaml",
                                 file=grid.files[column.column], field=f"cells[{i}].unit_test")
    states = taxonomy.evaluate(project, _common.store(project), grid, targets,
                               users=not args.declared_users)
    render = {"text": text, "markdown": markdown, "json": as_json}[args.format]
    print(render(grid, targets, states), end="")
    return 1 if any(s.level == taxonomy.FAILED for s in states) else 0


# -- rendering --------------------------------------------------------------------------------

def _users(state) -> str:
    if not state.users:
        return "—"
    return ", ".join(u.kernel if u.state == "proof shown" else f"{u.kernel} ({u.state})"
                     for u in state.users)


def _proof(state) -> str:
    proof = state.cell.proof
    if proof is None:
        return "none declared"
    if state.proof_shown is True:
        return f"shown: {state.evidence.rstrip(' ;')}"
    if state.proof_shown is False:
        return f"MISSING {proof.label()}"
    return proof.label()


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines) + "\n"


def _by_target(targets, states):
    return {t.name: [s for s in states if s.target == t.name] for t in targets}


def _summary(states) -> str:
    from collections import Counter

    counts = Counter(s.level for s in states)
    from ..taxonomy import FAILED, LEVELS

    return ", ".join(f"{counts[lv]} {lv}" for lv in (*reversed(LEVELS), FAILED) if counts[lv])


def _grid_rows(grid, targets, states, fmt) -> tuple[list[str], list[list[str]]]:
    """Rows x target columns, each entry the cells' ids and levels."""
    per = _by_target(targets, states)
    header = ["row", *(f"{t.name} ({grid.column_for(t).column})" for t in targets)]
    rows = []
    for row in grid.rows:
        entries = []
        for t in targets:
            cells = [s for s in per[t.name] if s.cell.row == row.id]
            entries.append(" / ".join(fmt(s) for s in cells) if cells else "·")
        if any(e != "·" for e in entries):
            rows.append([row.title, *entries])
    return header, rows


def text(grid, targets, states) -> str:
    if len(targets) != 1:
        header, rows = _grid_rows(grid, targets, states,
                                  lambda s: f"{s.cell.id} {_SHORT[s.level]}")
        out = _table(header, rows)
        for t in targets:
            out += f"{t.name}: {_summary(_by_target(targets, states)[t.name])}\n"
        return out + "(regen taxonomy -t T: proofs, users and notes of one column)\n"
    t = targets[0]
    col = grid.column_for(t)
    out = f"{t.name}: column {col.column}, {col.title}\n"
    rows = [[s.cell.row, s.cell.id, s.level, _proof(s), _users(s)] for s in states]
    out += _table(["row", "cell", "level", "proof", "used by"], rows)
    notes = [(s.cell.id, n) for s in states for n in s.notes]
    if notes:
        out += "notes:\n" + "".join(f"  {cid}: {n}\n" for cid, n in notes)
    return out + f"{_summary(states)}\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


def markdown(grid, targets, states) -> str:
    def md_table(header, rows):
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(_md_escape(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"

    header, rows = _grid_rows(grid, targets, states,
                              lambda s: f"`{s.cell.id}` {_SHORT[s.level]}")
    out = "## Technique grid\n\n" + md_table(header, rows)
    for t in targets:
        mine = _by_target(targets, states)[t.name]
        out += f"\n### {t.name} ({grid.column_for(t).column}): {_summary(mine)}\n\n"
        out += md_table(["cell", "title", "level", "proof", "used by", "notes"],
                        [[f"`{s.cell.id}`", s.cell.title, s.level, _proof(s), _users(s),
                          "; ".join(s.notes)] for s in mine])
    return out


def as_json(grid, targets, states) -> str:
    return json.dumps({"rows": [r.model_dump() for r in grid.rows],
                       "targets": {t.name: grid.column_for(t).column for t in targets},
                       "cells": [s.as_dict() for s in states]}, indent=1) + "\n"
