"""regen/generators/openai_compat.py through the real `openai` SDK against a local fake
OpenAI-compatible server (what vLLM or llama.cpp serve): answers, stalls, failures, the CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")

from conftest import SCALE_CPP, SCALE_RECIPE, make_project, regen  # noqa: E402
from fake_openai import FakeOpenAI  # noqa: E402
from regen.generators import GenerationError  # noqa: E402
from regen.generators.openai_compat import OpenAIGenerator  # noqa: E402
from regen.prompt import make_request_factory, split_prompt  # noqa: E402
from regen.spec import load_spec  # noqa: E402
from regen.target import load_target  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ANSWER = f"```cpp\n{SCALE_CPP}```\n\n```yaml\n{SCALE_RECIPE}```\n\nNOTE: plain loop\n"


@pytest.fixture
def make():
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    return make_request_factory(spec, load_target(ROOT / "targets" / "cpu.yaml"))


@pytest.fixture(autouse=True)
def no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_a_local_server_answers_with_no_key(make):
    with FakeOpenAI() as fake:
        fake.reply(ANSWER)
        cand = OpenAIGenerator(model="qwen-coder", base_url=fake.url).generate(make("generate"))
        body = fake.requests[0]["body"]
    assert cand.note == "plain loop" and "scale_f32" in cand.source
    assert body["model"] == "qwen-coder" and body["stream"] is True
    static, dynamic = split_prompt(make("generate").prompt)
    assert body["messages"][0]["role"] == "system" and static in body["messages"][0]["content"]
    assert body["messages"][1] == {"role": "user", "content": dynamic}
    p = cand.provenance
    assert p["generator"] == "openai" and p["input_tokens"] > 0 and p["output_tokens"] > 0
    assert p["cost_usd"] is None and p["request_id"] == "req_oa_1"


def test_a_stall_and_500s_are_transient_failures_with_one_retry_layer(make):
    with FakeOpenAI() as fake:
        fake.reply(ANSWER * 3, stall_after=1, stall_s=30)      # stalls
        fake.reply(ANSWER * 3, stall_after=1, stall_s=0.05)    # cut: the connection closes
        for _ in range(1):
            fake.replies.append({"status": 500})
        gen = OpenAIGenerator(model="m", base_url=fake.url, stall_timeout=0.5, max_retries=2,
                              backoff_s=0.01)
        t0 = time.monotonic()
        with pytest.raises(GenerationError, match="after 3 attempts: HTTP 500") as err:
            gen.generate(make("generate"))
        assert time.monotonic() - t0 < 10 and len(fake.requests) == 3
    assert err.value.transient


def test_regen_build_with_generator_openai(tmp_path):
    project = make_project(tmp_path / "proj")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "REGEN_LOCAL_CACHE": str(tmp_path / "lc"),
           "ANTHROPIC_API_KEY": "", "REGEN_LLM_MODEL": ""}
    with FakeOpenAI() as fake:
        fake.reply(ANSWER)
        out = regen(project, "build", "--generator", "openai", "--base-url", fake.url,
                    "--model", "qwen-coder", "--json", env=env)
        missing = regen(project, "build", "--generator", "openai", "--base-url", fake.url,
                        "--regenerate", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "warning: no price is known for model qwen-coder" in out.stderr
    [row] = json.loads(out.stdout)
    assert row["provenance"]["generator"] == "openai" and row["status"] == "ok"
    assert missing.returncode == 2 and "needs a model: --model NAME" in missing.stderr
