"""Peers in the oracle contract: `peers()` names other implementations (Liger-Kernel, QuACK) that
`regen bench` times with the candidate's method; a missing package or a raising peer is skipped
with a one-line note, a peer off the reference is never the best, the table shows the best peer
and regen's ratio to it, and `speedup: {best_peer: ...}` and `memory:` are profile expectations.
A fake peer package (a folder on PYTHONPATH) stands in for the real ones on the cpu column."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml

from regen import report
from regen.build import Context, evaluate
from regen.errors import InputError
from regen.judge import Settings
from regen.oracle import oracle_digest
from regen.project import Project
from regen.spec import load_spec
from regen.store import Store

ROOT = Path(__file__).resolve().parent.parent
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

FAKE_PEER = '''
import time
import torch

def softmax(x):
    return torch.softmax(x, dim=-1)

def slow_softmax(x):
    time.sleep(0.02)
    return torch.softmax(x, dim=-1)

def wrong_softmax(x):
    return torch.softmax(x, dim=-1) * 2

def no_fp32(x):
    raise TypeError(f"fakepeer: {x.dtype} is not supported")
'''

PEERS = '''

def peers():
    def fast(inputs, case):
        import fakepeer
        return {"y": fakepeer.softmax(inputs["x"])}

    def slow(inputs, case):
        import fakepeer
        return {"y": fakepeer.slow_softmax(inputs["x"])}

    def wrong(inputs, case):
        import fakepeer
        return {"y": fakepeer.wrong_softmax(inputs["x"])}

    def picky(inputs, case):
        import fakepeer
        return {"y": fakepeer.no_fp32(inputs["x"])}

    def absent(inputs, case):
        import no_such_peer_package
        return {"y": no_such_peer_package.softmax(inputs["x"])}

    def prepared_prepare(inputs, case):
        return {"x": inputs["x"].double()}

    def prepared(inputs, case):
        return {"y": torch.softmax(inputs["x"], dim=-1).float()}

    return {"fast": fast, "slow": slow, "wrong": wrong, "picky": picky, "absent": absent,
            "prepared": (prepared_prepare, prepared)}
'''


def _project(tmp_path: Path, profile: dict | None = None, peers: str = PEERS) -> Project:
    """The softmax kernel with a small benchmark case and the peers above."""
    proj = tmp_path / "proj"
    (proj / "specs").mkdir(parents=True)
    (proj / "oracles").mkdir()
    shutil.copytree(ROOT / "targets", proj / "targets")
    spec = yaml.safe_load((ROOT / "specs" / "softmax.yaml").read_text())
    spec["cases"] = [{"M": 3, "N": 7, "dtype": "float32"},
                     {"M": 64, "N": 256, "dtype": "float32", "bench": True}]
    spec["profile"] = {**spec["profile"], **(profile or {})}
    (proj / "specs" / "softmax.yaml").write_text(yaml.safe_dump(spec))
    plain = (ROOT / "oracles" / "softmax.py").read_text().split("\n\ndef peers():")[0]
    (proj / "oracles" / "softmax.py").write_text(plain + peers)   # the fake peers only
    return Project(proj)


@pytest.fixture
def fake_peer(tmp_path, monkeypatch):
    pkg = tmp_path / "site"
    pkg.mkdir()
    (pkg / "fakepeer.py").write_text(FAKE_PEER)
    monkeypatch.setenv("PYTHONPATH", str(pkg))   # the judge's child inherits it
    return pkg


def _bench(project: Project):
    entry = Store(ROOT / "cache").current("softmax", "cpu")
    ev = evaluate(Context(project=project, store=None), project.spec("softmax"),
                  project.target("cpu"), entry.source(), entry.recipe(), verify_here=True,
                  settings=Settings(bench=True, baselines=("torch_eager",), iters=6, warmup=1,
                                    hidden_cases=False))
    return ev


@needs_gxx
def test_peers_are_timed_skipped_with_a_note_and_the_best_is_the_fastest_matching_one(
        tmp_path, fake_peer):
    ev = _bench(_project(tmp_path))
    assert ev.ok, ev.feedback
    (row,) = ev.outcome.bench
    peers, notes = row["peers"], row["peer_notes"]
    assert set(peers) == {"fast", "slow", "wrong", "prepared"}   # timed ones only
    assert peers["slow"] >= 0.02 > peers["fast"]                 # same timer as the baselines
    assert notes["absent"] == "skipped: not installed (No module named 'no_such_peer_package')"
    assert notes["picky"] == ("skipped: raised TypeError: fakepeer: torch.float32 is not "
                              "supported")
    assert notes["wrong"].startswith("not counted: outputs off the reference (y: ")
    assert row["best_peer"] in ("fast", "prepared") and row["best_peer"] != "wrong"
    out = io.StringIO()
    report.bench([{"kernel": "softmax", "target": "cpu", **row}], False, out)
    text = out.getvalue()
    header = text.splitlines()[0]
    line = next(x for x in text.splitlines() if x.startswith("softmax"))
    assert "best peer µs" in header and "vs peer" in header
    best_t = peers[row["best_peer"]]
    assert f"{row['best_peer']} {best_t * 1e6:.1f}" in line
    assert f"{best_t / row['median_s']:.2f}x" in line
    assert "note: softmax: peer absent skipped: not installed" in text
    assert text.count("note:") == 3                              # one line per skipped peer


@needs_gxx
def test_an_oracle_without_peers_gives_rows_without_peer_columns(tmp_path, fake_peer):
    ev = _bench(_project(tmp_path, peers=""))
    assert ev.ok, ev.feedback
    (row,) = ev.outcome.bench
    assert "peers" not in row
    out = io.StringIO()
    report.bench([{"kernel": "softmax", "target": "cpu", **row}], False, out)
    assert "note:" not in out.getvalue()


@needs_gxx
def test_a_memory_expectation_is_checked_against_outputs_and_workspace(tmp_path, fake_peer):
    y_bytes = 64 * 256 * 4                                       # the bench case's output
    ev = _bench(_project(tmp_path, {"memory": "M * N * dsize(T)"}))
    assert ev.ok, ev.feedback
    assert ev.outcome.bench[0]["memory_bytes"] == y_bytes
    assert {"check": "memory", "limit": y_bytes, "value": y_bytes, "ok": True} in \
        ev.outcome.bench[0]["checks"]
    ev = _bench(_project(tmp_path / "tight", {"memory": "M * N * dsize(T) - 1"}))
    assert not ev.ok
    assert f"profile expectations not met: memory {y_bytes} > {y_bytes - 1}" in ev.feedback


def test_best_peer_speedup_is_checked_like_the_torch_baselines():
    from regen.profile import dynamic_checks

    project = Project(ROOT)
    spec = project.spec("softmax").model_copy(update={"profile": project.spec("softmax").profile
                                              .model_copy(update={"speedup": {"best_peer": 1.0}})})
    h200 = project.target("h200")
    timing = {"median_s": 100e-6}
    (slower,) = dynamic_checks(spec, h200, timing, {"best_peer": 90e-6})
    assert slower == {"check": "speedup vs best_peer", "limit": 1.0, "value": 0.9, "ok": False}
    (faster,) = dynamic_checks(spec, h200, timing, {"best_peer": 120e-6})
    assert faster["ok"] is True and faster["value"] == 1.2
    (none,) = dynamic_checks(spec, h200, timing, {"best_peer": None})
    assert none["ok"] is None and none["note"] == "baseline unavailable"   # no peer installed


def test_an_unknown_speedup_baseline_names_best_peer_among_the_choices(tmp_path):
    spec = yaml.safe_load((ROOT / "specs" / "softmax.yaml").read_text())
    spec["profile"]["speedup"] = {"best_peers": 1.0}
    path = tmp_path / "softmax.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as exc:
        load_spec(path)
    assert "best_peers" in str(exc.value) and "best_peer" in str(exc.value).replace("best_peers", "")


def test_a_memory_formula_with_an_unknown_name_is_refused(tmp_path):
    spec = yaml.safe_load((ROOT / "specs" / "softmax.yaml").read_text())
    spec["profile"]["memory"] = "M * K * 4"
    path = tmp_path / "softmax.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as exc:
        load_spec(path)
    assert "profile.memory: unknown names ['K']" in str(exc.value)


def test_adding_peers_to_an_oracle_does_not_change_its_digest(tmp_path):
    """A peer decides no correct output: committed records stay valid when peers are added."""
    base = (ROOT / "oracles" / "softmax.py").read_text().split("\n\ndef peers():")[0]
    plain, with_peers = tmp_path / "a.py", tmp_path / "b.py"
    plain.write_text(base)
    with_peers.write_text(base + PEERS)
    assert oracle_digest(plain) == oracle_digest(with_peers)
    called = tmp_path / "c.py"   # code that calls peers() makes it part of what is computed
    called.write_text(base + PEERS + "\nPEER_NAMES = sorted(peers())\n")
    assert oracle_digest(called) != oracle_digest(plain)


def test_every_library_oracle_peers_function_returns_named_callables():
    """Without the packages: peers() itself imports nothing and names each peer."""
    from regen.oracle import load_oracle

    have = {}
    for path in sorted((ROOT / "oracles").glob("*.py")):
        module = load_oracle(path)
        if hasattr(module, "peers"):
            peers = module.peers()
            assert peers and all(callable(v) or (isinstance(v, tuple) and len(v) == 2)
                                 for v in peers.values()), path.name
            have[path.stem] = sorted(peers)
    assert have["rmsnorm"] == ["liger", "quack"] and have["softmax"] == ["liger", "quack"]
    assert have["cross_entropy"] == ["liger", "quack"] and have["rope"] == ["liger", "quack"]
    assert have["layernorm"] == ["liger", "quack"] and have["swiglu"] == ["liger"]


def test_recorded_rows_keep_their_peers(tmp_path):
    """--recorded prints the table from records: the peer columns come from the stored row."""
    row = {"kernel": "rmsnorm", "target": "h200", "case": "M32768xN4096:bfloat16",
           "median_s": 129.1e-6, "floor_s": 125.7e-6, "floor_fraction": 0.97,
           "baselines": {"torch_eager": 151e-6, "torch_compile": 141e-6},
           "peers": {"liger": 127.0e-6, "quack": 128.6e-6}, "best_peer": "liger",
           "peer_notes": {}, "checks": []}
    out = io.StringIO()
    report.bench([row], False, out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("rmsnorm"))
    assert "liger 127.0" in line and "0.98x" in line


def test_a_case_for_some_columns_runs_only_there():
    """targets: on a case keeps a GPU-sized benchmark (a vocabulary GEMM) off the host column."""
    project = Project(ROOT)
    spec = project.spec("fused_linear_cross_entropy")
    cpu, h200 = project.target("cpu"), project.target("h200")
    assert [c.sizes for c in spec.bench_cases(cpu)] == [{"N": 64, "H": 256, "V": 4096}]
    assert [c.sizes["V"] for c in spec.bench_cases(h200)] == [128256]
    assert len(spec.cases_for(cpu)) == len(spec.cases_for(h200)) == len(spec.cases) - 1


def test_a_case_with_an_empty_column_list_is_refused(tmp_path):
    spec = yaml.safe_load((ROOT / "specs" / "softmax.yaml").read_text())
    spec["cases"][0]["targets"] = []
    path = tmp_path / "softmax.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError) as exc:
        load_spec(path)
    assert "cases[0].targets: expected at least one column" in str(exc.value)


def test_a_case_marked_floor_false_is_timed_but_exempt_from_the_floor_expectation():
    from regen.profile import dynamic_checks
    from regen.spec import Case

    project = Project(ROOT)
    spec, h200 = project.spec("residual_add"), project.target("h200")
    timing = {"median_s": 5e-6, "floor_fraction": 0.001}
    (big,) = dynamic_checks(spec, h200, timing, {}, Case(M=4096, N=4096, bench=True))
    assert big == {"check": "floor_fraction", "limit": 0.9, "value": 0.001, "ok": False}
    (tiny,) = dynamic_checks(spec, h200, timing, {}, Case(M=1, N=2048, bench=True, floor=False))
    assert tiny["ok"] is None and tiny["value"] == 0.001 and "floor: false" in tiny["note"]
    # the committed spec exempts its one-row decode case and no other
    exempt = [c.sizes for c in spec.cases if not c.floor]
    assert exempt == [{"M": 1, "N": 2048}]


def _attention_with(profile: dict):
    project = Project(ROOT)
    spec = project.spec("attention")
    return spec.model_copy(update={"profile": spec.profile.model_copy(update=profile)}), \
        project.target("h200")


def _child_results(spec, target, ratios: list[float]) -> list[dict]:
    """The child's entries for every bench case of `target`: a kernel at 1.25x its floor (meets
    the floor expectation), SDPA `ratio` times slower (device and wall times that pass the
    timing guards)."""
    from regen.profile import floor_seconds

    out = []
    for case, ratio in zip(spec.bench_cases(target), ratios):
        t = 1.25 * floor_seconds(spec, target, case)[0]
        out.append({"case": case.label("bfloat16"), "ok": True,
                    "timing": {"device_s": [t] * 5, "wall_s": [t * 1.01] * 5},
                    "baselines": {"torch_eager": {"device_s": [t * ratio] * 5}}})
    return out


def test_a_geomean_expectation_judges_the_whole_benchmark_set_once_every_row_is_in():
    from regen.judge.parent import Outcome, _judge_bench
    from regen.profile import GEOMEAN_CASE

    spec, h200 = _attention_with({"speedup": {"torch_eager": 0.98},
                                  "geomean_speedup": {"torch_eager": 1.0}})
    cases = spec.bench_cases(h200)
    assert len(cases) == 6
    # two rows just under parity, the set above it: met (the per-case floor is 0.98)
    ok = Outcome(True, None)
    _judge_bench(spec, h200, cases, _child_results(spec, h200, [1.05, 1.05, 1.04, 1.04, 0.999,
                                                                0.995]), ok)
    (g,) = [c for c in ok.expectations if c["case"] == GEOMEAN_CASE]
    assert ok.ok, ok.reason
    assert g["check"] == "geomean speedup vs torch_eager" and g["cases"] == 6 and g["ok"] is True
    assert g["value"] == pytest.approx((1.05 ** 2 * 1.04 ** 2 * 0.999 * 0.995) ** (1 / 6), abs=1e-3)
    # every row above the per-case floor, the set below 1.0: the kernel fails on the geomean
    slow = Outcome(True, None)
    _judge_bench(spec, h200, cases, _child_results(spec, h200, [0.99] * 6), slow)
    assert not slow.ok and slow.error_kind == "profile"
    assert "geomean speedup vs torch_eager 0.99 < 1.0 (6 cases)" in slow.reason
    # a row under the per-case floor fails on its own even when the geomean is met
    low = Outcome(True, None)
    _judge_bench(spec, h200, cases, _child_results(spec, h200, [1.2] * 5 + [0.97]), low)
    assert not low.ok and "speedup vs torch_eager 0.97 < 0.98" in low.reason


def test_a_geomean_expectation_is_undecided_without_every_benchmark_row_or_baseline():
    from regen.profile import geomean_checks

    spec, h200 = _attention_with({"geomean_speedup": {"torch_eager": 1.0}})
    rows = [{"case": c.label("bfloat16"), "median_s": 1e-3, "baselines": {"torch_eager": 2e-3}}
            for c in spec.bench_cases(h200)]
    assert geomean_checks(spec, h200, rows)[0]["value"] == 2.0
    assert geomean_checks(spec, h200, rows[:-1]) == []          # `regen bench --case`: no set
    rows[2]["baselines"] = {"torch_eager": None}                # SDPA raised on one row
    (g,) = geomean_checks(spec, h200, rows)
    assert g["ok"] is None and g["value"] is None and "undecided" in g["note"]
    # the host column times with noise: the expectation applies on device columns only
    assert geomean_checks(spec, Project(ROOT).target("cpu"), rows) == []


def test_a_geomean_expectation_names_its_baseline_and_wants_a_positive_minimum(tmp_path):
    for bad, words in (({"sdpa": 1.0}, "geomean_speedup: unknown baseline 'sdpa'"),
                       ({"torch_eager": 0}, "expected a positive minimum")):
        spec = yaml.safe_load((ROOT / "specs" / "attention.yaml").read_text())
        spec["profile"]["geomean_speedup"] = bad
        path = tmp_path / "attention.yaml"
        path.write_text(yaml.safe_dump(spec))
        with pytest.raises(InputError) as exc:
            load_spec(path)
        assert words in str(exc.value) and "attention.yaml" in str(exc.value)


def test_the_bench_table_reports_a_geomean_expectation_under_the_rows():
    out = io.StringIO()
    report.bench([{"kernel": "attention", "target": "h200", "case": "a", "median_s": 1e-3,
                   "baselines": {"torch_eager": 1.03e-3}}], False, out,
                 summaries=[{"kernel": "attention", "target": "h200", "cases": 6,
                             "check": "geomean speedup vs torch_eager", "limit": 1.0,
                             "value": 1.029, "ok": True}])
    assert ("attention@h200: geomean speedup vs torch_eager over 6 benchmark cases 1.029x "
            "(expected >= 1.0): met") in out.getvalue()
