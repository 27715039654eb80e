"""What a build is doing while it runs, on stderr: a live line on a terminal, plain lines elsewhere.

A node reports each stage it enters (`stage(label, name)`: plan, generate, compile, verify, store),
from worker threads when the build runs with -j, each candidate its search tried
(`candidate(label, attempt)`: round, candidate, verdict, tokens and dollars so far), and its result
when it is done (`done(result, i, n)`, also callable as `progress(result, i, n)`).

- On a terminal: one live line (`[3/49] rmsnorm@h200 verify 12.3 s`), redrawn at most a few times
  a second and only once something has run for longer than a second, so quick builds print
  nothing; a node that took longer than that, or did not succeed, leaves a line above it.
- Not a terminal (CI logs, pipes): no escape codes, no redrawing; the same lines for slow or
  unsuccessful nodes only.
- Every candidate a search tries leaves a line (a generator call takes seconds to minutes), and
  the live line says which round and candidate the node is on and what it has spent.
- Colour on a terminal unless NO_COLOR is set (https://no-color.org); TERM=dumb gets plain lines.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

STAGES = ("plan", "generate", "compile", "verify", "store")
_QUIET = ("ok", "unsupported", "skipped")          # statuses that need no line when they are quick
_COLOURS = {"ok": "32", "failed": "31", "locked": "33", "waiting": "33"}


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def use_colour(stream) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything."""
    return _isatty(stream) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


class Progress:
    def __init__(self, stream=None, total: int | None = None, live: bool | None = None,
                 colour: bool | None = None, lines: bool = True, min_seconds: float = 1.0,
                 refresh_s: float = 0.25, clock=time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        tty = _isatty(self.stream) and os.environ.get("TERM") != "dumb"
        self.live = tty if live is None else live
        self.colour = use_colour(self.stream) if colour is None else colour
        self.lines = lines                   # print lines for slow or unsuccessful nodes
        self.min_seconds, self.refresh_s, self.clock = min_seconds, refresh_s, clock
        self.total = total
        self.finished = 0
        self._lock = threading.Lock()
        self._active: dict[str, list] = {}   # label -> [stage, stage started, node started]
        self._last_event = clock()           # a node's start when it never reported a stage
        self._last_draw = float("-inf")
        self._shown = False                  # the live line is on the screen
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- what build.py calls ------------------------------------------------------------------
    def stage(self, label: str, name: str) -> None:
        """`label` (kernel@target) entered stage `name`; safe from any thread."""
        with self._lock:
            now = self.clock()
            entry = self._active.get(label)
            if entry is None:
                self._active[label] = [name, now, now]
            else:
                entry[0], entry[1] = name, now
            self._start_ticker()
            self._draw(now)

    def done(self, result, i: int, n: int) -> None:
        """`result` (a regen.build.Result) is finished: the i-th of n nodes."""
        with self._lock:
            now = self.clock()
            self.total, self.finished = n, self.finished + 1
            label = result.node.label
            entry = self._active.pop(label, None)
            started = entry[2] if entry else self._last_event
            self._last_event = now
            elapsed = now - started
            self._start_ticker()
            if self.lines and (elapsed >= self.min_seconds or result.status not in _QUIET):
                self._clear()
                status = self._paint(result.status)
                why = ""   # a failure's one line now: a run cut short still says why
                if result.status == "failed" and getattr(result, "summary", ""):
                    why = ": " + " ".join(str(result.summary).split())[:300]
                self.stream.write(f"[{self.finished}/{n}] {label}: {status} ({elapsed:.1f} s)"
                                  f"{why}\n")
            self._draw(now, force=True)
            self.stream.flush()

    __call__ = done

    def candidate(self, label: str, attempt: dict) -> None:
        """A search of `label` tried a candidate (regen.search's progress event)."""
        with self._lock:
            now = self.clock()
            entry = self._active.get(label)
            if entry is None:
                entry = self._active[label] = ["generate", now, now]
            entry[0] = (f"generate round {attempt.get('round')}, candidate "
                        f"{attempt['spent']['candidates'] + 1}/{attempt.get('max_candidates')}, "
                        f"{spend_text(attempt['spent'])}")
            entry[1] = now
            if self.lines:
                self._clear()
                self.stream.write(f"  {label} {candidate_line(attempt)}\n")
            self._draw(now, force=True)
            self.stream.flush()

    def close(self) -> None:
        """Stop redrawing and take the live line off the screen."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._clear()
            self.stream.flush()

    def __enter__(self):
        """Start counting: the live line shows a first node that is slow even before it reports."""
        with self._lock:
            self._start_ticker()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- the live line --------------------------------------------------------------------------
    def line(self, now: float | None = None) -> str | None:
        """The live line's text, or None when nothing has run for longer than min_seconds."""
        now = self.clock() if now is None else now
        count = f"[{self.finished}/{self.total if self.total is not None else '?'}]"
        slow = [(label, e) for label, e in self._active.items() if now - e[2] >= self.min_seconds]
        if slow:
            label, (stage, stage_t0, node_t0) = min(slow, key=lambda item: item[1][2])
            text = f"{count} {label} {stage} {now - node_t0:.1f} s"
            if stage_t0 != node_t0:
                text += f" ({stage} {now - stage_t0:.1f} s)"
            if len(self._active) > 1:
                text += f", {len(self._active) - 1} more running"
            return text
        if not self._active and (self.total is None or self.finished < self.total) \
                and now - self._last_event >= self.min_seconds:
            return f"{count} working {now - self._last_event:.1f} s"
        return None

    def _draw(self, now: float, force: bool = False) -> None:
        if not self.live or (not force and now - self._last_draw < self.refresh_s):
            return
        self._last_draw = now
        text = self.line(now)
        if text is None:
            self._clear()
            return
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write("\r" + self._paint(text[:width], "2") + "\x1b[K")
        self.stream.flush()
        self._shown = True

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False

    def _paint(self, text: str, code: str | None = None) -> str:
        code = code or _COLOURS.get(text)
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and code else text

    def _start_ticker(self) -> None:
        """Elapsed seconds keep counting between events (a verify can take minutes)."""
        if not self.live or self._ticker is not None or self._stop.is_set():
            return

        def tick():
            while not self._stop.wait(self.refresh_s):
                with self._lock:
                    self._draw(self.clock())

        self._ticker = threading.Thread(target=tick, name="regen-progress", daemon=True)
        self._ticker.start()


def spend_text(spent: dict) -> str:
    tokens = spent.get("tokens") or 0
    tok = f"{tokens / 1000:.1f}k tokens" if tokens >= 1000 else f"{tokens} tokens"
    usd = f"${spent.get('usd') or 0.0:.4f}" + ("+ (a price unknown)" if spent.get("usd_unknown") else "")
    return f"{tok}, {usd} so far"


def _seconds(t: float) -> str:
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.2f} s"


def candidate_line(attempt: dict) -> str:
    """`round 2 candidate 3/8 #2 repair of #1: compile failed | 4.2k tokens, $0.0123 so far`"""
    n, cap = attempt["id"] + 1, attempt.get("max_candidates")
    of = f" of #{attempt['parent']}" if attempt.get("parent") is not None else ""
    head = (f"round {attempt.get('round')} candidate {n}/{cap} #{attempt['id']} "
            f"{attempt.get('purpose')}{of}")
    if attempt.get("error"):
        verdict = "call failed: " + attempt["error"].splitlines()[0][:100]
    elif attempt.get("ok"):
        t = attempt.get("time_s")
        verdict = "passed" + (f", {_seconds(t)}" if t else " (untimed)")
        retime = attempt.get("retime")
        if retime and retime.get("time_s") and retime.get("incumbent_time_s"):
            verdict += (f"; re-timed {_seconds(retime['time_s'])} vs #{retime['incumbent']}'s "
                        f"{_seconds(retime['incumbent_time_s'])} (needed {retime['threshold']:.0%} faster): "
                        + ("new best" if retime["accepted"] else "not faster beyond noise"))
        elif attempt.get("best") == attempt["id"]:
            verdict += ", best so far"
    else:
        verdict = {"parse": "answer unreadable", "compile": "compile failed",
                   "verify": "failed the oracle", "profile": "missed an expectation"}.get(
            attempt.get("stage"), f"failed at {attempt.get('stage')}")
    note = f" \"{attempt['note'][:60]}\"" if attempt.get("note") else ""
    return f"{head}{note}: {verdict} | {spend_text(attempt.get('spent') or {})}"


def for_command(total: int | None, as_json: bool = False, stream=None) -> Progress:
    """The progress display a command uses: live on a terminal; with --json no plain lines (the
    live line is on stderr and leaves nothing behind)."""
    return Progress(stream, total=total, lines=not as_json)
