"""Report stage: what people and scripts read. Plain text tables, stable JSON.

A build prints one line per (kernel, target): its verdict, the worst case over its kernel
variants (most registers, most spilled bytes, lowest fraction of the roofline floor) and where it
was verified; --verbose adds the per-variant table, --json keeps everything."""

from __future__ import annotations

import json
import sys


def _table(rows: list[list[str]], out) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths)] + [r[-1]]
        print("  ".join(cells).rstrip(), file=out)


def status(nodes, as_json: bool, out=None) -> None:
    out = sys.stdout if out is None else out
    if as_json:
        json.dump([{"kernel": n.kernel, "target": n.target, "action": n.action,
                    "reasons": n.reasons, "entry": n.entry.id if n.entry else None,
                    "verified": ({k: n.record.get(k) for k in ("verified_at", "hardware", "ok")}
                                 if n.record else None)} for n in nodes], out, indent=1)
        out.write("\n")
        return
    _table([[n.label, n.action, "; ".join(n.reasons)] for n in nodes], out)


def _spill(r: dict):
    return r.get("spill_store_bytes", r.get("spill_bytes"))


def _where(result) -> str | None:
    """Where the node was verified (or failed, or that it was not), from its level of evidence."""
    for text in reversed(result.level):
        if text.startswith(("verified ", "failed", "not verified")):
            return text
    return None


def worst(result) -> dict:
    """The worst case over a node's kernel variants and bench cases: what one line can show."""
    resources = (result.compile or {}).get("resources") or {}
    regs = [r["registers"] for r in resources.values() if "registers" in r]
    spills = [s for s in map(_spill, resources.values()) if s is not None]
    bench = (result.record or {}).get("bench") or \
        (result.outcome.bench if result.outcome is not None else [])
    floors = [b["floor_fraction"] for b in bench if b.get("floor_fraction")]
    return {"variants": len(resources), "max_registers": max(regs) if regs else None,
            "max_spill_bytes": max(spills) if spills else None,
            "min_floor_fraction": min(floors) if floors else None, "verified": _where(result)}


def _detail(result, figures: dict) -> str:
    """The summary, then where it was verified unless the summary says so already."""
    where = figures["verified"]
    if where and where not in result.summary:
        return f"{result.summary}; {where}"
    return result.summary


def result_rows(results) -> list[list[str]]:
    """One row per (kernel, target): verdict, worst-case figures, and what happened where."""
    rows = [["node", "verdict", "variants", "max regs", "spill B", "% floor", ""]]
    for r in results:
        f = worst(r)
        rows.append([r.node.label, r.status, str(f["variants"] or "—"),
                     "—" if f["max_registers"] is None else str(f["max_registers"]),
                     "—" if f["max_spill_bytes"] is None else str(f["max_spill_bytes"]),
                     "—" if f["min_floor_fraction"] is None else f"{f['min_floor_fraction'] * 100:.0f}%",
                     _detail(r, f)])
    return rows


def _aligned(rows: list[list[str]], right: tuple[int, ...], indent: str = "") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append((indent + "  ".join(cells + [r[-1]])).rstrip())
    return lines


def variant_rows(resources: dict) -> list[list[str]]:
    """The per-variant resource table of --verbose."""
    rows = [["variant", "regs", "spill B", "smem B", ""]]
    for kernel, r in sorted(resources.items()):
        rows.append([kernel, str(r.get("registers", "—")),
                     "—" if _spill(r) is None else str(_spill(r)),
                     str(r.get("shared_bytes", "—")), ""])
    return rows


def _verbose_lines(r) -> list[str]:
    lines = []
    if r.node.reasons:
        lines.append("    why: " + "; ".join(r.node.reasons))
    if r.level:
        lines.append("    " + ", ".join(r.level))
    resources = (r.compile or {}).get("resources") or {}
    if resources:
        lines += _aligned(variant_rows(resources), right=(1, 2, 3), indent="    ")
    failed = [c for c in r.checks if c.get("ok") is False]
    for c in failed:
        lines.append(f"    ✗ {c['check']}: {c['value']} (limit {c['limit']})")
    met = sum(1 for c in r.checks if c.get("ok"))
    if met:
        lines.append(f"    {met} resource/ISA expectation{'s' * (met != 1)} met")
    return lines


def build(results, as_json: bool, out=None, verbose: bool = False) -> None:
    """One line per (kernel, target); --verbose adds the per-variant table; --json everything."""
    out = sys.stdout if out is None else out
    if as_json:
        json.dump([{**r.to_json(), "worst": worst(r)} for r in results], out, indent=1)
        out.write("\n")
        return
    if results:
        lines = _aligned(result_rows(results), right=(2, 3, 4, 5))
        print(lines[0], file=out)
        for r, line in zip(results, lines[1:]):
            print(line, file=out)
            if verbose:
                for extra in _verbose_lines(r):
                    print(extra, file=out)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do", file=out)


def bench(rows: list[dict], as_json: bool, out=None, summaries: list[dict] | None = None) -> None:
    """The benchmark table; `summaries`: expectations over a kernel's whole benchmark set (the
    geomean ones, each with its kernel and target), one line each under the table."""
    out = sys.stdout if out is None else out
    if as_json:
        json.dump(rows, out, indent=1)
        out.write("\n")
        return
    plans = any(r.get("plan") for r in rows)   # composed specs: fused and unfused plans
    table = [["kernel", "target", "case", "time µs", "floor µs", "% floor", "vs eager",
              "vs compile", *(["vs unfused"] if plans else []), "best peer µs", "vs peer",
              "expectations"]]
    notes: dict[str, None] = {}
    for r in rows:
        b = r.get("baselines") or {}
        t = r.get("median_s")

        def ratio(name):
            return f"{b[name] / t:.2f}x" if b.get(name) and t else "—"

        # a check that does not apply to the case (ok None: a latency-bound case has no floor
        # expectation) neither meets nor misses
        exp = [c for c in r.get("checks") or [] if c.get("ok") is not None]
        failed = [c for c in exp if c["ok"] is False]
        verdict = "—" if not exp else "met" if not failed else "NOT met: " + ", ".join(
            f"{c['check']} {c['value']}{'>' if c['check'] == 'memory' else '<'}{c['limit']}"
            for c in failed)
        if r.get("ok") is False:
            verdict = f"REJECTED: {r.get('reason')}"
        if r.get("launch_exposed"):
            # the time reads slow: host launch overhead reached the device timer (runtimes/events.py)
            verdict += f"; {r['launch_exposed']} of {r.get('iters', '?')} samples timed launch overhead"
        best = r.get("best_peer")
        peer_t = (r.get("peers") or {}).get(best) if best else None
        unf = [f"{r['vs_unfused']:.2f}x" if r.get("vs_unfused") else "—"] if plans else []
        kernel = f"{r['kernel']} ({r['plan']})" if r.get("plan") else r["kernel"]
        table.append([kernel, r["target"], r["case"],
                      f"{t * 1e6:.1f}" if t else "—",
                      f"{r['floor_s'] * 1e6:.1f}" if r.get("floor_s") else "—",
                      f"{r['floor_fraction'] * 100:.0f}%" if r.get("floor_fraction") else "—",
                      ratio("torch_eager"), ratio("torch_compile"), *unf,
                      f"{best} {peer_t * 1e6:.1f}" if peer_t else "—",
                      f"{peer_t / t:.2f}x" if peer_t and t else "—", verdict])
        for name, note in sorted((r.get("peer_notes") or {}).items()):
            notes.setdefault(f"{r['kernel']}: peer {name} {note}", None)
        mem = r.get("peer_memory_bytes") or {}
        if mem:
            own = r.get("memory_bytes")
            notes.setdefault(f"{r['kernel']} {r['case']}: memory " + ", ".join(
                [f"regen {_mib(own)}"] * (own is not None)
                + [f"{n} {_mib(v)}" for n, v in sorted(mem.items())]), None)
    _table(table, out)
    for c in summaries or []:
        verdict = "undecided: " + c.get("note", "") if c.get("ok") is None else \
            "met" if c["ok"] else "NOT met"
        value = f"{c['value']:.3f}x" if c.get("value") is not None else "—"
        out.write(f"{c['kernel']}@{c['target']}: {c['check']} over {c.get('cases', '?')} benchmark "
                  f"cases {value} (expected >= {c['limit']}): {verdict}\n")
    for line in notes:   # one line per skipped or unmatched peer (not one per case)
        out.write(f"note: {line}\n")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
