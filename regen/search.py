"""The search loop shared by every generator: repair until a candidate passes, then a budgeted
tree search over refinements, keeping a new best only when it is measurably faster.

    result = search(generator, request_factory, evaluate, budget, retime=None, progress=None,
                    previous=None, feedback=None)

request_factory(purpose, previous, feedback) -> Request builds the prompt (regen.prompt
.make_request_factory); evaluate(candidate) -> Evaluation compiles, verifies and profiles a candidate
in a child process (the pipeline's job); retime(candidate) -> Evaluation times it again (defaults to
evaluate). Phase 1 asks for a candidate and repairs it with the specific feedback (parse error,
compile log, failing case) for up to `repair_rounds` rounds, starting a fresh chain when a chain
runs out. Phase 2 is UCT: pick the passing node with the best upper confidence bound on its
reward (speed relative to the physical floor, the baselines and the first passing candidate), ask
for a refinement with its profile feedback and the refinements already tried, repair a failing
child once, back the reward up the tree. A faster child replaces the incumbent only after both are
re-timed and the child wins by more than the noise (`Budget.noise`, with the two runs' quartiles
apart: faster_beyond_noise).
Every attempt is a node in SearchResult.nodes; tree_json() is provenance["search"].

A generator call that fails for that call's sake (a dropped or stalled stream, an endpoint that
kept failing: GenerationError.transient, or any exception from the transport) is a failed
candidate, never the node's failure: the search asks again, and stops only after
`generator_failures` such failures in a row. Whatever stops the search, the best verified
candidate so far is its result. The node's budget is passed into every call (Request.deadline,
Request.max_usd) so a generator bounds the call itself; spend of failed calls counts.
No module state: one call's state lives in one _Search object, so calls can run in parallel threads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .artifact import Candidate, Request
from .generators import BudgetExhausted, GenerationError
from .generators.parse import ParseError

FEEDBACK_CHARS = 800  # of each node's feedback kept in provenance


@dataclass
class Budget:
    max_candidates: int = 8          # generator calls, counting unparseable answers
    max_tokens: int | None = None    # input + output + cache tokens over all calls
    max_usd: float | None = None
    max_seconds: float | None = None
    repair_rounds: int = 3           # repairs of a failing chain before a fresh generation
    child_repairs: int = 1           # repairs of a refinement that fails
    noise: float = 0.03              # least relative speed-up that can replace the incumbent
    exploration: float = 0.7         # UCB exploration constant
    enough_floor_fraction: float | None = None   # stop refining once the best reaches this
    generator_failures: int = 3      # failed generator calls in a row that end the search


@dataclass
class Evaluation:
    """What the pipeline measured for one candidate."""
    ok: bool                          # passed the oracle on every case
    stage: str                        # parse | compile | verify | profile (where it stopped)
    feedback: str = ""                # specific: log tail, failing case + max error, profile figures
    time_s: float | None = None       # median over the benchmark cases (None if not timed)
    spread: float | None = None       # relative noise of time_s, e.g. (p75 - p25) / median
    floor_fraction: float | None = None
    speedups: dict[str, float] = field(default_factory=dict)   # baseline -> speed-up
    resources: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)   # anything the pipeline wants back (records)


@dataclass
class Node:
    id: int
    parent: int | None
    purpose: str
    candidate: Candidate | None
    evaluation: Evaluation | None
    tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0
    error: str | None = None
    children: list[int] = field(default_factory=list)
    visits: int = 0
    value: float = 0.0
    reward: float | None = None
    retime: dict | None = None
    cell_unknown: bool = False

    @property
    def ok(self) -> bool:
        return self.evaluation is not None and self.evaluation.ok

    @property
    def stage(self) -> str:
        if self.evaluation is not None:
            return self.evaluation.stage
        return "generate"

    def as_dict(self) -> dict:
        ev = self.evaluation
        out = {
            "id": self.id, "parent": self.parent, "purpose": self.purpose,
            "note": self.candidate.note if self.candidate is not None else "",
            "cell": self.candidate.cell if self.candidate is not None else "",
            "stage": self.stage, "ok": self.ok,
            "time_s": ev.time_s if ev else None,
            "floor_fraction": ev.floor_fraction if ev else None,
            "speedups": dict(ev.speedups) if ev else {},
            "reward": None if self.reward is None else round(self.reward, 4),
            "tokens": self.tokens, "usd": round(self.usd, 6), "seconds": round(self.seconds, 3),
            "feedback": (ev.feedback[:FEEDBACK_CHARS] if ev and ev.feedback else ""),
        }
        if self.cell_unknown:
            out["cell_unknown"] = True   # named a cell the target's grid does not have
        if self.retime is not None:
            out["retime"] = self.retime
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class SearchResult:
    best: Candidate | None
    best_evaluation: Evaluation | None
    best_node: int | None
    nodes: list[dict]
    spent: dict            # candidates, tokens, usd, seconds (usd_unknown when a price was missing)
    stop_reason: str       # why the search ended
    error: str | None = None   # the generator failure that ended it, if one did

    def tree_json(self) -> dict:
        """provenance["search"]: every attempt, which one won, the grid cells on the way to it
        and why the search stopped."""
        return {"best": self.best_node, "stop_reason": self.stop_reason, "error": self.error,
                "path": self.path(), "nodes": list(self.nodes)}

    def path(self) -> list[dict]:
        """The refinements from the first passing candidate to the best, each with the technique
        grid cell it named: the kernel's path through the grid."""
        by_id = {n["id"]: n for n in self.nodes}
        chain, at = [], self.best_node
        while at is not None:
            node = by_id[at]
            if node["purpose"] == "optimise":
                chain.append({"node": node["id"], "cell": node.get("cell", ""), "note": node["note"]})
            at = node["parent"]
        return chain[::-1]

    def spend_json(self) -> dict:
        return dict(self.spent)


def tokens_of(provenance: dict) -> int:
    return sum(int(provenance.get(k) or 0) for k in
               ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"))


def reward(ev: Evaluation, reference_time: float | None) -> float:
    """In [0, 1]: mean of the floor fraction, s/(1+s) per baseline speed-up, and the speed
    relative to the first passing candidate (0.5 = as fast)."""
    parts = []
    if ev.floor_fraction is not None:
        parts.append(min(max(ev.floor_fraction, 0.0), 1.0))
    for s in ev.speedups.values():
        if s is not None and s > 0:
            parts.append(s / (1.0 + s))
    if ev.time_s and reference_time:
        parts.append(reference_time / (reference_time + ev.time_s))
    return sum(parts) / len(parts) if parts else 0.5


def faster_beyond_noise(child: Evaluation, incumbent: Evaluation, noise: float) -> tuple[bool, float]:
    """(accept, threshold): the child's upper quartile must lie below the incumbent's lower
    quartile by more than the noise floor. A run's spread s is (p75 - p25) / median, so its middle
    half spans about median * (1 -/+ s / 2); threshold is the fraction by which the child's median
    must be faster. Unlike "faster by more than the larger spread", a noisy run (s >= 1 on a busy
    machine) still lets a child many times faster win, and never a child within the noise."""
    s_child = child.spread or 0.0
    s_inc = min(incumbent.spread or 0.0, 1.0)
    ratio = (1.0 + s_child / 2) / ((1.0 - s_inc / 2) * (1.0 - noise))
    threshold = 1.0 - 1.0 / ratio
    if not (child.ok and incumbent.ok) or not child.time_s or not incumbent.time_s:
        return False, threshold
    return child.time_s < incumbent.time_s * (1.0 - threshold), threshold


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "untimed"
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


class _Search:
    def __init__(self, generator, request_factory, evaluate, budget, retime, progress, clock):
        self.generator = generator
        self.request_factory = request_factory
        self.evaluate = evaluate
        self.retime = retime or evaluate
        self.budget = budget
        self.progress = progress
        self.clock = clock
        self.started = clock()
        self.nodes: list[Node] = []
        self.best: Node | None = None
        self.reference_time: float | None = None
        self.candidates = 0
        self.tokens = 0
        self.usd = 0.0
        self.usd_unknown = False
        self.stopped: str | None = None
        self.error: str | None = None
        self.failures_in_a_row = 0

    # -- budget --------------------------------------------------------------------------
    def exhausted(self) -> str | None:
        b = self.budget
        if self.candidates >= b.max_candidates:
            return f"max_candidates ({b.max_candidates}) reached"
        if b.max_tokens is not None and self.tokens >= b.max_tokens:
            return f"max_tokens ({b.max_tokens}) reached"
        if b.max_usd is not None and self.usd >= b.max_usd:
            return f"max_usd ({b.max_usd:g}) reached"
        if b.max_seconds is not None and self.clock() - self.started >= b.max_seconds:
            return f"max_seconds ({b.max_seconds:g}) reached"
        return None

    # -- one generator call + evaluation -------------------------------------------------
    def bounded(self, request: Request) -> Request:
        """The request with what is left of the node's budget: its deadline and dollars."""
        b = self.budget
        deadline = self.started + b.max_seconds if b.max_seconds is not None else None
        usd = b.max_usd - self.usd if b.max_usd is not None else None
        return replace(request, deadline=deadline, max_usd=usd)

    def attempt(self, purpose: str, parent: Node | None, previous: Candidate | None,
                feedback: str | None) -> Node | None:
        reason = self.exhausted()
        if reason:
            self.stopped = self.stopped or reason
            return None
        request: Request = self.bounded(self.request_factory(purpose, previous, feedback))
        t0 = self.clock()
        node = Node(id=len(self.nodes), parent=parent.id if parent else None, purpose=purpose,
                    candidate=None, evaluation=None)
        self.candidates += 1
        prov: dict = {}
        try:
            candidate = self.generator.generate(request)
        except ParseError as exc:
            # the answer is kept as the "previous candidate" so the repair shows it back
            node.candidate = Candidate(source=exc.answer, recipe="", provenance=exc.provenance,
                                       note="(answer not in the artifact format)")
            node.evaluation = Evaluation(ok=False, stage="parse",
                                         feedback=str(exc))
        except BudgetExhausted as exc:
            self.candidates -= 1      # no call was made
            limit = f" ({self.budget.max_usd:g})" if self.budget.max_usd is not None else ""
            self.stopped = self.stopped or f"max_usd{limit} reached: {str(exc).split(': ', 1)[-1]}"
            return None
        except GenerationError as exc:
            prov = exc.provenance
            self.generator_failed(node, str(exc), exc.transient)
        except Exception as exc:  # noqa: BLE001 - a transport error the generator did not name
            self.generator_failed(node, f"{type(exc).__name__}: {exc}", True)
        else:
            node.candidate = candidate
            node.cell_unknown = bool(candidate.cell and request.cells
                                     and candidate.cell not in request.cells)
            self.failures_in_a_row = 0
            try:
                node.evaluation = self.evaluate(candidate)
            except Exception as exc:  # noqa: BLE001 - regen's own failure: stop, keep the best
                node.evaluation = Evaluation(ok=False, stage="evaluate",
                                             feedback=f"{type(exc).__name__}: {exc}")
                node.error = f"evaluating the candidate failed: {type(exc).__name__}: {exc}"
                self.error = node.error
                self.stopped = f"internal error while evaluating a candidate ({type(exc).__name__})"
        node.seconds = self.clock() - t0
        if node.candidate is not None:
            prov = node.candidate.provenance
        node.tokens = tokens_of(prov)
        cost = prov.get("cost_usd")
        if cost is None and prov.get("generator") == "llm" and node.tokens:
            self.usd_unknown = True
        node.usd = float(cost or 0.0)
        self.tokens += node.tokens
        self.usd += node.usd
        self.nodes.append(node)
        if parent is not None:
            parent.children.append(node.id)
        if node.ok:
            if self.reference_time is None:
                self.reference_time = node.evaluation.time_s
            node.reward = reward(node.evaluation, self.reference_time)
            node.visits, node.value = 1, node.reward
        if self.progress is not None and not (node.ok and self.best is not None):
            self.progress(self.progress_event(node))   # a refinement that passed: after consider()
        return node

    def progress_event(self, node: Node) -> dict:
        """What a progress display shows: the node, its round (a generation or refinement and
        its repairs), the budget and the spend so far."""
        rounds = sum(1 for n in self.nodes if n.purpose != "repair" or n.parent is None)
        return {**node.as_dict(), "round": max(rounds, 1),
                "max_candidates": self.budget.max_candidates, "best": self.best_id(node),
                "spent": {"candidates": self.candidates, "tokens": self.tokens,
                          "usd": round(self.usd, 6), "usd_unknown": self.usd_unknown,
                          "seconds": round(self.clock() - self.started, 3)}}

    def best_id(self, node: Node) -> int | None:
        return self.best.id if self.best is not None else (node.id if node.ok else None)

    def generator_failed(self, node: Node, message: str, transient: bool) -> None:
        """A call that gave no answer: a failed candidate when transient (the search goes on
        until `generator_failures` in a row), the end of the search otherwise."""
        node.error = message
        first = message.splitlines()[0] if message else "no detail"
        if not transient:
            self.error = message
            self.stopped = f"generator failed: {first}"
            return
        self.failures_in_a_row += 1
        if self.failures_in_a_row >= self.budget.generator_failures:
            self.error = message
            self.stopped = (f"generator failed {self.failures_in_a_row} times in a row; last: "
                            f"{first}")

    # -- phase 1 -------------------------------------------------------------------------
    def first_passing(self, previous: Candidate | None, feedback: str | None) -> None:
        while self.best is None and not self.stopped:
            if previous is not None:  # an existing artifact that now fails: repair it first
                node = self.attempt("repair", None, previous, feedback)
                if node is not None and node.error is None:
                    previous = None
            else:
                node = self.attempt("generate", None, None, None)
            repairs = 0
            while node is not None and not node.ok and not self.stopped:
                if node.error is not None:    # the call failed: ask the same again
                    parent = self.nodes[node.parent] if node.parent is not None else None
                    if parent is None:
                        break
                    node = self.attempt("repair", parent, parent.candidate,
                                        repair_feedback(parent.evaluation))
                    continue
                if repairs >= self.budget.repair_rounds:
                    break
                node = self.attempt("repair", node, node.candidate, repair_feedback(node.evaluation))
                repairs += 1
            if node is not None and node.ok:
                self.best = node
                self.backprop(node, node.reward)

    # -- phase 2 -------------------------------------------------------------------------
    def select(self) -> Node | None:
        passing = [n for n in self.nodes if n.ok]
        if not passing:
            return None
        total = sum(n.visits for n in passing)

        def ucb(n: Node) -> float:
            return n.value / n.visits + self.budget.exploration * math.sqrt(
                math.log(total + 1) / n.visits)

        return max(passing, key=lambda n: (ucb(n), -n.id))

    def backprop(self, node: Node, value: float) -> None:
        parent_id = node.parent
        while parent_id is not None:
            parent = self.nodes[parent_id]
            if parent.ok:
                parent.visits += 1
                parent.value += value
            parent_id = parent.parent

    def optimise_feedback(self, parent: Node) -> str:
        ev = parent.evaluation
        lines = [f"This candidate passes every case; median time {_fmt_time(ev.time_s)}."]
        if ev.feedback.strip():
            lines.append(ev.feedback.strip())
        if self.best is not None and self.best is not parent:
            lines.append(f"The best candidate so far takes {_fmt_time(self.best.evaluation.time_s)} "
                         f"(this one {_fmt_time(ev.time_s)}).")
        tried = [self.nodes[c] for c in parent.children]
        if tried:
            lines.append("Refinements of this candidate already tried (do something different):")
            for child in tried:
                cell = f"[{child.candidate.cell}] " if child.candidate and child.candidate.cell else ""
                lines.append(f"- {cell}{child.candidate.note if child.candidate else '?'}: "
                             f"{self.outcome(child, parent)}")
        return "\n".join(lines)

    def outcome(self, node: Node, parent: Node) -> str:
        if node.error:
            return "the generator failed"
        if not node.ok:
            return {"parse": "the answer could not be read", "compile": "did not compile",
                    "verify": "failed the oracle"}.get(node.stage, f"failed at {node.stage}")
        t, tp = node.evaluation.time_s, parent.evaluation.time_s
        if t and tp:
            verdict = f"passed, {_fmt_time(t)} ({tp / t:.2f}x the speed of this one)"
        else:
            verdict = "passed"
        if node.retime is not None and not node.retime["accepted"]:
            verdict += "; not faster beyond noise when re-timed"
        return verdict

    def consider(self, node: Node) -> None:
        """Make `node` the incumbent if, re-timed next to it, it is faster beyond the noise."""
        inc = self.best
        t, t_inc = node.evaluation.time_s, inc.evaluation.time_s
        if t is None or t_inc is None or t >= t_inc * (1.0 - self.budget.noise):
            return
        t0 = self.clock()
        try:
            again = self.retime(node.candidate)
            again_inc = self.retime(inc.candidate)
        except Exception as exc:  # noqa: BLE001 - the incumbent stays; the search goes on
            node.retime = {"accepted": False, "error": f"{type(exc).__name__}: {exc}"}
            return
        accept, threshold = faster_beyond_noise(again, again_inc, self.budget.noise)
        node.seconds += self.clock() - t0
        node.retime = {"time_s": again.time_s, "incumbent": inc.id,
                       "incumbent_time_s": again_inc.time_s, "threshold": round(threshold, 4),
                       "accepted": accept}
        if not again.ok:
            node.retime["failed"] = again.stage
        if accept:
            self.best = node

    def good_enough(self) -> bool:
        goal, ev = self.budget.enough_floor_fraction, self.best.evaluation
        return goal is not None and ev.floor_fraction is not None and ev.floor_fraction >= goal

    def refine(self) -> None:
        if self.best.evaluation.time_s is None:
            self.stopped = "passed; not timed here, so there is nothing to refine against"
            return
        while not self.stopped:
            if self.good_enough():
                self.stopped = (f"best reached floor fraction "
                                f"{self.best.evaluation.floor_fraction:.2f}")
                return
            parent = self.select()
            if parent is None:
                return
            node = self.attempt("optimise", parent, parent.candidate, self.optimise_feedback(parent))
            repairs = 0
            while (node is not None and node.error is None and not node.ok
                   and repairs < self.budget.child_repairs):
                node = self.attempt("repair", node, node.candidate, repair_feedback(node.evaluation))
                repairs += 1
            if node is None:
                return
            if node.error is not None:
                continue   # the call failed (or the search stopped): no verdict on the parent
            if node.ok:
                self.consider(node)
                if self.progress is not None:
                    self.progress(self.progress_event(node))
            self.backprop(node, node.reward if node.ok else 0.0)

    def run(self, previous: Candidate | None, feedback: str | None) -> SearchResult:
        self.first_passing(previous, feedback)
        if self.best is not None:
            self.refine()
        spent = {"candidates": self.candidates, "tokens": self.tokens,
                 "usd": round(self.usd, 6), "seconds": round(self.clock() - self.started, 3)}
        if self.usd_unknown:
            spent["usd_unknown"] = True
        best = self.best
        return SearchResult(
            best=best.candidate if best else None,
            best_evaluation=best.evaluation if best else None,
            best_node=best.id if best else None,
            nodes=[n.as_dict() for n in self.nodes], spent=spent,
            stop_reason=self.stopped or "done", error=self.error)


def search(generator, request_factory: Callable[..., Request],
           evaluate: Callable[[Candidate], Evaluation], budget: Budget | None = None,
           retime: Callable[[Candidate], Evaluation] | None = None,
           progress: Callable[[dict], None] | None = None,
           previous: Candidate | None = None, feedback: str | None = None,
           clock: Callable[[], float] = time.monotonic) -> SearchResult:
    """Run the repair-then-refine search for one kernel on one target (see the module doc).
    previous + feedback: start by repairing an existing artifact (e.g. one the changed oracle
    now fails) instead of generating from scratch."""
    return _Search(generator, request_factory, evaluate, budget or Budget(), retime, progress,
                   clock).run(previous, feedback)


_STAGE_HEADERS = {
    "parse": "The answer could not be used as an artifact:",
    "compile": "It did not compile. Compiler output (tail):",
    "verify": "It compiled but failed verification against the oracle:",
    "profile": "It passed the oracle but missed a performance or resource expectation:",
}


def repair_feedback(ev: Evaluation) -> str:
    """The feedback a repair request carries: which stage failed, then the specifics."""
    header = _STAGE_HEADERS.get(ev.stage, f"It failed at the {ev.stage} stage:")
    body = ev.feedback.strip() or "(no further detail was reported)"
    return f"{header}\n{body}"


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def evaluation_from(stage: str, ok: bool, feedback: str, compiled=None, checks=None,
                    outcome=None) -> Evaluation:
    """An Evaluation from the pipeline's pieces (regen.build.evaluate): the compile result's
    resources, the static checks and the verification outcome's benchmark rows. Several
    benchmark cases are summarised by geometric means (the same cases for every candidate)."""
    resources = {}
    result = getattr(compiled, "result", None)
    if result is not None:
        resources = dict(getattr(result, "resources", {}) or {})
    rows = [r for r in (getattr(outcome, "bench", None) or []) if r.get("median_s")]
    time_s = _geomean([r["median_s"] for r in rows])
    spread = max((r.get("spread") or 0.0 for r in rows), default=None) if rows else None
    floor = _geomean([r.get("floor_fraction") for r in rows])
    speedups: dict[str, float] = {}
    for name in sorted({b for r in rows for b in (r.get("baselines") or {})}):
        ratios = [r["baselines"][name] / r["median_s"] for r in rows
                  if (r.get("baselines") or {}).get(name)]
        if ratios:
            speedups[name] = _geomean(ratios)
    text = feedback or ""
    if ok and rows:
        lines = ["Measured on this target:"]
        for r in rows:
            parts = [f"case {r.get('case')}: median {_fmt_time(r['median_s'])}"]
            if r.get("spread") is not None:
                parts.append(f"spread {r['spread']:.1%}")
            if r.get("floor_fraction") is not None:
                bound = f"{r['bound']}-bound " if r.get("bound") else ""
                parts.append(f"{r['floor_fraction']:.2f} of the {bound}floor "
                             f"({_fmt_time(r.get('floor_s'))})")
            for name, base in sorted((r.get("baselines") or {}).items()):
                if base:
                    parts.append(f"{base / r['median_s']:.2f}x {name}")
            lines.append("- " + ", ".join(parts))
        for c in (checks or []):
            if c.get("ok") is not None:
                lines.append(f"- {c.get('check')}: {c.get('value')} (limit {c.get('limit')})"
                             f"{'' if c.get('ok') else ' NOT MET'}")
        for sym, res in sorted(resources.items()):
            if isinstance(res, dict) and res:
                lines.append(f"- {sym}: " + ", ".join(f"{k} {v}" for k, v in sorted(res.items())))
        text = "\n".join(lines)
    return Evaluation(ok=ok, stage=stage, feedback=text, time_s=time_s, spread=spread,
                      floor_fraction=floor, speedups=speedups, resources=resources,
                      details={"checks": list(checks or [])})
