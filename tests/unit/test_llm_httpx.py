"""HttpxLlmClient against the loopback fake provider (tests/support/fake_llm.py)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from amsg.adapters.llm_httpx import HttpxLlmClient
from amsg.domain.llm import EMPTY_AFTER_REASONING_MESSAGE, ChatCredentials, build_llm_request
from amsg.failures import LLM_CALL_FAILED, LlmCallError
from amsg.ports import LlmClient, LlmRequest

from tests.support.fake_llm import FakeLlmServer, Reply

KEY = "sk-9aBcDeFgHiJkLmNo_PqRsTuVwXyZ012345"


@pytest.fixture
def llm() -> Iterator[FakeLlmServer]:
    with FakeLlmServer() as server:
        yield server


@pytest.fixture
def client() -> Iterator[HttpxLlmClient]:
    with HttpxLlmClient() as c:
        yield c


def request_for(server: FakeLlmServer, payload: dict | None = None, *, key: str = KEY) -> LlmRequest:
    creds = ChatCredentials(server.v1_url, key, "test-model")
    return build_llm_request(payload or {"completePrompt": "Say hi"}, creds)


def test_is_an_llm_client() -> None:
    client: LlmClient = HttpxLlmClient()  # structural check for type checkers
    assert client is not None


def test_request_headers_and_body(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_content("  Hello there  ")
    payload = {"completePrompt": "Say hi 你好", "maxTokens": 50, "llmExtraBody": {"reasoning_effort": "low"}}
    reply = client.complete(request_for(llm, payload), timeout_s=5)

    assert reply.content == "Hello there" and reply.reasoning is None and reply.raw_status == 200
    assert reply.response["choices"][0]["message"]["content"] == "  Hello there  "
    recorded = llm.last_request
    assert recorded.method == "POST" and recorded.path == "/v1/chat/completions"
    assert recorded.headers["content-type"] == "application/json"
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert recorded.json == {
        "reasoning_effort": "low",
        "model": "test-model",
        "messages": [{"role": "user", "content": "Say hi 你好"}],
        "temperature": 0.8,
        "max_tokens": 50,
    }
    assert "stream" not in recorded.json


def test_reasoning_content_and_think_tags(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_reasoning("Answer", "pondering")
    llm.reply_think("inner plan", "  Visible  ")
    first = client.complete(request_for(llm), timeout_s=5)
    second = client.complete(request_for(llm), timeout_s=5)
    assert (first.content, first.reasoning) == ("Answer", "pondering")
    assert (second.content, second.reasoning) == ("Visible", "inner plan")
    assert len(llm.requests) == 2


def test_empty_after_think_is_retryable(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_think("all thought", "   ")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    assert str(info.value) == EMPTY_AFTER_REASONING_MESSAGE
    assert info.value.code is None and info.value.permanent is False


def test_tool_round_without_content_when_not_required(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    llm.push(Reply(body={"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": calls}}]}))
    request = request_for(llm, {"messages": [{"role": "user", "content": "x"}]})
    request.require_content = False
    reply = client.complete(request, timeout_s=5)
    assert reply.content == "" and reply.response["choices"][0]["message"]["tool_calls"] == calls


def test_timeout_is_retryable_without_code(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_delay(3.0)
    started = time.monotonic()
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=0.3)
    assert time.monotonic() - started < 2.5
    error = info.value
    assert error.permanent is False and error.code is None and error.llm_status is None
    assert "timed out" in str(error) and KEY not in str(error)


def test_no_time_left_fails_without_calling(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    with pytest.raises(LlmCallError, match="timed out"):
        client.complete(request_for(llm), timeout_s=0)
    assert llm.requests == []


def test_401_is_permanent_with_status(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_error(401, "Invalid authentication", code="invalid_api_key")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    error = info.value
    assert error.permanent is True and error.code == LLM_CALL_FAILED and error.llm_status == 401
    assert error.provider_code == "invalid_api_key"
    assert str(error) == (
        f"AI API error: 401 Unauthorized. Request URL: {llm.chat_url}"
        " — Invalid authentication (provider code: invalid_api_key)"
    )


def test_500_is_retryable(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_status(500, "<html><body>Internal   Server Error</body></html>")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    error = info.value
    assert error.permanent is False and error.code == LLM_CALL_FAILED and error.llm_status == 500
    assert str(error).endswith("— <html><body>Internal Server Error</body></html>")


def test_custom_reason_phrase_and_empty_reason(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_status(503, reason="Busy Now")
    llm.reply_status(429, reason="")
    with pytest.raises(LlmCallError, match=r"^AI API error: 503 Busy Now\. "):
        client.complete(request_for(llm), timeout_s=5)
    with pytest.raises(LlmCallError, match=r"^AI API error: 429 Unknown Error\. "):
        client.complete(request_for(llm), timeout_s=5)


def test_405_dedicated_message(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_error(405, "GET only")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    assert "apiUrl must point to a full chat endpoint" in str(info.value)
    assert info.value.permanent is True and info.value.llm_status == 405


def test_wrong_path_404_is_permanent(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    request = LlmRequest(url=llm.base_url + "/v1/messages", api_key=KEY, body={"model": "m"})
    with pytest.raises(LlmCallError) as info:
        client.complete(request, timeout_s=5)
    assert info.value.llm_status == 404 and info.value.permanent is True


def test_echoed_key_never_reaches_the_message(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.reply_error(401, f"Incorrect API key provided: {KEY}. Check Bearer {KEY}", code="invalid_api_key")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    assert KEY not in str(info.value) and KEY[:12] not in str(info.value)
    assert "Incorrect API key provided: [redacted]" in str(info.value)


def test_unusual_key_echoed_is_scrubbed(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    key = "relaykey2024abc"  # not shaped like a credential: only the literal scrub catches it
    llm.reply_error(403, f"token relaykey2024abc is disabled: {key}")
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm, key=key), timeout_s=5)
    assert key not in str(info.value)


def test_200_with_error_body_is_retryable(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.push(Reply(body={"error": {"message": "relay failure", "code": 500}}))
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    error = info.value
    assert error.llm_status == 200 and error.permanent is False and error.code == LLM_CALL_FAILED
    assert "relay failure" in str(error)


def test_200_sse_body_is_not_echoed(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    llm.push(Reply(body='data: {"choices":[{"delta":{"content":"private"}}]}\n\ndata: [DONE]\n\n'))
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    assert "private" not in str(info.value) and "SSE stream" in str(info.value)


def test_large_error_body_is_capped_and_salvaged(llm: FakeLlmServer, client: HttpxLlmClient) -> None:
    echoed = {"error": {"message": "context too long", "code": "context_length_exceeded"}, "echo": "z" * 100_000}
    llm.reply_status(400, json.dumps(echoed))
    with pytest.raises(LlmCallError) as info:
        client.complete(request_for(llm), timeout_s=5)
    assert str(info.value).endswith("— context too long (provider code: context_length_exceeded)")
    assert "zzzz" not in str(info.value)


def test_connection_refused_is_retryable(client: HttpxLlmClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    request = LlmRequest(url=f"http://127.0.0.1:{port}/v1/chat/completions", api_key=KEY, body={})
    with pytest.raises(LlmCallError) as info:
        client.complete(request, timeout_s=2)
    error = info.value
    assert error.permanent is False and error.code is None and error.llm_status is None
    assert "network error" in str(error) and KEY not in str(error)


def test_client_is_lazy_and_reused(llm: FakeLlmServer) -> None:
    client = HttpxLlmClient()
    assert client._client is None
    client.complete(request_for(llm), timeout_s=5)
    first = client._client
    client.complete(request_for(llm), timeout_s=5)
    assert client._client is first is not None
    client.close()
    assert client._client is None
