"""One side of `regen diff`: a git revision's specs/, oracles/, targets/ and cache/ written into a
temporary folder and loaded with the loaders the build uses."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from ..errors import InputError
from ..oracle import oracle_digest
from ..target import load_target

TRACKED = ("specs", "oracles", "targets", "cache")


def _git(cwd: Path, *args: str, binary: bool = False):
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120,
                              text=not binary)
    except FileNotFoundError:
        raise InputError("regen diff compares git revisions, but git is not installed") from None
    return proc


def _git_toplevel(root: Path) -> Path:
    proc = _git(root, "rev-parse", "--show-toplevel")
    if proc.returncode != 0:
        raise InputError(f"regen diff compares git revisions, but {root} is not in a git repository")
    return Path(proc.stdout.strip()).resolve()


def _commit(root: Path, rev: str) -> str:
    proc = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        raise InputError(f"{rev!r} is not a commit in this repository (no commits yet, or a typo?)",
                         field="BASE/HEAD")
    return proc.stdout.strip()


def materialise(root: Path, rev: str, into: Path) -> Path:
    """Write specs/, oracles/, targets/ and cache/ of `rev` under `into`; returns the project root
    there (the same sub-folder of the repository as `root`)."""
    top = _git_toplevel(root)
    prefix = root.resolve().relative_to(top).as_posix()
    prefix = "" if prefix == "." else prefix
    commit = _commit(root, rev)
    paths = []
    for d in TRACKED:
        p = f"{prefix}/{d}" if prefix else d
        if _git(root, "cat-file", "-e", f"{commit}:{p}").returncode == 0:
            paths.append(p)
    project_root = into / prefix if prefix else into
    if paths:
        proc = _git(top, "archive", "--format=tar", commit, "--", *paths, binary=True)
        if proc.returncode != 0:
            raise InputError(f"git archive {rev} failed: {proc.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(into, filter="data")
            else:  # pragma: no cover - Python < 3.11.4
                tar.extractall(into)
    for d in ("specs", "targets", "oracles"):
        (project_root / d).mkdir(parents=True, exist_ok=True)
    return project_root


def _describe_rev(root: Path, rev: str) -> str:
    return f"{rev} ({_commit(root, rev)[:10]})"


# -- one side of the diff ------------------------------------------------------------------------
class Side:
    """A project as it is at one revision. BASE is lenient (a spec that does not load there is
    reported, not fatal); HEAD is strict (an invalid spec is the user's error to fix)."""

    def __init__(self, root: Path, label: str, strict: bool):
        from ..project import Project
        from ..store import Store

        self.label, self.strict = label, strict
        self.project = Project(root)
        self.store = Store(root / "cache")
        self.specs, self.spec_text, self.invalid = {}, {}, {}
        for name in self.project.kernel_names():
            path = self.project.spec_dir / f"{name}.yaml"
            self.spec_text[name] = path.read_text()
            try:
                self.specs[name] = self.project.spec(name)
            except InputError as exc:
                if strict:
                    raise
                self.invalid[name] = _relabel(str(exc), root, label)
        self.oracle_text, self.oracle_digests = {}, {}
        for path in sorted(self.project.oracle_dir.glob("*.py")):
            self.oracle_text[path.stem] = path.read_text()
            try:
                self.oracle_digests[path.stem] = oracle_digest(path)
            except InputError as exc:
                if strict and path.stem in self.specs:
                    raise
                self.oracle_digests[path.stem] = None
                self.invalid[f"oracle {path.stem}"] = _relabel(str(exc), root, label)
        self.targets = {}
        for name in self.project.target_names():
            try:
                self.targets[name] = load_target(self.project.target_dir / f"{name}.yaml")
            except InputError as exc:
                if strict:
                    raise
                self.invalid[f"target {name}"] = _relabel(str(exc), root, label)
        if strict:  # the project's plan reads the same targets: parse the YAML once
            self.project.__dict__["targets"] = dict(self.targets)

    def supported(self, kernel: str, target: str) -> bool:
        spec, tgt = self.specs.get(kernel), self.targets.get(target)
        if spec is None or tgt is None:
            return False
        try:
            return self.project.applies(spec, tgt) is None
        except InputError:
            if self.strict:
                raise
            return False

    def component_ids(self, spec, target: str) -> dict[str, str]:
        out = {}
        for c in spec.components:
            entry = self.store.current(c, target)
            out[c] = entry.id if entry else "missing"
        return out


def _relabel(message: str, root: Path, label: str) -> str:
    return message.replace(str(root) + "/", f"{label}:")
