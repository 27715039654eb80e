"""Reading an answer in the artifact format contract (regen/prompt.py) back into an artifact.

A generator's answer holds one fenced source block, one ```yaml block (launch.yaml) and a `NOTE:`
line. Anything else is a ParseError whose message says exactly what is wrong, because the search
loop feeds that message back to the generator as the repair request.
"""

from __future__ import annotations

import re

from . import GenerationError

SOURCE_TAGS = {"cuda": ("cuda", "cu"), "hip": ("hip",), "cpp": ("cpp", "c++", "cxx")}
"""Fence tags accepted for each language's source block (the prompt asks for the first)."""

_C_LIKE = {"", "c", "c++", "cpp", "cxx", "cc", "h", "cuda", "cu", "hip"}
_YAML_TAGS = {"yaml", "yml"}
_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<ticks>`{3,})[ \t]*(?P<tag>[^`\s]*)[^`]*$")


class ParseError(GenerationError):
    """The answer is not a readable artifact. Carries the raw answer and the generator's
    provenance (tokens were spent on it) so the search loop can record and repair it."""

    def __init__(self, message: str, answer: str = "", provenance: dict | None = None):
        super().__init__(message, provenance=provenance)
        self.answer = answer


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """(tag lower-cased, body, first line number) of every fenced block, in order.
    Raises ParseError for a block that is opened and never closed."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        ticks, tag, start = m.group("ticks"), m.group("tag").lower(), i + 1
        close = re.compile(rf"^ {{0,3}}`{{{len(ticks)},}}[ \t]*$")
        j = start
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ParseError(f"the ```{tag} block opened on line {start} is never closed "
                             "(was the answer cut off?)")
        blocks.append((tag, "\n".join(lines[start:j]) + "\n", start))
        i = j + 1
    return blocks


def _outside_blocks(text: str) -> list[str]:
    out, inside, ticks = [], False, ""
    for line in text.splitlines():
        m = _OPEN.match(line)
        if not inside and m:
            inside, ticks = True, m.group("ticks")
            continue
        if inside and re.match(rf"^ {{0,3}}`{{{len(ticks)},}}[ \t]*$", line):
            inside = False
            continue
        if not inside:
            out.append(line)
    return out


def parse_note(text: str) -> str:
    for line in _outside_blocks(text):
        stripped = line.strip().lstrip("*_").strip()
        if stripped.upper().startswith("NOTE:"):
            return stripped[5:].strip().strip("*_").strip()
    return ""


_CELL = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


def parse_cell(text: str) -> str:
    """The technique-grid cell a refinement says it applies (a `CELL: <id>` line outside the code
    blocks), "" when there is none or it says `none`. Not an id (prose, several words): "" too, so
    a malformed line never fails an otherwise good candidate."""
    for line in _outside_blocks(text):
        stripped = line.strip().lstrip("*_").strip()
        if stripped.upper().startswith("CELL:"):
            value = stripped[5:].strip(" \t*_`")
            return value if _CELL.match(value) else ""
    return ""


def parse_answer(text: str, language: str) -> tuple[str, str, str]:
    """(source, launch.yaml text, note) from an answer; ParseError says what is wrong."""
    from ..errors import InputError
    from ..recipe import parse_recipe

    if language not in SOURCE_TAGS:
        raise ValueError(f"unknown language {language!r}")
    want = SOURCE_TAGS[language][0]
    if not text or not text.strip():
        raise ParseError("the answer is empty: expected one ```" + want + " block, one ```yaml "
                         "block and a NOTE: line")
    blocks = fenced_blocks(text)
    if not blocks:
        raise ParseError(f"the answer has no fenced code block: expected one ```{want} block with "
                         "the whole source file and one ```yaml block with launch.yaml")
    yaml_blocks = [b for b in blocks if b[1] and b[0] in _YAML_TAGS]
    sources = [b for b in blocks if b[0] in SOURCE_TAGS[language]]
    if not sources:
        others = [b for b in blocks if b[0] in _C_LIKE]
        if len(others) == 1:
            sources = others  # an untagged or c++-tagged block is clearly the source
        elif others:
            tags = ", ".join(f"```{b[0]} (line {b[2]})" for b in others)
            raise ParseError(f"no ```{want} block, and {len(others)} other code blocks ({tags}): "
                             f"give the whole source in exactly one ```{want} block")
        else:
            tags = ", ".join(f"```{b[0] or '(untagged)'}" for b in blocks)
            raise ParseError(f"no ```{want} block with the source file (found {tags})")
    if len(sources) > 1:
        lines = ", ".join(str(b[2]) for b in sources)
        raise ParseError(f"{len(sources)} source blocks (```{want} on lines {lines}): give the whole "
                         "source file in exactly one block, with every kernel in it")
    if not yaml_blocks:
        raise ParseError("no ```yaml block with launch.yaml: the artifact needs a recipe with "
                         "`launches:` naming each kernel and its args")
    if len(yaml_blocks) > 1:
        lines = ", ".join(str(b[2]) for b in yaml_blocks)
        raise ParseError(f"{len(yaml_blocks)} ```yaml blocks (lines {lines}): give exactly one, "
                         "the whole launch.yaml")
    source, recipe = sources[0][1], yaml_blocks[0][1]
    if not source.strip():
        raise ParseError(f"the ```{want} block is empty")
    try:
        parse_recipe(recipe, "launch.yaml")
    except InputError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise ParseError(f"launch.yaml is invalid: {where}{exc.detail}") from None
    return source, recipe, parse_note(text)
