"""What flows between the generate, compile and verify stages: a candidate artifact, the request
that asked for it, and the per-language facts every stage needs (one table, not `vendor == "host"`
branches spread over the pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Candidate:
    source: str                 # device code (kernel.cu / kernel.hip / kernel.cpp)
    recipe: str                 # launch.yaml text
    provenance: dict = field(default_factory=dict)   # who produced it: generator, model, tokens...
    note: str = ""              # one line: what this candidate changed
    cell: str = ""              # the technique-grid cell a refinement says it applies (taxonomy/)


@dataclass
class Request:
    kernel: str
    target: str
    language: str               # cuda | hip | cpp
    prompt: str                 # the exact text a generator is shown (regen/prompt.py)
    previous: Candidate | None = None
    feedback: str | None = None  # why the previous candidate needs work
    purpose: str = "generate"   # generate | repair | optimise
    deadline: float | None = None   # time.monotonic() by which the call must have returned
    max_usd: float | None = None    # dollars the call may cost at most (what the budget has left)
    cells: tuple[str, ...] = ()     # the grid cell ids a refinement may name (the prompt lists them)


@dataclass(frozen=True)
class Language:
    name: str           # cuda | hip | cpp
    source_name: str    # the artifact's source file
    fence: str          # the tag of its fenced block in a prompt or an answer
    toolchain: str      # regen.toolchains module that compiles it
    runtime: str        # regen.runtimes module that launches it
    on_device: bool     # False: host code, which runs in a process of its own on the CPU
    title: str          # how a prompt names it


LANGUAGES = {
    "cuda": Language("cuda", "kernel.cu", "cuda", "nvrtc", "cuda", True, "CUDA C++"),
    "hip": Language("hip", "kernel.hip", "hip", "hip", "hip", True, "HIP C++"),
    "cpp": Language("cpp", "kernel.cpp", "cpp", "cxx", "cpu", False, "C++17"),
}
SOURCE_NAMES = {name: lang.source_name for name, lang in LANGUAGES.items()}
