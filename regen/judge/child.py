"""The child process that runs untrusted code: `python -m regen.judge.child JOB.json`.

regen never loads a generated binary in its own process. The parent (parent.py) writes a job,
starts this process with a timeout and reads back raw observations; pass/fail statistics and
timing medians are decided there. The guards against the known ways a kernel cheats an oracle
(docs/reward-hacks.md; the table is docs/oracle.md, the registry guards.py) run here:
harness.py verifies a case, watch.py guards every launch, timing.py runs the timed loop. The
job file is unlinked as soon as it is read, before the artifact is loaded (the job names every
case, hidden variant and seed; nothing the artifact can open may). The result is authenticated
with a key the parent passes over stdin (never on disk), and the process
leaves with os._exit, so no destructor or atexit handler of the artifact runs after it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from .channel import seal
from .compare import OracleError
from .guards import Rejected
from .results import CaseResult
from .watch import install_audit, thread_ids


def run(job: dict) -> dict:
    from regen.spec import Case

    from .harness import Harness

    try:
        harness = Harness(job)
    except Rejected as r:
        return {"cases": [], "fingerprint": None, "rejected": r.rejection.to_json()}
    except OracleError as exc:  # the oracle cannot even be loaded: no case can be judged
        rejected = Rejected("oracle", f"oracle error: {exc}").rejection.to_json()
        return {"cases": [], "fingerprint": None, "rejected": rejected}
    if job.get("mode") == "lint":
        cases = [Case.model_validate(item["case"]) for item in job["cases"]]
        return {"lint": harness.lint(cases, job["lint_seeds"])}
    if job.get("mode") == "timeline":   # regen profile: the instrumented build's records
        try:
            return {"timeline": harness.timeline(Case.model_validate(job["case"]), job["seed"],
                                                 job.get("runs", 2))}
        except Rejected as r:
            return {"cases": [], "fingerprint": None, "rejected": r.rejection.to_json()}
        except OracleError as exc:
            return {"error": f"oracle error: {exc}"[:4000], "kind": "oracle"}
    out: dict = {"cases": [], "fingerprint": harness.runtime.fingerprint()}
    harness.trace(f"{harness.spec.name}: artifact loaded, {len(job['cases'])} cases")
    for item in job["cases"]:
        entry, context_dead = run_case(harness, job, Case.model_validate(item["case"]), item)
        out["cases"].append(entry)
        if context_dead:
            break  # later cases would fail for the wrong reason
    return out


def run_case(harness, job: dict, case, item: dict) -> tuple[dict, bool]:
    """One case's entry (the record's format) and whether the artifact's context died with it."""
    label = case.label(harness.spec.signature.dtypes[0])
    entry = {"case": label, "seeds": item["seeds"], "dist": case.dist}
    try:
        if item.get("verify", True):
            _verify(harness, entry, case, label, item["seeds"])
        if item.get("time") and entry.get("ok", True):
            _time(harness, entry, case, item["time_seeds"], job["timing"])
    except OracleError as exc:
        entry.update(CaseResult.failed("oracle", f"oracle error: {exc}").to_json())
    except Rejected as r:
        entry.update(CaseResult.failed(r.guard, r.reason).to_json())
    except Exception as exc:  # noqa: BLE001 - the candidate crashed; report, do not die
        entry.update({**CaseResult.failed(getattr(exc, "guard", "crash"),
                                          f"{type(exc).__name__}: {exc}"[:2000]).to_json(),
                      "traceback": traceback.format_exc()[-2000:]})
        dead = "CUDA_ERROR" in str(exc) or "illegal" in str(exc).lower() \
            or any(c.__name__ == "ArtifactDied" for c in type(exc).__mro__)
        return entry, dead
    return entry, False


def _verify(harness, entry: dict, case, label: str, seeds: list[int]) -> None:
    """Every seed of a correctness case; the entry reports the first failure or the worst
    errors, and the reference notes of the degenerate-oracle guard."""
    results = [harness.verify_case(case, s) for s in seeds]
    bad = next((r for r in results if not r.ok), None)
    if bad:
        entry.update(bad.to_json())
        entry["failing_seed"] = seeds[results.index(bad)]
    else:
        entry.update(CaseResult.passed(max(r.max_abs for r in results),
                                       max(r.max_rel for r in results)).to_json())
    note = harness.notes.of(label)
    if note is not None:
        entry.update(note)


def _time(harness, entry: dict, case, seeds: list[int], timing: dict) -> None:
    from .timing import host_timing_lock

    with host_timing_lock():
        _timed(harness, entry, case, seeds, timing)


def _timed(harness, entry: dict, case, seeds: list[int], timing: dict) -> None:
    phases = harness.trace.phases(f"time {entry['case']} ({timing['iters']} iterations, "
                                  f"{len(seeds)} seeds)")
    entry["timing"] = harness.timed.time_case(case, seeds, timing["iters"], timing["warmup"])
    phases.mark("candidate")
    for mode in timing.get("baselines", []):
        entry.setdefault("baselines", {})[mode] = harness.timed.time_baseline(
            case, seeds, timing["iters"], timing["warmup"], mode)
        phases.mark(mode)
    if timing.get("peers"):
        peers = harness.timed.time_peers(case, seeds, timing["iters"], timing["warmup"])
        if peers:
            entry["peers"] = peers
        phases.mark("peers")
    phases.done()
    if (timing.get("baselines") or timing.get("peers")) and harness.in_process:
        harness.watch.tids_allowed |= thread_ids()  # torch's (compile) threads, not the artifact's


def _forget(job_path: Path) -> None:
    """Remove the job file (every case, hidden variant and seed) before anything untrusted is
    loaded: no file the artifact could open reveals the job."""
    try:
        job_path.unlink()
    except OSError:
        pass


def _die_with_parent() -> None:
    """A regen killed outright (SIGKILL: no handler runs) must not leave the judge and the
    artifact running: the kernel kills this process when its parent dies (Linux), and the
    artifact's process dies with this one (regen/runtimes/cpu.py)."""
    parent = int(os.environ.get("REGEN_JUDGE_PARENT", "0") or 0)
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != parent:   # the parent died before the death signal was set
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    job_path = Path(argv[1])
    # the parent's one-time key arrives on stdin, read before anything untrusted is loaded
    key = bytes.fromhex(sys.stdin.readline().strip() or "00")
    job = json.loads(job_path.read_text())
    _forget(job_path)
    result_path = Path(job["result"])
    install_audit()
    try:
        result = run(job)
    except Exception as exc:  # noqa: BLE001
        result = {"error": f"{type(exc).__name__}: {exc}"[:4000],
                  "traceback": traceback.format_exc()[-4000:]}
    text = seal(json.dumps(result), key)
    try:
        tmp = result_path.with_name(result_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, result_path)
        code = 0
    except OSError as exc:
        print(f"regen.judge.child: cannot write the result: {exc}", file=sys.stderr)
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no destructor or atexit handler of a loaded artifact runs after the result


if __name__ == "__main__":
    sys.exit(main(sys.argv))
