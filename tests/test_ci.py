"""CI: JUnit XML, step summary and annotations from a real `regen verify`; `regen check` and
`regen build --locked` on stale entries; seeds never written in secret-seed mode; cache/ marked as
generated. Projects are real: handoffs accepted through the CLI, compiled and verified in a child."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import SCALE_CPP, SCALE_ORACLE, SCALE_RECIPE, SCALE_SPEC, make_project, regen, \
    write_handoff
from regen import ci

# `twice` is accepted with small cases (and their hidden variants); rows of exactly 1000 elements
# lose everything past the 512th, which the case added later (4 x 1000) exposes.
TWICE_SPEC = SCALE_SPEC.replace("name: scale", "name: twice").replace(
    "  params:\n    - {name: alpha, type: float, default: 2.0}\n", "")
TWICE_ORACLE = SCALE_ORACLE.replace('case.params["alpha"]', "2.0")
TWICE_CPP = """\
#include <cstdint>
extern "C" void twice_f32(const float* x, float* y, int64_t M, int64_t N) {
  for (int64_t i = 0; i < M * N && (N != 1000 || i < 512); ++i) y[i] = 2.0f * x[i];
}
"""
TWICE_RECIPE = """\
launches:
  - kernel: twice_{dtype}
    args: [x, y, M, N]
"""
BIG_CASE = "  - {M: 4, N: 1000}\n"


@pytest.fixture(scope="module")
def accepted(tmp_path_factory) -> Path:
    """scale@cpu and twice@cpu accepted (compiled and verified here); cpu2 has no artifacts."""
    root = make_project(tmp_path_factory.mktemp("ci") / "proj", targets=("cpu", "cpu2"))
    (root / "specs" / "twice.yaml").write_text(TWICE_SPEC)
    (root / "oracles" / "twice.py").write_text(TWICE_ORACLE)
    for k, src, rec in (("scale", SCALE_CPP, SCALE_RECIPE), ("twice", TWICE_CPP, TWICE_RECIPE)):
        folder = write_handoff(root / "handoffs" / f"{k}@cpu", k, "cpu", src, rec, root)
        regen(root, "accept", str(folder), check=True)
    return root


@pytest.fixture
def project(accepted, tmp_path) -> Path:
    root = tmp_path / "proj"
    shutil.copytree(accepted, root)
    return root


def add_big_case(root: Path) -> None:
    spec = root / "specs" / "twice.yaml"
    text = spec.read_text()
    spec.write_text(text.replace("tolerance:", BIG_CASE.rstrip("\n") + "\ntolerance:", 1))


def test_junit_summary_and_annotations_from_a_run_with_one_failing_kernel(project, tmp_path):
    add_big_case(project)
    junit, summary = tmp_path / "out" / "junit.xml", tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    proc = regen(project, "verify", "--junit", str(junit), "--summary", str(summary),
                 env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": ""})
    assert proc.returncode == 1, proc.stdout + proc.stderr

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    every = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}
    hidden = {k for k in every if "hidden" in k[1]}     # the judge's hidden variants, always on
    assert hidden and all(every[k].find("failure") is None for k in hidden)
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == \
        (str(7 + len(hidden)), "1", "2")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"scale", "twice"}
    cases = {k: tc for k, tc in every.items() if k not in hidden}
    assert set(cases) == {
        ("scale", "cpu[M1xN1:float32]"), ("scale", "cpu[M3xN130:float32]"), ("scale", "cpu2"),
        ("twice", "cpu[M1xN1:float32]"), ("twice", "cpu[M3xN130:float32]"),
        ("twice", "cpu[M4xN1000:float32]"), ("twice", "cpu2")}
    failure = cases[("twice", "cpu[M4xN1000:float32]")].find("failure")
    assert failure is not None
    assert failure.get("type") == "poisoned-outputs"
    assert failure.get("message").startswith("y: 3488 of 4000 elements were never written")
    assert "failing seed: " in failure.text               # seeds are public outside secret mode
    for key, tc in cases.items():
        if key[1] != "cpu2" and key != ("twice", "cpu[M4xN1000:float32]"):
            assert tc.find("failure") is None and tc.find("skipped") is None, key
    skipped = cases[("scale", "cpu2")].find("skipped")
    assert skipped is not None and skipped.get("message").startswith("no artifact in cache")
    assert suites["twice"].get("failures") == "1" and suites["scale"].get("failures") == "0"

    md = summary.read_text()
    assert md.startswith("earlier step\n")                # appended, not overwritten
    assert "### regen verify: 1 passed, 1 failed, 2 not verified here" in md
    assert "| `twice` | cpu | ❌ failed |" in md and "| `scale` | cpu | ✅ passed |" in md
    assert "- `M4xN1000:float32`: y: 3488 of 4000 elements were never written" in md

    errors = [line for line in proc.stdout.splitlines() if line.startswith("::error")]
    assert len(errors) == 1
    assert errors[0].startswith("::error title=regen verify twice@cpu::case M4xN1000:float32: y: ")


def _derived_seeds(secret: str, n: int = 256) -> set[str]:
    # the derivation regen/judge/parent.py documents: sha256("<secret>:<i>"), first 4 bytes little-endian
    return {str(int.from_bytes(hashlib.sha256(f"{secret}:{i}".encode()).digest()[:4], "little"))
            for i in range(n)}


def test_secret_seed_mode_writes_no_seed_and_the_step_summary_is_found(project, tmp_path):
    add_big_case(project)
    secret = "correct-horse-battery"
    junit, summary = tmp_path / "junit.xml", tmp_path / "step-summary.md"
    proc = regen(project, "verify", "-t", "cpu", "--junit", str(junit),
                 env={"REGEN_SECRET_SEED": secret, "GITHUB_ACTIONS": "true",
                      "GITHUB_STEP_SUMMARY": str(summary)})   # no --summary: the step summary
    assert proc.returncode == 1
    assert "### regen verify: 1 passed, 1 failed, 0 not verified here" in summary.read_text()
    written = {"junit": junit.read_text(), "summary": summary.read_text(),
               "stdout": proc.stdout, "stderr": proc.stderr}
    for rec in (project / "cache").glob("*/cpu/records/*.json"):
        written[str(rec)] = rec.read_text()
    assert "poisoned-outputs" in written["junit"]         # the failure is reported ...
    assert "failing seed" not in written["junit"]         # ... without its seed
    seeds = _derived_seeds(secret)
    for name, text in written.items():
        assert secret not in text, name
        leaked = [s for s in seeds if s in text]
        assert not leaked, (name, leaked)


def test_locked_fails_on_a_stale_entry_and_passes_after_the_rebuild(project):
    spec = project / "specs" / "twice.yaml"
    spec.write_text(spec.read_text().replace("y = alpha * x", "y = 2 * x"))
    proc = regen(project, "build", "--locked", "-t", "cpu")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "twice@cpu" in proc.stdout and "--locked: needs regenerate (spec.intent changed" in proc.stdout
    proc = regen(project, "check", "-t", "cpu")
    assert proc.returncode == 3
    assert proc.stdout.splitlines()[0].startswith("twice@cpu: needs regenerate: spec.intent changed")
    assert "scale@cpu" not in proc.stdout

    folder = project / "handoffs" / "twice@cpu"           # the rebuild: a person is the generator
    regen(project, "handoff", "twice", "-t", "cpu", "--out", str(folder), check=True)
    regen(project, "accept", str(folder), check=True)
    proc = regen(project, "build", "--locked", "-t", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = regen(project, "check", "-t", "cpu")
    assert proc.returncode == 0, proc.stdout
    assert "all 2 cache entries match their specs (2 verified on hardware" in proc.stdout


def test_check_flags_records_made_against_an_old_tolerance(project):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("rtol: 1.0e-6", "rtol: 1.0e-5"))
    proc = regen(project, "check", "-t", "cpu", env={"GITHUB_ACTIONS": "true"})
    assert proc.returncode == 3
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("scale@cpu: needs re-verify: the record from ")
    assert lines[0].endswith("is stale: tolerance changed (float32)")
    assert any(line.startswith("::error title=regen check scale@cpu::needs re-verify")
               for line in lines)
    # --locked does not generate, but it re-verifies where the hardware is: the CPU is here
    proc = regen(project, "build", "--locked", "scale", "-t", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert regen(project, "check", "-t", "cpu").returncode == 0


def test_check_flags_a_committed_failure_and_a_missing_artifact(project):
    add_big_case(project)
    regen(project, "verify", "twice", "-t", "cpu",         # writes the failing record
          env={"GITHUB_STEP_SUMMARY": "", "GITHUB_ACTIONS": ""})
    proc = regen(project, "check", "--json")
    assert proc.returncode == 3
    import json

    stale = {f"{s['kernel']}@{s['target']}": s["problem"] for s in json.loads(proc.stdout)["stale"]}
    assert set(stale) == {"twice@cpu", "scale@cpu2", "twice@cpu2"}
    assert stale["twice@cpu"].startswith("failed verification on ")
    assert stale["scale@cpu2"] == "needs generate: no artifact in cache"


def test_cache_is_marked_generated(project):
    cache = project / "cache"
    assert (cache / "README.md").read_text().startswith("# cache/ — generated by regen, do not edit")
    assert "linguist-generated=true" in (cache / ".gitattributes").read_text()
    from regen.store import Store

    entry = Store(cache).current("scale", "cpu")
    source = Store(cache).object_path(entry.source_digest)   # stored exactly as compiled
    assert source.read_text() == entry.source()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    out = subprocess.run(["git", "check-attr", "linguist-generated", "--",
                          str(source.relative_to(project)), "specs/scale.yaml"], cwd=project,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"{source.relative_to(project)}: linguist-generated: true",
                   "specs/scale.yaml: linguist-generated: unspecified"]


def test_annotation_escaping():
    line = ci.annotation("regen check a@b, c: d", "50% done\nnext line", file="specs/a.yaml")
    assert line == "::error file=specs/a.yaml,title=regen check a@b%2C c%3A d::50%25 done%0Anext line"
