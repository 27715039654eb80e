"""The generation loop as a user drives it: `regen build` with the llm generator (the real SDK in
regen's own process) against the local fake endpoint, then `regen log` / `regen log --failed`,
`--json`, the progress lines and the spending limit's rules for unpriced models."""

from __future__ import annotations

import json

import pytest

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen
from fake_anthropic import FakeAnthropic

KEY = "sk-ant-cli-test-0123456789abcdef"

# line 3 is the error: the compiler's line number must point at it in the source the model sees
BROKEN = SCALE_CPP.replace("y[i] = alpha * x[i];", "y[i] = alpha * x[i] + offset;")


def answer(source: str, note: str) -> str:
    return f"```cpp\n{source}```\n\n```yaml\n{SCALE_RECIPE}```\n\nNOTE: {note}\n"


@pytest.fixture
def env(tmp_path):
    return {"ANTHROPIC_API_KEY": KEY, "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "REGEN_LOCAL_CACHE": str(tmp_path / "local-cache"),
            "REGEN_PRICES": "", "REGEN_LLM_MODEL": "", "REGEN_GENERATOR": ""}


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path / "proj")


def build(project, fake, env, *args):
    return regen(project, "build", "--generator", "llm", *args,
                 env={**env, "ANTHROPIC_BASE_URL": fake.url})


def test_regen_log_shows_the_search_tree_and_spend_of_an_llm_artifact(project, env):
    """Bug 1: `regen log` crashed on every LLM-generated artifact (provenance["search"] is a
    dict). Bug 5: the compiler's line numbers in the repair feedback match the source shown."""
    with FakeAnthropic() as fake:
        fake.reply(answer(BROKEN, "scale with an offset"))
        fake.reply(answer(SCALE_CPP, "no offset"))
        out = build(project, fake, env, "--json")
        prompts = fake.user_messages()
    assert out.returncode == 0, out.stdout + out.stderr
    # the repair request: the compiler names line 3, and line 3 of the source shown is the error
    assert "kernel.cpp:3:" in prompts[1] and "offset’ was not declared" in prompts[1]
    shown = prompts[1].split("```cpp\n", 1)[1].split("```", 1)[0].splitlines()
    assert "offset" in shown[2] and all("offset" not in line for line in shown[:2])

    [row] = json.loads(out.stdout)
    assert row["status"] == "ok" and row["provenance"]["generator"] == "llm"
    assert row["spend"]["candidates"] == 2 and row["spend"]["usd"] > 0
    assert [n["stage"] for n in row["search"]["tree"]["nodes"]] == ["compile", "verify"]

    log = regen(project, "log", "scale", "-t", "cpu", env=env)
    assert log.returncode == 0, log.stderr
    text = log.stdout
    assert "search: 2 candidates, best #1; stopped: passed; not timed here" in text
    assert '✗ #0 generate "scale with an offset" -> compile failed' in text
    assert '✓ #1 repair "no offset" -> verify ok' in text and "<- best" in text
    assert "spend: 2 candidates," in text and KEY not in text
    data = json.loads(regen(project, "log", "scale", "-t", "cpu", "--json", env=env).stdout)
    assert data["provenance"]["model"] == "claude-sonnet-5-5"
    assert len(data["provenance"]["search"]["nodes"]) == 2
    assert data["spend"]["usd"] == pytest.approx(sum(n["usd"] for n in
                                                     data["provenance"]["search"]["nodes"]), abs=1e-5)


def test_a_failed_search_is_kept_and_regen_log_failed_shows_tree_feedback_and_spend(project, env):
    """Bug 7: a search that reached max candidates threw away its tree and its cost."""
    with FakeAnthropic() as fake:
        fake.reply(answer(BROKEN, "first try"))
        fake.reply(answer(BROKEN, "second try"))
        out = build(project, fake, env, "--max-candidates", "2")
    assert out.returncode == 1
    assert "no candidate passed (max_candidates (2) reached; 2 candidates" in out.stdout
    assert "regen log --failed scale -t cpu" in out.stdout

    log = regen(project, "log", "--failed", "scale", "-t", "cpu", env=env)
    assert log.returncode == 0, log.stderr
    text = log.stdout
    assert "scale@cpu: failed generate at" in text and "(llm claude-sonnet-5-5)" in text
    assert "stopped: max_candidates (2) reached" in text
    assert '✗ #0 generate "first try" -> compile failed' in text
    assert '✗ #1 repair "second try" -> compile failed' in text
    assert "| kernel.cpp:3:" in text                       # the feedback the model was given
    assert "spend: 2 candidates," in text and "$0.0" in text
    data = json.loads(regen(project, "log", "--failed", "scale", "-t", "cpu", "--json",
                            env=env).stdout)
    [kept] = data["failed"]
    assert kept["spend"]["candidates"] == 2 and kept["spend"]["usd"] > 0
    assert "offset" in kept["search"]["nodes"][0]["feedback"]
    # no artifact: plain `regen log` says so and points at --failed
    none = regen(project, "log", "scale", "-t", "cpu", env=env)
    assert none.returncode == 2 and "regen log --failed scale -t cpu" in none.stderr


def test_the_build_shows_each_candidate_as_plain_lines_when_not_a_terminal(project, env):
    with FakeAnthropic() as fake:
        fake.reply(answer(BROKEN, "first try"))
        fake.reply(answer(SCALE_CPP, "fixed"))
        out = build(project, fake, env)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if "candidate" in line]
    assert len(lines) == 2 and "\x1b" not in out.stderr
    assert lines[0].startswith('  scale@cpu round 1 candidate 1/8 #0 generate "first try": '
                               "compile failed | ")
    assert 'round 1 candidate 2/8 #1 repair of #0 "fixed": passed (untimed), best so far' in lines[1]
    assert "tokens, $0.0" in lines[1] and "so far" in lines[1]


def test_an_unpriced_model_with_max_usd_is_refused_and_without_it_warned(project, env):
    """Bug 6: --max-usd was silently ignored for a model missing from the price table."""
    with FakeAnthropic() as fake:
        refused = build(project, fake, env, "--model", "my-local-model", "--max-usd", "2")
        assert refused.returncode == 2 and fake.requests == []
        assert "no price is known for model my-local-model, so --max-usd 2 cannot be enforced" \
            in refused.stderr and "Traceback" not in refused.stderr
        fake.reply(answer(SCALE_CPP, "ok"))
        warned = build(project, fake, env, "--model", "my-local-model")
    assert warned.returncode == 0, warned.stderr
    assert "warning: no price is known for model my-local-model: spending is not limited" \
        in warned.stderr


def test_a_price_file_of_the_user_makes_a_model_priced(project, env, tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  my-local-model: {input: 0.5, output: 1.5}\n")
    with FakeAnthropic() as fake:
        fake.reply(answer(SCALE_CPP, "ok"))
        out = build(project, fake, {**env, "REGEN_PRICES": str(prices)}, "--model",
                    "my-local-model", "--max-usd", "1", "--json")
        sent = fake.requests[0]["body"]["max_tokens"]
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr and sent == 32000
    [row] = json.loads(out.stdout)
    assert 0 < row["spend"]["usd"] < 0.01


OMP_IF = """\
#include <cstdint>
extern "C" void scale_f32(const float* x, float* y, int64_t M, int64_t N, float alpha) {
  const int64_t total = M * N;
#pragma omp parallel for if (total > 65536)
  for (int64_t i = 0; i < total; ++i) y[i] = alpha * x[i];
}
"""


def test_honest_openmp_whose_pool_starts_on_a_later_larger_case_is_accepted(project, env):
    """Bug 4: `omp parallel for if (total > 65536)` was refused by the threads guard when a
    larger case followed smaller ones (the pool could only start on the first launch)."""
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("  - {M: 3, N: 130}\n",
                                             "  - {M: 3, N: 130}\n  - {M: 300, N: 300}\n"))
    with FakeAnthropic() as fake:
        fake.reply(answer(OMP_IF, "parallel only when it pays"))
        out = build(project, fake, env, "--json", "--max-candidates", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    [row] = json.loads(out.stdout)
    assert row["status"] == "ok" and row["record"]["ok"], row["summary"]
    assert row["summary"].startswith("generated (llm): verified")


# -- the host column is timed in builds: the search refines there, a spec can expect a speed ------

SLOW_SCALE = """\
#include <cstdint>
extern "C" void scale_f32(const float* x, float* y, int64_t M, int64_t N, float alpha) {
  for (int64_t i = 0; i < M * N; ++i) {
    volatile float v = x[i];
    for (int r = 0; r < 48; ++r) v = v;   // every element read back 48 times through memory
    y[i] = alpha * v;
  }
}
"""
FAST_SCALE = """\
#include <cstdint>
extern "C" void scale_f32(const float* __restrict__ x, float* __restrict__ y, int64_t M,
                          int64_t N, float alpha) {
  const int64_t total = M * N;
#pragma omp parallel for simd if (total > 65536)
  for (int64_t i = 0; i < total; ++i) y[i] = alpha * x[i];
}
"""


def _with_bench_case(project, profile: str = ""):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace(
        "  - {M: 3, N: 130}\n", "  - {M: 3, N: 130}\n  - {M: 4096, N: 2048, bench: true}\n")
        + profile)


def test_the_host_column_is_timed_and_the_search_refines_a_slow_answer(project, env):
    _with_bench_case(project)
    with FakeAnthropic() as fake:
        fake.reply(answer(SLOW_SCALE, "element by element"))
        fake.reply(answer(FAST_SCALE, "vectorised, parallel rows"))
        out = build(project, fake, env, "--json", "--max-candidates", "2")
        prompts = fake.user_messages()
    assert out.returncode == 0, out.stdout + out.stderr
    # the refinement request carried the host column's measured figures
    assert "# Request: optimise" in prompts[1] and "Measured on this target" in prompts[1]
    assert "same-regime variant of M4096xN2048" in prompts[1] and "x torch_eager" in prompts[1]
    [row] = json.loads(out.stdout)
    nodes = row["search"]["tree"]["nodes"]
    assert [n["ok"] for n in nodes] == [True, True], nodes
    assert row["search"]["tree"]["best"] == 1, [(n["time_s"], n.get("retime")) for n in nodes]
    retime = nodes[1]["retime"]
    assert retime["accepted"] and retime["time_s"] < retime["incumbent_time_s"] * (1 - retime["threshold"])
    assert nodes[0]["time_s"] / nodes[1]["time_s"] > 3
    assert row["record"]["ok"] and "speedups" in nodes[1]
    log = regen(project, "log", "scale", "-t", "cpu", env=env).stdout
    assert "✓ #1 optimise" in log and ": accepted)" in log and "<- best" in log


def test_a_spec_can_hold_a_speed_expectation_for_the_host_column(project, env):
    """A kernel many times slower than torch was reported ok on the host column."""
    _with_bench_case(project, "profile:\n  speedup: {cpu: {torch_eager: 0.5}}\n")
    with FakeAnthropic() as fake:
        fake.reply(answer(SLOW_SCALE, "element by element"))
        out = build(project, fake, env, "--json", "--max-candidates", "1")
        system = json.dumps(fake.requests[0]["body"]["system"])
    assert "Be at least 0.5x as fast as torch_eager" in system
    assert out.returncode == 1
    data = json.loads(regen(project, "log", "--failed", "scale", "-t", "cpu", "--json",
                            env=env).stdout)
    [node] = data["failed"][-1]["search"]["nodes"]
    assert node["stage"] == "verify" and "profile expectations not met: speedup vs torch_eager" \
        in node["feedback"]


def test_a_speedup_selector_is_validated_and_resolved_per_target():
    from pathlib import Path as _P

    from regen.spec import Profile
    from regen.target import load_target

    cpu = load_target(_P(__file__).resolve().parent.parent / "targets" / "cpu.yaml")
    p = Profile.model_validate({"speedup": {"torch_compile": 1.0, "cpu": {"torch_eager": 0.8}}})
    assert p.speedup_for(cpu, on_device=False) == {"torch_eager": 0.8}
    assert Profile.model_validate({"speedup": {"torch_compile": 1.0}}).speedup_for(cpu, False) == {}
    with pytest.raises(ValueError, match=r"unknown baseline 'cpu'.*target selector"):
        Profile.model_validate({"speedup": {"cpu": 0.5}})
    with pytest.raises(ValueError, match=r"speedup.cpu: unknown baseline 'numpy'"):
        Profile.model_validate({"speedup": {"cpu": {"numpy": 0.5}}})
