"""The Web Push request on the wire (exactly the reference's), proven against the loopback fake push service."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from amsg.adapters import webpush_sender
from amsg.adapters.webpush_sender import WebPushSender
from amsg.failures import PushSendError, is_permanent_push_status
from amsg.ports import MAX_PUSH_PAYLOAD_BYTES, PushSender
from amsg.vapid import (
    VapidConfigError,
    b64url_decode,
    endpoint_origin,
    generate_vapid_keys,
    load_private_key,
    normalize_subject,
    public_key_from_private,
)
from cryptography.hazmat.primitives import serialization

from tests.support.fake_push import FakePushService, make_browser_subscription, unused_loopback_url
from tests.support.push_fixtures import fake_push_fixture  # noqa: F401  (registers the fake_push fixture)

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_HEADERS = {"host", "connection", "content-length", "content-type", "content-encoding", "ttl", "authorization"}


@pytest.fixture(scope="module")
def vapid_keys() -> tuple[str, str]:
    return generate_vapid_keys()


@pytest.fixture
def sender(vapid_keys: tuple[str, str]):
    public, private = vapid_keys
    with WebPushSender(private, public, "ops@example.com", timeout_s=5.0) as s:
        yield s


def _json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def test_sender_satisfies_the_port(sender: WebPushSender) -> None:
    port: PushSender = sender
    assert callable(port.send)


def test_round_trip_exact_headers_vapid_and_payload(
    fake_push: FakePushService, sender: WebPushSender, vapid_keys: tuple[str, str]
) -> None:
    fake_push.vapid_public_key = vapid_keys[0]
    sub = fake_push.subscribe()
    payload = _json_bytes({"messageKind": "content", "message": "早上好！☀️", "messageIndex": 1})

    assert sender.send(sub.to_json(), payload) == 201

    [got] = fake_push.wait_for(1)
    assert got.status == 201
    assert got.header_names == EXPECTED_HEADERS
    assert len(got.header_items) == len(EXPECTED_HEADERS)  # no duplicates
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-encoding"] == "aes128gcm"
    assert got.headers["ttl"] == "2419200"
    auth = got.headers["authorization"]
    assert auth.startswith("vapid t=")
    assert auth.endswith(f", k={vapid_keys[0]}")
    assert auth == f"vapid t={got.vapid.token}, k={vapid_keys[0]}"
    # VAPID per RFC 8292 (verified by the fake: ES256 signature with k, aud, exp window, sub scheme)
    assert got.vapid.ok, got.vapid.error
    assert got.vapid.jwt_header == {"typ": "JWT", "alg": "ES256"}
    assert set(got.vapid.claims) == {"aud", "exp", "sub"}
    assert got.vapid.claims["aud"] == fake_push.origin
    assert got.vapid.claims["sub"] == "mailto:ops@example.com"
    assert 12 * 3600 - 60 <= got.vapid.claims["exp"] - time.time() <= 12 * 3600
    # RFC 8291 single record, rs 4096, decrypted byte-exact
    assert got.records == 1
    assert got.record_size == 4096
    assert got.plaintext == payload
    assert fake_push.payloads(sub.endpoint_id) == [json.loads(payload)]


def test_str_payload_is_sent_as_utf8_and_ttl_is_configurable(fake_push: FakePushService, sender: WebPushSender) -> None:
    sub = fake_push.subscribe()
    text = json.dumps({"message": "你好"}, ensure_ascii=False)
    sender.send(sub.to_json(), text, ttl=60)
    [got] = fake_push.wait_for(1)
    assert got.plaintext == text.encode("utf-8")
    assert got.headers["ttl"] == "60"


def test_padded_and_std_base64_subscription_keys_are_accepted(
    fake_push: FakePushService, sender: WebPushSender
) -> None:
    sub = fake_push.subscribe()
    info = sub.to_json()
    info["keys"] = {
        "p256dh": info["keys"]["p256dh"].replace("-", "+").replace("_", "/") + "=",
        "auth": info["keys"]["auth"] + "==",
    }
    sender.send(info, b"{}")
    assert fake_push.payloads(sub.endpoint_id) == [{}]


def test_3993_bytes_fit_exactly_in_one_4096_byte_body(fake_push: FakePushService, sender: WebPushSender) -> None:
    sub = fake_push.subscribe()
    payload = _json_bytes({"m": "x" * (MAX_PUSH_PAYLOAD_BYTES - 8)})
    assert len(payload) == MAX_PUSH_PAYLOAD_BYTES == 3993
    sender.send(sub.to_json(), payload)
    [got] = fake_push.wait_for(1)
    assert len(got.body) == 4096
    assert got.records == 1
    assert got.plaintext == payload


def test_3994_bytes_are_rejected_before_encryption_or_http(
    fake_push: FakePushService, sender: WebPushSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_encrypt(*_args: object) -> bytes:
        raise AssertionError("encrypted an oversize payload")

    monkeypatch.setattr(webpush_sender, "encrypt_aes128gcm", must_not_encrypt)
    sub = fake_push.subscribe()
    payload = "é" * 1997  # 3994 UTF-8 bytes, 1997 characters: the guard counts bytes
    with pytest.raises(PushSendError) as info:
        sender.send(sub.to_json(), payload)
    err = info.value
    assert err.code == "PUSH_PAYLOAD_TOO_LARGE"
    assert err.permanent is True
    assert err.status is None
    assert err.details == {"bytes": 3994, "maxBytes": 3993}
    assert "é" not in str(err)
    assert fake_push.received == []


@pytest.mark.parametrize(
    ("status", "permanent"),
    [
        (404, True),
        (410, True),
        (413, True),
        (400, False),
        (401, False),
        (403, False),
        (408, False),
        (409, False),
        (425, False),
        (429, False),
        (500, False),
        (502, False),
        (503, False),
        (301, False),
    ],
)
def test_non_2xx_statuses_fail_with_the_spec_classification(
    fake_push: FakePushService, sender: WebPushSender, status: int, permanent: bool
) -> None:
    sub = fake_push.subscribe()
    fake_push.set_status(sub.endpoint_id, status)
    with pytest.raises(PushSendError) as info:
        sender.send(sub.to_json(), b'{"secret":"payload"}')
    err = info.value
    assert err.code == "PUSH_SEND_FAILED"
    assert err.status == status
    assert err.permanent is permanent
    assert is_permanent_push_status(status) is permanent
    assert str(err).startswith(f"Web Push delivery failed: {status} ")
    assert f"— fake push: {status}" in str(err)
    for secret in (sub.endpoint, sub.endpoint_id, sub.p256dh, sub.auth, "payload"):
        assert secret not in str(err)


@pytest.mark.parametrize("status", [200, 201, 202, 204])
def test_every_2xx_is_success(fake_push: FakePushService, sender: WebPushSender, status: int) -> None:
    sub = fake_push.subscribe()
    fake_push.set_status(sub.endpoint_id, status)
    assert sender.send(sub.to_json(), b"{}") == status


def test_scripted_sequence_then_sticky_last(fake_push: FakePushService, sender: WebPushSender) -> None:
    sub = fake_push.subscribe()
    fake_push.set_status(sub.endpoint_id, 500, 429, 201)
    outcomes = []
    for _ in range(4):
        try:
            outcomes.append(sender.send(sub.to_json(), b"{}"))
        except PushSendError as err:
            outcomes.append(err.status)
    assert outcomes == [500, 429, 201, 201]
    assert fake_push.payloads(sub.endpoint_id) == [{}, {}]


def test_connection_refused_is_a_retryable_network_error(sender: WebPushSender) -> None:
    url = unused_loopback_url()
    sub = make_browser_subscription(url)
    with pytest.raises(PushSendError) as info:
        sender.send(sub.to_json(), b"{}")
    err = info.value
    assert (err.code, err.status, err.permanent, err.unconfirmed) == ("PUSH_SEND_FAILED", None, False, False)
    assert str(err) == "Web Push delivery failed: ConnectError"
    assert url.rsplit(":", 1)[-1] not in str(err)


def test_a_read_timeout_leaves_the_outcome_unknown(fake_push: FakePushService, sender: WebPushSender) -> None:
    """The request reached the service (it has the push) and the answer came too late: unconfirmed, never to be
    sent again (docs/delivery.md)."""
    sub = fake_push.subscribe()
    fake_push.set_delay(sub.endpoint_id, 1.0)
    with pytest.raises(PushSendError) as info:
        sender.send(sub.to_json(), b"{}", timeout_s=0.2)
    assert (info.value.status, info.value.permanent, info.value.unconfirmed) == (None, False, True)
    assert "Timeout" in str(info.value)
    assert len(fake_push.received) == 1


def test_a_connection_dropped_before_the_answer_leaves_the_outcome_unknown(sender: WebPushSender) -> None:
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def read_then_drop() -> None:
        conn, _ = server.accept()
        conn.recv(65536)  # the request arrived ...
        conn.close()  # ... and the connection went away without an answer

    thread = threading.Thread(target=read_then_drop, daemon=True)
    thread.start()
    sub = make_browser_subscription(f"http://127.0.0.1:{server.getsockname()[1]}/push/x")
    with pytest.raises(PushSendError) as info:
        sender.send(sub.to_json(), b"{}")
    thread.join(timeout=5)
    server.close()
    assert (info.value.status, info.value.unconfirmed) == (None, True)


def test_invalid_subscription_is_retryable_and_sends_nothing(fake_push: FakePushService, sender: WebPushSender) -> None:
    good = fake_push.subscribe().to_json()
    bad_cases = [
        {},
        {"endpoint": "", "keys": good["keys"]},
        {"endpoint": "ftp://push.example/x", "keys": good["keys"]},
        {"endpoint": good["endpoint"]},
        {"endpoint": good["endpoint"], "keys": {"p256dh": good["keys"]["p256dh"]}},
        {"endpoint": good["endpoint"], "keys": {"p256dh": "AAAA", "auth": good["keys"]["auth"]}},
        {"endpoint": good["endpoint"], "keys": {"p256dh": "B" + "A" * 86, "auth": good["keys"]["auth"]}},
    ]
    for case in bad_cases:
        with pytest.raises(PushSendError) as info:
            sender.send(case, b"{}")
        assert (info.value.code, info.value.status, info.value.permanent) == ("PUSH_SUBSCRIPTION_INVALID", None, False)
    assert fake_push.received == []


def test_wrong_vapid_key_is_rejected_by_the_strict_fake_and_retryable(
    fake_push: FakePushService, vapid_keys: tuple[str, str]
) -> None:
    fake_push.vapid_public_key = vapid_keys[0]  # the subscription was made for this application server key
    other_public, other_private = generate_vapid_keys()
    sub = fake_push.subscribe()
    with WebPushSender(other_private, other_public, "ops@example.com", 5.0) as wrong:
        with pytest.raises(PushSendError) as info:
            wrong.send(sub.to_json(), b"{}")
    assert (info.value.status, info.value.permanent) == (403, False)
    [got] = fake_push.received
    assert got.vapid.error == "k is not the expected application server key"


@pytest.mark.parametrize(
    ("configured", "sub"),
    [
        ("ops@example.com", "mailto:ops@example.com"),
        ("  ops@example.com ", "mailto:ops@example.com"),
        ("mailto:ops@example.com", "mailto:ops@example.com"),
        ("MAILTO:ops@example.com", "MAILTO:ops@example.com"),
        ("https://example.com/contact", "https://example.com/contact"),
    ],
)
def test_subject_normalisation_on_the_wire(
    fake_push: FakePushService, vapid_keys: tuple[str, str], configured: str, sub: str
) -> None:
    public, private = vapid_keys
    subscription = fake_push.subscribe()
    with WebPushSender(private, public, configured, 5.0) as s:
        assert s.subject == sub
        s.send(subscription.to_json(), b"{}")
    [got] = fake_push.wait_for(1)
    assert got.vapid.ok
    assert got.vapid.claims["sub"] == sub


def test_normalize_subject_rejects_empty() -> None:
    assert normalize_subject("http://example.com") == "http://example.com"
    with pytest.raises(VapidConfigError):
        normalize_subject("  ")


@pytest.mark.parametrize(
    ("endpoint", "origin"),
    [
        ("https://fcm.googleapis.com/fcm/send/abc:def", "https://fcm.googleapis.com"),
        ("https://Updates.Push.Services.Mozilla.com:443/wpush/v2/x", "https://updates.push.services.mozilla.com"),
        ("https://web.push.apple.com:8443/Q?x=1", "https://web.push.apple.com:8443"),
        ("http://127.0.0.1:8080/push/1", "http://127.0.0.1:8080"),
        ("http://localhost:80/p", "http://localhost"),
        ("http://[::1]:9000/p", "http://[::1]:9000"),
    ],
)
def test_endpoint_origin_matches_js_url_origin(endpoint: str, origin: str) -> None:
    assert endpoint_origin(endpoint) == origin


def test_endpoint_origin_rejects_non_http() -> None:
    for bad in ("ftp://x/y", "not a url", "https:///nohost"):
        with pytest.raises(ValueError):
            endpoint_origin(bad)


def test_key_generation_round_trip() -> None:
    public, private = generate_vapid_keys()
    assert "=" not in public and "=" not in private
    raw_public, raw_private = b64url_decode(public), b64url_decode(private)
    assert len(raw_public) == 65 and raw_public[0] == 0x04
    assert len(raw_private) == 32
    assert public_key_from_private(private) == public
    assert generate_vapid_keys() != (public, private)
    WebPushSender(private, public, "ops@example.com", 5.0).close()  # accepted as a matching pair


def test_private_key_formats_and_interop_with_py_vapid() -> None:
    from py_vapid import Vapid  # the web-push ecosystem's reading of the raw-scalar format

    public, private = generate_vapid_keys()
    vapid = Vapid.from_raw(private.encode())
    their_public = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    assert their_public == b64url_decode(public)
    key = load_private_key(private)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    assert public_key_from_private(pem) == public  # a pasted PEM string also works
    padded_std = private.replace("-", "+").replace("_", "/") + "="
    assert public_key_from_private(padded_std) == public


def test_bad_vapid_configuration_fails_at_construction() -> None:
    public, private = generate_vapid_keys()
    other_public, _ = generate_vapid_keys()
    cases = [
        ("", public),
        ("not-a-key", public),
        (private, ""),
        (private, "AAAA"),
        (private, other_public),
    ]
    for priv, pub in cases:
        with pytest.raises(VapidConfigError) as info:
            WebPushSender(priv, pub, "ops@example.com", 5.0)
        assert private not in str(info.value)
    with pytest.raises(VapidConfigError):
        WebPushSender(private, public, "", 5.0)


def test_fake_decrypts_independently_of_http_ece_and_verifies_tampering(
    fake_push: FakePushService, sender: WebPushSender
) -> None:
    """Tampered bodies must fail in the fake (guards against a fake that accepts anything)."""
    import httpx

    sub = fake_push.subscribe()
    body = webpush_sender.encrypt_aes128gcm(b'{"ok":true}', b64url_decode(sub.p256dh), sub.auth_secret)
    sender.send(sub.to_json(), b"{}")
    sender_auth = fake_push.wait_for(1)[0].headers["authorization"]
    base = {"Content-Encoding": "aes128gcm", "TTL": "60", "Authorization": sender_auth}
    ok = httpx.post(sub.endpoint, content=body, headers=base)
    bad = httpx.post(sub.endpoint, content=body[:-1] + bytes([body[-1] ^ 1]), headers=base)
    no_ttl = httpx.post(sub.endpoint, content=body, headers={k: v for k, v in base.items() if k != "TTL"})
    no_auth = httpx.post(sub.endpoint, content=body, headers={k: v for k, v in base.items() if k != "Authorization"})
    assert (ok.status_code, bad.status_code, no_ttl.status_code, no_auth.status_code) == (201, 400, 400, 401)
    assert fake_push.payloads(sub.endpoint_id) == [{}, {"ok": True}]


def test_unknown_endpoint_ids_answer_404(fake_push: FakePushService, sender: WebPushSender) -> None:
    stranger = make_browser_subscription(fake_push.endpoint("never-subscribed"))
    with pytest.raises(PushSendError) as info:
        sender.send(stranger.to_json(), b"{}")
    assert (info.value.status, info.value.permanent) == (404, True)


def test_browser_subscription_shape() -> None:
    sub = make_browser_subscription("https://push.example/abc")
    info = sub.to_json()
    assert list(info) == ["endpoint", "expirationTime", "keys"]
    assert info["expirationTime"] is None
    assert list(info["keys"]) == ["p256dh", "auth"]
    assert len(b64url_decode(info["keys"]["p256dh"])) == 65
    assert len(b64url_decode(info["keys"]["auth"])) == 16
    assert not any(c in info["keys"]["p256dh"] + info["keys"]["auth"] for c in "+/=")


_IMPORT_PROBE = """
import sys
import amsg.vapid, amsg.ports, amsg.adapters.webpush_sender
heavy = ("pywebpush", "aiohttp", "requests", "py_vapid")
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy + ("httpx", "http_ece")))
from amsg.adapters.webpush_sender import WebPushSender
from amsg.failures import PushSendError
from amsg.vapid import generate_vapid_keys
pub, priv = generate_vapid_keys()
sub = {"endpoint": sys.argv[1], "keys": {"p256dh": pub, "auth": "AAAAAAAAAAAAAAAAAAAAAA"}}
try:
    WebPushSender(priv, pub, "a@b.c", 2.0).send(sub, b"{}")
except PushSendError:
    pass
print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
"""


@pytest.mark.slow  # a fresh interpreter
def test_importing_and_sending_never_loads_pywebpush_or_aiohttp() -> None:
    """API functions import amsg.vapid; the push adapter must stay cheap too (cold starts)."""
    env_path = [str(ROOT / "layers" / "shared"), str(ROOT)]
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path[:0] = {env_path!r}\n" + _IMPORT_PROBE, unused_loopback_url()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # (the failed send also prints its PushFailures metric as an EMF line)
    after_import, after_send = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert after_import == "[]"  # not even httpx/http_ece until the first push
    assert after_send == "[]"


def test_vapid_token_is_signed_once_per_audience_and_renewed_in_time(vapid_keys: tuple[str, str]) -> None:
    public, private = vapid_keys
    clock = [1_900_000_000.0]
    with WebPushSender(private, public, "ops@example.com", now_s=lambda: clock[0]) as s:
        first = s._authorization("https://push.example/a")
        assert s._authorization("https://push.example/b") == first  # same origin: same token
        assert s._authorization("https://other.example/a") != first
        clock[0] += webpush_sender.JWT_REUSE_S - 1
        assert s._authorization("https://push.example/c") == first
        clock[0] += 2
        renewed = s._authorization("https://push.example/a")
        assert renewed != first
        claims = json.loads(b64url_decode(renewed.split("t=", 1)[1].split(".")[1]))
        assert claims["exp"] == int(clock[0]) + 12 * 3600
