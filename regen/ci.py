"""CI glue: JUnit XML, a Markdown step summary and GitHub annotations for `regen verify`, and
`regen check` for CPU runners.

JUnit: one testcase per (kernel, target, case) (classname = kernel, name = "target[case]"), or one
per node when nothing ran case by case (a compile or resource-check failure); nodes that cannot be
verified on this machine are skipped testcases with the reason. With REGEN_SECRET_SEED set, seeds
derived from the secret are never written: records already say "secret", and everything written here
is scrubbed of the derived values in case a failure message quotes one.

`regen check` plans only (no compiler, no torch) and fails, naming each entry, when the committed
cache no longer matches the specs: a node needs (re)generation, or its verification records were
made against an oracle, tolerances, cases or profile that have since changed and nobody re-verified.
"""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from . import keys

MAX_MESSAGE = 500


# -- secret seeds ----------------------------------------------------------------------------------
def _scrubber():
    """A function removing the secret and seeds derived from it from text (identity otherwise)."""
    secret = os.environ.get("REGEN_SECRET_SEED")
    if not secret:
        return lambda text: text
    from .judge import Settings, seed_source as _seed_source

    derive, _ = _seed_source(Settings())
    derived = {str(derive(i)) for i in range(8192)}
    number = re.compile(r"\d+")

    def scrub(text: str) -> str:
        text = text.replace(secret, "<secret>")
        return number.sub(lambda m: "<secret seed>" if m.group(0) in derived else m.group(0), text)

    return scrub


def _seeds_public(case: dict) -> bool:
    return not os.environ.get("REGEN_SECRET_SEED") and case.get("seeds") != "secret"


# -- per-node facts --------------------------------------------------------------------------------
def _failed_cases(result) -> list[dict]:
    """Cases that failed (correctness, guards, or timing on the benchmark cases)."""
    out = []
    outcome = result.outcome
    if outcome is None:
        return out
    out += [c for c in outcome.cases if c.get("ok") is False]
    seen = {c.get("case") for c in out}
    for b in outcome.bench:
        if b.get("ok") is False and b.get("case") not in seen:
            out.append({"case": b.get("case"), "ok": False, "reason": b.get("reason"),
                        "guard": b.get("guard")})
    return out


def skip_reason(node) -> str:
    if node.entry is None:
        return "no artifact in cache: " + ("; ".join(node.reasons) or "needs generate")
    if node.new_entry:
        return f"needs {node.action}: " + "; ".join(node.reasons)
    if node.here is None:
        return "hardware not on this machine: " + ("; ".join(node.reasons) or node.action)
    return f"{node.action}: " + "; ".join(node.reasons)


def _device(result) -> str | None:
    rec = result.record or {}
    return (rec.get("hardware") or {}).get("device") or (result.node.here or {}).get("device")


def _one_line(text: str | None, limit: int = MAX_MESSAGE) -> str:
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- JUnit -----------------------------------------------------------------------------------------
def junit_xml(results, skipped_nodes) -> str:
    suites: dict[str, ET.Element] = {}
    counts: dict[str, dict[str, int]] = {}

    def suite(kernel: str) -> ET.Element:
        if kernel not in suites:
            suites[kernel] = ET.Element("testsuite", name=kernel)
            counts[kernel] = {"tests": 0, "failures": 0, "skipped": 0}
        return suites[kernel]

    def testcase(kernel: str, name: str) -> ET.Element:
        counts[kernel]["tests"] += 1
        return ET.SubElement(suite(kernel), "testcase", classname=kernel, name=name)

    def fail(kernel: str, tc: ET.Element, message: str, kind: str, text: str) -> None:
        counts[kernel]["failures"] += 1
        el = ET.SubElement(tc, "failure", message=_one_line(message), type=kind or "failure")
        el.text = text

    for r in results:
        node = r.node
        suite(node.kernel)
        cases = r.outcome.cases if r.outcome is not None else []
        failed = {c.get("case"): c for c in _failed_cases(r)}
        where = _device(r)
        for c in cases:
            label = c.get("case")
            tc = testcase(node.kernel, f"{node.target}[{label}]")
            bad = failed.pop(label, None)
            if bad is not None:
                details = [str(bad.get("reason"))]
                if bad.get("guard"):
                    details.append(f"guard: {bad['guard']}")
                if bad.get("failing_seed") is not None and _seeds_public(bad):
                    details.append(f"failing seed: {bad['failing_seed']}")
                if where:
                    details.append(f"device: {where}")
                if bad.get("traceback"):
                    details.append(bad["traceback"])
                fail(node.kernel, tc, str(bad.get("reason")), bad.get("guard") or "verify",
                     "\n".join(details))
            else:
                out = ET.SubElement(tc, "system-out")
                out.text = (f"max abs error {c.get('max_abs')}, max rel error {c.get('max_rel')}"
                            + (f" on {where}" if where else ""))
        for label, bad in failed.items():  # a failed benchmark case that has no correctness row
            tc = testcase(node.kernel, f"{node.target}[{label}]")
            fail(node.kernel, tc, str(bad.get("reason")), bad.get("guard") or "timing",
                 str(bad.get("reason")))
        if not cases and not failed:
            tc = testcase(node.kernel, node.target)
            if r.status != "ok":
                fail(node.kernel, tc, r.summary, r.status, r.summary)
            else:
                ET.SubElement(tc, "system-out").text = r.summary
        elif r.status != "ok" and not any(c.get("ok") is False for c in cases) and \
                not _failed_cases(r):
            # the node failed after its cases passed (e.g. the child stopped early)
            tc = testcase(node.kernel, node.target)
            fail(node.kernel, tc, r.summary, r.status, r.summary)
    for n in skipped_nodes:
        if n.action == "unsupported":
            continue
        suite(n.kernel)
        tc = testcase(n.kernel, n.target)
        counts[n.kernel]["skipped"] += 1
        ET.SubElement(tc, "skipped", message=_one_line(skip_reason(n)))
    root = ET.Element("testsuites", name="regen verify")
    total = {"tests": 0, "failures": 0, "skipped": 0}
    for kernel in sorted(suites):
        el = suites[kernel]
        for k, v in counts[kernel].items():
            el.set(k, str(v))
            total[k] += v
        el.set("errors", "0")
        root.append(el)
    for k, v in total.items():
        root.set(k, str(v))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# -- Markdown summary ------------------------------------------------------------------------------
def _cell(text) -> str:
    return _one_line(text, 300).replace("|", "\\|") or "—"


def summary_markdown(results, skipped_nodes) -> str:
    ok = [r for r in results if r.status == "ok"]
    bad = [r for r in results if r.status != "ok"]
    skipped = [n for n in skipped_nodes if n.action != "unsupported"]
    out = [f"### regen verify: {len(ok)} passed, {len(bad)} failed, {len(skipped)} not verified here",
           ""]
    if results:
        out += ["| kernel | target | result | details |", "|---|---|---|---|"]
        for r in results:
            mark = "✅ passed" if r.status == "ok" else f"❌ {r.status}"
            where = _device(r)
            out.append(f"| `{r.node.kernel}` | {r.node.target} | {mark} | "
                       f"{_cell(r.summary + (f' (on {where})' if where else ''))} |")
        out.append("")
    for r in bad:
        cases = _failed_cases(r)
        out += [f"<details><summary>❌ {r.node.label}: {_cell(r.summary)}</summary>", ""]
        for c in cases:
            out.append(f"- `{c.get('case')}`: {_cell(c.get('reason'))}"
                       + (f" (guard: {c['guard']})" if c.get("guard") else ""))
        if not cases:
            out += ["```", r.summary[-3000:], "```"]
        out += ["", "</details>", ""]
    if skipped:
        out += [f"<details><summary>Not verified on this machine ({len(skipped)})</summary>", ""]
        out += [f"- `{n.label}`: {_cell(skip_reason(n))}" for n in skipped]
        out += ["", "</details>", ""]
    return "\n".join(out) + "\n"


# -- GitHub annotations ----------------------------------------------------------------------------
def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(title: str, message: str, file: str | None = None) -> str:
    props = f"file={_escape_property(file)}," if file else ""
    return f"::error {props}title={_escape_property(title)}::{_escape_data(message)}"


def _in_github() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def verify_annotations(results) -> list[str]:
    lines = []
    for r in results:
        if r.status == "ok":
            continue
        cases = _failed_cases(r)
        message = r.summary if not cases else "; ".join(
            f"case {c.get('case')}: {_one_line(c.get('reason'), 300)}" for c in cases[:5])
        lines.append(annotation(f"regen verify {r.node.label}", _one_line(message, 2000)))
    return lines


# -- writing ---------------------------------------------------------------------------------------
def write_reports(results, skipped_nodes, junit_path, summary_path) -> None:
    """JUnit XML to junit_path (when given); the Markdown summary appended to summary_path, else to
    $GITHUB_STEP_SUMMARY when set; error annotations on stdout when running in GitHub Actions."""
    scrub = _scrubber()
    if junit_path:
        path = Path(junit_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(scrub(junit_xml(results, skipped_nodes)))
    target = summary_path or os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a") as fh:
            fh.write(scrub(summary_markdown(results, skipped_nodes)))
    if _in_github():
        for line in verify_annotations(results):
            print(scrub(line), flush=True)


# -- regen check -----------------------------------------------------------------------------------
def assess(project, store, node) -> tuple[str, str | None]:
    """(state, why) of one node's committed cache entry: unsupported | stale | verified | unverified
    (compiled only, awaiting hardware). Plan-only: no compiler, no torch."""
    from . import plan as planning

    if node.action == planning.UNSUPPORTED:
        return "unsupported", None
    if node.new_entry:
        return "stale", f"needs {node.action}: {'; '.join(node.reasons)}"
    records = store.records(node.kernel, node.target, node.entry.id)
    if not records:
        return "unverified", None
    spec, target = project.spec(node.kernel), project.target(node.target)
    want = keys.verify_components(spec, target, project.oracle_digest(spec.name), "",
                                  node.entry.recipe_digest, project.composed_verify(spec))
    fresh, stale = [], []
    for rec in records:
        # the portable part only: a different machine, runtime or compiler is not a stale entry
        have = {**keys.portable(rec.get("verify", {})), "binary": ""}
        diffs = keys.differences(have, want)
        (stale if diffs else fresh).append((rec, diffs))
    if not fresh:
        rec, diffs = stale[-1]
        return "stale", (f"needs re-verify: the record from {planning.verified_where(rec)} is "
                         f"stale: {'; '.join(diffs)}")
    if not any(rec.get("ok") for rec, _ in fresh):
        rec = fresh[-1][0]
        return "stale", (f"failed verification on {planning.verified_where(rec)}: "
                         f"{_one_line(rec.get('reason'), 300)}")
    return "verified", None


def check(project, store, kernels=None, targets=None, as_json: bool = False, out=None) -> int:
    """`regen check`: 0 when every cache entry matches its spec, 3 (as `--locked`) otherwise."""
    from . import plan as planning

    out = out or sys.stdout
    nodes = planning.plan(project, store, kernels, targets)
    states = [(n, *assess(project, store, n)) for n in nodes]
    considered = [s for s in states if s[1] != "unsupported"]
    problems = [(n, why) for n, state, why in states if state == "stale"]
    corrupt = store.check()   # every named object, manifest and record matches its digest
    verified = sum(1 for _, state, _ in states if state == "verified")
    if as_json:
        json.dump({"ok": not (problems or corrupt), "corrupt": corrupt,
                   "nodes": len(considered), "verified": verified,
                   "stale": [{"kernel": n.kernel, "target": n.target, "action": n.action,
                              "problem": why} for n, why in problems]}, out, indent=1)
        out.write("\n")
    else:
        for line in corrupt:
            print(line, file=out)
        for n, why in problems:
            print(f"{n.label}: {why}", file=out)
        if problems:
            print(f"regen check: {len(problems)} of {len(considered)} cache entries are missing, "
                  "stale or failed; regenerate (`regen build`, or `regen handoff` + `regen accept`), "
                  "re-verify on the hardware (`regen verify`) and commit cache/", file=out)
        else:
            print(f"regen check: all {len(considered)} cache entries match their specs "
                  f"({verified} verified on hardware, {len(considered) - verified} compiled only)",
                  file=out)
    if _in_github():
        for n, why in problems:
            spec_file = project.spec_dir / f"{n.kernel}.yaml"
            rel = os.path.relpath(spec_file, Path.cwd())
            print(annotation(f"regen check {n.label}", why,
                             None if rel.startswith("..") else rel), file=out, flush=True)
    return 3 if problems or corrupt else 0
