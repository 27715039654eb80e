"""The pipeline for one (kernel, target) node: plan -> generate -> compile -> verify -> profile -> store.

A failing node fails alone: its reason is reported and the build goes on with the others.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import keys, plan as planning
from .compile import Compiled, compile_source, toolchain_problem
from .errors import InputError
from .profile import static_checks
from .recipe import parse_recipe
from .store import Store, add_header
from .judge import Outcome, Settings, make_record, run as run_verify


@dataclass
class Result:
    node: planning.Node
    status: str                       # ok | failed | locked | unsupported | skipped
    summary: str                      # one line for people
    level: list[str] = field(default_factory=list)   # compiled / resources checked / ISA / verified
    compile: dict | None = None
    checks: list[dict] = field(default_factory=list)
    record: dict | None = None
    outcome: Outcome | None = None
    provenance: dict | None = None

    def to_json(self) -> dict:
        return {"kernel": self.node.kernel, "target": self.node.target, "action": self.node.action,
                "reasons": self.node.reasons, "status": self.status, "summary": self.summary,
                "level": self.level, "compile": self.compile, "checks": self.checks,
                "record": {k: self.record.get(k) for k in ("verified_at", "hardware", "ok", "reason",
                                                            "verify_key")} if self.record else None}


@dataclass
class Context:
    project: object
    store: Store
    generator: object | None = None      # a Generator, or None: generation impossible here
    generator_problem: str | None = None  # why there is no generator (shown on nodes that need one)
    locked: bool = False
    dry_run: bool = False
    regenerate: bool = False
    settings: Settings = field(default_factory=Settings)
    budget: object | None = None
    gpu_lock: threading.Lock = field(default_factory=threading.Lock)
    progress: object | None = None


def compile_summary(compiled: Compiled) -> dict:
    res = compiled.result
    return {"ok": res.ok, "seconds": round(res.seconds, 3), "cached": compiled.cached,
            "binary": compiled.binary_digest, "resources": res.resources,
            "toolchain": compiled.components["toolchain"]}


def resource_line(resources: dict) -> str:
    parts = []
    for kernel, r in sorted(resources.items()):
        bits = []
        if "registers" in r:
            bits.append(f"{r['registers']} regs")
        spill = r.get("spill_store_bytes", r.get("spill_bytes"))
        if spill is not None:
            bits.append(f"{spill} B spill")
        if r.get("shared_bytes"):
            bits.append(f"{r['shared_bytes']} B smem")
        if bits:
            parts.append(f"{kernel}: {', '.join(bits)}")
    return "; ".join(parts)


def evaluate(ctx: Context, spec, target, source: str, recipe_text: str, verify_here: bool,
             settings: Settings | None = None, cases=None):
    """Compile, check and (when the hardware is here) verify one candidate. Returns
    (stage, ok, feedback, compiled, checks, outcome)."""
    try:
        from .localcache import memo

        memo("recipe", recipe_text.encode(), lambda: bool(parse_recipe(recipe_text)))
    except InputError as exc:
        return "parse", False, f"launch.yaml is invalid: {exc}", None, [], None
    compiled = compile_source(source, target)
    if not compiled.result.ok:
        return "compile", False, compiled.result.log[-6000:], compiled, [], None
    checks = static_checks(spec, target, compiled.result.resources, compiled.result.disassembly)
    failed = [c for c in checks if c["ok"] is False]
    if failed:
        text = "; ".join(f"{c['check']}: {c['value']} (limit {c['limit']})" for c in failed)
        return "profile", False, f"resource/ISA expectations not met: {text}", compiled, checks, None
    if not verify_here:
        return "compile", True, "compiled and resource-checked; not verified (no hardware here)", \
            compiled, checks, None
    with ctx.gpu_lock if target.vendor != "host" else _nolock():
        outcome = run_verify(spec, target, ctx.project.oracle_path(spec.name), recipe_text,
                             compiled.result.binary, settings or ctx.settings, cases=cases)
    if not outcome.ok:
        return "verify", False, outcome.reason, compiled, checks, outcome
    return "verify", True, "passed", compiled, checks, outcome


class _nolock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def settings_for(ctx: Context, target) -> Settings:
    s = ctx.settings
    if s.bench is False and target.vendor != "host":
        # on a GPU, verification includes the timed benchmark cases: the spec's performance
        # expectations are part of what "verified" means
        from dataclasses import replace
        return replace(s, bench=True)
    return s


def build_node(ctx: Context, node: planning.Node) -> Result:
    project, store = ctx.project, ctx.store
    spec, target = project.spec(node.kernel), project.target(node.target)
    if node.action == planning.UNSUPPORTED:
        return Result(node, "unsupported", "; ".join(node.reasons))
    if ctx.regenerate and node.action not in (planning.GENERATE, planning.REGENERATE):
        node.action, node.reasons = planning.REGENERATE, ["--regenerate"]
    if node.needs_generator:
        return _generate(ctx, node, spec, target)
    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    problem = toolchain_problem(target)
    if problem:
        return Result(node, "failed", f"cannot compile here: {problem}")
    entry = node.entry
    recipe = entry.recipe()
    verify_here = node.here is not None
    need_verify = node.action in (planning.VERIFY, planning.REVERIFY, planning.RECOMPILE)
    if node.action == planning.RECOMPILE or not verify_here or not need_verify:
        stage, ok, feedback, compiled, checks, outcome = evaluate(ctx, spec, target, entry.source(),
                                                                  recipe, verify_here=False)
    if verify_here and need_verify:
        if node.action == planning.RECOMPILE and node.record and compiled and \
                compiled.binary_digest == node.record.get("compile", {}).get("binary"):
            # early cutoff: the new toolchain produced the very binary that was verified
            return _report_existing(ctx, node, spec, target, compiled, checks,
                                    note="recompiled: identical binary, record still valid")
        stage, ok, feedback, compiled, checks, outcome = evaluate(
            ctx, spec, target, entry.source(), recipe, verify_here=True,
            settings=settings_for(ctx, target))
        level = _levels(compiled, checks)
        if outcome is not None:
            vcomp = keys.verify_components(spec, target, project.oracle_digest(spec.name),
                                           compiled.binary_digest, entry.recipe_digest)
            record = make_record(spec, target, entry, compiled, outcome, vcomp, checks)
            store.put_record(spec.name, target.name, entry.id, record)
        else:
            record = None
        if ok:
            level.append(f"verified here ({node.here.get('device')})")
            return Result(node, "ok", _verified_summary(outcome), level,
                          compile_summary(compiled), checks, record, outcome)
        if node.action == planning.REVERIFY and ctx.generator is not None and stage == "verify" \
                and not ctx.locked:
            # the oracle or tolerance moved and the artifact no longer passes: regenerate, fed the failure
            node.action = planning.REGENERATE
            node.reasons = node.reasons + [f"re-verification failed: {feedback}"]
            return _generate(ctx, node, spec, target, feedback=feedback, previous_entry=entry)
        return Result(node, "failed", f"{stage} failed: {feedback}", level,
                      compile_summary(compiled) if compiled else None, checks, record, outcome)
    if not ok:
        return Result(node, "failed", f"{stage} failed: {feedback}", _levels(compiled, checks),
                      compile_summary(compiled) if compiled else None, checks)
    return _report_existing(ctx, node, spec, target, compiled, checks)


def bench_node(ctx: Context, node: planning.Node, cases) -> Result:
    """Time the given cases of the cached artifact here (records are exported, not stored: a
    bench-only run does not replace the full verification record)."""
    spec, target = ctx.project.spec(node.kernel), ctx.project.target(node.target)
    entry = node.entry
    stage, ok, feedback, compiled, checks, outcome = evaluate(
        ctx, spec, target, entry.source(), entry.recipe(), True, ctx.settings, cases=cases)
    record = None
    if outcome is not None:
        vcomp = keys.verify_components(spec, target, ctx.project.oracle_digest(spec.name),
                                       compiled.binary_digest, entry.recipe_digest)
        record = make_record(spec, target, entry, compiled, outcome, vcomp, checks)
    summary = _verified_summary(outcome) if ok else f"{stage} failed: {feedback}"
    return Result(node, "ok" if ok else "failed", summary, _levels(compiled, checks),
                  compile_summary(compiled) if compiled else None, checks, record, outcome)


def _levels(compiled, checks) -> list[str]:
    level = []
    if compiled and compiled.result.ok:
        level.append("compiled" + (" (cached)" if compiled.cached else
                                   f" in {compiled.result.seconds:.2f} s"))
    if any(c["check"].startswith(("registers", "spills")) for c in checks) or \
            (compiled and compiled.result.resources):
        level.append("resources checked")
    if any(c["check"] == "instructions" and c["ok"] for c in checks):
        level.append("ISA checked")
    return level


def _verified_summary(outcome: Outcome) -> str:
    n = len(outcome.cases)
    worst = max((c.get("max_abs", 0.0) or 0.0) for c in outcome.cases) if outcome.cases else 0.0
    text = f"verified {n} cases, max abs error {worst:.3g}"
    if outcome.bench:
        fr = [b.get("floor_fraction") for b in outcome.bench if b.get("floor_fraction")]
        if fr:
            text += f", {min(fr) * 100:.0f}% of floor (worst bench case)"
    return text


def _report_existing(ctx, node, spec, target, compiled, checks, note: str | None = None) -> Result:
    level = _levels(compiled, checks)
    if node.record and node.record.get("ok") and node.action in (planning.UP_TO_DATE, planning.RECOMPILE):
        level.append(f"verified on {planning.verified_where(node.record)}")
        summary = note or f"up to date: verified on {planning.verified_where(node.record)}"
        return Result(node, "ok", summary, level, compile_summary(compiled), checks, node.record)
    if node.action == planning.FAILED:
        level.append(f"failed on {planning.verified_where(node.record)}" if node.record else "failed")
        return Result(node, "failed", "; ".join(node.reasons), level, compile_summary(compiled),
                      checks, node.record)
    level.append("not verified on hardware")
    return Result(node, "ok", "; ".join(node.reasons) or "not verified on hardware", level,
                  compile_summary(compiled), checks, node.record)


def _generate(ctx: Context, node, spec, target, feedback: str | None = None,
              previous_entry=None) -> Result:
    if ctx.locked:
        return Result(node, "locked", f"--locked: needs {node.action} ({'; '.join(node.reasons)})")
    if ctx.dry_run:
        return Result(node, "skipped", node.line())
    if ctx.generator is None:
        return Result(node, "failed", f"needs {node.action} ({'; '.join(node.reasons)}), but "
                      f"{ctx.generator_problem or 'no generator is configured'}")
    from . import search as search_mod
    from .generators import Candidate
    from .prompt import make_request_factory

    # components may have been regenerated since planning: key against what is cached now
    fresh = planning.plan_node(ctx.project, ctx.store, spec, target)
    node.generate_components, node.generate_key = fresh.generate_components, fresh.generate_key

    components = _component_artifacts(ctx, spec, target)
    factory = make_request_factory(spec, target, components)
    verify_here = node.here is not None
    evaluated: dict[int, tuple] = {}

    def evaluate_candidate(candidate: Candidate):
        source = add_header(candidate.source, spec.name, target.name)
        stage, ok, fb, compiled, checks, outcome = evaluate(ctx, spec, target, source,
                                                            candidate.recipe, verify_here,
                                                            settings_for(ctx, target))
        evaluated[id(candidate)] = (compiled, checks, outcome)
        return search_mod.evaluation_from(stage, ok, fb, compiled, checks, outcome)

    previous = None
    if previous_entry is not None:
        previous = Candidate(previous_entry.source(), previous_entry.recipe(),
                             previous_entry.provenance(), "the current cached artifact")
    result = search_mod.search(ctx.generator, factory, evaluate_candidate, ctx.budget,
                               previous=previous, feedback=feedback)
    if result.best is None:
        return Result(node, "failed", f"{node.action}: no candidate passed ({result.stop_reason})")
    best = result.best
    provenance = {**best.provenance, "search": result.tree_json(), "spend": result.spend_json()}
    compiled, checks, outcome = evaluated[id(best)]
    res = _store(ctx, node, spec, target, best.source, best.recipe, provenance, compiled, checks,
                 outcome)
    res.summary = f"{node.action}d ({best.provenance.get('generator', '?')}): {res.summary}"
    return res


def _store(ctx, node, spec, target, source, recipe, provenance, compiled, checks, outcome) -> Result:
    """Store a candidate that passed, and its verification record when it was verified here."""
    entry = ctx.store.put(spec.name, target.name, target.language, source, recipe, provenance,
                          node.generate_components, node.generate_key)
    node.entry = entry
    level = _levels(compiled, checks)
    record = None
    if outcome is not None:
        vcomp = keys.verify_components(spec, target, ctx.project.oracle_digest(spec.name),
                                       compiled.binary_digest, entry.recipe_digest)
        record = make_record(spec, target, entry, compiled, outcome, vcomp, checks)
        ctx.store.put_record(spec.name, target.name, entry.id, record)
        level.append(f"verified here ({node.here.get('device')})")
        summary = _verified_summary(outcome)
    else:
        level.append("not verified on hardware")
        summary = "compiled and resource-checked; not verified on hardware (none here)"
    return Result(node, "ok", summary, level, compile_summary(compiled), checks, record, outcome,
                  provenance)


def _component_artifacts(ctx, spec, target):
    out = []
    for c in spec.components:
        entry = ctx.store.current(c, target.name)
        if entry is not None:
            out.append((c, entry.source(), entry.recipe()))
    return out


def build(ctx: Context, nodes: list[planning.Node], jobs: int = 1) -> list[Result]:
    """Build nodes; components before users (nodes arrive in dependency order per target)."""
    results: list[Result | None] = [None] * len(nodes)

    def one(i):
        try:
            results[i] = build_node(ctx, nodes[i])
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - one node's surprise must not stop the build
            results[i] = Result(nodes[i], "failed", f"internal error: {type(exc).__name__}: {exc}")
        if ctx.progress:
            ctx.progress(results[i], i, len(nodes))

    # waves by component depth: a kernel starts only after its components are built
    depth: dict[str, int] = {}
    for n in nodes:
        spec = ctx.project.spec(n.kernel)
        depth[n.kernel] = 1 + max((depth.get(c, 0) for c in spec.components), default=-1)
    for level in sorted(set(depth.values())):
        wave = [i for i, n in enumerate(nodes) if depth[n.kernel] == level]
        if jobs <= 1:
            for i in wave:
                one(i)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(one, wave))
    return [r for r in results if r is not None]


def accept(ctx: Context, folder: Path, force: bool = False, author: str | None = None) -> Result:
    """Store a hand-written implementation from a handoff folder, with provenance `handoff`."""
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
    source = add_header(task["source"], spec.name, target.name)
    recipe = task["recipe"]
    verify_here = node.here is not None
    stage, ok, feedback, compiled, checks, outcome = evaluate(
        ctx, spec, target, source, recipe, verify_here, settings_for(ctx, target))
    if not ok:
        return Result(node, "failed", f"not accepted: {stage} failed: {feedback}",
                      _levels(compiled, checks), compile_summary(compiled) if compiled else None,
                      checks, outcome=outcome)
    res = _store(ctx, node, spec, target, source, recipe, task["provenance"], compiled, checks,
                 outcome)
    res.summary = f"accepted ({task['provenance'].get('generator')}): {res.summary}"
    return res
