"""Plan: for each (kernel, target), what to do and why, in one line each (ninja's explain).

The planner makes every decision; regen/build.py only executes a node's action and hands
escalations back here (a re-verification that failed becomes a regeneration, fed the failure).
One function, classify(), compares what an artifact was made from with what it would be made
from now, for the planner and for `regen diff` alike.

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
ADOPT = "adopt"                # a family member's generation answers this target too
RECOMPILE = "recompile"
VERIFY = "verify"
REVERIFY = "re-verify"
BENCH = "bench"
GENERATE = "generate"
REGENERATE = "regenerate"
COMPOSE = "compose"            # a composed spec's unfused plan, made from its components' entries
FAILED = "failed"

INTENTS = ("build", "verify", "bench")


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
    family: str = ""
    leader: str | None = None           # ADOPT: the family member whose generation this one takes
    skip: str | None = None             # set by a verify/bench plan: why this node is not run here

    @property
    def label(self) -> str:
        return f"{self.kernel}@{self.target}"

    def line(self) -> str:
        why = "; ".join(self.reasons)
        return f"{self.label}: {self.action}" + (f" — {why}" if why else "")

    @property
    def needs_generator(self) -> bool:
        return self.action in (GENERATE, REGENERATE)

    @property
    def new_entry(self) -> bool:
        """Building it makes a new entry (generated, composed or adopted)."""
        return self.needs_generator or self.action in (COMPOSE, ADOPT)


def verified_where(record: dict) -> str:
    hw = record.get("hardware", {})
    where = hw.get("device", "?")
    if record.get("fleet"):   # pulled from the remote cache: verified on another machine
        where += " (fleet)"
    if hw.get("driver"):
        where += f" (driver {hw['driver']})"
    return f"{where} at {record.get('verified_at', '?')[:10]}"


def classify(old: dict, new: dict) -> tuple[str, list[str]]:
    """What a change between two sets of key components calls for, and why, one line a change.

    `old` and `new` hold any of "generate" (generate-key components), "verify" (the portable
    verify-key components, binary left out) and "toolchain" (the toolchain identity). The first
    key that differs decides: regenerate, then re-verify, then recompile; the lines of the later
    keys are kept as reasons too."""
    gen = keys.differences(old.get("generate", {}), new.get("generate", {}))
    ver = keys.differences(old.get("verify", {}), new.get("verify", {}))
    tool = keys.differences({"toolchain": old["toolchain"]}, {"toolchain": new["toolchain"]}) \
        if "toolchain" in old and "toolchain" in new else []
    if gen:
        return REGENERATE, gen + ver + tool
    if ver:
        return REVERIFY, ver + tool
    if tool:
        return RECOMPILE, tool
    return UP_TO_DATE, []


def _toolchain_here(target) -> dict:
    try:
        return toolchain_identity(target)
    except Exception as exc:  # noqa: BLE001 - a missing toolchain is a state, not a crash
        return {"unavailable": str(exc)}


def _same_binary(entry: Entry, ident: dict, rec: dict) -> bool:
    """Early cutoff: this machine already compiled the entry with the current toolchain and got
    the very binary the record verified."""
    from .localcache import cache

    ckey = keys.key(keys.compile_components(entry.source_digest, ident))
    hit = cache().get(f"compile:{ckey}")
    return bool(hit is not None and hit.ok
                and keys.digest(hit.binary) == rec.get("compile", {}).get("binary"))


def _record_state(node: Node, store: Store, spec, target, oracle: str, project) -> None:
    """Decide an entry's state from its records: up to date, failed, verify, re-verify,
    recompile or unverified."""
    entry = node.entry
    want = {"verify": keys.verify_components(spec, target, oracle, "", entry.recipe_digest,
                                             project.composed_verify(spec)),
            "toolchain": _toolchain_here(target)}
    records = store.records(spec.name, target.name, entry.id)
    here_id = hardware.identity(node.here) if node.here else None
    runtime = hardware.runtime_versions(target) if node.here else None

    def stale_reasons(rec: dict) -> list[str]:
        have = {"verify": {**keys.portable(rec.get("verify", {})), "binary": ""},
                "toolchain": rec.get("compile", {}).get("toolchain")}
        if _same_binary(entry, want["toolchain"], rec):
            have["toolchain"] = want["toolchain"]
        return classify(have, want)[1]

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
            return
        if mine:
            rec, diffs = mine[-1]
            node.record = rec
            if not diffs:
                diffs = keys.differences({"runtime": rec.get("runtime")}, {"runtime": runtime})
            toolchain_only = all(d.startswith("toolchain") for d in diffs)
            node.action = RECOMPILE if toolchain_only else REVERIFY
            node.reasons = diffs
            return
        node.action = VERIFY
        node.reasons = [f"never verified on {node.here.get('device')}"]
        return
    good = [r for r, d in fresh if not d and r.get("ok")]
    failed = [r for r, d in fresh if not d and not r.get("ok")]
    if failed and not good:
        node.record = failed[-1]
        node.action = FAILED
        node.reasons = [f"failed on {verified_where(failed[-1])}: {failed[-1].get('reason')}"]
    elif good:
        node.record = good[-1]
        node.action = UP_TO_DATE
        node.reasons = [f"verified on {verified_where(good[-1])}; no such hardware here"]
    else:
        node.action = UNVERIFIED
        if fresh:
            rec, diffs = fresh[-1]
            node.record = rec
            node.reasons = [f"record from {verified_where(rec)} is stale: "
                            f"{'; '.join(diffs) or 'failed'}"]
        else:
            node.reasons = ["not verified on hardware (no record); needs " +
                            (" or ".join(target.hardware.match) or target.name)]


def _adoptable(project, store: Store, spec, target, generate_key: str) -> tuple[Entry, str] | None:
    """An entry a family sibling made for the same generation, and that sibling's name."""
    for sibling in project.family(target):
        if sibling.name == target.name:
            continue
        e = store.current(spec.name, sibling.name)
        if e is not None and e.generate_key == generate_key:
            return e, sibling.name
    return None


def plan_node(project, store: Store, spec, target, regenerate: bool = False,
              here=hardware.local) -> Node:
    """`here(target)`: the fingerprint of the hardware that verifies the column (this machine's,
    or a fleet worker's with `--executor ray`), None where there is none."""
    node = Node(spec.name, target.name, UP_TO_DATE, family=target.family_name)
    oracle = project.oracle_digest(spec.name)  # validates the oracle even when nothing is cached
    project.composition(spec.name)             # a composed spec's dataflow, checked
    why_not = project.applies(spec, target)
    if why_not:
        node.action, node.reasons = UNSUPPORTED, [why_not]
        return node
    comps = {}
    for c in spec.components:
        ce = store.current(c, target.name)
        comps[c] = ce.id if ce else "missing"
    gen = keys.generate_components(spec, project.generation_view(target), comps, TEMPLATE_VERSION)
    node.generate_components, node.generate_key = gen, keys.key(gen)
    entry = store.current(spec.name, target.name)
    node.entry = entry
    node.here = here(target)
    if regenerate:
        node.action, node.reasons = REGENERATE, ["--regenerate"]
        return node
    if entry is None or entry.generate_key != node.generate_key:
        sibling = _adoptable(project, store, spec, target, node.generate_key)
        if sibling is not None:
            node.action, node.leader = ADOPT, sibling[1]
            node.reasons = [f"family {node.family}: {sibling[1]} has this generation "
                            f"(entry {sibling[0].id})"]
            return node
    if entry is None:
        node.action, node.reasons = GENERATE, ["no artifact in cache"]
        return _composed(node, spec, entry)
    if entry.generate_key != node.generate_key:
        node.action, node.reasons = classify({"generate": entry.generate}, {"generate": gen})
        return _composed(node, spec, entry)
    _record_state(node, store, spec, target, oracle, project)
    pending = [e.id for e in store.pending(spec.name, target.name)]
    if pending:
        where = node.here.get("device") if node.here else \
            (" or ".join(target.hardware.match) or target.name)
        node.reasons.append(f"pending entr{'ies' if len(pending) > 1 else 'y'} "
                            f"{', '.join(pending)} wait{'' if len(pending) > 1 else 's'} for "
                            f"verification on {where}")
        if node.here and node.action in (UP_TO_DATE, FAILED):
            node.action = VERIFY
    return node


def is_composed(entry: Entry | None) -> bool:
    """The entry is an unfused plan regen composed (not a generated or hand-written kernel)."""
    from .compose import COMPOSER

    return entry is not None and entry.provenance().get("generator") == COMPOSER


def _composed(node: Node, spec, entry: Entry | None) -> Node:
    """A composed spec without an artifact, or whose artifact is its unfused plan, is composed
    again from its components' entries instead of generated: no generator call."""
    if spec.composition is not None and node.needs_generator and (entry is None or is_composed(entry)):
        node.action = COMPOSE
        if entry is None:
            node.reasons = ["no artifact in cache: the unfused plan of its components"]
    return node


def plan(project, store: Store, kernels=None, targets=None, intent: str = "build",
         regenerate: bool = False, here=hardware.local) -> list[Node]:
    """Plan every pair, components first. A regenerated component makes its users regenerate;
    family members that need the same generation wait for one of them (ADOPT).

    intent "verify": every node with an artifact and its hardware here is verified again;
    intent "bench": such nodes are timed on their benchmark cases. Nodes that cannot run here
    keep their build action and say why in `skip`. With either intent, named kernels are acted on
    alone: a composed kernel's record does not depend on its components' records."""
    if intent not in INTENTS:
        raise ValueError(f"unknown intent {intent!r}; expected one of {INTENTS}")
    nodes, regenerating, verbs = [], set(), {}
    generating: dict[tuple[str, str, str], str] = {}   # (kernel, family, key) -> leader target
    for spec, target in project.pairs(kernels, targets):
        node = plan_node(project, store, spec, target, regenerate=regenerate and intent == "build",
                         here=here)
        if node.action not in (GENERATE, REGENERATE, UNSUPPORTED, ADOPT, COMPOSE):
            dirty = [c for c in spec.components if (c, target.name) in regenerating]
            if dirty:
                node.action = REGENERATE
                node.reasons = [f"component {c} will be {verbs[(c, target.name)]}"
                                for c in dirty]
                _composed(node, spec, node.entry)
        if (node.needs_generator or node.action == COMPOSE) and intent == "build":
            lead = generating.setdefault((node.kernel, node.family, node.generate_key), node.target)
            if lead != node.target:
                node.action, node.leader = ADOPT, lead
                node.reasons = [f"family {node.family}: takes the generation {lead} makes"]
        if node.new_entry:   # its entry id will change
            regenerating.add((spec.name, target.name))
            verbs[(spec.name, target.name)] = "composed again" if node.action == COMPOSE \
                else "regenerated"
        if intent != "build":
            _for_intent(node, intent)
        nodes.append(node)
    if intent != "build" and kernels:   # verify/bench what was named, not its components too
        nodes = [n for n in nodes if n.kernel in kernels]
    return nodes


def _for_intent(node: Node, intent: str) -> None:
    if node.action == UNSUPPORTED:
        node.skip = "unsupported"
    elif node.entry is None or node.new_entry:
        node.skip = "no artifact" if node.entry is None else f"needs {node.action}"
    elif node.here is None:
        node.skip = "hardware not here"
    else:
        node.action = VERIFY if intent == "verify" else BENCH
        node.reasons = [f"{intent} requested"]


def escalate(node: Node, feedback: str) -> Node:
    """A re-verification that failed: the artifact no longer passes the changed oracle or
    tolerance, so it is regenerated, the failure fed to the generator."""
    node.action = REGENERATE
    node.reasons = node.reasons + [f"re-verification failed: {feedback}"]
    return node


def replan(project, store: Store, node: Node, here=hardware.local) -> Node:
    """Plan a node again once the components it is keyed on were rebuilt; a regeneration that
    was asked for (--regenerate, or a failed re-verification) stays one."""
    fresh = plan_node(project, store, project.spec(node.kernel), project.target(node.target),
                      here=here)
    if node.needs_generator and not fresh.needs_generator:
        fresh.action, fresh.reasons = node.action, node.reasons
    return fresh
