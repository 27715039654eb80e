"""A variant folder: a candidate implementation kept for timing beside the committed one, laid
out as `regen handoff` writes it (a kernel source and launch.yaml). A folder with launch.yaml
alone reuses the committed source of kernel@target: a launch-only candidate (another ring size,
another grid) is not a copy of the kernel."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .generators import SOURCE_NAMES


def read(folder: Path, store, kernel: str, target: str) -> tuple[str, str, str]:
    """(source file name, source, launch recipe text) of the variant in `folder`."""
    recipe = folder / "launch.yaml"
    if not recipe.is_file():
        raise InputError("no launch.yaml: a variant folder holds launch.yaml and, unless it "
                         "reuses the committed source, the kernel source", file=str(folder))
    source = next((folder / n for n in SOURCE_NAMES.values() if (folder / n).exists()), None)
    if source is not None:
        return source.name, source.read_text(), recipe.read_text()
    entry = store.current(kernel, target)
    if entry is None:
        raise InputError(f"no kernel source, and cache/ has no committed implementation of "
                         f"{kernel}@{target} to reuse", file=str(folder))
    return entry.source_name, entry.source(), recipe.read_text()
