"""An OpenAI-compatible generator: the Chat Completions API through the official `openai` SDK,
for local models served by vLLM, llama.cpp's server, Ollama or any OpenAI-compatible proxy
(`--generator openai --base-url URL --model NAME`), with no Anthropic key.

The same contract as the llm generator (regen/generators/llm.py): the prompt's static prefix is the
system message (servers with prefix caching reuse it), the request part the user message; answers
are streamed and parsed by parse.py. One retry layer (the SDK's retries are off), every call bounded
by the node's deadline (read timeout from the time left, checked between chunks) and its dollars
(max_tokens lowered to what Request.max_usd pays for, when the model has a price in prices.yaml).

OPENAI_API_KEY is sent when set (a local server usually needs none); OPENAI_BASE_URL or base_url=
names the server; REGEN_LLM_MODEL or model= the model it serves.
"""

from __future__ import annotations

import os
import random
import threading
import time

from ..artifact import Candidate, Request
from . import BudgetExhausted, GenerationError
from .llm import MIN_OUTPUT_TOKENS, SYSTEM_ROLE, _is_transport, _retry_after, _StreamCut
from .parse import ParseError, parse_answer, parse_cell
from .prices import affordable_output_tokens, cost_usd, load_prices


def _redact(text: str) -> str:
    key = os.environ.get("OPENAI_API_KEY")
    return text.replace(key, "<OPENAI_API_KEY>") if key and len(key) >= 8 and text else text


def failure_kind(exc: BaseException) -> str | None:
    """retry | transient | permanent | None (not a call failure), as in llm.failure_kind."""
    import openai

    if isinstance(exc, _Deadline):
        return "transient"
    if isinstance(exc, _StreamCut):
        return "retry"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            return "retry"
        return "permanent"
    if isinstance(exc, openai.APIConnectionError):   # APITimeoutError included
        return "retry"
    if isinstance(exc, openai.APIError):
        return "transient"
    if _is_transport(exc):
        return "retry"
    return None


class _Deadline(Exception):
    """The node's deadline passed while the answer was streaming in."""


class OpenAIGenerator:
    """Generator backed by an OpenAI-compatible Chat Completions endpoint."""

    name = "openai"

    def __init__(self, model: str | None = None, base_url: str | None = None,
                 max_tokens: int = 32000, stall_timeout: float = 120.0, max_retries: int = 2,
                 backoff_s: float = 2.0, max_backoff_s: float = 60.0,
                 prices: dict[str, dict[str, float]] | None = None, temperature: float | None = None):
        self.model = model or os.environ.get("REGEN_LLM_MODEL")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.max_tokens, self.stall_timeout = max_tokens, stall_timeout
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self.temperature = temperature
        self.prices = {**load_prices(), **(prices or {})}
        self._client = None
        self._lock = threading.Lock()

    def price(self) -> dict | None:
        return self.prices.get(self.model) if self.model else None

    def problem(self) -> str | None:
        try:
            import openai  # noqa: F401
        except ImportError:
            return "the openai generator needs the openai package: pip install 'regen[llm]'"
        if not self.model:
            return ("the openai generator needs a model: --model NAME or REGEN_LLM_MODEL (the "
                    "name the server serves)")
        if not self.base_url and not os.environ.get("OPENAI_API_KEY"):
            return ("the openai generator needs a server: --base-url URL or OPENAI_BASE_URL "
                    "(e.g. http://localhost:8000/v1 for vLLM), or OPENAI_API_KEY for OpenAI's own")
        return None

    def _get_client(self):
        problem = self.problem()
        if problem:
            raise GenerationError(problem)
        import openai

        with self._lock:
            if self._client is None:
                self._client = openai.OpenAI(
                    api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                    base_url=self.base_url, max_retries=0, timeout=self.stall_timeout)
            return self._client

    def _call(self, client, messages, max_tokens, timeout, deadline, usage: dict):
        kwargs = dict(model=self.model, messages=messages, max_tokens=max_tokens, stream=True,
                      stream_options={"include_usage": True}, timeout=timeout)
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        parts, finish, model = [], None, None
        stream = client.chat.completions.create(**kwargs)
        try:
            for chunk in stream:
                model = getattr(chunk, "model", None) or model
                for choice in chunk.choices or []:
                    if choice.delta and choice.delta.content:
                        parts.append(choice.delta.content)
                    finish = choice.finish_reason or finish
                if getattr(chunk, "usage", None):
                    u = chunk.usage
                    details = getattr(u, "prompt_tokens_details", None)
                    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
                    usage.update(input_tokens=int(u.prompt_tokens or 0) - cached,
                                 cache_read_tokens=cached,
                                 output_tokens=int(u.completion_tokens or 0))
                if deadline is not None and time.monotonic() > deadline:
                    raise _Deadline()
        finally:
            stream.close()
        if finish is None:   # the connection closed before the answer ended
            raise _StreamCut()
        return "".join(parts), finish, model, getattr(stream, "response", None)

    def generate(self, request: Request) -> Candidate:
        from ..prompt import split_prompt

        client = self._get_client()
        static, dynamic = split_prompt(request.prompt)
        messages = [{"role": "system", "content": SYSTEM_ROLE + ("\n\n" + static if static.strip()
                                                                 else "")},
                    {"role": "user", "content": dynamic}]
        chars = len(SYSTEM_ROLE) + len(request.prompt)
        started = time.monotonic()
        total = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                 "cache_write_tokens": 0}
        attempt = 0
        while True:
            max_tokens = self._max_tokens_for(request, chars, self._cost(total) or 0.0)
            timeout = self.stall_timeout
            if request.deadline is not None:
                left = request.deadline - time.monotonic()
                if left <= 0:
                    raise GenerationError(f"the node's time budget ran out before the call to "
                                          f"{self.model}", transient=True,
                                          provenance=self._spend(total, attempt, started))
                timeout = min(timeout, left)
            usage: dict = {}
            try:
                text, finish, served, response = self._call(client, messages, max_tokens,
                                                             timeout, request.deadline, usage)
                for k, v in usage.items():
                    total[k] += v
                break
            except Exception as exc:  # noqa: BLE001 - classified below; a bug is raised again
                kind = failure_kind(exc)
                if kind is None:
                    raise
                for k, v in usage.items():
                    total[k] += v
                delay = _retry_after(exc)
                if delay is None:
                    delay = self.backoff_s * (2 ** attempt) * (0.75 + 0.5 * random.random())
                delay = min(max(delay, 0.0), self.max_backoff_s)
                late = request.deadline is not None and time.monotonic() + delay >= request.deadline
                if kind != "retry" or attempt >= self.max_retries or late:
                    raise GenerationError(self._describe(exc, attempt, timeout),
                                          transient=kind != "permanent",
                                          provenance=self._spend(total, attempt, started)) from None
                time.sleep(delay)
                attempt += 1
        provenance = {"generator": "openai", "model": self.model, "response_model": served,
                      "base_url": self.base_url, "max_tokens": max_tokens, **total,
                      "cost_usd": self._cost(total), "stop_reason": finish,
                      "request_id": response.headers.get("x-request-id") if response is not None
                      else None,
                      "retries": attempt, "seconds": round(time.monotonic() - started, 3)}
        try:
            source, recipe, note = parse_answer(text, request.language)
        except ParseError as exc:
            reason = str(exc)
            if finish == "length":
                reason += f" (the answer stopped at max_tokens={max_tokens})"
            raise ParseError(reason, answer=text, provenance=provenance) from None
        return Candidate(source=source, recipe=recipe, provenance=provenance, note=note,
                         cell=parse_cell(text))

    def _max_tokens_for(self, request: Request, chars: int, spent: float) -> int:
        if request.max_usd is None:
            return self.max_tokens
        prices = self.price()
        if prices is None:
            raise GenerationError(f"no price is known for model {self.model}, so a spending limit "
                                  f"(max_usd {request.max_usd:g}) cannot be enforced: add its "
                                  "price to ~/.config/regen/prices.yaml (or $REGEN_PRICES)")
        left = request.max_usd - spent
        allowed = min(self.max_tokens, affordable_output_tokens(prices, chars, left))
        if allowed < min(MIN_OUTPUT_TOKENS, self.max_tokens):
            raise BudgetExhausted(f"max_usd: ${max(left, 0.0):.4f} left cannot pay for another "
                                  f"call to {self.model}")
        return allowed

    def _cost(self, total: dict) -> float | None:
        return cost_usd(self.price(), total["input_tokens"], total["output_tokens"],
                        total["cache_write_tokens"], total["cache_read_tokens"])

    def _spend(self, total: dict, attempt: int, started: float) -> dict:
        return {"generator": "openai", "model": self.model, **total, "cost_usd": self._cost(total),
                "attempts": attempt + 1, "seconds": round(time.monotonic() - started, 3)}

    def _describe(self, exc, attempt: int, timeout: float) -> str:
        import openai

        tries = f" after {attempt + 1} attempts" if attempt else ""
        if isinstance(exc, _Deadline):
            what = "the node's time budget ran out while the answer was streaming"
        elif isinstance(exc, _StreamCut):
            what = "the stream ended before the answer did (the connection closed mid-answer)"
        elif isinstance(exc, openai.AuthenticationError):
            what = "the API key was rejected (401): check OPENAI_API_KEY"
        elif isinstance(exc, openai.APIStatusError):
            what = f"HTTP {exc.status_code}: {getattr(exc, 'message', None) or exc}"
        elif isinstance(exc, openai.APITimeoutError) or "Timeout" in type(exc).__name__:
            what = f"nothing received for {timeout:.3g} s"
        else:
            cause = exc.__cause__ or exc
            what = f"could not reach the server ({type(cause).__name__}: {cause})"
        return _redact(f"OpenAI-compatible call to {self.base_url or 'api.openai.com'} for model "
                       f"{self.model} failed{tries}: {what}")
