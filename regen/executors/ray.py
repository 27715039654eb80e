"""The Ray executor: verification as Ray tasks, each routed by its column's custom resource.

A worker started for a column (`regen worker --column h200`, i.e. `ray start --resources
'{"regen/h200": N}' --num-gpus N`) offers `regen/<column>`; a verification task asks for one unit
of it (and one GPU, where the workers have GPUs: Ray then pins the task to it through
CUDA_VISIBLE_DEVICES), so a kernel is verified only where its hardware is. A column no worker
offers waits for hardware: its nodes are compiled and reported "waiting for hardware", not failed.

Compilation is a Ray task too (any worker; the driver's local cache answers first, and a
worker's binary is kept only when its toolchain identity is the driver's). A task is pure: it gets the oracle files (shipped once per build through Ray's object store), the
spec, target, recipe and binary, and returns the judge's Outcome with where it ran. The driver
alone writes cache/. A worker that dies mid-task leaves nothing behind; Ray runs the task again on
another worker offering the resource (`max_retries`), and only a task that fails on every retry
fails its node (with the reason, never a verdict: no record is written for it).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from ..errors import InputError, RegenError

RETRIES = 3


class FleetError(RegenError):
    """A verification could not be run on the fleet (every retry's worker died)."""


def resource(target_name: str) -> str:
    return f"regen/{target_name}"


def project_bundle(project) -> dict:
    """The files a worker needs besides regen itself: the oracles (specs and targets travel as
    the loaded models), keyed by their digest so a worker materialises each version once."""
    from ..keys import digest

    files = {}
    for p in sorted(project.oracle_dir.rglob("*.py")):
        files[str(p.relative_to(project.root))] = p.read_bytes()
    return {"digest": digest({k: digest(v) for k, v in files.items()})[:16], "files": files}


def _materialise(bundle: dict) -> Path:
    base = Path(tempfile.gettempdir()) / f"regen-fleet-{os.getuid()}"
    root = base / bundle["digest"]
    if root.is_dir():
        return root
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=_mkdirs(base)))
    for rel, data in bundle["files"].items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)
    try:
        os.rename(tmp, root)          # whole or not at all; another task may have won the race
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _mkdirs(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def placement(target) -> dict:
    """Where this task runs: the column's hardware fingerprint here, runtime versions, and the
    host, Ray node, worker name and GPU (index and UUID) it was pinned to."""
    from .. import hardware

    ran_on = {"host": socket.gethostname(), "worker": os.environ.get("REGEN_WORKER_NAME"),
              "pid": os.getpid()}
    try:
        import ray

        ran_on["node"] = ray.get_runtime_context().get_node_id()[:16]
    except Exception:  # noqa: BLE001 - outside a Ray task
        pass
    gpu = hardware.visible_gpu()
    if gpu is not None:
        ran_on["gpu"] = gpu
    return {"hardware": hardware.local(target), "runtime": hardware.runtime_versions(target),
            "ran_on": {k: v for k, v in ran_on.items() if v is not None}}


def probe(target) -> dict | None:
    """On a worker: the fingerprint of the column's hardware there (None: not there)."""
    from .. import hardware

    fp = hardware.local(target)
    return None if fp is None else {**fp, "worker": os.environ.get("REGEN_WORKER_NAME") or
                                    socket.gethostname()}


def verify_task(bundle: dict, oracle_rel: str, spec, target, recipe: str, binary: bytes,
                settings, cases, composition):
    """On a worker: run the judge there and return its Outcome with the placement."""
    from ..judge import run as run_verify

    root = _materialise(bundle)
    if composition is not None:
        composition = {**composition, "steps": [{**s, "oracle": str(root / s["oracle"])}
                                                for s in composition["steps"]]}
    outcome = run_verify(spec, target, root / oracle_rel, recipe, binary, settings, cases=cases,
                         composition=composition)
    outcome.placement = placement(target)
    return outcome


def _reachable(addr: str, timeout: float = 5.0) -> None:
    """A HOST:PORT that nothing answers on is said at once (Ray itself retries for minutes)."""
    if addr == "auto" or "://" in addr or ":" not in addr:
        return
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        raise InputError(f"no Ray cluster answers at {addr} ({exc}); expected the HOST:PORT "
                         "`ray start --head` printed", field="--address") from None


def compile_task(source: str, target):
    """On any worker: the compile stage there (its own local cache memoises it)."""
    from ..compile import compile_source

    return compile_source(source, target)


class RayExecutor:
    name = "ray"

    def __init__(self, project, address: str | None = None, retries: int = RETRIES):
        try:
            import ray
        except ImportError:
            raise InputError("--executor ray needs Ray: pip install 'regen[fleet]'",
                             field="--executor") from None
        self.ray, self.project, self.retries = ray, project, retries
        addr = address or os.environ.get("RAY_ADDRESS") or "auto"
        _reachable(addr)
        try:
            ray.init(address=addr, namespace="regen", log_to_driver=False,
                     ignore_reinit_error=True, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"no Ray cluster at {addr} ({exc}): start one with `ray start --head` "
                             "and its workers with `regen worker --column T --address ADDR`",
                             field="--address") from None
        self.bundle = ray.put(project_bundle(project))
        self._verify = ray.remote(verify_task)
        self._compile = ray.remote(compile_task)
        self._probe = ray.remote(probe)
        self._columns: dict[str, tuple[dict | None, str | None, bool]] = {}
        self._lock = threading.Lock()

    def _column(self, target) -> tuple[dict | None, str | None, bool]:
        """(fingerprint, why it waits, whether its workers have GPUs), asked once per column."""
        col = resource(target.name)
        with self._lock:
            if col in self._columns:
                return self._columns[col]
            nodes = [n for n in self.ray.nodes() if n.get("Alive") and
                     n.get("Resources", {}).get(col, 0) > 0]
            if not nodes:
                out = (None, f"no worker offers {col} (start one where the hardware is: "
                       f"`regen worker --column {target.name} --address ADDR`)", False)
            else:
                gpus = all(n["Resources"].get("GPU", 0) >= 1 for n in nodes)
                ref = self._probe.options(resources={col: 0.001}, num_cpus=0).remote(target)
                try:
                    fp = self.ray.get(ref, timeout=120)
                except Exception as exc:  # noqa: BLE001 - a worker that cannot answer
                    fp, why = None, f"the workers offering {col} did not answer ({exc})"
                else:
                    why = None if fp else (f"the workers offering {col} have no device matching "
                                           f"{' or '.join(target.hardware.match) or target.name}")
                out = (fp, why, gpus)
            self._columns[col] = out
            return out

    def here(self, target) -> dict | None:
        return self._column(target)[0]

    def waiting(self, target) -> str | None:
        return self._column(target)[1]

    def verify(self, ctx, spec, target, recipe, binary, settings, cases=None, composition=None):
        from ..artifact import LANGUAGES

        root = self.project.root.resolve()
        if composition is not None:
            composition = {**composition, "steps": [
                {**s, "oracle": str(Path(s["oracle"]).resolve().relative_to(root))}
                for s in composition["steps"]]}
        on_device = LANGUAGES[target.language].on_device
        _, _, gpus = self._column(target)
        opts = {"resources": {resource(target.name): 1}, "max_retries": self.retries,
                "num_cpus": 0 if on_device else 1}
        if on_device and gpus:
            opts["num_gpus"] = 1
        oracle_rel = str(self.project.oracle_path(spec.name).resolve().relative_to(root))
        ref = self._verify.options(**opts).remote(self.bundle, oracle_rel, spec, target, recipe,
                                                  binary, settings, cases, composition)
        started = time.monotonic()
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FleetError(f"verification on the fleet did not finish after {self.retries} "
                             f"retries ({time.monotonic() - started:.0f} s): "
                             f"{type(exc).__name__}: {first}") from None

    def compile(self, source: str, target):
        """The driver's local cache first; otherwise a compile task on any worker. Its result is
        kept (and memoised here) only if the worker's toolchain is the driver's, so the compile key
        names the very binary; otherwise the driver compiles it itself."""
        from .. import keys, localcache
        from ..compile import Compiled, compile_source, toolchain_identity

        comps = keys.compile_components(keys.digest(source.encode()), toolchain_identity(target))
        ckey = keys.key(comps)
        hit = localcache.cache().get(f"compile:{ckey}")
        if hit is not None:
            return Compiled(hit, comps, ckey, keys.digest(hit.binary) if hit.ok else None, True)
        ref = self._compile.options(num_cpus=1, max_retries=self.retries).remote(source, target)
        try:
            done = self.ray.get(ref)
        except self.ray.exceptions.RayError:
            return compile_source(source, target)     # no worker could: compile here
        if done.components.get("toolchain") != comps["toolchain"]:
            return compile_source(source, target)
        if done.result.ok:
            localcache.cache().set(f"compile:{ckey}", done.result)
        return Compiled(done.result, comps, ckey, done.binary_digest, done.cached)

    def jobs(self, requested: int) -> int:
        """Nodes at once: what was asked, else one per unit of regen/* resource in the cluster
        (driver threads mostly wait on workers), at least 4."""
        if requested > 1:
            return requested
        total = sum(v for k, v in self.ray.cluster_resources().items() if k.startswith("regen/"))
        return max(4, int(total))

    def close(self) -> None:
        try:
            self.ray.shutdown()
        except Exception:  # noqa: BLE001 - shutting down a lost connection
            pass
