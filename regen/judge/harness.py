"""Child side: one loaded artifact and the verification of one case.

The candidate runs before the reference ever has (nothing to reuse) and again after it, with the
reference outputs kept alive; each run's outputs hold a fill drawn for that run (buffers.py), and
both runs' fills are kept so an unwritten element is found whatever they were; inputs are placed
at random offsets, cloned and compared bit for bit after every run (unless the output is declared
in place); the whole device is synchronised and outputs are re-checked
after a pause (no late background work). The guards around each launch are in watch.py, the
comparison in compare.py, the timed loop in timing.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .buffers import Buffers
from .compare import GuardedOracle, OracleError, bits, compare, inputs_unchanged
from .degenerate import ReferenceNotes
from .guards import Rejected
from .hostcode import native_problems, omp_threads, uses_openmp
from .results import CaseResult
from .timing import TimedLoop
from .trace import Trace
from .watch import LaunchWatch


class Harness:
    def __init__(self, job: dict):
        import torch

        from regen.oracle import ComposedOracle, load_oracle
        from regen.recipe import parse_recipe
        from regen.spec import Spec

        self.torch = torch
        self.job = job
        self.trace = Trace(bool(job.get("trace")))
        self.spec = Spec.model_validate(job["spec"])
        self.recipe = parse_recipe(job["recipe"]) if job.get("recipe") else None
        try:
            module = load_oracle(Path(job["oracle"]))
            if job.get("composition"):  # a composed spec: the reference comes from its components
                module = ComposedOracle(module, job["composition"])
            self.oracle = GuardedOracle(module)
        except Exception as exc:  # noqa: BLE001 - an oracle that cannot even be imported
            raise OracleError(f"the oracle could not be imported: {type(exc).__name__}: "
                              f"{exc}"[:1500]) from exc
        self.host_code = job["language"] == "cpp"  # the artifact's code runs on the host
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
        # torch's own intra-op thread pool must exist before the thread baseline is taken
        torch.ones(1 << 22).add_(1)
        self.notes = ReferenceNotes(self.spec)
        self.timed = TimedLoop(self)
        if job.get("mode") == "lint":
            self.runtime, self.watch = None, None
            self.buffers = Buffers(self.spec, self.recipe, self.oracle, "cpu")
            return
        self._load(job)
        self.buffers = Buffers(self.spec, self.recipe, self.oracle, self.runtime.device)

    def _load(self, job: dict) -> None:
        """Check a host artifact's machine code, then load the artifact under the launch guards
        (load-time constructors run inside the audit window)."""
        from regen.runtimes import get_runtime

        runtime_class = get_runtime(job["language"])
        omp_pool = 0
        if self.host_code:
            problems, imports = native_problems(job["binary"])
            if problems:
                raise Rejected("native-code", "the host artifact may not be loaded: "
                               + "; ".join(problems))
            if uses_openmp(imports):
                omp_pool = omp_threads() - 1
        self.watch = LaunchWatch(runtime_class, self.host_code, omp_pool)
        with self.watch.window(allowed=("ctypes.dlopen",)):
            self.runtime = runtime_class(job["binary"], limits=job.get("limits"))
        self.watch.loaded(self.runtime)

    @property
    def in_process(self) -> bool:
        """Whether the artifact's code runs in this process (then torch's threads are ours)."""
        return self.watch is not None and self.watch.in_process

    # -- launches --------------------------------------------------------------------------
    def launch(self, launches, bufs) -> None:
        """One launch of the candidate, then the checks that need no outputs."""
        with self.watch.window():
            self.runtime.launch(launches, bufs)
        self.watch.after_launch()

    def run_candidate(self, case, inputs: dict, avoid=None) -> tuple[dict, dict]:
        """One run on fresh output buffers filled with a fill drawn for it: (outputs, fills)."""
        from regen.recipe import bind

        bufs = self.buffers.outputs(case, inputs)
        fills = self.buffers.refresh(case, bufs, self.buffers.draw_kind(), keep=True, avoid=avoid)
        all_bufs = {**inputs, **bufs}
        env = self.spec.case_env(case)
        self.launch(bind(self.recipe, env, all_bufs, env["T"]), all_bufs)
        self.runtime.synchronize()
        return {t.name: bufs[t.name] for t in self.spec.signature.outputs}, fills

    # -- verification ----------------------------------------------------------------------
    def verify_case(self, case, seed: int) -> CaseResult:
        try:
            return self._verify_case(case, seed)
        except Rejected as r:
            return CaseResult.failed(r.guard, r.reason)

    def _verify_case(self, case, seed: int) -> CaseResult:
        phases = self.trace.phases(f"verify {case.label(self.spec.signature.dtypes[0])} "
                                   f"seed {seed}")
        try:
            result = self._verify_phases(case, seed, phases)
        except BaseException as exc:   # said, then handled where it always was
            phases.done(f"raised {type(exc).__name__}")
            raise
        phases.done("passed" if result.ok else f"failed [{result.guard}]")
        return result

    def _verify_phases(self, case, seed: int, phases) -> CaseResult:
        view = self.buffers.case_view(case)
        pristine = self.buffers.make_inputs(case, view, seed)
        self.notes.note_inputs(case, pristine)
        pristine = {k: v.clone() for k, v in pristine.items()}
        phases.mark("inputs")
        # 1. candidate first: no reference output exists anywhere to be reused
        first = self._candidate_run(case, pristine)
        phases.mark("candidate")
        if isinstance(first, CaseResult):
            return first
        got1, fills1 = first
        # 2. reference, kept alive until the end of this case
        want = self.oracle.reference({k: v.clone() for k, v in pristine.items()}, view)
        self.notes.note(case, want)
        phases.mark("reference")
        res = compare(self.spec, case, got1, want, fills1)
        phases.mark("compare")
        if not res.ok:
            return res
        # 3. candidate again, after the reference, with a fill that differs at every element
        second = self._candidate_run(case, pristine, avoid=fills1)
        phases.mark("candidate again")
        if isinstance(second, CaseResult):
            return second
        got2, fills2 = second
        res2 = compare(self.spec, case, got2, want, fills2, earlier=(got1, fills1))
        phases.mark("compare")
        if not res2.ok:
            return res2
        # 4. late writes and stray threads
        late = self._after_the_launches(got2)
        if late is not None:
            return late
        # 5. invariants, on the candidate's outputs
        if hasattr(self.oracle, "check"):
            from regen.oracle import run_check

            problems = run_check(self.oracle, pristine, got2, view, want)
            if problems:
                return CaseResult.failed("invariants", "; ".join(problems), res2.max_abs,
                                         res2.max_rel)
        phases.mark("late writes and invariants")
        return CaseResult.passed(max(res.max_abs, res2.max_abs), max(res.max_rel, res2.max_rel))

    def _candidate_run(self, case, pristine: dict, avoid=None) -> tuple[dict, dict] | CaseResult:
        """The candidate's (outputs, fills) on fresh clones of the inputs (at fresh random
        offsets), or why they are refused."""
        run_inputs = self.buffers.clones(pristine)
        got = self.run_candidate(case, run_inputs, avoid)
        changed = inputs_unchanged(run_inputs, pristine, self.buffers.inplace)
        return CaseResult.failed("inputs-unchanged", changed) if changed else got

    def _after_the_launches(self, got: dict) -> CaseResult | None:
        """Sync the whole device, wait, and the outputs must not have moved; no staged buffer may
        change late and no thread of the artifact may still run."""
        torch = self.torch
        snapshot = {k: v.clone() for k, v in got.items()}
        time.sleep(0.02)
        self.runtime.synchronize()
        for k in got:
            if not torch.equal(bits(got[k]), bits(snapshot[k])):
                return CaseResult.failed("late-writes", f"output {k!r} changed after the launch "
                                         "returned and the device was synchronised (background work)")
        if self.host_code:
            self.watch.check_late_writes()
        stray = self.watch.stray_threads()
        return CaseResult.failed("threads", stray) if stray else None

    # -- the timeline (regen profile) -------------------------------------------------------
    def timeline(self, case, seed: int, runs: int) -> dict:
        """`runs` launches of the instrumented build on one case, each on fresh outputs with the
        timeline buffer zeroed (caches flushed before the last, as before a timed launch); the
        last run's records, and its outputs checked against the reference (instrumentation must
        not change what the kernel computes)."""
        from regen.recipe import bind, timeline_slots

        torch = self.torch
        if self.recipe.timeline is None:
            raise Rejected("crash", "the launch recipe declares no timeline")
        view = self.buffers.case_view(case)
        pristine = {k: v.clone() for k, v in self.buffers.make_inputs(case, view, seed).items()}
        env = self.spec.case_env(case)
        name = self.recipe.timeline.buffer
        records = self.buffers.empty([timeline_slots(self.recipe, env) * 4], torch.int64)
        for r in range(max(1, runs)):
            inputs = self.buffers.clones(pristine)
            bufs = self.buffers.outputs(case, inputs)
            fills = self.buffers.refresh(case, bufs, "nan", keep=True)
            records.zero_()
            all_bufs = {**inputs, **bufs, name: records}
            launches = bind(self.recipe, env, set(all_bufs), env["T"])
            if r == max(1, runs) - 1:
                self.runtime.flush_cache()
            self.launch(launches, all_bufs)
            self.runtime.synchronize()
        got = {t.name: bufs[t.name] for t in self.spec.signature.outputs}
        want = self.oracle.reference({k: v.clone() for k, v in pristine.items()}, view)
        check = compare(self.spec, case, got, want, fills)
        return {"case": case.label(self.spec.signature.dtypes[0]), "seed": seed,
                "words": records.cpu().tolist(), "check": check.to_json(),
                "fingerprint": self.runtime.fingerprint(),
                "launches": len(launches)}

    # -- the oracle alone ------------------------------------------------------------------
    def lint(self, cases: list, seeds: list[int]) -> list[dict]:
        """Reference outputs only (no artifact): the degenerate-oracle lint."""
        for case in cases:
            view = self.buffers.case_view(case)
            for s in seeds:
                inputs = self.buffers.make_inputs(case, view, s)
                self.notes.note_inputs(case, inputs)
                self.notes.note(case, self.oracle.reference(inputs, view))
        return self.notes.lint_report()
