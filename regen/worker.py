"""The child process that runs untrusted code: `python -m regen.worker JOB.json`.

regen never loads a generated binary in its own process. The parent (regen/verify.py) writes a job,
starts this worker with a timeout, and reads back raw observations; pass/fail statistics and timing
medians are decided by the parent. Guards against the known ways a kernel cheats an oracle
(shared/reference/reward-hacks.md) live here:

- every output (and poisoned workspace) is filled with a poison before each run: NaN on the first
  run, a finite sentinel on the second, so an unwritten element fails either way;
- the candidate runs before the reference ever has (nothing to reuse) and again after it, and the
  reference outputs are kept alive;
- inputs are cloned and compared bit for bit after every run (unless the output is declared
  in place);
- the whole device is synchronised, outputs are re-checked after a pause (no late background work),
  and host thread counts are compared;
- timed iterations rotate among independently drawn input sets, flush caches between iterations,
  and record host wall time with a full device sync beside the device timer.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

SENTINEL = 12288.0  # exactly representable in bf16/fp16/fp32 and far from any normalised output


def _torch_dtype(torch, name: str):
    return getattr(torch, name)


def _bits(t):
    """A view of a tensor's raw bytes, so NaN payloads compare equal bit for bit."""
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8) if t.numel() else t


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class Harness:
    def __init__(self, job: dict):
        import torch

        from regen.oracle import load_oracle
        from regen.recipe import parse_recipe
        from regen.runtimes import get_runtime
        from regen.spec import Spec

        self.torch = torch
        self.job = job
        self.spec = Spec.model_validate(job["spec"])
        self.recipe = parse_recipe(job["recipe"])
        self.oracle = load_oracle(Path(job["oracle"]))
        self.runtime = get_runtime(job["language"])(job["binary"])
        self.device = self.runtime.device
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))

    # -- buffers -----------------------------------------------------------------------
    def case_view(self, case):
        torch = self.torch
        env = self.spec.case_env(case)
        params = {p.name: env[p.name] for p in self.spec.signature.params}
        return SimpleNamespace(sizes=dict(case.sizes), dtype=_torch_dtype(torch, env["T"]),
                               params=params, dist=case.dist, device=self.device,
                               name=case.label(self.spec.signature.dtypes[0]))

    def make_inputs(self, case, view, seed: int) -> dict:
        torch = self.torch
        inputs = self.oracle.make_inputs(view, seed)
        for t in self.spec.signature.inputs:
            if t.name not in inputs:
                raise OracleError(f"make_inputs() did not return input {t.name!r}")
            x = inputs[t.name]
            want_dtype = _torch_dtype(torch, self.spec.tensor_dtype(t, case))
            want_shape = list(self.spec.tensor_shape(t, case))
            if type(x) is not torch.Tensor:
                raise OracleError(f"make_inputs() returned {type(x).__name__} for {t.name!r}")
            if x.dtype != want_dtype or list(x.shape) != want_shape:
                raise OracleError(f"make_inputs() returned {t.name} as {x.dtype} {list(x.shape)}; "
                                  f"the signature says {want_dtype} {want_shape}")
            inputs[t.name] = x.to(self.device).contiguous()
        return inputs

    def poisoned(self, case, inputs: dict, poison: str) -> dict:
        """Fresh output and workspace buffers, poisoned; in-place outputs start as input clones."""
        torch = self.torch
        bufs = {}
        for t in self.spec.signature.outputs:
            if t.inplace_of:
                bufs[t.name] = inputs[t.inplace_of]
                continue
            dtype = _torch_dtype(torch, self.spec.tensor_dtype(t, case))
            shape = self.spec.tensor_shape(t, case)
            bufs[t.name] = self._poison(torch.empty(shape, dtype=dtype, device=self.device), poison)
        from regen.recipe import workspace_shapes

        for name, (dtype, shape, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            buf = torch.empty(shape, dtype=_torch_dtype(torch, dtype), device=self.device)
            bufs[name] = buf.zero_() if zero else self._poison(buf, poison)
        return bufs

    def _poison(self, buf, poison: str):
        if buf.dtype.is_floating_point:
            return buf.fill_(float("nan") if poison == "nan" else SENTINEL)
        if buf.dtype == self.torch.bool:
            return buf.fill_(True)
        return buf.fill_(-0x5A5A if poison == "nan" else 0x5A5A)

    def run_candidate(self, case, inputs: dict, poison: str) -> dict:
        from regen.recipe import bind

        bufs = self.poisoned(case, inputs, poison)
        all_bufs = {**inputs, **bufs}
        launches = bind(self.recipe, self.spec.case_env(case), set(all_bufs),
                        self.spec.case_env(case)["T"])
        self.runtime.launch(launches, all_bufs)
        self.runtime.synchronize()
        return {t.name: bufs[t.name] for t in self.spec.signature.outputs}

    # -- comparisons -------------------------------------------------------------------
    def compare(self, case, got: dict, want: dict, poison: str) -> dict:
        torch = self.torch
        dtype = self.spec.case_env(case)["T"]
        tol = self.spec.tolerance.get(dtype)
        worst = {"ok": True, "max_abs": 0.0, "max_rel": 0.0}
        for t in self.spec.signature.outputs:
            g, w = got[t.name], want.get(t.name)
            if w is None:
                raise OracleError(f"reference() did not return output {t.name!r}")
            if list(w.shape) != list(g.shape):
                raise OracleError(f"reference() returned {t.name} with shape {list(w.shape)}; "
                                  f"the signature says {list(g.shape)}")
            gd = g.detach().to("cpu", torch.float64)
            wd = w.detach().to("cpu", torch.float64)
            if poison == "sentinel" and g.dtype.is_floating_point:
                unwritten = (gd == SENTINEL) & (wd != SENTINEL)
            elif poison == "nan" and g.dtype.is_floating_point:
                unwritten = torch.isnan(gd) & ~torch.isnan(wd)
            else:
                unwritten = torch.zeros_like(gd, dtype=torch.bool)
            if unwritten.any():
                idx = _index(unwritten.nonzero()[0])
                return {"ok": False, "guard": "poisoned-outputs",
                        "reason": f"{t.name}: {int(unwritten.sum())} of {g.numel()} elements were "
                                  f"never written (poison left at {idx})"}
            nan_g, nan_w = torch.isnan(gd), torch.isnan(wd)
            if (nan_g != nan_w).any():
                idx = _index((nan_g != nan_w).nonzero()[0])
                return {"ok": False, "guard": "tolerance",
                        "reason": f"{t.name}: NaN mismatch at {idx}: got {gd[idx].item()}, "
                                  f"expected {wd[idx].item()}"}
            inf_bad = (torch.isinf(gd) | torch.isinf(wd)) & (gd != wd) & ~nan_w
            if inf_bad.any():
                idx = _index(inf_bad.nonzero()[0])
                return {"ok": False, "guard": "tolerance",
                        "reason": f"{t.name}: inf mismatch at {idx}: got {gd[idx].item()}, "
                                  f"expected {wd[idx].item()}"}
            finite = torch.isfinite(wd) & torch.isfinite(gd)
            diff = torch.where(finite, (gd - wd).abs(), torch.zeros_like(gd))
            rel = diff / wd.abs().clamp_min(1e-30)
            max_abs = float(diff.max()) if diff.numel() else 0.0
            max_rel = float(torch.where(finite, rel, torch.zeros_like(rel)).max()) if diff.numel() else 0.0
            worst["max_abs"] = max(worst["max_abs"], max_abs)
            worst["max_rel"] = max(worst["max_rel"], max_rel)
            if tol is not None:
                bad = diff > tol.atol + tol.rtol * wd.abs()
            else:  # exact dtypes (integers, bool)
                bad = diff > 0
            if bad.any():
                idx = _index((diff - (tol.atol + tol.rtol * wd.abs()) if tol else diff).argmax(),
                             shape=gd.shape)
                return {**worst, "ok": False, "guard": "tolerance",
                        "reason": f"{t.name}: {int(bad.sum())} of {g.numel()} elements outside "
                                  f"atol={tol.atol if tol else 0} rtol={tol.rtol if tol else 0}; "
                                  f"worst at {idx}: got {gd[idx].item():.6g}, expected "
                                  f"{wd[idx].item():.6g}"}
        return worst

    def inputs_unchanged(self, inputs: dict, pristine: dict) -> str | None:
        inplace = {t.inplace_of for t in self.spec.signature.outputs if t.inplace_of}
        for name, x in inputs.items():
            if name in inplace:
                continue
            if not self.torch.equal(_bits(x), _bits(pristine[name])):
                return f"input {name!r} was modified (the spec does not declare it in place)"
        return None

    # -- verification ------------------------------------------------------------------
    def verify_case(self, case, seed: int) -> dict:
        torch = self.torch
        view = self.case_view(case)
        inputs = self.make_inputs(case, view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        fresh = lambda: {k: v.clone() for k, v in pristine.items()}  # noqa: E731

        # 1. candidate first: no reference output exists anywhere to be reused
        run_inputs = fresh()
        got1 = self.run_candidate(case, run_inputs, "nan")
        threads_warm = _thread_count()  # after a first launch: thread pools (OpenMP) exist now
        changed = self.inputs_unchanged(run_inputs, pristine)
        if changed:
            return {"ok": False, "guard": "inputs-unchanged", "reason": changed}
        # 2. reference, kept alive until the end of this case
        want = self.oracle.reference({k: v.clone() for k, v in pristine.items()}, view)
        res = self.compare(case, got1, want, "nan")
        if not res["ok"]:
            return res
        # 3. candidate again, after the reference, with the other poison
        run_inputs = fresh()
        got2 = self.run_candidate(case, run_inputs, "sentinel")
        changed = self.inputs_unchanged(run_inputs, pristine)
        if changed:
            return {"ok": False, "guard": "inputs-unchanged", "reason": changed}
        res2 = self.compare(case, got2, want, "sentinel")
        if not res2["ok"]:
            return res2
        # 4. late writes: sync the whole device, wait, and the outputs must not have moved
        snapshot = {k: v.clone() for k, v in got2.items()}
        time.sleep(0.02)
        self.runtime.synchronize()
        for k in got2:
            if not torch.equal(_bits(got2[k]), _bits(snapshot[k])):
                return {"ok": False, "guard": "late-writes",
                        "reason": f"output {k!r} changed after the launch returned and the device "
                                  "was synchronised (background work)"}
        threads_after = _thread_count()
        if threads_after > threads_warm:
            return {"ok": False, "guard": "threads",
                    "reason": f"host thread count grew from {threads_warm} to {threads_after} "
                              "across a launch (work left running in the background)"}
        # 5. invariants, on the candidate's outputs
        if hasattr(self.oracle, "check"):
            problems = self.oracle.check(pristine, got2, view) or []
            if problems:
                return {**res2, "ok": False, "guard": "invariants", "reason": "; ".join(problems)}
        return {**res2, "max_abs": max(res["max_abs"], res2["max_abs"]),
                "max_rel": max(res["max_rel"], res2["max_rel"]),
                "seed_dependent": None, "ok": True}

    # -- timing ------------------------------------------------------------------------
    def time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        """Raw samples only; the parent computes medians and applies the physical floor."""
        from regen.recipe import bind

        torch = self.torch
        view = self.case_view(case)
        sets = [self.make_inputs(case, view, s) for s in seeds]
        bufs = [self.poisoned(case, inp, "sentinel") for inp in sets]
        env = self.spec.case_env(case)
        launches = [bind(self.recipe, env, set({**sets[i], **bufs[i]}), env["T"]) for i in range(len(sets))]
        for i in range(warmup):
            k = i % len(sets)
            self.runtime.launch(launches[k], {**sets[k], **bufs[k]})
        self.runtime.synchronize()
        device_s, wall_s = [], []
        for i in range(iters):
            k = i % len(sets)
            self.runtime.flush_cache()
            self.runtime.synchronize()
            timer = self.runtime.timer()
            w0 = time.perf_counter()
            timer.start()
            self.runtime.launch(launches[k], {**sets[k], **bufs[k]})
            timer.stop()
            self.runtime.synchronize()
            wall_s.append(time.perf_counter() - w0)
            device_s.append(timer.seconds())
        # every set's outputs must still be right after the timed loop (no replay of stale results)
        checks = []
        for k in range(len(sets)):
            want = self.oracle.reference({n: v.clone() for n, v in sets[k].items()}, view)
            got = {t.name: bufs[k][t.name] for t in self.spec.signature.outputs}
            checks.append(self.compare(case, got, want, "sentinel"))
        bad = next((c for c in checks if not c["ok"]), None)
        return {"device_s": device_s, "wall_s": wall_s, "ok": bad is None,
                "reason": bad["reason"] if bad else None, "guard": bad.get("guard") if bad else None}

    def time_baseline(self, case, seeds: list[int], iters: int, warmup: int, mode: str) -> dict:
        torch = self.torch
        fn = getattr(self.oracle, "baseline", None) or self.oracle.reference
        view = self.case_view(case)
        if mode == "torch_compile":
            try:
                fn = torch.compile(fn)
            except Exception as exc:  # noqa: BLE001
                return {"error": f"torch.compile failed: {exc}"}
        sets = [self.make_inputs(case, view, s) for s in seeds]
        try:
            for i in range(warmup):
                fn(sets[i % len(sets)], view)
            self.runtime.synchronize()
            samples = []
            for i in range(iters):
                self.runtime.flush_cache()
                self.runtime.synchronize()
                timer = self.runtime.timer()
                timer.start()
                fn(sets[i % len(sets)], view)
                timer.stop()
                self.runtime.synchronize()
                samples.append(timer.seconds())
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return {"device_s": samples}


class OracleError(Exception):
    """The oracle itself broke its contract: not the candidate's fault."""


def _index(idx, shape=None):
    if shape is not None:
        import numpy as np

        return tuple(int(i) for i in np.unravel_index(int(idx), tuple(shape)))
    return tuple(int(i) for i in idx.tolist())


def run(job: dict) -> dict:
    from regen.spec import Case

    harness = Harness(job)
    out: dict = {"cases": [], "fingerprint": harness.runtime.fingerprint()}
    for item in job["cases"]:
        case = Case.model_validate(item["case"])
        label = case.label(harness.spec.signature.dtypes[0])
        entry = {"case": label, "seeds": item["seeds"]}
        try:
            if item.get("verify", True):
                results = [harness.verify_case(case, s) for s in item["seeds"]]
                bad = next((r for r in results if not r["ok"]), None)
                entry.update(bad or {"ok": True,
                                     "max_abs": max(r["max_abs"] for r in results),
                                     "max_rel": max(r["max_rel"] for r in results)})
                if bad:
                    entry["failing_seed"] = item["seeds"][results.index(bad)]
            if item.get("time") and entry.get("ok", True):
                t = job["timing"]
                entry["timing"] = harness.time_case(case, item["time_seeds"], t["iters"], t["warmup"])
                for mode in t.get("baselines", []):
                    entry.setdefault("baselines", {})[mode] = harness.time_baseline(
                        case, item["time_seeds"], t["iters"], t["warmup"], mode)
        except OracleError as exc:
            entry.update({"ok": False, "guard": "oracle", "reason": f"oracle error: {exc}"})
        except Exception as exc:  # noqa: BLE001 - the candidate crashed; report, do not die
            entry.update({"ok": False, "guard": "crash",
                          "reason": f"{type(exc).__name__}: {exc}"[:2000],
                          "traceback": traceback.format_exc()[-2000:]})
            out["cases"].append(entry)
            if "CUDA_ERROR" in str(exc) or "illegal" in str(exc).lower():
                break  # the context is dead: later cases would fail for the wrong reason
            continue
        out["cases"].append(entry)
    return out


def main(argv: list[str]) -> int:
    job_path = Path(argv[1])
    job = json.loads(job_path.read_text())
    result_path = Path(job["result"])
    try:
        result = run(job)
    except Exception as exc:  # noqa: BLE001
        result = {"error": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc()[-4000:]}
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
