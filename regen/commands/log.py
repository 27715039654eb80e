"""Provenance of a node's cached artifact: who or what wrote it, the search tree behind it and what
it cost; with --failed, the searches that found nothing (kept on this machine, not in cache/)."""

from __future__ import annotations

import json
import sys

from ..errors import InputError
from . import _common

HELP = "provenance, search tree and spend of the cached artifact (--failed: of failed searches)"
FEEDBACK_LINES = 4   # of each failing candidate's feedback, with --failed


def add_arguments(parser) -> None:
    _common.add_node(parser)
    parser.add_argument("--failed", action="store_true",
                        help="show the searches that ended without a passing candidate, kept in "
                             "this machine's local cache: tree, feedback and spend")
    parser.add_argument("--json", action="store_true",
                        help="machine-readable output: provenance (search tree included) and spend")


def run(args) -> int:
    project = _common.project(args)
    project.spec(args.kernel)       # an unknown kernel or target is an input error, not "nothing"
    project.target(args.target)
    if args.failed:
        return _failed(args, project)
    entry = _common.store(project).current(args.kernel, args.target)
    if entry is None:
        raise InputError(f"no artifact for {args.kernel}@{args.target} "
                         f"(`regen log --failed {args.kernel} -t {args.target}` shows failed "
                         "searches)")
    prov = entry.provenance()
    if args.json:
        json.dump({"kernel": args.kernel, "target": args.target, "entry": entry.id,
                   "provenance": prov, "spend": prov.get("spend")}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{args.kernel}@{args.target} entry {entry.id}")
    for k in sorted(prov):
        if k not in ("search", "spend"):
            print(f"  {k}: {prov[k]}")
    search = prov.get("search")
    if search:
        print(render_tree(search))
    if prov.get("spend"):
        print(f"spend: {render_spend(prov['spend'])}")
    return 0


def _failed(args, project) -> int:
    from ..localcache import failed_searches, location

    kept = failed_searches(project.root, args.kernel, args.target)
    if args.json:
        json.dump({"kernel": args.kernel, "target": args.target, "failed": kept}, sys.stdout,
                  indent=1)
        print()
        return 0
    if not kept:
        print(f"no failed search of {args.kernel}@{args.target} is kept on this machine "
              f"({location()})")
        return 0
    for i, rec in enumerate(reversed(kept)):
        if i:
            print()
        model = f" {rec['model']}" if rec.get("model") else ""
        print(f"{args.kernel}@{args.target}: failed {rec.get('action')} at {rec.get('at')} "
              f"({rec.get('generator')}{model})")
        if rec.get("reasons"):
            print(f"  because: {'; '.join(rec['reasons'])}")
        print(f"  stopped: {rec.get('stop_reason')}")
        if rec.get("error"):
            print(f"  error: {rec['error'].splitlines()[0]}")
        print(render_tree(rec.get("search") or {}, feedback=True))
        print(f"spend: {render_spend(rec.get('spend') or {})}")
    return 0


def _time(t: float | None) -> str:
    if not t:
        return ""
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def render_spend(spend: dict) -> str:
    text = (f"{spend.get('candidates', 0)} candidates, {spend.get('tokens', 0)} tokens, "
            f"${spend.get('usd', 0.0):.4f}, {spend.get('seconds', 0.0):.1f} s")
    if spend.get("usd_unknown"):
        text += " (a model's price is unknown: dollars understated)"
    return text


def render_tree(search, feedback: bool = False) -> str:
    """The search tree, one line per candidate under its parent. provenance["search"] is
    SearchResult.tree_json(); entries written before it had a bare list of nodes."""
    nodes = search.get("nodes", []) if isinstance(search, dict) else list(search or [])
    best = search.get("best") if isinstance(search, dict) else None
    lines = [f"search: {len(nodes)} candidates"
             + (f", best #{best}" if best is not None else ", none passed")
             + (f"; stopped: {search['stop_reason']}" if isinstance(search, dict)
                and search.get("stop_reason") else "")]
    children: dict = {}
    for n in nodes:
        children.setdefault(n.get("parent"), []).append(n)

    def walk(parent, depth):
        for n in children.get(parent, []):
            lines.append("  " * (depth + 1) + _node_line(n, best))
            if feedback and not n.get("ok"):
                text = n.get("error") or n.get("feedback") or ""
                for line in text.strip().splitlines()[:FEEDBACK_LINES]:
                    lines.append("  " * (depth + 3) + "| " + line[:160])
            walk(n.get("id"), depth + 1)

    walk(None, 0)
    path = search.get("path") if isinstance(search, dict) else None
    if path:
        lines.append("path through the technique grid: "
                     + " -> ".join(p.get("cell") or "(no cell named)" for p in path))
    known = {n.get("id") for n in nodes}
    for n in nodes:   # a node whose parent is missing (never expected) is still shown
        if n.get("parent") is not None and n.get("parent") not in known:
            lines.append("  " + _node_line(n, best))
    return "\n".join(lines)


def _node_line(n: dict, best) -> str:
    mark = "✓" if n.get("ok") else "✗"
    what = ("call failed" if n.get("error") and n.get("stage") == "generate"
            else f"{n.get('stage')} ok" if n.get("ok") else f"{n.get('stage')} failed")
    text = f"{mark} #{n.get('id')} {n.get('purpose')}"
    if n.get("cell"):
        text += f" [{n['cell']}{' (not in the grid)' if n.get('cell_unknown') else ''}]"
    if n.get("note"):
        text += f" \"{n['note'][:70]}\""
    text += f" -> {what}"
    if n.get("time_s"):
        text += f" {_time(n['time_s'])}"
    retime = n.get("retime")
    if retime and retime.get("time_s") and retime.get("incumbent_time_s"):
        text += (f" (re-timed {_time(retime['time_s'])} vs #{retime['incumbent']} "
                 f"{_time(retime['incumbent_time_s'])}, needed {retime['threshold']:.0%} faster: "
                 f"{'accepted' if retime['accepted'] else 'not faster beyond noise'})")
    text += f" [{n.get('tokens', 0)} tok, ${n.get('usd', 0.0):.4f}]"
    if best is not None and n.get("id") == best:
        text += " <- best"
    return text
