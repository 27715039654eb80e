"""Verify stage, parent side: run the worker in a child process and judge what it observed.

The kernel runs only in the child (regen/worker.py), under a timeout; a crash, a hang or an illegal
address fails the node with a reason and the build goes on. Seeds are fresh for every run unless
fixed; with REGEN_SECRET_SEED set they derive from that secret and are never printed or stored.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, hardware, keys
from .profile import dynamic_checks, judge_timing
from .spec import Case

REGEN_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


@dataclass
class Settings:
    seeds: int = 2                 # fresh seeds per correctness case
    fixed_seed: int | None = None  # reproduce a failure
    timeout_s: float = 600.0
    bench: bool = False            # time the benchmark cases (and baselines)
    iters: int | None = None
    warmup: int = 3
    baselines: tuple[str, ...] | None = None
    include_bench_cases: bool | None = None   # correctness on the large cases too (GPU default)


@dataclass
class Outcome:
    ok: bool
    reason: str | None
    cases: list[dict] = field(default_factory=list)
    fingerprint: dict | None = None
    seeds: object = None
    bench: list[dict] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    error_kind: str | None = None      # crash | timeout | oracle | None


def _seed_source(settings: Settings):
    secret = os.environ.get("REGEN_SECRET_SEED")
    if settings.fixed_seed is not None:
        return (lambda i: settings.fixed_seed + i), [settings.fixed_seed]
    if secret:
        def derive(i):
            return int.from_bytes(hashlib.sha256(f"{secret}:{i}".encode()).digest()[:4], "little")
        return derive, "secret"
    base = int.from_bytes(os.urandom(4), "little")
    return (lambda i: (base + 7919 * i) % 2**31), None


def run_worker(job: dict, timeout_s: float) -> dict:
    """Run one job in a child process; never raises for anything the kernel does."""
    with tempfile.TemporaryDirectory(prefix="regen-verify-") as tmp:
        result = Path(tmp) / "result.json"
        job = {**job, "result": str(result)}
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REGEN_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env.pop("ANTHROPIC_API_KEY", None)  # untrusted code never sees credentials
        env.pop("REGEN_SECRET_SEED", None)
        proc = subprocess.Popen([sys.executable, "-m", "regen.worker", str(job_path)], cwd=tmp,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s (a hang, or far too slow)",
                    "kind": "timeout"}
        if result.exists():
            data = json.loads(result.read_text())
            if "error" in data:
                data["kind"] = "crash"
            return data
        tail = err.decode(errors="replace")[-1500:]
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            return {"error": f"the child process died with {name}: {tail.strip()[-400:]}",
                    "kind": "crash"}
        return {"error": f"the child process exited {proc.returncode} without a result: "
                         f"{tail.strip()[-600:]}", "kind": "crash"}


def run(spec, target, oracle_path: Path, recipe: str, binary: bytes, settings: Settings,
        cases: list[Case] | None = None) -> Outcome:
    """Verify (and with settings.bench, time) one binary against the oracle."""
    seed_of, seeds_label = _seed_source(settings)
    gpu = target.vendor != "host"
    include_bench = settings.include_bench_cases if settings.include_bench_cases is not None else gpu
    if cases is None:
        cases = [c for c in spec.cases if not c.bench or include_bench or settings.bench]
    items, used = [], []
    n = 0
    for case in cases:
        seeds = [seed_of(n + i) for i in range(1 if case.bench else settings.seeds)]
        n += len(seeds)
        item = {"case": case.model_dump(mode="json"), "seeds": seeds,
                "verify": (not case.bench) or include_bench or settings.bench}
        if settings.bench and case.bench:
            item["time"] = True
            item["time_seeds"] = [seed_of(n + i) for i in range(3)]
            n += 3
        used.extend(seeds)
        items.append(item)
    iters = settings.iters or (50 if gpu else 10)
    baselines = settings.baselines if settings.baselines is not None else (
        ("torch_eager", "torch_compile") if gpu else ("torch_eager",))
    with tempfile.TemporaryDirectory(prefix="regen-bin-") as tmp:
        binary_path = Path(tmp) / "kernel.bin"
        binary_path.write_bytes(binary)
        job = {"language": target.language, "binary": str(binary_path), "recipe": recipe,
               "oracle": str(oracle_path.resolve()), "spec": spec.model_dump(mode="json"),
               "cases": items,
               "timing": {"iters": iters, "warmup": settings.warmup, "baselines": list(baselines)}}
        data = run_worker(job, settings.timeout_s)
    seeds_out = seeds_label if seeds_label is not None else used
    if "error" in data:
        return Outcome(False, data["error"], fingerprint=None, seeds=seeds_out,
                       error_kind=data.get("kind", "crash"))
    results = data["cases"]
    for r in results:
        if seeds_label == "secret":
            r["seeds"] = "secret"
            r.pop("failing_seed", None)
    bad = next((r for r in results if not r.get("ok", True)), None)
    outcome = Outcome(bad is None, None, results, data.get("fingerprint"), seeds_out)
    if bad:
        outcome.reason = f"case {bad['case']}: {bad.get('reason')}" + (
            f" [guard: {bad['guard']}]" if bad.get("guard") else "")
        outcome.error_kind = bad.get("guard")
    if len(results) < len(items) and outcome.ok:
        outcome.ok, outcome.reason = False, "the child stopped before every case ran"
    if settings.bench:
        _judge_bench(spec, target, cases, results, outcome)
    return outcome


def _judge_bench(spec, target, cases, results, outcome: Outcome) -> None:
    by_label = {c.label(spec.signature.dtypes[0]): c for c in cases}
    for r in results:
        if "timing" not in r:
            continue
        case = by_label[r["case"]]
        t = judge_timing(spec, target, case, r["timing"])
        if r["timing"].get("ok") is False:
            t = {**t, "ok": False, "guard": r["timing"].get("guard"),
                 "reason": "after timing: " + str(r["timing"].get("reason"))}
        base = {}
        for name, b in (r.get("baselines") or {}).items():
            from .profile import median
            base[name] = median(b.get("device_s", [])) if "error" not in b else None
            if "error" in b:
                t.setdefault("baseline_errors", {})[name] = b["error"]
        checks = dynamic_checks(spec, target, t, base) if t.get("ok") else []
        row = {"case": r["case"], **{k: v for k, v in t.items()}, "baselines": base,
               "checks": checks, "bytes": spec.case_bytes(case), "flops": spec.case_flops(case)}
        outcome.bench.append(row)
        outcome.expectations.extend({**c, "case": r["case"]} for c in checks)
        if not t.get("ok") and outcome.ok:
            outcome.ok = False
            outcome.reason = f"case {r['case']}: {t.get('reason')} [guard: {t.get('guard')}]"
            outcome.error_kind = t.get("guard")


def make_record(spec, target, entry, compiled, outcome: Outcome, verify_components: dict,
                static: list[dict]) -> dict:
    """A verification record: who, where, when, with what inputs and errors. Never fabricated:
    every field comes from this run."""
    fp = hardware.local(target) or outcome.fingerprint or {}
    ident = hardware.identity(fp)
    runtime = hardware.runtime_versions(target)
    full = keys.add_machine(verify_components, {**ident, "runtime": runtime})
    return {
        "schema": 1, "kernel": spec.name, "target": target.name, "entry": entry.id,
        "verified_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "regen": __version__, "hardware": ident, "hardware_detail": outcome.fingerprint,
        "runtime": runtime,
        "compile": {"toolchain": compiled.components["toolchain"],
                    "binary": compiled.binary_digest, "resources": compiled.result.resources},
        "verify": full, "verify_key": keys.key(full),
        "seeds": outcome.seeds, "ok": outcome.ok, "reason": outcome.reason,
        "cases": [{k: v for k, v in c.items() if k not in ("traceback", "timing", "baselines")}
                  for c in outcome.cases],
        "bench": outcome.bench, "expectations": static + outcome.expectations,
    }
