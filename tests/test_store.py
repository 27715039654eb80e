"""The store never holds half an entry, whatever moment a build is killed at."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from regen.keys import digest
from regen.store import Store

WRITER = r"""
import sys, random
from pathlib import Path
sys.path.insert(0, {repo!r})
from regen.store import Store
store = Store(Path({root!r}))
rnd = random.Random(int(sys.argv[1]))
print("ready", flush=True)
i = 0
while True:
    i += 1
    src = "// v%d\n" % i + "x" * rnd.randint(10, 200000)
    store.put("k%d" % rnd.randint(0, 2), "cpu", "cpp", src, "launches: []\n",
              {{"generator": "test"}}, {{"n": i}}, "key%d" % i)
    if i % 5 == 0 and store.current("k0", "cpu") is not None:
        store.put_record("k0", "cpu", store.current("k0", "cpu").id,
                         {{"hardware": {{"device": "x"}}, "n": i, "pad": "y" * rnd.randint(0, 100000)}})
"""


def check_store(root: Path) -> int:
    """Every live pointer names a complete entry whose files match its manifest."""
    store = Store(root)
    live = 0
    for base in root.glob("*/*"):
        ptr = base / "current.json"
        if not ptr.exists():
            continue
        json.loads(ptr.read_text())  # never half-written
        entry = store.current(base.parent.name, base.name)
        assert entry is not None, f"{ptr} names a missing or incomplete entry"
        for name, want in entry.manifest["files"].items():
            assert digest((entry.path / name).read_bytes()) == want, f"{entry.path / name} corrupt"
        for rec in (base / "records").glob("*.json"):
            if not rec.name.startswith(".tmp-"):  # temporaries are not records (store.records)
                json.loads(rec.read_text())
        live += 1
    return live


def test_sigkill_at_random_points_never_leaves_a_partial_entry(tmp_path):
    repo = str(Path(__file__).resolve().parent.parent)
    root = tmp_path / "cache"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=repo, root=str(root)))
    rnd = random.Random(1234)
    kills = 0
    for i in range(60):
        proc = subprocess.Popen([sys.executable, str(script), str(i)], stdout=subprocess.PIPE)
        assert proc.stdout.readline().strip() == b"ready"  # imports done: kill mid-write, not mid-import
        time.sleep(rnd.random() * 0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        check_store(root)
    assert kills == 60
    assert check_store(root) >= 1
    store = Store(root)
    store.gc()
    assert store.garbage() == []
    assert check_store(root) >= 1
    assert not list(root.rglob(".tmp-*"))


def test_put_is_content_addressed_and_replaces_the_previous_entry(tmp_path):
    store = Store(tmp_path / "cache")
    a = store.put("k", "cpu", "cpp", "int a;", "launches: []\n", {"generator": "x"}, {"g": 1}, "g1")
    again = store.put("k", "cpu", "cpp", "int a;", "launches: []\n", {"generator": "x"}, {"g": 1}, "g1")
    assert a.id == again.id
    b = store.put("k", "cpu", "cpp", "int b;", "launches: []\n", {"generator": "x"}, {"g": 1}, "g1")
    assert b.id != a.id and not a.path.exists()
    assert store.current("k", "cpu").id == b.id
    assert b.source().startswith("// regen artifact k@cpu: generated content, do not edit")
    assert (tmp_path / "cache" / ".gitattributes").read_text().count("linguist-generated") == 1


def test_entry_without_manifest_is_not_an_entry(tmp_path):
    store = Store(tmp_path / "cache")
    e = store.put("k", "cpu", "cpp", "int a;", "launches: []\n", {}, {"g": 1}, "g1")
    (e.path / "manifest.json").unlink()
    assert store.current("k", "cpu") is None
