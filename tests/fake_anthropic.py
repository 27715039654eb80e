"""A local stand-in for the Anthropic Messages endpoint, so tests drive the real SDK over HTTP.

POST /v1/messages answers from a queue of scripted replies, in the API's JSON format or, when the
request asks for `stream: true`, as the API's server-sent events. Replies:
    {"text": "...", "stop_reason": "end_turn", "thinking": "..."}     a message
    {"status": 429, "retry_after_ms": 10}                              an HTTP error
    {"stream_error": "overloaded_error"}                               an error event mid-stream
    {"stall_after": 2, "stall_s": 30}        a stream that stops sending after 2 text chunks
    {"hang_s": 30}                           no response at all for 30 s (headers never come)
A stall or hang ends early when the server shuts down.
Prompt caching is simulated: a system block marked cache_control is "written" the first time its
text is seen and "read" afterwards, so usage shows whether a prefix stayed identical.
Every request's path, headers and JSON body is recorded in `requests`.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client closing a kept-alive connection is not a test failure


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeAnthropic:
    def __init__(self):
        self.replies: deque = deque()
        self.requests: list[dict] = []
        self._cached: set[str] = set()
        self._count = 0
        self._lock = threading.Lock()
        self.closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                with fake._lock:
                    fake.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": body, "raw": raw.decode(errors="replace")})
                    fake._count += 1
                    n = fake._count
                    reply = fake.replies.popleft() if fake.replies else None
                if not self.path.startswith("/v1/messages"):
                    return self._error(404, "not_found_error", f"no route {self.path}", n)
                if reply is None:
                    return self._error(400, "invalid_request_error",
                                       "fake endpoint: no scripted reply left", n, retry=False)
                if reply.get("hang_s"):
                    fake.closing.wait(reply["hang_s"])
                    self.close_connection = True
                    return None
                if "status" in reply:
                    return self._error(reply["status"], reply.get("type", "rate_limit_error"),
                                       reply.get("message", "scripted error"), n,
                                       retry_after_ms=reply.get("retry_after_ms"))
                usage = fake._usage(body, reply)
                if body.get("stream"):
                    return self._stream(body, reply, usage, n)
                return self._json(body, reply, usage, n)

            def _error(self, status, kind, message, n, retry_after_ms=None, retry=None):
                data = json.dumps({"type": "error", "error": {"type": kind, "message": message},
                                   "request_id": f"req_fake_{n}"}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{n}")
                if retry_after_ms is not None:
                    self.send_header("retry-after-ms", str(retry_after_ms))
                if retry is not None:
                    self.send_header("x-should-retry", "true" if retry else "false")
                self.end_headers()
                self.wfile.write(data)

            def _content(self, reply):
                content = []
                if reply.get("thinking"):
                    content.append({"type": "thinking", "thinking": reply["thinking"],
                                    "signature": "c2ln"})
                content.append({"type": "text", "text": reply.get("text", "")})
                return content

            def _json(self, body, reply, usage, n):
                data = json.dumps({
                    "id": f"msg_fake_{n}", "type": "message", "role": "assistant",
                    "content": self._content(reply), "model": body.get("model"),
                    "stop_reason": reply.get("stop_reason", "end_turn"), "stop_sequence": None,
                    "usage": usage}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_fake_{n}")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body, reply, usage, n):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", f"req_fake_{n}")
                self.send_header("connection", "close")
                self.end_headers()

                def event(kind, data):
                    self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                start_usage = dict(usage, output_tokens=1)
                event("message_start", {"type": "message_start", "message": {
                    "id": f"msg_fake_{n}", "type": "message", "role": "assistant", "content": [],
                    "model": body.get("model"), "stop_reason": None, "stop_sequence": None,
                    "usage": start_usage}})
                event("ping", {"type": "ping"})
                for index, block in enumerate(self._content(reply)):
                    if block["type"] == "thinking":
                        event("content_block_start", {"type": "content_block_start", "index": index,
                              "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
                        event("content_block_delta", {"type": "content_block_delta", "index": index,
                              "delta": {"type": "thinking_delta", "thinking": block["thinking"]}})
                        event("content_block_delta", {"type": "content_block_delta", "index": index,
                              "delta": {"type": "signature_delta", "signature": block["signature"]}})
                    else:
                        event("content_block_start", {"type": "content_block_start", "index": index,
                              "content_block": {"type": "text", "text": ""}})
                        text = block["text"]
                        for chunk, i in enumerate(range(0, max(len(text), 1), 200)):
                            if reply.get("stall_after") is not None and chunk == reply["stall_after"]:
                                fake.closing.wait(reply.get("stall_s", 30))
                                self.close_connection = True
                                return
                            event("content_block_delta", {"type": "content_block_delta",
                                  "index": index, "delta": {"type": "text_delta",
                                                            "text": text[i:i + 200]}})
                            if reply.get("stream_error"):
                                event("error", {"type": "error", "error": {
                                    "type": reply["stream_error"], "message": "Overloaded"}})
                                self.close_connection = True
                                return
                    event("content_block_stop", {"type": "content_block_stop", "index": index})
                event("message_delta", {"type": "message_delta",
                      "delta": {"stop_reason": reply.get("stop_reason", "end_turn"),
                                "stop_sequence": None},
                      "usage": {"output_tokens": usage["output_tokens"]}})
                event("message_stop", {"type": "message_stop"})
                self.close_connection = True

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                        daemon=True)

    def _usage(self, body: dict, reply: dict) -> dict:
        cached_write = cached_read = 0
        uncached = ""
        system = body.get("system") or []
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        with self._lock:
            for block in system:
                if block.get("cache_control"):
                    if block["text"] in self._cached:
                        cached_read += _tokens(block["text"])
                    else:
                        self._cached.add(block["text"])
                        cached_write += _tokens(block["text"])
                else:
                    uncached += block.get("text", "")
        for msg in body.get("messages", []):
            content = msg.get("content")
            uncached += content if isinstance(content, str) else json.dumps(content)
        return {"input_tokens": _tokens(uncached),
                "output_tokens": _tokens(reply.get("text", "")) + _tokens(reply.get("thinking", "")),
                "cache_creation_input_tokens": cached_write,
                "cache_read_input_tokens": cached_read}

    # -- test API ----------------------------------------------------------------------------
    def reply(self, text: str = "", **extra) -> None:
        self.replies.append({"text": text, **extra})

    def fail(self, status: int, kind: str = "rate_limit_error", retry_after_ms: int | None = 10) -> None:
        self.replies.append({"status": status, "type": kind, "retry_after_ms": retry_after_ms})

    def user_messages(self) -> list[str]:
        """The user message text of every recorded request, in order."""
        out = []
        for req in self.requests:
            for msg in req["body"].get("messages", []):
                content = msg.get("content")
                out.append(content if isinstance(content, str) else json.dumps(content))
        return out

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
