"""Where a node's verification runs: the builder (regen/build.py) asks its executor.

    local.py  this machine (the default): verification in a child process here, one GPU
              verification at a time, `--jobs N` nodes at once; no extra packages
    ray.py    a Ray cluster (`--executor ray`, the optional extra regen[fleet]): each verification
              is a Ray task that asks for its column's resource (`regen/<target>`), which only the
              workers started for that hardware offer (`regen worker --column T`)

Generation stays with the driver (its threads, `--jobs`, within each node's budget) and the
driver alone writes cache/; an executor compiles, verifies and says which hardware it reaches.

The interface: `here(target)` (the fingerprint of the hardware verification of the column would
run on, or None), `waiting(target)` (why the column waits for hardware, or None),
`compile(source, target)` -> compile.Compiled,
`verify(ctx, spec, target, recipe, binary, settings, cases, composition)` -> judge Outcome,
`jobs(requested)` (nodes built at once) and `close()`.
"""

from __future__ import annotations

from ..errors import InputError

EXECUTORS = ("local", "ray")


def make(name: str, address: str | None = None, project=None):
    if name == "local":
        from .local import LocalExecutor

        return LocalExecutor()
    if name == "ray":
        from .ray import RayExecutor

        return RayExecutor(project, address)
    raise InputError(f"unknown executor {name!r}; expected one of {', '.join(EXECUTORS)}",
                     field="--executor")
