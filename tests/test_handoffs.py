"""The committed hand-written implementations (handoffs/) and the cache never drift apart: what
regen verified and stores is exactly what people edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from regen.generators import SOURCE_NAMES
from regen.project import Project
from regen.store import Store, strip_header

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = sorted(p for p in (ROOT / "handoffs").glob("*@*") if (p / "launch.yaml").exists())


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_handoff_matches_its_cache_entry(folder):
    kernel, target = folder.name.split("@")
    project = Project(ROOT)
    entry = Store(project.cache_dir).current(kernel, target)
    assert entry is not None, f"{folder.name} was never accepted (regen accept {folder})"
    src = folder / SOURCE_NAMES[project.target(target).language]
    assert strip_header(entry.source()) == src.read_text(), \
        f"{src} differs from the cached entry {entry.id}: run `regen accept {folder}`"
    assert entry.recipe() == (folder / "launch.yaml").read_text()
