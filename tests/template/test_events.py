"""events/*.json match template.yaml (one sample event per function; scripts/generate_events.py writes them).

``events/<function_dir>.json`` is the function's primary event; ``events/<function_dir>.<method>.json`` are
extra HTTP methods of the same function. Encrypted bodies must decrypt under the test master key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from amsg.crypto import decrypt_envelope_text, derive_user_key

from tests.support.template import REPO_ROOT, function_dir, functions, http_routes, project_template

EVENTS = REPO_ROOT / "events"
MASTER_KEY = "a" * 64  # tests/conftest.py
RUN_TASK_BODY_KEYS = {"userId", "uuid", "claimVersion", "nextSendAt"}


def _event_files() -> list[str]:
    return sorted(p.name for p in EVENTS.glob("*.json") if not p.name.startswith("."))


def _load(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def _function_for(name: str) -> str:
    tpl = project_template()
    by_dir = {function_dir(tpl, fn): fn for fn in functions(tpl)}
    key = name.split(".", 1)[0]
    assert key in by_dir, f"events/{name}: no function dir {key!r} in template.yaml"
    return by_dir[key]


def _event_types(logical_id: str) -> set[str]:
    events = project_template()["Resources"][logical_id]["Properties"].get("Events") or {}
    return {ev["Type"] for ev in events.values()}


def test_every_function_has_an_event_file():
    tpl = project_template()
    missing = [
        f"events/{function_dir(tpl, fn)}.json"
        for fn in functions(tpl)
        if not (EVENTS / f"{function_dir(tpl, fn)}.json").is_file()
    ]
    assert not missing, missing


@pytest.mark.parametrize("name", _event_files())
def test_event_matches_its_function(name):
    logical_id = _function_for(name)
    event = _load(name)
    types = _event_types(logical_id)
    if "HttpApi" in types:
        _check_http(name, logical_id, event)
    elif "ScheduleV2" in types:
        tpl = project_template()
        (schedule,) = [
            e for e in tpl["Resources"][logical_id]["Properties"]["Events"].values() if e["Type"] == "ScheduleV2"
        ]
        assert set(event) == set(json.loads(schedule["Properties"]["Input"])), name
        assert all(isinstance(v, str) and "<aws.scheduler." not in v for v in event.values()), name
    elif "SQS" in types:
        records = event["Records"]
        assert records and all(r["eventSource"] == "aws:sqs" for r in records)
        for record in records:
            body = json.loads(record["body"])
            if name == "claimer.json":  # a claim job, as the tick fans it out
                assert body == {"kind": "claim", "shard": 0}, body
                continue
            assert set(body) == RUN_TASK_BODY_KEYS, body
            assert isinstance(body["claimVersion"], int)
            assert int(record["attributes"]["ApproximateReceiveCount"]) >= 1
    else:
        pytest.fail(f"{name}: no sample-event rule for event types {types}")


def _check_http(name: str, logical_id: str, event: dict[str, Any]) -> None:
    routes = [r for r in http_routes(project_template()) if r.function_logical_id == logical_id]
    keys = {r.route_key for r in routes}
    assert event["version"] == "2.0"
    assert event["routeKey"] in keys, f"{name}: routeKey {event['routeKey']!r} not one of {sorted(keys)}"
    ctx = event["requestContext"]
    assert ctx["routeKey"] == event["routeKey"]
    assert ctx["http"]["path"] == event["rawPath"]
    assert ctx["stage"] == "$default"
    assert "authorizer" not in ctx and "authentication" not in ctx, "the API has no authorizer / mTLS"
    if event["routeKey"] == "$default":
        declared = {(r.method, r.path) for r in http_routes(project_template()) if r.path != "$default"}
        assert (ctx["http"]["method"], event["rawPath"]) not in declared, f"{name}: would not reach $default"
    else:
        method, path = event["routeKey"].split(" ", 1)
        assert ctx["http"]["method"] == method
        if "{proxy+}" in path:  # a greedy route: the raw path continues its literal prefix
            prefix = path.split("{proxy+}")[0]
            assert (
                event["rawPath"].startswith(prefix)
                and event["pathParameters"]["proxy"] == event["rawPath"][len(prefix) :]
            )
        else:
            assert event["rawPath"] == path
        if name.count(".") == 2:  # <dir>.<method>.json
            assert name.split(".")[1] == method.lower(), name
    headers = event["headers"]
    assert all(k == k.lower() for k in headers), "API Gateway v2 delivers lower-case header names"
    query = event.get("queryStringParameters") or {}
    assert event["rawQueryString"] == "&".join(f"{k}={v}" for k, v in query.items())
    assert event["isBase64Encoded"] is False
    if headers.get("x-payload-encrypted") == "true":
        envelope = json.loads(event["body"])
        key = derive_user_key(MASTER_KEY, headers["x-user-id"])
        assert isinstance(json.loads(decrypt_envelope_text(envelope, key)), dict), name
        assert headers["x-encryption-version"] == "1"
    if "body" in event:
        assert headers["content-length"] == str(len(event["body"].encode("utf-8")))


@pytest.mark.slow  # runs the generator script
def test_events_are_what_the_generator_produces():
    """events/ is generated; hand edits or a template change without regeneration fail here."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "generate_events.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout
