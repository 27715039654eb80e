"""Records travel between machines: export on the hardware, import here; stale or foreign records
are refused, records written by older digests of the same oracle source are re-keyed."""

from __future__ import annotations

import json

from conftest import SCALE_CPP, SCALE_RECIPE, regen, write_handoff
from regen.keys import HOST_JUDGE_VERSION
from regen.oracle import legacy_digests, oracle_digest


def _verified(project, tmp_path):
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    out = tmp_path / "records.json"
    regen(project, "verify", "--target", "cpu", "--export", str(out), check=True)
    # the records travel as from another machine: this cache keeps none of its own (an import of
    # the very record already here would write nothing: records are append-only, without churn)
    for rec in (project / "cache" / "scale" / "cpu" / "records").glob("*.json"):
        rec.unlink()
    return json.loads(out.read_text())


def test_import_roundtrip_and_refusals(project, tmp_path):
    data = _verified(project, tmp_path)
    assert len(data["records"]) == 1 and data["records"][0]["ok"]
    good = tmp_path / "good.json"
    good.write_text(json.dumps(data))
    proc = regen(project, "record", "import", str(good))
    assert proc.returncode == 0 and "imported 1 records" in proc.stdout

    stale = json.loads(json.dumps(data))
    stale["records"][0]["verify"]["tolerance"]["float32"]["rtol"] = 0.5
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    proc = regen(project, "record", "import", str(tmp_path / "stale.json"))
    assert proc.returncode == 1 and "stale (tolerance changed" in proc.stdout

    foreign = json.loads(json.dumps(data))
    foreign["records"][0]["compile"]["binary"] = "0" * 64
    (tmp_path / "foreign.json").write_text(json.dumps(foreign))
    proc = regen(project, "record", "import", str(tmp_path / "foreign.json"))
    assert proc.returncode == 1 and "is not the verified one" in proc.stdout


def test_record_with_a_legacy_oracle_digest_is_rekeyed(project, tmp_path):
    data = _verified(project, tmp_path)
    path = project / "oracles" / "scale.py"
    old = next(d for d, how in legacy_digests(path).items() if "3.12" in how)
    assert old != oracle_digest(path)
    data["records"][0]["verify"]["oracle"] = old  # as an older regen on Python 3.12 wrote it
    f = tmp_path / "legacy.json"
    f.write_text(json.dumps(data))
    proc = regen(project, "record", "import", str(f))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(next((project / "cache" / "scale" / "cpu" / "records").glob("*.json")).read_text())
    assert rec["verify"]["oracle"] == oracle_digest(path)
    assert "re-keyed" in rec["migrated"][0]


def test_record_of_an_older_judge_is_stale_unless_its_timing_rows_prove_the_judge(project, tmp_path):
    data = _verified(project, tmp_path)
    rec = data["records"][0]
    assert rec["verify"]["judge"] == HOST_JUDGE_VERSION
    del rec["verify"]["judge"]  # as a regen before the judge component wrote it
    old = tmp_path / "judge1.json"
    old.write_text(json.dumps(data))
    proc = regen(project, "record", "import", str(old))
    assert proc.returncode == 1 and f"stale (judge changed (1 → {HOST_JUDGE_VERSION}))" in proc.stdout
    # timing rows written by judge 2's GPU timer say which judge made the record; for this host
    # column that judge is outdated too (host artifacts left the worker's process in judge 3)
    rec["bench"] = [{"case": "n1000:float32", "median_s": 1e-5, "launch_exposed": 0, "stall_s": 2e-4}]
    timed = tmp_path / "judge2.json"
    timed.write_text(json.dumps(data))
    proc = regen(project, "record", "import", str(timed))
    assert proc.returncode == 1 and f"stale (judge changed (2 → {HOST_JUDGE_VERSION}))" in \
        proc.stdout, proc.stdout
    rec["verify"]["judge"] = HOST_JUDGE_VERSION
    current = tmp_path / "judge3.json"
    current.write_text(json.dumps(data))
    proc = regen(project, "record", "import", str(current))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = regen(project, "status", "--target", "cpu")
    assert "up-to-date" in proc.stdout, proc.stdout
    # the recorded timings are readable without the hardware that made them
    proc = regen(project, "bench", "--recorded", "--target", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "n1000:float32" in proc.stdout and "10.0" in proc.stdout and "(current)" in proc.stdout


def test_bad_record_file_is_a_clear_error(project, tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{not json")
    proc = regen(project, "record", "import", str(f))
    assert proc.returncode == 2 and "invalid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_a_passing_record_of_a_pending_entry_makes_it_current_here(project, tmp_path):
    """The device verifies a pending entry (`regen verify` promotes it there and exports its
    record); importing that record here must promote it too, or the verification never lands.
    A failing record of a pending entry is kept and the entry stays pending."""
    import shutil

    from regen.store import Store

    folder = write_handoff(tmp_path / "h1", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, project)
    regen(project, "accept", str(folder), check=True)
    first = Store(project / "cache").current("scale", "cpu").id
    # "the device": a copy of the project where the second version is accepted and verified
    device = tmp_path / "device"
    shutil.copytree(project, device)
    folder = write_handoff(tmp_path / "h2", "scale", "cpu", SCALE_CPP + "// version 2\n",
                           SCALE_RECIPE, device)
    regen(device, "accept", str(folder), check=True)
    second = Store(device / "cache").current("scale", "cpu").id
    assert second != first
    out = tmp_path / "records.json"
    regen(device, "verify", "--target", "cpu", "--export", str(out), check=True)
    data = json.loads(out.read_text())
    assert [r["entry"] for r in data["records"]] == [second] and data["records"][0]["ok"]
    # here the second version is only pending (accepted where its hardware was not)
    shutil.copytree(device / "cache" / "objects", project / "cache" / "objects", dirs_exist_ok=True)
    shutil.copy(device / "cache" / "scale" / "entries" / f"{second}.json",
                project / "cache" / "scale" / "entries")
    Store(project / "cache").point("scale", "cpu", second, pending=True)

    failing = json.loads(json.dumps(data))
    failing["records"][0]["ok"] = False
    (tmp_path / "failing.json").write_text(json.dumps(failing))
    proc = regen(project, "record", "import", str(tmp_path / "failing.json"))
    assert proc.returncode == 0 and "imported 1 records" in proc.stdout, proc.stdout + proc.stderr
    assert "current now" not in proc.stdout
    store = Store(project / "cache")
    assert store.current("scale", "cpu").id == first
    assert [e.id for e in store.pending("scale", "cpu")] == [second]

    proc = regen(project, "record", "import", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"pending entry {second} passed on" in proc.stdout and "current now" in proc.stdout
    store = Store(project / "cache")
    assert store.current("scale", "cpu").id == second
    assert store.pending("scale", "cpu") == []
