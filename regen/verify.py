"""Verify stage, parent side: run the worker in a child process and judge what it observed.

The kernel runs only in the child (regen/worker.py), under a timeout; a crash, a hang or an illegal
address fails the node with a reason and the build goes on. Seeds are fresh for every run unless
fixed; with REGEN_SECRET_SEED set they derive from that secret and are never printed or stored.
Hidden cases (every correctness case with its sizes moved by a secret step, alignment kept) catch
kernels specialised on the listed shapes; they run with REGEN_SECRET_SEED or REGEN_HIDDEN_CASES=1.
The child's result is authenticated with a one-time key sent over its stdin (never on disk), and an
oracle whose reference is constant or seed-independent on every case fails the run (a kernel could
pass it without reading its inputs). Every failure reason ends with `[guard: NAME]`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
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
    hidden_cases: bool | None = None  # None: on with REGEN_SECRET_SEED or REGEN_HIDDEN_CASES=1


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


def hidden_variants(spec, cases: list[Case], settings: Settings) -> list[Case]:
    """One hidden case per correctness case: every size moved up by 1-3 times its largest
    power-of-two factor (capped at 64), so alignment and evenness are kept but no listed shape is
    hit. The step derives from the secret (or the fixed seed, or fresh randomness) and is not shown
    when the secret is set."""
    enabled = settings.hidden_cases
    if enabled is None:
        enabled = bool(os.environ.get("REGEN_SECRET_SEED")) or \
            os.environ.get("REGEN_HIDDEN_CASES", "").lower() in ("1", "true", "yes")
    if not enabled:
        return []
    secret = os.environ.get("REGEN_SECRET_SEED")
    salt = secret if secret else (str(settings.fixed_seed) if settings.fixed_seed is not None
                                  else os.urandom(8).hex())
    dtype0 = spec.signature.dtypes[0]
    listed = {tuple(sorted(c.sizes.items())) for c in spec.cases}
    out = []
    for i, case in enumerate(cases):
        if case.bench:
            continue
        sizes = {}
        for k, v in case.sizes.items():
            step = min(v & -v, 64) if v > 0 else 0
            r = 1 + hashlib.sha256(f"{salt}:hidden:{i}:{k}".encode()).digest()[0] % 3
            sizes[k] = v + r * step
        if sizes == case.sizes or tuple(sorted(sizes.items())) in listed:
            continue
        data = {**case.model_dump(mode="json"), **sizes}
        probe = Case.model_validate({**data, "name": None})
        data["name"] = (f"hidden variant of {case.label(dtype0)}" if secret else
                        f"hidden {probe.label(dtype0)} (variant of {case.label(dtype0)})")
        out.append(Case.model_validate(data))
    return out


def degenerate_oracle(results: list[dict]) -> str | None:
    """The reason an oracle verifies nothing: on every case (every normal-distribution case when
    there are any) its reference output is constant within tolerance or the same for every seed."""
    noted = [r for r in results if "ref_constant" in r]
    normal = [r for r in noted if r.get("dist", "normal") == "normal"]
    considered = normal or noted
    if not considered:
        return None
    if all(r["ref_constant"] or r.get("seed_dependent") is False for r in considered):
        return ("the oracle is degenerate: on every case the reference output is constant within "
                "tolerance or does not depend on the seed, so a kernel can pass without reading "
                "its inputs (fix the oracle's reference or make_inputs)")
    return None


def run_worker(job: dict, timeout_s: float) -> dict:
    """Run one job in a child process; never raises for anything the kernel does."""
    key = os.urandom(32)
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
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(input=key.hex().encode() + b"\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"timed out after {timeout_s:.0f} s (a hang, or far too slow)",
                    "kind": "timeout"}
        if result.exists() or result.is_symlink():
            return _unseal(result, key)
        tail = err.decode(errors="replace")[-1500:]
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            return {"error": f"the child process died with {name}: {tail.strip()[-400:]}",
                    "kind": "crash"}
        return {"error": f"the child process exited {proc.returncode} without a result: "
                         f"{tail.strip()[-600:]}", "kind": "crash"}


def _unseal(path: Path, key: bytes) -> dict:
    """The child's result, only if it carries a valid MAC under this run's key."""
    forged = {"kind": "result-integrity"}
    try:
        sealed = json.loads(path.read_text())
        body, mac = sealed["body"], sealed["mac"]
        want = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not (isinstance(mac, str) and hmac.compare_digest(mac, want)):
            return {**forged, "error": "the result file does not carry this run's key: it was "
                                       "written or altered by something other than the verifier"}
        data = json.loads(body)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {**forged, "error": f"the result file is not the verifier's ({type(exc).__name__}): "
                                   "it was written or altered by something other than the verifier"}
    if "error" in data:
        data["kind"] = "crash"
    return data


def lint_oracle(spec, oracle_path: Path, seeds: int = 2, timeout_s: float = 600.0) -> list[str]:
    """Oracle lint in a child process (imports torch there): one problem per finding, empty when
    the reference depends on its inputs. Runs make_inputs and reference on the correctness cases
    for `seeds` fresh seeds; no artifact is involved."""
    seed_of, _ = _seed_source(Settings())
    cases = [c for c in spec.cases if not c.bench]
    job = {"mode": "lint", "language": "cpp", "oracle": str(Path(oracle_path).resolve()),
           "spec": spec.model_dump(mode="json"), "recipe": None, "binary": None,
           "cases": [{"case": c.model_dump(mode="json")} for c in cases],
           "lint_seeds": [seed_of(i) for i in range(max(2, seeds))]}
    data = run_worker(job, timeout_s)
    if "error" in data:
        return [f"the oracle could not be run: {data['error']}"]
    problem = degenerate_oracle(data["lint"])
    return [problem] if problem else []


def run(spec, target, oracle_path: Path, recipe: str, binary: bytes, settings: Settings,
        cases: list[Case] | None = None) -> Outcome:
    """Verify (and with settings.bench, time) one binary against the oracle."""
    seed_of, seeds_label = _seed_source(settings)
    gpu = target.vendor != "host"
    include_bench = settings.include_bench_cases if settings.include_bench_cases is not None else gpu
    if cases is None:
        cases = [c for c in spec.cases if not c.bench or include_bench or settings.bench]
    cases = list(cases) + hidden_variants(spec, cases, settings)
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
        kind = data.get("kind", "crash")
        return Outcome(False, f"{data['error']} [guard: {kind}]", fingerprint=None, seeds=seeds_out,
                       error_kind=kind)
    if "rejected" in data:
        rej = data["rejected"]
        return Outcome(False, f"{rej['reason']} [guard: {rej['guard']}]", fingerprint=None,
                       seeds=seeds_out, error_kind=rej["guard"])
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
        outcome.ok, outcome.reason = False, "the child stopped before every case ran [guard: crash]"
        outcome.error_kind = "crash"
    degenerate = degenerate_oracle(results) if outcome.ok else None
    if degenerate:
        outcome.ok, outcome.error_kind = False, "oracle"
        outcome.reason = f"{degenerate} [guard: degenerate-oracle]"
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
            also = f"; also {t['reason']} [guard: {t['guard']}]" if t.get("ok") is False else ""
            t = {**t, "ok": False, "guard": r["timing"].get("guard"),
                 "reason": "after timing: " + str(r["timing"].get("reason")) + also}
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
        missed = [c for c in checks if c.get("ok") is False]
        if missed and outcome.ok:
            # the spec's performance expectations are part of passing: a correct but slow
            # implementation fails, with the figures the search loop needs to improve it
            outcome.ok = False
            outcome.reason = f"case {r['case']}: profile expectations not met: " + "; ".join(
                f"{c['check']} {c['value']} < {c['limit']}" for c in missed) + (
                f" ({t['median_s'] * 1e6:.1f} µs, floor {t['floor_s'] * 1e6:.1f} µs)"
                if t.get("floor_s") else "")
            outcome.error_kind = "profile"


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
