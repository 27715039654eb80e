"""The judge: verifies a compiled artifact against its oracle in a child process, so that a kernel
optimised against the oracle cannot fool it. See docs/oracle.md (every guard and the red-team case
that proves it) and docs/reward-hacks.md (the loopholes they close).

    parent.py    the verify stage in regen's process: job, seeds, hidden cases, verdict, record
    channel.py   the child process, its job file and its sealed result
    child.py     `python -m regen.judge.child JOB.json`: loads the artifact, runs the cases
    harness.py   one loaded artifact, one case verified (candidate first, twice, reference kept)
    buffers.py   inputs from the oracle, poisoned outputs and workspaces, perturbation
    compare.py   outputs against the reference, inputs against their pristine copies
    watch.py     guards around every launch: audit events, integrity, threads, late writes
    timing.py    the timed loop (child) and the timing guards (parent)
    degenerate.py  the degenerate-oracle guard, both halves
    hostcode.py  what a host artifact may import or contain (compile time and load time)
    guards.py    GUARDS, the registry of every guard; Rejected raises only registered names
    results.py   CaseResult and Rejection, converted to the record's JSON at the boundary

Importing this package imports no torch: the child imports it where it runs.
"""

from .degenerate import degenerate_oracle
from .guards import GUARDS, Guard, Rejected
from .parent import Outcome, Settings, hidden_variants, lint_oracle, make_record, run, seed_source
from .results import CaseResult, Rejection
from .timing import judge_timing

__all__ = ["GUARDS", "CaseResult", "Guard", "Outcome", "Rejected", "Rejection", "Settings",
           "degenerate_oracle", "hidden_variants", "judge_timing", "lint_oracle", "make_record",
           "run", "seed_source"]
