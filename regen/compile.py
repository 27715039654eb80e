"""Compile stage: source -> binary via the target's toolchain, memoised per machine by compile key."""

from __future__ import annotations

from dataclasses import dataclass

from . import keys, localcache
from .toolchains import CompileResult, get_toolchain


@dataclass
class Compiled:
    result: CompileResult
    components: dict         # compile-key components (source digest, toolchain identity)
    key: str
    binary_digest: str | None
    cached: bool


_IDENTITIES: dict = {}


def toolchain_identity(target) -> dict:
    """The toolchain identity of a target (memoised per process: probing can spawn a compiler)."""
    k = (target.toolchain.name, tuple(target.toolchain.flags), target.arch)
    if k not in _IDENTITIES:
        _IDENTITIES[k] = get_toolchain(target).identity(target)
    return _IDENTITIES[k]


_PROBLEMS: dict = {}


def toolchain_problem(target) -> str | None:
    """Why this target cannot be compiled here (None if it can); a toolchain that knows about
    architectures (HIP: does this clang know gfx950?) is asked about the target's."""
    import inspect

    k = (target.toolchain.name, target.arch)
    if k not in _PROBLEMS:
        tc = get_toolchain(target)
        takes_target = len(inspect.signature(tc.problem).parameters) > 0
        _PROBLEMS[k] = tc.problem(target) if takes_target else tc.problem()
    return _PROBLEMS[k]


def compile_source(source: str, target, use_cache: bool = True) -> Compiled:
    components = keys.compile_components(keys.digest(source.encode()), toolchain_identity(target))
    ckey = keys.key(components)
    store = localcache.cache()
    if use_cache:
        hit = store.get(f"compile:{ckey}")
        if hit is not None:
            return Compiled(hit, components, ckey, keys.digest(hit.binary) if hit.ok else None, True)
    result = get_toolchain(target).compile(source, target)
    if result.ok:
        store.set(f"compile:{ckey}", result)
    return Compiled(result, components, ckey, keys.digest(result.binary) if result.ok else None, False)
