"""The Llama decode step (specs/llama_decode_step.yaml): a composed spec whose repeated step is a
composed spec itself. Its invariants catch a wrong token and a stray cache write, `regen explain`
names the component change that reaches it through the nested layer, and its committed host
kernel records a timeline per layer."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPO, regen

from regen.oracle import run_check

KERNEL = "llama_decode_step"


@pytest.fixture(scope="module")
def tiny():
    from support.library import judged_oracle, oracle_case, spec

    s, o = spec(KERNEL), judged_oracle(KERNEL)
    case = next(c for c in s.correctness_cases() if c.name == "tiny")
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 3)
    ref = o.reference({k: v.clone() for k, v in inputs.items()}, view)
    outputs = {t.name: ref[t.name].to(inputs[t.inplace_of].dtype if t.inplace_of else
                                      inputs["k_cache"].dtype) for t in s.signature.outputs}
    return o, view, inputs, ref, outputs


def test_the_reference_itself_passes_every_invariant(tiny):
    o, view, inputs, ref, outputs = tiny
    assert run_check(o, inputs, outputs, view, ref) == []


def test_a_swapped_top_token_fails_argmax_where_the_margin_is_clear(tiny):
    import torch

    o, view, inputs, ref, outputs = tiny
    logits = ref["logits"].clone()
    top = logits.topk(2, dim=-1)
    margin = float(top.values[0, 0] - top.values[0, 1])
    tol = view.tolerance
    bound = tol.atol + tol.rtol * abs(float(top.values[0, 0]))
    # make the reference's margin clear, then let the candidate decode the runner-up
    ref2 = {**ref, "logits": logits}
    ref2["logits"][0, top.indices[0, 0]] += max(0.0, bound - margin) + 0.5
    bad = ref2["logits"].clone()
    bad[0, top.indices[0, 1]] = bad[0, top.indices[0, 0]] + 0.01
    problems = run_check(o, inputs, {**outputs, "logits": bad.to(torch.bfloat16)}, view, ref2)
    assert [p.split(":")[0] for p in problems] == ["argmax_agrees"], problems
    # where the margin is within the tolerance, the runner-up is an honest answer
    close = {**ref, "logits": logits.clone()}
    close["logits"][0, top.indices[0, 1]] = close["logits"][0, top.indices[0, 0]] - bound / 2
    flipped = close["logits"].clone()
    flipped[0, top.indices[0, 1]] += bound
    assert run_check(o, inputs, {**outputs, "logits": flipped.to(torch.bfloat16)}, view,
                     close) == []


def test_a_cache_write_outside_the_new_slot_fails_cache_slot(tiny):
    o, view, inputs, ref, outputs = tiny
    k = outputs["k_cache_out"].clone()
    k[1, 0, 0, 0, 0] += 1.0   # layer 1, position 0: not the new token's slot
    problems = run_check(o, inputs, {**outputs, "k_cache_out": k}, view, ref)
    assert problems == ["cache_slot: k_cache_out changed outside position L-1"], problems


@pytest.fixture
def repo_copy(tmp_path):
    root = tmp_path / "proj"
    for name in ("specs", "oracles", "targets", "cache", "taxonomy"):
        shutil.copytree(REPO / name, root / name)
    return root


def test_a_component_tolerance_and_a_component_intent_reach_the_step_through_the_nested_layer(
        repo_copy):
    """rmsnorm is the decode step's own component (the final norm) and the layer's: its
    tolerance re-verifies the step (`regen diff`, which compares with git's base and needs no
    record made on this machine); gemv's intent regenerates gemv, which recomposes the layer,
    which recomposes the step (`regen explain`, each step of the chain named)."""
    import subprocess

    import yaml

    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
                       cwd=repo_copy, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    spec = repo_copy / "specs" / "rmsnorm.yaml"
    text = spec.read_text()
    data = yaml.safe_load(text)
    data["tolerance"]["bfloat16"]["rtol"] = float(data["tolerance"]["bfloat16"]["rtol"]) * 2
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = regen(repo_copy, "diff").stdout.splitlines()
    for column in ("cpu", "h200", "mi350"):
        for kernel in ("llama_layer_decode", KERNEL):
            assert (f"  {kernel}@{column}: re-verify — component.rmsnorm.tolerance changed "
                    "(bfloat16)") in out, out
    spec.write_text(text)   # back, then an intent edit one level down
    gemv = repo_copy / "specs" / "gemv.yaml"
    gemv.write_text(gemv.read_text().replace("Memory-bound at these batch sizes",
                                             "Memory-bound at these small batch sizes"))
    out = regen(repo_copy, "explain", KERNEL, "-t", "cpu").stdout.splitlines()
    assert out[0].startswith(f"{KERNEL}@cpu: regenerate"), out
    assert "  component gemv will be regenerated" in out, out
    assert "  component llama_layer_decode will be regenerated" in out, out


def test_the_fused_host_step_records_a_timeline_per_layer(repo_copy, tmp_path):
    out = tmp_path / "t.json"
    proc = regen(repo_copy, "profile", KERNEL, "-t", "cpu", "--case", "tiny", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["outputs"]["ok"] is True and data["case"] == "tiny"
    ops = data["ops"]
    steps = {(ops[e[2]], e[3]) for e in data["events"]}
    for layer in (0, 1):   # the tiny case has two layers
        for op in ("qkv", "attention", "o_proj", "gate_up", "down"):
            assert (op, layer) in steps, (op, layer)
    assert ("lm_head", 2) in steps and ("embed", 0) in steps
