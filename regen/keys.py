"""Three content keys, each over canonical components (sorted JSON of normalised fields).

generate key: everything the generator is shown that defines the kernel: intent, signature,
    invariant descriptions, the target family's generation view, component artifacts, prompt template
    version, schema version, salt. Cases, tolerances and profile expectations are shown to the
    generator for context but belong to the verify key: changing them re-verifies the existing
    artifact and regenerates only if it now fails (early cutoff).
compile key: source digest, toolchain identity (tool, version, flags, arch).
verify key: binary digest, recipe, oracle code digest, tolerances, cases, profile expectations and
    peaks for this target, the judge's version, plus (on the verifying machine) hardware
    fingerprint and runtime versions.

Every cache entry and record stores its components, not only the hash, so `regen explain` can
name exactly which component changed.
"""

from __future__ import annotations

import difflib
import hashlib
import json

from . import SCHEMA_VERSION
from .artifact import LANGUAGES
from .spec import Spec, normalise_prose, select
from .target import Target

PORTABLE_EXCLUDE = ("hardware", "runtime")  # verify components only the verifying machine knows

# Which key each spec and target field feeds: the builders below read these tables, and so does
# `regen diff` to say what a field's change causes (regenerate, re-verify, recompile).
GENERATE_SPEC_FIELDS = ("summary", "intent", "signature", "invariants", "salt")
# TensorSpec fields of block-scaled formats (regen/spec.py), in a key only where set
FORMAT_FIELDS = ("format", "storage", "logical_shape")
VERIFY_SPEC_FIELDS = ("tolerance", "cases", "profile")
# a target's generate fields are its generation view (regen.target); peaks are verify components
# and records are matched by the hardware they ran on; the toolchain and arch make the binary
VERIFY_TARGET_FIELDS = ("peaks", "hardware")
COMPILE_TARGET_FIELDS = ("toolchain",)


def field_effect(kind: str, name: str) -> str:
    """What changing field `name` of a spec or target causes: "generate", "verify", "compile"
    or "plan" (which pairs exist, nothing about an artifact)."""
    from .target import ARCH_VIEW_FIELDS, FAMILY_VIEW_FIELDS

    if kind == "spec":
        if name in GENERATE_SPEC_FIELDS or name in ("components", "composition"):  # entry ids
            return "generate"
        return "verify" if name in VERIFY_SPEC_FIELDS else "plan"
    if name in (*ARCH_VIEW_FIELDS, *FAMILY_VIEW_FIELDS, "description", "family"):
        return "generate"
    if name in VERIFY_TARGET_FIELDS:
        return "verify"
    return "compile" if name in COMPILE_TARGET_FIELDS else "plan"

# The verification method's version: bumped when a change to the worker or the timing guards can
# change a verdict, so every record made by the old judge is verified again (like a new toolchain).
#   1: the first judge.
#   2: host launch overhead kept outside the GPU device timer (runtimes/events.py); before, a
#      27-70 µs Python launch gap was timed with each H200 kernel, and 40-175 µs of
#      torch.compile guard checks with its baseline.
#   3: a judge the artifact cannot tell from production and that checks what it times: hidden
#      shape variants and every bench case correctness-checked, random per-run output fills (no
#      fixed sentinel) and buffer offsets, timed iterations checked on a random subset with random
#      counts and input order, the job file gone before the artifact loads.
JUDGE_VERSION = 3
# Host (C++) artifacts have a judge of their own since they left the worker's process:
#   3: host artifacts run in a process of their own (runtimes/host_exec.py), buffers staged
#      through a shared arena; a call lasts until that process waits for the next request.
#   4: judge 3's production-like checks (hidden variants, bench cases, random fills and offsets,
#      checked timed iterations) and a seccomp allowlist around the artifact's process, with
#      thread accounting that knows OpenMP's pool and no floor guard on the host.
#   5: a call whose process replied, then blocked somewhere other than its control socket, is
#      refused (it was ended after 0.5 s: an early reply and a sleep let work finish untimed);
#      an oracle whose normal-distribution input does not vary with the seed is refused.
HOST_JUDGE_VERSION = 5


def judge_version(target: Target) -> int:
    return JUDGE_VERSION if LANGUAGES[target.language].on_device else HOST_JUDGE_VERSION


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(value) -> str:
    data = value if isinstance(value, bytes) else canonical(value).encode()
    return hashlib.sha256(data).hexdigest()


def key(components: dict) -> str:
    return digest(components)


def generate_components(spec: Spec, view: dict, component_entries: dict[str, str],
                        template_version: str) -> dict:
    """`view` is the family's generation view (Project.generation_view): members of one family
    get one key, so one generation serves them all."""
    sig = spec.signature.model_dump(mode="json")
    for t in sig["inputs"] + sig["outputs"]:
        t["description"] = normalise_prose(t["description"])
        for field in FORMAT_FIELDS:  # only a format tensor has them: other keys do not change
            if t[field] is None:
                del t[field]
    for p in sig["params"]:
        p["description"] = normalise_prose(p["description"])
    view = {**view, "notes": normalise_prose(view["notes"]),
            "description": normalise_prose(view["description"])}
    shown = {"summary": normalise_prose(spec.summary), "intent": normalise_prose(spec.intent),
             "signature": sig, "salt": spec.salt,
             "invariants": [{"name": i.name, "description": normalise_prose(i.description)}
                            for i in spec.invariants]}
    composition = {"spec.composition": spec.composition.key_dump()} \
        if spec.composition is not None else {}   # absent otherwise: no other key changes
    return {
        **{f"spec.{name}": shown[name] for name in GENERATE_SPEC_FIELDS},
        **composition,
        "target": view,
        "components": dict(sorted(component_entries.items())),
        "prompt.template": template_version,
        "schema": SCHEMA_VERSION,
    }


def compile_components(source_digest: str, toolchain_identity: dict) -> dict:
    return {"source": source_digest, "toolchain": toolchain_identity}


def profile_for(spec: Spec, target: Target) -> dict:
    """The profile expectations that apply to one target (selector maps resolved)."""
    p = spec.profile
    out = {"bytes": p.bytes, "flops": p.flops,
           "floor_fraction": select(p.floor_fraction, target),
           "speedup": p.speedup_for(target, LANGUAGES[target.language].on_device),
           "max_registers": select(p.max_registers, target),
           "max_spills": select(p.max_spills, target),
           "instructions": select(p.instructions, target) or []}
    if p.memory is not None:  # only where given: the keys of specs without it do not change
        out["memory"] = p.memory
    if p.compute is not None:  # likewise
        out["compute"] = p.compute
    if p.geomean_speedup and LANGUAGES[target.language].on_device:  # likewise
        out["geomean_speedup"] = dict(sorted(p.geomean_speedup.items()))
    return out


def verify_components(spec: Spec, target: Target, oracle_digest: str, binary_digest: str,
                      recipe_digest: str, composed: dict | None = None) -> dict:
    """The portable part; add_machine() adds what only the verifying machine knows. `composed`:
    a composed spec's component oracles and tolerances (composed_verify), which its reference is
    made of."""
    checked = {"tolerance": {k: v.model_dump() for k, v in sorted(spec.tolerance.items())},
               "cases": [_case_dump(c) for c in spec.cases],
               "profile": profile_for(spec, target)}
    return {
        "binary": binary_digest,
        "recipe": recipe_digest,
        "oracle": oracle_digest,
        **{name: checked[name] for name in VERIFY_SPEC_FIELDS},
        "peaks": {k: v.model_dump() for k, v in sorted(target.peaks.items())},
        "judge": judge_version(target),
        **(composed or {}),
    }


def composed_verify(spec: Spec, oracle_digest_of, spec_of) -> dict:
    """A composed spec's verify components from its components: each one's oracle digest and
    tolerances (`component.rmsnorm.oracle`, ...). A change there re-verifies the composed kernel;
    a change of a component's intent or interface reaches it through the component's entry id, a
    generate component. A composed component's reference is its own components', so theirs
    are listed (transitively), not its own. Empty for a spec that is not composed (its key is
    unchanged)."""
    if spec.composition is None:
        return {}
    out = {}
    for name in spec.composition.kernels():
        inner = spec_of(name)
        if inner.composition is not None:
            out.update(composed_verify(inner, oracle_digest_of, spec_of))
            continue
        out[f"component.{name}.oracle"] = oracle_digest_of(name)
        out[f"component.{name}.tolerance"] = {k: v.model_dump()
                                              for k, v in sorted(inner.tolerance.items())}
    return dict(sorted(out.items()))


def _case_dump(case) -> dict:
    """A case as its key sees it; a case without its own tolerance dumps as it did before
    per-case tolerances existed (no key changes for specs that do not use them)."""
    out = case.model_dump(mode="json")
    for optional in ("tolerance", "targets"):   # absent as before these fields existed
        if out.get(optional) is None:
            out.pop(optional, None)
    if out.get("floor") is True:   # the default, absent as before the field existed
        out.pop("floor")
    return out


def add_machine(components: dict, fingerprint: dict) -> dict:
    fp = dict(fingerprint)
    runtime = fp.pop("runtime", {})
    return {**components, "hardware": fp, "runtime": runtime}


def portable(components: dict) -> dict:
    """The components any machine can recompute; a record older than the judge component was
    made by judge 1."""
    out = {k: v for k, v in components.items() if k not in PORTABLE_EXCLUDE}
    if components and "judge" not in components:
        out["judge"] = 1
    return out


# -- explaining differences ------------------------------------------------------------------
def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """One line per changed component, e.g. 'spec.intent changed (3 lines)'."""
    lines = []
    for name in sorted(set(old) | set(new)):
        label = f"{prefix}{name}"
        if name not in old:
            lines.append(f"{label} added")
        elif name not in new:
            lines.append(f"{label} removed")
        elif old[name] != new[name]:
            lines.append(_describe(label, old[name], new[name]))
    return lines


def _is_digest(v) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _describe(label: str, old, new) -> str:
    if _is_digest(old) or _is_digest(new):
        return f"{label} changed"
    if isinstance(old, str) and isinstance(new, str):
        if len(old) > 60 or len(new) > 60 or "\n" in old + new:
            return f"{label} changed ({_changed_words(old, new)})"
        return f"{label} changed ({old or '∅'} → {new or '∅'})"
    if isinstance(old, dict) and isinstance(new, dict):
        inner = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        if len(inner) <= 3 and all(not isinstance(old.get(k), (dict, list)) for k in inner):
            parts = [f"{k}: {_short(old.get(k))} → {_short(new.get(k))}" for k in inner]
            return f"{label} changed ({'; '.join(parts)})"
        return f"{label} changed ({', '.join(inner[:6])}{'…' if len(inner) > 6 else ''})"
    if isinstance(old, list) and isinstance(new, list):
        return f"{label} changed ({len(old)} → {len(new)} items)" if len(old) != len(new) else \
            f"{label} changed ({sum(a != b for a, b in zip(old, new))} of {len(old)} items)"
    return f"{label} changed ({_short(old)} → {_short(new)})"


def _short(v) -> str:
    s = canonical(v) if not isinstance(v, str) else v
    return s if len(s) <= 40 else s[:37] + "…"


def _changed_words(old: str, new: str) -> str:
    a, b = old.split(), new.split()
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")
    return f"{changed} word{'s' if changed != 1 else ''}"
