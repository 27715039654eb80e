"""The child process that runs untrusted code: `python -m regen.worker JOB.json`.

regen never loads a generated binary in its own process. The parent (regen/verify.py) writes a job,
starts this worker with a timeout, and reads back raw observations; pass/fail statistics and timing
medians are decided by the parent. Guards against the known ways a kernel cheats an oracle
(shared/reference/reward-hacks.md, docs/oracle.md) live here:

- every output (and poisoned workspace) is filled with a poison before each run: NaN on the first
  run, a finite sentinel on the second, so an unwritten element fails either way;
- the candidate runs before the reference ever has (nothing to reuse) and again after it, and the
  reference outputs are kept alive;
- inputs are cloned and compared bit for bit after every run (unless the output is declared
  in place);
- the whole device is synchronised, outputs are re-checked after a pause (no late background work),
  and the host's thread ids are compared right after every launch and after a pause;
- timed iterations rotate among independently drawn input sets, perturb them before every
  iteration (a cache keyed on pointers or sampled contents replays stale results), re-poison the
  outputs, flush caches, and record host wall time with a full device sync beside the device timer
  (whose start event waits behind a spin, so Python's launch overhead is not timed: events.py);
- host-code artifacts (the cpp column share this process) are checked before they are loaded
  (imports, writable+executable segments, raw system calls), Python audit events raised during a
  launch fail it (no Python from a kernel), and the clock and harness functions must be the ones
  captured before the kernel was loaded;
- the result is authenticated with a key the parent passes over stdin (never on disk), and the
  process leaves with os._exit, so no destructor or atexit handler of the artifact runs after it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

_clock = time.perf_counter  # captured before any artifact is loaded; wall times use this one

SENTINEL = 12288.0  # exactly representable in bf16/fp16/fp32 and far from any normalised output


def _torch_dtype(torch, name: str):
    return getattr(torch, name)


def _bits(t):
    """A view of a tensor's raw bytes, so NaN payloads compare equal bit for bit."""
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8) if t.numel() else t


def _thread_ids() -> set[int]:
    """Kernel thread ids of this process (every thread, not only those Python knows about)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return {t.native_id for t in threading.enumerate()}


class Rejected(Exception):
    """A guard failed: the candidate is rejected with this guard's name and a reason."""

    def __init__(self, guard: str, reason: str):
        super().__init__(reason)
        self.guard, self.reason = guard, reason


# -- host-code artifacts: what they may not import or contain --------------------------------------
# Beyond regen/toolchains/cxx.py's list (checked again here, at load, because a cached binary may
# predate a change of that list): no file or process access, no raw system calls, no executable
# memory of its own, no Python C API, no walking the dynamic linker's structures.
FORBIDDEN_IMPORTS = (
    "syscall", "open", "open64", "openat", "openat64", "creat", "creat64", "fopen", "fopen64",
    "freopen", "fdopen", "write", "pwrite", "pwrite64", "writev", "mkdir", "mkdirat", "rename",
    "renameat", "unlink", "unlinkat", "remove", "rmdir", "symlink", "link", "truncate", "ftruncate",
    "socket", "connect", "kill", "tgkill", "dup2", "dup3", "mmap", "mmap64", "mremap", "prctl",
    "thrd_create", "clone3", "__clone", "execl", "execle", "execlp", "execvpe", "fexecve",
    "posix_spawnp", "daemon", "process_vm_writev", "process_vm_readv", "pkey_mprotect",
    "_r_debug", "_rtld_global", "_rtld_global_ro", "__libc_dlopen_mode", "__libc_dlsym",
    "environ", "__environ", "program_invocation_name",
)
FORBIDDEN_PREFIXES = ("Py", "_Py", "dl", "_dl_", "pthread_create", "posix_spawn", "exec")
_RAW_SYSCALL = re.compile(r"\t(syscall|sysenter|int\s+\$0x80)\b")


def _omp_threads() -> int:
    """OpenMP's default team size here: OMP_NUM_THREADS, else the CPUs this process may use."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return len(os.sched_getaffinity(0))


def native_problems(path: str) -> tuple[list[str], list[str]]:
    """Why a host shared object must not be loaded into this process (empty when it may), and
    the symbols it imports."""
    from regen.toolchains.cxx import FORBIDDEN_SYMBOLS, _symbols

    problems = []
    data = Path(path).read_bytes()
    problems += _segment_problems(data)
    _, imports = _symbols(Path(path))
    bad = set()
    for sym in imports:
        name = sym.split("@")[0]
        if name in FORBIDDEN_IMPORTS or name.startswith(FORBIDDEN_PREFIXES) or any(
                name == f or (f.startswith("std::") and f in name) for f in FORBIDDEN_SYMBOLS):
            bad.add(name)
    if bad:
        problems.append(f"imports {', '.join(sorted(bad))}")
    objdump = shutil.which("objdump")
    if objdump:
        out = subprocess.run([objdump, "-d", "--no-show-raw-insn", path], capture_output=True,
                             text=True).stdout
        calls = sorted({m.group(1) for m in _RAW_SYSCALL.finditer(out)})
        if calls:
            problems.append(f"contains raw system call instructions ({', '.join(calls)})")
    return problems, [i.split("@")[0] for i in imports]


def _segment_problems(data: bytes) -> list[str]:
    """ELF64 program headers: no segment both writable and executable, no executable stack."""
    import struct

    if data[:4] != b"\x7fELF" or data[4] != 2:
        return ["not an ELF64 shared object"]
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    out = []
    for i in range(phnum):
        p_type, p_flags = struct.unpack_from("<II", data, phoff + i * phentsize)
        if p_type == 1 and p_flags & 0x3 == 0x3:        # PT_LOAD, PF_W | PF_X
            out.append("has a writable and executable segment")
        if p_type == 0x6474E551 and p_flags & 0x1:      # PT_GNU_STACK, PF_X
            out.append("asks for an executable stack")
    return out


# -- Python-level tampering from a host artifact ----------------------------------------------------
class AuditWatch:
    """Python audit events raised while a host artifact runs: a kernel that calls into Python
    (PyRun_SimpleString, imports, patching classes) raises them, and hooks cannot be removed."""

    # raised by regen's own ctypes launch (the first call of a kernel looks its symbol up)
    ALLOWED = {"ctypes.call_function", "ctypes.addressof", "ctypes.dlsym"}

    def __init__(self):
        self.active = False
        self.allowed: set[str] = set()
        self.events: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event, args):
        if self.active and event not in self.ALLOWED and event not in self.allowed:
            if len(self.events) < 20:
                detail = f"({str(args[0])[:60]!r})" if event in ("compile", "exec", "import") \
                    and args else ""
                self.events.append(event + detail)

    def window(self, allowed=()):
        watch = self

        class _Window:
            def __enter__(self):
                watch.events.clear()
                watch.allowed = set(allowed)
                watch.active = True

            def __exit__(self, *exc):
                watch.active = False
                if watch.events and exc[0] is None:
                    raise Rejected("python-api", "the artifact ran Python code during a launch "
                                   f"(audit events: {', '.join(watch.events[:6])})")
                return False

        return _Window()


_AUDIT: AuditWatch | None = None


def _integrity_snapshot(runtime_class) -> dict:
    """The clock functions and harness methods a kernel would patch to fake times or results."""
    snap = {f"time.{n}": getattr(time, n) for n in ("perf_counter", "perf_counter_ns",
                                                     "monotonic", "monotonic_ns", "time")}
    snap.update({f"Harness.{n}": v for n, v in vars(Harness).items() if callable(v)})
    snap.update({f"Runtime.{n}": v for n, v in vars(runtime_class).items() if callable(v)})
    timer = getattr(sys.modules[runtime_class.__module__], "Timer", None)
    if timer is not None:
        snap.update({f"Timer.{n}": v for n, v in vars(timer).items() if callable(v)})
    snap["worker._clock"] = _clock
    return snap


def _integrity_changed(snap: dict, runtime_class) -> list[str]:
    now = _integrity_snapshot(runtime_class)
    now["worker._clock"] = globals()["_clock"]
    return sorted(k for k in snap.keys() | now.keys() if snap.get(k) is not now.get(k))


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
        self.recipe = parse_recipe(job["recipe"]) if job.get("recipe") else None
        self.oracle = load_oracle(Path(job["oracle"]))
        self.host_code = job["language"] == "cpp"  # the artifact's code runs in this process
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
        # torch's own intra-op thread pool must exist before the thread baseline is taken
        torch.ones(1 << 22).add_(1)
        self.inplace = {t.inplace_of for t in self.spec.signature.outputs if t.inplace_of}
        self.ref_notes: dict[str, dict] = {}
        if job.get("mode") == "lint":
            self.runtime, self.device = None, "cpu"
            return
        runtime_class = get_runtime(job["language"])
        self.omp_pool = 0
        if self.host_code:
            problems, imports = native_problems(job["binary"])
            if problems:
                raise Rejected("native-code", "the host artifact may not be loaded: "
                               + "; ".join(problems))
            if any(i.startswith(("GOMP_", "omp_")) for i in imports):
                self.omp_pool = _omp_threads() - 1
        self.runtime_class = runtime_class
        # host code runs in a process of its own (runtimes/cpu.py) unless a runtime says otherwise:
        # then the audit window has nothing to watch here, and threads are counted in that process
        self.in_process = self.host_code and getattr(runtime_class, "in_process", True)
        self.integrity = _integrity_snapshot(runtime_class)
        self.tids_allowed = _thread_ids()
        self.pool_settled = False
        with self._watch(allowed=("ctypes.dlopen",)):  # load-time constructors run in here
            self.runtime = runtime_class(job["binary"])
        if self.host_code and not self.in_process:
            self.tids_allowed = self.runtime.threads_before_load
        self._check_integrity()
        self.device = self.runtime.device

    # -- guards around every launch of the artifact ----------------------------------------
    def artifact_threads(self) -> set[int]:
        """Thread ids of the process the artifact's code runs in."""
        return _thread_ids() if self.in_process or not self.host_code else self.runtime.thread_ids()

    def _watch(self, allowed=()):
        if self.in_process and _AUDIT is not None:
            return _AUDIT.window(allowed)
        return _nowatch()

    def _check_integrity(self) -> None:
        changed = _integrity_changed(self.integrity, self.runtime_class)
        if changed:
            raise Rejected("harness-integrity", "the artifact replaced harness or clock functions "
                           f"({', '.join(changed[:6])}): times and results would be forged")

    def launch(self, launches, bufs) -> None:
        """One launch of the candidate, then the checks that need no outputs."""
        with self._watch():
            self.runtime.launch(launches, bufs)
        self.check_after_launch()

    def check_after_launch(self) -> None:
        """Host artifacts: no thread of theirs may outlive a call. The first launch may start
        OpenMP's pool (at most its size, and only if the artifact uses OpenMP), which then lives
        on unchanged; any other new thread id, or one that exits later, is background work."""
        self._check_integrity()
        if not self.host_code:
            return  # device code cannot start host threads; the driver's own are not its doing
        self._check_late_writes()
        new = self.artifact_threads() - self.tids_allowed
        if not self.pool_settled:
            if len(new) > self.omp_pool:
                raise Rejected("threads", f"{len(new)} new thread(s) running right after the first "
                               f"launch returned; an OpenMP pool accounts for at most "
                               f"{self.omp_pool} here (work left running in the background)")
            time.sleep(0.02)
            gone = new - self.artifact_threads()
            if gone:
                raise Rejected("threads", f"{len(gone)} thread(s) started by the launch were still "
                               "running after it returned and exited later (background work)")
            self.tids_allowed |= new
            self.pool_settled = True
        elif new:
            raise Rejected("threads", f"{len(new)} new thread(s) running right after the launch "
                           "returned (work left running in the background)")

    def _check_late_writes(self) -> None:
        late = self.runtime.late_writes() if hasattr(self.runtime, "late_writes") else []
        if late:
            raise Rejected("late-writes", f"buffer(s) {', '.join(map(repr, late))} changed after "
                           "the call returned (work left running in the background)")

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

    def refresh(self, case, bufs: dict, poison: str) -> None:
        """Re-poison outputs and workspaces (zeroed ones re-zeroed) before another launch."""
        from regen.recipe import workspace_shapes

        for t in self.spec.signature.outputs:
            if not t.inplace_of:
                self._poison(bufs[t.name], poison)
        for name, (_, _, zero) in workspace_shapes(self.recipe, self.spec.case_env(case)).items():
            bufs[name].zero_() if zero else self._poison(bufs[name], poison)

    def run_candidate(self, case, inputs: dict, poison: str) -> dict:
        from regen.recipe import bind

        bufs = self.poisoned(case, inputs, poison)
        all_bufs = {**inputs, **bufs}
        launches = bind(self.recipe, self.spec.case_env(case), set(all_bufs),
                        self.spec.case_env(case)["T"])
        self.launch(launches, all_bufs)
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
            where = self.compare_device(g)
            gd = g.detach().to(where, torch.float64)
            wd = w.detach().to(where, torch.float64)
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

    def compare_device(self, g):
        """Where to compare one output: float64 arithmetic is exact on either side, and on the GPU
        a benchmark-sized output (10^8 elements) compares in milliseconds, not the host's seconds.
        The host is used where the device lacks room for the float64 temporaries (about 8 copies)."""
        if g.device.type == "cpu":
            return "cpu"
        try:
            free, _total = self.torch.cuda.mem_get_info(g.device)
        except Exception:  # noqa: BLE001 - no memory query on this runtime: stay on the host
            return "cpu"
        return g.device if free > 8 * 8 * g.numel() + (1 << 30) else "cpu"

    def inputs_unchanged(self, inputs: dict, pristine: dict) -> str | None:
        for name, x in inputs.items():
            if name in self.inplace:
                continue
            if not self.torch.equal(_bits(x), _bits(pristine[name])):
                return f"input {name!r} was modified (the spec does not declare it in place)"
        return None

    # -- verification ------------------------------------------------------------------
    def verify_case(self, case, seed: int) -> dict:
        try:
            return self._verify_case(case, seed)
        except Rejected as r:
            return {"ok": False, "guard": r.guard, "reason": r.reason}

    def _verify_case(self, case, seed: int) -> dict:
        torch = self.torch
        view = self.case_view(case)
        inputs = self.make_inputs(case, view, seed)
        pristine = {k: v.clone() for k, v in inputs.items()}
        fresh = lambda: {k: v.clone() for k, v in pristine.items()}  # noqa: E731

        # 1. candidate first: no reference output exists anywhere to be reused
        run_inputs = fresh()
        got1 = self.run_candidate(case, run_inputs, "nan")
        changed = self.inputs_unchanged(run_inputs, pristine)
        if changed:
            return {"ok": False, "guard": "inputs-unchanged", "reason": changed}
        # 2. reference, kept alive until the end of this case
        want = self.oracle.reference({k: v.clone() for k, v in pristine.items()}, view)
        self.note_reference(case, want)
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
        if self.host_code:
            self._check_late_writes()
        new = self.artifact_threads() - self.tids_allowed if self.host_code else set()
        if new:
            return {"ok": False, "guard": "threads",
                    "reason": f"{len(new)} new thread(s) running after the launches returned "
                              "(work left running in the background)"}
        # 5. invariants, on the candidate's outputs
        if hasattr(self.oracle, "check"):
            problems = self.oracle.check(pristine, got2, view) or []
            if problems:
                return {**res2, "ok": False, "guard": "invariants", "reason": "; ".join(problems)}
        return {**res2, "max_abs": max(res["max_abs"], res2["max_abs"]),
                "max_rel": max(res["max_rel"], res2["max_rel"]), "ok": True}

    # -- the oracle itself: is it degenerate? ------------------------------------------------
    def note_reference(self, case, want: dict) -> None:
        """Per case: is the reference output constant (within tolerance), and does it change with
        the seed? An oracle constant or seed-independent on every case verifies nothing. Computed
        where the reference lives; large outputs are compared across seeds by their sums only."""
        torch = self.torch
        label = case.label(self.spec.signature.dtypes[0])
        tol = self.spec.tolerance.get(self.spec.case_env(case)["T"])
        atol, rtol = (tol.atol, tol.rtol) if tol else (0.0, 0.0)
        note = self.ref_notes.setdefault(label, {"dist": case.dist, "constant": True,
                                                 "seed_dependent": None, "first": None})
        outs = {k: v.detach().to(torch.float64) for k, v in want.items()}
        for w in outs.values():
            finite = w[torch.isfinite(w)]
            if w.numel() <= 1 or finite.numel() < w.numel() or finite.numel() == 0:
                constant = w.numel() > 1 and finite.numel() == 0
            else:
                lo, hi = float(finite.min()), float(finite.max())
                constant = (hi - lo) / 2 <= atol + rtol * abs((lo + hi) / 2)
            note["constant"] = note["constant"] and constant
        small = sum(w.numel() for w in outs.values()) <= 1 << 24
        kept = outs if small else {k: (float(torch.nan_to_num(w).sum()),
                                       float(torch.nan_to_num(w).square().sum()))
                                   for k, w in outs.items()}
        if note["first"] is None:
            note["first"] = kept
            return
        differs = False
        for k, w in kept.items():
            f = note["first"][k]
            if not small or not isinstance(f, torch.Tensor):
                differs = differs or w != f
                continue
            both = torch.isfinite(w) & torch.isfinite(f)
            if not torch.equal(torch.isfinite(w), torch.isfinite(f)) or \
                    bool(((w - f).abs() > atol + rtol * f.abs())[both].any()):
                differs = True
        note["seed_dependent"] = bool(note["seed_dependent"]) or bool(differs)

    def lint(self, cases: list, seeds: list[int]) -> list[dict]:
        """Reference outputs only (no artifact): the degenerate-oracle lint."""
        for case in cases:
            view = self.case_view(case)
            for s in seeds:
                inputs = self.make_inputs(case, view, s)
                self.note_reference(case, self.oracle.reference(inputs, view))
        return [{"case": k, "dist": n["dist"], "ref_constant": n["constant"],
                 "seed_dependent": n["seed_dependent"]} for k, n in self.ref_notes.items()]

    # -- timing ------------------------------------------------------------------------
    def time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        """Raw samples only; the parent computes medians and applies the physical floor."""
        try:
            return self._time_case(case, seeds, iters, warmup)
        except Rejected as r:
            return {"device_s": [], "wall_s": [], "ok": False, "guard": r.guard,
                    "reason": r.reason}

    def _time_case(self, case, seeds: list[int], iters: int, warmup: int) -> dict:
        from regen.recipe import bind

        view = self.case_view(case)
        sets = [self.make_inputs(case, view, s) for s in seeds]
        # what every set must hold when the kernel leaves it alone (perturbed alongside), and a
        # donor of fresh values drawn from the same distribution
        shadows = [{k: v.clone() for k, v in inp.items()} for inp in sets]
        donor = self.make_inputs(case, view, (seeds[0] * 2654435761 + 1) % 2**31)
        bufs = [self.poisoned(case, inp, "sentinel") for inp in sets]
        env = self.spec.case_env(case)
        launches = [bind(self.recipe, env, set({**sets[i], **bufs[i]}), env["T"]) for i in range(len(sets))]
        for i in range(warmup):
            k = i % len(sets)
            self.restore_inplace(sets[k], shadows[k])
            self.refresh(case, bufs[k], "sentinel")
            self.launch(launches[k], {**sets[k], **bufs[k]})
        self.runtime.synchronize()
        device_s, wall_s, exposed = [], [], 0
        for i in range(iters):
            k = i % len(sets)
            self.perturb(sets[k], shadows[k], donor)

            def prepare(k=k):
                self.restore_inplace(sets[k], shadows[k])
                self.refresh(case, bufs[k], "sentinel")

            def run(k=k):
                with self._watch():
                    self.runtime.launch(launches[k], {**sets[k], **bufs[k]})

            device, wall, hidden = self.timed_sample(prepare, run)
            device_s.append(device)
            wall_s.append(wall)
            exposed += not hidden
            self.check_after_launch()
        # every set's outputs must be right for what its inputs hold now, and the inputs must hold
        # exactly what regen put there (no replay of stale results, no mutated inputs)
        checks = []
        for k in range(len(sets)):
            changed = self.inputs_unchanged(sets[k], shadows[k])
            if changed:
                checks.append({"ok": False, "guard": "inputs-unchanged", "reason": changed})
                continue
            want = self.oracle.reference({n: v.clone() for n, v in shadows[k].items()}, view)
            got = {t.name: bufs[k][t.name] for t in self.spec.signature.outputs}
            checks.append(self.compare(case, got, want, "sentinel"))
        bad = next((c for c in checks if not c["ok"]), None)
        return {"device_s": device_s, "wall_s": wall_s, "ok": bad is None,
                "reason": bad["reason"] if bad else None, "guard": bad.get("guard") if bad else None,
                **self.stall_report(exposed)}

    def timed_sample(self, prepare, run) -> tuple[float, float, bool]:
        """One timed run: (device seconds, host wall seconds with a full device sync, whether the
        host's launch overhead stayed outside the device timer). Where it did not, the stall
        before the start event is doubled and the sample taken again (runtimes/events.py)."""
        stall = getattr(self.runtime, "stall", None)
        while True:
            prepare()
            self.runtime.flush_cache()
            self.runtime.synchronize()
            timer = self.runtime.timer()
            w0 = _clock()
            timer.start()
            run()
            timer.stop()
            self.runtime.synchronize()
            wall = _clock() - w0 - timer.stall_seconds()
            hidden = timer.hidden()
            if hidden or stall is None or not stall.lengthen():
                return timer.seconds(), wall, hidden

    def stall_report(self, exposed: int) -> dict:
        stall = getattr(self.runtime, "stall", None)
        if stall is None:
            return {}
        return {"stall_s": stall.seconds, "launch_exposed": exposed}

    def restore_inplace(self, inputs: dict, shadow: dict) -> None:
        for name in self.inplace:
            inputs[name].copy_(shadow[name])

    def perturb(self, inputs: dict, shadow: dict, donor: dict) -> None:
        """Swap a random 1/512 of the positions of every floating-point input with the donor set.
        Both are independent draws of the oracle's distribution, so the inputs stay valid (per
        position), but no two timed iterations see the same contents: a cache keyed on pointers,
        shapes or sampled elements returns stale outputs, which the check after timing catches."""
        torch = self.torch
        positions: dict[int, object] = {}
        for t in self.spec.signature.inputs:
            x = inputs[t.name]
            if t.name in self.inplace or not x.dtype.is_floating_point or x.numel() == 0:
                continue
            n = x.numel()
            if n not in positions:  # same positions in same-sized inputs: relations per position hold
                positions[n] = torch.randint(n, (max(1, n // 512),), device=x.device)
            idx = positions[n]
            mine, theirs = shadow[t.name].view(-1)[idx].clone(), donor[t.name].view(-1)[idx].clone()
            x.view(-1)[idx] = theirs
            shadow[t.name].view(-1)[idx] = theirs
            donor[t.name].view(-1)[idx] = mine

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
            samples, exposed = [], 0
            for i in range(iters):
                device, _wall, hidden = self.timed_sample(
                    lambda: None, lambda i=i: fn(sets[i % len(sets)], view))
                samples.append(device)
                exposed += not hidden
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}
        return {"device_s": samples, **self.stall_report(exposed)}


class OracleError(Exception):
    """The oracle itself broke its contract: not the candidate's fault."""


def _index(idx, shape=None):
    if shape is not None:
        import numpy as np

        return tuple(int(i) for i in np.unravel_index(int(idx), tuple(shape)))
    return tuple(int(i) for i in idx.tolist())


class _nowatch:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run(job: dict) -> dict:
    from regen.spec import Case

    try:
        harness = Harness(job)
    except Rejected as r:
        return {"cases": [], "fingerprint": None, "rejected": {"guard": r.guard, "reason": r.reason}}
    if job.get("mode") == "lint":
        cases = [Case.model_validate(item["case"]) for item in job["cases"]]
        return {"lint": harness.lint(cases, job["lint_seeds"])}
    out: dict = {"cases": [], "fingerprint": harness.runtime.fingerprint()}
    for item in job["cases"]:
        case = Case.model_validate(item["case"])
        label = case.label(harness.spec.signature.dtypes[0])
        entry = {"case": label, "seeds": item["seeds"], "dist": case.dist}
        try:
            if item.get("verify", True):
                results = [harness.verify_case(case, s) for s in item["seeds"]]
                bad = next((r for r in results if not r["ok"]), None)
                entry.update(bad or {"ok": True,
                                     "max_abs": max(r["max_abs"] for r in results),
                                     "max_rel": max(r["max_rel"] for r in results)})
                if bad:
                    entry["failing_seed"] = item["seeds"][results.index(bad)]
                note = harness.ref_notes.get(label)
                if note is not None:
                    entry["ref_constant"] = note["constant"]
                    entry["seed_dependent"] = note["seed_dependent"]
            if item.get("time") and entry.get("ok", True):
                t = job["timing"]
                entry["timing"] = harness.time_case(case, item["time_seeds"], t["iters"], t["warmup"])
                for mode in t.get("baselines", []):
                    entry.setdefault("baselines", {})[mode] = harness.time_baseline(
                        case, item["time_seeds"], t["iters"], t["warmup"], mode)
                if t.get("baselines") and harness.in_process:
                    harness.tids_allowed |= _thread_ids()  # torch's (compile) threads, not the artifact's
        except OracleError as exc:
            entry.update({"ok": False, "guard": "oracle", "reason": f"oracle error: {exc}"})
        except Rejected as r:
            entry.update({"ok": False, "guard": r.guard, "reason": r.reason})
        except Exception as exc:  # noqa: BLE001 - the candidate crashed; report, do not die
            entry.update({"ok": False, "guard": getattr(exc, "guard", "crash"),
                          "reason": f"{type(exc).__name__}: {exc}"[:2000],
                          "traceback": traceback.format_exc()[-2000:]})
            out["cases"].append(entry)
            if "CUDA_ERROR" in str(exc) or "illegal" in str(exc).lower() \
                    or any(c.__name__ == "ArtifactDied" for c in type(exc).__mro__):
                break  # the context is dead: later cases would fail for the wrong reason
            continue
        out["cases"].append(entry)
    return out


def seal(body: str, key: bytes) -> str:
    """The result as written: its body and an HMAC over it with the parent's one-time key."""
    return json.dumps({"body": body, "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()})


def main(argv: list[str]) -> int:
    global _AUDIT
    job_path = Path(argv[1])
    # the parent's one-time key arrives on stdin, read before anything untrusted is loaded
    key = bytes.fromhex(sys.stdin.readline().strip() or "00")
    job = json.loads(job_path.read_text())
    result_path = Path(job["result"])
    _AUDIT = AuditWatch()
    try:
        result = run(job)
    except Exception as exc:  # noqa: BLE001
        result = {"error": f"{type(exc).__name__}: {exc}"[:4000], "traceback": traceback.format_exc()[-4000:]}
    text = seal(json.dumps(result), key)
    try:
        tmp = result_path.with_name(result_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, result_path)
        code = 0
    except OSError as exc:
        print(f"regen.worker: cannot write the result: {exc}", file=sys.stderr)
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no destructor or atexit handler of a loaded artifact runs after the result


if __name__ == "__main__":
    sys.exit(main(sys.argv))
