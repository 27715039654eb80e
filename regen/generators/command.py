"""The command generator: any external program (a coding-agent CLI, a script) writes the artifact.

For each request regen makes a fresh task directory and runs the command through the shell, in the
current directory, with:
    stdin                          the prompt
    $REGEN_TASK_DIR/prompt.md      the prompt again
    $REGEN_TASK_DIR/feedback.md    why the previous candidate needs work (repairs, refinements)
    $REGEN_TASK_DIR/previous/      the previous candidate: kernel.<ext>, launch.yaml, NOTE
    $REGEN_KERNEL $REGEN_TARGET $REGEN_LANGUAGE $REGEN_PURPOSE $REGEN_SOURCE_NAME
The command answers either by writing $REGEN_TASK_DIR/kernel.<ext> and launch.yaml (and optionally
a one-line NOTE file, or a `NOTE:` line on stdout), or by printing an answer in the prompt's fenced
format on stdout. A non-zero exit or a timeout is a GenerationError with the tail of stderr.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .. import procs
from ..artifact import SOURCE_NAMES, Candidate, Request
from . import GenerationError
from .llm import redact
from .parse import ParseError, parse_answer, parse_cell, parse_note

TAIL_CHARS = 2000


def _tail(text: str, limit: int = TAIL_CHARS) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else "..." + text[-limit:]


class CommandGenerator:
    """Generator that delegates to an external command."""

    name = "command"

    def __init__(self, command: str, timeout: float = 1800.0, cwd: str | Path | None = None,
                 workdir: str | Path | None = None, keep: bool = False):
        """cwd: where the command runs (default: the current directory, so an agent can read
        specs/ and oracles/). workdir: parent of the task directories (default: the system temp
        dir). keep: leave task directories behind even on success."""
        if not command or not command.strip():
            raise GenerationError("the command generator needs a command: --generator command:<cmd>")
        self.command = command
        self.timeout = timeout
        self.cwd = str(cwd) if cwd is not None else None
        self.workdir = str(workdir) if workdir is not None else None
        self.keep = keep

    def problem(self) -> str | None:
        return None

    def _prepare(self, request: Request) -> Path:
        if self.workdir:
            Path(self.workdir).mkdir(parents=True, exist_ok=True)
        task = Path(tempfile.mkdtemp(prefix=f"regen-{request.kernel}-{request.target}-",
                                     dir=self.workdir))
        (task / "prompt.md").write_text(request.prompt)
        if request.feedback:
            (task / "feedback.md").write_text(request.feedback)
        if request.previous is not None:
            prev = task / "previous"
            prev.mkdir()
            if request.previous.recipe.strip():
                (prev / SOURCE_NAMES[request.language]).write_text(request.previous.source)
                (prev / "launch.yaml").write_text(request.previous.recipe)
            else:  # the previous answer could not be parsed: hand it back as it was
                (prev / "answer.md").write_text(request.previous.source)
            if request.previous.note:
                (prev / "NOTE").write_text(request.previous.note + "\n")
        return task

    def generate(self, request: Request) -> Candidate:
        task = self._prepare(request)
        source_name = SOURCE_NAMES[request.language]
        env = dict(os.environ, REGEN_TASK_DIR=str(task), REGEN_KERNEL=request.kernel,
                   REGEN_TARGET=request.target, REGEN_LANGUAGE=request.language,
                   REGEN_PURPOSE=request.purpose, REGEN_SOURCE_NAME=source_name)
        started = time.monotonic()
        timeout, bound = self.timeout, "its timeout"
        if request.deadline is not None and request.deadline - started < timeout:
            timeout, bound = max(request.deadline - started, 0.01), "the node's time budget"
        proc = procs.start(self.command, shell=True, cwd=self.cwd, env=env,  # a session of its own
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = proc.communicate(request.prompt, timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the command's own process group
            except ProcessLookupError:
                pass
            try:
                stdout, stderr = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a descendant left the group and holds the pipes
                stdout, stderr = "", ""
                for pipe in (proc.stdout, proc.stderr):
                    pipe.close()
                proc.wait()
            raise GenerationError(redact(
                f"generator command timed out after {timeout:.3g} s ({bound}): {self.command}\n"
                f"task directory kept: {task}\nstderr tail:\n{_tail(stderr)}"),
                transient=True) from None
        finally:
            procs.finished(proc)
        procs.check()  # killed by a signal to regen: not the command's failure
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise GenerationError(redact(
                f"generator command exited with status {proc.returncode}: {self.command}\n"
                f"task directory kept: {task}\nstderr tail:\n{_tail(stderr)}"), transient=True)
        provenance = {"generator": "command", "command": redact(self.command),
                      "exit_code": proc.returncode, "seconds": round(seconds, 3)}
        try:
            source, recipe, note = self._read_answer(task, request.language, stdout, provenance)
        finally:
            if not self.keep:
                shutil.rmtree(task, ignore_errors=True)
        return Candidate(source=source, recipe=recipe, provenance=provenance, note=note,
                         cell=parse_cell(stdout))

    @staticmethod
    def _read_answer(task: Path, language: str, stdout: str, provenance: dict):
        from ..errors import InputError
        from ..prompt import FENCE_TAGS, fence
        from ..recipe import parse_recipe

        source_name = SOURCE_NAMES[language]
        source_file, recipe_file = task / source_name, task / "launch.yaml"
        if not (source_file.exists() or recipe_file.exists()):
            try:
                return parse_answer(stdout, language)
            except ParseError as exc:
                raise ParseError(f"{exc} (the command wrote no {source_name} into $REGEN_TASK_DIR "
                                 "and its stdout is not an answer in the fenced format)",
                                 answer=stdout, provenance=provenance) from None
        source = source_file.read_text() if source_file.exists() else ""
        recipe = recipe_file.read_text() if recipe_file.exists() else ""
        answer = "\n".join([fence(source, FENCE_TAGS[language]), fence(recipe, "yaml")])
        if not (source_file.exists() and recipe_file.exists()):
            have, missing = ((source_name, "launch.yaml") if source_file.exists()
                             else ("launch.yaml", source_name))
            raise ParseError(f"the command wrote {have} but no {missing} into $REGEN_TASK_DIR",
                             answer=answer, provenance=provenance)
        if not source.strip():
            raise ParseError(f"the command wrote an empty {source_name}", answer=answer,
                             provenance=provenance)
        try:
            parse_recipe(recipe, "launch.yaml")
        except InputError as exc:
            where = f"{exc.field}: " if exc.field else ""
            raise ParseError(f"launch.yaml is invalid: {where}{exc.detail}", answer=answer,
                             provenance=provenance) from None
        note_file = task / "NOTE"
        if note_file.exists():
            note = (note_file.read_text().strip().splitlines() or [""])[0].strip()
            note = note[5:].strip() if note.upper().startswith("NOTE:") else note
        else:
            note = parse_note(stdout)
        return source, recipe, note
