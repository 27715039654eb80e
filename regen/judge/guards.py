"""Every guard of the judge, by name: the one table that says where each runs, which loophole of
docs/reward-hacks.md it closes and which red-team case proves it.

A rejection names its guard (`Outcome.reason` ends with `[guard: NAME]`); only a name registered
here can be raised, so docs/oracle.md, the red-team cases and the code cannot drift apart
(tests/test_guards.py checks all three).

Red-team cases are either a folder of tests/redteam (`cpu/noop`: its redteam.yaml names the guard)
or a test that attacks the guard directly (`tests/FILE.py::test_name`).
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES = {
    "load": "the child, before the artifact's code may run",
    "launch": "the child, around every launch of the artifact",
    "compare": "the child, on the outputs and inputs after a launch",
    "timing": "the parent, on the timing samples the child sent back",
    "result": "the parent, on how the child ended and what it wrote",
    "oracle": "either side: the oracle itself, not the candidate",
}


@dataclass(frozen=True)
class Guard:
    name: str
    stage: str                    # a key of STAGES
    loopholes: tuple[int, ...]    # numbers in docs/reward-hacks.md; () for faults, not cheats
    closes: str                   # what it refuses, in one line
    redteam: tuple[str, ...]      # the cases that prove it (see the module docstring)

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"guard {self.name!r}: unknown stage {self.stage!r}")
        if not self.redteam:
            raise ValueError(f"guard {self.name!r} has no red-team case")


_RT_CPU = "tests/test_runtime_cpu.py::"
_JUDGE = "tests/test_judge.py::"
_REDTEAM = "tests/test_redteam.py::"

GUARDS: dict[str, Guard] = {g.name: g for g in (
    Guard("poisoned-outputs", "compare", (1, 2, 14, 15),
          "an output element the candidate did not write: it still holds the run's random fill, "
          "which no correct output takes there, or its fill in both runs (verification runs, "
          "checked timed iterations)",
          ("cpu/noop", "cpu/partial_write", "cpu/stale_pointer", "cpu/skip_repeat",
           "cpu/count_calls", "cpu/predict_schedule", "cpu/forge_result_at_exit", "cpu/pointer_cache",
           "cpu/sandbox_process", "cpu/sandbox_signal_handler", "cuda/noop",
           "cuda/partial_write", "cuda/skip_repeat", "cuda/count_calls")),
    Guard("tolerance", "compare", (8, 10, 11, 12),
          "an element outside atol + rtol * |ref|, or a NaN/inf where the reference has none",
          ("cpu/bf16_internal", "cpu/pointer_cache", "cpu/shape_special", "cpu/size_threshold",
           "cpu/bench_shape_special", "cpu/poison_probe", "cpu/alignment_probe",
           "cpu/recompute_rope_tables",
           "cuda/low_precision", "cuda/poison_probe",
           "cuda/shape_special", _REDTEAM + "test_hidden_case_names_stay_secret")),
    Guard("inputs-unchanged", "compare", (3,),
          "an input that is not bit-identical to its pristine copy after a run",
          ("cpu/mutate_input", "cuda/mutate_input")),
    Guard("invariants", "compare", (12,),
          "outputs inside the tolerance that break a property the oracle's check() states",
          ("cpu/negative_underflow",)),
    Guard("late-writes", "launch", (4, 5),
          "outputs or staged buffers that change after the launch returned",
          ("cpu/raw_clone", _RT_CPU + "test_a_background_write_after_the_reply_is_a_late_write",
           _JUDGE + "test_a_late_write_rejects_the_case")),
    Guard("threads", "launch", (5,),
          "a thread of the artifact's process not idle (parked on a futex with no timeout) after a "
          "launch, or using CPU after it returned (OpenMP's idle pool is parked)",
          ("cpu/raw_clone", "cpu/sandbox_sleeping_thread",
           _RT_CPU + "test_a_thread_that_sleeps_after_the_call_is_not_idle")),
    Guard("sandbox", "launch", (4, 5, 7, 9),
          "a host artifact's process making a system call outside its seccomp allowlist (a signal "
          "to another process, a new process, a signal handler, a file opened for writing, ...): "
          "the kernel kills it, the judge lives on",
          ("cpu/sandbox_signal_judge", "cpu/sandbox_signal_handler", "cpu/sandbox_process",
           "cpu/forge_result_at_load", "cpu/read_job",
           _RT_CPU + "test_a_call_outside_the_allowlist_kills_only_the_artifacts_process")),
    Guard("native-code", "load", (5, 7, 9),
          "a host artifact importing file/process/thread/loader/Python C API symbols, with a "
          "writable+executable segment or stack, or raw system call instructions",
          ("cpu/pyapi_import", "cpu/thrd_create",
           _JUDGE + "test_host_artifacts_that_could_escape_are_not_loaded")),
    Guard("python-api", "launch", (6, 7, 9),
          "Python audit events raised while a host artifact loads or runs",
          ("cpu/pyapi_torch_fallback",
           _RT_CPU + "test_reaching_the_interpreter_trips_the_python_api_guard",
           _JUDGE + "test_python_run_during_a_launch_is_refused")),
    Guard("harness-integrity", "launch", (7,),
          "clock, judge or runtime functions replaced while an in-process artifact ran",
          (_JUDGE + "test_replacing_the_judges_functions_is_refused",)),
    Guard("result-integrity", "result", (7,),
          "a result without this run's MAC, or a reply on a host artifact's control channel that "
          "the judge did not ask for",
          ("cpu/forge_result_at_load", _JUDGE + "test_result_is_accepted_only_with_this_runs_key",
           _RT_CPU + "test_a_forged_early_reply_is_caught")),
    Guard("crash", "result", (),
          "the child died or the device context faulted (the build goes on)",
          ("cuda/oob_write", "cpu/sandbox_signal_judge",
           _RT_CPU + "test_a_crash_ends_the_process_and_is_reported")),
    Guard("timeout", "result", (),
          "the child ran past the timeout and was killed with its process group",
          ("cuda/hang", _JUDGE + "test_a_hang_is_killed_at_the_timeout")),
    Guard("physical-floor", "timing", (14,),
          "a time below bytes / bandwidth or flops / peak",
          ("cuda/skip_repeat", _REDTEAM + "test_forged_timing_samples_are_refused")),
    Guard("timer", "timing", (7,),
          "no samples, a non-positive device time, or device time above host wall time",
          (_REDTEAM + "test_forged_timing_samples_are_refused",)),
    Guard("other-stream", "timing", (4,),
          "host wall time with a full device sync far above the timed region",
          (_REDTEAM + "test_forged_timing_samples_are_refused",)),
    Guard("degenerate-oracle", "oracle", (11,),
          "an oracle whose reference is constant or seed-independent on every case, or whose "
          "normal-distribution input is the same for every seed",
          ("cpu/degenerate_oracle", "cpu/fixed_input_oracle",
           _REDTEAM + "test_lint_oracle_flags_the_degenerate_oracle_only")),
    Guard("oracle", "oracle", (),
          "an oracle that broke its own contract (blamed on the oracle, not the candidate)",
          (_JUDGE + "test_an_oracle_that_breaks_its_contract_is_blamed",)),
)}


def registered(name: str) -> str:
    """`name`, if it is a registered guard; otherwise a ValueError (a typo or an unlisted guard
    must not reach a verdict)."""
    if name not in GUARDS:
        raise ValueError(f"{name!r} is not a registered guard (regen/judge/guards.py)")
    return name


class Rejected(Exception):
    """A guard failed: the candidate is rejected with this guard's name and a reason."""

    def __init__(self, guard: str, reason: str):
        super().__init__(reason)
        self.guard, self.reason = registered(guard), reason

    @property
    def rejection(self):
        from .results import Rejection

        return Rejection(self.guard, self.reason)
