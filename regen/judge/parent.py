"""Verify stage, parent side: run the child and judge what it observed.

The kernel runs only in the child (child.py), under a timeout; a crash, a hang or an illegal
address fails the node with a reason and the build goes on. Seeds are fresh for every run unless
fixed; with REGEN_SECRET_SEED set they derive from that secret and are never printed or stored.
Hidden cases (every correctness case with its sizes moved by a secret step, alignment kept) catch
kernels specialised on the listed shapes; they always run. Every benchmark case is checked too, on
every column: where its buffers exceed the host's check budget, a same-regime variant (the
outermost sizes made smaller at random, alignment classes and the recipe's `when` branches kept)
is checked instead; `regen bench` checks the full case in its timed iterations.
An oracle whose reference is constant or seed-independent on every case fails the run (a kernel
could pass it without reading its inputs). Every failure reason ends with `[guard: NAME]`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__, hardware, keys
from ..artifact import LANGUAGES
from ..spec import Case
from .channel import run_child
from .degenerate import degenerate_oracle
from .results import CaseResult, Rejection
from .timing import judge_timing, median


@dataclass
class Settings:
    seeds: int = 2                 # fresh seeds per correctness case
    fixed_seed: int | None = None  # reproduce a failure
    timeout_s: float = 600.0
    bench: bool = False            # time the benchmark cases (and baselines)
    iters: int | None = None
    warmup: int = 3
    baselines: tuple[str, ...] | None = None
    peers: bool = True             # with bench: time the oracle's peers() beside the baselines
    include_bench_cases: bool = True  # correctness on the benchmark cases too (every column)
    hidden_cases: bool = True         # a hidden variant of every correctness case
    host_check_bytes: int = 64 << 20  # host column: a bench case whose buffers exceed this is
    #                                   checked as a same-regime variant (CI: 2 cores)
    host_bench_bytes: int | None = None  # host column, timed: a bench case whose buffers exceed
    #                                      this is timed as one fixed same-regime variant (builds:
    #                                      every candidate on the same case); None: full size


@dataclass
class Outcome:
    ok: bool
    reason: str | None
    cases: list[dict] = field(default_factory=list)
    fingerprint: dict | None = None
    seeds: object = None
    bench: list[dict] = field(default_factory=list)
    expectations: list[dict] = field(default_factory=list)
    error_kind: str | None = None      # the guard that failed it, or "profile"; None when ok
    placement: dict | None = None      # verified by another machine (a fleet worker): its
    #                                    fingerprint, runtime versions, host, node and GPU

    def fail(self, reason: str, kind: str | None) -> None:
        """The first failure decides the verdict."""
        if self.ok:
            self.ok, self.reason, self.error_kind = False, reason, kind


HOST_BENCH_SALT = "host-bench"
HOST_BENCH_BYTES = 8 << 20
"""Timed host cases during builds: every buffer of a case together within 8 MiB, a few ms per
call on a 2-core machine, so a candidate's bench cases, baseline and re-timing take seconds."""


def seed_source(settings: Settings):
    """(seed of the i-th draw, how seeds are reported: a list, "secret", or None for 'as used')."""
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
    if not settings.hidden_cases:
        return []
    secret = os.environ.get("REGEN_SECRET_SEED")
    salt = _salt(settings)
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


def _salt(settings: Settings) -> str:
    secret = os.environ.get("REGEN_SECRET_SEED")
    return secret if secret else (str(settings.fixed_seed) if settings.fixed_seed is not None
                                  else os.urandom(8).hex())


def tensor_bytes(spec, case: Case) -> int:
    """Bytes of every input and output buffer of one case."""
    return sum(tensor_bytes_of(spec, t, case) for t in spec.signature.tensors)


def _branches(spec, recipe, case: Case) -> list[str] | None:
    from ..recipe import bind, buffer_layouts

    env = spec.case_env(case)
    try:
        dtypes, _shapes = buffer_layouts(spec, recipe, env)
        kernels = [launch.kernel for launch in bind(recipe, env, dtypes, env["T"])]
    except Exception:  # noqa: BLE001 - no launch applies: not the same regime
        return None
    if any(not hasattr(item, "kernel") for item in recipe.launches):
        # a repeat group (a model's layers): fewer iterations are the same regime
        return list(dict.fromkeys(kernels))
    return kernels


def same_regime(spec, recipe_text: str | None, case: Case, budget: int, salt: str) -> Case:
    """A benchmark case, or where its buffers exceed `budget` bytes a variant in the same regime:
    its outermost sizes (those of the largest tensor, outermost first) made smaller, each to a
    random multiple of its alignment class (min(v & -v, 64), so evenness and vector alignment are
    kept; a size that is itself a power of two up to 64 is halved), every other size kept, and the recipe's `when` branches selecting the same launches.
    The case itself where no such variant fits."""
    from ..recipe import parse_recipe

    if tensor_bytes(spec, case) <= budget:
        return case
    recipe = parse_recipe(recipe_text) if recipe_text else None
    want = _branches(spec, recipe, case) if recipe else None
    biggest = max(spec.signature.tensors, key=lambda t: tensor_bytes_of(spec, t, case))
    order = [d for d in biggest.shape if isinstance(d, str) and d in case.sizes]
    sizes = dict(case.sizes)
    base = {**case.model_dump(mode="json"), "name": None, "bench": False}
    for k in order:
        v = sizes[k]
        step = min(v & -v, 64) if v > 0 else 0
        if step and v <= step:  # a power of two up to 64 (a batch of 16): halve it, kept even
            step = v // 2 if v % 2 == 0 else 0
        if step == 0:
            continue
        probe = Case.model_validate({**base, **sizes, k: step})
        per_step = tensor_bytes(spec, probe)
        fit = max(step, budget // max(per_step, 1) * step)
        fit = min(fit, v - step)
        lo = max(step, (fit // 2) // step * step)
        r = int.from_bytes(hashlib.sha256(f"{salt}:regime:{k}".encode()).digest()[:4], "little")
        candidates = list(range(lo, fit + 1, step))
        choice = candidates[r % len(candidates)]
        trial = Case.model_validate({**base, **sizes, k: choice})
        if recipe is not None and _branches(spec, recipe, trial) != want:
            continue
        sizes[k] = choice
        if tensor_bytes(spec, trial) <= budget:
            break
    if sizes == case.sizes:
        return case
    dtype0 = spec.signature.dtypes[0]
    probe = Case.model_validate({**base, **sizes})
    name = (f"same-regime variant of {case.label(dtype0)}" if os.environ.get("REGEN_SECRET_SEED")
            else f"{probe.label(dtype0)} (same-regime variant of {case.label(dtype0)})")
    return Case.model_validate({**base, **sizes, "name": name})


def tensor_bytes_of(spec, t, case: Case) -> int:
    from ..dtypes import itemsize

    n = 1
    for d in spec.tensor_shape(t, case):
        n *= d
    return n * itemsize(spec.tensor_dtype(t, case))


def lint_oracle(spec, oracle_path: Path, seeds: int = 2, timeout_s: float = 600.0,
                composition: dict | None = None) -> list[str]:
    """Oracle lint in a child process (imports torch there): one problem per finding, empty when
    the reference depends on its inputs. Runs make_inputs and reference on the correctness cases
    for `seeds` fresh seeds; no artifact is involved."""
    seed_of, _ = seed_source(Settings())
    cases = [c for c in spec.cases if not c.bench]
    job = {"mode": "lint", "language": "cpp", "oracle": str(Path(oracle_path).resolve()),
           "spec": spec.model_dump(mode="json"), "recipe": None, "binary": None,
           "cases": [{"case": c.model_dump(mode="json")} for c in cases],
           "lint_seeds": [seed_of(i) for i in range(max(2, seeds))]}
    if composition is not None:
        job["composition"] = composition
    data = run_child(job, timeout_s)
    if "error" in data:
        return [f"the oracle could not be run: {data['error']}"]
    problem = degenerate_oracle(data["lint"])
    return [problem] if problem else []


def timeline(spec, target, oracle_path: Path, recipe: str, binary: bytes, case: Case, seed: int,
             runs: int = 2, timeout_s: float = 600.0, composition: dict | None = None) -> dict:
    """Run an instrumented build (regen.timeline) on one case in a child process: the child's
    answer, {"timeline": {...}} with the records, or {"error": ...} / {"rejected": ...}."""
    with tempfile.TemporaryDirectory(prefix="regen-bin-") as tmp:
        binary_path = Path(tmp) / "kernel.bin"
        binary_path.write_bytes(binary)
        job = {"mode": "timeline", "language": target.language, "binary": str(binary_path),
               "recipe": recipe, "limits": dict(target.limits),
               "oracle": str(oracle_path.resolve()), "spec": spec.model_dump(mode="json"),
               "case": case.model_dump(mode="json"), "seed": seed, "runs": runs, "cases": []}
        if composition is not None:
            job["composition"] = composition
        return run_child(job, timeout_s)


def _timed_variant(spec, recipe: str, case: Case, budget: int) -> Case:
    """The bench case, or its fixed same-regime variant within `budget` bytes, still timed."""
    variant = same_regime(spec, recipe, case, budget, HOST_BENCH_SALT)
    if variant is case:
        return case
    return Case.model_validate({**variant.model_dump(mode="json"), "bench": True})


def _job_items(cases: list[Case], settings: Settings, seed_of, include_bench: bool):
    """The job's cases with their seeds, and every correctness seed used."""
    items, used, n = [], [], 0
    for case in cases:
        seeds = [seed_of(n + i) for i in range(1 if case.bench else settings.seeds)]
        n += len(seeds)
        item = {"case": case.model_dump(mode="json"), "seeds": seeds,
                "verify": (not case.bench) or include_bench}
        if settings.bench and case.bench:
            item["time"] = True
            item["time_seeds"] = [seed_of(n + i) for i in range(3)]
            n += 3
        used.extend(seeds)
        items.append(item)
    return items, used


def run(spec, target, oracle_path: Path, recipe: str, binary: bytes, settings: Settings,
        cases: list[Case] | None = None, composition: dict | None = None) -> Outcome:
    """Verify (and with settings.bench, time) one binary against the oracle. A composed spec
    passes its `composition` (regen.compose.oracle_job): the reference is composed from its
    components' oracles."""
    seed_of, seeds_label = seed_source(settings)
    gpu = LANGUAGES[target.language].on_device
    include_bench = settings.include_bench_cases or settings.bench
    if cases is None:
        cases = [c for c in spec.cases_for(target) if not c.bench or include_bench]
    hidden = hidden_variants(spec, cases, settings)
    if not gpu and not settings.bench:
        salt = _salt(settings)
        cases = [same_regime(spec, recipe, c, settings.host_check_bytes, salt) if c.bench else c
                 for c in cases]
    elif not gpu and settings.host_bench_bytes is not None:
        # one variant per case for every candidate and re-timing: their times are compared
        cases = [_timed_variant(spec, recipe, c, settings.host_bench_bytes) if c.bench else c
                 for c in cases]
    cases = list(cases) + hidden
    items, used = _job_items(cases, settings, seed_of, include_bench)
    iters = settings.iters or (50 if gpu else 10)
    baselines = settings.baselines if settings.baselines is not None else (
        ("torch_eager", "torch_compile") if gpu else ("torch_eager",))
    with tempfile.TemporaryDirectory(prefix="regen-bin-") as tmp:
        binary_path = Path(tmp) / "kernel.bin"
        binary_path.write_bytes(binary)
        job = {"language": target.language, "binary": str(binary_path), "recipe": recipe,
               "limits": dict(target.limits),
               "oracle": str(oracle_path.resolve()), "spec": spec.model_dump(mode="json"),
               "cases": items,
               "timing": {"iters": iters, "warmup": settings.warmup, "baselines": list(baselines),
                          "peers": settings.peers}}
        if composition is not None:
            job["composition"] = composition
        data = run_child(job, settings.timeout_s)
    seeds_out = seeds_label if seeds_label is not None else used
    if "error" in data:
        kind = data.get("kind", "crash")
        return Outcome(False, Rejection(kind, data["error"]).tagged(), fingerprint=None,
                       seeds=seeds_out, error_kind=kind)
    if "rejected" in data:
        rej = Rejection.from_json(data["rejected"])
        return Outcome(False, rej.tagged(), fingerprint=None, seeds=seeds_out, error_kind=rej.guard)
    outcome = _verdict(data, len(items), seeds_label, seeds_out)
    if settings.bench:
        _judge_bench(spec, target, cases, data["cases"], outcome, recipe)
    return outcome


def _verdict(data: dict, n_items: int, seeds_label, seeds_out) -> Outcome:
    """The child's case entries: the first failing case, a child that stopped early, or a
    degenerate oracle."""
    results = data["cases"]
    for r in results:
        if seeds_label == "secret":
            r["seeds"] = "secret"
            r.pop("failing_seed", None)
    outcome = Outcome(True, None, results, data.get("fingerprint"), seeds_out)
    bad = next((r for r in results if not r.get("ok", True)), None)
    if bad:
        failed = CaseResult.from_json(bad)
        outcome.fail(f"case {bad['case']}: {bad.get('reason')}"
                     + (f" [guard: {failed.guard}]" if failed.guard else ""), failed.guard)
    if len(results) < n_items:
        outcome.fail(Rejection("crash", "the child stopped before every case ran").tagged(), "crash")
    degenerate = degenerate_oracle(results) if outcome.ok else None
    if degenerate:
        outcome.fail(Rejection("degenerate-oracle", degenerate).tagged(), "oracle")
    return outcome


def _judge_bench(spec, target, cases, results, outcome: Outcome, recipe: str | None = None) -> None:
    from ..profile import GEOMEAN_CASE, geomean_checks

    by_label = {c.label(spec.signature.dtypes[0]): c for c in cases}
    for r in results:
        if "timing" in r:
            _judge_bench_case(spec, target, by_label[r["case"]], r, outcome, recipe)
    # an expectation over the whole benchmark set, judged once every row is in
    summary = geomean_checks(spec, target, outcome.bench)
    outcome.expectations.extend({**c, "case": GEOMEAN_CASE} for c in summary)
    missed = [c for c in summary if c.get("ok") is False]
    if missed:
        outcome.fail("profile expectations not met over the benchmark cases: " + "; ".join(
            f"{c['check']} {c['value']} < {c['limit']} ({c['cases']} cases)" for c in missed),
            "profile")


def judge_peers(peers: dict) -> tuple[dict, dict, dict, str | None]:
    """(median seconds per timed peer, one-line note per peer that was skipped or is off the
    reference, peak bytes per peer where measured, the best peer): a peer whose outputs are off
    the reference is shown but never the best."""
    times, notes, memory = {}, {}, {}
    for name, p in sorted(peers.items()):
        if p.get("skipped"):
            notes[name] = f"skipped: {p['skipped']}"
            continue
        if p.get("error"):
            notes[name] = f"skipped: raised {p['error']}"
            continue
        times[name] = median(p.get("device_s", []))
        if p.get("memory_bytes") is not None:
            memory[name] = p["memory_bytes"]
        if p.get("mismatch"):
            notes[name] = f"not counted: outputs off the reference ({p['mismatch']})"
    counted = {n: t for n, t in times.items() if t and not peers[n].get("mismatch")}
    best = min(counted, key=counted.get) if counted else None
    return times, notes, memory, best


def _judge_bench_case(spec, target, case, r: dict, outcome: Outcome, recipe: str | None = None
                      ) -> None:
    from ..profile import dynamic_checks, memory_bytes

    t = judge_timing(spec, target, case, r["timing"])
    if r["timing"].get("ok") is False:
        also = f"; also {t['reason']} [guard: {t['guard']}]" if t.get("ok") is False else ""
        t = {**t, "ok": False, "guard": r["timing"].get("guard"),
             "reason": "after timing: " + str(r["timing"].get("reason")) + also}
    base = {}
    for name, b in (r.get("baselines") or {}).items():
        base[name] = median(b.get("device_s", [])) if "error" not in b else None
        if "error" in b:
            t.setdefault("baseline_errors", {})[name] = b["error"]
    peers, notes, peer_memory, best = judge_peers(r.get("peers") or {})
    if recipe is not None:
        t["memory_bytes"] = memory_bytes(spec, recipe, case)
    checks = dynamic_checks(spec, target, t, {**base, "best_peer": peers.get(best)},
                            case) if t.get("ok") else []
    row = {"case": r["case"], **{k: v for k, v in t.items()}, "baselines": base,
           "checks": checks, "bytes": spec.case_bytes(case), "flops": spec.case_flops(case)}
    if r.get("peers"):
        row.update({"peers": peers, "best_peer": best, "peer_notes": notes})
        if peer_memory:
            row["peer_memory_bytes"] = peer_memory
    outcome.bench.append(row)
    outcome.expectations.extend({**c, "case": r["case"]} for c in checks)
    if not t.get("ok"):
        outcome.fail(f"case {r['case']}: {t.get('reason')} [guard: {t.get('guard')}]", t.get("guard"))
    missed = [c for c in checks if c.get("ok") is False]
    if missed:
        # the spec's performance expectations are part of passing: a correct but slow
        # implementation fails, with the figures the search loop needs to improve it
        outcome.fail(f"case {r['case']}: profile expectations not met: " + "; ".join(
            f"{c['check']} {c['value']} {'>' if c['check'] == 'memory' else '<'} {c['limit']}"
            for c in missed) + (
            f" ({t['median_s'] * 1e6:.1f} µs, floor {t['floor_s'] * 1e6:.1f} µs)"
            if t.get("floor_s") else ""), "profile")


def make_record(spec, target, entry, compiled, outcome: Outcome, verify_components: dict,
                static: list[dict]) -> dict:
    """A verification record: who, where, when, with what inputs and errors. Never fabricated:
    every field comes from this run."""
    placed = outcome.placement or {}
    fp = placed.get("hardware") or hardware.local(target) or outcome.fingerprint or {}
    ident = hardware.identity(fp)
    runtime = placed.get("runtime") or hardware.runtime_versions(target)
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
        **({"ran_on": placed["ran_on"]} if placed.get("ran_on") else {}),
    }
