"""Per-machine results (compiled binaries, resource reports): a diskcache outside the repo.

Location: $REGEN_LOCAL_CACHE, else ~/.cache/regen. Nothing here is committed; deleting it only costs
recompilation.
"""

from __future__ import annotations

import os
from pathlib import Path


def location() -> Path:
    env = os.environ.get("REGEN_LOCAL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "regen"


_CACHE = None


def cache():
    global _CACHE
    if _CACHE is None:
        import diskcache

        _CACHE = diskcache.Cache(str(location()), size_limit=4 * 2**30)
    return _CACHE


_STAMP = None


def code_stamp() -> str:
    """Identifies regen's own code: memoised results from another version are not reused."""
    global _STAMP
    if _STAMP is None:
        import hashlib

        h = hashlib.sha256()
        for p in sorted(Path(__file__).parent.glob("*.py")):
            st = p.stat()
            h.update(f"{p.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _STAMP = h.hexdigest()[:16]
    return _STAMP


def memo(kind: str, content: bytes, compute):
    """compute() once per distinct content on this machine (specs, oracle ASTs, recipes):
    a no-op build over 1000 artifacts must not re-parse 1000 files."""
    import hashlib

    key = f"{kind}:{code_stamp()}:{hashlib.sha256(content).hexdigest()}"  # str keys: no pickling
    store = cache()
    hit = store.get(key)
    if hit is None:
        hit = compute()
        store.set(key, hit)
    return hit


# -- failed searches -----------------------------------------------------------------------------
FAILED_KEPT = 20   # per (kernel, target): the newest are kept


def _failed_key(project_root, kernel: str, target: str) -> str:
    return f"failed-search:{Path(project_root).resolve()}:{kernel}:{target}"


def record_failed_search(project_root, kernel: str, target: str, record: dict) -> None:
    """Keep a search that ended without a passing candidate (its tree, feedback and spend): what
    the generator tried and what it cost must not vanish with the build. `regen log --failed`."""
    import json

    store = cache()
    with store.transact():
        key = _failed_key(project_root, kernel, target)
        kept = json.loads(store.get(key) or "[]")
        kept.append(record)
        store.set(key, json.dumps(kept[-FAILED_KEPT:]))


def failed_searches(project_root, kernel: str, target: str) -> list[dict]:
    """The failed searches kept for (kernel, target) of the project at `project_root`, oldest
    first (the local cache serves every project on the machine)."""
    import json

    return json.loads(cache().get(_failed_key(project_root, kernel, target)) or "[]")
