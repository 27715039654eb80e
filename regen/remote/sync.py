"""Pull what the remote holds and this project lacks before planning; push what a node produced.

Pull, per selected (kernel, target), in dependency order (so users are keyed on pulled
components):
  - an entry, where the planner would generate: one the remote holds for this very generate key
    (a generation made elsewhere, e.g. by a CI runner) is stored and made current;
  - records of the current and pending entries: each checked as an imported one is
    (regen/records.admit) and marked `fleet` (who pushed it, whose key signed it);
  - the compile result of the current entry for this machine's toolchain, into the local cache.
Push stores the node's entries, records made here and compile results. What the trust policy
does not believe, and what does not match its digest, is refused and counted, never used.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from ..keys import digest
from .config import RemoteConfig
from .objects import RemoteCorrupt, RemoteError, RemoteStore
from .trust import Trust, load_signer

FLEET = "fleet"   # the field a pulled record carries: where it came from


@dataclass
class Report:
    entries: int = 0
    records: int = 0
    compiled: int = 0
    refused: list[str] = field(default_factory=list)     # corrupt or conflicting objects
    untrusted: list[str] = field(default_factory=list)   # not believed under --trust
    skipped: list[str] = field(default_factory=list)     # stale or not about entries here

    def line(self, verb: str) -> str:
        text = f"{verb} {self.entries} entries, {self.records} records, {self.compiled} binaries"
        for name, items in (("refused", self.refused), ("untrusted", self.untrusted),
                            ("skipped", self.skipped)):
            if items:
                text += f"; {name} {len(items)}: " + "; ".join(items[:5]) + \
                    (f" (+{len(items) - 5} more)" if len(items) > 5 else "")
        return text


def clean_record(rec: dict) -> dict:
    """A record as pushed: without local bookkeeping, its seal or where it was pulled from."""
    return {k: v for k, v in rec.items() if not k.startswith("_") and k not in ("digest", FLEET)}


class Sync:
    def __init__(self, config: RemoteConfig):
        self.config = config
        self.remote = RemoteStore(config.url)
        self.trust = Trust(config.trust)
        self.signer = load_signer(config.signing_key) if config.signing_key else None
        self.lock = threading.Lock()
        self.pushed = Report()

    # -- reading envelopes -------------------------------------------------------------------
    def _believed(self, rel: str, report: Report) -> dict | None:
        try:
            env = self.remote.get_envelope(rel)
        except RemoteCorrupt as exc:
            report.refused.append(str(exc))
            return None
        if env is None:
            return None
        signer = env.get("signer") or {}
        why = self.trust.check(digest(env["body"]).encode(), signer.get("key"), env.get("signature"))
        if why:
            report.untrusted.append(f"{rel}: {why} (pushed by {env.get('pushed_by')})")
            return None
        return env

    def _folders(self, prefix: str) -> dict[str, list[str]]:
        out = defaultdict(list)
        for rel in self.remote.list(prefix):
            if rel.endswith(".json"):
                out[rel.rsplit("/", 1)[0]].append(rel)
        return out

    # -- pull --------------------------------------------------------------------------------
    def pull(self, project, store, kernels=None, targets=None) -> Report:
        from .. import plan as planning

        report = Report()
        gens, recs = self._folders("generations"), self._folders("records")
        compiled = self._folders("compiled")
        for spec, target in project.pairs(kernels, targets):
            if project.applies(spec, target):
                continue
            node = planning.plan_node(project, store, spec, target)
            if node.needs_generator or node.action == planning.COMPOSE:
                self._pull_entry(store, node, gens, recs, report)
            entry = store.current(spec.name, target.name)
            if entry is None:
                continue
            self._pull_compiled(entry, target, compiled, report)   # before records: their
            ids = (entry.id, *(e.id for e in store.pending(spec.name, target.name)))  # check compiles
            for entry_id in ids:
                self._pull_records(project, store, spec.name, target.name, entry_id, ids,
                                   recs, report)
        return report

    def _pull_entry(self, store, node, gens, recs, report: Report) -> None:
        folder = f"generations/{node.kernel}/{node.generate_key}"
        candidates = []
        for rel in gens.get(folder, []):
            env = self._believed(rel, report)
            if env and env["body"].get("generate_key") == node.generate_key:
                entry_id = env["body"].get("entry")
                verified = bool(recs.get(f"records/{node.kernel}/{node.target}/{entry_id}"))
                candidates.append((not verified, entry_id))
        for _, entry_id in sorted(candidates):
            try:
                manifest = self.remote.get_manifest(node.kernel, entry_id)
                if manifest is None:
                    continue
                names = [*manifest["files"].values(), manifest["generate"]]
                objects = {d: self.remote.get_object(d) for d in names}
            except RemoteCorrupt as exc:
                report.refused.append(str(exc))
                continue
            if any(v is None for v in objects.values()):
                report.skipped.append(f"{node.label}: entry {entry_id} has objects missing remotely")
                continue
            store.put_manifest(node.kernel, manifest, objects)
            store.point(node.kernel, node.target, entry_id)
            report.entries += 1
            return

    def _pull_records(self, project, store, kernel, target, entry_id, ids, recs, report) -> None:
        from ..records import admit

        have = {digest(clean_record(r)) for r in store.records(kernel, target, entry_id)}
        for rel in recs.get(f"records/{kernel}/{target}/{entry_id}", []):
            if rel.rsplit("/", 1)[1][:32] in {d[:32] for d in have}:
                continue     # this very record is here already (made here, or pulled before)
            env = self._believed(rel, report)
            if env is None:
                continue
            rec = dict(env["body"])
            if (rec.get("kernel"), rec.get("target"), rec.get("entry")) != (kernel, target, entry_id):
                report.refused.append(f"{rel}: names {rec.get('kernel')}@{rec.get('target')} "
                                      f"entry {rec.get('entry')}, not the folder it is in")
                continue
            why = admit(project, store, rec, ids)
            if why:
                report.skipped.append(f"{kernel}@{target}: {why}")
                continue
            signer = env.get("signer")
            rec[FLEET] = {"remote": self.remote.url, "pushed_by": env.get("pushed_by"),
                          "signed_by": (self.trust.name_of(signer["key"]) or signer.get("name")
                                        if signer else None),
                          "key": signer["id"] if signer else None,
                          "pulled_at": _dt.datetime.now(_dt.timezone.utc).isoformat(
                              timespec="seconds")}
            store.put_record(kernel, target, entry_id, rec)
            have.add(digest(clean_record(rec)))
            report.records += 1

    def _compile_key(self, entry, target) -> str | None:
        from .. import keys
        from ..compile import toolchain_identity, toolchain_problem

        if toolchain_problem(target):
            return None
        comps = keys.compile_components(entry.source_digest, toolchain_identity(target))
        return keys.key(comps)

    def _pull_compiled(self, entry, target, compiled, report: Report) -> None:
        from ..localcache import cache
        from ..toolchains import CompileResult

        ckey = self._compile_key(entry, target)
        if ckey is None or cache().get(f"compile:{ckey}") is not None:
            return
        for rel in compiled.get(f"compiled/{ckey}", []):
            env = self._believed(rel, report)
            if env is None:
                continue
            body = env["body"]
            try:
                binary = self.remote.get_object(body["binary"])
                dis = self.remote.get_object(body["disassembly"]) if body.get("disassembly") else None
            except RemoteCorrupt as exc:
                report.refused.append(str(exc))
                continue
            if binary is None or (body.get("disassembly") and dis is None):
                continue
            cache().set(f"compile:{ckey}", CompileResult(
                True, binary, body.get("log", ""), body.get("resources", {}),
                dis.decode() if dis is not None else None, float(body.get("seconds", 0.0))))
            report.compiled += 1
            return

    # -- push --------------------------------------------------------------------------------
    def push(self, project, store, kernel: str, target_name: str) -> Report:
        """Push the node's current and pending entries, the records made here (not those pulled)
        and their compile results. Idempotent: what is there already is only read back."""
        report = self.pushed
        target = project.target(target_name)
        with self.lock:
            entries = [e for e in (store.current(kernel, target_name),
                                   *store.pending(kernel, target_name)) if e is not None]
            for entry in entries:
                try:
                    self._push_entry(store, entry, target, report)
                except RemoteError as exc:
                    report.refused.append(f"{kernel}@{target_name}: {exc}")
        return report

    def _push_entry(self, store, entry, target, report: Report) -> None:
        from ..localcache import cache

        for d in (*entry.manifest["files"].values(), entry.manifest["generate"]):
            self.remote.put_object(store.read_object(d))
        self.remote.put_manifest(entry.kernel, entry.id, entry.manifest)
        self._envelope(f"generations/{entry.kernel}/{entry.generate_key}",
                       {"kernel": entry.kernel, "family": entry.family,
                        "generate_key": entry.generate_key, "entry": entry.id})
        report.entries += 1
        for rec in store.records(entry.kernel, target.name, entry.id):
            if rec.get(FLEET):
                continue     # pulled: its pusher's envelope is there already
            self._envelope(f"records/{entry.kernel}/{target.name}/{entry.id}", clean_record(rec))
            report.records += 1
        ckey = self._compile_key(entry, target)
        hit = cache().get(f"compile:{ckey}") if ckey else None
        if hit is not None and hit.ok:
            body = {"ok": True, "binary": self.remote.put_object(hit.binary), "log": hit.log[-4000:],
                    "resources": hit.resources, "seconds": hit.seconds,
                    "disassembly": self.remote.put_object(hit.disassembly.encode())
                    if hit.disassembly else None}
            self._envelope(f"compiled/{ckey}", body)
            report.compiled += 1

    def _envelope(self, folder: str, body: dict) -> str:
        return self.remote.put_envelope(folder, body, self.config.pushed_by, self.signer)
