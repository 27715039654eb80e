"""Generate stage: one module per generator behind one small interface.

    class Generator(Protocol):
        name: str                                    # "command", "handoff", "llm"
        def generate(self, request: Request) -> Candidate   # raises GenerationError

request.deadline (time.monotonic() seconds) and request.max_usd (dollars left) are the node's
budget: a generator bounds its calls by them rather than finding out afterwards.

The search loop (regen/search.py) calls generate() repeatedly: first with no feedback, then with
the previous candidate and specific feedback (compile log, failing case, profile) for repairs and
refinements. A generator never compiles or verifies anything itself.
"""

from __future__ import annotations

from ..artifact import SOURCE_NAMES, Candidate, Request  # noqa: F401 - the interface's types
from ..errors import RegenError


class GenerationError(RegenError):
    """The generator could not produce a candidate (no key, command failed, budget spent).

    transient: the failure belongs to this one call (a dropped or stalled connection, an endpoint
    that kept failing, a command that crashed): the search counts it as a failed candidate and goes
    on. Otherwise (no key, a rejected key or request, a budget that cannot pay for a call) asking
    again cannot help and the search stops. provenance: what the failed call still cost (tokens,
    cost_usd), so that no spend goes unaccounted."""

    def __init__(self, message: str, transient: bool = False, provenance: dict | None = None):
        super().__init__(message)
        self.transient = transient
        self.provenance = dict(provenance or {})



class BudgetExhausted(GenerationError):
    """The node's spending limit cannot pay for another call: the search stops there."""
