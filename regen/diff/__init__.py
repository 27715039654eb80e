"""`regen diff [BASE [HEAD]]`: review spec changes, not generated code.

A pull request that touches a kernel changes prose, tolerances and an oracle; the generated source in
cache/ is a lockfile. This command reads BASE (default HEAD) and HEAD (default the working tree)
from git, loads both with the same loaders the build uses, and reports:

- a semantic diff per spec (intent as a sentence-per-line diff with a word count, summary,
  signature, invariants, tolerances, cases, profile, components, targets), per oracle (the AST digest
  decides: a comment-only edit is no change) and per target (which fields);
- the plan for every (kernel, target) of HEAD, one reason per line, computed by comparing BASE's and
  HEAD's key components: generate (new spec or target), regenerate (generate key), re-verify
  (verify key: oracle, tolerances, cases, profile, peaks, hardware), recompile (toolchain), unchanged;
- what the committed cache at HEAD says about each node (regen.plan.plan_node), so a reviewer sees
  whether the pull request brought its regenerated or re-verified entries along;
- which cache entries and records changed.

Formats: text, markdown (a pull-request comment), json. Text and markdown list only the nodes that
change, the unchanged ones as a count (`--all` lists them); json has everything.
`--detailed-exitcode`: 0 no change, 1 error, 2 changes. YAML formatting, comments and prose
reflowing are not changes.

materialise.py reads a revision into a temporary project, semantics.py says what changed and what
it causes, render.py writes it for people and scripts.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ..errors import RegenError
from .materialise import TRACKED, Side, _describe_rev, materialise
from .render import EFFECT_NOTE, render_json, render_markdown, render_text
from .semantics import (GENERATE, RECOMPILE, REGENERATE, REMOVED, REVERIFY, UNCHANGED, UNSUPPORTED, Change, Item, Report, Row, add_cache_state,
                        cache_changes, change_plan, compare, effect, oracle_change, sentences,
                        spec_changes, target_changes)

__all__ = ["TRACKED", "Side", "materialise", "EFFECT_NOTE", "render_json", "render_markdown",
           "render_text", "GENERATE", "RECOMPILE", "REGENERATE", "REMOVED", "REVERIFY",
           "UNCHANGED", "UNSUPPORTED", "Change", "Item", "Report",
           "Row", "add_cache_state", "cache_changes", "change_plan", "compare", "effect", "oracle_change",
           "sentences", "spec_changes", "target_changes", "diff", "run_diff"]


def diff(project, base_rev: str = "HEAD", head_rev: str | None = None) -> Report:
    root = project.root
    with tempfile.TemporaryDirectory(prefix="regen-diff-") as tmp:
        base_root = materialise(root, base_rev, Path(tmp) / "base")
        base = Side(base_root, base_rev, strict=False)
        if head_rev is None:
            head = Side(root, "working tree", strict=True)
        else:
            head = Side(materialise(root, head_rev, Path(tmp) / "head"), head_rev, strict=True)
        base.label = _describe_rev(root, base_rev)
        if head_rev is not None:
            head.label = _describe_rev(root, head_rev)
        return compare(base, head)


def run_diff(project, args) -> int:
    """The `regen diff` command. Exit: 0, or with --detailed-exitcode 0 no change, 1 error,
    2 changes."""
    detailed = getattr(args, "detailed_exitcode", False)
    try:
        report = diff(project, getattr(args, "base", None) or "HEAD", getattr(args, "head", None))
    except RegenError as exc:
        if not detailed:
            raise
        print(f"regen: error: {exc}", file=sys.stderr)
        return 1
    fmt = getattr(args, "format", "text")
    if fmt == "json":
        sys.stdout.write(render_json(report))
    else:
        render = render_markdown if fmt == "markdown" else render_text
        sys.stdout.write(render(report, show_all=getattr(args, "all", False)))
    if detailed:
        return 2 if report.changed else 0
    return 0
