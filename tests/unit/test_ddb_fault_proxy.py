"""The DynamoDB fault proxy (tools/amsg_local/ddb_faults.py) against a loopback stand-in for DynamoDB, seen
through botocore as the adapters see it: the error codes botocore parses, the drop that applies a write the
client never hears about, the outage, and reproducible draws."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from amsg_local.ddb_faults import FaultPlan, FaultProxy
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError


class _Upstream:
    """Answers every DynamoDB call with ``{}`` and counts what it applied."""

    def __init__(self) -> None:
        self.applied: list[str] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream.applied.append(self.headers.get("X-Amz-Target", ""))
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # shutdown() waits for the loop's next poll: 0.5 s by default, at the end of every test
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream():
    server = _Upstream()
    yield server
    server.close()


def _client(url: str, attempts: int = 1, read_timeout: float = 5):
    config = Config(retries={"mode": "standard", "total_max_attempts": attempts}, read_timeout=read_timeout)
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=config,
    )


@pytest.mark.parametrize(
    ("plan", "codes"),
    [
        (FaultPlan(throttle=1.0), {"ThrottlingException", "ProvisionedThroughputExceededException"}),
        (FaultPlan(error=1.0), {"InternalServerError"}),
    ],
)
def test_refused_requests_carry_dynamodbs_error_codes_and_apply_nothing(upstream, plan, codes):
    with FaultProxy(upstream.url, plan) as proxy:
        client = _client(proxy.endpoint_url)
        seen = set()
        for _ in range(4):
            with pytest.raises(ClientError) as raised:
                client.get_item(TableName="t", Key={"pk": {"S": "a"}})
            seen.add(raised.value.response["Error"]["Code"])
    assert seen == codes
    assert upstream.applied == []


def test_botocore_retries_a_throttle_through(upstream, monkeypatch):
    # botocore waits up to 1 s, doubling, before each retry of a throttle; the test is about the retries, not
    # the waits (~5 s of a worker's wall time), so the throttle scale is 10 ms
    from botocore.retries.standard import ExponentialBackoff

    monkeypatch.setitem(ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, "throttling_base_scale", 0.01)
    with FaultProxy(upstream.url, FaultPlan(throttle=0.5, seed=3)) as proxy:
        client = _client(proxy.endpoint_url, attempts=10)
        for _ in range(10):
            client.put_item(TableName="t", Item={"pk": {"S": "a"}})
        assert proxy.counts()["throttle"] > 0
    assert len(upstream.applied) == 10


def test_a_dropped_answer_was_applied(upstream):
    with FaultProxy(upstream.url, FaultPlan(drop=1.0)) as proxy:
        with pytest.raises(ConnectionClosedError):
            _client(proxy.endpoint_url).put_item(TableName="t", Item={"pk": {"S": "a"}})
    assert upstream.applied == ["DynamoDB_20120810.PutItem"]


def test_latency_outlasts_the_read_timeout_and_is_applied_late(upstream):
    with FaultProxy(upstream.url, FaultPlan(latency=1.0, latency_s=0.6)) as proxy:
        with pytest.raises(ReadTimeoutError):
            _client(proxy.endpoint_url, read_timeout=0.2).put_item(TableName="t", Item={"pk": {"S": "a"}})
        assert upstream.applied == []
        proxy.clear()
        deadline = threading.Event()
        deadline.wait(0.8)
    assert upstream.applied == ["DynamoDB_20120810.PutItem"]


def test_an_outage_resets_every_connection_until_it_ends(upstream):
    with FaultProxy(upstream.url) as proxy:
        client = _client(proxy.endpoint_url)
        proxy.start_outage(0.5)
        with pytest.raises(ConnectionClosedError):
            client.get_item(TableName="t", Key={"pk": {"S": "a"}})
        threading.Event().wait(0.6)
        client.get_item(TableName="t", Key={"pk": {"S": "a"}})
        assert proxy.counts()["outage"] == 1
    assert upstream.applied == ["DynamoDB_20120810.GetItem"]


def test_the_draws_are_reproducible_with_a_seed_and_limited_to_the_named_operations():
    plan = FaultPlan(throttle=0.2, drop=0.1, seed=42, operations=frozenset({"PutItem"}))
    first, second = FaultProxy("http://127.0.0.1:9", plan), FaultProxy("http://127.0.0.1:9", plan)
    draws = [first.decide("PutItem") for _ in range(200)]
    assert draws == [second.decide("PutItem") for _ in range(200)]
    assert 20 < draws.count("throttle") < 60 and 5 < draws.count("drop") < 35
    assert {first.decide("GetItem") for _ in range(50)} == {None}


def test_the_plan_spelling_of_amsg_local():
    plan = FaultPlan.parse(
        "throttle=0.1, 500=0.05,drop=0.02,latency=0.01,latency_s=12,outage=60,seed=7,ops=PutItem+Query"
    )
    assert plan == FaultPlan(0.1, 0.05, 0.02, 0.01, 12.0, 60.0, 7, frozenset({"PutItem", "Query"}))
    for bad in ("throttle", "nope=1", "throttle=0.7,drop=0.5", "error=-1"):
        with pytest.raises(ValueError):
            FaultPlan.parse(bad)
    assert json.dumps(FaultPlan().active) == "false"


def test_amsg_local_takes_a_plan_and_describes_it_in_the_same_spelling():
    from amsg_local.cli import _parser

    args = _parser().parse_args(["local", "--dynamodb-faults", "throttle=0.1,outage=60,ops=Query,seed=3"])
    plan = args.dynamodb_faults
    assert plan == FaultPlan(throttle=0.1, outage_s=60, seed=3, operations=frozenset({"Query"}))
    assert FaultPlan.parse(plan.describe()) == plan
    assert _parser().parse_args(["local"]).dynamodb_faults is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["local", "--dynamodb-faults", "nope=1"])
