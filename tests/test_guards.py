"""The guard registry (regen/judge/guards.py) against everything that names a guard: docs/oracle.md
and the red-team cases may name only registered guards, every registered guard has a red-team
case that exists and names it, and an unregistered name cannot reach a verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from regen.judge import GUARDS, CaseResult, Rejected, Rejection
from regen.judge.guards import STAGES

ROOT = Path(__file__).resolve().parent.parent
REDTEAM = ROOT / "tests" / "redteam"
ORACLE_MD = ROOT / "docs" / "oracle.md"
GUARD_KEYS = ("guard", "also_guard", "unconfined_guard", "or_guard")


def redteam_cases() -> dict[str, dict]:
    """Every red-team folder (`cpu/noop`) and its redteam.yaml."""
    return {f"{p.parent.parent.name}/{p.parent.name}": yaml.safe_load(p.read_text())
            for p in sorted(REDTEAM.glob("*/*/redteam.yaml"))}


def guards_named(meta: dict) -> set[str]:
    return {meta[k] for k in GUARD_KEYS if k in meta}


def oracle_md_guards() -> set[str]:
    """Every `[guard: NAME]` on the page and every name in its "Guards by name" table."""
    text = ORACLE_MD.read_text()
    names = set(re.findall(r"\[guard: ([^\]]+)\]", text)) - {"NAME"}  # NAME: the placeholder
    table = text.split("## Guards by name", 1)[1].split("\n## ", 1)[0]
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and "`" in cells[1]:
            names |= set(re.findall(r"`([^`]+)`", cells[1]))
    return names


def test_oracle_md_names_only_registered_guards_and_lists_every_one():
    named = oracle_md_guards()
    assert named - GUARDS.keys() == set()
    assert GUARDS.keys() - named == set(), "registered guards missing from docs/oracle.md"


def test_every_redteam_case_names_only_registered_guards():
    for name, meta in redteam_cases().items():
        unknown = guards_named(meta) - GUARDS.keys()
        assert not unknown, f"tests/redteam/{name}/redteam.yaml names {sorted(unknown)}"


def test_every_redteam_case_that_names_a_guard_is_listed_under_it():
    for name, meta in redteam_cases().items():
        for guard in guards_named(meta):
            assert name in GUARDS[guard].redteam, f"{name} proves {guard} but is not listed there"


@pytest.mark.parametrize("guard", sorted(GUARDS))
def test_every_guard_has_a_redteam_case_that_exists_and_names_it(guard):
    g = GUARDS[guard]
    assert g.name == guard and g.stage in STAGES and g.redteam
    assert all(1 <= n <= 15 for n in g.loopholes)  # docs/reward-hacks.md's numbering
    cases = redteam_cases()
    for ref in g.redteam:
        if "::" in ref:
            path, test = ref.split("::")
            source = (ROOT / path).read_text()
            assert re.search(rf"^def {re.escape(test)}\(", source, re.M), f"{ref} does not exist"
        else:
            assert ref in cases, f"tests/redteam/{ref} does not exist"
            assert guard in guards_named(cases[ref]), f"{ref}'s redteam.yaml does not name {guard}"


def test_an_unregistered_guard_cannot_be_raised():
    with pytest.raises(ValueError, match="not a registered guard"):
        Rejected("tolerence", "a typo")
    with pytest.raises(ValueError, match="not a registered guard"):
        Rejection("made-up", "x")
    with pytest.raises(ValueError, match="not a registered guard"):
        CaseResult.failed("", "no name")
    assert Rejected("tolerance", "r").rejection == Rejection("tolerance", "r")


def test_case_results_keep_the_record_format():
    """The JSON that crosses the pipe and lands in records is what it was before the types."""
    assert CaseResult.passed(1e-7, 2e-6).to_json() == {"ok": True, "max_abs": 1e-7, "max_rel": 2e-6}
    failed = CaseResult.failed("tolerance", "y: 3 of 21 elements", 0.5, 0.25)
    assert list(failed.to_json().items()) == [("ok", False), ("max_abs", 0.5), ("max_rel", 0.25),
                                              ("guard", "tolerance"), ("reason", "y: 3 of 21 elements")]
    assert CaseResult.failed("threads", "t").to_json() == {"ok": False, "guard": "threads",
                                                           "reason": "t"}
    assert CaseResult.from_json(failed.to_json()) == failed
    assert Rejection("crash", "died").tagged() == "died [guard: crash]"
