"""Generate stage: one module per generator behind one small interface.

    class Generator(Protocol):
        name: str                                    # "command", "handoff", "llm"
        def generate(self, request: Request) -> Candidate   # raises GenerationError

The search loop (regen/search.py) calls generate() repeatedly: first with no feedback, then with
the previous candidate and specific feedback (compile log, failing case, profile) for repairs and
refinements. A generator never compiles or verifies anything itself.
"""

from __future__ import annotations

from ..artifact import SOURCE_NAMES, Candidate, Request  # noqa: F401 - the interface's types
from ..errors import RegenError


class GenerationError(RegenError):
    """The generator could not produce a candidate (no key, command failed, budget spent)."""

