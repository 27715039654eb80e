"""The LLM generator: the Anthropic Messages API through the official `anthropic` SDK.

The prompt's static prefix (spec + target + format contract, regen/prompt.py) goes in the system
prompt marked for prompt caching, so repairs and refinements of one kernel pay for it once; the
request part (previous candidate, feedback) is the user message. Answers are streamed (long
outputs would hit the SDK's non-streaming time limit) and parsed by parse.py.

One retry layer: the SDK's own retries are off (max_retries=0 on the client) and this module
retries what can succeed on a second try (429, 5xx, 529, an overload reported inside a stream, a
dropped or stalled connection) up to `max_retries` times, honouring retry-after. Every call is
bounded by the node's deadline (Request.deadline): the read timeout is the smaller of
`stall_timeout` and the time left, the deadline is checked between streamed events, and no retry
starts that could not finish in time. Request.max_usd bounds the call's worst-case cost before it
is made (max_tokens is lowered to what the budget can pay for); prices come from prices.py.

The API key comes from ANTHROPIC_API_KEY only and is never written to provenance, logs or error
messages (`redact`). ANTHROPIC_BASE_URL, or `base_url=`, points the SDK at another endpoint (any
server that speaks the Messages API: a LiteLLM proxy, vLLM's Anthropic-compatible server).
"""

from __future__ import annotations

import os
import random
import threading
import time

from ..artifact import Candidate, Request
from . import BudgetExhausted, GenerationError
from .parse import ParseError, parse_answer, parse_cell
from .prices import affordable_output_tokens, cost_usd, load_prices  # noqa: F401 - cost_usd re-exported

DEFAULT_MODEL = "claude-sonnet-5-5"
"""The current Sonnet per the model overview (docs checked 2026-12): fast, strong at code.
Override with model= (--model) or REGEN_LLM_MODEL."""

MIN_OUTPUT_TOKENS = 1024
"""A call the budget cannot pay this many output tokens for is not made (the answer would be cut)."""

SYSTEM_ROLE = ("You are an expert GPU and CPU kernel engineer. You answer with complete, "
               "compilable artifacts in exactly the requested format and nothing that is not asked.")

NO_KEY_MESSAGE = (
    "the llm generator needs an Anthropic API key: set ANTHROPIC_API_KEY in the environment, "
    "or use another generator: `--generator command:<cmd>` runs any coding agent or script on the "
    "prompt, and `regen handoff` writes the task out for a person to implement")

_RETRY_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
_TRANSPORT_MODULES = ("httpx", "httpcore", "h11", "h2", "anyio", "ssl", "socket")


def redact(text: str) -> str:
    """Text with the API key (if set) replaced, for anything that could reach a log or cache."""
    key = os.environ.get("ANTHROPIC_API_KEY")
    if key and len(key) >= 8 and text:
        text = text.replace(key, "<ANTHROPIC_API_KEY>")
    return text


class _DeadlineReached(Exception):
    """The node's deadline passed while an answer was still streaming in."""


class _StreamCut(Exception):
    """The stream ended without message_stop: the connection closed mid-answer (the SDK would
    hand back the partial message as if it were the answer)."""


def _is_transport(exc: BaseException) -> bool:
    """An error of the HTTP transport itself (a read that timed out or a connection that dropped
    while a stream was being read): the SDK passes these through unwrapped."""
    module = type(exc).__module__.split(".")[0]
    return module.startswith(_TRANSPORT_MODULES) or isinstance(exc, (OSError, EOFError))


def failure_kind(exc: BaseException) -> str | None:
    """How a failed call is treated: "retry" (worth another try), "transient" (this call failed;
    another candidate may not), "permanent" (asking again cannot help), None (not a call failure:
    a bug, let it through)."""
    import anthropic

    if isinstance(exc, _DeadlineReached):
        return "transient"
    if isinstance(exc, _StreamCut):
        return "retry"
    if isinstance(exc, anthropic.APIStatusError):
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            return "retry"
        kind = getattr(exc, "type", None)
        if kind is None and isinstance(exc.body, dict):
            kind = (exc.body.get("error") or {}).get("type")
        if kind in _RETRY_TYPES:   # an error event inside a 200 stream
            return "retry"
        return "transient" if exc.status_code == 200 else "permanent"
    if isinstance(exc, anthropic.APIConnectionError):   # APITimeoutError included
        return "retry"
    if isinstance(exc, anthropic.APIError):             # e.g. a response that did not validate
        return "transient"
    if _is_transport(exc):
        return "retry"
    return None


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


class _Usage:
    """Tokens over every attempt of one generate() call, failed ones included (a stream that
    broke after message_start was billed for its input)."""

    FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

    def __init__(self):
        self.total = dict.fromkeys(self.FIELDS, 0)
        self.current = dict.fromkeys(self.FIELDS, 0)
        self.streaming = False     # the current attempt's answer had started to arrive

    def start(self, usage) -> None:
        self.streaming = True
        self.current = {
            "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
            "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
            "cache_read_tokens": int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            "cache_write_tokens": int(getattr(usage, "cache_creation_input_tokens", 0) or 0)}

    def output(self, tokens) -> None:
        if tokens:
            self.current["output_tokens"] = int(tokens)

    def close_attempt(self) -> bool:
        """Add the attempt's tokens to the total; whether its answer had started to arrive."""
        for k in self.FIELDS:
            self.total[k] += self.current[k]
        self.current = dict.fromkeys(self.FIELDS, 0)
        started, self.streaming = self.streaming, False
        return started

    def cost(self, prices) -> float | None:
        t = self.total
        return cost_usd(prices, t["input_tokens"], t["output_tokens"], t["cache_write_tokens"],
                        t["cache_read_tokens"])


class LLMGenerator:
    """Generator backed by the Anthropic Messages API."""

    name = "llm"

    def __init__(self, model: str | None = None, max_tokens: int = 32000,
                 temperature: float | None = None, base_url: str | None = None,
                 stall_timeout: float = 120.0, max_retries: int = 2, backoff_s: float = 2.0,
                 max_backoff_s: float = 60.0, prices: dict[str, dict[str, float]] | None = None,
                 stream: bool = True, extra_body: dict | None = None):
        """temperature: None leaves it out (current models and API versions reject sampling
        parameters with a 400); set it only for a model that takes it. stall_timeout: seconds
        the endpoint may send nothing before the call fails (the API sends pings while a model
        thinks). max_retries: retries per call after a failure worth retrying (the only retry
        layer: the SDK's own is off)."""
        self.model = model or os.environ.get("REGEN_LLM_MODEL") or DEFAULT_MODEL
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.base_url = base_url
        self.stall_timeout = stall_timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.prices = {**load_prices(), **(prices or {})}
        self.stream = stream
        self.extra_body = dict(extra_body or {})
        self._client = None
        self._lock = threading.Lock()

    def price(self) -> dict | None:
        """USD per million tokens for this model, or None when no price file knows it."""
        return self.prices.get(self.model)

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
                    max_retries=0, timeout=self.stall_timeout)
            return self._client

    def _call(self, client, system, messages, max_tokens: int, timeout: float,
              deadline: float | None, usage: _Usage):
        """One API call: (message, request_id). Streamed usage is recorded as it arrives."""
        extra = dict(self.extra_body)
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        kwargs = dict(model=self.model, max_tokens=max_tokens, system=system,
                      messages=messages, extra_body=extra or None, timeout=timeout)
        if not self.stream:
            message = client.messages.create(**kwargs)
            return message, getattr(message, "_request_id", None)
        with client.messages.stream(**kwargs) as stream:
            complete = False
            for event in stream:
                kind = getattr(event, "type", "")
                if kind == "message_start":
                    usage.start(event.message.usage)
                elif kind == "message_delta":
                    usage.output(getattr(event.usage, "output_tokens", 0))
                complete = complete or kind == "message_stop"
                if deadline is not None and time.monotonic() > deadline:
                    raise _DeadlineReached()
            if not complete:
                raise _StreamCut()
            message = stream.get_final_message()
            return message, getattr(stream, "request_id", None)

    def _max_tokens_for(self, request: Request, chars: int, spent_usd: float) -> int:
        """max_tokens for the next attempt: what the budget can pay for, at most self.max_tokens."""
        if request.max_usd is None:
            return self.max_tokens
        prices = self.price()
        if prices is None:
            raise GenerationError(
                f"no price is known for model {self.model}, so a spending limit (max_usd "
                f"{request.max_usd:g}) cannot be enforced: add its price to "
                "~/.config/regen/prices.yaml (or the file $REGEN_PRICES names), or run without "
                "--max-usd")
        left = request.max_usd - spent_usd
        allowed = min(self.max_tokens, affordable_output_tokens(prices, chars, left))
        if allowed < min(MIN_OUTPUT_TOKENS, self.max_tokens):
            raise BudgetExhausted(
                f"max_usd: ${max(left, 0.0):.4f} left cannot pay for another call to {self.model} "
                f"(a {chars}-character prompt and at least {MIN_OUTPUT_TOKENS} output tokens)")
        return allowed

    def generate(self, request: Request) -> Candidate:
        from ..prompt import split_prompt

        client = self._get_client()
        static, dynamic = split_prompt(request.prompt)
        system = [{"type": "text", "text": SYSTEM_ROLE}]
        if static.strip():
            system.append({"type": "text", "text": static, "cache_control": {"type": "ephemeral"}})
        messages = [{"role": "user", "content": dynamic}]
        chars = len(SYSTEM_ROLE) + len(request.prompt)
        started = time.monotonic()
        usage = _Usage()
        attempt = 0
        while True:
            max_tokens = self._max_tokens_for(request, chars, usage.cost(self.price()) or 0.0)
            timeout = self.stall_timeout
            if request.deadline is not None:
                left = request.deadline - time.monotonic()
                if left <= 0:
                    raise GenerationError(
                        f"the node's time budget ran out before the call to {self.model}"
                        + (f" (after {attempt} failed attempts)" if attempt else ""),
                        transient=True, provenance=self._spend(usage, attempt, started))
                timeout = min(timeout, left)
            try:
                message, request_id = self._call(client, system, messages, max_tokens, timeout,
                                                 request.deadline, usage)
                break
            except Exception as exc:  # noqa: BLE001 - classified below; a bug is raised again
                kind = failure_kind(exc)
                if kind is None:
                    raise
                mid_answer = usage.close_attempt()
                delay = _retry_after(exc)
                if delay is None:
                    delay = self.backoff_s * (2 ** attempt) * (0.75 + 0.5 * random.random())
                delay = min(max(delay, 0.0), self.max_backoff_s)
                late = request.deadline is not None and time.monotonic() + delay >= request.deadline
                if kind != "retry" or attempt >= self.max_retries or late:
                    raise GenerationError(
                        self._describe(exc, attempt, timeout, late and kind == "retry", mid_answer),
                        transient=kind != "permanent",
                        provenance=self._spend(usage, attempt, started)) from None
                time.sleep(delay)
                attempt += 1
        usage.start(message.usage)
        usage.close_attempt()
        text = "".join(block.text for block in message.content
                       if getattr(block, "type", None) == "text")
        provenance = self._provenance(message, request_id, attempt, started, usage, max_tokens)
        try:
            source, recipe, note = parse_answer(text, request.language)
        except ParseError as exc:
            reason = str(exc)
            if provenance["stop_reason"] == "max_tokens":
                reason += (f" (the answer stopped at max_tokens={max_tokens}: be more "
                           "concise, or raise max_tokens)")
            elif provenance["stop_reason"] not in (None, "end_turn", "stop_sequence"):
                reason += f" (the answer stopped with stop_reason={provenance['stop_reason']})"
            raise ParseError(reason, answer=text, provenance=provenance) from None
        return Candidate(source=source, recipe=recipe, provenance=provenance, note=note,
                         cell=parse_cell(text))

    def _describe(self, exc, attempt: int, timeout: float, out_of_time: bool,
                  mid_answer: bool = False) -> str:
        import anthropic

        tries = f" after {attempt + 1} attempts" if attempt else ""
        if isinstance(exc, _DeadlineReached):
            what = "the node's time budget ran out while the answer was streaming"
        elif isinstance(exc, _StreamCut):
            what = "the stream ended before the answer did (the connection closed mid-answer)"
        elif isinstance(exc, anthropic.AuthenticationError):
            what = "the API key was rejected (401): check ANTHROPIC_API_KEY"
        elif isinstance(exc, anthropic.APIStatusError):
            detail = getattr(exc, "api_message", None) or str(exc)
            what = f"HTTP {exc.status_code}: {detail}"
        elif isinstance(exc, anthropic.APITimeoutError) or \
                (_is_transport(exc) and "Timeout" in type(exc).__name__):
            what = (f"the answer stalled mid-stream: nothing received for {timeout:.3g} s"
                    if mid_answer else f"no response within {timeout:.3g} s")
        elif isinstance(exc, anthropic.APIConnectionError) or _is_transport(exc):
            cause = exc.__cause__ or exc
            detail = f"{type(cause).__name__}: {cause}".rstrip(": ")
            what = (f"the connection failed mid-answer ({detail})" if mid_answer
                    else f"could not reach the API ({detail})")
        else:
            what = f"{type(exc).__name__}: {exc}"
        if out_of_time:
            what += "; no time left in the node's budget to retry"
        return redact(f"Anthropic API call for model {self.model} failed{tries}: {what}")

    def _spend(self, usage: _Usage, attempt: int, started: float) -> dict:
        """What a failed call cost, for the search's accounting."""
        return {"generator": "llm", "model": self.model, **usage.total,
                "cost_usd": usage.cost(self.price()), "attempts": attempt + 1,
                "seconds": round(time.monotonic() - started, 3)}

    def _provenance(self, message, request_id, retries: int, started: float, usage: _Usage,
                    max_tokens: int) -> dict:
        return {
            "generator": "llm",
            "model": self.model,
            "response_model": getattr(message, "model", None),
            "temperature": self.temperature,
            "max_tokens": max_tokens,
            **usage.total,
            "cost_usd": usage.cost(self.price() or self.prices.get(getattr(message, "model", ""))),
            "request_id": request_id,
            "stop_reason": getattr(message, "stop_reason", None),
            "retries": retries,
            "seconds": round(time.monotonic() - started, 3),
        }
