"""The plan is exact: for random sequences of edits, the set of (kernel, target, action) equals the
expected set — nothing stale, nothing extra. The cache is made by real accepts (real compiles and
real verification in a child process), once per module."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff
from regen import plan as planning
from regen.project import Project
from regen.store import Store

KERNELS = ("scale", "scale2")
TARGETS = ("cpu", "cpu2")
SEVERITY = {planning.UP_TO_DATE: 0, planning.RECOMPILE: 1, planning.REVERIFY: 2,
            planning.REGENERATE: 3}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("plan") / "proj", targets=TARGETS)
    spec = (root / "specs" / "scale.yaml").read_text()
    (root / "specs" / "scale2.yaml").write_text(
        spec.replace("name: scale", "name: scale2") + "components: [scale]\n")
    (root / "oracles" / "scale2.py").write_text((root / "oracles" / "scale.py").read_text())
    for k in KERNELS:
        for t in TARGETS:
            src = SCALE_CPP.replace("scale_f32", f"{k}_f32")
            rec = SCALE_RECIPE.replace("scale_{dtype}", f"{k}_{{dtype}}")
            folder = write_handoff(root / "handoffs" / f"{k}@{t}", k, t, src, rec, root)
            regen(root, "accept", str(folder), check=True)
    return root


def _plan(root: Path) -> dict:
    project = Project(root)
    return {(n.kernel, n.target): n for n in planning.plan(project, Store(project.cache_dir))}


def test_fresh_cache_is_up_to_date(built):
    nodes = _plan(built)
    assert {k: n.action for k, n in nodes.items()} == {
        (k, t): planning.UP_TO_DATE for k in KERNELS for t in TARGETS}


# -- edits: each returns {(kernel, target): action} it implies ---------------------------------
def _edit(path: Path, old: str, new: str):
    """Replace the first match of a regular expression (edits may repeat on one file)."""
    import re

    text = path.read_text()
    assert re.search(old, text), (path, old)
    path.write_text(re.sub(old, lambda m: new, text, count=1))


def intent(root, k, rnd):
    _edit(root / "specs" / f"{k}.yaml", r"computed in float32( \([0-9.]+\))?\.",
          f"computed in float32 ({rnd.random():.6f}).")
    users = [u for u in KERNELS if u != k and k == "scale"]  # scale2 uses scale
    return {**{(k, t): planning.REGENERATE for t in TARGETS},
            **{(u, t): planning.REGENERATE for u in users for t in TARGETS}}


def comment(root, k, rnd):
    p = root / "specs" / f"{k}.yaml"
    p.write_text(f"# reviewed {rnd.random()}\n" + p.read_text().replace("\nintent:", "\n# the prompt\nintent:"))
    return {}


def whitespace(root, k, rnd):
    _edit(root / "specs" / f"{k}.yaml", r"y = alpha\s+\*\s+x\s+elementwise",
          rnd.choice(["y = alpha  *  x\n  elementwise", "y   = alpha * x elementwise"]))
    return {}


def tolerance(root, k, rnd):
    p = root / "specs" / f"{k}.yaml"
    text = p.read_text()
    p.write_text(text.replace("rtol: 1.0e-6}", f"rtol: {rnd.choice([2, 3, 4, 5])}.0e-6}}", 1)
                 if "rtol: 1.0e-6}" in text else text.replace("rtol: ", "rtol: 1", 1))
    return {(k, t): planning.REVERIFY for t in TARGETS}


def oracle_code(root, k, rnd):
    p = root / "oracles" / f"{k}.py"
    p.write_text(p.read_text() + f"\n_SALT = {rnd.randint(0, 10**9)}\n")
    return {(k, t): planning.REVERIFY for t in TARGETS}


def oracle_comment(root, k, rnd):
    p = root / "oracles" / f"{k}.py"
    p.write_text(p.read_text().replace("import torch", f"import torch  # {rnd.random()}", 1))
    return {}


def target_peak(root, t, rnd):
    p = root / "targets" / f"{t}.yaml"
    text = p.read_text()
    import re
    p.write_text(re.sub(r"value: [0-9.e+]+", f"value: {rnd.randint(1, 9)}.{rnd.randint(0, 99)}e10", text, 1))
    return {(k, t): planning.REVERIFY for k in KERNELS}


def target_flags(root, t, rnd):
    p = root / "targets" / f"{t}.yaml"
    text = p.read_text()
    p.write_text(text.replace('"-fPIC"', f'"-fPIC", "-DREGEN_TEST_{rnd.randint(0, 10**6)}"', 1))
    return {(k, t): planning.RECOMPILE for k in KERNELS}


def target_notes(root, t, rnd):
    _edit(root / "targets" / f"{t}.yaml", r"OpenMP( \([0-9.]+\))? is available;",
          f"OpenMP ({rnd.random():.4f}) is available;")
    return {(k, t): planning.REGENERATE for k in KERNELS}


SPEC_EDITS = (intent, comment, whitespace, tolerance, oracle_code, oracle_comment)
TARGET_EDITS = (target_peak, target_flags, target_notes)


@pytest.mark.parametrize("seed", range(40))
def test_random_edit_sequences_plan_exactly(built, tmp_path, seed):
    rnd = random.Random(seed)
    root = tmp_path / "proj"
    shutil.copytree(built, root)
    expected: dict = {}
    applied = []
    for _ in range(rnd.randint(1, 4)):
        if rnd.random() < 0.6:
            edit, subject = rnd.choice(SPEC_EDITS), rnd.choice(KERNELS)
        else:
            edit, subject = rnd.choice(TARGET_EDITS), rnd.choice(TARGETS)
        applied.append(f"{edit.__name__}({subject})")
        for node, action in edit(root, subject, rnd).items():
            if SEVERITY[action] > SEVERITY[expected.get(node, planning.UP_TO_DATE)]:
                expected[node] = action
    got = {k: n.action for k, n in _plan(root).items()}
    want = {(k, t): expected.get((k, t), planning.UP_TO_DATE) for k in KERNELS for t in TARGETS}
    assert got == want, f"edits: {applied}"


def test_reasons_name_the_component(built, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(built, root)
    intent(root, "scale", random.Random(0))
    tolerance(root, "scale2", random.Random(0))
    nodes = _plan(root)
    assert nodes[("scale", "cpu")].reasons == ["spec.intent changed (2 words)"]
    assert nodes[("scale2", "cpu")].reasons == ["component scale will be regenerated"]
    shutil.rmtree(root)
    shutil.copytree(built, root)
    tolerance(root, "scale", random.Random(0))
    assert _plan(root)[("scale", "cpu")].reasons == ["tolerance changed (float32)"]


def test_oracle_change_reverifies_and_passes_without_regenerating(built, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(built, root)
    oracle_code(root, "scale", random.Random(1))
    proc = regen(root, "build", "scale", "--target", "cpu", "--generator", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verified" in proc.stdout
    assert _plan(root)[("scale", "cpu")].action == planning.UP_TO_DATE


def test_oracle_change_that_now_fails_needs_regeneration(built, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(built, root)
    _edit(root / "oracles" / "scale.py", r'\* case\.params\["alpha"\]', '* case.params["alpha"] * 1.5')
    proc = regen(root, "build", "scale", "--target", "cpu", "--generator", "none")
    assert proc.returncode == 1
    assert "verify failed" in proc.stdout and "outside the bound" in proc.stdout
    assert _plan(root)[("scale", "cpu")].action == planning.FAILED


def test_new_toolchain_with_an_identical_binary_keeps_the_record(built, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(built, root)
    # a define nothing reads: a different toolchain identity, the same machine code (a define no
    # other run used: a compile with it already in the local cache would make this up to date)
    import uuid

    p = root / "targets" / "cpu.yaml"
    p.write_text(p.read_text().replace('"-fPIC"', f'"-fPIC", "-DREGEN_TEST_{uuid.uuid4().hex}"', 1))
    assert _plan(root)[("scale", "cpu")].action == planning.RECOMPILE
    proc = regen(root, "build", "scale", "--target", "cpu", "--generator", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical binary" in proc.stdout
    status = regen(root, "status", "scale", "--target", "cpu", check=True).stdout  # same local cache
    assert "scale@cpu  up-to-date" in status, status


def test_verify_and_bench_act_on_the_named_kernels_alone(built):
    """Building scale2 brings its component scale along; verifying or timing scale2 does not:
    a kernel's record depends on its own artifact, not on its components' records."""
    project, store = Project(built), Store(built / "cache")
    build = {n.kernel for n in planning.plan(project, store, ["scale2"], ["cpu"])}
    assert build == {"scale", "scale2"}
    for intent in ("verify", "bench"):
        nodes = planning.plan(project, store, ["scale2"], ["cpu"], intent=intent)
        assert [(n.kernel, n.target) for n in nodes] == [("scale2", "cpu")], intent
