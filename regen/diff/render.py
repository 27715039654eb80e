"""`regen diff` for people (text for a terminal, markdown for a pull-request comment) and for
scripts (json)."""

from __future__ import annotations

import json
import re

from .semantics import RECOMPILE, REGENERATE, REVERIFY, UNCHANGED, Report, Row

EFFECT_NOTE = {REGENERATE: "regenerate", REVERIFY: "re-verify", RECOMPILE: "recompile",
               "plan": "changes the plan", "none": "no effect"}


def _cache_text(row: Row) -> str:
    return f"{row.cache_action}" + (f" — {'; '.join(row.cache_reasons)}" if row.cache_reasons else "")


def _unchanged_count(n: int) -> str:
    return f"{n} unchanged (--all lists them)"


def render_text(r: Report, show_all: bool = False) -> str:
    """Only what changes: the unchanged nodes are a count unless `show_all`."""
    out = [f"regen diff {r.base} → {r.head}", ""]
    if not r.items:
        out.append("no spec, oracle or target changed")
    for item in r.items:
        out.append(f"{item.kind} {item.name}: {item.status}")
        for c in item.changes:
            out.append(f"  {c.field}: {c.text} [{EFFECT_NOTE.get(c.effect, c.effect)}]")
            out += [f"      {line}" for line in c.diff]
    if r.cache:
        out += ["", "cache:"] + [f"  {line}" for line in r.cache]
    where = "in the working tree" if r.head == "working tree" else f"at {r.head}"
    out += ["", f"plan ({r.base} → {r.head}):"]
    same = 0
    for row in r.plan:
        if row.action == UNCHANGED:
            same += 1
            if show_all:
                out.append(f"  {row.label}: unchanged (cache {where}: {_cache_text(row)})")
            continue
        out.append(f"  {row.label}: {row.action} — {'; '.join(row.reasons)}")
        out.append(f"      cache {where}: {_cache_text(row)}")
    if same and not show_all:
        out.append(f"  {_unchanged_count(same)}")
    if not r.plan:
        out.append("  nothing to plan")
    return "\n".join(out) + "\n"


def _fence(lines: list[str], lang: str = "diff") -> list[str]:
    ticks = "```"
    while any(ticks in line for line in lines):
        ticks += "`"
    return [f"{ticks}{lang}", *lines, ticks]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def render_markdown(r: Report, show_all: bool = False) -> str:
    """A pull-request comment; the unchanged nodes are a count unless `show_all`."""
    changed = [i for i in r.items if i.changed]
    todo = [row for row in r.plan if row.action != UNCHANGED]
    out = [f"## regen diff: `{r.base}` → {r.head if r.head == 'working tree' else f'`{r.head}`'}", ""]
    counts = {}
    for i in changed:
        counts[i.kind] = counts.get(i.kind, 0) + 1
    summary = (", ".join(f"{n} {k}{'s' * (n != 1)}" for k, n in counts.items()) + " changed"
               if counts else "no spec, oracle or target changed")
    actions: dict[str, int] = {}
    for row in todo:
        actions[row.action] = actions.get(row.action, 0) + 1
    plan_text = ", ".join(f"{n} {a}" for a, n in actions.items()) or "nothing to rebuild"
    out += [f"**{summary}; plan: {plan_text}.**", ""]
    for item in r.items:
        title = {"added": " (new)", "removed": " (removed)", "formatting": " (formatting only)"}
        out.append(f"### {item.kind} `{item.name}`{title.get(item.status, '')}")
        out.append("")
        for c in item.changes:
            note = EFFECT_NOTE.get(c.effect, c.effect)
            if c.field == "code" and c.diff:
                out.append(f"- {c.text} → _{note}_")
                out += ["", "<details><summary>source diff</summary>", ""]
                out += _fence(c.diff) + ["", "</details>", ""]
            elif c.diff:
                out.append(f"- **{c.field}** ({c.text}) → _{note}_")
                out += [""] + _fence(c.diff) + [""]
            else:
                out.append(f"- **{c.field}**: {c.text} → _{note}_")
        out.append("")
    if r.cache:
        out += ["### cache", ""] + [f"- {_cell(line)}" for line in r.cache] + [""]
    where = "in the working tree" if r.head == "working tree" else f"at `{r.head}`"
    out += ["### plan", ""]
    if todo:
        out += [f"| node | action | why | cache {where} |", "|---|---|---|---|"]
        for row in todo:
            cache = f"{row.cache_action}" + (f": {'; '.join(row.cache_reasons)}"
                                             if row.cache_reasons else "")
            out.append(f"| `{row.label}` | **{row.action}** | {_cell('; '.join(row.reasons))} | "
                       f"{_cell(cache)} |")
        out.append("")
    else:
        out += ["Nothing to regenerate, re-verify or recompile.", ""]
    same = [row for row in r.plan if row.action == UNCHANGED]
    if same and not show_all:
        out += [f"{_unchanged_count(len(same))}.", ""]
    elif same:
        out += [f"<details><summary>{len(same)} unchanged</summary>", ""]
        out += [f"- `{row.label}` — cache {where}: {row.cache_action}"
                + (f" ({_cell('; '.join(row.cache_reasons))})" if row.cache_reasons else "")
                for row in same]
        out += ["", "</details>", ""]
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def render_json(r: Report) -> str:
    """Everything, unchanged nodes included: scripts filter for themselves."""
    return json.dumps(r.to_json(), indent=1, ensure_ascii=False) + "\n"
