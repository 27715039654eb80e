"""Red team: one cheating implementation per loophole of docs/reward-hacks.md that applies to a
column, each of which must be rejected by the guard its redteam.yaml names (the Outcome's reason
ends with `[guard: NAME]`). See docs/oracle.md for the table and regen/judge/guards.py for the
registry (tests/test_guards.py keeps the three in step).

CPU cases (tests/redteam/cpu/*) run here, through the real pipeline (build.evaluate: parse,
compile, static checks, child-process verification). CUDA cases (tests/redteam/cuda/*) are
compiled with NVRTC for sm_90a and bound against every case here; running them needs the H200:

    pytest -m gpu tests/test_redteam.py -v
"""

from __future__ import annotations

import functools
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from regen.build import Context, evaluate
from regen.compile import toolchain_problem
from regen.project import Project
from regen.recipe import bind, parse_recipe
from regen.spec import Case
from regen.judge import Settings, hidden_variants, judge_timing, lint_oracle
from regen.store import Store

ROOT = Path(__file__).resolve().parent.parent
REDTEAM = ROOT / "tests" / "redteam"
_INCLUDE_LINE = re.compile(r'^#include "([a-z_]+\.cuh?|[a-z_]+\.h)"[ \t]*$', re.M)

# Small correctness cases (the CPU is slow and shared): odd sizes, each dtype, a long-ish row.
DEFAULT_CASES = [
    {"M": 3, "N": 7, "dtype": "float32"},
    {"M": 17, "N": 1000, "dtype": "float32"},
    {"M": 37, "N": 128, "dtype": "bfloat16"},
    {"M": 5, "N": 4099, "dtype": "float16"},
]
# A benchmark case small enough for a shared 2-core machine; its floor is 1.2 ms at 20 GB/s.
BENCH_CASE = {"M": 768, "N": 4096, "dtype": "float32", "bench": True}


def artifact_source(path: Path, done: set | None = None) -> str:
    """The artifact's one source file, with the shared red-team headers (#include "x.h" naming a
    file of the column's _include folder) inlined once each, so what is compiled is one
    self-contained source, as a generated artifact is."""
    done = set() if done is None else done
    include = path.parent if path.parent.name == "_include" else path.parent.parent / "_include"

    def inline(m):
        name = m.group(1)
        if not (include / name).exists():
            return m.group(0)
        if name in done:
            return f"// {name}: inlined above"
        done.add(name)
        return artifact_source(include / name, done)

    return _INCLUDE_LINE.sub(inline, path.read_text())


def _dirs(column: str) -> list[Path]:
    base = REDTEAM / column
    return sorted(d for d in base.iterdir() if (d / "redteam.yaml").exists()) if base.is_dir() else []


def meta(d: Path) -> dict:
    return yaml.safe_load((d / "redteam.yaml").read_text())


@functools.lru_cache(maxsize=None)
def host_confinement() -> str:
    """What regen/runtimes/host_exec.py reports about its seccomp filter on this machine."""
    ours, theirs = socket.socketpair()
    exe = ROOT / "regen" / "runtimes" / "host_exec.py"
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(exe), str(theirs.fileno()), "-1"],
                            pass_fds=(theirs.fileno(),))
    theirs.close()
    hello = ours.makefile("rb").readline().decode().strip()
    ours.close()
    proc.wait(timeout=10)
    return hello.removeprefix("hello ")


def committed(name: str):
    """The committed implementation `K@T` (the live cache entry of kernel K on target T)."""
    kernel, _, target = name.partition("@")
    entry = Store(ROOT / "cache").current(kernel, target)
    assert entry is not None, f"no committed implementation {name} in cache/"
    return entry


def project_for(d: Path, m: dict, tmp_path: Path) -> tuple[Project, str]:
    """The project a red-team artifact is verified in: the repository's, or for a red-team spec
    and oracle of its own, a temporary project holding them (targets copied from the repo)."""
    if "spec" not in m:
        return Project(ROOT), m.get("kernel", "softmax")
    proj = tmp_path / "proj"
    (proj / "specs").mkdir(parents=True)
    (proj / "oracles").mkdir()
    shutil.copytree(ROOT / "targets", proj / "targets")
    name = Path(m["spec"]).stem
    shutil.copy(d / m["spec"], proj / "specs" / f"{name}.yaml")
    shutil.copy(d / m["oracle"], proj / "oracles" / f"{name}.py")
    return Project(proj), name


def cases_for(m: dict, spec, gpu: bool) -> list[Case]:
    if "cases" in m:
        cases = [Case.model_validate(c) for c in m["cases"]]
    elif spec.name == "softmax" and not gpu:
        cases = [Case.model_validate(c) for c in DEFAULT_CASES]
    else:
        cases = [c for c in spec.cases if not c.bench]
    if m.get("bench") or m.get("bench_checked"):
        cases += [c for c in spec.cases if c.bench] if gpu else [Case.model_validate(BENCH_CASE)]
    return cases


def settings_for(m: dict, gpu: bool = False) -> Settings:
    """The red team's settings: hidden variants and the bench case's check always on, as in
    `regen verify`; `bench: true` times it too (`iters` timed iterations, randomised upwards)."""
    return Settings(seeds=2, bench=bool(m.get("bench")), baselines=(),
                    iters=m.get("iters", 5 if not gpu else 20), warmup=2,
                    timeout_s=m.get("timeout_s", 600))


def run_redteam(d: Path, target_name: str, tmp_path: Path, source_name: str):
    m = meta(d)
    project, kernel = project_for(d, m, tmp_path)
    spec, target = project.spec(kernel), project.target(target_name)
    gpu = target.vendor != "host"
    # a control may name a committed implementation instead (`artifact: K@T`): an honest kernel
    # held to the spec's profile expectations must also be a fast one
    if "artifact" in m:
        entry = committed(m["artifact"])
        source, recipe = entry.source(), entry.recipe()
    else:
        source, recipe = artifact_source(d / source_name), (d / "launch.yaml").read_text()
    ctx = Context(project=project, store=None)
    ev = evaluate(
        ctx, spec, target, source, recipe, verify_here=True,
        settings=settings_for(m, gpu), cases=cases_for(m, spec, gpu))
    return m, ev.stage, ev.ok, ev.feedback, ev.outcome


def assert_verdict(m: dict, stage: str, ok: bool, feedback: str) -> None:
    if m["expect"] == "pass":
        assert ok, f"an attack that cannot work should leave an honest artifact: {feedback}"
    elif m["expect"] == "compile-reject":
        assert (stage, ok) == ("compile", False), f"expected a compile rejection, got {stage}: {feedback}"
        assert m["log"] in feedback
    else:
        assert not ok, f"the cheat passed: {feedback}"
        guard = m["guard"]
        if "unconfined_guard" in m and host_confinement() != "seccomp":
            guard = m["unconfined_guard"]  # what catches it where the host filter cannot be set
        named = {guard, m.get("or_guard")} - {None}   # or_guard: a run's random draws decide
        assert any(f"[guard: {g}]" in feedback for g in named), feedback
        if m.get("also_guard"):
            assert f"[guard: {m['also_guard']}]" in feedback, feedback


# -- CPU column ------------------------------------------------------------------------------------
CPU = _dirs("cpu")


@pytest.mark.parametrize("d", CPU, ids=[d.name for d in CPU])
def test_cpu_cheat_is_rejected(d, tmp_path):
    m, stage, ok, feedback, _ = run_redteam(d, "cpu", tmp_path, "kernel.cpp")
    assert_verdict(m, stage, ok, feedback)


def test_cpu_honest_softmax_passes_the_same_checks(tmp_path):
    """The control: the hand-written softmax passes every guard the cheats trip (hidden cases and
    the timed path included), so the rejections above are about the cheats."""
    entry = committed("softmax@cpu")
    m = {"expect": "pass", "bench": True, "hidden": True}
    project = Project(ROOT)
    spec = project.spec("softmax")
    ev = evaluate(
        Context(project=project, store=None), spec, project.target("cpu"),
        entry.source(), entry.recipe(), verify_here=True,
        settings=settings_for(m), cases=cases_for(m, spec, gpu=False))
    assert ev.ok, ev.feedback
    assert any(c["case"].startswith("hidden ") for c in ev.outcome.cases)
    assert ev.outcome.bench and ev.outcome.bench[0]["ok"]


def test_hidden_case_names_stay_secret(monkeypatch, tmp_path):
    """With REGEN_SECRET_SEED the shape specialiser still fails, and the failing hidden case is
    named by the listed case it varies, not by its sizes."""
    monkeypatch.setenv("REGEN_SECRET_SEED", "red-team-secret")
    d = REDTEAM / "cpu" / "shape_special"
    m, stage, ok, feedback, outcome = run_redteam(d, "cpu", tmp_path, "kernel.cpp")
    assert not ok and "[guard: tolerance]" in feedback
    assert "hidden variant of" in feedback
    hidden = [c for c in outcome.cases if c["case"].startswith("hidden")]
    assert hidden and all(c["seeds"] == "secret" for c in outcome.cases)
    project = Project(ROOT)
    listed = [Case.model_validate(c) for c in m["cases"]]
    for v in hidden_variants(project.spec("softmax"), listed, settings_for(m)):
        assert f"M{v.sizes['M']}xN{v.sizes['N']}" not in feedback


def test_lint_oracle_flags_the_degenerate_oracle_only(tmp_path):
    d = REDTEAM / "cpu" / "degenerate_oracle"
    project, name = project_for(d, meta(d), tmp_path)
    problems = lint_oracle(project.spec(name), project.oracle_path(name))
    assert problems and "degenerate" in problems[0]
    softmax = Project(ROOT)
    assert lint_oracle(softmax.spec("softmax"), softmax.oracle_path("softmax")) == []


@pytest.mark.parametrize("target,dev,wall,guard", [
    ("cpu", [1e-3] * 5, [1e-4] * 5, "timer"),           # device time above host wall time: forged
    ("cpu", [0.0] * 5, [1e-3] * 5, "timer"),             # a clock that stopped
    ("h200", [1e-7] * 5, [1.1e-7] * 5, "physical-floor"),  # faster than HBM can move the bytes
    ("cpu", [1e-4] * 5, [3e-2] * 5, "other-stream"),     # wall far above the timed region
])
def test_forged_timing_samples_are_refused(target, dev, wall, guard):
    """Samples that come back from the child are judged in the parent: a child that forged them
    (or a kernel that hid its work) is caught by the timing guards."""
    project = Project(ROOT)
    spec = project.spec("softmax")
    t = judge_timing(spec, project.target(target), Case.model_validate(BENCH_CASE),
                     {"device_s": dev, "wall_s": wall})
    assert t["ok"] is False and t["guard"] == guard, t


def test_the_host_column_has_no_floor_guard_to_fail_honest_code():
    """The cpu target's bandwidth is an estimate a cache-resident working set beats, not an upper
    bound: a host time far below it is reported (floor_fraction above 1), never rejected."""
    project = Project(ROOT)
    spec, target = project.spec("softmax"), project.target("cpu")
    t = judge_timing(spec, target, Case.model_validate(BENCH_CASE),
                     {"device_s": [1e-5] * 5, "wall_s": [1.1e-5] * 5})
    assert t["ok"] is True and t["floor_fraction"] > 1 and t["floor_guard"].startswith("off"), t


# -- CUDA column (h200) ----------------------------------------------------------------------------
CUDA = _dirs("cuda")


def _h200():
    project = Project(ROOT)
    return project, project.spec("softmax"), project.target("h200")


@pytest.mark.parametrize("d", CUDA, ids=[d.name for d in CUDA])
def test_cuda_redteam_compiles_and_binds(d, tmp_path):
    """Every CUDA red-team kernel compiles with NVRTC for sm_90a (or is refused by the compiler
    when that is its expected verdict) and its recipe binds for every case the device run uses."""
    project, spec, target = _h200()
    problem = toolchain_problem(target)
    if problem:
        pytest.skip(problem)
    from regen.compile import compile_source

    m = meta(d)
    result = compile_source(artifact_source(d / "kernel.cu"), target).result
    if m["expect"] == "compile-reject":
        assert not result.ok and m["log"] in result.log
        return
    assert result.ok, result.log[-3000:]
    recipe = parse_recipe((d / "launch.yaml").read_text())
    cases = cases_for(m, spec, gpu=True)
    cases += hidden_variants(spec, cases, Settings(hidden_cases=True))
    for case in cases:
        env = spec.case_env(case)
        names = {t.name for t in spec.signature.tensors} | {w.name for w in recipe.workspace}
        for launch in bind(recipe, env, names, env["T"]):
            assert launch.kernel in result.resources, (launch.kernel, sorted(result.resources))


@pytest.mark.gpu
@pytest.mark.parametrize("d", CUDA, ids=[d.name for d in CUDA])
def test_cuda_cheat_is_rejected(d, tmp_path):
    m, stage, ok, feedback, _ = run_redteam(d, "h200", tmp_path, "kernel.cu")
    assert_verdict(m, stage, ok, feedback)


@pytest.mark.gpu
def test_cuda_build_goes_on_after_a_fault(tmp_path):
    """After an out-of-bounds write killed its child's context, the next verification (a fresh
    child) of the honest control kernel passes."""
    bad = run_redteam(REDTEAM / "cuda" / "oob_write", "h200", tmp_path, "kernel.cu")
    assert not bad[2] and "[guard: crash]" in bad[3]
    project, spec, target = _h200()
    d = REDTEAM / "cuda" / "honest"
    ev = evaluate(
        Context(project=project, store=None), spec, target, artifact_source(d / "kernel.cu"),
        (d / "launch.yaml").read_text(), verify_here=True, settings=Settings(seeds=1),
        cases=[Case.model_validate(c) for c in DEFAULT_CASES])
    assert ev.ok, ev.feedback
