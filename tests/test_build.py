"""regen/build.py executes what the planner decided: one Evaluation per candidate, records only for
what ran the oracle, waves in dependency and family order, and escalations back to the planner."""

from __future__ import annotations

import sys

import pytest

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff
from regen import plan as planning
from regen.build import Context, _waves, evaluate, record_for
from regen.judge import Settings
from regen.project import Project
from regen.store import Store


@pytest.fixture
def ctx(project) -> Context:
    p = Project(project)
    return Context(p, Store(p.cache_dir), settings=Settings(seeds=1))


def _eval(ctx, source=SCALE_CPP, recipe=SCALE_RECIPE, verify_here=False):
    spec, target = ctx.project.spec("scale"), ctx.project.target("cpu")
    return evaluate(ctx, spec, target, source, recipe, verify_here)


def test_a_bad_recipe_stops_at_parse(ctx):
    ev = _eval(ctx, recipe="launches: [{kernel: 3}]\n")
    assert (ev.stage, ev.ok, ev.compiled) == ("parse", False, None)
    assert "launch.yaml is invalid" in ev.feedback and ev.result(None, "failed", "x").level == []


def test_a_compile_error_stops_at_compile_with_the_log(ctx):
    ev = _eval(ctx, source=SCALE_CPP.replace("alpha * x[i]", "alpha * undeclared[i]"))
    assert (ev.stage, ev.ok) == ("compile", False)
    assert "undeclared" in ev.feedback and ev.compile_summary()["ok"] is False


def test_without_hardware_a_candidate_is_compiled_and_checked_but_not_verified(ctx):
    ev = _eval(ctx)
    assert (ev.stage, ev.ok, ev.outcome) == ("compile", True, None)
    assert ev.levels()[0].startswith("compiled")
    assert record_for(ctx, ctx.project.spec("scale"), ctx.project.target("cpu"), None, ev) is None


def test_verified_here_gives_an_outcome_and_a_record_of_this_run(ctx, project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    entry = ctx.store.current("scale", "cpu")
    ev = _eval(ctx, verify_here=True)
    assert (ev.stage, ev.ok) == ("verify", True) and ev.outcome.cases
    rec = record_for(ctx, ctx.project.spec("scale"), ctx.project.target("cpu"), entry, ev)
    assert rec["entry"] == entry.id and rec["ok"] and rec["compile"]["binary"] == \
        ev.compiled.binary_digest
    assert rec["verify"]["binary"] == ev.compiled.binary_digest


def test_waves_put_components_first_and_adopters_after_the_generating_member(tmp_path):
    root = make_project(tmp_path / "proj")
    spec = (root / "specs" / "scale.yaml").read_text()
    (root / "specs" / "user.yaml").write_text(spec.replace("name: scale", "name: user")
                                              + "components: [scale]\n")
    (root / "oracles" / "user.py").write_text((root / "oracles" / "scale.py").read_text())
    project = Project(root)
    ctx = Context(project, Store(project.cache_dir))
    nodes = [planning.Node("user", "cpu", planning.GENERATE),
             planning.Node("scale", "cpu", planning.ADOPT, leader="cpu0"),
             planning.Node("scale", "cpu", planning.GENERATE)]
    waves = [[nodes[i].kernel + ":" + nodes[i].action for i in w] for w in _waves(ctx, nodes)]
    assert waves == [["scale:generate"], ["scale:adopt"], ["user:generate"]]


def test_a_failed_reverification_goes_back_to_the_planner_and_regenerates(project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    # the oracle now wants alpha * x + 1: the cached artifact fails re-verification
    oracle = project / "oracles" / "scale.py"
    oracle.write_text(oracle.read_text().replace('* case.params["alpha"]',
                                                 '* case.params["alpha"] + 1.0'))
    assert regen(project, "status").stdout.split()[1] == planning.REVERIFY
    fixed = SCALE_CPP.replace("alpha * x[i]", "alpha * x[i] + 1.0f")
    seen = tmp_path / "feedback.txt"
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import os, sys\nfrom pathlib import Path\nprompt = sys.stdin.read()\n"
        f"Path({str(seen)!r}).write_text(os.environ['REGEN_PURPOSE'] + '\\n' + prompt)\n"
        "task = Path(os.environ['REGEN_TASK_DIR'])\n"
        f"(task / 'kernel.cpp').write_text({fixed!r})\n"
        f"(task / 'launch.yaml').write_text({SCALE_RECIPE!r})\n")
    out = regen(project, "build", "--json", "--generator", f"command:{sys.executable} {agent}")
    assert out.returncode == 0, out.stdout + out.stderr
    text = seen.read_text()
    assert text.startswith("repair")                     # from the cached artifact,
    assert "[guard: tolerance]" in text                  # fed the re-verification's failure
    assert Store(project / "cache").current("scale", "cpu").source() == fixed
    assert regen(project, "status").stdout.split()[1] == planning.UP_TO_DATE


def test_build_reports_each_stage_to_the_progress_display(ctx, project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    seen = []

    class Recorder:
        def stage(self, label, name):
            seen.append((label, name))

        def __call__(self, result, i, n):
            seen.append((result.node.label, "done"))

    from regen.build import build

    ctx.progress = Recorder()
    nodes = planning.plan(ctx.project, ctx.store, intent="verify")
    results = build(ctx, nodes)
    assert [r.status for r in results] == ["ok"]
    assert seen == [("scale@cpu", "compile"), ("scale@cpu", "verify"), ("scale@cpu", "store"),
                    ("scale@cpu", "done")]
