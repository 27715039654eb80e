"""regen/generators/llm.py through the real anthropic SDK against a local fake endpoint, and the
answer parser it relies on (regen/generators/parse.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_anthropic import FakeAnthropic
from regen.generators import Candidate, GenerationError
import time

from regen.generators import BudgetExhausted
from regen.generators.llm import DEFAULT_MODEL, LLMGenerator, redact
from regen.generators.prices import load_prices
from regen.generators.parse import ParseError, parse_answer
from regen.prompt import make_request_factory, split_prompt, static_prefix
from regen.spec import load_spec
from regen.target import load_target

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-ant-test-0123456789abcdefSECRET"

GOOD = """I keep each row in cache between passes.

```cpp
#include <cmath>
#include <cstdint>
extern "C" void softmax_f32(const float* x, float* y, int64_t M, int64_t N) {}
```

```yaml
launches:
  - kernel: softmax_{dtype}
    args: [x, y, M, N]
```

NOTE: three passes per row, row kept in cache
"""


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return KEY


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(scope="module")
def factory():
    spec = load_spec(ROOT / "specs" / "softmax.yaml")
    target = load_target(ROOT / "targets" / "cpu.yaml")
    return make_request_factory(spec, target), static_prefix(spec, target)


def _gen(fake, **kw):
    kw.setdefault("backoff_s", 0.01)
    return LLMGenerator(base_url=fake.url, **kw)


def test_generate_streams_caches_the_static_prefix_and_records_provenance(key, fake, factory):
    make, prefix = factory
    fake.reply(GOOD)
    fake.reply(GOOD.replace("three passes", "fused passes"))
    gen = _gen(fake)
    first = gen.generate(make("generate"))
    assert first.note == "three passes per row, row kept in cache"
    assert "softmax_f32" in first.source and "softmax_{dtype}" in first.recipe
    second = gen.generate(make("repair", first, "g++: error: 'row_max' was not declared"))

    body = fake.requests[0]["body"]
    assert body["model"] == DEFAULT_MODEL and body["stream"] is True
    assert body["max_tokens"] == 32000 and "temperature" not in body
    static_block = body["system"][-1]
    assert static_block["cache_control"] == {"type": "ephemeral"}
    assert static_block["text"].startswith(prefix)
    assert body["messages"] == [{"role": "user", "content": split_prompt(make("generate").prompt)[1]}]
    # the repair resends the identical prefix (a cache read) and carries the feedback
    assert fake.requests[1]["body"]["system"] == body["system"]
    assert "'row_max' was not declared" in fake.user_messages()[1]
    assert "NOTE: three passes per row" in fake.user_messages()[1]

    p1, p2 = first.provenance, second.provenance
    assert p1["generator"] == "llm" and p1["model"] == DEFAULT_MODEL
    assert p1["cache_write_tokens"] > 1000 and p1["cache_read_tokens"] == 0
    assert p2["cache_read_tokens"] == p1["cache_write_tokens"] and p2["cache_write_tokens"] == 0
    assert p1["input_tokens"] > 0 and p1["output_tokens"] > 0
    assert p1["request_id"] == "req_fake_1" and p1["stop_reason"] == "end_turn"
    assert p1["temperature"] is None and p1["max_tokens"] == 32000
    price = load_prices()[DEFAULT_MODEL]
    expected = (p1["input_tokens"] * price["input"] + p1["output_tokens"] * price["output"]
                + p1["cache_write_tokens"] * price["cache_write"]) / 1e6
    assert p1["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert p2["cost_usd"] < p1["cost_usd"]  # cache reads are cheaper than writes


def test_rate_limit_429_is_retried_then_succeeds(key, fake, factory):
    make, _ = factory
    fake.fail(429, "rate_limit_error", retry_after_ms=20)
    fake.reply(GOOD)
    cand = _gen(fake).generate(make("generate"))
    assert cand.note.startswith("three passes")
    assert len(fake.requests) == 2
    assert cand.provenance["request_id"] == "req_fake_2"


def test_overload_inside_a_stream_is_retried_by_regen(key, fake, factory):
    """An error event inside a 200 stream is beyond the SDK's retries: regen's loop retries it."""
    make, _ = factory
    fake.reply(GOOD, stream_error="overloaded_error")
    fake.reply(GOOD)
    cand = _gen(fake).generate(make("generate"))
    assert cand.provenance["retries"] == 1 and len(fake.requests) == 2


def test_persistent_overload_ends_in_a_clear_error(key, fake, factory):
    make, _ = factory
    for _ in range(4):
        fake.fail(529, "overloaded_error", retry_after_ms=1)
    with pytest.raises(GenerationError, match=r"failed after 2 attempts: HTTP 529") as err:
        _gen(fake, max_retries=1).generate(make("generate"))
    assert err.value.transient
    assert len(fake.requests) == 2  # one retry layer: the SDK's own retries are off


def test_bad_request_is_not_retried(key, fake, factory):
    make, _ = factory
    fake.replies.append({"status": 400, "type": "invalid_request_error",
                         "message": "max_tokens: too large", "retry_after_ms": None})
    with pytest.raises(GenerationError, match="HTTP 400: max_tokens: too large"):
        _gen(fake).generate(make("generate"))
    assert len(fake.requests) == 1


def test_without_a_key_the_error_names_every_way_forward(monkeypatch, fake, factory):
    make, _ = factory
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    gen = _gen(fake)
    assert "ANTHROPIC_API_KEY" in gen.problem()
    with pytest.raises(GenerationError) as err:
        gen.generate(make("generate"))
    msg = str(err.value)
    assert "ANTHROPIC_API_KEY" in msg and "--generator command:" in msg and "regen handoff" in msg
    assert fake.requests == []


def test_the_key_travels_only_in_the_auth_header(key, fake, factory):
    """SDK 2.x authenticates with `Authorization: Bearer`; the key is nowhere else."""
    make, _ = factory
    fake.reply(GOOD)
    cand = _gen(fake).generate(make("generate"))
    req = fake.requests[0]
    holders = [name for name, value in req["headers"].items() if KEY in value]
    assert len(holders) == 1 and holders[0].lower() in ("authorization", "x-api-key")
    assert KEY not in req["raw"]
    assert KEY not in json.dumps(cand.provenance)


def test_the_key_never_appears_in_an_error(key, fake, factory):
    make, _ = factory
    fake.replies.append({"status": 401, "type": "authentication_error",
                         "message": f"invalid x-api-key {KEY}", "retry_after_ms": None})
    with pytest.raises(GenerationError) as err:
        _gen(fake).generate(make("generate"))
    assert KEY not in str(err.value) and "rejected (401)" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert KEY not in redact(f"echo {KEY}")


def test_malformed_answer_raises_parse_error_with_answer_and_spend(key, fake, factory):
    make, _ = factory
    fake.reply("I would use a warp reduction here, but I have no code for you.")
    with pytest.raises(ParseError) as err:
        _gen(fake).generate(make("generate"))
    assert "no fenced code block" in str(err.value)
    assert err.value.answer.startswith("I would use")
    assert err.value.provenance["output_tokens"] > 0 and err.value.provenance["cost_usd"] > 0


def test_truncated_answer_says_it_hit_max_tokens(key, fake, factory):
    make, _ = factory
    fake.reply(GOOD[: GOOD.index("```yaml") + 20], stop_reason="max_tokens")
    with pytest.raises(ParseError, match=r"never closed.*max_tokens=32000"):
        _gen(fake).generate(make("generate"))


def test_thinking_blocks_are_not_part_of_the_answer(key, fake, factory):
    make, _ = factory
    fake.reply(GOOD, thinking="```cpp\nthis draft is not the answer\n```")
    cand = _gen(fake).generate(make("generate"))
    assert "draft" not in cand.source


def test_non_streaming_mode_and_temperature_when_asked(key, fake, factory):
    make, _ = factory
    fake.reply(GOOD)
    cand = _gen(fake, stream=False, temperature=0.2, model="claude-haiku-4-5",
                max_tokens=4096).generate(make("generate"))
    body = fake.requests[0]["body"]
    assert "stream" not in body or body["stream"] is False
    assert body["temperature"] == 0.2 and body["model"] == "claude-haiku-4-5"
    assert cand.provenance["model"] == "claude-haiku-4-5"
    assert cand.provenance["request_id"] == "req_fake_1"


def test_base_url_from_the_environment_and_unknown_price(key, fake, factory, monkeypatch):
    make, _ = factory
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    fake.reply(GOOD)
    cand = LLMGenerator(model="claude-unpriced-9").generate(make("generate"))
    assert cand.provenance["cost_usd"] is None and len(fake.requests) == 1


# -- the answer format ---------------------------------------------------------------------------

def test_parse_answer_reads_source_recipe_and_note():
    source, recipe, note = parse_answer(GOOD, "cpp")
    assert source.startswith("#include <cmath>") and "softmax_f32" in source
    assert recipe.startswith("launches:")
    assert note == "three passes per row, row kept in cache"


@pytest.mark.parametrize("answer, message", [
    ("", "the answer is empty"),
    ("just prose", "no fenced code block"),
    ("```cpp\nint a;\n```\n```cpp\nint b;\n```\n```yaml\nlaunches: []\n```", "2 source blocks"),
    ("```cpp\nint a;\n```\nNOTE: x", "no ```yaml block"),
    ("```cpp\nint a;\n```\n```yaml\nlaunches: [{kernel: k}]\n```", r"launch.yaml is invalid.*args"),
    ("```cpp\nint a;\n```\n```yaml\nlaunches:\n  - kernel: k\n    args: [\"__import__('os')\"]\n```",
     "launch.yaml is invalid.*not allowed"),
    ("```cpp\nint a;\n```\n```yaml\na: [\n```", "launch.yaml is invalid: YAML syntax error"),
    ("```cpp\nint a;\n```\n```yaml\nlaunches: []\n```\n```yaml\nx: 1\n```", "2 ```yaml blocks"),
    ("```python\nprint(1)\n```\n```yaml\nx: 1\n```", r"no ```cpp block.*```python"),
    ("```cpp\nint a;\n", "never closed"),
])
def test_parse_answer_errors_say_what_is_wrong(answer, message):
    with pytest.raises(ParseError, match=message):
        parse_answer(answer, "cpp")


def test_parse_answer_accepts_one_untagged_source_block_and_longer_fences():
    answer = ("````\n// a comment with ``` inside\nextern \"C\" __global__ void k() {}\n````\n"
              "```yml\nlaunches:\n  - kernel: k\n    grid: [1]\n    block: [32]\n    args: []\n```\n"
              "**NOTE:** untagged source")
    source, recipe, note = parse_answer(answer, "cuda")
    assert "``` inside" in source and "grid: [1]" in recipe and note == "untagged source"


def test_a_prompt_never_sent_twice_for_one_generate_call(key, fake, factory):
    """One generate() call is one request when nothing fails (no hidden extra calls)."""
    make, _ = factory
    fake.reply(GOOD)
    assert isinstance(_gen(fake).generate(make("generate")), Candidate)
    assert len(fake.requests) == 1


# -- failures real endpoints have: one retry layer, one deadline, every failure a GenerationError --

def test_persistent_500s_make_exactly_the_requests_the_message_counts(key, fake, factory):
    """Bug 3: the SDK's retries stacked under regen's made 12 requests where the message said 4."""
    make, _ = factory
    for _ in range(10):
        fake.fail(500, "api_error", retry_after_ms=1)
    with pytest.raises(GenerationError, match=r"after 3 attempts: HTTP 500") as err:
        _gen(fake, max_retries=2).generate(make("generate"))
    assert len(fake.requests) == 3 and err.value.transient
    assert err.value.provenance["attempts"] == 3


def test_a_stream_that_stalls_mid_answer_is_a_transient_generation_error(key, fake, factory):
    """Bug 2: a stalled stream is this call's failure (transient), reported as a stall, with
    what it cost; never an exception the search does not expect."""
    make, _ = factory
    fake.reply(GOOD * 3, stall_after=1, stall_s=30)
    t0 = time.monotonic()
    with pytest.raises(GenerationError, match=r"stalled mid-stream: nothing received for 0.5 s") as err:
        _gen(fake, stall_timeout=0.5, max_retries=0).generate(make("generate"))
    assert time.monotonic() - t0 < 10
    assert err.value.transient
    # the stream had started: its input tokens were billed and are accounted for
    assert err.value.provenance["input_tokens"] > 0 and err.value.provenance["cost_usd"] > 0


def test_a_stalled_stream_is_retried_and_the_retry_answers(key, fake, factory):
    make, _ = factory
    fake.reply(GOOD * 3, stall_after=1, stall_s=30)
    fake.reply(GOOD)
    cand = _gen(fake, stall_timeout=0.5).generate(make("generate"))
    assert cand.provenance["retries"] == 1 and len(fake.requests) == 2
    one = fake.requests  # both attempts' input is in the spend
    assert cand.provenance["input_tokens"] > 0 and len(one) == 2


def test_an_endpoint_that_hangs_is_bounded_by_the_node_deadline(key, fake, factory):
    """Bug 3: with the SDK's default timeouts a hanging endpoint held a build for hours; the
    deadline the search passes in bounds the whole call, retries included."""
    make, _ = factory
    for _ in range(5):
        fake.replies.append({"hang_s": 60})
    request = make("generate")
    from dataclasses import replace
    t0 = time.monotonic()
    with pytest.raises(GenerationError, match="time budget|no response within") as err:
        _gen(fake, stall_timeout=60.0).generate(replace(request, deadline=time.monotonic() + 1.5))
    assert time.monotonic() - t0 < 5
    assert err.value.transient


def test_max_usd_lowers_max_tokens_to_what_the_budget_can_pay_for(key, fake, factory):
    make, _ = factory
    from dataclasses import replace
    fake.reply(GOOD)
    price = load_prices()[DEFAULT_MODEL]
    cand = _gen(fake).generate(replace(make("generate"), max_usd=0.10))
    sent = fake.requests[0]["body"]["max_tokens"]
    assert 1024 <= sent < 32000
    prompt_chars = len(make("generate").prompt)
    worst = (prompt_chars / 3 + 16 + 200) * price["cache_write"] / 1e6 + sent * price["output"] / 1e6
    assert worst <= 0.10 + 1e-3 and cand.provenance["max_tokens"] == sent
    with pytest.raises(BudgetExhausted, match=r"max_usd: \$0.0010 left cannot pay"):
        _gen(fake).generate(replace(make("generate"), max_usd=0.001))
    assert len(fake.requests) == 1    # no call was made that the budget could not pay for


def test_an_unpriced_model_cannot_run_under_a_spending_limit(key, fake, factory):
    """Bug 6: --max-usd was silently ignored for a model missing from the price table."""
    make, _ = factory
    from dataclasses import replace
    with pytest.raises(GenerationError, match="no price is known for model my-local-model") as err:
        _gen(fake, model="my-local-model").generate(replace(make("generate"), max_usd=5.0))
    assert not err.value.transient and fake.requests == []


def test_prices_come_from_a_data_file_the_user_can_override(tmp_path, monkeypatch):
    user = tmp_path / "prices.yaml"
    user.write_text("models:\n  my-local-model: {input: 0.0, output: 0.0}\n"
                    f"  {DEFAULT_MODEL}: {{input: 3.0, output: 15.0, cache_read: 0.3}}\n")
    monkeypatch.setenv("REGEN_PRICES", str(user))
    prices = load_prices()
    assert prices["my-local-model"]["output"] == 0.0
    assert prices[DEFAULT_MODEL] == {"input": 3.0, "output": 15.0, "cache_read": 0.3,
                                     "cache_write": 3.75}
    assert "claude-haiku-4-5" in prices   # the built-in ones stay
    user.write_text("models:\n  m: {input: cheap, output: 1}\n")
    from regen.errors import InputError
    with pytest.raises(InputError, match=r"prices.yaml \[models.m.input\]: expected a non-negative"):
        load_prices()
    monkeypatch.setenv("REGEN_PRICES", str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="missing.yaml: file not found"):
        load_prices()


def test_a_stream_cut_before_message_stop_is_retried_not_parsed(key, fake, factory):
    """A connection closed mid-answer: the SDK hands back the partial message; regen must not
    take it for the answer (it was parsed as an empty, unreadable answer)."""
    make, _ = factory
    fake.reply(GOOD * 3, stall_after=1, stall_s=0.1)   # then the server closes the connection
    fake.reply(GOOD)
    cand = _gen(fake, stall_timeout=30).generate(make("generate"))
    assert cand.provenance["retries"] == 1 and len(fake.requests) == 2
    fake.reply(GOOD * 3, stall_after=1, stall_s=0.1)
    with pytest.raises(GenerationError, match="stream ended before the answer did") as err:
        _gen(fake, stall_timeout=30, max_retries=0).generate(make("generate"))
    assert err.value.transient
