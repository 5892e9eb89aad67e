"""The cold path (docs/cold-start.md): a route builds only what its first request needs, handler modules do
init-phase work only inside a Lambda init, and the per-function router answers as API Gateway's routes expect."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from amsg import runtime
from amsg.http.lambda_app import HttpApp
from amsg.http.responses import ApiResponse, ok_fields

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
VAPID_PUBLIC_KEY = "BKd0FOnmkngVtRSAbUrJmh7eNBM7DAyA-n9F8CjJ0pqsKzQrAU9yGxzCVWOsOmE9rfpy2r2kPmE8dtwXUBv9XHg"

PROBE = """
import importlib, json, sys
sys.path[:0] = [sys.argv[1]]
module = importlib.import_module(sys.argv[2])
HEAVY = ("boto3", "botocore.session", "cryptography", "amsg.ports", "amsg.hooks", "httpx", "http_ece", "certifi")
after_import = sorted(m for m in HEAVY if m in sys.modules)
class Context:
    function_name = "t"; memory_limit_in_mb = 512; aws_request_id = "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:t"
    def get_remaining_time_in_millis(self): return 10_000
result = None
if sys.argv[3]:
    with open(sys.argv[3]) as f:
        result = module.handler(json.load(f), Context())
from amsg import runtime
built = sorted(name for name in ("storage",) if runtime._current is not None and name in vars(runtime._current))
loaded = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps({"status": result and result["statusCode"], "body": result and result["body"],
                  "after_import": after_import, "loaded": loaded, "built": built}))
"""


def run_handler(function: str, event: str | None, **env: str) -> dict:
    base = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "layers/shared"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AMSG_TABLE_NAME": "cold-test",
        "AMSG_MASTER_KEY": "test-master-key",
        "AMSG_VAPID_PUBLIC_KEY": VAPID_PUBLIC_KEY,
        "AMSG_VAPID_EMAIL": "mailto:t@example.com",
        "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:9",  # nothing listens: a request would fail the test
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    args = [str(ROOT / "functions" / function), f"{function}_handler", str(EVENTS / event) if event else ""]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"logs": done.stdout + done.stderr}


@pytest.mark.parametrize(
    ("function", "event"),
    [("capabilities", "capabilities.json"), ("vapid_public_key", "vapid_public_key.json")],
)
@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_routes_without_storage_load_no_sdk_no_ports_no_cipher(function, event):
    result = run_handler(function, event)
    assert result["status"] == 200, result["body"]
    assert result["loaded"] == [], result["loaded"]
    assert result["built"] == []


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_get_user_key_needs_only_the_master_key():
    result = run_handler("get_user_key", "get_user_key.json")
    assert result["status"] == 200, result["body"]
    assert json.loads(result["body"])["data"]["userKey"]
    assert not {"boto3", "botocore.session", "amsg.ports"} & set(result["loaded"])
    assert result["built"] == []


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_outside_a_lambda_init_handler_modules_build_nothing_at_import():
    result = run_handler("messages", None)
    assert not {"boto3", "botocore.session"} & set(result["after_import"])
    assert result["built"] == []


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_in_a_lambda_init_a_storage_route_builds_its_table_client_and_sends_nothing():
    result = run_handler("messages", None, AWS_LAMBDA_INITIALIZATION_TYPE="on-demand")
    assert "boto3" in result["after_import"]
    assert result["built"] == ["storage"]
    assert "init-phase preparation failed" not in result["logs"]  # no request went to the closed port


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_in_a_lambda_init_run_task_also_imports_the_push_stack():
    prepared = run_handler("run_task", None, AWS_LAMBDA_INITIALIZATION_TYPE="on-demand")
    # the push transport is http.client's (amsg.adapters.push_http): its TLS trust (certifi) and the record
    assert {"boto3", "certifi", "http_ece"} <= set(prepared["after_import"])
    assert prepared["built"] == ["storage"]
    assert "init-phase preparation failed" not in prepared["logs"]
    assert not {"httpx", "http_ece", "certifi"} & set(run_handler("run_task", None)["after_import"])  # outside an init


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_a_failed_preparation_is_logged_and_the_module_still_imports():
    result = run_handler("messages", None, AWS_LAMBDA_INITIALIZATION_TYPE="on-demand", AMSG_TABLE_NAME="")
    assert "init-phase preparation failed" in result["logs"]
    assert result["built"] == []


@pytest.mark.slow  # a handler imported in a fresh interpreter
def test_a_route_without_storage_prepares_nothing_even_in_a_lambda_init():
    result = run_handler("capabilities", None, AWS_LAMBDA_INITIALIZATION_TYPE="on-demand")
    assert result["after_import"] == []


def test_secrets_prepare_builds_the_ssm_reader_only_for_secrets_read_from_ssm(monkeypatch):
    built: list[int] = []

    class Reader:
        def __init__(self, max_age_s: int) -> None:
            built.append(max_age_s)

        @property
        def provider(self) -> object:
            return object()

    monkeypatch.setattr("amsg.adapters.ssm.SsmSecretReader", Reader)
    env = {"AMSG_TABLE_NAME": "t", "AMSG_MASTER_KEY_PARAM": "/p/master", "AMSG_CLIENT_TOKEN": "direct"}
    secrets = runtime.secrets_from_env(env)
    secrets.prepare(("client_token",))  # a direct value: no SSM
    assert built == []
    secrets.prepare(("client_token", "master_key"))
    assert built == [300]


def test_storage_is_built_once_on_first_use_and_ports_stay_replaceable():
    calls: list[int] = []
    context = runtime.build_context({"AMSG_TABLE_NAME": "t", "AMSG_MASTER_KEY": "k"})
    real = context._make_storage
    context._make_storage = lambda: calls.append(1) or real()
    assert context.provides("policies") and not context.provides("tasks")
    assert "storage" not in vars(context)
    tasks, outbox = context.tasks, context.outbox
    assert calls == [1] and context.tasks is tasks and context.outbox is outbox
    context.coalescer = None  # tests replace ports by assignment
    assert context.coalescer is None


# ---- the per-function router -------------------------------------------------------------------------------


def _event(path: str, method: str = "GET") -> dict:
    event = json.loads((EVENTS / "capabilities.json").read_text())
    event["rawPath"] = path
    event["requestContext"]["http"]["method"] = method
    return event


def _endpoint(request, ctx) -> ApiResponse:
    return ok_fields(path=request.path, method=request.method)


@pytest.fixture
def built_context():
    return runtime.build_context({"AMSG_TABLE_NAME": "t", "AMSG_MASTER_KEY": "k"})


@pytest.fixture
def app_with_route(built_context):
    return HttpApp({("GET", "/thing"): _endpoint}, context=lambda: built_context)


@pytest.mark.parametrize("path", ["/thing", "/api/v1/thing"])
def test_router_serves_a_route_at_the_root_and_under_api_v1(app_with_route, path):
    result = app_with_route.resolve(_event(path))
    assert result["statusCode"] == 200
    assert result["headers"]["content-type"].startswith("application/json")


@pytest.mark.parametrize(("path", "method"), [("/thing", "POST"), ("/thing/", "GET"), ("/api/v1", "GET")])
def test_router_answers_the_reference_404_for_what_no_route_takes(app_with_route, path, method):
    result = app_with_route.resolve(_event(path, method))
    assert result["statusCode"] == 404
    assert json.loads(result["body"])["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(("path", "method"), [("/cloud-data/summary", "GET"), ("/api/v1/cloud-data/x/", "POST")])
def test_a_fallback_endpoint_takes_every_path_with_the_raw_path(built_context, path, method):
    """The cloud-data function's table is empty: its one endpoint routes the sub-paths itself, from the path as
    the client sent it (prefix included)."""
    app = HttpApp({}, context=lambda: built_context, fallback=_endpoint)
    result = app.resolve(_event(path, method))
    assert result["statusCode"] == 200
    assert json.loads(result["body"]) == {"success": True, "path": path, "method": method}


def test_the_router_uses_the_context_factory_it_was_given_and_reports_its_failure_as_config():
    def broken():
        raise RuntimeError("no table configured")

    result = HttpApp({("GET", "/thing"): _endpoint}, context=broken).resolve(_event("/thing"))
    assert result["statusCode"] == 500
    assert json.loads(result["body"])["error"]["cause"]["stage"] == "config"


def test_router_keeps_no_state_between_concurrent_events(app_with_route):
    """The local stack runs one function's events on several threads: nothing of one event leaks into the
    other's answer."""
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def who(request, ctx) -> ApiResponse:
        barrier.wait(timeout=5)
        return ok_fields(id=request.param("id"))

    app = HttpApp({("GET", "/who"): who}, context=app_with_route.context)

    def call(name: str) -> None:
        event = _event("/who")
        event["rawQueryString"] = f"id={name}"
        seen[name] = json.loads(app.resolve(event)["body"])["id"]

    threads = [threading.Thread(target=call, args=(name,), name=name) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert seen == {"a": "a", "b": "b"}
