"""A loopback OpenAI-compatible chat server for tests (no network, no real provider).

Usage::

    with FakeLlmServer() as llm:
        llm.reply_think("plan", "Hello!")          # queue scripted answers, consumed in order
        llm.reply_error(401, "Incorrect API key")
        ... call llm.chat_url (or llm.base_url / llm.v1_url to exercise URL normalization) ...
        assert llm.last_request.headers["authorization"] == "Bearer sk-..."

When the script is empty the server answers ``default`` (content ``"ok"``). Every request to any path is
recorded; only ``POST /v1/chat/completions`` is scripted, other POST paths get 404 and GET gets 405.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass
class Reply:
    """One scripted answer. ``body`` (dict/list → JSON, str/bytes → raw) overrides the completion built from
    ``content``/``reasoning_content``; ``delay_s`` sleeps before answering (for client timeouts)."""

    content: str | None = "ok"
    reasoning_content: str | None = None
    status: int = 200
    body: Any = None
    reason: str | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    model: str = "fake-model"
    tool_calls: list[dict[str, Any]] | None = None  # the assistant asks for these tools (OpenAI wire shape)
    usage: dict[str, Any] | None = None

    def render(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        if self.body is not None:
            return json.dumps(self.body).encode("utf-8")
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls is not None:
            message["tool_calls"] = self.tool_calls
        finish = "tool_calls" if self.tool_calls else "stop"
        completion: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if self.usage is not None:
            completion["usage"] = self.usage
        return json.dumps(completion).encode("utf-8")


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    raw: bytes
    json: Any  # parsed body, or None when it was not JSON


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _record(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=raw,
            json=parsed,
        )
        with self.server.lock:
            self.server.requests.append(request)
        return request

    def _send(self, reply: Reply) -> None:
        if reply.delay_s and self.server.stopping.wait(reply.delay_s):
            return
        payload = reply.render()
        try:
            self.send_response(reply.status, reply.reason)
            headers = {"Content-Type": "application/json", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (timeout test)

    def do_POST(self) -> None:
        request = self._record()
        if request.path.split("?", 1)[0] != CHAT_PATH:
            self._send(Reply(status=404, body={"error": {"message": "no such route", "code": "not_found"}}))
            return
        self._send(self.server.next_reply())

    def do_GET(self) -> None:
        self._record()
        self._send(Reply(status=405, body={"error": {"message": "POST only"}}))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.stopping = threading.Event()

    def next_reply(self) -> Reply:
        with self.lock:
            return self.script.popleft() if self.script else self.default

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # broken pipes after client timeouts are expected


class FakeLlmServer:
    """Context manager around the loopback server with helpers to script replies and inspect requests."""

    def __init__(self) -> None:
        self._server = _Server()
        self._thread: threading.Thread | None = None

    # lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> FakeLlmServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLlmServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # addresses ------------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def v1_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def chat_url(self) -> str:
        return self.base_url + CHAT_PATH

    # scripting ------------------------------------------------------------------------------------------
    def push(self, *replies: Reply) -> FakeLlmServer:
        with self._server.lock:
            self._server.script.extend(replies)
        return self

    def set_default(self, reply: Reply) -> None:
        self._server.default = reply

    def reply_content(self, content: str, **kw: Any) -> FakeLlmServer:
        return self.push(Reply(content=content, **kw))

    def reply_reasoning(self, content: str, reasoning: str, **kw: Any) -> FakeLlmServer:
        """Reasoning in ``message.reasoning_content`` (DeepSeek style)."""
        return self.push(Reply(content=content, reasoning_content=reasoning, **kw))

    def reply_think(self, reasoning: str, content: str, *, tag: str = "think", **kw: Any) -> FakeLlmServer:
        """Reasoning inline as ``<think>…</think>`` before the content."""
        return self.push(Reply(content=f"<{tag}>{reasoning}</{tag}>{content}", **kw))

    def reply_status(self, status: int, body: Any = None, **kw: Any) -> FakeLlmServer:
        return self.push(Reply(status=status, body=body if body is not None else "", **kw))

    def reply_error(self, status: int, message: str, *, code: str | None = None, **kw: Any) -> FakeLlmServer:
        """An OpenAI-style error envelope ``{error: {message, code?}}`` with the given status."""
        error: dict[str, Any] = {"message": message, "type": "invalid_request_error"}
        if code is not None:
            error["code"] = code
        return self.push(Reply(status=status, body={"error": error}, **kw))

    def reply_tool_calls(self, *calls: tuple[str, str, dict[str, Any]], content: str | None = None, **kw: Any):
        """The assistant asks for tools: each call is ``(id, function name, arguments)``."""
        wire = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for call_id, name, args in calls
        ]
        return self.push(Reply(content=content, tool_calls=wire, **kw))

    def reply_delay(self, delay_s: float, content: str = "late", **kw: Any) -> FakeLlmServer:
        return self.push(Reply(content=content, delay_s=delay_s, **kw))

    # inspection -----------------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._server.lock:
            return list(self._server.requests)

    @property
    def last_request(self) -> RecordedRequest:
        requests = self.requests
        assert requests, "the fake LLM received no request"
        return requests[-1]
