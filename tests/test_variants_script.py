"""benchmarks/variants.py, the script a device run uses to time candidates side by side, runs
end to end here on the cpu column: the committed entry and a candidate folder are verified and
timed, and a wrong candidate is reported as failed rather than timed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
