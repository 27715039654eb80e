"""Content keys (regen/keys.py) decide what is rebuilt, so they must be stable across runs and
machines, change when and only when a component they cover changes (prose whitespace and YAML
comments are no change), and explain a change in one line per component that names it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import SCALE_SPEC
from regen import keys
from regen.spec import load_spec, normalise_prose
from regen.target import generation_view, load_target

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cpu():
    return load_target(ROOT / "targets" / "cpu.yaml")


def _spec(folder: Path, text: str = SCALE_SPEC):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scale.yaml"
    path.write_text(text)
    return load_spec(path)


def _generate_key(spec, target, components=None, template="t1"):
    return keys.key(keys.generate_components(spec, generation_view([target]), components or {}, template))


# -- canonical form and digests ------------------------------------------------------------------

def test_canonical_is_sorted_compact_json_that_keeps_unicode():
    value = {"b": [1, 2.5, "é"], "a": None}
    assert keys.canonical(value) == '{"a":null,"b":[1,2.5,"é"]}'
    assert keys.canonical({"a": None, "b": [1, 2.5, "é"]}) == keys.canonical(value)
    assert keys.canonical({"p": Path("/x")}) == '{"p":"/x"}'  # anything else as its str()


def test_digests_are_stable_sha256_of_the_canonical_form():
    """Pinned values: every committed key in cache/ depends on them not moving."""
    value = {"b": [1, 2.5, "é"], "a": None}
    assert keys.digest(value) == "21fddaeebc6c84f1b55624c41336b0e521adecf3e414f2eaa12789afd6167428"
    assert keys.digest(value) == hashlib.sha256(keys.canonical(value).encode()).hexdigest()
    assert keys.digest(b"regen") == hashlib.sha256(b"regen").hexdigest()  # bytes are hashed as they are
    assert keys.key(value) == keys.digest(value)


def test_key_changes_with_any_change_of_a_component_and_only_then():
    base = {"source": "a" * 64, "toolchain": {"tool": "cxx", "flags": ["-O3"]}}
    assert keys.key(base) == keys.key(json.loads(json.dumps(base)))
    assert keys.key(base) == keys.key({"toolchain": {"flags": ["-O3"], "tool": "cxx"}, "source": "a" * 64})
    variants = [{**base, "source": "b" * 64}, {**base, "toolchain": {"tool": "cxx", "flags": ["-O2"]}},
                {**base, "toolchain": {"tool": "cxx", "flags": ["-O3", "-g"]}}, {**base, "x": None},
                {"source": base["source"]}, {**base, "source": "a" * 63}]
    assert len({keys.key(v) for v in variants} | {keys.key(base)}) == len(variants) + 1


# -- the generate key ----------------------------------------------------------------------------

def test_prose_whitespace_and_yaml_comments_do_not_change_the_generate_key(tmp_path, cpu):
    intent = "intent: |\n  y = alpha * x elementwise over a contiguous [M, N] tensor, computed in float32.\n"
    assert intent in SCALE_SPEC
    rewrapped = SCALE_SPEC.replace(intent, "# a reviewer's comment\nintent: |\n"
                                           "  y = alpha * x   elementwise\n"
                                           "  over a contiguous [M, N] tensor,\n\n  computed in float32.\n")
    reworded = SCALE_SPEC.replace(intent, intent.replace("computed", "always computed"))
    a, b, c = (_spec(tmp_path / n, t) for n, t in (("a", SCALE_SPEC), ("b", rewrapped), ("c", reworded)))
    assert a.intent != b.intent and normalise_prose(a.intent) == normalise_prose(b.intent)
    assert _generate_key(a, cpu) == _generate_key(b, cpu)
    assert _generate_key(a, cpu) != _generate_key(c, cpu), "a word added to the intent is a change"


def test_normalise_prose_folds_whitespace_runs():
    assert normalise_prose("  a\n\tb   c \n") == "a b c"
    assert normalise_prose("a b") == normalise_prose("a\n b")
    assert normalise_prose("ab") != normalise_prose("a b")


@pytest.mark.parametrize("change", [
    {"intent": "y = 3 * x"}, {"summary": "Triple."}, {"salt": "2"},
])
def test_generate_key_covers_what_the_generator_is_shown(tmp_path, cpu, change):
    spec = _spec(tmp_path)
    assert _generate_key(spec.model_copy(update=change), cpu) != _generate_key(spec, cpu)


def test_generate_key_covers_signature_invariants_components_and_template(tmp_path, cpu):
    spec = _spec(tmp_path)
    base = _generate_key(spec, cpu)
    sig = spec.signature.model_copy(update={"dtypes": ["float32", "float16"]})
    inv = [spec.invariants[0].model_copy(update={"description": "every output is finite and real"})]
    assert _generate_key(spec.model_copy(update={"signature": sig}), cpu) != base
    assert _generate_key(spec.model_copy(update={"invariants": inv}), cpu) != base
    assert _generate_key(spec, cpu, components={"softmax": "e1"}) != base
    assert _generate_key(spec, cpu, template="t2") != base


def test_cases_tolerances_and_profile_belong_to_the_verify_key_not_the_generate_key(tmp_path, cpu):
    """Changing them re-verifies the artifact instead of regenerating it (early cutoff)."""
    spec = _spec(tmp_path)
    changed = _spec(tmp_path / "x", SCALE_SPEC.replace("{M: 3, N: 130}", "{M: 3, N: 131}").replace(
        "atol: 1.0e-6", "atol: 2.0e-6"))
    assert _generate_key(changed, cpu) == _generate_key(spec, cpu)
    verify = lambda s: keys.key(keys.verify_components(s, cpu, "o" * 64, "b" * 64, "r" * 64))  # noqa: E731
    assert verify(changed) != verify(spec)


# -- the verify key --------------------------------------------------------------------------------

def test_verify_key_changes_with_each_of_its_components(tmp_path, cpu):
    spec = _spec(tmp_path)
    digests = {"oracle": "0" * 64, "binary": "1" * 64, "recipe": "2" * 64}
    base = keys.verify_components(spec, cpu, digests["oracle"], digests["binary"], digests["recipe"])
    assert set(base) == {"binary", "recipe", "oracle", "tolerance", "cases", "profile", "peaks", "judge"}
    assert base["judge"] == keys.judge_version(cpu) == keys.HOST_JUDGE_VERSION  # cpu is a host target
    for name in digests:
        d = {**digests, name: "f" * 64}
        other = keys.verify_components(spec, cpu, d["oracle"], d["binary"], d["recipe"])
        assert keys.key(other) != keys.key(base)
        assert keys.differences(base, other) == [f"{name} changed"]


def test_compile_components_are_the_source_and_the_toolchain():
    c = keys.compile_components("d" * 64, {"tool": "cxx", "flags": ["-O3"]})
    assert c == {"source": "d" * 64, "toolchain": {"tool": "cxx", "flags": ["-O3"]}}


# -- machine-only parts ----------------------------------------------------------------------------

def test_portable_drops_what_only_the_verifying_machine_knows():
    portable = {"binary": "b" * 64, "judge": 3}
    full = keys.add_machine(portable, {"device": "x86", "cores": 2, "runtime": {"torch": "2.13"}})
    assert full["hardware"] == {"device": "x86", "cores": 2} and full["runtime"] == {"torch": "2.13"}
    assert keys.portable(full) == portable
    assert keys.key(keys.portable(full)) == keys.key(portable)


def test_portable_reads_a_record_without_judge_as_judge_1():
    assert keys.portable({"binary": "b", "hardware": {}}) == {"binary": "b", "judge": 1}
    assert keys.portable({}) == {}


# -- explaining differences -----------------------------------------------------------------------

def test_differences_give_one_line_per_component_naming_it():
    old = {"spec.intent": "word " * 20, "spec.salt": "", "source": "a" * 64, "gone": 1,
           "tolerance": {"float32": {"atol": 1e-6}}, "cases": [1, 2], "flags": {"O": 3, "march": "v2"},
           "same": [1]}
    new = {"spec.intent": "word " * 19 + "words", "spec.salt": "2", "source": "b" * 64, "added": True,
           "tolerance": {"float32": {"atol": 2e-6}}, "cases": [1, 2, 3], "flags": {"O": 2, "march": "v2"},
           "same": [1]}
    lines = keys.differences(old, new, prefix="")
    assert lines == ["added added", "cases changed (2 → 3 items)", "flags changed (O: 3 → 2)",
                     "gone removed", "source changed", "spec.intent changed (1 word)",
                     "spec.salt changed (∅ → 2)", "tolerance changed (float32)"]
    for line in lines:
        assert "\n" not in line
    assert keys.differences(old, old) == []
    assert keys.differences({"a": 1}, {"a": 2}, prefix="verify.") == ["verify.a changed (1 → 2)"]


def test_differences_stay_one_short_line_for_long_or_multiline_values():
    old = {"notes": "first line\nsecond line", "blob": {"k": "x" * 200},
           "many": {str(i): i for i in range(9)}}
    new = {"notes": "first line\nthird line", "blob": {"k": "y" * 200},
           "many": {str(i): -i for i in range(9)}}
    lines = keys.differences(old, new)
    assert len(lines) == 3
    for line in lines:
        assert "\n" not in line and len(line) < 120, line
    assert lines[2] == "notes changed (1 word)"
    assert lines[1].startswith("many changed (1, 2, 3, 4, 5, 6") and lines[1].endswith("…)")
    assert lines[0].startswith("blob changed (k: xxx") and "…" in lines[0]


def test_a_spec_edit_is_named_by_its_component(tmp_path, cpu):
    spec = _spec(tmp_path)
    a = keys.generate_components(spec, generation_view([cpu]), {}, "t1")
    b = keys.generate_components(spec.model_copy(update={"intent": spec.intent + " Twice."}),
                             generation_view([cpu]), {}, "t1")
    assert keys.differences(a, b) == ["spec.intent changed (1 word)"]


def test_changing_a_tensors_format_changes_the_generate_key(tmp_path, cpu):
    from regen.spec import Spec

    spec = _spec(tmp_path)
    data = spec.model_dump()
    data["signature"]["inputs"] = [{"name": "x", "format": "mxfp4", "shape": ["M", "N"]}]
    data["cases"] = [{**c.model_dump(exclude_none=True), "N": 64} for c in spec.cases]
    mx4 = Spec.model_validate(data)
    data["signature"]["inputs"] = [{"name": "x", "format": "mxfp8_e4m3", "shape": ["M", "N"]}]
    mx8 = Spec.model_validate(data)
    assert len({_generate_key(s, cpu) for s in (spec, mx4, mx8)}) == 3
