"""Run stage, child-process side only: load a compiled artifact and launch its recipe.

Nothing here is imported by the regen process itself; regen/judge/harness.py imports one runtime
in a child process. Interface (each module exposes a `Runtime` class):
    device: str                                      # torch device of the buffers: "cpu", "cuda"
    def __init__(self, binary_path: str, limits: dict | None = None)
                                                     # load the shared object / cubin / code object;
                                                     # limits: the target's (e.g. cache sizes)
    def launch(self, launches, buffers) -> None      # BoundLaunch list, name -> torch.Tensor
    def synchronize(self) -> None                    # full device synchronisation
    def timer(self) -> Timer                         # .start(), .stop() -> seconds (device time)
    def flush_cache(self) -> None                    # evict caches between timed iterations
"""

from __future__ import annotations

import importlib

from ..artifact import LANGUAGES


def get_runtime(language: str):
    return importlib.import_module(f"regen.runtimes.{LANGUAGES[language].runtime}").Runtime
