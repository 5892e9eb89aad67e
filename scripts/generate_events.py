"""Regenerate events/*.json: one sample invocation event per function of template.yaml.

    .venv/bin/python scripts/generate_events.py            # rewrite events/
    .venv/bin/python scripts/generate_events.py --check    # exit 1 if events/ differs (no sam needed)

Bases come from ``sam local generate-event`` (offline; tools venv) and are edited into what the real
integrations deliver:

* HTTP API payload v2 for every API function (``events/<function_dir>.json`` for its first route,
  ``events/<function_dir>.<method>.json`` for its other methods): lower-cased headers as API Gateway passes
  them, ``X-User-Id`` etc., encrypted bodies that really decrypt under the test master key (64 x ``a``,
  tests/conftest.py), no authorizer/mTLS blocks (the API has neither), ``isBase64Encoded: false``.
* the tick's ScheduleV2 payload, i.e. the template's ``Input`` with the Scheduler placeholders filled in;
* an SQS batch for run_task whose body is the tick's message ``{userId, uuid, claimVersion, nextSendAt}``;
* an SQS batch for the claimer whose body is a claim job ``{kind: "claim", shard}``.

Everything is deterministic (fixed IVs, ids and clock), so re-running produces identical files. A function
without a spec here makes the script fail: add one to ``HTTP_SPECS`` when adding a route.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "shared"), str(ROOT / "tools"), str(ROOT)]

from amsg.crypto import derive_user_key, encrypt_envelope  # noqa: E402

from tests.support.template import (  # noqa: E402
    function_dir,
    function_property,
    functions,
    http_routes,
    load_template,
)

EVENTS = ROOT / "events"
SAM = ROOT / ".venv-tools" / "bin" / "sam"
BASES = ROOT / "scripts" / "sam-event-bases.json"  # cached sam output: --check and reruns need no tools venv

MASTER_KEY = "a" * 64  # tests/conftest.py MASTER_KEY
USER_ID = "550e8400-e29b-41d4-a716-446655440000"  # the user of the reference's crypto test vector
TASK_UUID = "3f2b8c1e-5d4a-4e6f-9a7b-1c2d3e4f5a6b"
NOW_MS = 1_893_369_600_000  # tests/conftest.py T0_MS (2029-12-31T00:00:00Z)
API_ID = "abc123defg"
DOMAIN = f"{API_ID}.execute-api.us-east-1.amazonaws.com"
SOURCE_IP = "203.0.113.10"
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
MESSAGE_ID = f"msg_task_{TASK_UUID}@1893456000000_0"

_ENC = {"x-payload-encrypted": "true", "x-encryption-version": "1"}
_RESP_ENC = {"x-response-encrypted": "true", "x-encryption-version": "1"}

# (function_dir, METHOD) -> request shape. user: send X-User-Id; body: plaintext (encrypted when enc=True).
HTTP_SPECS: dict[tuple[str, str], dict[str, Any]] = {
    ("init_tenant", "POST"): {},
    ("send_notifications", "POST"): {},
    ("get_user_key", "GET"): {"user": True},
    ("vapid_public_key", "GET"): {},
    ("capabilities", "GET"): {},
    ("push_subscription", "PUT"): {
        "user": True,
        "enc": True,
        "body": {
            "subscription": {
                "endpoint": "https://fcm.googleapis.com/fcm/send/dGVzdC1zdWJzY3JpcHRpb24:APA91bExample",
                "expirationTime": None,
                "keys": {
                    "p256dh": "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM",
                    "auth": "tBHItJI5svbpez7KI4CCXg",
                },
            },
            "updatedAt": NOW_MS,
        },
    },
    ("push_subscription", "GET"): {"user": True},
    ("push_subscription", "DELETE"): {"user": True},
    ("delivery_policy", "PUT"): {
        "user": True,
        "enc": True,
        "body": {
            "quietHours": {"start": "23:00", "end": "07:00", "tzId": "Asia/Shanghai"},
            "caps": [{"scope": "user", "max": 2, "windowMinutes": 60}],
        },
    },
    ("delivery_policy", "GET"): {"user": True},
    ("delivery_policy", "DELETE"): {"user": True},
    # The reference's crypto test vector: this exact envelope (IV 000102...0b) decrypts to a fixed task for 2030-01-01.
    ("schedule_message", "POST"): {
        "user": True,
        "enc": True,
        "iv": bytes(range(12)),
        "body": {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "你好！",
            "firstSendTime": "2030-01-01T00:00:00.000Z",
        },
    },
    ("update_message", "PUT"): {
        "user": True,
        "enc": True,
        "query": {"id": TASK_UUID},
        "body": {"userMessage": "明天见", "nextSendAt": "2030-01-02T00:00:00.000Z"},
    },
    ("cancel_message", "DELETE"): {"user": True, "query": {"id": TASK_UUID}},
    ("messages", "GET"): {
        "user": True,
        "headers": _RESP_ENC,
        "query": {"status": "pending", "limit": "20", "offset": "0"},
    },
    ("message", "GET"): {"user": True, "headers": _RESP_ENC, "query": {"id": TASK_UUID}},
    ("client_state", "PUT"): {
        "user": True,
        "enc": True,
        "body": {
            "entries": [
                {"namespace": "settings", "key": "theme", "value": "dark", "updatedAt": NOW_MS},
                {"namespace": "settings", "key": "draft", "value": None, "updatedAt": NOW_MS},
            ]
        },
    },
    ("client_state", "GET"): {"user": True, "headers": _RESP_ENC, "query": {"namespace": "settings"}},
    ("client_state", "DELETE"): {"user": True, "query": {"namespace": "settings"}},
    ("client_state_namespaces", "GET"): {"user": True, "headers": _RESP_ENC, "query": {"limit": "50"}},
    ("outbox", "GET"): {"user": True, "headers": _RESP_ENC, "query": {"since": "0", "limit": "50"}},
    ("outbox", "DELETE"): {"user": True, "enc": True, "body": {"messageIds": [MESSAGE_ID]}},
    ("outbox_ack", "POST"): {"user": True, "enc": True, "body": {"messageIds": [MESSAGE_ID]}},
    ("llm_credentials", "PUT"): {
        "user": True,
        "enc": True,
        "body": {
            "credentials": [
                {
                    "credId": "global/chat",
                    "value": {
                        "apiUrl": "https://api.openai.com/v1/chat/completions",
                        "apiKey": "sk-test-0000000000000000",
                        "primaryModel": "gpt-4o-mini",
                    },
                }
            ]
        },
    },
    ("llm_credentials", "GET"): {"user": True},
    ("llm_credentials", "DELETE"): {"user": True, "enc": True, "body": {"credIds": ["global/chat"]}},
    ("cloud_data", "GET"): {
        "user": True,
        "headers": _RESP_ENC,
        "path": "/cloud-data/summary",
        "path_params": {"proxy": "summary"},
    },
    ("cloud_data", "POST"): {
        "user": True,
        "enc": True,
        "path": "/cloud-data/owner",
        "path_params": {"proxy": "owner"},
        "body": {"action": "restore", "owner": {"type": "character", "id": "alice"}},
    },
    # $default: a path no route declares (wrong prefix) -> the 404 envelope function.
    ("not_found", "$default"): {"method": "GET", "path": "/api/v2/schedule-message", "user": True},
}


def _sam_bases() -> dict[str, Any]:
    if not SAM.exists():
        sys.exit(f"generate_events: {SAM} missing (run scripts/install-tools), needed for the event bases")
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}

    def gen(*args: str) -> Any:
        cmd = [str(SAM), "local", "generate-event", *args]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)  # noqa: S603
        return json.loads(out.stdout)

    return {
        "http": gen("apigateway", "http-api-proxy"),
        "sqs": gen("sqs", "receive-message"),
    }


def _stable_uuid(*parts: str) -> str:
    return str(uuid.UUID(hashlib.sha256("|".join(parts).encode()).hexdigest()[:32], version=4))


def _http_event(base: dict[str, Any], route_key: str, method: str, path: str, spec: dict[str, Any]) -> dict[str, Any]:
    event = copy.deepcopy(base)
    for key in ("cookies", "pathParameters", "stageVariables", "queryStringParameters", "body"):
        event.pop(key, None)
    ctx = event["requestContext"]
    for key in ("authentication", "authorizer"):
        ctx.pop(key, None)

    request_id = _stable_uuid("request", route_key, method, path)
    headers = {
        "accept": "application/json, text/plain, */*",
        "accept-encoding": "gzip, deflate, br",
        "accept-language": "zh-CN,zh;q=0.9,en;q=0.8",
        "host": DOMAIN,
        "user-agent": USER_AGENT,
        "x-amzn-trace-id": f"Root=1-{_hex(request_id, 8)}-{_hex(route_key, 24)}",
        "x-forwarded-for": SOURCE_IP,
        "x-forwarded-port": "443",
        "x-forwarded-proto": "https",
    }
    if spec.get("user"):
        headers["x-user-id"] = USER_ID
    headers.update(spec.get("headers", {}))

    query = spec.get("query") or {}
    raw_query = "&".join(f"{k}={v}" for k, v in query.items())
    if "body" in spec:
        value = spec["body"]
        if spec.get("enc"):
            headers.update(_ENC)
            iv = spec.get("iv") or _iv(route_key, method)
            value = encrypt_envelope(value, derive_user_key(MASTER_KEY, USER_ID), iv=iv)
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        headers["content-type"] = "application/json"
        headers["content-length"] = str(len(text.encode("utf-8")))
        event["body"] = text
    elif method in ("POST", "PUT"):
        headers["content-length"] = "0"

    event["routeKey"] = route_key
    event["rawPath"] = path
    event["rawQueryString"] = raw_query
    event["headers"] = dict(sorted(headers.items()))
    if query:
        event["queryStringParameters"] = dict(query)
    if spec.get("path_params"):
        event["pathParameters"] = dict(spec["path_params"])
    event["isBase64Encoded"] = False
    ctx.update(
        {
            "apiId": API_ID,
            "domainName": DOMAIN,
            "domainPrefix": API_ID,
            "requestId": request_id,
            "routeKey": route_key,
            "stage": "$default",
            "time": datetime.fromtimestamp(NOW_MS / 1000, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": NOW_MS,
        }
    )
    ctx["http"].update({"method": method, "path": path, "sourceIp": SOURCE_IP, "userAgent": USER_AGENT})
    return event


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _iv(*parts: str) -> bytes:
    return hashlib.sha256("|".join(("iv", *parts)).encode()).digest()[:12]


def _tick_event(template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    events = function_property(template, logical_id, "Events") or {}
    schedule = next(e["Properties"] for e in events.values() if e.get("Type") == "ScheduleV2")
    text = schedule["Input"]
    text = text.replace("<aws.scheduler.scheduled-time>", "2029-12-31T00:00:00Z")
    text = text.replace("<aws.scheduler.execution-id>", "c4e2b7a1-9d3f-4f0e-8a6b-2d5c7e9f1a3b")
    if "<aws.scheduler." in text:
        sys.exit(f"generate_events: unknown Scheduler placeholder in {logical_id} Input: {text}")
    return json.loads(text)


def _sqs_event(base: dict[str, Any], template: dict[str, Any], logical_id: str) -> dict[str, Any]:
    event = copy.deepcopy(base)
    record = event["Records"][0]
    queue_ref = next(iter(function_property(template, logical_id, "Events").values()))["Properties"]["Queue"]
    queue = queue_ref["Fn::GetAtt"][0] if isinstance(queue_ref, dict) else str(queue_ref).split(".", 1)[0]
    if queue == "ClaimQueue":  # a claim job: the tick's fan-out of shard 0 (the claimer)
        body: dict[str, Any] = {"kind": "claim", "shard": 0}
    else:
        body = {"userId": USER_ID, "uuid": TASK_UUID, "claimVersion": 3, "nextSendAt": "2030-01-01T00:00:00.000Z"}
    text = json.dumps(body, separators=(",", ":"))
    record.update(
        {
            "messageId": _stable_uuid("sqs", logical_id),
            "receiptHandle": "AQEB" + hashlib.sha256(text.encode()).hexdigest(),
            "body": text,
            "md5OfBody": hashlib.md5(text.encode()).hexdigest(),  # noqa: S324 - SQS's own checksum
            "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:amsg-{queue}-1A2B3C4D5E6F",
        }
    )
    record["attributes"].update(
        {
            "SentTimestamp": str(NOW_MS),
            "ApproximateFirstReceiveTimestamp": str(NOW_MS + 15),
            "SenderId": "AROAEXAMPLEROLEID:amsg-TickFunction-1A2B3C4D5E6F",
        }
    )
    return event


def build_events(bases: dict[str, Any]) -> dict[str, Any]:
    template = load_template(ROOT / "template.yaml")
    out: dict[str, Any] = {}
    routes_by_fn: dict[str, list[Any]] = {}
    for route in http_routes(template):
        routes_by_fn.setdefault(route.function_logical_id, []).append(route)

    missing = []
    for logical_id, res in functions(template).items():
        name = function_dir(template, logical_id)
        event_types = {e.get("Type") for e in (res["Properties"].get("Events") or {}).values()}
        if logical_id in routes_by_fn:
            done_methods: set[str] = set()
            for route in routes_by_fn[logical_id]:
                method = route.method if route.path != "$default" else "$default"
                if method in done_methods or route.path.startswith("/api/v1/"):
                    continue
                spec = HTTP_SPECS.get((name, method))
                if spec is None:
                    missing.append(f"{name} {method}")
                    continue
                filename = f"{name}.json" if not done_methods else f"{name}.{method.lower()}.json"
                done_methods.add(method)
                http_method = spec.get("method", route.method)
                path = spec.get("path", route.path)
                out[filename] = _http_event(bases["http"], route.route_key, http_method, path, spec)
        elif "ScheduleV2" in event_types:
            out[f"{name}.json"] = _tick_event(template, logical_id)
        elif "SQS" in event_types:
            out[f"{name}.json"] = _sqs_event(bases["sqs"], template, logical_id)
        else:
            missing.append(f"{name} (event types {sorted(t for t in event_types if t)})")
    if missing:
        sys.exit("generate_events: no event spec for: " + ", ".join(missing) + " (add to HTTP_SPECS)")
    return out


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if events/ is not what the generator produces")
    ap.add_argument("--refresh-bases", action="store_true", help="re-run sam local generate-event")
    args = ap.parse_args()

    cached = args.check or (BASES.exists() and not args.refresh_bases)
    bases = json.loads(BASES.read_text()) if cached else _sam_bases()
    wanted = {name: _dump(event) for name, event in build_events(bases).items()}
    existing = {p.name: p.read_text() for p in EVENTS.glob("*.json") if not p.name.startswith(".")}
    if args.check:
        stale = sorted(n for n in set(wanted) | set(existing) if wanted.get(n) != existing.get(n))
        if stale:
            print("generate_events: events/ out of date: " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"events/ up to date ({len(wanted)} files)")
        return 0
    EVENTS.mkdir(exist_ok=True)
    BASES.write_text(_dump(bases))
    for name in sorted(set(existing) - set(wanted)):
        (EVENTS / name).unlink()
        print(f"removed events/{name}")
    for name, text in sorted(wanted.items()):
        if existing.get(name) != text:
            (EVENTS / name).write_text(text)
            print(f"wrote events/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
