"""Verification records travel: made on the GPU machine (`regen verify --export FILE`), imported
here (`regen record import FILE`) into cache/. A record is imported only if it is about the entry
that is current here or one pending for that target, with the same oracle, tolerances, cases and
recipe; where the toolchain is available, the binary built here must be the very binary that was
verified. A passing record of a pending entry makes it current here, as `regen verify` did there."""

from __future__ import annotations

import json
from pathlib import Path

from . import keys
from .compile import compile_source, toolchain_problem
from .errors import InputError
from .oracle import legacy_digests


def import_records(project, store, path: Path) -> tuple[int, list[str], list[str]]:
    """(records imported, why each refused one was, one line per pending entry made current)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("file not found", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise InputError("expected {\"records\": [...]} as written by `regen verify --export`",
                         file=str(path), field="records")
    imported, skipped, promoted = 0, [], []
    for rec in records:
        spec, target = project.spec(rec["kernel"]), project.target(rec["target"])
        current = store.current(spec.name, target.name)
        pending = [e.id for e in store.pending(spec.name, target.name)]
        why = admit(project, store, rec, ((current.id,) if current else ()) + tuple(pending))
        if why:
            skipped.append(f"{rec.get('kernel')}@{rec.get('target')}: {why}")
            continue
        store.put_record(spec.name, target.name, rec["entry"], rec)
        imported += 1
        if rec["entry"] in pending and rec.get("ok"):
            store.point(spec.name, target.name, rec["entry"])
            where = (rec.get("hardware") or {}).get("device") or "its hardware"
            promoted.append(f"{spec.name}@{target.name}: pending entry {rec['entry']} passed on "
                            f"{where}; it is current now")
    return imported, skipped, promoted


def admit(project, store, rec: dict, entry_ids: tuple[str, ...] | None = None) -> str | None:
    """Why a record made elsewhere cannot be stored here (None: it can). It must be about an
    entry this project holds for the target (the current one, or one of `entry_ids`), with the same
    oracle, tolerances, cases and recipe; where the toolchain is here, the binary built here must
    be the very binary that was verified. Records of older regens are re-keyed (and say so)."""
    spec, target = project.spec(rec["kernel"]), project.target(rec["target"])
    current = store.current(spec.name, target.name)
    ids = entry_ids if entry_ids is not None else ((current.id,) if current else ())
    entry = store.entry(spec.name, rec.get("entry", "")) if rec.get("entry") in ids else None
    if entry is None:
        return (f"entry {rec.get('entry')} is not the current one here"
                + (" nor pending" if len(ids) > 1 else ""))
    oracle = project.oracle_digest(spec.name)
    legacy = legacy_digests(project.oracle_path(spec.name))
    had = rec["verify"].get("oracle")
    if had != oracle and had in legacy:
        # same oracle source, digest written by an older regen on another Python version
        rec["verify"]["oracle"] = oracle
        rec["verify_key"] = keys.key(rec["verify"])
        rec.setdefault("migrated", []).append(
            f"verify.oracle re-keyed from {had[:12]} ({legacy[had]} of the same source) to the "
            f"version-independent digest {oracle[:12]}")
    if "judge" not in rec["verify"] and _timed_by_judge_2(rec):
        rec["verify"]["judge"] = 2
        rec["verify_key"] = keys.key(rec["verify"])
        rec.setdefault("migrated", []).append(
            "verify.judge set to 2: every benchmark row carries launch_exposed, which only "
            "judge 2's timing (launch overhead outside the device timer) writes")
    want = keys.verify_components(spec, target, oracle,
                                  rec["verify"].get("binary", ""), entry.recipe_digest,
                                  project.composed_verify(spec))
    diffs = keys.differences(keys.portable(rec["verify"]), want)
    if diffs:
        return f"stale ({'; '.join(diffs)})"
    if toolchain_problem(target) is None:
        compiled = compile_source(entry.source(), target)
        if compiled.binary_digest != rec["compile"]["binary"]:
            return (f"the binary built here ({str(compiled.binary_digest)[:12]}) is not the "
                    f"verified one ({rec['compile']['binary'][:12]}); toolchains differ")
    return None


def _timed_by_judge_2(rec: dict) -> bool:
    """A GPU record exported between the timing fix and the judge component: its timing rows say
    which judge made them."""
    bench = rec.get("bench") or []
    return bool(bench) and all("launch_exposed" in row for row in bench)
