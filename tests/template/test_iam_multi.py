"""Least privilege on the multi-tenant line (docs/tenancy.md#least-privilege), proven by real calls.

The same journey as ``test_iam.py`` (every route, the tick and run_task on moto), here with ``Tenancy=multi``:
init-tenant with ``X-Init-Secret`` makes two tenants, every route runs with a tenant's Bearer token, the request
rate and pending limits are on (their counter items are written), send-notifications runs with a cron token, and
a tenant deletion started the way ``amsg tenants delete`` starts it is carried out by the tick. Every AWS call is
recorded per function, then checked against the policies template.yaml gives each function when its ``Tenancy``
parameter is ``multi`` (every ``Fn::If`` on ``MultiTenant`` resolved, ``dynamodb:LeadingKeys`` conditions
honoured):

1. every call is granted (a missing permission fails here, not in production);
2. every grant is used by some call, or listed in ``UNOBSERVED`` with the reason no journey reaches it.
"""

from __future__ import annotations

import base64
import fnmatch
import os
import re
import types
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.support.aws_calls import Call, record_aws_calls
from tests.support.iam_needs import CLAIM_QUEUE_SUFFIX, TRANSACT_ITEM_ACTIONS
from tests.support.iam_template import SECRET_PARAMETERS, _as_list, _resource
from tests.support.template import functions, project_template
from tests.template.test_iam import _journey, _ok, journey_world


# whole-system journeys, like the e2e ones: `make test` runs them, the fast path `make unit` leaves them out
def JOURNEY(test):
    return pytest.mark.journey(pytest.mark.xdist_group("iam_multi_journey")(test))


STACK = "amsg-iam"
SIGNING_KEY_NAME = f"/amsg/{STACK}/tenant-token-signing-key"
INIT_SECRET_NAME = f"/amsg/{STACK}/init-secret"
INIT_SECRET = "iam-init-secret"
SSM_NAMES = {
    "/iam/master": "master_key",
    "/iam/vapid": "vapid_private_key",
    "/iam/token": "client_token",
    SIGNING_KEY_NAME: "tenant_token_signing_key",
    INIT_SECRET_NAME: "init_secret",
}
STACK_SECRETS = {
    "${AWS::StackName}/tenant-token-signing-key": "tenant_token_signing_key",
    "${AWS::StackName}/init-secret": "init_secret",
}
PLATFORM = ("logs:", "xray:")
NO_VALUE = {"Ref": "AWS::NoValue"}
EVENT_SOURCE = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
POLLED_QUEUES = {"RunTaskFunction": "queue", "ClaimerFunction": "claim_queue"}
# grants no journey can use, with the reason (function, "action resource[leading keys]")
_STATEMENTS_ON_DYNAMODB_LOCAL = (
    "the single writes of a delivered settlement (delivered marks, registry delete) are PartiQL statements; moto runs "
    "no conditional PartiQL, so this journey sends them one request each: tests/ddb_local/test_statement_permissions.py"
)
UNOBSERVED: dict[tuple[str, str], str] = {
    **{
        (function, f"dynamodb:{action} table"): _STATEMENTS_ON_DYNAMODB_LOCAL
        for function in ("RunTaskFunction", "ScheduleMessageFunction")
        for action in ("PartiQLDelete", "PartiQLUpdate")
    },
    **{
        (function, "dynamodb:PartiQLUpdate table"): (
            "a batch of claims is one BatchExecuteStatement of PartiQL UPDATEs (ClaimWrites=single); moto runs no "
            "conditional PartiQL, so this journey claims in transactions: tests/ddb_local/test_claim_statements.py"
        )
        for function in ("ClaimerFunction", "SendNotificationsFunction")
    },
    ("SendNotificationsFunction", "dynamodb:ConditionCheckItem table"): (
        "a serialized claim whose group is still held by another task checks that task's lease in the claim's "
        "transaction; the journey's group has one task (the tick's journey in test_iam.py reaches it)"
    ),
    ("RunTaskFunction", "dynamodb:GetItem table[TENANTS]"): (
        "run_task reads the tenant's record with its task (BatchGetItem); GetItem is the lease heartbeat's "
        "re-check of a long delivery and the read of a message whose claim is no longer current, neither of "
        "which the journey's short deliveries reach"
    ),
}


@dataclass(frozen=True)
class Need:
    """One permission a call needs: an action on a resource, for these partition keys (None: no key applies)."""

    action: str
    resource: str
    keys: frozenset[str] | None = None


@dataclass(frozen=True)
class Grant:
    action: str
    resource: str
    key_patterns: tuple[str, ...] | None = None  # dynamodb:LeadingKeys (IAM wildcards); None: any key

    def allows(self, need: Need) -> bool:
        if (self.action, self.resource) != (need.action, need.resource):
            return False
        if self.key_patterns is None:
            return True
        return need.keys is not None and all(
            any(fnmatch.fnmatchcase(key, pattern) for pattern in self.key_patterns) for key in need.keys
        )

    def __str__(self) -> str:
        keys = "" if self.key_patterns is None else "[" + ",".join(self.key_patterns) + "]"
        return f"{self.action} {self.resource}{keys}"


# --------------------------------------------------------------------------------------------- what calls need


def _pk(value: Any) -> str:
    """A partition key as given to the client (``{"S": ...}``) or to the resource (a plain string)."""
    return str(value["S"]) if isinstance(value, dict) else str(value)


def _query_partition(params: dict[str, Any]) -> str | None:
    """The partition key value a Query's key condition names (a boto3 condition or an expression string)."""
    condition = params.get("KeyConditionExpression")
    if condition is None:
        return None
    if not isinstance(condition, str):
        while condition.expression_operator != "=":  # And(Equals(Key(pk), v), <sort condition>)
            condition = condition._values[0]
        return str(condition._values[1])
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", condition):
        if names.get(left, left) in ("PK", "due_pk", "ret_pk", "work_pk", "ob_pk", "ou_pk"):
            return _pk(values[right])
    return None


def _item_key(entry: dict[str, Any]) -> str:
    return _pk((entry.get("Key") or entry.get("Item"))["PK"])


def needs_of_call(call: Call) -> set[Need]:
    p = call.params
    if call.service == "dynamodb":
        return _dynamodb_needs(call.operation, p)
    if call.service == "ssm":
        assert call.operation == "GetParameter", call
        return {Need("ssm:GetParameter", SSM_NAMES[p["Name"]])}
    if call.service == "sqs":
        action = "SendMessage" if call.operation.startswith("SendMessage") else call.operation  # batches too
        queue = "claim_queue" if str(p.get("QueueUrl", "")).endswith(CLAIM_QUEUE_SUFFIX) else "queue"
        return {Need(f"sqs:{action}", queue)}
    if call.service == "kms":
        return {Need(f"kms:{call.operation}", "key")}
    raise AssertionError(f"unexpected AWS service in {call}")


def _dynamodb_needs(operation: str, p: dict[str, Any]) -> set[Need]:
    if operation == "TransactWriteItems":
        return {
            Need(f"dynamodb:{TRANSACT_ITEM_ACTIONS[kind]}", "table", frozenset({_item_key(body)}))
            for item in p["TransactItems"]
            for kind, body in item.items()
        }
    if operation == "TransactGetItems":
        return {Need("dynamodb:GetItem", "table", frozenset({_item_key(i["Get"])})) for i in p["TransactItems"]}
    if operation == "BatchWriteItem":
        keys = {
            _item_key(request.get("PutRequest") or request["DeleteRequest"])
            for requests in p["RequestItems"].values()
            for request in requests
        }
        return {Need("dynamodb:BatchWriteItem", "table", frozenset(keys))}
    if operation == "BatchGetItem":
        keys = {_pk(key["PK"]) for spec in p["RequestItems"].values() for key in spec["Keys"]}
        return {Need("dynamodb:BatchGetItem", "table", frozenset(keys))}
    if operation == "Query":
        resource = f"index/{p['IndexName']}" if p.get("IndexName") else "table"
        partition = _query_partition(p)
        return {Need("dynamodb:Query", resource, None if partition is None else frozenset({partition}))}
    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        return {Need(f"dynamodb:{operation}", "table", frozenset({_item_key(p)}))}
    return {Need(f"dynamodb:{operation}", "table")}  # Scan, DescribeTable, DescribeTimeToLive: no key applies


# --------------------------------------------------------------------------------------------- the template


TENANCY_CONDITIONS = {  # template conditions decided by the Tenancy parameter alone (or with it)
    "MultiTenant": lambda multi: multi,
    "SingleTenant": lambda multi: not multi,
    "SingleTenantClientToken": lambda multi: not multi,
}


def _resolve(value: Any, multi: bool) -> Any:
    """``Fn::If`` resolved for ``Tenancy``; any other condition (a parameter of the deployer's) as if it held."""
    if isinstance(value, dict) and "Fn::If" in value:
        cond, yes, no = value["Fn::If"]
        holds = TENANCY_CONDITIONS.get(cond, lambda _multi: True)(multi)
        return _resolve(yes if holds else no, multi)
    return value


def _multi_resource(value: Any) -> str:
    if value == {"Fn::GetAtt": ["TenantKey", "Arn"]}:
        return "key"
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        for suffix, name in STACK_SECRETS.items():
            if value["Fn::Sub"].endswith(":parameter/amsg/" + suffix):
                return name
    return _resource(value)


def _leading_keys(statement: dict[str, Any]) -> tuple[str, ...] | None:
    condition = statement.get("Condition")
    if condition is None:
        return None
    ((operator, test),) = condition.items()
    assert operator in ("ForAllValues:StringEquals", "ForAllValues:StringLike"), statement
    ((key, values),) = test.items()
    assert key == "dynamodb:LeadingKeys", statement
    return tuple(_as_list(values))


def _statement_grants(statement: dict[str, Any], multi: bool) -> set[Grant]:
    assert statement.get("Effect") == "Allow" and "NotAction" not in statement, statement
    keys = _leading_keys(statement)
    return {
        Grant(action, _multi_resource(_resolve(resource, multi)), keys)
        for action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
        if _resolve(resource, multi) != NO_VALUE
    }


def _policy_documents(tpl: dict[str, Any], function: str, multi: bool) -> list[dict[str, Any]]:
    props = tpl["Resources"][function]["Properties"]
    if "Role" in props:
        role = tpl["Resources"][props["Role"]["Fn::GetAtt"][0]]["Properties"]
        attached, docs = list(role.get("ManagedPolicyArns") or []), [p["PolicyDocument"] for p in role["Policies"]]
    else:
        policies = [r for r in (_resolve(p, multi) for p in _as_list(props.get("Policies") or [])) if r != NO_VALUE]
        docs = [p for p in policies if isinstance(p, dict) and "Statement" in p]
        attached = [p for p in policies if p not in docs]
    for ref in (_resolve(r, multi) for r in attached):
        if ref == NO_VALUE or "Fn::Sub" in ref:  # nothing, or an AWS managed policy (tracing)
            continue
        resource = tpl["Resources"][ref["Ref"]]
        assert resource["Type"] == "AWS::IAM::ManagedPolicy", ref
        condition = resource.get("Condition")  # a policy that exists only where its references resolve to it
        assert condition is None or TENANCY_CONDITIONS.get(condition, lambda _multi: True)(multi), ref
        docs.append(resource["Properties"]["PolicyDocument"])
    return docs


def granted_multi(tpl: dict[str, Any], function: str) -> set[Grant]:
    """What the template lets ``function`` do with ``Tenancy=multi``, platform grants (logs, tracing, the SQS
    event source) left out."""
    out: set[Grant] = set()
    for doc in _policy_documents(tpl, function, multi=True):
        for statement in _as_list(doc["Statement"]):
            out |= _statement_grants(statement, multi=True)
    polled = POLLED_QUEUES.get(function)  # the event source's actions on the queue the function is triggered by
    return {
        g for g in out if not g.action.startswith(PLATFORM) and not (g.action in EVENT_SOURCE and g.resource == polled)
    }


# --------------------------------------------------------------------------------------------- the journey


@pytest.fixture(scope="module")
def observed() -> Iterator[dict[str, list[Call]]]:
    """Every AWS call each function made in the multi-tenant journey ("-" is the operator's CLI)."""
    from amsg import runtime
    from amsg.vapid import generate_vapid_keys
    from amsg_local.tables import create_queue_from_template, create_tables_from_template
    from amsg_local.template import load_template

    from tests.support.fake_llm import FakeLlmServer
    from tests.support.fake_push import FakePushService

    public, private = generate_vapid_keys()
    with mock_aws(), FakePushService(vapid_public_key=public) as push, FakeLlmServer() as llm:
        template = load_template()
        create_tables_from_template(boto3.client("dynamodb", region_name="us-east-1"), template, STACK)
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = create_queue_from_template(sqs, template, f"{STACK}-tasks")
        claims = create_queue_from_template(sqs, template, STACK + CLAIM_QUEUE_SUFFIX, logical_id="ClaimQueue")
        key_arn = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
        ssm = boto3.client("ssm", region_name="us-east-1")
        secrets = {
            "/iam/master": "b" * 64,
            "/iam/vapid": private,
            "/iam/token": "iam-token",
            SIGNING_KEY_NAME: "iam-signing-key-0123456789",
            INIT_SECRET_NAME: INIT_SECRET,
        }
        for name, value in secrets.items():
            ssm.put_parameter(Name=name, Value=value, Type="SecureString")
        env = {
            "AMSG_TABLE_NAME": STACK,
            "AMSG_QUEUE_URL": queue.url,
            "AMSG_CLAIM_QUEUE_URL": claims.url,
            "AMSG_CLAIM_PAGE_SIZE": "2",
            "AMSG_DYNAMO_STATEMENTS": "off",  # moto runs no conditional PartiQL: test_statement_permissions.py
            "AMSG_CLAIM_WRITES": "transaction",  # the batched claims: their calls include the single ones
            "AMSG_MASTER_KEY_PARAM": "/iam/master",
            "AMSG_VAPID_PRIVATE_KEY_PARAM": "/iam/vapid",
            "AMSG_CLIENT_TOKEN_PARAM": "/iam/token",  # configured: the multi-tenant line must not need it
            "AMSG_VAPID_PUBLIC_KEY": public,
            "AMSG_VAPID_EMAIL": "ops@example.test",
            "AMSG_PUSH_PACING_MS": "0",
            "AMSG_CLIENT_STATE_TTL": '{"short": 1}',
            "AMSG_HOOKS_MODULE": "tests.support.hooks_serialize",
            "AMSG_TENANCY": "multi",
            "AMSG_KMS_KEY_ID": key_arn,
            "AMSG_TENANT_TOKEN_SIGNING_KEY_PARAM": SIGNING_KEY_NAME,
            "AMSG_INIT_SECRET_PARAM": INIT_SECRET_NAME,
            "AMSG_TENANT_RATE_LIMIT_RPS": "100000",  # every request counts in its tenant's rate window
            "AMSG_TENANT_MAX_PENDING_TASKS": "1000",
        }
        with record_aws_calls() as recorder, pytest.MonkeyPatch.context() as patch:
            # every tick is every tenant's turn for its sweeps and cleanup read (the same calls, not spread out)
            patch.setattr("amsg.engine.tick.TENANT_HOUSEKEEPING_EVERY", 1)
            patch.setattr("amsg.engine.tick.TENANT_CLEANUP_EVERY", 1)
            _run(_world(env, recorder, push, llm, queue))
        runtime.use(None)
    calls: dict[str, list[Call]] = defaultdict(list)
    for call in recorder.calls:
        calls[call.function].append(call)
    yield dict(calls)


def _world(env: dict[str, str], recorder: Any, push: Any, llm: Any, queue: Any) -> types.SimpleNamespace:
    world = journey_world(env, recorder, push, llm, queue, prefix="/api/v1")
    world.table = STACK
    return world


def _tenant(world: types.SimpleNamespace) -> dict[str, Any]:
    from tests.support.wire_client import WireClient

    anonymous = WireClient(world.transport, user_id="-")
    headers = {"Content-Type": "application/json", "X-Init-Secret": INIT_SECRET}
    return _ok(anonymous.request("POST", "/init-tenant", headers=headers, body="{}", user=False), 201).data


def _run(world: types.SimpleNamespace) -> None:
    from amsg import runtime
    from amsg.engine.tenant_deletion import DELETION_GRACE_MS, start_tenant_deletion
    from amsg.timeutil import iso_from_ms

    from tests.support.wire_client import WireClient

    a, b = _tenant(world), _tenant(world)
    user_id = str(uuid.uuid4())
    bearer = {"Authorization": f"Bearer {a['tenantToken']}"}
    world.api = WireClient(world.transport, user_id=user_id, extra_headers=bearer)
    world.user_partition = f"N#{a['tenantId']}#U#{user_id}"
    _journey(world)  # tenant A: every route, the tick's lanes and housekeeping, run_task

    # tenant B: its cron webhook (send-notifications) claims and enqueues, run_task delivers in B's scope
    bearer_b = {"Authorization": f"Bearer {b['tenantToken']}"}
    client_b = WireClient(world.transport, user_id=user_id, extra_headers=bearer_b)
    client_b.init()
    _ok(client_b.put_subscription(world.push.subscribe().to_json()))
    # a serialized task due now, and two that went stale (a one-shot expires, a daily is fast-forwarded); large
    # payloads are stored as parts, read (Query) and removed (batches) with their task
    soon, due = world.sandboxes.now_ms + 60_000, world.sandboxes.now_ms + 2 * 3_600_000
    big = base64.b64encode(os.urandom(240_000)).decode()  # incompressible: stored as parts
    for first, extra in (
        (due, {"metadata": {"group": "g"}}),
        (soon, {"userMessage": big}),
        (soon, {"recurrenceType": "daily"}),
    ):
        body = {"contactName": "Rei", "messageType": "fixed", "userMessage": "b", "firstSendTime": iso_from_ms(first)}
        _ok(client_b.schedule({**body, **extra}), 201)
    world.sandboxes.now_ms = due + 1_000
    cron = WireClient(world.transport, user_id="-", extra_headers={"Authorization": f"Bearer {b['cronToken']}"})
    summary = _ok(cron.request("POST", "/send-notifications", user=False)).body["data"]
    assert summary["successCount"] == 1 and len(summary["details"]["staleTasks"]) == 2, summary
    received = len(world.push.received)
    world.drain()
    assert len(world.push.received) > received

    # the operator deletes tenant A (as `amsg tenants delete` does, with the operator's credentials: "-"), and
    # the tick carries it out: a pass, then, once the grace period is over, the last pass and the record
    operator = runtime.build_context(world.env)
    operator.clock = types.SimpleNamespace(now_ms=lambda: world.sandboxes.now_ms)
    start_tenant_deletion(operator, a["tenantId"])
    assert world.tick()["details"]["housekeeping"]["tenantItemsDeleted"] > 0
    world.sandboxes.now_ms += DELETION_GRACE_MS + 60_000
    assert world.tick()["details"]["housekeeping"]["tenantDeletionsFinished"] == 1
    assert _ok(client_b.list_messages()).data is not None  # B is untouched
    runtime.use(None)


# --------------------------------------------------------------------------------------------- the proofs


@JOURNEY
def test_every_call_of_the_multi_tenant_journey_is_granted(observed):
    tpl = project_template()
    missing: dict[str, list[str]] = {}
    for function, calls in observed.items():
        if function == "-":
            continue
        grants = granted_multi(tpl, function)
        needs = set().union(*(needs_of_call(c) for c in calls))
        lacking = sorted(
            f"{n.action} {n.resource} {sorted(n.keys or [])}" for n in needs if not any(g.allows(n) for g in grants)
        )
        if lacking:
            missing[function] = lacking
    assert missing == {}, "calls the template does not allow with Tenancy=multi: grant them in template.yaml"


@JOURNEY
def test_every_multi_tenant_grant_is_used_by_the_journey(observed):
    tpl = project_template()
    unused: dict[str, list[str]] = {}
    for function in functions(tpl):
        needs = set().union(*(needs_of_call(c) for c in observed.get(function, [])))
        idle = sorted(
            str(g)
            for g in granted_multi(tpl, function)
            if not any(g.allows(n) for n in needs) and (function, str(g)) not in UNOBSERVED
        )
        if idle:
            unused[function] = idle
    assert unused == {}, "granted with Tenancy=multi but never needed: remove from template.yaml (or list why)"


@JOURNEY
def test_the_multi_tenant_journey_reached_every_function(observed):
    assert set(functions(project_template())) - set(observed) == {"NotFoundFunction"}


def test_the_unobserved_list_names_real_grants():
    tpl = project_template()
    for function, grant in UNOBSERVED:
        assert grant in {str(g) for g in granted_multi(tpl, function)}, (function, grant)


def test_every_secret_of_the_template_is_named():
    assert set(SECRET_PARAMETERS.values()) <= set(SSM_NAMES.values())


def _takes_a_push(action: dict[str, Any]) -> bool:
    """A transaction action that claims an outbox row for sending (``sending_at``)."""
    if "Update" in action:
        return "sending_at = :t" in action["Update"].get("UpdateExpression", "")
    item = action.get("Put", {}).get("Item", {})
    return "sending_at" in item and "ob_lsk" in item


@JOURNEY
def test_every_push_claim_checks_the_tenant_in_its_own_transaction(observed):
    """No push once a tenant's deletion has started: each claim of a push carries the tenant's record check."""
    claims = [
        call.params["TransactItems"]
        for function in ("RunTaskFunction", "ScheduleMessageFunction")
        for call in observed.get(function, [])
        if call.operation == "TransactWriteItems" and any(_takes_a_push(a) for a in call.params["TransactItems"])
    ]
    assert len(claims) > 10
    for actions in claims:
        checks = [a["ConditionCheck"] for a in actions if "ConditionCheck" in a]
        assert any(_item_key(check) == "TENANTS" for check in checks), actions


def test_the_single_line_has_no_tenant_fence():
    from amsg.adapters.dynamo.keys import SINGLE, tenant_space
    from amsg.adapters.dynamo.tenants import active_fence

    assert active_fence(SINGLE) is None
    assert active_fence(tenant_space("t"))["ConditionCheck"]["Key"] == {"PK": "TENANTS", "SK": "t"}
