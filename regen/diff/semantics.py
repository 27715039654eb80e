"""What changed between two sides of `regen diff`, in meaning: per spec field, per oracle (the AST
digest decides), per target field, and the plan it implies per (kernel, target)."""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import keys
from ..spec import normalise_prose
from ..target import generation_view
from .materialise import Side

# actions in the change plan (BASE -> HEAD)
GENERATE, REGENERATE, REVERIFY, RECOMPILE = "generate", "regenerate", "re-verify", "recompile"
UNCHANGED, REMOVED, UNSUPPORTED = "unchanged", "removed", "unsupported"

_ACTION_OF = {"generate": REGENERATE, "verify": REVERIFY, "compile": RECOMPILE, "plan": "plan"}


def effect(kind: str, name: str) -> str:
    """What a change to a spec or target field causes, from the key it feeds (regen.keys)."""
    return _ACTION_OF[keys.field_effect(kind, name)]


# -- the model of a diff -----------------------------------------------------------------------
@dataclass
class Change:
    field: str                      # dotted path, e.g. "tolerance.float32.atol"
    text: str                       # one line for people
    effect: str                     # regenerate | re-verify | recompile | plan | none
    diff: list[str] = field(default_factory=list)   # unified diff lines, where useful


@dataclass
class Item:
    kind: str                       # spec | oracle | target
    name: str
    status: str                     # added | removed | changed | formatting | unchanged
    changes: list[Change] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.status in ("added", "removed", "changed")


@dataclass
class Row:
    kernel: str
    target: str
    action: str
    reasons: list[str]
    cache_action: str | None = None     # what the committed cache at HEAD needs (plan_node)
    cache_reasons: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kernel}@{self.target}"


@dataclass
class Report:
    base: str
    head: str
    items: list[Item]
    plan: list[Row]
    cache: list[str]

    @property
    def changed(self) -> bool:
        return (any(i.changed for i in self.items) or bool(self.cache)
                or any(r.action != UNCHANGED for r in self.plan))

    def to_json(self) -> dict:
        return {"base": self.base, "head": self.head, "changed": self.changed,
                "items": [{**asdict(i), "changes": [asdict(c) for c in i.changes]}
                          for i in self.items],
                "plan": [asdict(r) for r in self.plan], "cache": self.cache}


# -- semantic comparison ---------------------------------------------------------------------------
def _fmt(value) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = keys.canonical(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _flat_changes(name: str, old, new, effect: str) -> list[Change]:
    fo, fn = _flat(old), _flat(new)
    out = []
    for k in sorted(set(fo) | set(fn), key=str):
        path = f"{name}.{k}" if k else name
        if k not in fo:
            out.append(Change(path, f"added: {_fmt(fn[k])}", effect))
        elif k not in fn:
            out.append(Change(path, f"removed (was {_fmt(fo[k])})", effect))
        elif fo[k] != fn[k]:
            if isinstance(fo[k], str) and isinstance(fn[k], str) and (
                    len(fo[k]) > 60 or len(fn[k]) > 60 or "\n" in fo[k] + fn[k]):
                out.append(_prose(path, fo[k], fn[k], effect))
            else:
                out.append(Change(path, f"{_fmt(fo[k])} → {_fmt(fn[k])}", effect))
    return out


def _word_counts(old: str, new: str) -> tuple[int, int]:
    a, b = old.split(), new.split()
    added = removed = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):
            removed += i2 - i1
        if op in ("replace", "insert"):
            added += j2 - j1
    return added, removed


_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9`(\[\"'])")


def sentences(text: str) -> list[str]:
    """Prose as one sentence per line, paragraphs kept: line breaks of the YAML do not matter."""
    lines: list[str] = []
    for i, para in enumerate(p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()):
        if i:
            lines.append("")
        lines += _SENTENCE_END.split(normalise_prose(para))
    return lines


def _prose(name: str, old: str, new: str, effect: str) -> Change:
    added, removed = _word_counts(normalise_prose(old), normalise_prose(new))
    counts = ", ".join(p for p in (f"{added} word{'s' * (added != 1)} added" if added else "",
                                   f"{removed} removed" if removed else "") if p) or "reordered"
    diff = list(difflib.unified_diff(sentences(old), sentences(new), lineterm="", n=1))[2:]
    return Change(name, counts, effect, diff)


def _by(items: list[dict], key) -> dict:
    out: dict = {}
    for it in items:
        k = key(it)
        while k in out:
            k += "#"
        out[k] = it
    return out


def _case_label(case, default_dtype: str) -> str:
    return case.label(default_dtype) + (" (bench)" if case.bench else "")


def _normalise_signature(sig: dict) -> dict:
    for t in sig["inputs"] + sig["outputs"] + sig["params"]:
        t["description"] = normalise_prose(t.get("description", ""))
    return {"dtypes": sig["dtypes"], "inputs": _by(sig["inputs"], lambda t: t["name"]),
            "outputs": _by(sig["outputs"], lambda t: t["name"]),
            "params": _by(sig["params"], lambda t: t["name"])}


def spec_changes(old, new) -> list[Change]:
    out: list[Change] = []
    if normalise_prose(old.summary) != normalise_prose(new.summary):
        out.append(Change("summary", f"{_fmt(normalise_prose(old.summary))} → "
                                     f"{_fmt(normalise_prose(new.summary))}", effect("spec", "summary")))
    if normalise_prose(old.intent) != normalise_prose(new.intent):
        out.append(_prose("intent", old.intent, new.intent, effect("spec", "intent")))
    out += _flat_changes("signature", _normalise_signature(old.signature.model_dump(mode="json")),
                         _normalise_signature(new.signature.model_dump(mode="json")),
                         effect("spec", "signature"))
    inv = lambda s: {i.name: normalise_prose(i.description) for i in s.invariants}  # noqa: E731
    out += _flat_changes("invariants", inv(old), inv(new), effect("spec", "invariants"))
    old_cases = _by([c for c in old.cases], lambda c: _case_label(c, old.signature.dtypes[0]))
    new_cases = _by([c for c in new.cases], lambda c: _case_label(c, new.signature.dtypes[0]))
    for label in [*old_cases, *(k for k in new_cases if k not in old_cases)]:
        a, b = old_cases.get(label), new_cases.get(label)
        if a is None:
            out.append(Change(f"cases[{label}]", "added", effect("spec", "cases")))
        elif b is None:
            out.append(Change(f"cases[{label}]", "removed", effect("spec", "cases")))
        elif a != b:
            out += _flat_changes(f"cases[{label}]", a.model_dump(mode="json"),
                                 b.model_dump(mode="json"), effect("spec", "cases"))
    out += _flat_changes("tolerance", {k: v.model_dump() for k, v in old.tolerance.items()},
                         {k: v.model_dump() for k, v in new.tolerance.items()},
                         effect("spec", "tolerance"))
    out += _flat_changes("profile", old.profile.model_dump(mode="json"),
                         new.profile.model_dump(mode="json"), effect("spec", "profile"))
    if old.components != new.components:
        out.append(Change("components", f"{_fmt(old.components)} → {_fmt(new.components)}",
                          effect("spec", "components")))
    if old.targets != new.targets:
        show = lambda t: "every target" if t is None else ", ".join(t) or "none"  # noqa: E731
        out.append(Change("targets", f"{show(old.targets)} → {show(new.targets)}", effect("spec", "targets")))
    if old.salt != new.salt:
        out.append(Change("salt", f"{_fmt(old.salt or '∅')} → {_fmt(new.salt or '∅')}",
                          effect("spec", "salt")))
    handled = {"name", "summary", "intent", "signature", "invariants", "cases", "tolerance",
               "profile", "components", "targets", "salt"}
    for name in type(new).model_fields:
        if name not in handled and getattr(old, name, None) != getattr(new, name, None):
            out += _flat_changes(name, _dump(getattr(old, name, None)),
                                 _dump(getattr(new, name, None)), effect("spec", name))
    return out


def _dump(v):
    return v.model_dump(mode="json") if hasattr(v, "model_dump") else v


def target_changes(old, new) -> list[Change]:
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    out: list[Change] = []
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        if name in ("notes", "description"):
            va, vb = normalise_prose(va or ""), normalise_prose(vb or "")
        if va == vb:
            continue
        action = effect("target", name)
        if name == "taxonomy":
            va, vb = _by(va, lambda c: c["id"]), _by(vb, lambda c: c["id"])
        if name in ("features",):
            added = [f for f in vb if f not in va]
            removed = [f for f in va if f not in vb]
            text = ", ".join([*(f"+{f}" for f in added), *(f"−{f}" for f in removed)]) or \
                f"{_fmt(va)} → {_fmt(vb)}"
            out.append(Change(name, text, action))
            continue
        out += _flat_changes(name, va, vb, action)
    return out


def oracle_change(name: str, base: Side, head: Side) -> Item | None:
    in_b, in_h = name in base.oracle_text, name in head.oracle_text
    if not in_b and not in_h:
        return None
    if not in_b:
        return Item("oracle", name, "added")
    if not in_h:
        return Item("oracle", name, "removed")
    src_b, src_h = base.oracle_text[name], head.oracle_text[name]
    if src_b == src_h:
        return Item("oracle", name, "unchanged")
    db, dh = base.oracle_digests.get(name), head.oracle_digests.get(name)
    if db is not None and db == dh:
        return Item("oracle", name, "formatting", [Change(
            "code", "comments, docstrings or layout only: the AST is unchanged, nothing to do",
            "none")])
    diff = list(difflib.unified_diff(src_b.splitlines(), src_h.splitlines(),
                                     f"a/oracles/{name}.py", f"b/oracles/{name}.py", lineterm=""))
    return Item("oracle", name, "changed", [Change(
        "code", f"code changed (AST digest {(db or 'invalid')[:12]} → {(dh or 'invalid')[:12]})",
        REVERIFY, diff)])


# -- the plan --------------------------------------------------------------------------------------
def _toolchain(target) -> dict:
    return {"name": target.toolchain.name, "flags": list(target.toolchain.flags),
            "arch": target.arch}


def _short_digest(d: str | None) -> str:
    return (d or "missing")[:12]


def _view(side: Side, target) -> dict:
    """The generation view of `target`'s family as that side's targets define it."""
    members = [t for _, t in sorted(side.targets.items()) if t.family_name == target.family_name]
    return generation_view(members or [target])


def change_plan(base: Side, head: Side) -> list[Row]:
    """The rebuild plan from BASE to HEAD: the planner's classify() over each side's keys."""
    from ..plan import UP_TO_DATE, classify
    from ..prompt import TEMPLATE_VERSION

    rows: list[Row] = []
    planned: dict[tuple[str, str], str] = {}
    head_pairs = set()
    for spec, target in head.project.pairs():
        k, t = spec.name, target.name
        head_pairs.add((k, t))
        why_not = head.project.applies(spec, target)
        if why_not:
            if base.supported(k, t):
                rows.append(Row(k, t, UNSUPPORTED, [why_not]))
            continue
        row = Row(k, t, UNCHANGED, [])
        old_spec, old_target = base.specs.get(k), base.targets.get(t)
        if k in base.invalid:
            row.action, row.reasons = GENERATE, [f"the spec did not load at {base.label}"]
        elif old_spec is None:
            row.action, row.reasons = GENERATE, ["new spec"]
        elif old_target is None:
            row.action, row.reasons = GENERATE, ["new target"]
        elif not base.supported(k, t):
            row.action, row.reasons = GENERATE, [f"spec.targets now lists {t}"]
        else:
            old = {"generate": keys.generate_components(
                       old_spec, _view(base, old_target), base.component_ids(old_spec, t),
                       TEMPLATE_VERSION),
                   "verify": {**keys.verify_components(
                       old_spec, old_target, _short_digest(base.oracle_digests.get(k)), "", "",
                       _composed(base, old_spec)),
                       "target.hardware": old_target.hardware.match},
                   "toolchain": _toolchain(old_target)}
            new = {"generate": keys.generate_components(
                       spec, _view(head, target), head.component_ids(spec, t), TEMPLATE_VERSION),
                   "verify": {**keys.verify_components(
                       spec, target, _short_digest(head.oracle_digests.get(k)), "", "",
                       _composed(head, spec)),
                       "target.hardware": target.hardware.match},
                   "toolchain": _toolchain(target)}
            row.action, row.reasons = classify(old, new)
            rebuilt = [f"component {c}@{t} will be {planned[(c, t)]}d" for c in spec.components
                       if planned.get((c, t)) in (GENERATE, REGENERATE)]
            if rebuilt:   # its users are keyed on the component's new entry
                row.action, row.reasons = REGENERATE, rebuilt + row.reasons
            if row.action == UP_TO_DATE:
                row.action = UNCHANGED
        planned[(k, t)] = row.action
        rows.append(row)
    for k in sorted(base.specs):
        for t in sorted(base.targets):
            if (k, t) in head_pairs or not base.supported(k, t):
                continue
            why = "spec removed" if k not in head.specs and k not in head.invalid else \
                "target removed" if t not in head.targets else "no longer planned"
            rows.append(Row(k, t, REMOVED, [why]))
    return rows


def add_cache_state(rows: list[Row], head: Side) -> None:
    """What the committed cache at HEAD needs per node (the same plan `regen status` shows)."""
    from .. import plan as planning

    for row in rows:
        if row.action == REMOVED:
            entry = head.store.current(row.kernel, row.target)
            row.cache_action = "orphaned" if entry else "—"
            row.cache_reasons = [f"cache/{row.kernel}/{row.target} can be deleted"] if entry else []
            continue
        node = planning.plan_node(head.project, head.store, head.project.spec(row.kernel),
                                  head.project.target(row.target))
        row.cache_action, row.cache_reasons = node.action, list(node.reasons)


def cache_changes(base: Side, head: Side) -> list[str]:
    pairs = set()
    for side in (base, head):
        for ptr in side.store.root.glob("*/*/current.json"):
            pairs.add((ptr.parent.parent.name, ptr.parent.name))
    out = []
    for k, t in sorted(pairs):
        eb, eh = base.store.current(k, t), head.store.current(k, t)
        label = f"{k}@{t}"
        if eh is not None and (eb is None or eb.id != eh.id):
            try:
                prov = eh.provenance()
            except (OSError, ValueError):
                prov = {}
            who = prov.get("generator", "?")
            extra = prov.get("model") or prov.get("author") or prov.get("command")
            who += f" ({extra})" if extra else ""
            out.append(f"{label}: new entry {eh.id} by {who}" if eb is None else
                       f"{label}: entry {eb.id} → {eh.id} by {who}")
        elif eh is None and eb is not None:
            out.append(f"{label}: entry {eb.id} removed")
        if eh is None:
            continue
        old = {(Path(r["_path"]).name, r.get("verified_at")) for r in
               (base.store.records(k, t, eh.id) if eb is not None and eb.id == eh.id else [])}
        for rec in head.store.records(k, t, eh.id):
            if (Path(rec["_path"]).name, rec.get("verified_at")) in old:
                continue
            from ..plan import verified_where

            verdict = "passed" if rec.get("ok") else f"FAILED: {rec.get('reason')}"
            out.append(f"{label}: new record, verified on {verified_where(rec)}: {verdict}")
    return out


def compare(base: Side, head: Side) -> Report:
    items: list[Item] = []
    for name in sorted(set(base.spec_text) | set(head.spec_text)):
        if name not in base.spec_text:
            items.append(Item("spec", name, "added"))
        elif name not in head.spec_text:
            items.append(Item("spec", name, "removed"))
        elif name in base.invalid:
            items.append(Item("spec", name, "changed", [Change(
                "file", f"did not load at {base.label}: {base.invalid[name]}", REGENERATE)]))
        else:
            changes = spec_changes(base.specs[name], head.specs[name])
            if changes:
                items.append(Item("spec", name, "changed", changes))
            elif base.spec_text[name] != head.spec_text[name]:
                items.append(Item("spec", name, "formatting", [Change(
                    "file", "YAML formatting, comments or prose line breaks only: nothing to do",
                    "none")]))
    for name in sorted(set(base.oracle_text) | set(head.oracle_text)):
        item = oracle_change(name, base, head)
        if item is not None and item.status != "unchanged":
            items.append(item)
    for name in sorted(set(base.targets) | set(head.targets)):
        if name not in base.targets:
            items.append(Item("target", name, "added"))
        elif name not in head.targets:
            items.append(Item("target", name, "removed"))
        else:
            changes = target_changes(base.targets[name], head.targets[name])
            if changes:
                items.append(Item("target", name, "changed", changes))
    rows = change_plan(base, head)
    add_cache_state(rows, head)
    return Report(base.label, head.label, items, rows, cache_changes(base, head))


def _composed(side, spec) -> dict:
    """A composed spec's component oracles and tolerances on one side of the diff."""
    return keys.composed_verify(spec, lambda c: _short_digest(side.oracle_digests.get(c)),
                                lambda c: side.specs[c])
