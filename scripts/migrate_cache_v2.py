"""Move a schema-1 cache/ (one folder of files per kernel and target) to schema 2 (bytes stored once
by digest, manifests and records pointing at them, one generation per target family).

Run once from the project root: `python scripts/migrate_cache_v2.py [--dry-run]`. It changes no
verdict; the rules it applies, each written into what it migrates:

- generate key: an entry that was up to date under schema 1 (its generate components equal what
  schema 1 computes for today's spec and target) gets the schema-2 components for its family; a
  stale one keeps its old components, so it stays stale.
- source: the per-target line schema 1 put on top of every source is dropped. A record carries over
  to the new entry only when this machine compiles the new source with the toolchain the record
  names into the very binary the record verified (same sha256); otherwise the script stops.
- entries that become equal (family members holding the same code for the same generation) are
  stored once; the provenance of the first accepted stays, and every member's own provenance is
  kept beside it under `members`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from regen import keys  # noqa: E402
from regen.compile import compile_source, toolchain_identity  # noqa: E402
from regen.project import Project  # noqa: E402
from regen.prompt import TEMPLATE_VERSION  # noqa: E402
from regen.store import Store, strip_legacy_header  # noqa: E402

V1_TEMPLATE = "regen-prompt-1"
RULE_GENERATE = ("schema 1 -> 2: the entry was up to date under schema 1 (its generate components "
                 "equal schema 1's for the same spec and target), so it answers the family's "
                 "schema-2 generation")
RULE_STALE = "schema 1 -> 2: the entry was stale under schema 1 and keeps its old generate components"
RULE_RECORD = ("schema 1 -> 2: entry {old} became {new}; the per-target header line was dropped "
               "from the source and this machine compiled the new source with the record's "
               "toolchain into the binary the record verified ({binary})")


def v1_view(target) -> dict:
    return {"name": target.name, "description": target.description, "vendor": target.vendor,
            "arch": target.arch, "language": target.language, "limits": dict(target.limits),
            "features": list(target.features), "notes": target.notes,
            "taxonomy": [c.model_dump() for c in target.taxonomy]}


def v1_components(spec, target) -> dict:
    comps = keys.generate_components(spec, v1_view(target), {}, V1_TEMPLATE)
    return {**comps, "schema": 1}


def old_entries(cache: Path):
    """(kernel, target, folder, manifest, records) of every live schema-1 entry."""
    for ptr in sorted(cache.glob("*/*/current.json")):
        kernel, target = ptr.parent.parent.name, ptr.parent.name
        entry_id = json.loads(ptr.read_text())["entry"]
        folder = ptr.parent / entry_id
        manifest_path = folder / "manifest.json"
        if not manifest_path.exists():
            continue  # already schema 2 (the entry lives in cache/<kernel>/entries/)
        manifest = json.loads(manifest_path.read_text())
        records = [(p, json.loads(p.read_text()))
                   for p in sorted((ptr.parent / "records").glob(f"{entry_id}-*.json"))]
        yield kernel, target, folder, manifest, records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = ap.parse_args()
    project = Project(ROOT)
    store = Store(project.cache_dir)
    plan = []
    for kernel, tname, folder, manifest, records in old_entries(project.cache_dir):
        spec, target = project.spec(kernel), project.target(tname)
        if spec.components:
            raise SystemExit(f"{kernel}: composed specs are not migrated by this script")
        source_name = next(n for n in manifest["files"] if n != "launch.yaml")
        source = strip_legacy_header((folder / source_name).read_text())
        recipe = (folder / "launch.yaml").read_text()
        provenance = json.loads((folder / "provenance.json").read_text())
        up_to_date = manifest["generate"] == v1_components(spec, target)
        if up_to_date:
            gen = keys.generate_components(spec, project.generation_view(target), {},
                                           TEMPLATE_VERSION)
            rule = RULE_GENERATE
        else:
            gen, rule = manifest["generate"], RULE_STALE
        carried = []
        for path, rec in records:
            compiled = compile_source(source, target, use_cache=False)
            same_tool = rec.get("compile", {}).get("toolchain") == toolchain_identity(target)
            if not (same_tool and compiled.binary_digest == rec["compile"]["binary"]):
                raise SystemExit(f"{path}: cannot prove the new source compiles to the verified "
                                 "binary here (toolchain or binary differs); not migrating")
            carried.append((path, rec, compiled.binary_digest))
        plan.append(dict(kernel=kernel, target=tname, family=target.family_name, folder=folder,
                         old_id=folder.name, old_key=manifest["generate_key"], language=manifest["language"],
                         source=source, recipe=recipe, provenance=provenance, gen=gen,
                         key=keys.key(gen), rule=rule, records=carried))

    # members whose entries become one share it: the earliest provenance leads, all are kept
    shared: dict[tuple, list] = {}
    for item in plan:
        ident = (item["kernel"], keys.digest(item["source"].encode()),
                 keys.digest(item["recipe"].encode()), item["key"])
        shared.setdefault(ident, []).append(item)
    for group in shared.values():
        group.sort(key=lambda i: i["provenance"].get("accepted_at", ""))
        lead = dict(group[0]["provenance"])
        if len(group) > 1:
            lead["members"] = {i["target"]: i["provenance"] for i in group}
        for item in group:
            item["stored_provenance"] = lead

    for item in plan:
        label = f"{item['kernel']}@{item['target']}"
        migrated = {"from_schema": 1, "entries": sorted(
            f"{i['target']}:{i['old_id']}" for g in shared.values() if item in g for i in g),
            "rule": item["rule"]}
        if args.dry_run:
            print(f"{label}: {item['old_id']} -> family {item['family']} "
                  f"({len(item['records'])} record(s) carried)")
            continue
        (item["folder"].parent / "current.json").unlink()   # names the schema-1 folder
        entry = store.put(item["kernel"], item["target"], item["language"], item["source"],
                          item["recipe"], item["stored_provenance"], item["gen"], item["key"],
                          family=item["family"], migrated=migrated)
        for path, rec, binary in item["records"]:
            rec = dict(rec, entry=entry.id)
            rec.setdefault("migrated", []).append(RULE_RECORD.format(
                old=item["old_id"], new=entry.id, binary=binary[:16]))
            store.put_record(item["kernel"], item["target"], entry.id, rec)
            if path.name != f"{entry.id}-{path.name.split('-', 1)[1]}":
                path.unlink()
        shutil.rmtree(item["folder"])
        print(f"{label}: {item['old_id']} -> {entry.id} (family {item['family']}, "
              f"{len(item['records'])} record(s) carried)")
    if not args.dry_run:
        removed = store.gc()
        print(f"{len(plan)} entries migrated; {len(removed)} leftovers removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
