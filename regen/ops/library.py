"""regen.ops' resolver: which verified artifact a kernel runs on a device, from the project's specs
and the committed cache, decided by the same planner `regen status` uses.

For a device, the column is chosen as verification chooses hardware: a CPU is the host column
whose `hardware.match` names this machine's arch; a CUDA device is the nvidia column whose
`hardware.match` names the device (torch.cuda.get_device_name) and whose arch is its compute
capability (sm_90a: 9.0). The column's current entry runs only when the planner calls it
up-to-date (a passing record that is not stale; on a machine with the hardware, one made on this
very hardware and runtime, as `regen status` requires) and the binary built here from its source
has the digest that record verified. Anything else is the reason for a fallback to the oracle's
baseline(), in `regen status`'s words, unless the user opted into unverified artifacts
(REGEN_OPS_ALLOW_UNVERIFIED=1 or regen.ops.configure(allow_unverified=True)), which is warned about.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..export import signature_data
from .dispatch import Resolution


def default_root() -> Path:
    """REGEN_ROOT, else the checkout regen itself lives in, else the project around the cwd."""
    from ..project import find_root

    if os.environ.get("REGEN_ROOT"):
        return find_root()
    here = Path(__file__).resolve().parents[2]
    if (here / "specs").is_dir() and (here / "targets").is_dir():
        return here
    return find_root()


class Verified:
    """A column's artifact that may run here: its target, entry, record and binary."""

    def __init__(self, kernel, target, entry, record, binary: bytes, note: str | None = None):
        self.kernel, self.target, self.entry, self.record = kernel, target, entry, record
        self.binary, self.note = binary, note

    @property
    def column(self) -> str:
        return f"{self.kernel}@{self.target.name}"


class ProjectResolver:
    def __init__(self, root: Path | None = None, allow_unverified: bool | None = None):
        from ..project import Project
        from ..store import Store

        self.project = Project(Path(root) if root else default_root())
        self.store = Store(self.project.cache_dir)
        if allow_unverified is None:
            allow_unverified = os.environ.get("REGEN_OPS_ALLOW_UNVERIFIED", "") not in ("", "0")
        self.allow_unverified = allow_unverified
        self._resolved: dict = {}
        self._libraries: dict = {}
        self._fallbacks: dict = {}

    # -- what regen.ops registers -------------------------------------------------------------
    def signatures(self) -> list[dict]:
        return [signature_data(self.project.spec(k)) for k in self.project.library_names()]

    # -- choosing a column ------------------------------------------------------------------
    def columns(self, device_type: str, index: int | None) -> tuple[list, str | None]:
        """The target columns for a device, or why there is none."""
        targets = self.project.targets
        if device_type == "cpu":
            from .. import hardware

            found = [t for t in targets.values() if t.vendor == "host" and hardware.local(t)]
            return found, None if found else (
                f"no host column matches this machine ({hardware.host()['arch']})")
        if device_type == "cuda":
            import torch

            name = torch.cuda.get_device_name(index)
            major, minor = torch.cuda.get_device_capability(index)
            sm = f"{major}{minor}"
            found = [t for t in targets.values() if t.vendor == "nvidia"
                     and any(m.lower() in name.lower() for m in t.hardware.match)
                     and t.arch.removeprefix("sm_").rstrip("af") == sm]
            known = ", ".join(f"{t.name} ({'/'.join(t.hardware.match)}, {t.arch})"
                              for t in targets.values() if t.vendor == "nvidia")
            return found, None if found else (
                f"no target column matches {name} (sm_{sm}); nvidia columns: {known}")
        return [], f"regen.ops has no runtime for {device_type} tensors"

    def verified(self, kernel: str, device_type: str, index: int | None):
        """(Verified, None) or (None, why not) for one kernel on one device."""
        from .. import plan as planning

        targets, why = self.columns(device_type, index)
        if not targets:
            return None, why
        spec = self.project.spec(kernel)
        reasons = []
        for target in targets:
            node = planning.plan_node(self.project, self.store, spec, target)
            state = node.line()
            if node.action == planning.UP_TO_DATE and node.record and node.record.get("ok"):
                got = self._binary(node, target, node.record["compile"]["binary"])
                if isinstance(got, bytes):
                    return Verified(kernel, target, node.entry, node.record, got), None
                reasons.append(f"{node.label}: {got}")
                continue
            if self.allow_unverified and node.entry is not None:
                got = self._binary(node, target, None)
                if isinstance(got, bytes):
                    note = (f"regen.ops.{kernel} runs the UNVERIFIED artifact {node.label} "
                            f"(entry {node.entry.id}; {state}) because unverified artifacts were "
                            "allowed (REGEN_OPS_ALLOW_UNVERIFIED / configure(allow_unverified=True))")
                    return Verified(kernel, target, node.entry, node.record, got, note), None
                reasons.append(f"{node.label}: {got}")
                continue
            reasons.append(state)
        return None, "; ".join(reasons)

    def _binary(self, node, target, want: str | None) -> bytes | str:
        """The entry's binary built here (memoised per machine), or why it cannot be used."""
        from ..compile import compile_source, toolchain_problem
        from ..keys import digest

        problem = toolchain_problem(target)
        if problem:
            return f"cannot build the verified binary here: {problem}"
        compiled = compile_source(node.entry.source(), target)
        if not compiled.result.ok:
            return f"the entry does not compile here: {compiled.result.log.strip()[:200]}"
        got = digest(compiled.result.binary)
        if want is not None and got != want:
            return (f"the binary built here ({got[:12]}) is not the verified one ({want[:12]}): "
                    "the toolchains differ (`regen verify` on this machine makes a record for it)")
        return compiled.result.binary

    # -- the resolver interface (regen/ops/dispatch.py) ----------------------------------------
    def resolve(self, kernel: str, device_type: str, index: int | None) -> Resolution:
        key = (kernel, device_type, index)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(kernel, device_type, index)
        return self._resolved[key]

    def _resolve(self, kernel, device_type, index) -> Resolution:
        from ..recipe import parse_recipe

        found, why = self.verified(kernel, device_type, index)
        if found is None:
            return Resolution(reason=why)
        recipe = parse_recipe(found.entry.recipe(), f"{found.column} launch.yaml")
        return Resolution(column=found.column, library=self.library(found, device_type),
                          recipe=recipe.model_dump(mode="json"), note=found.note)

    def library(self, found: Verified, device_type: str):
        """The loaded binary, one per digest (family members and kernels may share one)."""
        from ..keys import digest
        from .launch import CpuLibrary, CudaLibrary

        d = digest(found.binary)
        if d not in self._libraries:
            if device_type == "cuda":
                self._libraries[d] = CudaLibrary(found.binary, f"{found.column} cubin {d[:12]}")
            else:
                self._libraries[d] = CpuLibrary(str(_materialise(found.binary, d, ".so")))
        return self._libraries[d]

    def fallback(self, kernel: str):
        """The oracle's baseline(): what a user runs without regen. An oracle without one gives
        its reference(), which computes in higher precision (slower, never less accurate)."""
        if kernel not in self._fallbacks:
            from ..oracle import load_oracle

            module = load_oracle(self.project.oracle_path(kernel))
            self._fallbacks[kernel] = getattr(module, "baseline", None) or module.reference
        return self._fallbacks[kernel]

    def status(self, device_type: str, index: int | None = None) -> list[dict]:
        """Per kernel: what a call on this device runs and why (no binary is loaded)."""
        out = []
        for kernel in self.project.library_names():
            found, why = self.verified(kernel, device_type, index)
            out.append({"kernel": kernel, "column": found.column if found else None,
                        "runs": ("unverified artifact" if found and found.note else
                                 "verified kernel" if found else "torch baseline"),
                        "why": (f"verified on {_where(found.record)}" if found and not found.note
                                else found.note if found else why)})
        return out


def _where(record: dict | None) -> str:
    from ..plan import verified_where

    return verified_where(record) if record else "nowhere"


def _materialise(binary: bytes, d: str, suffix: str) -> Path:
    """A file holding the binary (ctypes loads shared libraries from files), under the per-machine
    cache; its content is checked against the digest before every load."""
    from ..keys import digest
    from ..localcache import location

    folder = location() / "ops"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{d}{suffix}"
    if not path.exists() or digest(path.read_bytes()) != d:
        tmp = folder / f".tmp-{os.getpid()}-{d}{suffix}"
        tmp.write_bytes(binary)
        os.replace(tmp, path)
    if digest(path.read_bytes()) != d:
        raise RuntimeError(f"{path}: content does not match its digest {d[:12]}")
    return path
