"""The timeline: what a kernel's instrumented build records, and the per-SM Gantt chart of it.

The instrumentation contract (docs/formats.md, "timeline"). A launch recipe may declare

    timeline: {buffer: timeline, slots: "132 * 256", ops: [qkv, attn, o_proj, gate_up, down]}

and pass `timeline` as a kernel argument. Every judged launch passes a null pointer there, and the
binary the judge verifies and times is compiled without REGEN_TIMELINE, so its code has no
timeline stores at all: no judged time is ever of instrumented code. `regen profile --timeline`
compiles the same source with `#define REGEN_TIMELINE 1` in front, allocates `slots` records of 32
bytes, zeroed, passes that buffer, runs the case in the judge's child process on the column's
hardware and reads the records back. A record, little-endian:

    uint32 sm      the SM (GPU: %smid) or host thread that ran the interval
    uint32 block   the block (linear blockIdx) or host thread
    uint32 op      the op id: an index into `ops`
    uint32 step    which item of the op (a tile, a layer, a row range)
    uint64 start   when the interval began, in ns (GPU: %globaltimer; host: CLOCK_MONOTONIC)
    uint64 end     when it ended; 0 marks an unused slot

Where a kernel puts its records inside the buffer is its own business (per-block ranges of slots
are the usual layout); a kernel that runs out of slots stops recording. Nothing here imports torch
or matplotlib at import time.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

RECORD_BYTES = 32
WORDS = RECORD_BYTES // 8          # the buffer regen allocates: int64 [slots * 4]
_RECORD = struct.Struct("<IIIIQQ")
DEFINE = "#define REGEN_TIMELINE 1\n"   # what the instrumented build puts before the source


class TimelineError(ValueError):
    """Records that break the contract (an op id without a name, an interval ending before it
    starts); the message says which record."""


class MissingMatplotlib(RuntimeError):
    """Drawing needs matplotlib, an optional extra."""


@dataclass(frozen=True)
class Event:
    sm: int
    block: int
    op: int
    step: int
    start: int   # ns, as recorded
    end: int


def instrumented(source: str) -> str:
    """The source of the instrumented build: the verified source with REGEN_TIMELINE defined."""
    return DEFINE + source


def decode(words: list[int] | bytes, ops: list[str]) -> list[Event]:
    """Events from the buffer's contents (its int64 words, or raw bytes), unused slots left out."""
    raw = words if isinstance(words, (bytes, bytearray)) else \
        struct.pack(f"<{len(words)}q", *words)
    if len(raw) % RECORD_BYTES:
        raise TimelineError(f"the timeline buffer holds {len(raw)} bytes, not a whole number of "
                            f"{RECORD_BYTES}-byte records")
    out = []
    for i in range(len(raw) // RECORD_BYTES):
        sm, block, op, step, start, end = _RECORD.unpack_from(raw, i * RECORD_BYTES)
        if end == 0:
            continue
        if op >= len(ops):
            raise TimelineError(f"record {i} (block {block}) has op id {op}, but the recipe's "
                                f"timeline.ops names {len(ops)} ops ({', '.join(ops)})")
        if end < start:
            raise TimelineError(f"record {i} (block {block}, {ops[op]} step {step}) ends at "
                                f"{end} ns, before it starts at {start} ns")
        out.append(Event(sm, block, op, step, start, end))
    return out


def summary(events: list[Event], ops: list[str]) -> dict:
    """Span, per-op busy time and counts, SMs used: the figures printed beside the chart."""
    if not events:
        return {"events": 0}
    t0 = min(e.start for e in events)
    t1 = max(e.end for e in events)
    per_op = {}
    for i, name in enumerate(ops):
        mine = [e for e in events if e.op == i]
        if mine:
            per_op[name] = {"count": len(mine), "busy_us": sum(e.end - e.start for e in mine) / 1e3,
                            "first_us": (min(e.start for e in mine) - t0) / 1e3,
                            "last_us": (max(e.end for e in mine) - t0) / 1e3}
    sms = sorted({e.sm for e in events})
    busy = sum(e.end - e.start for e in events)
    return {"events": len(events), "span_us": (t1 - t0) / 1e3, "sms": len(sms),
            "busy_fraction": busy / max(1, (t1 - t0) * len(sms)), "ops": per_op}


def to_json(events: list[Event], ops: list[str], meta: dict) -> dict:
    """The --json file: the run's metadata, the op names and every event, times from the first
    start in ns (the chart can be drawn again from it: `regen profile --render FILE`)."""
    t0 = min((e.start for e in events), default=0)
    return {**meta, "ops": list(ops), "summary": summary(events, ops),
            "events": [[e.sm, e.block, e.op, e.step, e.start - t0, e.end - t0] for e in events]}


def from_json(data: dict) -> tuple[list[Event], list[str], dict]:
    """(events, ops, metadata) of a --json file."""
    try:
        ops = [str(o) for o in data["ops"]]
        events = [Event(*(int(v) for v in row)) for row in data["events"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise TimelineError(f"not a timeline file ({type(exc).__name__}: {exc}); expected the "
                            "JSON `regen profile --json` writes") from None
    meta = {k: v for k, v in data.items() if k not in ("ops", "events", "summary")}
    return events, ops, meta


def matplotlib_problem() -> str | None:
    """Why the chart cannot be drawn here (None when it can)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return ("drawing the timeline needs matplotlib, which is not installed: "
                "pip install 'regen[timeline]' (or write --json only and draw it elsewhere with "
                "regen profile --render FILE.json --timeline OUT.png)")
    return None


def render(events: list[Event], ops: list[str], path: str, title: str = "") -> None:
    """A per-SM Gantt chart: one row per SM (or host thread), one bar per recorded interval,
    coloured by op, time in microseconds from the first start."""
    problem = matplotlib_problem()
    if problem:
        raise MissingMatplotlib(problem)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not events:
        raise TimelineError("no events to draw: the instrumented build wrote no record")
    t0 = min(e.start for e in events)
    sms = sorted({e.sm for e in events})
    row = {sm: i for i, sm in enumerate(sms)}
    cmap = plt.get_cmap("tab10" if len(ops) <= 10 else "tab20")
    colours = [cmap(i % cmap.N) for i in range(len(ops))]
    height = min(12.0, max(3.6, 0.09 * len(sms) + 2.2))
    fig, ax = plt.subplots(figsize=(12, height))
    by_op: dict[int, list] = {}
    for e in events:
        by_op.setdefault(e.op, []).append(e)
    for op, mine in sorted(by_op.items()):
        for sm in sms:
            spans = [((e.start - t0) / 1e3, max((e.end - e.start) / 1e3, 1e-3))
                     for e in mine if e.sm == sm]
            if spans:
                ax.broken_barh(spans, (row[sm] - 0.4, 0.8), facecolors=colours[op],
                               edgecolor="none")
    ax.set_xlabel("time (µs from the first recorded start)")
    ax.set_ylabel("SM" if len(sms) > 4 else "SM / thread")
    ticks = list(range(0, len(sms), max(1, len(sms) // 16)))
    ax.set_yticks(ticks)
    ax.set_yticklabels([str(sms[i]) for i in ticks])
    ax.set_ylim(-0.6, len(sms) - 0.4)
    ax.invert_yaxis()
    s = summary(events, ops)
    import textwrap

    ax.set_title(("\n".join(textwrap.wrap(title, 110)) + "\n" if title else "") +
                 f"{s['events']} intervals on {s['sms']} SMs over {s['span_us']:.1f} µs, "
                 f"{100 * s['busy_fraction']:.0f} % busy", fontsize=10)
    ax.legend(handles=[Patch(color=colours[i], label=name) for i, name in enumerate(ops)
                       if i in by_op], loc="upper center",
              bbox_to_anchor=(0.5, -0.55 / height - 0.06),
              fontsize=8, ncol=min(8, len(by_op)), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def dump(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=None, separators=(",", ":"))
