"""Verification records travel: made on the GPU machine (`regen verify --export FILE`), imported
here (`regen record import FILE`) into cache/. A record is imported only if it is about the entry
that is current here, with the same oracle, tolerances, cases and recipe; where the toolchain is
available, the binary built here must be the very binary that was verified."""

from __future__ import annotations

import json
from pathlib import Path

from . import keys
from .compile import compile_source, toolchain_problem
from .errors import InputError


def import_records(project, store, path: Path) -> tuple[int, list[str]]:
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
    imported, skipped = 0, []
    for rec in records:
        label = f"{rec.get('kernel')}@{rec.get('target')}"
        spec, target = project.spec(rec["kernel"]), project.target(rec["target"])
        entry = store.current(spec.name, target.name)
        if entry is None or entry.id != rec.get("entry"):
            skipped.append(f"{label}: entry {rec.get('entry')} is not the current one here")
            continue
        want = keys.verify_components(spec, target, project.oracle_digest(spec.name),
                                      rec["verify"].get("binary", ""), entry.recipe_digest)
        diffs = keys.differences(keys.portable(rec["verify"]), want)
        if diffs:
            skipped.append(f"{label}: stale ({'; '.join(diffs)})")
            continue
        if toolchain_problem(target) is None:
            compiled = compile_source(entry.source(), target)
            if compiled.binary_digest != rec["compile"]["binary"]:
                skipped.append(f"{label}: the binary built here ({str(compiled.binary_digest)[:12]}) "
                               f"is not the verified one ({rec['compile']['binary'][:12]}); "
                               "toolchains differ")
                continue
        store.put_record(spec.name, target.name, entry.id, rec)
        imported += 1
    return imported, skipped
