"""Hypothesis strategies for fuzzing every HTTP route through the real handlers.

A generated request is a route (or an unknown one), headers (user id, encryption flags, content encoding), a
query string and a body: raw bytes/text, pathological JSON (deep nesting, ``1e400``, ``NaN``, 39-digit
integers), or an envelope encrypted with the right user key or a wrong one around a route-shaped payload whose
fields are themselves fuzzed. Plaintexts are written by :func:`to_json_text`, so special number tokens can be
placed anywhere a number may appear.

Independent of the server's ``amsg`` package: the oracle must not share the code under test.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import os
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import strategies as st


@dataclass(frozen=True)
class Raw:
    """A number token written verbatim into the JSON text (``1e400``, ``NaN``, a 39-digit integer, ...)."""

    token: str


def to_json_text(value: Any) -> str:
    if isinstance(value, Raw):
        return value.token
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{to_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json_text(v) for v in value) + "]"
    return json.dumps(value)


def encrypt_text(text: str, key_hex: str) -> dict[str, str]:
    iv = os.urandom(12)
    sealed = AESGCM(bytes.fromhex(key_hex)).encrypt(iv, text.encode("utf-8", errors="surrogatepass"), None)
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {"iv": b64(iv), "authTag": b64(sealed[-16:]), "encryptedData": b64(sealed[:-16])}


# ---- documented statuses per route (every 4xx/5xx the route may answer; 500 is never acceptable) ---------------

BODY_ERRORS = {400, 413, 415}  # body reader: INVALID_CONTENT_ENCODING, REQUEST_BODY_TOO_LARGE, UNSUPPORTED_...
ROUTES: dict[tuple[str, str], set[int]] = {
    ("POST", "/schedule-message"): {200, 201, 400, 401, 409, 501, 503} | BODY_ERRORS,
    ("PUT", "/update-message"): {200, 400, 401, 404, 409} | BODY_ERRORS,
    ("DELETE", "/cancel-message"): {200, 400, 401, 404} | BODY_ERRORS,
    ("GET", "/messages"): {200, 400, 401},
    ("GET", "/message"): {200, 400, 401, 404, 409},
    ("PUT", "/push-subscription"): {200, 400, 401} | BODY_ERRORS,
    ("GET", "/push-subscription"): {200, 400, 401, 503},
    ("DELETE", "/push-subscription"): {200, 400, 401} | BODY_ERRORS,
    ("GET", "/get-user-key"): {200, 400, 401},
    ("GET", "/vapid-public-key"): {200, 401, 503},
    ("GET", "/capabilities"): {200, 401},
    ("PUT", "/client-state"): {200, 400, 401, 409} | BODY_ERRORS,
    ("GET", "/client-state"): {200, 400, 401},
    ("DELETE", "/client-state"): {200, 400, 401} | BODY_ERRORS,
    ("GET", "/client-state/namespaces"): {200, 400, 401},
    ("GET", "/outbox"): {200, 400, 401},
    ("POST", "/outbox/ack"): {200, 400, 401} | BODY_ERRORS,
    ("DELETE", "/outbox"): {200, 400, 401} | BODY_ERRORS,
    ("PUT", "/llm-credentials"): {200, 400, 401, 503} | BODY_ERRORS,
    ("GET", "/llm-credentials"): {200, 400, 401},
    ("DELETE", "/llm-credentials"): {200, 400, 401} | BODY_ERRORS,
    ("PUT", "/delivery-policy"): {200, 400, 401, 501} | BODY_ERRORS,
    ("GET", "/delivery-policy"): {200, 400, 401, 501, 503},
    ("DELETE", "/delivery-policy"): {200, 400, 401, 501} | BODY_ERRORS,
    ("POST", "/init-tenant"): {200, 401} | BODY_ERRORS,
}
# /cloud-data/{proxy+}: the management sub-routes (and unknown ones, 404)
CLOUD_DATA_PATHS = [
    ("GET", "/cloud-data/summary"),
    ("GET", "/cloud-data/resources"),
    ("GET", "/cloud-data/owners"),
    ("GET", "/cloud-data/owner"),
    ("POST", "/cloud-data/owner"),
    ("POST", "/cloud-data/cleanup-plans"),
    ("GET", "/cloud-data/cleanup-operations"),
    ("GET", "/cloud-data/cleanup-operations/x"),
    ("GET", "/cloud-data/cleanup-operations/" + "a" * 2000),
    ("POST", "/cloud-data/cleanup-operations"),
    ("GET", "/cloud-data/nope"),
]
CLOUD_DATA_STATUSES = {200, 400, 401, 404, 409, 501} | BODY_ERRORS
UNKNOWN_ROUTES = [("GET", "/nope"), ("POST", "/messages"), ("PATCH", "/outbox"), ("GET", "/api/v1/none")]
NOT_FOUND_STATUSES = {404} | BODY_ERRORS


def bare_path(path: str) -> str:
    return path.split("?")[0].removeprefix("/api/v1")


def documented_statuses(method: str, path: str) -> set[int]:
    if bare_path(path).startswith("/cloud-data/"):
        return CLOUD_DATA_STATUSES
    return ROUTES.get((method, bare_path(path)), NOT_FOUND_STATUSES)


# ---- leaves -------------------------------------------------------------------------------------------------

SPECIAL_NUMBERS = [
    Raw("1e400"),
    Raw("-1e400"),
    Raw("1E309"),
    Raw("NaN"),
    Raw("Infinity"),
    Raw("-Infinity"),
    Raw("1e39"),
    Raw("1e38"),
    Raw("9" * 39),
    Raw("1" + "0" * 400),
    Raw("-0"),
    Raw("1e-400"),
    Raw("123456789012345678901234567890123456789"),
    Raw("8640000000000001"),
    Raw("9007199254740993"),
    Raw("1.5"),
    Raw("1.0"),
]
numbers = st.one_of(
    st.sampled_from(SPECIAL_NUMBERS),
    st.integers(min_value=-(10**45), max_value=10**45),
    st.floats(allow_nan=False, allow_infinity=False),
)
LONG_STRINGS = ["x" * 1100, "é" * 600, "字" * 400, "\ud800" * 3, "a" * 5000]
weird_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\ud800", "a\udfffb", "\u0000", "\x7f", "é" * 400, "字" * 700, "x" * 1100, "%00"]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=300, max_size=1200),
)
json_leaves = st.one_of(st.none(), st.booleans(), numbers, weird_text)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(weird_text, children, max_size=4)),
    max_leaves=12,
)


def deep(n: int, inner: str = "1") -> str:
    return "[" * n + inner + "]" * n


deep_texts = st.one_of(
    st.integers(min_value=1, max_value=3000).map(deep),
    st.integers(min_value=60, max_value=2000).map(lambda n: '{"a":' * n + "1" + "}" * n),
)


# ---- hostile classes: backtracking patterns, oversize nested fields, hostile bodies ------------------------------

# the fuzzer's reproducers and generated nestings of a repeat inside a repeat / ambiguous repeated alternations
BACKTRACKING_PATTERNS = ["(?:a+)+b", "(a+)+b", "(a|aa)+$", "(.*a){20}", "(x+x+)+y", "(\\w|_)*!"]
backtracking_patterns = st.one_of(
    st.sampled_from(BACKTRACKING_PATTERNS),
    st.tuples(
        st.sampled_from(["a+", "a*", ".*a", "\\s+", "[ab]{2,}", "(?:ab)+"]),
        st.sampled_from(["(?:{})+", "({})*", "(?:{}){{2,}}", "({}){{20}}", "(?:c|{})+"]),
    ).map(lambda parts: parts[1].format(parts[0])),
)
OVERSIZE = ["字" * 70_000, "A" * 200_000, "x" * 1100]
oversize_subscriptions = st.one_of(
    st.sampled_from(OVERSIZE).map(lambda v: {"endpoint": "https://push.example.test/x", "expirationTime": v}),
    st.sampled_from(OVERSIZE).map(lambda v: {"endpoint": "https://push.example.test/x", "keys": {"auth": v}}),
    st.sampled_from(OVERSIZE).map(lambda v: {"endpoint": "https://push.example.test/x", "keys": {"p256dh": v}}),
    st.sampled_from(OVERSIZE).map(lambda v: {"endpoint": "https://push.example.test/x", "extra": v}),
    st.sampled_from(OVERSIZE).map(lambda v: {"endpoint": "https://push.example.test/" + v}),
)


def hostile_body(shape: tuple[str, str], size: int) -> bytes:
    prefix, unit = shape
    return (prefix + unit * max(1, (size - len(prefix)) // len(unit))).encode()


hostile_bodies = st.builds(
    hostile_body,
    st.sampled_from([("[" * 70 + '"', '\\"'), ("", '"\\"'), ("", "["), ("", '{"a":'), ("[" * 70, '"x\\\\",')]),
    st.integers(min_value=1_000, max_value=64_000),
)


# ---- route-shaped payloads: a valid base, then a few mutations ------------------------------------------------

FUTURE = "2030-01-01T00:00:00.000Z"
FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": FUTURE}
PROMPTED = {
    "contactName": "Rei",
    "messageType": "prompted",
    "completePrompt": "say hi",
    "apiUrl": "http://127.0.0.1:9/v1",
    "apiKey": "sk-test",
    "primaryModel": "m",
    "firstSendTime": FUTURE,
}
SCHEDULE_FIELDS = [
    "contactName", "messageType", "userMessage", "firstSendTime", "recurrenceType", "tzId", "uuid",
    "supersedesUuid", "metadata", "apiUrl", "apiKey", "primaryModel", "completePrompt", "messages", "avatarUrl",
    "splitPattern", "credRefs", "maxTokens", "temperature", "immediate", "llmExtraBody", "messageSubtype", "nextSendAt",
    "pushSubscription",
]  # fmt: skip


def _bases(uuid_pool: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    fresh = st.uuids(version=4).map(str)
    schedule = st.one_of(
        fresh.map(lambda u: {**FIXED, "uuid": u, "metadata": {"n": 1}}),
        fresh.map(lambda u: {**FIXED, "uuid": u, "recurrenceType": "daily", "tzId": "Asia/Shanghai"}),
        fresh.map(lambda u: {**FIXED, "uuid": u, "messageType": "instant"}),
        fresh.map(lambda u: {**PROMPTED, "uuid": u, "messageType": "instant"}),
        fresh.map(lambda u: {**PROMPTED, "uuid": u}),
        st.sampled_from(uuid_pool).map(lambda u: {**FIXED, "uuid": str(uuid.uuid4()), "supersedesUuid": u}),
        st.sampled_from(uuid_pool).map(lambda u: {**FIXED, "uuid": u.upper()}),
        backtracking_patterns.map(
            lambda p: {**FIXED, "messageType": "instant", "userMessage": "a" * 30 + "!", "splitPattern": p}
        ),
        backtracking_patterns.map(lambda p: {**FIXED, "uuid": str(uuid.uuid4()), "splitPattern": [",", p]}),
        st.sampled_from(["字" * 2000, "x" * 5000]).map(lambda t: {**FIXED, "messageType": "instant", "userMessage": t}),
        st.sampled_from(["sk-键", "sk-\nx"]).map(lambda k: {**PROMPTED, "uuid": str(uuid.uuid4()), "apiKey": k}),
    )
    update = st.one_of(
        st.sampled_from(
            [{"userMessage": "new"}, {"firstSendTime": "2030-02-01T00:00:00.000Z"}, {"metadata": {"a": [1]}}, {}]
        ),
        backtracking_patterns.map(lambda p: {"splitPattern": p}),
        st.just({"nextSendAt": "２０３１-01-01T00:00:00Z"}),
    )
    state = st.fixed_dictionaries({"namespace": st.sampled_from(["ns", "n2"]), "key": st.sampled_from(["k", "k2"])})
    return {
        "/schedule-message": schedule,
        "/update-message": update,
        "/push-subscription": st.one_of(
            st.just({"subscription": {"endpoint": "https://push.example.test/x"}, "updatedAt": 5}),
            oversize_subscriptions.map(lambda sub: {"subscription": sub}),
        ),
        "/client-state": st.lists(state, min_size=1, max_size=3).map(
            lambda entries: {"entries": [{**e, "value": "v", "updatedAt": 7} for e in entries]}
        ),
        "/outbox/ack": st.just({"messageIds": ["m1"]}),
        "/cloud-data/cleanup-operations": st.sampled_from(["a" * 1100, "é" * 600, str(uuid.uuid4())]).map(
            lambda plan: {"planId": plan, "idempotencyKey": "k"}
        ),
        "/delivery-policy": st.just(
            {
                "quietHours": {"start": "22:00", "end": "07:00", "tzId": "Asia/Shanghai"},
                "caps": [{"scope": "user", "max": 3, "windowMinutes": 60}],
            }
        ),
        "/outbox": st.sampled_from([{"messageIds": ["m1"]}, {"all": True}]),
        "/llm-credentials": st.sampled_from(
            [
                {
                    "credentials": [
                        {"credId": "c1", "value": {"apiUrl": "http://x.test", "apiKey": "k", "primaryModel": "m"}}
                    ]
                },
                {"credIds": ["c1"]},
                {"credIdPrefix": "c"},
                {"all": True},
            ]
        ),
    }


def _field_names(route: str) -> list[str]:
    return {
        "/schedule-message": SCHEDULE_FIELDS,
        "/update-message": SCHEDULE_FIELDS,
        "/push-subscription": ["subscription", "updatedAt"],
        "/client-state": ["entries"],
        "/outbox/ack": ["messageIds"],
        "/cloud-data/cleanup-operations": ["planId", "idempotencyKey"],
        "/outbox": ["messageIds", "all"],
        "/delivery-policy": ["quietHours", "caps"],
        "/llm-credentials": ["credentials", "credIds", "credIdPrefix", "all"],
    }.get(route, ["x"])


@st.composite
def mutated(draw: st.DrawFn, base: Any, names: list[str], uuid_pool: tuple[str, ...]) -> Any:
    """0–3 edits of a valid payload: drop a field, replace one (anywhere, also inside lists/objects), add one."""
    value = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        if not isinstance(value, dict):
            break
        action = draw(st.sampled_from(["set", "set", "set", "drop", "nested"]))
        if action == "drop" and value:
            value.pop(draw(st.sampled_from(sorted(value))))
        elif action == "nested" and any(isinstance(v, list | dict) for v in value.values()):
            key = draw(st.sampled_from(sorted(k for k, v in value.items() if isinstance(v, list | dict))))
            inner = value[key]
            if isinstance(inner, list) and inner:
                index = draw(st.integers(min_value=0, max_value=len(inner) - 1))
                if isinstance(inner[index], dict) and inner[index] and draw(st.booleans()):
                    inner[index][draw(st.sampled_from(sorted(inner[index])))] = draw(leaf_or_pool(uuid_pool))
                else:
                    inner[index] = draw(leaf_or_pool(uuid_pool))
            elif isinstance(inner, dict) and inner:
                inner[draw(st.sampled_from(sorted(inner)))] = draw(leaf_or_pool(uuid_pool))
        else:
            value[draw(st.sampled_from(names))] = draw(leaf_or_pool(uuid_pool))
    return value


def leaf_or_pool(uuid_pool: tuple[str, ...]) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([*SPECIAL_NUMBERS, *uuid_pool, *LONG_STRINGS]), json_values)


@functools.cache
def build_payloads(uuid_pool: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    return {
        route: base.flatmap(lambda b, route=route: mutated(b, _field_names(route), uuid_pool))
        for route, base in _bases(uuid_pool).items()
    }


# ---- whole requests --------------------------------------------------------------------------------------------


@dataclass
class FuzzRequest:
    method: str
    path: str  # with query string
    headers: dict[str, str]
    body: bytes | None

    def __repr__(self) -> str:  # shrunk examples are printed: keep them readable
        body = self.body if self.body is None or len(self.body) < 300 else self.body[:300] + b"..."
        return f"FuzzRequest({self.method} {self.path!r} headers={self.headers!r} body={body!r})"


BODY_FAULTS = ["none", "raw", "deep", "json", "bad-envelope", "hostile"]
ENCODING_FAULTS = ["gzip-plain", "br", "identity"]
FAULTS: list[Any] = [
    ("X-User-Id", None),
    ("X-User-Id", ""),
    ("X-User-Id", "not-a-uuid"),
    ("X-User-Id", "UPPER"),
    ("X-Payload-Encrypted", None),
    ("X-Payload-Encrypted", "false"),
    ("X-Payload-Encrypted", "TRUE"),
    ("X-Encryption-Version", None),
    ("X-Encryption-Version", "2"),
    "wrong-key",
    *BODY_FAULTS,
    *BODY_FAULTS,
    *ENCODING_FAULTS,
]
QUERY_NAMES = ["id", "limit", "offset", "status", "since", "namespace", "type", "ownerType", "ownerId", "cursor"]


@st.composite
def requests(draw: st.DrawFn, *, user_id: str, user_key: str, wrong_keys: list[str], uuid_pool: list[str]) -> Any:
    method, path = draw(st.sampled_from(sorted(ROUTES) * 3 + CLOUD_DATA_PATHS + UNKNOWN_ROUTES))
    if draw(st.booleans()) and not path.startswith("/api/v1"):
        path = "/api/v1" + path

    query_values = st.one_of(
        st.sampled_from([*uuid_pool, *LONG_STRINGS]),
        weird_text,
        st.integers(min_value=-5, max_value=10**60).map(str),
        st.sampled_from(["", "0", "1", "100", "101", "pending", "sent", "all", "1e400", "-1", "9" * 39, "x" * 2000]),
    )
    params = draw(st.dictionaries(st.sampled_from(QUERY_NAMES), query_values, max_size=3))
    if bare_path(path) in ("/update-message", "/cancel-message", "/message") and draw(st.integers(0, 3)):
        params.setdefault("id", draw(st.sampled_from([*uuid_pool, *uuid_pool, *LONG_STRINGS])))
    query = urllib.parse.urlencode(
        {k: v.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace") for k, v in params.items()}
    )

    # one fault at most per request, so most requests get past the gates and reach the route's own checks
    fault = draw(st.sampled_from([None] * 60 + FAULTS))
    headers = {"X-User-Id": user_id, "X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    if isinstance(fault, tuple):
        name, value = fault
        if value is None:
            headers.pop(name)
        else:
            headers[name] = user_id.upper() if value == "UPPER" else value

    shaped = build_payloads(tuple(uuid_pool)).get(bare_path(path), json_values)
    plaintext = draw(
        st.one_of(
            shaped.map(to_json_text),
            shaped.map(to_json_text),
            shaped.map(to_json_text),
            shaped.map(to_json_text),
            json_values.map(to_json_text),
            deep_texts,
            weird_text,
        )
    )
    key = draw(st.sampled_from(wrong_keys)) if fault == "wrong-key" else user_key
    body = _body(draw, fault if fault in BODY_FAULTS else "envelope", plaintext, key)
    encoding = fault if fault in ENCODING_FAULTS else draw(st.sampled_from([None] * 9 + ["gzip"]))
    return FuzzRequest(method, path + (f"?{query}" if query else ""), headers, _encoded(body, encoding, headers))


def _body(draw: st.DrawFn, body_kind: Any, plaintext: str, key: str) -> bytes | None:
    """The request body for one body fault (``envelope``: none, a well-formed encrypted body)."""
    if body_kind == "envelope":
        return json.dumps(encrypt_text(plaintext, key)).encode()
    if body_kind == "none":
        return None
    if body_kind == "raw":
        return draw(st.binary(max_size=100))
    if body_kind == "deep":
        return draw(deep_texts).encode()
    if body_kind == "hostile":
        return draw(hostile_bodies)
    if body_kind == "json":
        return to_json_text(draw(json_values)).encode("utf-8", errors="surrogatepass")
    envelope = encrypt_text(plaintext, key)
    field = draw(st.sampled_from(sorted(envelope)))
    envelope[field] = draw(json_values)
    return to_json_text(envelope).encode("utf-8", errors="surrogatepass")


def _encoded(body: bytes | None, encoding: Any, headers: dict[str, str]) -> bytes | None:
    if encoding == "gzip" and body is not None:
        headers["Content-Encoding"] = "gzip"
        return gzip.compress(body)
    if encoding == "gzip-plain":
        headers["Content-Encoding"] = "gzip"  # a gateway that inflated already, or a lie
    elif encoding is not None:
        headers["Content-Encoding"] = encoding
    return body
