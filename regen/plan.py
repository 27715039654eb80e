"""Plan: for each (kernel, target), what is stale and why, in one line each (ninja's explain).

Planning reads specs, targets, oracle ASTs and cache manifests only: it never imports torch, an
oracle, or compiles anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import hardware, keys
from .compile import toolchain_identity
from .prompt import TEMPLATE_VERSION
from .store import Entry, Store

# actions, roughly in order of cost
UNSUPPORTED = "unsupported"
UP_TO_DATE = "up-to-date"
UNVERIFIED = "unverified"      # nothing to do here: the hardware that could verify it is elsewhere
RECOMPILE = "recompile"
VERIFY = "verify"
REVERIFY = "re-verify"
GENERATE = "generate"
REGENERATE = "regenerate"
FAILED = "failed"


@dataclass
class Node:
    kernel: str
    target: str
    action: str
    reasons: list[str] = field(default_factory=list)
    entry: Entry | None = None
    generate_components: dict | None = None
    generate_key: str | None = None
    record: dict | None = None          # the record that makes it up to date (or the stale one)
    here: dict | None = None            # this machine's fingerprint, when the hardware is here

    @property
    def label(self) -> str:
        return f"{self.kernel}@{self.target}"

    def line(self) -> str:
        why = "; ".join(self.reasons)
        return f"{self.label}: {self.action}" + (f" — {why}" if why else "")

    @property
    def needs_generator(self) -> bool:
        return self.action in (GENERATE, REGENERATE)


def verified_where(record: dict) -> str:
    hw = record.get("hardware", {})
    where = hw.get("device", "?")
    if hw.get("driver"):
        where += f" (driver {hw['driver']})"
    return f"{where} at {record.get('verified_at', '?')[:10]}"


def plan_node(project, store: Store, spec, target, verify_components_fn=None) -> Node:
    node = Node(spec.name, target.name, UP_TO_DATE)
    oracle = project.oracle_digest(spec.name)  # validates the oracle even when nothing is cached
    why_not = project.applies(spec, target)
    if why_not:
        node.action, node.reasons = UNSUPPORTED, [why_not]
        return node
    comps = {}
    for c in spec.components:
        ce = store.current(c, target.name)
        comps[c] = ce.id if ce else "missing"
    gen = keys.generate_components(spec, target, comps, TEMPLATE_VERSION)
    node.generate_components, node.generate_key = gen, keys.key(gen)
    entry = store.current(spec.name, target.name)
    node.entry = entry
    node.here = hardware.local(target)
    if entry is None:
        node.action, node.reasons = GENERATE, ["no artifact in cache"]
        return node
    if entry.generate != gen:
        node.action = REGENERATE
        node.reasons = keys.differences(entry.generate, gen)
        return node

    want = keys.verify_components(spec, target, oracle, "",
                                  entry.recipe_digest)
    try:
        ident = toolchain_identity(target)
    except Exception as exc:  # noqa: BLE001 - a missing toolchain is a state, not a crash
        ident = {"unavailable": str(exc)}
    records = store.records(spec.name, target.name, entry.id)
    here_id = hardware.identity(node.here) if node.here else None
    runtime = hardware.runtime_versions(target) if node.here else None

    def stale_reasons(rec: dict) -> list[str]:
        have = keys.portable(rec.get("verify", {}))
        have = {**have, "binary": ""}
        diffs = keys.differences(have, want)
        if rec.get("compile", {}).get("toolchain") != ident and not same_binary(rec):
            diffs += keys.differences({"toolchain": rec.get("compile", {}).get("toolchain")},
                                      {"toolchain": ident})
        return diffs

    def same_binary(rec: dict) -> bool:
        """Early cutoff: this machine already compiled the entry with the current toolchain and
        got the very binary the record verified."""
        from .localcache import cache

        ckey = keys.key(keys.compile_components(entry.source_digest, ident))
        hit = cache().get(f"compile:{ckey}")
        return bool(hit is not None and hit.ok
                    and keys.digest(hit.binary) == rec.get("compile", {}).get("binary"))

    fresh = [(r, stale_reasons(r)) for r in records]
    if node.here:
        mine = [(r, d) for r, d in fresh if r.get("hardware") == here_id]
        exact = [(r, d) for r, d in mine if not d and r.get("runtime") == runtime]
        if exact:
            rec = exact[-1][0]
            node.record = rec
            if rec.get("ok"):
                node.action, node.reasons = UP_TO_DATE, [f"verified on {verified_where(rec)}"]
            else:
                node.action, node.reasons = FAILED, [str(rec.get("reason"))]
            return node
        if mine:
            rec, diffs = mine[-1]
            node.record = rec
            if not diffs:
                diffs = keys.differences({"runtime": rec.get("runtime")}, {"runtime": runtime})
            toolchain_only = all(d.startswith("toolchain") for d in diffs)
            node.action = RECOMPILE if toolchain_only else REVERIFY
            node.reasons = diffs
            return node
        node.action = VERIFY
        node.reasons = [f"never verified on {node.here.get('device')}"]
        return node
    good = [r for r, d in fresh if not d and r.get("ok")]
    failed = [r for r, d in fresh if not d and not r.get("ok")]
    if failed and not good:
        node.record = failed[-1]
        node.action = FAILED
        node.reasons = [f"failed on {verified_where(failed[-1])}: {failed[-1].get('reason')}"]
        return node
    if good:
        node.record = good[-1]
        node.action = UP_TO_DATE
        node.reasons = [f"verified on {verified_where(good[-1])}; no such hardware here"]
        return node
    node.action = UNVERIFIED
    if fresh:
        rec, diffs = fresh[-1]
        node.record = rec
        node.reasons = [f"record from {verified_where(rec)} is stale: {'; '.join(diffs) or 'failed'}"]
    else:
        node.reasons = ["not verified on hardware (no record); needs " +
                        (" or ".join(target.hardware.match) or target.name)]
    return node


def plan(project, store: Store, kernels=None, targets=None) -> list[Node]:
    """Plan every pair, components first; a regenerated component makes its users regenerate."""
    nodes, regenerating = [], set()
    for spec, target in project.pairs(kernels, targets):
        node = plan_node(project, store, spec, target)
        if node.action not in (GENERATE, REGENERATE, UNSUPPORTED):
            dirty = [c for c in spec.components if (c, target.name) in regenerating]
            if dirty:
                node.action = REGENERATE
                node.reasons = [f"component {c} will be regenerated" for c in dirty]
        if node.needs_generator:
            regenerating.add((spec.name, target.name))
        nodes.append(node)
    return nodes
