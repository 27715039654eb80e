"""Target families: members share one generation (one key, one entry, one set of objects), are
compiled per arch and verified per device; a new member is a YAML file and no kernel copy."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import CPU_TARGET, REPO, SCALE_CPP, SCALE_RECIPE, make_project, regen
from regen import plan as planning
from regen.errors import InputError
from regen.project import Project
from regen.store import Store

FAMILY = "family:\n  name: host\n  description: Two host columns that share one generation.\n"


def _two_member_project(root: Path) -> Path:
    make_project(root)
    (root / "targets" / "cpu.yaml").unlink()
    for name in ("cpua", "cpub"):
        (root / "targets" / f"{name}.yaml").write_text(CPU_TARGET + FAMILY)
    return root


def _agent(tmp_path: Path) -> tuple[str, Path]:
    """A command generator that answers with the scale kernel and counts its calls."""
    calls = tmp_path / "calls"
    script = tmp_path / "agent.py"
    script.write_text(
        "import os, sys\nfrom pathlib import Path\nsys.stdin.read()\n"
        f"with open({str(calls)!r}, 'a') as fh: fh.write(os.environ['REGEN_TARGET'] + '\\n')\n"
        "task = Path(os.environ['REGEN_TASK_DIR'])\n"
        f"(task / 'kernel.cpp').write_text({SCALE_CPP!r})\n"
        f"(task / 'launch.yaml').write_text({SCALE_RECIPE!r})\n")
    return f"command:{sys.executable} {script}", calls


def test_the_repository_families_share_generations_and_nothing_else():
    project = Project(REPO)
    spec = project.spec("softmax")
    store = Store(project.cache_dir)
    nodes = {n.target: n for n in planning.plan(project, store, ["softmax"])}
    assert nodes["h100"].generate_key == nodes["h200"].generate_key
    assert nodes["mi300x"].generate_key == nodes["mi350"].generate_key
    assert len({nodes[t].generate_key for t in ("a100", "h200", "b200", "mi350", "cpu")}) == 5
    assert store.current("softmax", "h100").id == store.current("softmax", "h200").id
    assert store.current("softmax", "mi300x").id == store.current("softmax", "mi350").id
    assert project.target("h200").arch == project.target("h100").arch == "sm_90a"
    assert spec.name == "softmax"


def test_a_new_gpu_of_a_known_family_is_one_yaml_file_and_no_kernel(tmp_path):
    root = make_project(tmp_path / "proj", kernels=("softmax",), targets=("h100", "h200"))
    for part in ("objects", "softmax/entries", "softmax/h100", "softmax/h200"):  # committed entry
        shutil.copytree(REPO / "cache" / part, root / "cache" / part)
    Store(root / "cache").gc()   # only what h100 and h200 name stays
    (root / "targets" / "h20x.yaml").write_text(
        "extends: h100\ndescription: A hypothetical Hopper part with other memory.\n"
        "peaks:\n  memory_bandwidth: {value: 4.0e12, unit: B/s, source: datasheet}\n"
        "hardware:\n  match: [\"H20X\"]\n")
    project = Project(root)
    assert project.generation_view(project.target("h20x")) == \
        project.generation_view(project.target("h200"))
    objects = sorted((root / "cache" / "objects").glob("*/*"))
    node = {n.target: n for n in planning.plan(project, Store(project.cache_dir))}["h20x"]
    assert node.action == planning.ADOPT and "family sm90" in node.reasons[0]
    out = regen(root, "build", "softmax", "-t", "h20x", check=True)
    assert "adopted" in out.stdout
    store = Store(root / "cache")
    assert store.current("softmax", "h20x").id == store.current("softmax", "h200").id
    assert sorted((root / "cache" / "objects").glob("*/*")) == objects   # no new bytes
    assert regen(root, "status", "softmax", "-t", "h20x").stdout.split()[1] == planning.UNVERIFIED


def test_one_generation_serves_the_family_and_each_member_is_verified_on_its_own(tmp_path):
    root = _two_member_project(tmp_path / "proj")
    gen, calls = _agent(tmp_path)
    plan = regen(root, "build", "--dry-run", "--json").stdout
    actions = {(n["kernel"], n["target"]): n["action"] for n in json.loads(plan)}
    assert actions == {("scale", "cpua"): planning.GENERATE, ("scale", "cpub"): planning.ADOPT}
    regen(root, "build", "--generator", gen, check=True)
    assert calls.read_text().split() == ["cpua"]          # one generation for two targets
    store = Store(root / "cache")
    a, b = store.current("scale", "cpua"), store.current("scale", "cpub")
    assert a.id == b.id
    for t in ("cpua", "cpub"):                            # verified per target, here
        recs = store.records("scale", t, a.id)
        assert len(recs) == 1 and recs[0]["ok"] and recs[0]["target"] == t
    status = regen(root, "status").stdout
    assert status.count(planning.UP_TO_DATE) == 2


def test_a_member_that_changes_what_the_generator_sees_is_refused(tmp_path):
    root = _two_member_project(tmp_path / "proj")
    path = root / "targets" / "cpub.yaml"
    path.write_text(path.read_text().replace("notes: |", "notes: |\n  Another note.", 1))
    with pytest.raises(InputError) as exc:
        Project(root).targets
    assert "cpub.yaml" in str(exc.value) and "[notes]" in str(exc.value)
    out = regen(root, "status")
    assert out.returncode == 2 and "family 'host'" in out.stderr and "Traceback" not in out.stderr


def test_a_family_of_several_members_needs_its_own_description(tmp_path):
    root = _two_member_project(tmp_path / "proj")
    for name in ("cpua", "cpub"):
        p = root / "targets" / f"{name}.yaml"
        p.write_text(p.read_text().replace(FAMILY, "family: {name: host}\n"))
    with pytest.raises(InputError, match="no description"):
        Project(root).targets


def test_an_accepted_entry_is_not_pointed_at_a_member_the_spec_does_not_list(tmp_path):
    root = _two_member_project(tmp_path / "proj")
    spec = root / "specs" / "scale.yaml"
    spec.write_text(spec.read_text() + "targets: [cpua]\n")
    folder = tmp_path / "h"
    regen(root, "handoff", "scale", "--target", "cpua", "--out", str(folder), check=True)
    next(folder.glob("kernel.*")).write_text(SCALE_CPP)
    (folder / "launch.yaml").write_text(SCALE_RECIPE)
    regen(root, "accept", str(folder), check=True)
    store = Store(root / "cache")
    assert store.current("scale", "cpua") is not None
    assert store.current("scale", "cpub") is None
    assert not (root / "cache" / "scale" / "cpub").exists()
    assert store.check() == []
