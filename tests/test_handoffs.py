"""A handoff folder is a view of the cache, not a second copy: `regen handoff` writes the cached
implementation out for editing, and accepting it unchanged stores nothing new."""

from __future__ import annotations

import json

from conftest import SCALE_CPP, SCALE_RECIPE, regen, write_handoff
from regen.store import Store


def test_handoff_writes_the_cached_entry_and_accepting_it_unchanged_changes_nothing(project, tmp_path):
    folder = write_handoff(tmp_path / "first", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), "--author", "test", check=True)
    store = Store(project / "cache")
    entry = store.current("scale", "cpu")
    again = tmp_path / "again"
    regen(project, "handoff", "scale", "--target", "cpu", "--out", str(again), check=True)
    assert (again / "kernel.cpp").read_text() == entry.source() == SCALE_CPP   # no header line
    assert (again / "launch.yaml").read_text() == entry.recipe()
    task = json.loads((again / "task.json").read_text())
    assert task["generate_key"] == entry.generate_key
    objects = sorted((project / "cache" / "objects").glob("*/*"))
    out = regen(project, "accept", str(again), "--author", "test", check=True)
    assert "accepted" in out.stdout
    # the same code for the same generation: no new source or recipe bytes, only the new
    # provenance; the verified entry it replaced is kept (with its record) as `previous`
    new = store.current("scale", "cpu")
    assert (new.source_digest, new.recipe_digest) == (entry.source_digest, entry.recipe_digest)
    assert len(list((project / "cache" / "objects").glob("*/*"))) == len(objects) + 1
    assert store.pointer("scale", "cpu")["previous"] == [entry.id]
    assert store.garbage() == []


def _h200_project(tmp_path):
    import shutil

    from conftest import REPO, make_project

    root = make_project(tmp_path / "proj", kernels=("softmax",), targets=("h100", "h200"))
    for part in ("objects", "softmax/entries", "softmax/h100", "softmax/h200"):
        shutil.copytree(REPO / "cache" / part, root / "cache" / part)
    Store(root / "cache").gc()
    return root


def test_an_unverified_accept_never_replaces_a_verified_entry_without_force(tmp_path):
    root = _h200_project(tmp_path)
    store = Store(root / "cache")
    verified = store.current("softmax", "h200")
    assert any(r["ok"] for r in store.records("softmax", "h200", verified.id))
    folder = tmp_path / "ho"
    regen(root, "handoff", "softmax", "-t", "h200", "--out", str(folder), check=True)
    src = folder / "kernel.cu"   # a different binary: one more (unused) kernel
    src.write_text(src.read_text() + '\nextern "C" __global__ void softmax_unused(float* p) '
                   '{ p[0] = 1.0f; }\n')
    out = regen(root, "accept", str(folder), "--author", "test", check=True)
    assert "pending" in out.stdout
    assert store.current("softmax", "h200").id == verified.id            # still the verified one
    pending = store.pending("softmax", "h200")
    assert len(pending) == 1 and pending[0].source() == src.read_text()
    status = regen(root, "status", "softmax", "-t", "h200").stdout
    assert "up-to-date" in status and "waits for verification on H200" in status
    # --force makes it current; the verified entry stays, with its record, under `previous`
    regen(root, "accept", str(folder), "--author", "test", "--force", check=True)
    assert store.current("softmax", "h200").source() == src.read_text()
    assert verified.id in store.pointer("softmax", "h200")["previous"]
    assert any(r["ok"] for r in store.records("softmax", "h200", verified.id))
