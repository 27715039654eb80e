"""The LLM generator: the Anthropic Messages API through the official `anthropic` SDK.

The prompt's static prefix (spec + target + format contract, regen/prompt.py) goes in the system
prompt marked for prompt caching, so repairs and refinements of one kernel pay for it once; the
request part (previous candidate, feedback) is the user message. Answers are streamed (long
outputs would hit the SDK's non-streaming time limit) and parsed by parse.py.

The API key comes from ANTHROPIC_API_KEY only and is never written to provenance, logs or error
messages (`redact`). ANTHROPIC_BASE_URL, or `base_url=`, points the SDK at another endpoint.
"""

from __future__ import annotations

import os
import random
import threading
import time

from ..artifact import Candidate, Request
from . import GenerationError
from .parse import ParseError, parse_answer

DEFAULT_MODEL = "claude-sonnet-5-5"
"""The current Sonnet per the model overview (docs checked 2026-12): fast, strong at code,
$2 / $10 per million input / output tokens. Override with model= or REGEN_LLM_MODEL."""

# USD per million tokens: input, output, 5-minute cache write, cache read (Anthropic's model
# pages). A model missing here gets cost_usd None rather than a guess; pass prices= to add one.
PRICES: dict[str, dict[str, float]] = {
    "claude-opus-5-5": {"input": 4.0, "output": 20.0, "cache_write": 5.0, "cache_read": 0.40},
    "claude-opus-5": {"input": 5.0, "output": 25.0, "cache_write": 6.25, "cache_read": 0.50},
    "claude-sonnet-5-5": {"input": 2.0, "output": 10.0, "cache_write": 2.50, "cache_read": 0.20},
    "claude-sonnet-5": {"input": 2.0, "output": 10.0, "cache_write": 2.50, "cache_read": 0.20},
    "claude-haiku-5-5": {"input": 0.10, "output": 0.50, "cache_write": 0.125, "cache_read": 0.01},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cache_write": 1.25, "cache_read": 0.10},
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cache_write": 6.25, "cache_read": 0.50},
}

SYSTEM_ROLE = ("You are an expert GPU and CPU kernel engineer. You answer with complete, "
               "compilable artifacts in exactly the requested format and nothing that is not asked.")

NO_KEY_MESSAGE = (
    "the llm generator needs an Anthropic API key: set ANTHROPIC_API_KEY in the environment, "
    "or use another generator: `--generator command:<cmd>` runs any coding agent or script on the "
    "prompt, and `regen handoff` writes the task out for a person to implement")

_RETRY_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}


def redact(text: str) -> str:
    """Text with the API key (if set) replaced, for anything that could reach a log or cache."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if key and len(key) >= 8 and text:
        text = text.replace(key, "<ANTHROPIC_API_KEY>")
    return text


def cost_usd(prices: dict, input_tokens: int, output_tokens: int, cache_write: int,
             cache_read: int) -> float | None:
    if not prices:
        return None
    return round((input_tokens * prices["input"] + output_tokens * prices["output"]
                  + cache_write * prices.get("cache_write", prices["input"] * 1.25)
                  + cache_read * prices.get("cache_read", prices["input"] * 0.1)) / 1e6, 6)


def _retryable(exc) -> bool:
    import anthropic

    if isinstance(exc, (anthropic.RateLimitError, anthropic.InternalServerError,
                        anthropic.APIConnectionError)):
        return True
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            return True
        # an error event inside a 200 stream (e.g. overloaded mid-answer): the SDK does not retry
        kind = getattr(exc, "type", None)
        if kind is None and isinstance(exc.body, dict):
            kind = (exc.body.get("error") or {}).get("type")
        return kind in _RETRY_TYPES
    return False


def _retry_after(exc) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    for header, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = response.headers.get(header)
        if value:
            try:
                return float(value) * scale
            except ValueError:
                return None
    return None


class LLMGenerator:
    """Generator backed by the Anthropic Messages API."""

    name = "llm"

    def __init__(self, model: str | None = None, max_tokens: int = 32000,
                 temperature: float | None = None, base_url: str | None = None,
                 timeout: float = 900.0, max_retries: int = 2, retry_rounds: int = 3,
                 backoff_s: float = 5.0, max_backoff_s: float = 120.0,
                 prices: dict[str, dict[str, float]] | None = None, stream: bool = True,
                 extra_body: dict | None = None):
        """temperature: None leaves it out (current models and API versions reject sampling
        parameters with a 400); set it only for a model that takes it. max_retries is the SDK's
        own retry count per call; retry_rounds bounds regen's loop around it (which also covers
        errors the SDK cannot retry, such as an overload reported inside a stream)."""
        self.model = model or os.environ.get("REGEN_LLM_MODEL") or DEFAULT_MODEL
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_rounds = retry_rounds
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.prices = {**PRICES, **(prices or {})}
        self.stream = stream
        self.extra_body = dict(extra_body or {})
        self._client = None
        self._lock = threading.Lock()

    def problem(self) -> str | None:
        """None when this generator can run here, else what to do about it."""
        if not os.environ.get("ANTHROPIC_API_KEY"):
            return NO_KEY_MESSAGE
        try:
            import anthropic  # noqa: F401
        except ImportError:
            return "the llm generator needs the anthropic package: pip install 'regen[llm]'"
        return None

    def _get_client(self):
        problem = self.problem()
        if problem:
            raise GenerationError(problem)
        import anthropic

        with self._lock:
            if self._client is None:
                self._client = anthropic.Anthropic(
                    api_key=os.environ["ANTHROPIC_API_KEY"], base_url=self.base_url,
                    max_retries=self.max_retries, timeout=self.timeout)
            return self._client

    def _call(self, client, system, messages):
        """One API call: (message, request_id)."""
        extra = dict(self.extra_body)
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        kwargs = dict(model=self.model, max_tokens=self.max_tokens, system=system,
                      messages=messages, extra_body=extra or None)
        if self.stream:
            with client.messages.stream(**kwargs) as stream:
                message = stream.get_final_message()
                return message, getattr(stream, "request_id", None)
        message = client.messages.create(**kwargs)
        return message, getattr(message, "_request_id", None)

    def generate(self, request: Request) -> Candidate:
        from ..prompt import split_prompt

        import anthropic

        client = self._get_client()
        static, dynamic = split_prompt(request.prompt)
        system = [{"type": "text", "text": SYSTEM_ROLE}]
        if static.strip():
            system.append({"type": "text", "text": static, "cache_control": {"type": "ephemeral"}})
        messages = [{"role": "user", "content": dynamic}]
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                message, request_id = self._call(client, system, messages)
                break
            except anthropic.APIError as exc:
                if attempt >= self.retry_rounds or not _retryable(exc):
                    raise GenerationError(self._describe(exc, attempt)) from None
                delay = _retry_after(exc)
                if delay is None:
                    delay = self.backoff_s * (2 ** attempt) * (0.75 + 0.5 * random.random())
                time.sleep(min(max(delay, 0.0), self.max_backoff_s))
                attempt += 1
        text = "".join(block.text for block in message.content
                       if getattr(block, "type", None) == "text")
        provenance = self._provenance(message, request_id, attempt, time.monotonic() - started)
        try:
            source, recipe, note = parse_answer(text, request.language)
        except ParseError as exc:
            reason = str(exc)
            if provenance["stop_reason"] == "max_tokens":
                reason += (f" (the answer stopped at max_tokens={self.max_tokens}: be more "
                           "concise, or raise max_tokens)")
            elif provenance["stop_reason"] not in (None, "end_turn", "stop_sequence"):
                reason += f" (the answer stopped with stop_reason={provenance['stop_reason']})"
            raise ParseError(reason, answer=text, provenance=provenance) from None
        return Candidate(source=source, recipe=recipe, provenance=provenance, note=note)

    def _describe(self, exc, attempt: int) -> str:
        import anthropic

        tries = f" after {attempt + 1} attempts" if attempt else ""
        if isinstance(exc, anthropic.AuthenticationError):
            what = "the API key was rejected (401): check ANTHROPIC_API_KEY"
        elif isinstance(exc, anthropic.APIStatusError):
            detail = getattr(exc, "api_message", None) or str(exc)
            what = f"HTTP {exc.status_code}: {detail}"
        elif isinstance(exc, anthropic.APITimeoutError):
            what = f"the request timed out ({self.timeout:g} s)"
        elif isinstance(exc, anthropic.APIConnectionError):
            what = f"could not reach the API: {exc}"
        else:
            what = str(exc)
        return redact(f"Anthropic API call for model {self.model} failed{tries}: {what}")

    def _provenance(self, message, request_id, retries: int, seconds: float) -> dict:
        usage = message.usage
        tokens_in = int(getattr(usage, "input_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "output_tokens", 0) or 0)
        cache_write = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
        cache_read = int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        prices = self.prices.get(self.model) or self.prices.get(getattr(message, "model", ""))
        return {
            "generator": "llm",
            "model": self.model,
            "response_model": getattr(message, "model", None),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cache_read_tokens": cache_read,
            "cache_write_tokens": cache_write,
            "cost_usd": cost_usd(prices, tokens_in, tokens_out, cache_write, cache_read),
            "request_id": request_id,
            "stop_reason": getattr(message, "stop_reason", None),
            "retries": retries,
            "seconds": round(seconds, 3),
        }
