"""An OpenAI-compatible generator: the Chat Completions API through the official `openai` SDK,
for local models served by vLLM, llama.cpp's server, Ollama or any OpenAI-compatible proxy
(`--generator openai --base-url URL --model NAME`), with no Anthropic key.

The same contract as the llm generator (regen/generators/llm.py): the prompt's static prefix is the
system message (servers with prefix caching reuse it), the request part the user message; answers
are streamed and parsed by parse.py. Retries, the node's deadline and its dollars follow the same
rules as every API generator's (regen/generators/policy.py): the SDK's own retries are off.

OPENAI_API_KEY is sent when set (a local server usually needs none); OPENAI_BASE_URL or base_url=
names the server; REGEN_LLM_MODEL or model= the model it serves.
"""

from __future__ import annotations

import os
import threading
import time

from ..artifact import Candidate, Request
from . import GenerationError
from .llm import SYSTEM_ROLE
from .parse import ParseError, parse_answer, parse_cell
from .policy import DeadlineReached, Policy, StreamCut, Usage, is_transport
from .prices import load_prices


def _redact(text: str) -> str:
    key = os.environ.get("OPENAI_API_KEY")
    return text.replace(key, "<OPENAI_API_KEY>") if key and len(key) >= 8 and text else text


def failure_kind(exc: BaseException) -> str | None:
    """retry | transient | permanent | None (not a call failure), as in llm.failure_kind."""
    import openai

    if isinstance(exc, DeadlineReached):
        return "transient"
    if isinstance(exc, StreamCut):
        return "retry"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            return "retry"
        return "permanent"
    if isinstance(exc, openai.APIConnectionError):   # APITimeoutError included
        return "retry"
    if isinstance(exc, openai.APIError):
        return "transient"
    if is_transport(exc):
        return "retry"
    return None


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

    def _call(self, client, messages, max_tokens, timeout, deadline, usage: Usage):
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
                    usage.set(input_tokens=int(u.prompt_tokens or 0) - cached,
                              cache_read_tokens=cached,
                              output_tokens=int(u.completion_tokens or 0))
                if deadline is not None and time.monotonic() > deadline:
                    raise DeadlineReached()
        finally:
            stream.close()
        if finish is None:   # the connection closed before the answer ended
            raise StreamCut()
        return "".join(parts), finish, model, getattr(stream, "response", None)

    def generate(self, request: Request) -> Candidate:
        from ..prompt import split_prompt

        client = self._get_client()
        static, dynamic = split_prompt(request.prompt)
        messages = [{"role": "system", "content": SYSTEM_ROLE + ("\n\n" + static if static.strip()
                                                                 else "")},
                    {"role": "user", "content": dynamic}]
        chars = len(SYSTEM_ROLE) + len(request.prompt)
        usage = Usage()
        (text, finish, served, response), attempt, max_tokens, started = self.policy().run(
            request, chars, usage,
            lambda max_tokens, timeout: self._call(client, messages, max_tokens, timeout,
                                                   request.deadline, usage),
            failure_kind, self._describe, self._spend)
        usage.close_attempt()
        total = usage.total
        provenance = {"generator": "openai", "model": self.model, "response_model": served,
                      "base_url": self.base_url, "max_tokens": max_tokens, **total,
                      "cost_usd": usage.cost(self.price()), "stop_reason": finish,
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

    def policy(self) -> Policy:
        """The retry, deadline and budget rules of a call (regen/generators/policy.py)."""
        return Policy(self.model, self.max_tokens, self.stall_timeout, self.max_retries,
                      self.backoff_s, self.max_backoff_s, self.price())

    def _spend(self, usage: Usage, attempt: int, started: float) -> dict:
        return {"generator": "openai", "model": self.model, **usage.total,
                "cost_usd": usage.cost(self.price()), "attempts": attempt + 1,
                "seconds": round(time.monotonic() - started, 3)}

    def _describe(self, exc, attempt: int, timeout: float, out_of_time: bool = False,
                  mid_answer: bool = False) -> str:
        import openai

        tries = f" after {attempt + 1} attempts" if attempt else ""
        if isinstance(exc, DeadlineReached):
            what = "the node's time budget ran out while the answer was streaming"
        elif isinstance(exc, StreamCut):
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
        if out_of_time:
            what += "; no time left in the node's budget to retry"
        return _redact(f"OpenAI-compatible call to {self.base_url or 'api.openai.com'} for model "
                       f"{self.model} failed{tries}: {what}")
