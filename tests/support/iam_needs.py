"""What each function needs, in the words of ``functions/permissions.toml``, and what one recorded AWS call
needs (the IAM tests hold the template, the table and the journeys' calls to each other)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tests.support.aws_calls import Call
from tests.support.template import REPO_ROOT

PERMISSIONS_FILE = REPO_ROOT / "functions" / "permissions.toml"
SSM_NAMES = {"/iam/master": "master_key", "/iam/vapid": "vapid_private_key", "/iam/token": "client_token"}
TRANSACT_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
EVENT_SOURCE = {"sqs:ReceiveMessage queue", "sqs:DeleteMessage queue", "sqs:GetQueueAttributes queue"}
CLAIM_EVENT_SOURCE = {f"{p.split()[0]} claim_queue" for p in EVENT_SOURCE}
SQS_ACTIONS = {"SendMessageBatch": "SendMessage", "SendMessage": "SendMessage"}
# the queues each SQS-triggered function polls (its event source mapping's, not the function's, calls)
EVENT_SOURCES = {"RunTaskFunction": EVENT_SOURCE, "ClaimerFunction": CLAIM_EVENT_SOURCE}
CLAIM_QUEUE_SUFFIX = "-claims"  # the journeys' claim queue names end so (what an SQS call's QueueUrl names)


# a PartiQL statement is authorised by its verb (the first word)
PARTIQL_ACTIONS = {
    "UPDATE": "PartiQLUpdate",
    "DELETE": "PartiQLDelete",
    "INSERT": "PartiQLInsert",
    "SELECT": "PartiQLSelect",
}
# the actions the moto journeys cannot observe (moto runs no conditional PartiQL; the table's single writes go one
# UpdateItem / DeleteItem each there): tests/ddb_local/test_statement_permissions.py proves them on DynamoDB Local
STATEMENT_PERMISSIONS = {f"dynamodb:{action} table" for action in PARTIQL_ACTIONS.values()}


def _statement_action(statement: str) -> str:
    return PARTIQL_ACTIONS[statement.split(None, 1)[0].upper()]


def load_permissions(path: Path = PERMISSIONS_FILE) -> dict[str, dict[str, Any]]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def needs_of(table: dict[str, Any]) -> set[str]:
    """One function's table entry as permission strings ("dynamodb:GetItem table", "ssm:GetParameter master_key")."""
    out = {f"dynamodb:{action} table" for action in table.get("table", [])}
    out |= {f"dynamodb:Query index/{name}" for name in table.get("indexes", [])}
    out |= {f"ssm:GetParameter {name}" for name in table.get("secrets", [])}
    out |= {f"sqs:{action} queue" for action in table.get("queue", [])}
    out |= {f"sqs:{action} claim_queue" for action in table.get("claim_queue", [])}
    return out


def permissions_of_call(call: Call) -> set[str]:
    """The IAM permissions one recorded AWS call needs (transactions are authorised per item)."""
    p = call.params
    if call.service == "dynamodb":
        if call.operation == "TransactWriteItems":
            return {f"dynamodb:{TRANSACT_ITEM_ACTIONS[k]} table" for item in p["TransactItems"] for k in item}
        if call.operation == "BatchExecuteStatement":
            return {f"dynamodb:{_statement_action(s['Statement'])} table" for s in p["Statements"]}
        if call.operation == "TransactGetItems":
            return {"dynamodb:GetItem table"}
        if call.operation in ("Query", "Scan") and p.get("IndexName"):
            return {f"dynamodb:{call.operation} index/{p['IndexName']}"}
        return {f"dynamodb:{call.operation} table"}
    if call.service == "ssm":
        assert call.operation == "GetParameter", call
        return {f"ssm:GetParameter {SSM_NAMES[p['Name']]}"}
    if call.service == "sqs":
        queue = "claim_queue" if str(p.get("QueueUrl", "")).endswith(CLAIM_QUEUE_SUFFIX) else "queue"
        return {f"sqs:{SQS_ACTIONS.get(call.operation, call.operation)} {queue}"}
    raise AssertionError(f"unexpected AWS service in {call}")
