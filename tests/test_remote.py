"""The remote cache: content-addressed, create-only, digest-checked objects on memory://, file://
and a real S3 protocol server (moto, server mode, started here); two machines sharing entries,
binaries and records through it; the trust policy deciding which records count."""

from __future__ import annotations

import json
import os
import shutil
import socket

import pytest

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff

fsspec = pytest.importorskip("fsspec")

from regen.remote.config import RemoteConfig, remote_config  # noqa: E402
from regen.remote.objects import RemoteConflict, RemoteCorrupt, RemoteStore  # noqa: E402

S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server in this process on a random port, with a bucket `fleet`; child processes
    reach it through AWS_ENDPOINT_URL."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {**S3_ENV, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    boto3.client("s3").create_bucket(Bucket="fleet")
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


@pytest.fixture(params=["memory", "file", "s3"])
def remote_url(request, tmp_path):
    if request.param == "memory":
        return f"memory://regen-{tmp_path.name}"
    if request.param == "file":
        return f"file://{tmp_path / 'bucket'}"
    request.getfixturevalue("s3_server")
    return f"s3://fleet/{tmp_path.name}"


# -- the object store ------------------------------------------------------------------------------
def test_objects_are_written_once_and_read_back_by_digest(remote_url):
    r = RemoteStore(remote_url)
    d = r.put_object(b"kernel bytes")
    assert r.stats["written"] == 1
    assert r.put_object(b"kernel bytes") == d and r.stats["present"] == 1   # idempotent
    assert r.get_object(d) == b"kernel bytes"
    assert r.get_object("0" * 64) is None
    assert r.list("objects") == [f"objects/{d[:2]}/{d[2:]}"]


def test_a_truncated_remote_object_is_refused_and_repaired_by_the_next_push(remote_url):
    r = RemoteStore(remote_url)
    d = r.put_object(b"the whole object")
    r.fs.pipe_file(r.path(r.object_rel(d)), b"the wh")      # a torn upload
    with pytest.raises(RemoteCorrupt, match="does not match its digest"):
        r.get_object(d)
    r.put_object(b"the whole object")
    assert r.stats["repaired"] == 1 and r.get_object(d) == b"the whole object"


def test_a_different_object_under_an_envelope_name_is_never_overwritten(remote_url):
    r = RemoteStore(remote_url)
    rel = r.put_envelope("records/k/cpu/e1", {"ok": True}, "ci@runner")
    other = json.dumps(json.loads(r.fs.cat_file(r.path(rel))))  # same envelope, other bytes
    r.fs.pipe_file(r.path(rel), other.encode())
    with pytest.raises(RemoteConflict, match="not overwritten"):
        r.put_envelope("records/k/cpu/e1", {"ok": True}, "ci@runner")
    assert r.fs.cat_file(r.path(rel)) == other.encode()


# -- configuration ---------------------------------------------------------------------------------
def test_remote_comes_from_regen_toml_and_env_wins(tmp_path, monkeypatch):
    monkeypatch.delenv("REGEN_REMOTE", raising=False)
    (tmp_path / "regen.toml").write_text('[tool.regen]\nremote = "file:///shared/regen"\n')
    assert remote_config(tmp_path).url == "file:///shared/regen"
    monkeypatch.setenv("REGEN_REMOTE", "memory://x")
    assert remote_config(tmp_path).url == "memory://x"
    assert remote_config(tmp_path, no_remote=True).url is None


def test_bad_remote_settings_name_the_file_and_field(tmp_path, monkeypatch):
    monkeypatch.delenv("REGEN_REMOTE", raising=False)
    (tmp_path / "pyproject.toml").write_text('[tool.regen]\nremote = 3\n')
    with pytest.raises(Exception, match=r"pyproject.toml \[tool.regen.remote\]: expected a string"):
        remote_config(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.regen]\nremote = "bucket/prefix"\n')
    with pytest.raises(Exception, match=r"\[remote\]: expected an fsspec URL"):
        remote_config(tmp_path)
    with pytest.raises(Exception, match=r"\[--trust\]: expected `any` or a file"):
        remote_config(tmp_path, url="memory://x", trust="nokeys.txt")


# -- two machines ----------------------------------------------------------------------------------
def _machine(tmp_path, name):
    root = make_project(tmp_path / name)
    return root


def _verified_machine(tmp_path):
    """Machine A: scale@cpu accepted and verified here."""
    a = _machine(tmp_path, "a")
    folder = write_handoff(tmp_path / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, a)
    regen(a, "accept", str(folder), check=True)
    return a


def test_an_entry_and_record_pushed_by_one_machine_make_another_up_to_date_in_process(tmp_path):
    """memory:// lives in one process: both machines' stores are driven through the Sync API."""
    from regen.project import Project
    from regen.remote.sync import Sync
    from regen.store import Store

    a = _verified_machine(tmp_path)
    b = _machine(tmp_path, "b")
    url = f"memory://two-machines-{tmp_path.name}"
    pa, pb = Project(a), Project(b)
    sa = Sync(RemoteConfig(url, pushed_by="a@host"))
    report = sa.push(pa, Store(pa.cache_dir), "scale", "cpu")
    assert (report.entries, report.records, report.refused) == (1, 1, [])
    store_b = Store(pb.cache_dir)
    got = Sync(RemoteConfig(url, pushed_by="b@host")).pull(pb, store_b)
    assert (got.entries, got.records, got.refused, got.untrusted) == (1, 1, [], [])
    from regen import plan as planning

    node = planning.plan(pb, store_b)[0]
    assert node.action == planning.UP_TO_DATE
    assert "(fleet) at" in node.reasons[0], node.reasons
    rec = store_b.records("scale", "cpu", node.entry.id)[0]
    assert rec["fleet"]["pushed_by"] == "a@host" and rec["fleet"]["remote"] == url
    # pushing again writes nothing new; the pulled record is not pushed back as B's
    again = Sync(RemoteConfig(url, pushed_by="b@host")).push(pb, store_b, "scale", "cpu")
    assert again.records == 0


def test_s3_fleet_record_shows_in_status_and_trust_decides(tmp_path, s3_server):
    """Over a real S3 protocol server and the real CLI: A pushes (its build pushes on its own),
    B's `regen status` pulls and says "(fleet)"; a trust file that lists only CI's key refuses
    A's unsigned records until A signs with that key; a corrupted record is refused, never used."""
    a = _verified_machine(tmp_path)
    url = f"s3://fleet/{tmp_path.name}"
    env = {**s3_server, "REGEN_PUSHER": "ci@runner-1"}
    proc = regen(a, "remote", "push", "--remote", url, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pushed 1 entries, 1 records" in proc.stdout

    b = _machine(tmp_path, "b")
    regen(b, "remote", "keygen", str(tmp_path / "ci.key"), "--name", "ci", check=True)
    trust = tmp_path / "trusted.pub"
    shutil.copy(tmp_path / "ci.key.pub", trust)
    proc = regen(b, "status", "--remote", url, "--trust", str(trust), env=s3_server)
    assert "untrusted 1" in proc.stderr and "unsigned" in proc.stderr, proc.stderr
    assert "(fleet)" not in proc.stdout

    # A signs with CI's key: the same record, now believed
    proc = regen(a, "remote", "push", "--remote", url,
                 env={**env, "REGEN_SIGNING_KEY": str(tmp_path / "ci.key")})
    assert proc.returncode == 0, proc.stderr
    proc = regen(b, "status", "--remote", url, "--trust", str(trust), env=s3_server)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scale@cpu  up-to-date  verified on" in proc.stdout and "(fleet) at" in proc.stdout
    rec = json.loads(next((b / "cache" / "scale" / "cpu" / "records").glob("*.json")).read_text())
    assert rec["fleet"]["signed_by"] == "ci" and rec["fleet"]["pushed_by"] == "ci@runner-1"


def test_a_corrupted_remote_record_is_refused_and_a_forged_signature_does_not_count(tmp_path):
    from regen.project import Project
    from regen.remote.sync import Sync
    from regen.remote.trust import keygen
    from regen.store import Store

    a = _verified_machine(tmp_path)
    url = f"file://{tmp_path / 'bucket'}"
    keygen(tmp_path / "ci.key", "ci")
    trust = str(tmp_path / "ci.key.pub")
    pa = Project(a)
    Sync(RemoteConfig(url, pushed_by="ci", signing_key=str(tmp_path / "ci.key"))).push(
        pa, Store(pa.cache_dir), "scale", "cpu")
    r = RemoteStore(url)
    (rel,) = [p for p in r.list("records") if p.endswith(".json")]
    env = json.loads(r.fs.cat_file(r.path(rel)))
    forged = json.loads(json.dumps(env))
    forged["body"]["reason"] = "forged"   # a changed body no longer matches its name: corrupt
    r.fs.pipe_file(r.path(rel), json.dumps(forged).encode())

    b = _machine(tmp_path, "b")
    pb = Project(b)
    got = Sync(RemoteConfig(url, trust=trust)).pull(pb, Store(pb.cache_dir))
    assert got.records == 0 and any("does not match its name" in x for x in got.refused)

    # a body rewritten consistently (renamed to its new digest) still carries CI's signature over
    # the old digest: the signature check refuses it
    from regen.keys import digest
    from regen.remote.objects import envelope_name

    r.fs.rm(r.path(rel))
    new_rel = rel.rsplit("/", 1)[0] + "/" + envelope_name(digest(forged["body"]), forged)
    r.fs.pipe_file(r.path(new_rel), json.dumps(forged).encode())
    got = Sync(RemoteConfig(url, trust=trust)).pull(pb, Store(pb.cache_dir))
    assert got.records == 0 and any("bad signature" in x for x in got.untrusted), got.line("pulled")


def test_a_pulled_compile_result_spares_the_compiler(tmp_path, monkeypatch):
    from regen.localcache import cache
    from regen.project import Project
    from regen.remote.sync import Sync
    from regen.store import Store

    import regen.localcache as lc

    a = _verified_machine(tmp_path)   # (its CLI runs compiled into a's local cache)
    url = f"file://{tmp_path / 'bucket'}"
    monkeypatch.setattr(lc, "_CACHE", None)
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(tmp_path / "a-local"))
    pa = Project(a)
    from regen.compile import compile_source

    compile_source(Store(pa.cache_dir).current("scale", "cpu").source(), pa.target("cpu"))
    pushed = Sync(RemoteConfig(url)).push(pa, Store(pa.cache_dir), "scale", "cpu")
    assert pushed.compiled == 1
    b = _machine(tmp_path, "b")
    cache().close()
    monkeypatch.setattr(lc, "_CACHE", None)
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(tmp_path / "b-local"))
    pb = Project(b)
    got = Sync(RemoteConfig(url)).pull(pb, Store(pb.cache_dir))
    assert got.compiled == 1
    entry = Store(pb.cache_dir).current("scale", "cpu")
    compiled = compile_source(entry.source(), pb.target("cpu"))
    assert compiled.cached and compiled.binary_digest
    cache().close()
    monkeypatch.setattr(lc, "_CACHE", None)


def test_a_build_pushes_its_nodes_and_another_machines_build_pulls_instead_of_generating(tmp_path):
    a = _verified_machine(tmp_path)
    url = f"file://{tmp_path / 'bucket'}"
    proc = regen(a, "build", "--remote", url, "--generator", "none")
    assert proc.returncode == 0 and "pushed 1 entries, 1 records" in proc.stderr, proc.stderr
    b = _machine(tmp_path, "b")
    without = regen(b, "build", "--generator", "none", "--no-remote")
    assert without.returncode == 1 and "needs generate" in without.stdout   # nothing to build from
    proc = regen(b, "build", "--remote", url, "--generator", "none")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pulled 1 entries, 1 records" in proc.stderr
    assert "up to date: verified on" in proc.stdout and "(fleet) at" in proc.stdout
