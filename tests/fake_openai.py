"""A local stand-in for an OpenAI-compatible Chat Completions server (vLLM, llama.cpp), so tests
drive the real `openai` SDK over HTTP. POST /v1/chat/completions answers from a queue:
    {"text": "..."}                          a streamed answer (with a usage chunk when asked)
    {"status": 500}                          an HTTP error
    {"stall_after": 1, "stall_s": 30}        a stream that stops after 1 chunk
Every request's JSON body is recorded in `requests`.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler

from fake_anthropic import _QuietServer, _tokens


class FakeOpenAI:
    def __init__(self):
        self.replies: deque = deque()
        self.requests: list[dict] = []
        self.closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                reply = fake.replies.popleft() if fake.replies else {"status": 400}
                if "status" in reply or not self.path.endswith("/chat/completions"):
                    data = json.dumps({"error": {"message": "scripted error", "type": "server_error",
                                                 "code": None}}).encode()
                    self.send_response(reply.get("status", 404))
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("x-request-id", f"req_oa_{len(fake.requests)}")
                self.send_header("connection", "close")
                self.end_headers()
                base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                        "model": body.get("model")}

                def send(obj):
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                    self.wfile.flush()

                text = reply.get("text", "")
                for n, i in enumerate(range(0, max(len(text), 1), 200)):
                    if reply.get("stall_after") is not None and n == reply["stall_after"]:
                        fake.closing.wait(reply.get("stall_s", 30))
                        self.close_connection = True
                        return
                    send({**base, "choices": [{"index": 0, "delta": {"content": text[i:i + 200]},
                                               "finish_reason": None}]})
                send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    prompt = sum(_tokens(m["content"]) for m in body["messages"])
                    send({**base, "choices": [], "usage": {
                        "prompt_tokens": prompt, "completion_tokens": _tokens(text),
                        "total_tokens": prompt + _tokens(text)}})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def reply(self, text: str = "", **extra) -> None:
        self.replies.append({"text": text, **extra})

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
