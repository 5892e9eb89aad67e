"""Least privilege, per function: ``functions/permissions.toml`` is the one table of what each Lambda function
needs (table actions, indexes it queries, SSM secrets, queue actions). Three checks keep it honest:

1. the template grants each function exactly the table's permissions (no more, no less);
2. a journey through every route, the tick and run_task (real handlers on moto, secrets in moto's SSM)
   records every AWS call each function makes: each must be granted (a missing permission fails here, not
   in production);
3. every granted permission is used by that journey (an excess one fails), except the few listed in the
   table's ``unobserved`` with the reason no test reaches them.
"""

from __future__ import annotations

import types
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from amsg.domain.ownership import owner_ref
from moto import mock_aws

from tests.support.aws_calls import Call, record_aws_calls
from tests.support.iam_needs import (
    CLAIM_QUEUE_SUFFIX,
    EVENT_SOURCES,
    STATEMENT_PERMISSIONS,
    load_permissions,
    needs_of,
    permissions_of_call,
)
from tests.support.iam_template import granted
from tests.support.template import function_property, functions, project_template

# --------------------------------------------------------------------------------------------- the journey


# the journey is a module fixture: under xdist (--dist loadgroup) its three tests share one worker, so it runs
# once. A whole-system journey, like the e2e ones: `make test` runs it, the fast path `make unit` leaves it out.
def JOURNEY(test):
    return pytest.mark.journey(pytest.mark.xdist_group("iam_journey")(test))


T0_MS = 1_893_369_600_000  # 2029-12-31T00:00:00Z
FIRST = "2029-12-31T00:01:00.000Z"
TOKEN = "iam-journey-token"


class _Sandboxes:
    """One AppContext per function, as separate Lambda sandboxes have: each reads its own secrets from SSM."""

    def __init__(self, env: dict[str, str], recorder: Any) -> None:
        self.env = env
        self.recorder = recorder
        self.contexts: dict[str, Any] = {}
        self.now_ms = T0_MS

    def enter(self, function: str) -> Any:
        from amsg import runtime
        from amsg.clock import FixedClock

        ctx = self.contexts.get(function)
        if ctx is None:
            with self.recorder.acting_as(function):
                ctx = self.contexts[function] = runtime.build_context(self.env)
            ctx.clock = FixedClock(self.now_ms)
        ctx.clock.current_ms = self.now_ms
        runtime.use(ctx)
        return ctx


@pytest.fixture(scope="module")
def observed() -> Iterator[dict[str, list[Call]]]:
    """Every AWS call each function made during a journey through all routes, the tick and run_task."""
    from amsg import runtime
    from amsg.vapid import generate_vapid_keys
    from amsg_local.tables import create_queue_from_template, create_tables_from_template
    from amsg_local.template import load_template

    from tests.support.fake_llm import FakeLlmServer
    from tests.support.fake_push import FakePushService
    from tests.support.wire_client import WireClient

    public, private = generate_vapid_keys()
    with mock_aws(), FakePushService(vapid_public_key=public) as push, FakeLlmServer() as llm:
        template = load_template()
        create_tables_from_template(boto3.client("dynamodb", region_name="us-east-1"), template, "amsg-iam")
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = create_queue_from_template(sqs, template, "amsg-iam-tasks")
        claims = create_queue_from_template(sqs, template, "amsg-iam" + CLAIM_QUEUE_SUFFIX, logical_id="ClaimQueue")
        ssm = boto3.client("ssm", region_name="us-east-1")
        for name, value in (("/iam/master", "b" * 64), ("/iam/vapid", private), ("/iam/token", TOKEN)):
            ssm.put_parameter(Name=name, Value=value, Type="SecureString")
        env = {
            "AMSG_TABLE_NAME": "amsg-iam",
            "AMSG_QUEUE_URL": queue.url,
            "AMSG_CLAIM_QUEUE_URL": claims.url,
            "AMSG_CLAIM_PAGE_SIZE": "2",  # claim jobs of two: a chain of pages (each job sends the next)
            "AMSG_DYNAMO_STATEMENTS": "off",  # moto runs no conditional PartiQL: test_statement_permissions.py
            # the batched claims' calls are a superset of the single ones' (UpdateItem): the role covers both modes
            "AMSG_CLAIM_WRITES": "transaction",
            "AMSG_MASTER_KEY_PARAM": "/iam/master",
            "AMSG_VAPID_PRIVATE_KEY_PARAM": "/iam/vapid",
            "AMSG_CLIENT_TOKEN_PARAM": "/iam/token",
            "AMSG_VAPID_PUBLIC_KEY": public,
            "AMSG_VAPID_EMAIL": "ops@example.test",
            "AMSG_PUSH_PACING_MS": "0",
            "AMSG_CLIENT_STATE_TTL": '{"short": 1}',
            "AMSG_HOOKS_MODULE": "tests.support.hooks_serialize",  # serialized claims take a group lock
        }
        with record_aws_calls() as recorder:
            world = journey_world(env, recorder, push, llm, queue)
            api = WireClient(world.transport, user_id=str(uuid.uuid4()), server_token=TOKEN)
            _ok(api.request("POST", "/init-tenant"))
            env_ns = types.SimpleNamespace(
                api=api,
                push=push,
                llm=llm,
                sandboxes=world.sandboxes,
                tick=world.tick,
                drain=world.drain,
                table="amsg-iam",
                user_partition=f"U#{api.user_id}",
            )
            _journey(env_ns)
        runtime.use(None)
    calls: dict[str, list[Call]] = defaultdict(list)
    for call in recorder.calls:
        calls[call.function].append(call)
    yield dict(calls)


def journey_world(
    env: dict[str, str], recorder: Any, push: Any, llm: Any, queue: Any, *, prefix: str = ""
) -> types.SimpleNamespace:
    """The handlers as their functions: an API transport, the tick and a queue drain, each call attributed to the
    function that makes it, in that function's own sandbox (``prefix``: the route prefix the clients omit)."""
    from urllib.parse import urlsplit

    from tests.support.engine_harness import EngineHarness
    from tests.support.inprocess import InProcessApi, LambdaContext

    sandboxes = _Sandboxes(env, recorder)

    class Api(InProcessApi):
        def __call__(self, method: str, path: str, headers: dict[str, str], body: bytes | None):
            function = self.route_for(method, urlsplit(path).path).function_logical_id
            sandboxes.enter(function)
            with recorder.acting_as(function):
                return super().__call__(method, prefix + path if path.startswith("/") else path, headers, body)

    harness = EngineHarness(queue.url, queue.arn)

    def tick() -> dict[str, Any]:
        sandboxes.enter("TickFunction")
        with recorder.acting_as("TickFunction"):
            summary = harness.tick()
        for job in claim_jobs():  # what the tick's claimers did, counted as the tick's (as before the fan-out)
            merge_claim_summary(summary, job)
        return summary

    def claim_jobs() -> list[dict[str, Any]]:
        """The claimer takes the tick's claim jobs (and their next pages) off the claim queue, as its event source
        mapping would, until none is left; their summaries."""
        url, done = env.get("AMSG_CLAIM_QUEUE_URL"), []
        while url and (messages := harness.receive(queue_url=url, max_messages=1)):
            sandboxes.enter("ClaimerFunction")
            context = LambdaContext(function_name="claimer", remaining_ms=60_000, aws_request_id="c")
            with recorder.acting_as("ClaimerFunction"):
                result = harness.claimer_module.handler(harness.sqs_event(messages), context)
            assert result["batchItemFailures"] == [], result
            done.append(result["summary"])
            for message in messages:
                harness.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return done

    def drain() -> None:
        while messages := harness.receive():  # receiving and deleting is the event source mapping's
            sandboxes.enter("RunTaskFunction")
            context = LambdaContext(function_name="run_task", remaining_ms=110_000, aws_request_id="r")
            with recorder.acting_as("RunTaskFunction"):
                result = harness.run_module.handler(harness.sqs_event(messages), context)
            assert result == {"batchItemFailures": []}, result
            for message in messages:
                harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=message["ReceiptHandle"])

    return types.SimpleNamespace(
        env=env, transport=Api(), push=push, llm=llm, sandboxes=sandboxes, tick=tick, drain=drain
    )


def merge_claim_summary(summary: dict[str, Any], job: dict[str, Any]) -> None:
    """A claim job's summary added into the tick's: counts summed, lists joined."""
    for name in ("dueTasks", "claimedTasks", "enqueuedTasks"):
        summary[name] += job[name]
    details = summary["details"]
    for name, value in job["details"].items():
        if isinstance(value, int) and isinstance(details.get(name), int):
            details[name] += value
        elif isinstance(value, list) and isinstance(details.get(name), list):
            details[name].extend(value)


def _ok(resp: Any, status: int = 200) -> Any:
    assert resp.status == status, resp.text
    return resp


def _journey(env: Any) -> None:
    """Every route, the tick and run_task for one user (``env.api``), in whichever tenancy mode the env is."""
    api = env.api
    api.init()
    _ok(api.vapid_public_key())
    _ok(api.capabilities())
    _ok(api.request("GET", "/no-such-route"), 404)
    subscription = env.push.subscribe()
    _ok(api.put_subscription(subscription.to_json()))
    _ok(api.get_subscription())
    # a delivery policy with a roomy cap: run_task counts each fire in its send-claim transaction
    _ok(api.put_delivery_policy({"quietHours": None, "caps": [{"scope": "user", "max": 100, "windowMinutes": 60}]}))
    _ok(api.get_delivery_policy())
    # tasks: fixed, LLM with inline key, LLM through a stored credential, instant
    _ok(
        api.put_credentials(
            [
                {
                    "credId": "global/chat",
                    "value": {"apiUrl": env.llm.base_url, "apiKey": "sk-iam-0123456789", "primaryModel": "m"},
                }
            ]
        )
    )
    # cloud-data owners: owned writes carry the owner check in their transactions
    owner = {"type": "character", "id": "iam"}
    _ok(
        api.put_credentials(
            [
                {
                    "credId": "iam/chat",
                    "owner": owner,
                    "value": {"apiUrl": env.llm.base_url, "apiKey": "k", "primaryModel": "m"},
                }
            ]
        )
    )
    _ok(
        api.put_client_state([{"namespace": "owned", "key": "k", "value": "v", "updatedAt": T0_MS - 1, "owner": owner}])
    )
    owned = _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "o",
                "firstSendTime": "2030-06-01T00:00:00.000Z",
                "owner": owner,
            }
        ),
        201,
    ).data
    _ok(api.update(owned["uuid"], {"userMessage": "p"}))
    _ok(api.get_credentials())
    fixed = _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "a。b",
                "firstSendTime": FIRST,
                "recurrenceType": "daily",
            }
        ),
        201,
    ).data
    env.llm.reply_reasoning("你好！", "thinking")
    _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "prompted",
                "userMessage": None,
                "completePrompt": "x",
                "firstSendTime": FIRST,
                "credRefs": {"chat": "global/chat"},
                "metadata": {"group": "g"},
            }
        ),
        201,
    )
    _ok(
        # two segments: the first is claimed with the append, the second on its own (a condition check)
        api.schedule(
            {"contactName": "Rei", "messageType": "instant", "userMessage": "now。again", "firstSendTime": FIRST}
        ),
        200,
    )
    # payloads larger than one item are stored as parts (written, read, replaced and deleted in batches)
    big = "长" * 120_000
    env.llm.reply_content("收到。")
    _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "prompted",
                "userMessage": None,
                "completePrompt": big,
                "firstSendTime": FIRST,
                "apiUrl": env.llm.base_url,
                "apiKey": "sk-iam-0123456789",
                "primaryModel": "m",
            }
        ),
        201,
    )
    large = _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": big,
                "firstSendTime": "2030-06-01T00:00:00.000Z",
            }
        ),
        201,
    ).data
    _ok(api.get_message(large["uuid"]))
    _ok(api.update(large["uuid"], {"userMessage": big + "。"}))
    _ok(api.cancel(large["uuid"]))
    large = _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": big,
                "firstSendTime": "2030-06-01T00:00:00.000Z",
            }
        ),
        201,
    ).data
    _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "x",
                "firstSendTime": "2030-06-01T00:00:00.000Z",
                "supersedesUuid": large["uuid"],
            }
        ),
        201,
    )
    doomed = _ok(
        api.schedule({"contactName": "Rei", "messageType": "fixed", "userMessage": "x", "firstSendTime": FIRST}), 201
    ).data
    _ok(api.list_messages())
    _ok(api.get_message(fixed["uuid"]))
    _ok(api.update(fixed["uuid"], {"userMessage": "c。d"}))
    _ok(api.cancel(doomed["uuid"]))
    # client state ("short" expires after a day: the tick's housekeeping deletes it)
    old = T0_MS - 60_000
    state = [
        {"namespace": "ns", "key": "k", "value": big, "updatedAt": old},
        {"namespace": "short", "key": "k", "value": big, "updatedAt": old},
    ]
    assert _ok(api.put_client_state(state)).data["upserted"] == 2
    _ok(api.get_client_state("ns"))
    _ok(api.client_state_namespaces())
    # a hundred sentences: too many outbox rows for one transaction, so run_task looks for the batch in the
    # outbox (outbox_by_task) and appends through the general path (counter read, batched row reads)
    _ok(
        api.schedule(
            {"contactName": "Rei", "messageType": "fixed", "userMessage": "嗯。" * 100, "firstSendTime": FIRST}
        ),
        201,
    )
    # delivery: the tick claims, run_task delivers
    env.sandboxes.now_ms = T0_MS + 61_000
    summary = env.tick()
    assert summary["claimedTasks"] == 4, summary
    env.drain()
    assert len(env.push.received) >= 3
    entries, _ = api.outbox_sync()
    assert entries
    _ok(api.outbox_ack([entries[0]["messageId"]]))
    _ok(api.outbox_delete({"messageIds": [entries[-1]["messageId"]]}))
    # a push service that says "gone": a permanent failure
    _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "gone",
                "firstSendTime": "2029-12-31T00:03:00.000Z",
                "metadata": {"group": "g"},
            }
        ),
        201,
    )
    env.push.set_status(subscription.endpoint_id, 410)
    env.sandboxes.now_ms = T0_MS + 181_000
    env.tick()
    env.drain()
    _ok(api.put_subscription(env.push.subscribe().to_json()))
    # three days later: stale tasks are settled by the tick (one-shot expired, daily fast-forwarded) and the
    # expired client state is cleaned up; ten days later the settled tasks are deleted
    _ok(
        api.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": "late",
                "firstSendTime": "2029-12-31T00:05:00.000Z",
            }
        ),
        201,
    )
    env.sandboxes.now_ms = T0_MS + 3 * 86_400_000
    summary = env.tick()
    assert summary["details"]["staleTasks"], summary
    assert summary["details"]["housekeeping"]["expiredStateEntries"] >= 1, summary
    env.drain()
    _ok(api.delete_delivery_policy())
    env.sandboxes.now_ms = T0_MS + 11 * 86_400_000
    summary = env.tick()
    assert summary["details"]["housekeeping"]["deletedSettledTasks"] >= 1, summary
    env.drain()
    _ok(api.delete_client_state_namespace("ns"))
    _ok(api.clear_client_state())
    cred = {"apiUrl": env.llm.base_url, "apiKey": "sk-iam-0123456789", "primaryModel": "m"}
    _ok(api.put_credentials([{"credId": f"global/c{i}", "value": cred} for i in range(3)]))
    _ok(api.delete_credentials({"credIds": ["global/chat"]}))
    _ok(api.delete_credentials({"credIdPrefix": "global/c1"}))
    # cloud data: inventory snapshot and its next page, owner state, and a restore of a retired owner (retired
    # here by writing its owner item the way a retirement does)
    # a value stored as parts: the retirement below deletes its part items in a batch
    big = {"namespace": "owned", "key": "big", "value": "v" * 400_000, "updatedAt": T0_MS - 1, "owner": owner}
    _ok(api.put_client_state([big]))
    page = _ok(api.request("GET", "/cloud-data/resources?limit=1")).data
    _ok(api.request("GET", f"/cloud-data/resources?limit=1&cursor={page['nextCursor']}"))
    _ok(api.request("GET", "/cloud-data/summary"))
    boto3.resource("dynamodb", region_name="us-east-1").Table(env.table).put_item(
        Item={
            "PK": env.user_partition,
            "SK": "W#" + owner_ref("character", "iam"),
            "owner_type": "character",
            "owner_id": "iam",
            "active": False,
            "generation": 1,
            "updated_at": T0_MS,
        }
    )
    _ok(api.request("GET", "/cloud-data/owners"))
    _ok(api.request("GET", "/cloud-data/owner?ownerType=character&ownerId=iam"))
    _ok(api.send_encrypted("POST", "/cloud-data/owner", {"action": "restore", "owner": owner}))
    plan = _ok(api.send_encrypted("POST", "/cloud-data/cleanup-plans", {"mode": "retire-owner", "owner": owner})).data
    op = _ok(
        api.send_encrypted("POST", "/cloud-data/cleanup-operations", {"planId": plan["id"], "idempotencyKey": "k"})
    )
    assert op.data["status"] == "completed", op.data
    # a retirement larger than one step: the API takes the first step, the tick resumes the operation (its
    # lease, progress and resource deletes in transactions, under the user's key)
    other = {"type": "character", "id": "iam-big"}
    states = [
        {"namespace": "big", "key": f"k{i}", "value": "v", "updatedAt": T0_MS - 1, "owner": other} for i in range(30)
    ]
    _ok(api.put_client_state(states))
    plan = _ok(api.send_encrypted("POST", "/cloud-data/cleanup-plans", {"mode": "retire-owner", "owner": other})).data
    big_op = _ok(
        api.send_encrypted("POST", "/cloud-data/cleanup-operations", {"planId": plan["id"], "idempotencyKey": "b"})
    )
    assert big_op.data["status"] == "pending", big_op.data
    summary = env.tick()
    assert summary["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 1, summary
    _ok(api.request("GET", "/cloud-data/cleanup-operations"))
    _ok(api.request("GET", f"/cloud-data/cleanup-operations/{op.data['id']}"))
    _ok(api.delete_credentials({"all": True}))
    _ok(api.outbox_delete({"all": True}))
    _ok(api.delete_subscription())


def test_the_table_lists_exactly_the_template_functions():
    tpl = project_template()
    assert set(load_permissions()) == set(functions(tpl))


@pytest.mark.parametrize("function", sorted(load_permissions()))
def test_the_template_grants_exactly_the_table(function):
    tpl = project_template()
    perms, _ = granted(tpl, function)
    platform = {p for p in perms if p.startswith("logs:") or p in EVENT_SOURCES.get(function, set())}
    expected = needs_of(load_permissions()[function])
    assert {p for p in perms - platform if p not in expected} == set(), (
        "granted in template.yaml but not in functions/permissions.toml"
    )
    assert {p for p in expected if p not in perms} == set(), (
        "in functions/permissions.toml but not granted in template.yaml"
    )


def test_only_run_task_and_the_claimer_poll_a_queue_and_their_roles_are_scoped():
    tpl = project_template()
    for function in functions(tpl):
        perms, conditions = granted(tpl, function)
        sqs_event = any(
            e.get("Type") == "SQS" for e in (tpl["Resources"][function]["Properties"].get("Events") or {}).values()
        )
        assert sqs_event == (function in EVENT_SOURCES), function
        for polled, source in EVENT_SOURCES.items():  # each polls its own queue only
            assert (perms & source == source) == (function == polled), function
        if sqs_event:  # its own role: logs only to its own log group, tracing only when enabled
            group = tpl["Resources"][function]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
            assert {p for p in perms if p.startswith("logs:")} == {
                f"logs:CreateLogStream <unrecognised resource {{'Fn::GetAtt': ['{group}', 'Arn']}}>",
                f"logs:PutLogEvents <unrecognised resource {{'Fn::GetAtt': ['{group}', 'Arn']}}>",
            }
            assert "TracingEnabled" in conditions


def test_generated_roles_write_logs_only_to_the_stacks_function_log_groups():
    """SAM gives every role it generates AWSLambdaBasicExecutionRole (logs on any log group); the boundary is
    what narrows it, so it must cover every such role, leave non-log actions to the role, and name exactly
    the log groups the functions log to."""
    tpl = project_template()
    boundary_ref = function_property(tpl, next(iter(functions(tpl))), "PermissionsBoundary")
    assert boundary_ref == {"Ref": "FunctionBoundary"}
    for name in functions(tpl):  # a function with its own role scopes its logs itself (run_task)
        assert "PermissionsBoundary" not in (tpl["Resources"][name].get("Properties") or {}), name
    statements = {
        s["Sid"]: s for s in tpl["Resources"]["FunctionBoundary"]["Properties"]["PolicyDocument"]["Statement"]
    }
    assert set(statements) == {"RoleDecidesTheRest", "StackLogGroupsOnly"}
    rest, logs = statements["RoleDecidesTheRest"], statements["StackLogGroupsOnly"]
    assert rest["Effect"] == "Allow" and rest["NotAction"] == "logs:*" and "Action" not in rest
    assert logs["Action"] == ["logs:CreateLogStream", "logs:PutLogEvents"]
    function_groups = {function_property(tpl, name, "LoggingConfig")["LogGroup"]["Ref"] for name in functions(tpl)}
    assert {r["Fn::GetAtt"][0] for r in logs["Resource"]} == function_groups
    assert all(r["Fn::GetAtt"][1] == "Arn" for r in logs["Resource"])


def test_the_client_token_is_granted_only_when_configured():
    tpl = project_template()
    for function, table in load_permissions().items():
        _, conditions = granted(tpl, function)
        # and only on the single line: the multi-tenant line has no shared client token (test_iam_multi.py)
        assert ("SingleTenantClientToken" in conditions) == ("client_token" in table.get("secrets", [])), function


@JOURNEY
def test_every_call_of_the_journey_is_granted(observed):
    table = load_permissions()
    missing = {
        fn: sorted(set().union(*(permissions_of_call(c) for c in calls)) - needs_of(table.get(fn, {})))
        for fn, calls in observed.items()
        if fn != "-"
    }
    assert {fn: perms for fn, perms in missing.items() if perms} == {}, (
        "calls functions/permissions.toml does not allow: add them there and to the function's policy in template.yaml"
    )


@JOURNEY
def test_every_granted_permission_is_used_by_the_journey(observed):
    table = load_permissions()
    unused = {}
    for fn, entry in table.items():
        used = set().union(*(permissions_of_call(c) for c in observed.get(fn, [])))
        unused[fn] = sorted(needs_of(entry) - used - STATEMENT_PERMISSIONS)  # those: on DynamoDB Local
    assert {fn: perms for fn, perms in unused.items() if perms} == {}, (
        "permissions no call needed: remove them from functions/permissions.toml and template.yaml"
    )


@JOURNEY
def test_the_journey_reached_every_function(observed):
    silent = set(load_permissions()) - set(observed)
    # the 404 route touches nothing; send-notifications is a route of the multi-tenant line only
    assert silent == {"NotFoundFunction", "SendNotificationsFunction"}
