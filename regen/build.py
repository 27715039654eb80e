"""Execute planned nodes: generate -> compile -> verify -> profile -> store, one (kernel, target) each.

The planner (regen/plan.py) decides what each node needs; this module carries it out and reports
back, as ninja's Builder does for its Plan. When a step's result changes what a node needs (a
re-verification that fails under a changed oracle; a component rebuilt in an earlier wave), the
node goes back to the planner. A failing node fails alone: its reason is reported and the build
goes on with the others.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import keys, plan as planning
from .artifact import LANGUAGES, Candidate
from .compile import Compiled, toolchain_problem
from .errors import InputError
from .judge import Outcome, Settings, make_record
from .profile import static_checks
from .recipe import parse_recipe
from .store import Entry, Store, strip_legacy_header


@dataclass
class Result:
    node: planning.Node
    status: str                       # ok | failed | locked | unsupported | skipped | waiting
    summary: str                      # one line for people
    level: list[str] = field(default_factory=list)   # compiled / resources checked / ISA / verified
    compile: dict | None = None
    checks: list[dict] = field(default_factory=list)
    record: dict | None = None
    outcome: Outcome | None = None
    provenance: dict | None = None
    search: dict | None = None        # a generation's search: tree and spend, passed or failed

    def to_json(self) -> dict:
        out = {"kernel": self.node.kernel, "target": self.node.target, "action": self.node.action,
               "reasons": self.node.reasons, "status": self.status, "summary": self.summary,
               "level": self.level, "compile": self.compile, "checks": self.checks,
               "record": {k: self.record.get(k) for k in ("verified_at", "hardware", "ok", "reason",
                                                           "verify_key")} if self.record else None}
        if self.provenance is not None:
            out["provenance"] = self.provenance
        if self.search is not None:
            out["search"] = self.search
            out["spend"] = self.search.get("spend")
        return out


@dataclass
class Context:
    project: object
    store: Store
    generator: object | None = None      # a Generator, or None: generation impossible here
    generator_problem: str | None = None  # why there is no generator (shown on nodes that need one)
    locked: bool = False
    dry_run: bool = False
    force: bool = False                   # let unverified code replace a verified entry
    settings: Settings = field(default_factory=Settings)
    budget: object | None = None
    progress: object | None = None
    executor: object = None               # where verification runs (regen/executors/); local
    remote: object | None = None          # the remote cache's Sync: push after each node

    def __post_init__(self):
        if self.executor is None:
            from .executors.local import LocalExecutor

            self.executor = LocalExecutor()

    def stage(self, node: planning.Node, name: str) -> None:
        """Tell the progress display which stage a node entered (if it wants to know)."""
        hook = getattr(self.progress, "stage", None)
        if hook is not None:
            hook(node.label, name)

    def candidate(self, node: planning.Node, attempt: dict) -> None:
        """Tell the progress display what a search's latest candidate gave (if it wants to know)."""
        hook = getattr(self.progress, "candidate", None)
        if hook is not None:
            hook(node.label, attempt)


@dataclass
class Evaluation:
    """What compiling, checking and (where the hardware is) verifying one candidate gave."""
    stage: str                        # parse | compile | profile | verify: where it stopped
    ok: bool
    feedback: str                     # why not, or what passed
    compiled: Compiled | None = None
    checks: list[dict] = field(default_factory=list)
    outcome: Outcome | None = None

    def compile_summary(self) -> dict | None:
        if self.compiled is None:
            return None
        res = self.compiled.result
        return {"ok": res.ok, "seconds": round(res.seconds, 3), "cached": self.compiled.cached,
                "binary": self.compiled.binary_digest, "resources": res.resources,
                "toolchain": self.compiled.components["toolchain"]}

    def levels(self) -> list[str]:
        """How far the candidate got, for people: compiled, resources checked, ISA checked."""
        level = []
        if self.compiled and self.compiled.result.ok:
            level.append("compiled" + (" (cached)" if self.compiled.cached else
                                       f" in {self.compiled.result.seconds:.2f} s"))
        if any(c["check"].startswith(("registers", "spills")) for c in self.checks) or \
                (self.compiled and self.compiled.result.resources):
            level.append("resources checked")
        if any(c["check"] == "instructions" and c["ok"] for c in self.checks):
            level.append("ISA checked")
        return level

    def result(self, node, status: str, summary: str, record: dict | None = None,
               extra_level: str | None = None, provenance: dict | None = None) -> Result:
        level = self.levels() + ([extra_level] if extra_level else [])
        return Result(node, status, summary, level, self.compile_summary(), self.checks, record,
                      self.outcome, provenance)


def _verified_at(node, ev: "Evaluation") -> str:
    """The level line of a node verified just now: here, or on the fleet worker that ran it."""
    placed = (ev.outcome.placement if ev.outcome is not None else None) or {}
    device = (placed.get("hardware") or node.here or {}).get("device")
    ran_on = placed.get("ran_on")
    if ran_on:
        gpu = ran_on.get("gpu") or {}
        where = ran_on.get("worker") or ran_on.get("host")
        if gpu:
            where += f", GPU {gpu.get('index', gpu.get('cuda_visible_devices'))}"
        return f"verified on worker {where} ({device})"
    return f"verified here ({device})"


def on_device(target) -> bool:
    return LANGUAGES[target.language].on_device


def evaluate(ctx: Context, spec, target, source: str, recipe_text: str, verify_here: bool,
             settings: Settings | None = None, cases=None, node=None) -> Evaluation:
    """Compile, check and (when the hardware is here) verify one candidate."""
    try:
        from .localcache import memo

        memo("recipe", recipe_text.encode(), lambda: bool(parse_recipe(recipe_text)))
    except InputError as exc:
        return Evaluation("parse", False, f"launch.yaml is invalid: {exc}")
    if node is not None:
        ctx.stage(node, "compile")
    compiled = ctx.executor.compile(source, target)
    if not compiled.result.ok:
        return Evaluation("compile", False, compiled.result.log[-6000:], compiled)
    checks = static_checks(spec, target, compiled.result.resources, compiled.result.disassembly)
    failed = [c for c in checks if c["ok"] is False]
    if failed:
        text = "; ".join(f"{c['check']}: {c['value']} (limit {c['limit']})" for c in failed)
        return Evaluation("profile", False, f"resource/ISA expectations not met: {text}",
                          compiled, checks)
    if not verify_here:
        return Evaluation("compile", True, "compiled and resource-checked; not verified (no "
                          "hardware here)", compiled, checks)
    if node is not None:
        ctx.stage(node, "verify")
    outcome = ctx.executor.verify(ctx, spec, target, recipe_text, compiled.result.binary,
                                  settings or ctx.settings, cases=cases,
                                  composition=ctx.project.oracle_job(spec))
    if not outcome.ok:
        return Evaluation("verify", False, outcome.reason, compiled, checks, outcome)
    return Evaluation("verify", True, "passed", compiled, checks, outcome)


def settings_for(ctx: Context, target) -> Settings:
    """Verification in a build includes the timed benchmark cases, on every column: the spec's
    performance expectations are part of what "verified" means, and the search refines against
    the times. The host column times each bench case as one fixed variant sized for a 2-core
    machine (judge.HOST_BENCH_BYTES); `regen bench -t cpu` times the full cases."""
    from .judge.parent import HOST_BENCH_BYTES

    s = ctx.settings
    if s.bench is False and on_device(target):
        return replace(s, bench=True)
    if s.bench is False and not on_device(target):
        return replace(s, bench=True, host_bench_bytes=s.host_bench_bytes or HOST_BENCH_BYTES)
    return s


def record_for(ctx: Context, spec, target, entry: Entry, ev: Evaluation) -> dict | None:
    """The verification record of an evaluation that ran the oracle (None if it did not)."""
    if ev.outcome is None:
        return None
    vcomp = keys.verify_components(spec, target, ctx.project.oracle_digest(spec.name),
                                   ev.compiled.binary_digest, entry.recipe_digest,
                                   ctx.project.composed_verify(spec))
    return make_record(spec, target, entry, ev.compiled, ev.outcome, vcomp, ev.checks)


def verified_summary(outcome: Outcome) -> str:
    n = len(outcome.cases)
    worst = max((c.get("max_abs", 0.0) or 0.0) for c in outcome.cases) if outcome.cases else 0.0
    text = f"verified {n} cases, max abs error {worst:.3g}"
    if outcome.bench:
        fr = [b.get("floor_fraction") for b in outcome.bench if b.get("floor_fraction")]
        if fr:
            text += f", {min(fr) * 100:.0f}% of floor (worst bench case)"
    return text


# -- executing one node ------------------------------------------------------------------------
def build_node(ctx: Context, node: planning.Node) -> Result:
    if node.action == planning.UNSUPPORTED:
        return Result(node, "unsupported", "; ".join(node.reasons))
    if node.skip:
        return Result(node, "skipped", f"not run here: {node.skip}")
    if node.action == planning.ADOPT:
        return _adopt(ctx, node)
    if node.action == planning.COMPOSE:
        return _compose(ctx, node)
    if node.needs_generator:
        return _generate(ctx, node)
    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    target = ctx.project.target(node.target)
    problem = toolchain_problem(target)
    if problem:
        return Result(node, "failed", f"cannot compile here: {problem}")
    if node.action == planning.BENCH:
        return bench_node(ctx, node)
    if node.here is not None and node.action in (planning.VERIFY, planning.REVERIFY,
                                                 planning.RECOMPILE):
        return _verify(ctx, node)
    return _check(ctx, node)


def _check(ctx: Context, node: planning.Node) -> Result:
    """Compile and check a cached entry whose hardware is elsewhere (or that is up to date)."""
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    ev = evaluate(ctx, spec, target, node.entry.source(), node.entry.recipe(), False, node=node)
    if not ev.ok:
        return ev.result(node, "failed", f"{ev.stage} failed: {ev.feedback}")
    return _report_existing(node, ev)


def _verify(ctx: Context, node: planning.Node) -> Result:
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    entry = node.entry
    if node.action == planning.RECOMPILE and node.record:
        ev = evaluate(ctx, spec, target, entry.source(), entry.recipe(), False, node=node)
        if ev.compiled and ev.compiled.binary_digest == node.record.get("compile", {}).get("binary"):
            # early cutoff: the new toolchain produced the very binary that was verified
            return _report_existing(node, ev, note="recompiled: identical binary, record still valid")
    ev = evaluate(ctx, spec, target, entry.source(), entry.recipe(), True,
                  settings_for(ctx, target), node=node)
    record = record_for(ctx, spec, target, entry, ev)
    if record is not None:
        ctx.stage(node, "store")
        ctx.store.put_record(spec.name, target.name, entry.id, record)
    promoted = _verify_pending(ctx, node, spec, target)
    if promoted is not None:
        return promoted
    if ev.ok:
        return ev.result(node, "ok", verified_summary(ev.outcome), record,
                         _verified_at(node, ev))
    if node.action == planning.REVERIFY and ev.stage == "verify" and ctx.generator is not None \
            and not ctx.locked:
        return _generate(ctx, planning.escalate(node, ev.feedback), feedback=ev.feedback,
                         previous_entry=entry)
    return ev.result(node, "failed", f"{ev.stage} failed: {ev.feedback}", record)


def _verify_pending(ctx: Context, node: planning.Node, spec, target) -> Result | None:
    """Verify the entries waiting for this hardware, newest first; the first that passes becomes
    current (the verified entry it replaces stays in `previous`). Their records are kept."""
    for pending in reversed(ctx.store.pending(spec.name, target.name)):
        ev = evaluate(ctx, spec, target, pending.source(), pending.recipe(), True,
                      settings_for(ctx, target), node=node)
        record = record_for(ctx, spec, target, pending, ev)
        if record is not None:
            ctx.store.put_record(spec.name, target.name, pending.id, record)
        if ev.ok:
            ctx.store.point(spec.name, target.name, pending.id)
            return ev.result(node, "ok", f"pending entry {pending.id} {verified_summary(ev.outcome)}"
                             "; it is current now", record,
                             _verified_at(node, ev))
    return None


def bench_node(ctx: Context, node: planning.Node, cases=None) -> Result:
    """Time the benchmark cases of the cached artifact here. The record is returned (for
    --export), not stored: a bench-only run does not replace the full verification record."""
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    cases = cases if cases is not None else spec.bench_cases(target)
    entry = node.entry
    ev = evaluate(ctx, spec, target, entry.source(), entry.recipe(), True, ctx.settings,
                  cases=cases, node=node)
    record = record_for(ctx, spec, target, entry, ev)
    summary = verified_summary(ev.outcome) if ev.ok else f"{ev.stage} failed: {ev.feedback}"
    return ev.result(node, "ok" if ev.ok else "failed", summary, record)


def bench_unfused(ctx: Context, node: planning.Node, cases) -> Result:
    """Time a composed spec's unfused plan (composed now from its components' current entries)
    beside its fused artifact: the baseline a fused kernel must beat."""
    from .compose import ComposeError, unfused

    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    try:
        source, recipe, _prov = unfused(ctx.project, ctx.store, spec, target)
    except ComposeError as exc:
        return Result(node, "failed", f"unfused plan: {exc}")
    ev = evaluate(ctx, spec, target, source, recipe, True, ctx.settings, cases=cases, node=node)
    summary = verified_summary(ev.outcome) if ev.ok else f"{ev.stage} failed: {ev.feedback}"
    return ev.result(node, "ok" if ev.ok else "failed", f"unfused plan: {summary}")


def _report_existing(node, ev: Evaluation, note: str | None = None) -> Result:
    rec = node.record
    if rec and rec.get("ok") and node.action in (planning.UP_TO_DATE, planning.RECOMPILE):
        where = planning.verified_where(rec)
        return ev.result(node, "ok", note or f"up to date: verified on {where}", rec,
                         f"verified on {where}")
    if node.action == planning.FAILED:
        return ev.result(node, "failed", "; ".join(node.reasons), rec,
                         f"failed on {planning.verified_where(rec)}" if rec else "failed")
    return ev.result(node, "ok", "; ".join(node.reasons) or "not verified on hardware", rec,
                     "not verified on hardware")


def _adopt(ctx: Context, node: planning.Node) -> Result:
    """Point a family member at the generation a sibling holds, then build it as planned anew."""
    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    if ctx.locked:
        return Result(node, "locked", f"--locked: needs adopt ({'; '.join(node.reasons)})")
    leader = ctx.store.current(node.kernel, node.leader)
    if leader is None or leader.generate_key != node.generate_key:
        return Result(node, "failed", f"adopt: {node.leader} holds no entry of this generation "
                      "(its own build failed or was skipped)")
    ctx.stage(node, "store")
    ctx.store.point(node.kernel, node.target, leader.id)
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    fresh = planning.plan_node(ctx.project, ctx.store, spec, target, here=ctx.executor.here)
    if fresh.new_entry:
        return Result(fresh, "failed", f"adopt: entry {leader.id} still plans as {fresh.action}")
    res = build_node(ctx, fresh)
    res.summary = f"adopted {node.leader}'s entry {leader.id}: {res.summary}"
    return res


def _generate(ctx: Context, node: planning.Node, feedback: str | None = None,
              previous_entry: Entry | None = None) -> Result:
    if ctx.locked:
        return Result(node, "locked", f"--locked: needs {node.action} ({'; '.join(node.reasons)})")
    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    if ctx.generator is None:
        if ctx.project.spec(node.kernel).composition is not None:
            res = _compose(ctx, node)   # the fallback where no fused kernel can be made
            why = ctx.generator_problem or "no generator is configured"
            res.summary = (f"needs {node.action}, but {why}: fell back to the unfused plan: "
                           f"{res.summary}")
            return res
        return Result(node, "failed", f"needs {node.action} ({'; '.join(node.reasons)}), but "
                      f"{ctx.generator_problem or 'no generator is configured'}")
    from . import search as search_mod
    from .prompt import make_request_factory

    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    ctx.stage(node, "generate")
    components = _component_artifacts(ctx, spec, target)
    factory = make_request_factory(spec, target, components, ctx.project.generation_view(target),
                                   ctx.project.technique_cells(target))
    verify_here = node.here is not None
    evaluated: dict[int, Evaluation] = {}

    def evaluate_candidate(candidate: Candidate):
        ev = evaluate(ctx, spec, target, candidate.source, candidate.recipe, verify_here,
                      settings_for(ctx, target), node=node)
        evaluated[id(candidate)] = ev
        return search_mod.evaluation_from(ev.stage, ev.ok, ev.feedback, ev.compiled, ev.checks,
                                          ev.outcome)

    previous = None
    if previous_entry is not None:
        previous = Candidate(previous_entry.source(), previous_entry.recipe(),
                             previous_entry.provenance(), "the current cached artifact")
    budget = ctx.budget
    result = search_mod.search(ctx.generator, factory, evaluate_candidate, budget,
                               previous=previous, feedback=feedback,
                               progress=lambda attempt: ctx.candidate(node, attempt))
    searched = {"tree": result.tree_json(), "spend": result.spend_json()}
    if result.best is None:
        _keep_failed(ctx, node, result)
        spent = result.spend_json()
        return Result(node, "failed", f"{node.action}: no candidate passed ({result.stop_reason}; "
                      f"{spent['candidates']} candidates, {spent['tokens']} tokens, "
                      f"${spent['usd']:.4f}): `regen log --failed {node.kernel} -t {node.target}` "
                      "shows what was tried", search=searched)
    best = result.best
    provenance = {**best.provenance, "search": result.tree_json(), "spend": result.spend_json()}
    res = _store(ctx, node, spec, target, best.source, best.recipe, provenance,
                 evaluated[id(best)])
    res.summary = f"{node.action}d ({best.provenance.get('generator', '?')}): {res.summary}"
    res.search = searched
    return res


def _keep_failed(ctx: Context, node: planning.Node, result) -> None:
    """A search that found nothing is kept in the local cache (`regen log --failed`)."""
    import datetime

    from .localcache import record_failed_search

    generator = ctx.generator
    record_failed_search(ctx.project.root, node.kernel, node.target, {
        "kernel": node.kernel, "target": node.target, "action": node.action,
        "reasons": list(node.reasons), "generate_key": node.generate_key,
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "generator": getattr(generator, "name", None), "model": getattr(generator, "model", None),
        "stop_reason": result.stop_reason, "error": result.error,
        "search": result.tree_json(), "spend": result.spend_json()})


def _compose(ctx: Context, node: planning.Node) -> Result:
    """The unfused plan of a composed spec: its components' current entries launched in order
    (regen/compose.py), compiled, verified where the hardware is, and stored like any artifact,
    with provenance `composed` naming each component entry. No generator is called."""
    from .compose import ComposeError, unfused

    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    problem = toolchain_problem(target)
    if problem:
        return Result(node, "failed", f"cannot compile here: {problem}")
    ctx.stage(node, "compose")
    try:
        source, recipe, provenance = unfused(ctx.project, ctx.store, spec, target)
    except ComposeError as exc:
        return Result(node, "failed", f"compose: {exc}")
    ev = evaluate(ctx, spec, target, source, recipe, node.here is not None,
                  settings_for(ctx, target), node=node)
    if not ev.ok:
        return ev.result(node, "failed", f"the unfused plan failed at {ev.stage}: {ev.feedback}")
    res = _store(ctx, node, spec, target, source, recipe, provenance, ev)
    n = len(provenance["steps"])
    res.summary = f"composed (unfused plan, {n} steps): {res.summary}"
    return res


def _store(ctx: Context, node, spec, target, source: str, recipe: str, provenance: dict,
           ev: Evaluation) -> Result:
    """Store a candidate that passed for the node's family, and its record when it was verified
    here. A family member whose current entry answers the same generation (or that has none)
    moves to the new entry; a record whose binary and recipe the new entry reproduces comes with
    it (early cutoff: the same binary needs no new verification)."""
    ctx.stage(node, "store")
    store = ctx.store
    family = [t.name for t in ctx.project.family(target)   # members the spec does not list get
              if t.name == target.name or ctx.project.applies(spec, t) is None]   # no pointer
    carried: dict[str, list[dict]] = {}
    keep: dict[str, Entry] = {}     # members whose verified entry unverified code may not replace
    verified_here = ev.outcome is not None and ev.outcome.ok
    for member in family:
        cur = store.current(spec.name, member)
        if member != target.name and cur is not None and cur.generate_key != node.generate_key:
            continue
        records = store.records(spec.name, member, cur.id) if cur else []
        carried[member] = [r for r in records if ev.compiled and r.get("ok")
                           and r.get("compile", {}).get("binary") == ev.compiled.binary_digest]
        new_verified = carried[member] or (member == target.name and verified_here)
        if cur is not None and cur.generate_key == node.generate_key and not new_verified \
                and not ctx.force and any(r.get("ok") for r in records):
            keep[member] = cur
    with store.writing():
        entry = store.put(spec.name, target.name, target.language, source, recipe, provenance,
                          node.generate_components, node.generate_key, family=target.family_name,
                          pending=target.name in keep)
        for member in carried:
            if member != target.name:
                store.point(spec.name, member, entry.id, pending=member in keep)
    node.entry = entry
    for member, records in carried.items():
        for rec in records:
            if rec.get("entry") == entry.id or rec.get("verify", {}).get("recipe") != entry.recipe_digest:
                continue
            rec = {k: v for k, v in rec.items() if not k.startswith("_")}
            rec.setdefault("migrated", []).append(
                f"carried from entry {rec['entry']} to {entry.id}: the new entry compiles to the "
                f"binary this record verified ({ev.compiled.binary_digest[:16]}) with the same "
                "launch recipe")
            rec["entry"] = entry.id
            store.put_record(spec.name, member, entry.id, rec)
    record = record_for(ctx, spec, target, entry, ev)
    if record is not None:
        store.put_record(spec.name, target.name, entry.id, record)
        return ev.result(node, "ok", verified_summary(ev.outcome), record,
                         _verified_at(node, ev), provenance)
    if target.name in keep:
        kept = keep[target.name]
        where = planning.verified_where(next(r for r in store.records(spec.name, target.name, kept.id)
                                             if r.get("ok")))
        return ev.result(node, "ok", f"stored entry {entry.id} as pending: it is not verified and "
                         f"the current entry {kept.id} is (on {where}), so that one stays current; "
                         "`regen verify` on that hardware verifies the pending entry and makes it "
                         "current if it passes (--force makes it current now)", None,
                         "pending, not verified on hardware", provenance)
    kept = carried.get(target.name)
    if kept:
        where = planning.verified_where(kept[-1])
        return ev.result(node, "ok", f"identical binary: still verified on {where}", kept[-1],
                         f"verified on {where}", provenance)
    return ev.result(node, "ok", "compiled and resource-checked; not verified on hardware "
                     "(none here)", None, "not verified on hardware", provenance)


def _component_artifacts(ctx, spec, target):
    out = []
    for c in spec.components:
        entry = ctx.store.current(c, target.name)
        if entry is not None:
            out.append((c, entry.source(), entry.recipe()))
    return out


# -- the build ---------------------------------------------------------------------------------
def _waves(ctx: Context, nodes: list[planning.Node]) -> list[list[int]]:
    """Components before their users; within a depth, the family member that generates before
    the members that adopt its generation."""
    depth: dict[str, int] = {}
    for n in nodes:
        spec = ctx.project.spec(n.kernel)
        depth[n.kernel] = 1 + max((depth.get(c, 0) for c in spec.components), default=-1)
    order = sorted({(depth[n.kernel], n.action == planning.ADOPT) for n in nodes})
    return [[i for i, n in enumerate(nodes) if (depth[n.kernel], n.action == planning.ADOPT) == w]
            for w in order]


def build(ctx: Context, nodes: list[planning.Node], jobs: int = 1) -> list[Result]:
    """Build nodes in waves (see _waves); a node of a later wave is planned again first when its
    components were rebuilt, so it is keyed against what the cache holds now."""
    results: list[Result | None] = [None] * len(nodes)
    rebuilt: set[tuple[str, str]] = set()

    def one(i):
        node = nodes[i]
        try:
            spec = ctx.project.spec(node.kernel)
            if any((c, node.target) in rebuilt for c in spec.components):
                node = planning.replan(ctx.project, ctx.store, node, here=ctx.executor.here)
            results[i] = _waiting(ctx, build_node(ctx, node))
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - one node's surprise must not stop the build
            results[i] = Result(node, "failed", f"internal error: {type(exc).__name__}: {exc}")
        if ctx.remote is not None and results[i].status in ("ok", "failed", "waiting"):
            ctx.remote.push(ctx.project, ctx.store, node.kernel, node.target)
        if ctx.progress:
            ctx.progress(results[i], i, len(nodes))

    for wave in _waves(ctx, nodes):
        if jobs <= 1:
            for i in wave:
                one(i)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(one, wave))
        rebuilt |= {(r.node.kernel, r.node.target) for i in wave if (r := results[i])
                    and r.status == "ok" and r.provenance is not None}
    return [r for r in results if r is not None]


def _waiting(ctx: Context, res: Result) -> Result:
    """A node left unverified because its executor reaches no hardware for the column (a fleet
    without a worker for it) is waiting for hardware, not failed: it was compiled and checked."""
    if res.status != "ok" or any(x.startswith("verified") for x in res.level):
        return res
    why = ctx.executor.waiting(ctx.project.target(res.node.target))
    if why:
        res.status, res.summary = "waiting", f"waiting for hardware: {why}; {res.summary}"
    return res


def accept(ctx: Context, folder: Path, force: bool = False, author: str | None = None) -> Result:
    """Store a hand-written implementation from a handoff folder, with provenance `handoff`.
    `force` accepts a handoff written for an older spec, and lets unverified code replace a
    verified entry (otherwise it is stored as pending)."""
    ctx.force = ctx.force or force
    from .generators.handoff import read_task

    task = read_task(folder, author)
    project = ctx.project
    spec, target = project.spec(task["kernel"]), project.target(task["target"])
    node = planning.plan_node(project, ctx.store, spec, target)
    if task.get("generate_key") != node.generate_key and not force:
        diffs = keys.differences(task.get("generate", {}), node.generate_components)
        raise InputError("the spec or target changed since this handoff was written ("
                         + "; ".join(diffs) + "); run `regen handoff` again or pass --force",
                         file=str(folder / "task.json"), field="generate_key")
    source = strip_legacy_header(task["source"])
    ev = evaluate(ctx, spec, target, source, task["recipe"], node.here is not None,
                  settings_for(ctx, target), node=node)
    if not ev.ok:
        return ev.result(node, "failed", f"not accepted: {ev.stage} failed: {ev.feedback}")
    res = _store(ctx, node, spec, target, source, task["recipe"], task["provenance"], ev)
    res.summary = f"accepted ({task['provenance'].get('generator')}): {res.summary}"
    return res
