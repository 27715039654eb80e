"""Report stage: what people and scripts read. Plain text tables, stable JSON."""

from __future__ import annotations

import json
import sys


def _table(rows: list[list[str]], out=sys.stdout) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r, widths)] + [r[-1]]
        print("  ".join(cells).rstrip(), file=out)


def status(nodes, as_json: bool, out=sys.stdout) -> None:
    if as_json:
        json.dump([{"kernel": n.kernel, "target": n.target, "action": n.action,
                    "reasons": n.reasons, "entry": n.entry.id if n.entry else None,
                    "verified": ({k: n.record.get(k) for k in ("verified_at", "hardware", "ok")}
                                 if n.record else None)} for n in nodes], out, indent=1)
        out.write("\n")
        return
    _table([[n.label, n.action, "; ".join(n.reasons)] for n in nodes], out)


def build(results, as_json: bool, out=sys.stdout) -> None:
    if as_json:
        json.dump([r.to_json() for r in results], out, indent=1)
        out.write("\n")
        return
    from .build import resource_line

    rows = []
    for r in results:
        rows.append([r.node.label, r.status, r.summary])
        if r.level:
            rows.append(["", "", "  " + ", ".join(r.level)])
        if r.compile and r.compile.get("resources"):
            line = resource_line(r.compile["resources"])
            if line:
                rows.append(["", "", "  " + line])
        for c in r.checks:
            if c.get("ok") is False:
                rows.append(["", "", f"  ✗ {c['check']}: {c['value']} (limit {c['limit']})"])
    _table(rows, out)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do", file=out)


def bench(rows: list[dict], as_json: bool, out=sys.stdout) -> None:
    if as_json:
        json.dump(rows, out, indent=1)
        out.write("\n")
        return
    table = [["kernel", "target", "case", "time µs", "floor µs", "% floor", "vs eager",
              "vs compile", "expectations"]]
    for r in rows:
        b = r.get("baselines") or {}
        t = r.get("median_s")

        def ratio(name):
            return f"{b[name] / t:.2f}x" if b.get(name) and t else "—"

        exp = r.get("checks") or []
        verdict = "—" if not exp else ("met" if all(c.get("ok") for c in exp) else "NOT met: " + ", ".join(
            f"{c['check']} {c['value']}<{c['limit']}" for c in exp if c.get("ok") is False))
        if r.get("ok") is False:
            verdict = f"REJECTED: {r.get('reason')}"
        if r.get("launch_exposed"):
            # the time reads slow: host launch overhead reached the device timer (runtimes/events.py)
            verdict += f"; {r['launch_exposed']} of {r.get('iters', '?')} samples timed launch overhead"
        table.append([r["kernel"], r["target"], r["case"],
                      f"{t * 1e6:.1f}" if t else "—",
                      f"{r['floor_s'] * 1e6:.1f}" if r.get("floor_s") else "—",
                      f"{r['floor_fraction'] * 100:.0f}%" if r.get("floor_fraction") else "—",
                      ratio("torch_eager"), ratio("torch_compile"), verdict])
    _table(table, out)
