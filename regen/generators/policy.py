"""How an LLM generator spends one generate() call: retries, the node's deadline and its dollars.

Shared by every API generator (llm.py for the Anthropic Messages API, openai_compat.py for
OpenAI-compatible servers) so the rules cannot drift apart: one retry layer (the SDKs' own retries
are off), retrying only what can succeed on a second try, honouring retry-after, backing off
exponentially with jitter, never starting a retry that could not finish before the deadline; the
read timeout is the smaller of the stall timeout and the time left; max_tokens is lowered before
each attempt to what Request.max_usd still pays for (failed attempts included). A generator
supplies only what is SDK-specific: the call itself, how its errors are classified and worded.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

from ..artifact import Request
from . import BudgetExhausted, GenerationError
from .prices import affordable_output_tokens, cost_usd

MIN_OUTPUT_TOKENS = 1024
"""A call the budget cannot pay this many output tokens for is not made (the answer would be cut)."""

_TRANSPORT_MODULES = ("httpx", "httpcore", "h11", "h2", "anyio", "ssl", "socket")


class StreamCut(Exception):
    """The stream ended before the answer did: the connection closed mid-answer (an SDK would
    hand back the partial message as if it were the answer)."""


class DeadlineReached(Exception):
    """The node's deadline passed while an answer was still streaming in."""


def is_transport(exc: BaseException) -> bool:
    """An error of the HTTP transport itself (a read that timed out or a connection that dropped
    while a stream was being read): the SDKs pass these through unwrapped."""
    module = type(exc).__module__.split(".")[0]
    return module.startswith(_TRANSPORT_MODULES) or isinstance(exc, (OSError, EOFError))


def retry_after(exc) -> float | None:
    """Seconds the server asked to wait (retry-after-ms / retry-after), if it said."""
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


class Usage:
    """Tokens over every attempt of one generate() call, failed ones included (a stream that
    broke after it started was billed for its input)."""

    FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")

    def __init__(self):
        self.total = dict.fromkeys(self.FIELDS, 0)
        self.current = dict.fromkeys(self.FIELDS, 0)
        self.streaming = False     # the current attempt's answer had started to arrive

    def set(self, **tokens) -> None:
        """The current attempt's tokens so far (fields not given keep their value)."""
        self.streaming = True
        for k, v in tokens.items():
            self.current[k] = int(v or 0)

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


@dataclass
class Policy:
    """One generator's limits (its constructor arguments)."""

    model: str
    max_tokens: int
    stall_timeout: float
    max_retries: int
    backoff_s: float
    max_backoff_s: float
    prices: dict | None  # USD per million tokens of the model, None when unknown

    def max_tokens_for(self, request: Request, chars: int, spent_usd: float) -> int:
        """max_tokens for the next attempt: what the budget can pay for, at most max_tokens."""
        if request.max_usd is None:
            return self.max_tokens
        if self.prices is None:
            raise GenerationError(
                f"no price is known for model {self.model}, so a spending limit (max_usd "
                f"{request.max_usd:g}) cannot be enforced: add its price to "
                "~/.config/regen/prices.yaml (or the file $REGEN_PRICES names), or run without "
                "--max-usd")
        left = request.max_usd - spent_usd
        allowed = min(self.max_tokens, affordable_output_tokens(self.prices, chars, left))
        if allowed < min(MIN_OUTPUT_TOKENS, self.max_tokens):
            raise BudgetExhausted(
                f"max_usd: ${max(left, 0.0):.4f} left cannot pay for another call to {self.model} "
                f"(a {chars}-character prompt and at least {MIN_OUTPUT_TOKENS} output tokens)")
        return allowed

    def backoff(self, exc, attempt: int) -> float:
        delay = retry_after(exc)
        if delay is None:
            delay = self.backoff_s * (2 ** attempt) * (0.75 + 0.5 * random.random())
        return min(max(delay, 0.0), self.max_backoff_s)

    def run(self, request: Request, chars: int, usage: Usage,
            call: Callable[[int, float], object],
            failure_kind: Callable[[BaseException], str | None],
            describe: Callable[..., str], spend: Callable[[Usage, int, float], dict]):
        """Make `call(max_tokens, timeout)` until it succeeds or the policy gives up.

        failure_kind(exc): "retry" | "transient" | "permanent" | None (not a call failure: the
        exception is raised as it is). describe(exc, attempt, timeout, out_of_time, mid_answer):
        the error's wording. spend(usage, attempt, started): the provenance of a failed call.
        Returns (call's result, retries made, the max_tokens of the successful attempt, started)."""
        started = time.monotonic()
        attempt = 0
        while True:
            max_tokens = self.max_tokens_for(request, chars, usage.cost(self.prices) or 0.0)
            timeout = self.stall_timeout
            if request.deadline is not None:
                left = request.deadline - time.monotonic()
                if left <= 0:
                    raise GenerationError(
                        f"the node's time budget ran out before the call to {self.model}"
                        + (f" (after {attempt} failed attempts)" if attempt else ""),
                        transient=True, provenance=spend(usage, attempt, started))
                timeout = min(timeout, left)
            try:
                return call(max_tokens, timeout), attempt, max_tokens, started
            except Exception as exc:  # noqa: BLE001 - classified below; a bug is raised again
                kind = failure_kind(exc)
                if kind is None:
                    raise
                mid_answer = usage.close_attempt()
                delay = self.backoff(exc, attempt)
                late = request.deadline is not None and time.monotonic() + delay >= request.deadline
                if kind != "retry" or attempt >= self.max_retries or late:
                    raise GenerationError(
                        describe(exc, attempt, timeout, late and kind == "retry", mid_answer),
                        transient=kind != "permanent",
                        provenance=spend(usage, attempt, started)) from None
                time.sleep(delay)
                attempt += 1
