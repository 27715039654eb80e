"""Generate stage: one module per generator behind one small interface.

    class Generator(Protocol):
        name: str                                    # "command", "handoff", "llm"
        def generate(self, request: Request) -> Candidate   # raises GenerationError

The search loop (regen/search.py) calls generate() repeatedly: first with no feedback, then with
the previous candidate and specific feedback (compile log, failing case, profile) for repairs and
refinements. A generator never compiles or verifies anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import RegenError


class GenerationError(RegenError):
    """The generator could not produce a candidate (no key, command failed, budget spent)."""


@dataclass
class Candidate:
    source: str                 # device code (kernel.cu / kernel.hip / kernel.cpp)
    recipe: str                 # launch.yaml text
    provenance: dict = field(default_factory=dict)   # who produced it: generator, model, tokens...
    note: str = ""              # one line: what this candidate changed


@dataclass
class Request:
    kernel: str
    target: str
    language: str               # cuda | hip | cpp
    prompt: str                 # the exact text a generator is shown (regen/prompt.py)
    previous: Candidate | None = None
    feedback: str | None = None  # why the previous candidate needs work
    purpose: str = "generate"   # generate | repair | optimise


SOURCE_NAMES = {"cuda": "kernel.cu", "hip": "kernel.hip", "cpp": "kernel.cpp"}
