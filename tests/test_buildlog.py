"""A no-op build answers from the build log; any input change makes it a real build again."""

from __future__ import annotations

from conftest import SCALE_CPP, SCALE_RECIPE, regen, write_handoff


def test_noop_build_is_answered_from_the_log_until_an_input_changes(project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    env = {"REGEN_LOCAL_CACHE": str(tmp_path / "local")}
    first = regen(project, "build", "--verbose", env=env, check=True).stdout
    assert "scale@cpu  ok" in first and "compiled in" in first
    # a real rebuild would say "compiled (cached)"; the log repeats the first build's report
    third = regen(project, "build", "--verbose", env=env, check=True).stdout
    assert third == first
    # the default output is logged apart: one line per node, no compile details
    plain = regen(project, "build", env=env, check=True).stdout
    assert "scale@cpu  ok" in plain and "compiled" not in plain

    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("rtol: 1.0e-6}", "rtol: 2.0e-6}"))
    fourth = regen(project, "build", "--verbose", env=env, check=True).stdout
    assert "verified" in fourth and fourth != third  # the tolerance edit re-verified

    spec.write_text(spec.read_text().replace("computed in float32", "computed in float64"))
    fifth = regen(project, "build", "--generator", "none", env=env)
    assert fifth.returncode == 1 and "needs regenerate" in fifth.stdout
    sixth = regen(project, "build", "--generator", "none", env=env)
    assert sixth.returncode == 1  # a failed build is never answered from the log
