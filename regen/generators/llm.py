"""The LLM generator: the Anthropic Messages API through the official `anthropic` SDK.

The prompt's static prefix (spec + target + format contract, regen/prompt.py) goes in the system
prompt marked for prompt caching, so repairs and refinements of one kernel pay for it once; the
request part (previous candidate, feedback) is the user message. Answers are streamed (long
outputs would hit the SDK's non-streaming time limit) and parsed by parse.py.

Retries, the node's deadline and its dollars follow regen/generators/policy.py, shared with every
API generator: the SDK's own retries are off (max_retries=0 on the client); what can succeed on a
second try (429, 5xx, 529, an overload reported inside a stream, a dropped or stalled connection)
is retried, the deadline is checked between streamed events, and max_tokens is lowered to what
Request.max_usd can still pay for; prices come from prices.py.

The API key comes from ANTHROPIC_API_KEY only and is never written to provenance, logs or error
messages (`redact`). ANTHROPIC_BASE_URL, or `base_url=`, points the SDK at another endpoint (any
server that speaks the Messages API: a LiteLLM proxy, vLLM's Anthropic-compatible server).
"""

from __future__ import annotations

import os
import threading
import time

from ..artifact import Candidate, Request
from . import GenerationError
from .parse import ParseError, parse_answer, parse_cell
from .policy import MIN_OUTPUT_TOKENS, Policy, Usage  # noqa: F401 - MIN_OUTPUT_TOKENS re-exported
from .policy import DeadlineReached as _DeadlineReached
from .policy import StreamCut as _StreamCut
from .policy import is_transport as _is_transport
from .prices import cost_usd, load_prices  # noqa: F401 - cost_usd re-exported

DEFAULT_MODEL = "claude-sonnet-5-5"
"""The current Sonnet per the model overview (docs checked 2026-12): fast, strong at code.
Override with model= (--model) or REGEN_LLM_MODEL."""

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


class _Usage(Usage):
    """Usage, read from the Messages API's usage objects."""

    def start(self, usage) -> None:
        self.current = dict.fromkeys(self.FIELDS, 0)
        self.set(input_tokens=getattr(usage, "input_tokens", 0),
                 output_tokens=getattr(usage, "output_tokens", 0),
                 cache_read_tokens=getattr(usage, "cache_read_input_tokens", 0),
                 cache_write_tokens=getattr(usage, "cache_creation_input_tokens", 0))

    def output(self, tokens) -> None:
        if tokens:
            self.current["output_tokens"] = int(tokens)


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

    def policy(self) -> Policy:
        """The retry, deadline and budget rules of a call (regen/generators/policy.py)."""
        return Policy(self.model, self.max_tokens, self.stall_timeout, self.max_retries,
                      self.backoff_s, self.max_backoff_s, self.price())

    def generate(self, request: Request) -> Candidate:
        from ..prompt import split_prompt

        client = self._get_client()
        static, dynamic = split_prompt(request.prompt)
        system = [{"type": "text", "text": SYSTEM_ROLE}]
        if static.strip():
            system.append({"type": "text", "text": static, "cache_control": {"type": "ephemeral"}})
        messages = [{"role": "user", "content": dynamic}]
        chars = len(SYSTEM_ROLE) + len(request.prompt)
        usage = _Usage()
        (message, request_id), attempt, max_tokens, started = self.policy().run(
            request, chars, usage,
            lambda max_tokens, timeout: self._call(client, system, messages, max_tokens, timeout,
                                                   request.deadline, usage),
            failure_kind, self._describe, self._spend)
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
