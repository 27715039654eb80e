"""Composed specs: the dataflow checks, the composed reference, the unfused plan (built, verified
and stored with no generator), the key edges from components, and fused vs unfused in bench."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff

from regen import expr
from regen.errors import InputError
from regen.project import Project

TWICE = {
    "name": "scale_twice", "summary": "Scale twice.", "intent": "y = beta * (alpha * x)",
    "signature": {"dtypes": ["float32"],
                  "inputs": [{"name": "x", "dtype": "T", "shape": ["M", "N"]}],
                  "outputs": [{"name": "y", "dtype": "T", "shape": ["M", "N"]}],
                  "params": [{"name": "alpha", "type": "float", "default": 2.0},
                             {"name": "beta", "type": "float", "default": 3.0}]},
    "cases": [{"M": 1, "N": 1}, {"M": 3, "N": 130}, {"M": 64, "N": 2048, "bench": True}],
    "tolerance": {"float32": {"atol": 1.0e-6, "rtol": 1.0e-6}},
    "composition": {
        "steps": [
            {"name": "first", "kernel": "scale", "sizes": {"M": "M", "N": "N"},
             "params": {"alpha": "alpha"}, "inputs": {"x": "x"}},
            {"name": "second", "kernel": "scale", "sizes": {"M": "M", "N": "N"},
             "params": {"alpha": "beta"}, "inputs": {"x": "first.y"}}],
        "outputs": {"y": "second.y"}},
}

TWICE_ORACLE = '''\
import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(case.sizes["M"], case.sizes["N"], generator=g).to(case.dtype)}
'''

FUSED_CPP = """\
#include <cstdint>
extern "C" void scale_twice_f32(const float* x, float* y, int64_t M, int64_t N, float a, float b) {
  for (int64_t i = 0; i < M * N; ++i) y[i] = b * (a * x[i]);
}
"""
FUSED_RECIPE = """\
launches:
  - kernel: scale_twice_{dtype}
    args: [x, y, M, N, "float32:alpha", "float32:beta"]
"""


def _write(root, spec: dict, oracle: str = TWICE_ORACLE) -> None:
    (root / "specs" / f"{spec['name']}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (root / "oracles" / f"{spec['name']}.py").write_text(oracle)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A project whose `scale` is accepted on cpu and whose scale_twice is composed of it."""
    root = make_project(tmp_path_factory.mktemp("compose") / "proj")
    _write(root, TWICE)
    folder = write_handoff(root / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, root)
    regen(root, "accept", str(folder), check=True)
    return root


def _copy(built, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(built, root, ignore=shutil.ignore_patterns(".local-cache"))
    return root


def _fails(root, mutate, *expected):
    spec = json.loads(json.dumps(TWICE))
    mutate(spec)
    _write(root, spec)
    with pytest.raises(InputError) as err:
        Project(root).composition("scale_twice")
    for text in expected:
        assert text in str(err.value), str(err.value)


def test_composition_errors_name_the_spec_and_field(tmp_path):
    root = make_project(tmp_path / "proj")
    steps = lambda s: s["composition"]["steps"]  # noqa: E731
    _fails(root, lambda s: steps(s)[1].update(kernel="nothere"),
           "specs/scale_twice.yaml", "composition.steps[1].kernel", "unknown component 'nothere'")
    _fails(root, lambda s: steps(s)[1].update(inputs={}),
           "composition.steps[1].inputs", "inputs ['x'] of scale are unbound")
    _fails(root, lambda s: steps(s)[1]["sizes"].update(N="N + 1"),
           "composition.steps[1].inputs.x", "first.y has shape [1, 1], but scale.x takes [1, 2]")
    _fails(root, lambda s: steps(s)[1].update(dtype="float16"),
           "composition.steps[1].dtype", "float16, which its signature.dtypes ['float32']")
    _fails(root, lambda s: steps(s)[0].update(inputs={"x": "second.y"}),
           "the steps form a cycle: first -> second -> first")
    _fails(root, lambda s: steps(s)[0]["sizes"].pop("N"),
           "composition.steps[0].sizes", "shape symbols ['N'] of scale are not bound")
    _fails(root, lambda s: steps(s)[1].update(inputs={"x": "first.z"}),
           "composition.steps[1].inputs.x", "step 'first' (scale) has no output 'z'")


def test_composition_errors_the_spec_alone_can_see_are_load_errors(tmp_path):
    root = make_project(tmp_path / "proj")
    spec = json.loads(json.dumps(TWICE))
    spec["composition"]["steps"][1]["inputs"] = {"x": "third.y"}
    _write(root, spec)
    proc = regen(root, "status")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "scale_twice.yaml" in proc.stderr and "unknown step 'third'" in proc.stderr
    spec = json.loads(json.dumps(TWICE))
    spec["composition"]["outputs"] = {}
    _write(root, spec)
    proc = regen(root, "status")
    assert proc.returncode == 2 and "no source for outputs ['y']" in proc.stderr


def test_reshape_between_steps_needs_a_view(tmp_path):
    root = make_project(tmp_path / "proj")
    spec = json.loads(json.dumps(TWICE))
    spec["composition"]["steps"][1]["sizes"] = {"M": "N", "N": "M"}
    _write(root, spec)
    with pytest.raises(InputError, match="add view: true to reshape"):
        Project(root).composition("scale_twice")
    spec["composition"]["steps"][1]["inputs"] = {"x": {"from": "first.y", "view": True}}
    spec["composition"]["outputs"] = {"y": {"from": "second.y", "view": True}}
    _write(root, spec)
    Project(root).composition("scale_twice")


def test_unfused_plan_is_built_verified_and_stored_with_no_generator(built, tmp_path):
    root = _copy(built, tmp_path)
    status = regen(root, "status", "-t", "cpu").stdout
    assert "scale_twice@cpu  compose" in status
    proc = regen(root, "build", "scale_twice", "-t", "cpu", env={"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "composed (unfused plan, 2 steps): verified" in proc.stdout
    log = regen(root, "log", "scale_twice", "-t", "cpu").stdout
    scale_entry = json.loads((root / "cache" / "scale" / "cpu" / "current.json").read_text())["entry"]
    assert "generator: composed" in log and scale_entry in log
    handoff = root / "h2"
    regen(root, "handoff", "scale_twice", "-t", "cpu", "--out", str(handoff), check=True)
    recipe = yaml.safe_load((handoff / "launch.yaml").read_text())
    assert [ln["args"] for ln in recipe["launches"]] == [
        ["x", "first__y", "M", "N", "float32:alpha"], ["first__y", "y", "M", "N", "float32:beta"]]
    assert recipe["workspace"] == [{"name": "first__y", "dtype": "T", "shape": ["M", "N"]}]
    assert "namespace regen_component_scale" in (handoff / "kernel.cpp").read_text()
    assert "scale_twice@cpu  up-to-date" in regen(root, "status", "-t", "cpu").stdout


def test_component_oracle_change_reverifies_and_intent_change_recomposes(built, tmp_path):
    root = _copy(built, tmp_path)
    regen(root, "build", "scale_twice", "-t", "cpu", check=True)
    oracle = root / "oracles" / "scale.py"
    oracle.write_text(oracle.read_text().replace("* case.params[\"alpha\"]",
                                                 "* float(case.params[\"alpha\"])"))
    explain = regen(root, "explain", "scale_twice", "-t", "cpu").stdout
    assert "scale_twice@cpu: re-verify" in explain and "component.scale.oracle changed" in explain
    spec = root / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("computed in float32.", "computed in float32 here."))
    status = regen(root, "status", "-t", "cpu").stdout
    assert "scale@cpu        regenerate" in status
    assert "scale_twice@cpu  compose     component scale will be regenerated" in status


def test_fused_artifact_is_benched_beside_the_unfused_plan(built, tmp_path):
    root = _copy(built, tmp_path)
    folder = write_handoff(root / "hf", "scale_twice", "cpu", FUSED_CPP, FUSED_RECIPE, root)
    proc = regen(root, "accept", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = regen(root, "bench", "scale_twice", "-t", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scale_twice (fused)" in proc.stdout and "scale_twice (unfused)" in proc.stdout
    assert "vs unfused" in proc.stdout


def test_composed_reference_runs_the_components_in_float64(built):
    import torch

    from regen.oracle import ComposedOracle, load_oracle

    project = Project(built)
    spec = project.spec("scale_twice")
    oracle = ComposedOracle(load_oracle(project.oracle_path("scale_twice")),
                            project.oracle_job(spec))
    from types import SimpleNamespace
    case = SimpleNamespace(sizes={"M": 2, "N": 3}, params={"alpha": 0.1, "beta": 3.0},
                           dtype=torch.float32, dist="normal", device="cpu", name="t")
    x = torch.randn(2, 3)
    y = oracle.reference({"x": x}, case)["y"]
    assert y.dtype == torch.float64
    assert torch.equal(y, x.double() * 0.1 * 3.0)


def test_hand_written_reference_that_disagrees_fails_tolerance(built, tmp_path):
    root = _copy(built, tmp_path)
    written = TWICE_ORACLE + '''

def reference(inputs, case):
    return {"y": inputs["x"].double() * case.params["alpha"] * case.params["beta"]}
'''
    (root / "oracles" / "scale_twice.py").write_text(written)
    proc = regen(root, "tolerance", "scale_twice", "--seeds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agrees with the one composed from scale on every case" in proc.stdout
    (root / "oracles" / "scale_twice.py").write_text(written.replace('case.params["beta"]', "2.9"))
    proc = regen(root, "tolerance", "scale_twice", "--seeds", "1")
    assert proc.returncode == 1
    assert "the hand-written reference() and the one composed from the components differ" \
        in proc.stdout
    assert "FAIL: the hand-written reference() disagrees with the composed one" in proc.stdout


def test_inplace_update_of_an_input_needs_an_inplace_output(tmp_path):
    root = make_project(tmp_path / "proj")
    bump = {"name": "bump", "summary": "x += 1 in place.", "intent": "x = x + 1",
            "signature": {"dtypes": ["float32"],
                          "inputs": [{"name": "x", "dtype": "T", "shape": ["N"]}],
                          "outputs": [{"name": "x_out", "dtype": "T", "shape": ["N"],
                                       "inplace_of": "x"}]},
            "cases": [{"N": 4}], "tolerance": {"float32": {"atol": 0, "rtol": 0}}}
    _write(root, bump, TWICE_ORACLE.replace('case.sizes["M"], ', "") + '''

def reference(inputs, case):
    return {"x_out": inputs["x"].double() + 1}
''')
    spec = {"name": "bump_twice", "summary": "x += 2.", "intent": "x = x + 2",
            "signature": {"dtypes": ["float32"],
                          "inputs": [{"name": "x", "dtype": "T", "shape": ["N"]}],
                          "outputs": [{"name": "y", "dtype": "T", "shape": ["N"]}]},
            "cases": [{"N": 4}], "tolerance": {"float32": {"atol": 0, "rtol": 0}},
            "composition": {"steps": [
                {"name": "one", "kernel": "bump", "sizes": {"N": "N"}, "inputs": {"x": "x"}},
                {"name": "two", "kernel": "bump", "sizes": {"N": "N"},
                 "inputs": {"x": "one.x_out"}}],
                "outputs": {"y": "two.x_out"}}}
    _write(root, spec)
    with pytest.raises(InputError, match="updates input 'x' in place .* no output of this spec "
                                         "is declared inplace_of x"):
        Project(root).composition("bump_twice")
    spec["signature"]["outputs"][0]["inplace_of"] = "x"
    _write(root, spec)
    assert Project(root).composition("bump_twice").steps[1].buffers == {"x": "x", "x_out": "x"}
    spec["composition"]["steps"][1]["inputs"] = {"x": "x"}   # reads x after `one` updated it
    _write(root, spec)
    with pytest.raises(InputError, match="already updated that buffer in place"):
        Project(root).composition("bump_twice")


def test_substitute_rewrites_names_not_functions():
    assert expr.substitute("ceil_div(N, 4) * dsize(T)", {"N": "(H * 2)", "T": "bfloat16"}) == \
        "ceil_div(H * 2, 4) * dsize(bfloat16)"
    assert expr.substitute("M", {"N": "1"}) == "M"
    assert expr.substitute(7, {"N": "1"}) == 7


def test_substitute_leaves_the_memoised_parse_alone():
    assert expr.substitute("M * 2", {"M": "B"}) == "B * 2"
    assert expr.names("M * 2") == {"M"}
    assert expr.evaluate("M * 2", {"M": 3}) == 6


def test_explain_names_the_component_that_will_be_rebuilt(built, tmp_path):
    root = _copy(built, tmp_path)
    regen(root, "build", "scale_twice", "-t", "cpu", check=True)
    spec = root / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("computed in float32.", "computed in float32 here."))
    explain = regen(root, "explain", "scale_twice", "-t", "cpu").stdout
    assert explain.splitlines()[:2] == ["scale_twice@cpu: compose",
                                        "  component scale will be regenerated"]


# -- repeated steps: a model's layers, per-layer views, a carried value ---------------------------
ADDV_SPEC = {
    "name": "addv", "summary": "Add a vector to every row.", "intent": "y[m, n] = x[m, n] + b[n]",
    "signature": {"dtypes": ["float32"],
                  "inputs": [{"name": "x", "dtype": "T", "shape": ["M", "N"]},
                             {"name": "b", "dtype": "T", "shape": ["N"]}],
                  "outputs": [{"name": "y", "dtype": "T", "shape": ["M", "N"]}]},
    "cases": [{"M": 1, "N": 1}, {"M": 3, "N": 5}],
    "tolerance": {"float32": {"atol": 1.0e-6, "rtol": 1.0e-6}},
}
ADDV_ORACLE = '''\
import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    m, n = case.sizes["M"], case.sizes["N"]
    return {"x": torch.randn(m, n, generator=g), "b": torch.randn(n, generator=g)}


def reference(inputs, case):
    return {"y": inputs["x"].double() + inputs["b"].double()}
'''
ADDV_CPP = """\
#include <cstdint>
extern "C" void addv_f32(const float* x, const float* b, float* y, int64_t M, int64_t N) {
  for (int64_t i = 0; i < M * N; ++i) y[i] = x[i] + b[i % N];
}
"""
ADDV_RECIPE = "launches:\n  - kernel: addv_{dtype}\n    args: [x, b, y, M, N]\n"
STACK = {
    "name": "addv_stack", "summary": "Add NL vectors, then one more.",
    "intent": "y = x + sum_l bs[l] + last",
    "signature": {"dtypes": ["float32"],
                  "inputs": [{"name": "x", "dtype": "T", "shape": ["M", "N"]},
                             {"name": "bs", "dtype": "T", "shape": ["NL", "N"]},
                             {"name": "last", "dtype": "T", "shape": ["N"]}],
                  "outputs": [{"name": "y", "dtype": "T", "shape": ["M", "N"]}]},
    "cases": [{"M": 1, "N": 1, "NL": 1}, {"M": 3, "N": 130, "NL": 5}],
    "tolerance": {"float32": {"atol": 1.0e-5, "rtol": 1.0e-5}},
    "composition": {
        "steps": [
            {"name": "layers", "kernel": "addv", "repeat": "NL", "carry": {"x": "y"},
             "sizes": {"M": "M", "N": "N"},
             "inputs": {"x": "x", "b": {"from": "bs", "layer": True}}},
            {"name": "final", "kernel": "addv", "sizes": {"M": "M", "N": "N"},
             "inputs": {"x": "layers.y", "b": "last"}}],
        "outputs": {"y": "final.y"}},
}
STACK_ORACLE = '''\
import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    m, n, nl = case.sizes["M"], case.sizes["N"], case.sizes["NL"]
    return {"x": torch.randn(m, n, generator=g), "bs": torch.randn(nl, n, generator=g),
            "last": torch.randn(n, generator=g)}
'''


@pytest.fixture(scope="module")
def stacked(tmp_path_factory):
    """A project whose addv is accepted on cpu and whose addv_stack repeats it NL times."""
    root = make_project(tmp_path_factory.mktemp("stack") / "proj")
    _write(root, ADDV_SPEC, ADDV_ORACLE)
    _write(root, STACK, STACK_ORACLE)
    folder = write_handoff(root / "h", "addv", "cpu", ADDV_CPP, ADDV_RECIPE, root)
    regen(root, "accept", str(folder), check=True)
    return root


def test_a_repeated_step_composes_its_reference_and_its_unfused_plan_is_a_repeat_group(stacked,
                                                                                       tmp_path):
    import torch

    from regen.oracle import ComposedOracle, load_oracle
    project = Project(stacked)
    oracle = ComposedOracle(load_oracle(project.oracle_path("addv_stack")),
                            project.oracle_job(project.spec("addv_stack")))
    from types import SimpleNamespace
    case = SimpleNamespace(sizes={"M": 2, "N": 3, "NL": 4}, params={}, dtype=torch.float32,
                           dist="normal", device="cpu", name="t")
    x, bs, last = torch.randn(2, 3), torch.randn(4, 3), torch.randn(3)
    y = oracle.reference({"x": x, "bs": bs, "last": last}, case)["y"]
    assert torch.allclose(y, x.double() + bs.double().sum(0) + last.double(), atol=1e-12)
    root = _copy(stacked, tmp_path)
    proc = regen(root, "build", "addv_stack", "-t", "cpu", env={"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "composed (unfused plan, 2 steps): verified" in proc.stdout
    regen(root, "handoff", "addv_stack", "-t", "cpu", "--out", str(root / "h2"), check=True)
    recipe = yaml.safe_load((root / "h2" / "launch.yaml").read_text())
    group = recipe["launches"][0]
    assert group["repeat"] == "NL" and group["index"] == "layers_index"
    first, later = group["launches"]
    assert first["when"] == "layers_index == 0" and first["args"][0] == "x"
    assert later["when"] == "layers_index > 0"
    assert later["args"][0] == {"tensor": "layers__y",
                                "offset": "((layers_index - 1) % 2) * ((M) * (N))"}
    assert first["args"][1] == {"tensor": "bs", "offset": "(layers_index) * ((N))"}
    assert recipe["launches"][1]["args"][0] == {"tensor": "layers__y",
                                                "offset": "(((NL) - 1) % 2) * ((M) * (N))"}
    assert {"name": "layers__y", "dtype": "T", "shape": [2, "M", "N"]} in recipe["workspace"]



def test_regen_ops_runs_a_verified_unfused_plan_over_layers(stacked, tmp_path):
    """A composed kernel whose column holds the unfused plan (repeat groups, per-layer views into
    stacked buffers) is a regen.ops op like any other: its verified plan runs, not the baseline."""
    import os
    import subprocess
    import sys

    root = _copy(stacked, tmp_path)
    regen(root, "build", "addv_stack", "-t", "cpu", env={"ANTHROPIC_API_KEY": ""}, check=True)
    code = """
import warnings, torch
import regen.ops as ops
warnings.simplefilter("error")   # a fallback to the baseline would warn
x, bs, last = torch.randn(3, 130), torch.randn(5, 130), torch.randn(130)
y = ops.addv_stack(x, bs, last)
err = (y.double() - (x.double() + bs.double().sum(0) + last.double())).abs().max().item()
print(ops.runs("addv_stack", x, bs, last), err < 1e-5)
"""
    env = {**os.environ, "REGEN_ROOT": str(root), "REGEN_LOCAL_CACHE": str(root / ".local-cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["addv_stack@cpu", "True"]

def _fails_stack(root, mutate, *expected):
    spec = json.loads(json.dumps(STACK))
    mutate(spec)
    _write(root, spec, STACK_ORACLE)
    with pytest.raises(InputError) as err:
        Project(root).composition("addv_stack")
    for text in expected:
        assert text in str(err.value), str(err.value)


def test_repeated_step_errors_name_the_spec_and_field(tmp_path):
    root = make_project(tmp_path / "proj")
    _write(root, ADDV_SPEC, ADDV_ORACLE)
    step = lambda s: s["composition"]["steps"][0]  # noqa: E731
    _fails_stack(root, lambda s: step(s).update(repeat="NL + 1"),
                 "composition.steps[0].inputs.b", "a per-layer input of 2 iterations needs a "
                 "first dimension of 2")
    _fails_stack(root, lambda s: step(s).update(repeat="NL - 1"),
                 "composition.steps[0].repeat", "repeat 'NL - 1' gives 0; expected a whole number")
    _fails_stack(root, lambda s: step(s).update(carry={"x": "z"}),
                 "composition.steps[0].carry.x", "addv has no output 'z' to carry")
    _fails_stack(root, lambda s: step(s).update(kernel="nothere"),
                 "composition.steps[0].kernel", "unknown component 'nothere'")
    _fails_stack(root, lambda s: s["composition"].update(outputs={"y": "layers.y"}),
                 "composition.outputs.y", "is carried from iteration to iteration")


def test_repeated_step_errors_the_spec_alone_can_see_are_load_errors(tmp_path):
    root = make_project(tmp_path / "proj")
    _write(root, ADDV_SPEC, ADDV_ORACLE)
    for mutate, text in [
        (lambda st: st.pop("repeat"), "only a repeated step (repeat:) reads one slice"),
        (lambda st: st.update(repeat=0), "expected a count of at least 1"),
        (lambda st: st.update(repeat="NX"), "repeat: unknown names ['NX']"),
        (lambda st: st.update(carry={"w": "y"}), "'w' is not among the step's inputs"),
    ]:
        spec = json.loads(json.dumps(STACK))
        mutate(spec["composition"]["steps"][0])
        _write(root, spec, STACK_ORACLE)
        proc = regen(root, "status")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert "addv_stack.yaml" in proc.stderr and text in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_composed_component_nests_and_its_leaves_key_the_outer_reference(built, tmp_path):
    """A composed spec used as a component (scale_twice inside a repeat): its own steps run in
    the reference and the plan, and its leaf components' oracles and tolerances are the outer
    spec's verify-key components."""
    import torch

    from regen.oracle import ComposedOracle, load_oracle
    root = _copy(built, tmp_path)
    outer = {"name": "scale_deep", "summary": "scale_twice NL times.", "intent": "y = (ab)^NL x",
             # NL is a symbol only where a shape uses it: `pad` [NL] does
             "signature": {**TWICE["signature"], "inputs": TWICE["signature"]["inputs"] + [
                 {"name": "pad", "dtype": "T", "shape": ["NL"]}]},
             "cases": [{"M": 2, "N": 3, "NL": 3}],
             "tolerance": {"float32": {"atol": 1.0e-5, "rtol": 1.0e-5}},
             "composition": {"steps": [
                 {"name": "twice", "kernel": "scale_twice", "repeat": "NL", "carry": {"x": "y"},
                  "sizes": {"M": "M", "N": "N"}, "params": {"alpha": "alpha", "beta": "beta"},
                  "inputs": {"x": "x"}},
                 {"name": "once", "kernel": "scale", "sizes": {"M": "M", "N": "N"},
                  "params": {"alpha": 1.0}, "inputs": {"x": "twice.y"}}],
                 "outputs": {"y": "once.y"}}}
    _write(root, outer, TWICE_ORACLE.replace(
        'return {"x"', 'return {"pad": torch.randn(case.sizes["NL"], generator=g), "x"'))
    project = Project(root)
    spec = project.spec("scale_deep")
    assert sorted(project.composed_verify(spec)) == ["component.scale.oracle",
                                                     "component.scale.tolerance"]
    oracle = ComposedOracle(load_oracle(project.oracle_path("scale_deep")), project.oracle_job(spec))
    from types import SimpleNamespace
    case = SimpleNamespace(sizes={"M": 2, "N": 3, "NL": 3}, params={"alpha": 2.0, "beta": 0.5},
                           dtype=torch.float32, dist="normal", device="cpu", name="t")
    x = torch.randn(2, 3)
    y = oracle.reference({"x": x, "pad": torch.zeros(3)}, case)["y"]
    assert torch.allclose(y, x.double(), atol=1e-12)   # (2 * 0.5)^3 * x
    proc = regen(root, "build", "scale_deep", "-t", "cpu", env={"ANTHROPIC_API_KEY": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    regen(root, "handoff", "scale_deep", "-t", "cpu", "--out", str(root / "h3"), check=True)
    recipe = yaml.safe_load((root / "h3" / "launch.yaml").read_text())
    assert [x["kernel"] for x in recipe["launches"][0]["launches"]] == ["scale_{dtype}"] * 3
