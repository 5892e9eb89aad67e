"""Pure LLM rules: request body, credentials, reply parsing."""

from __future__ import annotations

import json

import pytest
from amsg.domain.llm import (
    EMPTY_AFTER_REASONING_MESSAGE,
    MISSING_CONTENT_MESSAGE,
    SSE_BODY_NOTE,
    ChatCredentials,
    build_chat_body,
    build_llm_request,
    classify_llm_status,
    error_body_detail,
    extract_reply,
    normalize_api_url,
    parse_completion,
    resolve_chat_credentials,
    upstream_status_error,
)
from amsg.failures import CREDENTIAL_MISSING, LLM_CALL_FAILED, DeliveryFailure, LlmCallError

# --------------------------------------------------------------------------------------------------------
# URL normalisation

URL_TABLE = [
    ("https://api.openai.com", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/", "https://api.openai.com/v1/chat/completions"),
    ("  https://api.openai.com//  ", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1/", "https://api.openai.com/v1/chat/completions"),
    ("https://my.proxy.com/openai/v2", "https://my.proxy.com/openai/v2/chat/completions"),
    ("https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1/chat/completions/", "https://api.openai.com/v1/chat/completions"),
    ("https://api.openai.com/v1?beta=1", "https://api.openai.com/v1/chat/completions?beta=1"),
    ("https://api.openai.com?x=1&y=2", "https://api.openai.com/v1/chat/completions?x=1&y=2"),
    ("https://api.anthropic.com/v1/messages", "https://api.anthropic.com/v1/messages"),
    ("https://my.proxy.com/openai/api/chat", "https://my.proxy.com/openai/api/chat"),
    ("https://my.proxy.com/openai/api/chat/", "https://my.proxy.com/openai/api/chat"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions"),
    ("https://x.example/v10", "https://x.example/v10/chat/completions"),
    ("https://x.example/version1", "https://x.example/version1"),
]


@pytest.mark.parametrize(("raw", "expected"), URL_TABLE)
def test_normalize_api_url_table(raw: str, expected: str) -> None:
    assert normalize_api_url(raw) == expected
    assert normalize_api_url(expected) == expected  # idempotent


@pytest.mark.parametrize("raw", ["", "   ", None])
def test_normalize_api_url_requires_a_value(raw: object) -> None:
    with pytest.raises(DeliveryFailure, match=r"^Invalid apiUrl: apiUrl is required") as info:
        normalize_api_url(raw)
    assert info.value.code is None and info.value.permanent is False


@pytest.mark.parametrize("raw", ["api.openai.com/v1", "not a url", "https://"])
def test_normalize_api_url_rejects_relative(raw: str) -> None:
    with pytest.raises(DeliveryFailure, match=r'^Invalid apiUrl: ".*"\. Please provide a valid absolute URL\.'):
        normalize_api_url(raw)


# --------------------------------------------------------------------------------------------------------
# Body composition


def test_complete_prompt_path_defaults_temperature() -> None:
    body = build_chat_body({"primaryModel": "gpt-4o-mini", "completePrompt": "Say hi"})
    assert body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Say hi"}],
        "temperature": 0.8,
    }
    assert "stream" not in body and "max_tokens" not in body


def test_messages_path_has_no_default_temperature() -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    body = build_chat_body({"primaryModel": "m", "messages": msgs, "completePrompt": "ignored"})
    assert body == {"model": "m", "messages": msgs}


def test_empty_messages_array_falls_back_to_prompt_without_default_temperature() -> None:
    body = build_chat_body({"primaryModel": "m", "messages": [], "completePrompt": "p"})
    assert body == {"model": "m", "messages": [{"role": "user", "content": "p"}]}


def test_explicit_temperature_and_zero_are_kept() -> None:
    assert build_chat_body({"primaryModel": "m", "completePrompt": "p", "temperature": 0})["temperature"] == 0
    msgs = [{"role": "user", "content": "x"}]
    assert build_chat_body({"primaryModel": "m", "messages": msgs, "temperature": 1.2})["temperature"] == 1.2


def test_max_tokens() -> None:
    assert build_chat_body({"primaryModel": "m", "completePrompt": "p", "maxTokens": 64})["max_tokens"] == 64
    assert build_chat_body({"primaryModel": "m", "completePrompt": "p", "maxTokens": 64.0})["max_tokens"] == 64
    assert "max_tokens" not in build_chat_body({"primaryModel": "m", "completePrompt": "p", "maxTokens": None})


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True])
def test_max_tokens_must_be_positive_integer(bad: object) -> None:
    with pytest.raises(DeliveryFailure, match="Invalid maxTokens: maxTokens must be a positive integer"):
        build_chat_body({"primaryModel": "m", "completePrompt": "p", "maxTokens": bad})


def test_extra_body_spread_first_and_core_keys_win() -> None:
    extra = {
        "model": "evil",
        "messages": [],
        "temperature": 0.1,
        "reasoning_effort": "high",
        "thinking": {"type": "enabled"},
    }
    body = build_chat_body({"primaryModel": "m", "completePrompt": "p", "llmExtraBody": extra})
    assert body["model"] == "m"
    assert body["messages"] == [{"role": "user", "content": "p"}]
    assert body["temperature"] == 0.8  # the engine sets it on this path, so it wins
    assert body["reasoning_effort"] == "high" and body["thinking"] == {"type": "enabled"}
    assert list(body)[:2] == ["model", "messages"]  # extra keys first, then core (dict order)
    assert extra["model"] == "evil"  # the payload's object is not mutated


def test_extra_body_keys_survive_when_engine_does_not_set_them() -> None:
    """Reference quirk: temperature/max_tokens/stream from llmExtraBody stay when the engine omits them."""
    msgs = [{"role": "user", "content": "x"}]
    extra = {"temperature": 0.3, "max_tokens": 99, "stream": False, "tool_choice": "none"}
    body = build_chat_body({"primaryModel": "m", "messages": msgs, "llmExtraBody": extra})
    assert body == {"model": "m", "messages": msgs, **extra}


@pytest.mark.parametrize("extra", [["a"], "x", 3, None])
def test_non_object_extra_body_is_ignored(extra: object) -> None:
    body = build_chat_body({"primaryModel": "m", "completePrompt": "p", "llmExtraBody": extra})
    assert set(body) == {"model", "messages", "temperature"}


def test_tools_forwarded_only_when_non_empty() -> None:
    msgs = [{"role": "user", "content": "x"}]
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = build_chat_body({"primaryModel": "m", "messages": msgs, "tools": tools, "toolChoice": "auto"})
    assert body["tools"] == tools and body["tool_choice"] == "auto"
    body = build_chat_body({"primaryModel": "m", "messages": msgs, "tools": [], "toolChoice": "auto"})
    assert "tools" not in body and "tool_choice" not in body


def test_build_llm_request_merges_credentials_without_touching_payload() -> None:
    payload = {"completePrompt": "p", "primaryModel": "inline-model", "apiKey": "inline"}
    creds = ChatCredentials("https://api.example.com/v1", "sk-secret-value-1234567890", "cred-model")
    request = build_llm_request(payload, creds)
    assert request.url == "https://api.example.com/v1/chat/completions"
    assert request.api_key == "sk-secret-value-1234567890"
    assert request.body["model"] == "cred-model"
    assert payload["primaryModel"] == "inline-model"
    assert "sk-secret" not in repr(request) and "sk-secret" not in repr(creds)


# --------------------------------------------------------------------------------------------------------
# Credentials


INLINE = {"apiUrl": "https://inline", "apiKey": "inline-key", "primaryModel": "inline-m"}
STORED = {"apiUrl": "https://stored", "apiKey": "stored-key", "primaryModel": "stored-m"}


def test_cred_ref_wins_over_inline() -> None:
    seen: list[str] = []

    def lookup(cred_id: str) -> dict[str, str]:
        seen.append(cred_id)
        return STORED

    creds = resolve_chat_credentials({"credRefs": {"chat": "main"}, **INLINE, "messageType": "auto"}, lookup)
    assert creds == ChatCredentials("https://stored", "stored-key", "stored-m")
    assert seen == ["main"]


@pytest.mark.parametrize("stored", [None, {**STORED, "apiKey": ""}, {"apiUrl": "x"}])
def test_incomplete_cred_falls_back_to_inline(stored: object) -> None:
    creds = resolve_chat_credentials({"credRefs": {"chat": "main"}, **INLINE}, lambda _id: stored)
    assert creds == ChatCredentials("https://inline", "inline-key", "inline-m")


def test_missing_cred_and_no_inline_is_retryable_credential_missing() -> None:
    with pytest.raises(DeliveryFailure) as info:
        resolve_chat_credentials({"credRefs": {"chat": "main"}, "apiUrl": "https://x"}, lambda _id: None)
    assert info.value.code == CREDENTIAL_MISSING and info.value.permanent is False
    assert str(info.value).startswith("CREDENTIAL_MISSING")


def test_no_store_behaves_like_absent_credential() -> None:
    assert resolve_chat_credentials({"credRefs": {"chat": "main"}, **INLINE}, None) is not None
    with pytest.raises(DeliveryFailure):
        resolve_chat_credentials({"credRefs": {"chat": "main"}}, None)


def test_without_ref_inline_is_used_and_store_not_read() -> None:
    def lookup(_id: str) -> None:
        raise AssertionError("no store read without credRefs.chat")

    creds = resolve_chat_credentials({**INLINE, "credRefs": {"chat": ""}}, lookup)
    assert creds is not None and creds.api_key == "inline-key"


@pytest.mark.parametrize("message_type", ["prompted", "auto"])
def test_without_ref_prompted_needs_inline(message_type: str) -> None:
    with pytest.raises(DeliveryFailure) as info:
        resolve_chat_credentials({"messageType": message_type, "apiUrl": "u", "apiKey": "k"}, None)
    assert info.value.code == CREDENTIAL_MISSING


@pytest.mark.parametrize("message_type", ["instant", "fixed"])
def test_without_ref_other_types_get_none(message_type: str) -> None:
    assert resolve_chat_credentials({"messageType": message_type}, None) is None


# --------------------------------------------------------------------------------------------------------
# Replies and reasoning


def completion(content: object, reasoning: object = None) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"choices": [{"message": message}]}


def test_plain_content_is_trimmed() -> None:
    assert extract_reply(completion("  Hello!  \n")) == ("Hello!", None)


def test_reasoning_content_field() -> None:
    assert extract_reply(completion("Answer", "  I thought  ")) == ("Answer", "I thought")


def test_reasoning_content_also_strips_think_spans() -> None:
    assert extract_reply(completion("<think>x</think> Answer", "field")) == ("Answer", "field")


@pytest.mark.parametrize("tag", ["think", "thinking", "thought", "THINK", "Thinking"])
def test_think_tags(tag: str) -> None:
    content = f"<{tag}>\n step one\n step two \n</{tag}>\n\nHi there"
    assert extract_reply(completion(content)) == ("Hi there", "step one\n step two")


def test_first_span_is_reasoning_and_all_spans_are_removed() -> None:
    content = "<think>first</think>A <thought>second</thought>B"
    assert extract_reply(completion(content)) == ("A B", "first")


def test_mismatched_closing_tag_is_not_a_span() -> None:
    assert extract_reply(completion("<think>x</thought>rest")) == ("<think>x</thought>rest", None)


def test_empty_think_span_means_no_reasoning_and_content_kept() -> None:
    # Reasoning is null when the first span is blank, so the content is left as it is.
    assert extract_reply(completion("<think> </think>Hi")) == ("<think> </think>Hi", None)


def test_empty_after_reasoning_is_a_retryable_generation_failure() -> None:
    with pytest.raises(LlmCallError) as info:
        extract_reply(completion("<think>only thoughts</think>  "))
    assert str(info.value) == EMPTY_AFTER_REASONING_MESSAGE
    assert info.value.code is None and info.value.permanent is False and info.value.llm_status is None


def test_empty_after_reasoning_allowed_when_content_not_required() -> None:
    assert extract_reply(completion("<think>t</think>"), require_content=False) == ("", "t")


@pytest.mark.parametrize("content", [None, "", "   ", 42, [{"type": "text", "text": "x"}]])
def test_missing_content(content: object) -> None:
    with pytest.raises(LlmCallError) as info:
        extract_reply(completion(content))
    assert str(info.value) == MISSING_CONTENT_MESSAGE and info.value.code is None
    assert extract_reply(completion(content), require_content=False) == ("", None)


# --------------------------------------------------------------------------------------------------------
# Classification and upstream errors


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 405, 413, 422])
def test_permanent_statuses(status: int) -> None:
    assert classify_llm_status(status) is True
    error = upstream_status_error(status, "Whatever", "https://x/v1/chat/completions", "")
    assert error.permanent is True and error.code == LLM_CALL_FAILED and error.llm_status == status


@pytest.mark.parametrize("status", [200, 408, 409, 425, 429, 500, 502, 503, 504, 418])
def test_retryable_statuses(status: int) -> None:
    assert classify_llm_status(status) is False
    assert upstream_status_error(status, "", "https://x", "").permanent is False


def test_status_error_message() -> None:
    body = json.dumps({"error": {"message": "Rate   limit\nreached", "code": "rate_limit_exceeded"}})
    error = upstream_status_error(429, "Too Many Requests", "https://x/v1/chat/completions", body)
    assert str(error) == (
        "AI API error: 429 Too Many Requests. Request URL: https://x/v1/chat/completions"
        " — Rate limit reached (provider code: rate_limit_exceeded)"
    )
    assert error.provider_code == "rate_limit_exceeded"


def test_status_error_without_reason_phrase_or_body() -> None:
    error = upstream_status_error(500, "", "https://x", "  ")
    assert str(error) == "AI API error: 500 Unknown Error. Request URL: https://x"
    assert error.provider_code is None


def test_405_has_dedicated_message() -> None:
    body = json.dumps({"error": {"message": "GET only", "code": "method_not_allowed"}})
    error = upstream_status_error(405, "Method Not Allowed", "https://x/api", body)
    assert str(error).startswith(
        "AI API error: 405 Method Not Allowed. apiUrl must point to a full chat endpoint "
        "(for example: /chat/completions). Received: https://x/api — GET only"
    )
    assert error.permanent is True and error.llm_status == 405


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": "m1", "code": "c1"}}, ("m1", "c1")),
        ({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, ("busy", "overloaded_error")),
        ({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}, ("bad", "INVALID_ARGUMENT")),
        ({"error": "unauthorized"}, ("unauthorized", "")),
        ({"code": "E1", "msg": "余额不足"}, ("余额不足", "E1")),
        ({"detail": "Not authenticated"}, ("Not authenticated", "")),
        ({"error": {"code": 401}}, ('{"error": {"code": 401}}', "")),  # numeric code dropped on non-2xx
    ],
)
def test_error_body_detail_envelopes(body: object, expected: tuple[str, str]) -> None:
    assert error_body_detail(json.dumps(body)) == expected


def test_error_body_detail_plain_text_is_collapsed_redacted_and_cut() -> None:
    raw = "<html>\n  Bad   gateway " + "word " * 100
    message, code = error_body_detail(raw)
    assert message.startswith("<html> Bad gateway") and len(message) == 300 and message.endswith("…")
    assert code == ""
    leaked = error_body_detail("Incorrect API key provided: sk-9aBcDeFgHiJkLmNo_PqRsTu")
    assert leaked == ("Incorrect API key provided: [redacted]", "")


def test_error_body_detail_salvages_truncated_json() -> None:
    raw = '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is \\"too\\" long"},'
    raw += '"echo":{"messages":[{"content":"' + "a" * 500
    assert error_body_detail(raw, truncated=True) == ('prompt is "too" long', "invalid_request_error")
    assert error_body_detail('{"echo":"' + "a" * 50, truncated=True)[0] == (
        "upstream error body was truncated before any readable message"
    )


def test_parse_completion_ok() -> None:
    data, content, reasoning = parse_completion(200, "https://x", json.dumps(completion("<think>r</think>c")))
    assert (content, reasoning) == ("c", "r") and data["choices"]


def test_200_error_body_is_retryable_llm_call_failed() -> None:
    body = json.dumps({"error": {"message": "upstream quota", "code": 401}})
    with pytest.raises(LlmCallError) as info:
        parse_completion(200, "https://x", body)
    error = info.value
    assert error.code == LLM_CALL_FAILED and error.llm_status == 200 and error.permanent is False
    assert str(error) == (
        "AI API error: HTTP 200 but body is not a chat completion (no choices). Request URL: https://x"
        " — upstream quota (provider code: 401)"
    )


@pytest.mark.parametrize(
    ("body", "note"),
    [
        (
            {"id": "msg_1", "type": "message", "content": [{"text": "secret story"}]},
            "top-level keys: id, type, content",
        ),
        ([1, 2], "response body is a JSON array"),
        ({}, "response body is an empty object"),
        ({"choices": []}, "top-level keys: choices"),
    ],
)
def test_non_completion_shapes_do_not_echo_content(body: object, note: str) -> None:
    with pytest.raises(LlmCallError) as info:
        parse_completion(200, "https://x", json.dumps(body))
    assert str(info.value).endswith(" — " + note)
    assert "secret story" not in str(info.value)


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("", "response body is empty"),
        ('data: {"choices":[{"delta":{"content":"private words"}}]}\n\n', SSE_BODY_NOTE),
        (": OPENROUTER PROCESSING\n\ndata: {}", SSE_BODY_NOTE),
        ("<html>oops</html>", "<html>oops</html>"),
    ],
)
def test_non_json_2xx(raw: str, detail: str) -> None:
    with pytest.raises(LlmCallError) as info:
        parse_completion(203, "https://x", raw)
    assert str(info.value) == (f"AI API error: HTTP 203 but body is not valid JSON. Request URL: https://x — {detail}")
    assert info.value.llm_status == 203 and info.value.permanent is False


def test_literal_key_is_scrubbed_even_when_not_key_shaped() -> None:
    key = "plainsecretvalue"  # no prefix, short: the shape rules would keep it
    body = json.dumps({"error": {"message": f"key {key} rejected"}})
    error = upstream_status_error(401, "Unauthorized", f"https://x/v1?key={key}", body, api_key=key)
    assert key not in str(error)
    assert "[redacted]" in str(error)
