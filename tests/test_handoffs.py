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
    # the same code for the same generation: no new source or recipe bytes, one provenance
    new = store.current("scale", "cpu")
    assert (new.source_digest, new.recipe_digest) == (entry.source_digest, entry.recipe_digest)
    assert len(list((project / "cache" / "objects").glob("*/*"))) == len(objects)
    assert store.garbage() == []
