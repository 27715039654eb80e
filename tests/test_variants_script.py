"""benchmarks/variants.py, the script a device run uses to time candidates side by side, runs
end to end here on the cpu column: the committed entry and a candidate folder are verified and
timed, and a wrong candidate is reported as failed rather than timed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "variants.py"


def test_variants_script_times_the_committed_entry_and_candidates_and_fails_a_wrong_one(tmp_path):
    root = make_project(tmp_path / "proj")
    spec = root / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("{M: 3, N: 130}", "{M: 3, N: 130, bench: true}"))
    regen(root, "accept", str(write_handoff(root / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE,
                                            root)), check=True)
    good = write_handoff(root / "good", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, root)
    wrong = write_handoff(root / "wrong", "scale", "cpu",
                          SCALE_CPP.replace("alpha * x[i]", "alpha * x[i] + 1.0f"), SCALE_RECIPE, root)
    env = dict(os.environ, REGEN_LOCAL_CACHE=str(root / ".local-cache"))
    proc = subprocess.run([sys.executable, str(SCRIPT), "scale", "--target", "cpu", "--iters", "2",
                           "committed", str(good), str(wrong)],
                          cwd=root, capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    timed = [line for line in out.splitlines() if " us" in line]
    assert any(line.startswith("committed: ") for line in timed), out
    assert any(line.startswith(f"{good}: ") for line in timed), out
    assert not any(line.startswith(f"{wrong}: ") for line in timed), out
    assert f"{wrong}: " in out and "FAILED" in out, out


def test_variants_script_refuses_a_spec_with_nothing_to_time(tmp_path):
    root = make_project(tmp_path / "proj")
    proc = subprocess.run([sys.executable, str(SCRIPT), "scale", "--target", "cpu", "committed"],
                          cwd=root, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, REGEN_LOCAL_CACHE=str(root / ".local-cache")))
    assert proc.returncode == 2 and "no bench case for cpu" in proc.stdout, proc.stdout + proc.stderr


def test_variants_script_times_the_cases_given_with_case_instead_of_the_bench_cases(tmp_path):
    """--case (the syntax of `regen bench --case`, parsed by the same code) names the cases to time:
    a spec with no benchmark case at all is timed on exactly the two shapes given, for the committed
    entry and a candidate; a case naming no symbol of the spec is refused (exit 2)."""
    root = make_project(tmp_path / "proj")
    regen(root, "accept", str(write_handoff(root / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE,
                                            root)), check=True)
    good = write_handoff(root / "good", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, root)
    env = dict(os.environ, REGEN_LOCAL_CACHE=str(root / ".local-cache"))
    proc = subprocess.run([sys.executable, str(SCRIPT), "scale", "--target", "cpu", "--iters", "2",
                           "--case", "M=4,N=33", "--case", "M=1,N=7,dtype=float32",
                           "committed", str(good)],
                          cwd=root, capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    timed = [line for line in out.splitlines() if " us" in line]
    for who in ("committed", str(good)):
        mine = [line for line in timed if line.startswith(f"{who}: ")]
        assert len(mine) == 2, out
        assert any("M4xN33" in line for line in mine) and any("M1xN7" in line for line in mine), out
    bad = subprocess.run([sys.executable, str(SCRIPT), "scale", "--target", "cpu",
                          "--case", "Q=3", "committed"],
                         cwd=root, capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and "Q" in bad.stdout and " us" not in bad.stdout, \
        bad.stdout + bad.stderr


def test_a_variant_folder_with_launch_yaml_alone_reuses_the_committed_source(tmp_path):
    from regen import variant
    from regen.errors import InputError
    from regen.store import Store

    root = Path(__file__).resolve().parent.parent
    store = Store(root / "cache")
    entry = store.current("softmax", "h200")
    (tmp_path / "launch_only").mkdir()
    (tmp_path / "launch_only" / "launch.yaml").write_text("launches: []\n")
    name, source, recipe = variant.read(tmp_path / "launch_only", store, "softmax", "h200")
    assert (name, source, recipe) == (entry.source_name, entry.source(), "launches: []\n")
    (tmp_path / "launch_only" / "kernel.cu").write_text("// its own source\n")
    assert variant.read(tmp_path / "launch_only", store, "softmax", "h200")[1] == "// its own source\n"
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no launch.yaml") as exc:
        variant.read(tmp_path / "empty", store, "softmax", "h200")
    assert str(tmp_path / "empty") in str(exc.value)
    (tmp_path / "empty" / "launch.yaml").write_text("launches: []\n")
    with pytest.raises(InputError, match="no committed implementation of attention@a100"):
        variant.read(tmp_path / "empty", store, "attention", "a100")
