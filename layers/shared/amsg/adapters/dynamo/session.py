"""The session the table's DynamoDB client is built from.

botocore checks that a service exists by listing every service directory of its data (~420, each listed and
probed for the model file) before loading a model, and does it twice per client (the service model and its
endpoint rules). That scan was the largest part of building the client after parsing the JSON models, on
every cold start of a route that reads the table (docs/cold-start.md). This session's loader serves the one
service we build clients for and skips the scan; everything else (search paths, ``AWS_DATA_PATH``, model
files, versions) is botocore's own. A missing model still fails, when it is loaded.

The session is a boto3 session around that botocore session, so that tools hooking boto3 sessions (the
request-count benches) see the client.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import boto3
import botocore.session
from botocore.loaders import Loader

SERVICE = "dynamodb"


class OneServiceLoader(Loader):  # type: ignore[misc]  # botocore ships no types
    """botocore's data loader for a session that only builds ``SERVICE`` clients."""

    def list_available_services(self, type_name: str) -> list[str]:
        return [SERVICE]


def dynamodb_session() -> boto3.session.Session:
    core = botocore.session.Session()
    data_path = core.get_config_variable("data_path")  # AWS_DATA_PATH, as botocore's own loader reads it
    extra = [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)] if data_path else []
    core.register_component("data_loader", OneServiceLoader(extra_search_paths=extra))
    return boto3.session.Session(botocore_session=core)


def _transaction_tables(args: dict[str, Any]) -> list[str] | None:
    items = args.get("TransactItems")
    if not isinstance(items, list):
        return None
    kinds = ("ConditionCheck", "Put", "Delete", "Update")
    tables = [item[kind].get("TableName") for item in items for kind in kinds if isinstance(item.get(kind), dict)]
    return [table for table in tables if table is not None]


def _request_tables(args: dict[str, Any]) -> list[str] | None:
    items = args.get("RequestItems")
    return list(items) if isinstance(items, dict) else None


# DynamoDB's endpoint rules take the tables a request names (``ResourceArnList``) from the request, and botocore
# computes it with a JMESPath walk of every call's items, ~7 µs per transaction action here (~0.2 ms of run_task's
# CPU per delivered task, docs/performance.md). These compute the same lists directly; the paths are the model's.
_DIRECT: dict[str, Callable[[dict[str, Any]], list[str] | None]] = {
    "keys(RequestItems)": _request_tables,
    "TransactItems[*].[ConditionCheck.TableName, Put.TableName, Delete.TableName, Update.TableName][]": (
        _transaction_tables
    ),
}


def direct_context_params(client: Any) -> bool:
    """Make ``client`` compute the known operation-context parameters without JMESPath; any other path, or an
    argument of another shape, still goes to botocore's own walk. False when this botocore has no such hook
    (then nothing changes)."""
    resolver: Any = getattr(client, "_ruleset_resolver", None)
    walk = getattr(resolver, "_resolve_param_as_operation_context_param", None)
    if walk is None:
        return False

    def resolve(param_name: str, operation_model: Any, call_args: dict[str, Any]) -> Any:
        params = operation_model.operation_context_parameters  # an empty list for an operation without any
        if param_name not in params:
            return None
        direct = _DIRECT.get(params[param_name]["path"])
        value = direct(call_args) if direct is not None else None
        return value if value is not None else walk(param_name, operation_model, call_args)

    resolver._resolve_param_as_operation_context_param = resolve
    return True
