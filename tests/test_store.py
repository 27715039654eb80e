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
import pytest

from regen.store import CorruptCache, Store

WRITER = r"""
import sys, random
from pathlib import Path
sys.path.insert(0, {repo!r})
import pytest

from regen.store import CorruptCache, Store
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
    """Every live pointer names a complete entry whose objects match their digests."""
    store = Store(root)
    live = 0
    for ptr in root.glob("*/*/current.json"):
        json.loads(ptr.read_text())  # never half-written
        kernel, target = ptr.parent.parent.name, ptr.parent.name
        entry = store.current(kernel, target)
        assert entry is not None, f"{ptr} names a missing or incomplete entry"
        for d in (*entry.manifest["files"].values(), entry.manifest["generate"]):
            store.read_object(d)  # raises CorruptCache on a missing or changed object
        for rec in (ptr.parent / "records").glob("*.json"):
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


def _put(store, kernel="k", target="cpu", source="int a;", key="g1", **kw):
    return store.put(kernel, target, "cpp", source, "launches: []\n", {"generator": "x"},
                     {"g": key}, key, **kw)


def test_put_is_content_addressed_and_replaces_the_previous_entry(tmp_path):
    store = Store(tmp_path / "cache")
    a = _put(store)
    assert _put(store).id == a.id
    b = _put(store, source="int b;")
    assert b.id != a.id and store.entry("k", a.id) is None
    assert store.current("k", "cpu").id == b.id
    assert b.source() == "int b;"   # stored exactly as compiled: no per-target header
    assert store.garbage() == []    # a's objects went with it
    assert (tmp_path / "cache" / ".gitattributes").read_text().count("linguist-generated") == 1


def test_equal_sources_are_stored_once_across_targets_and_kernels(tmp_path):
    store = Store(tmp_path / "cache")
    _put(store, target="h100", key="sm90", family="sm90")
    _put(store, target="h200", key="sm90", family="sm90")
    _put(store, target="a100", key="sm80")
    _put(store, kernel="k2", target="a100", key="sm80")
    assert store.current("k", "h100").id == store.current("k", "h200").id   # one entry, two targets
    assert store.current("k", "a100").id != store.current("k", "h100").id   # another generation
    sources = {e.source_digest for k in ("k", "k2") for e in store.entries(k)}
    assert len(sources) == 1
    # one source, one recipe, one provenance, one generate-components object per generate key
    assert len(list((tmp_path / "cache" / "objects").glob("*/*"))) == 5


def test_an_entry_shared_by_two_targets_survives_one_of_them_moving_on(tmp_path):
    store = Store(tmp_path / "cache")
    shared = _put(store, target="h100", key="sm90")
    _put(store, target="h200", key="sm90")
    _put(store, target="h200", source="int c;", key="sm90")
    assert store.current("k", "h100").id == shared.id and store.current("k", "h100").source() == "int a;"
    assert store.garbage() == []


@pytest.mark.parametrize("what", ["source", "manifest", "pointer", "record"])
def test_a_changed_byte_in_the_cache_is_refused_with_a_clear_message(tmp_path, what):
    store = Store(tmp_path / "cache")
    e = _put(store)
    store.put_record("k", "cpu", e.id, {"hardware": {"device": "x"}, "ok": True})
    path = {"source": store.object_path(e.source_digest),
            "manifest": tmp_path / "cache" / "k" / "entries" / f"{e.id}.json",
            "pointer": tmp_path / "cache" / "k" / "cpu" / "current.json",
            "record": next((tmp_path / "cache" / "k" / "cpu" / "records").glob("*.json"))}[what]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptCache) as exc:
        entry = store.current("k", "cpu")
        entry.source()
        store.records("k", "cpu", entry.id)
    assert str(path) in str(exc.value)
    assert store.check() and str(path) in store.check()[0]


def test_a_pointer_to_a_missing_entry_is_refused(tmp_path):
    store = Store(tmp_path / "cache")
    e = _put(store)
    (tmp_path / "cache" / "k" / "entries" / f"{e.id}.json").unlink()
    with pytest.raises(CorruptCache, match="not in the cache"):
        store.current("k", "cpu")


def test_records_are_append_only_and_an_unchanged_verdict_writes_nothing(tmp_path):
    store = Store(tmp_path / "cache")
    e = _put(store)
    rec = {"hardware": {"device": "x"}, "verify_key": "k" * 64, "ok": True, "reason": None,
           "verified_at": "2026-01-01"}
    first = store.put_record("k", "cpu", e.id, rec)
    stamp = first.stat().st_mtime_ns
    again = store.put_record("k", "cpu", e.id, {**rec, "verified_at": "2026-02-02"})
    assert again == first and first.stat().st_mtime_ns == stamp     # no churn
    failed = store.put_record("k", "cpu", e.id, {**rec, "ok": False, "reason": "case 3"})
    assert failed != first and first.exists()                        # beside it, never over it
    other_key = store.put_record("k", "cpu", e.id, {**rec, "verify_key": "j" * 64})
    assert len({first, failed, other_key}) == 3
    assert len(store.records("k", "cpu", e.id)) == 3


def test_a_replaced_verified_entry_stays_with_its_records(tmp_path):
    store = Store(tmp_path / "cache")
    old = _put(store)
    store.put_record("k", "cpu", old.id, {"hardware": {"device": "x"}, "verify_key": "v",
                                         "ok": True})
    new = _put(store, source="int b;")
    assert store.current("k", "cpu").id == new.id
    assert store.pointer("k", "cpu")["previous"] == [old.id]
    assert store.records("k", "cpu", old.id) and store.entry("k", old.id) is not None
    assert store.garbage() == []


def test_a_pending_entry_waits_beside_the_current_one(tmp_path):
    store = Store(tmp_path / "cache")
    cur = _put(store)
    waiting = _put(store, source="int b;", pending=True)
    assert store.current("k", "cpu").id == cur.id
    assert [e.id for e in store.pending("k", "cpu")] == [waiting.id]
    assert store.garbage() == []
    store.point("k", "cpu", waiting.id)          # verified on its hardware: it becomes current
    assert store.current("k", "cpu").id == waiting.id and store.pending("k", "cpu") == []


def test_two_writers_at_once_lose_no_pointer_update(tmp_path):
    import threading

    root = tmp_path / "cache"
    _put(Store(root))

    def writer(i):
        s = Store(root)          # separate store objects: the file lock, not the thread lock
        for j in range(10):
            s.point("k", "cpu", s.current("k", "cpu").id)
            _put(s, source=f"int v{i}_{j};", pending=True)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(Store(root).pending("k", "cpu")) == 40
