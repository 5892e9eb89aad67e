"""The table's client computes the tables a request names (the endpoint rules' ``ResourceArnList``) without
botocore's JMESPath walk (session.py): the same values for every shape of request, for the model's own paths."""

from __future__ import annotations

from typing import Any

import jmespath
import pytest
from amsg.adapters.dynamo.session import _DIRECT, direct_context_params
from amsg.adapters.dynamo.table import DynamoTable
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

KEYS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
KINDS = ("ConditionCheck", "Put", "Delete", "Update", "Get")
tables = st.sampled_from(["t", "other", "a-b.c"])
actions = st.fixed_dictionaries(
    {},
    optional={kind: st.fixed_dictionaries({}, optional={"TableName": tables, "Key": st.just({})}) for kind in KINDS},
)
transactions = st.one_of(st.fixed_dictionaries({"TransactItems": st.lists(actions, max_size=8)}), st.just({}))
batch_gets = st.fixed_dictionaries({"RequestItems": st.dictionaries(tables, st.just({"Keys": []}), max_size=3)})


def _client() -> Any:
    return DynamoTable("t", region="us-east-1", client_options=KEYS).wire


def test_the_direct_paths_are_the_models_own():
    """A botocore whose model names other paths would fall back to its walk: this says so first."""
    model = _client().meta.service_model
    paths = {
        name: model.operation_model(name).operation_context_parameters["ResourceArnList"]["path"]
        for name in ("TransactWriteItems", "BatchGetItem", "BatchWriteItem")
    }
    assert set(paths.values()) <= set(_DIRECT), paths


@given(args=st.one_of(transactions, batch_gets))
@settings(max_examples=examples(300), deadline=None)
def test_the_client_resolves_the_same_tables_as_the_jmespath_walk(args):
    client = _client()
    name = "TransactWriteItems" if "RequestItems" not in args else "BatchGetItem"
    operation = client.meta.service_model.operation_model(name)
    path = operation.operation_context_parameters["ResourceArnList"]["path"]
    resolver = client._ruleset_resolver
    direct = resolver._resolve_param_as_operation_context_param("ResourceArnList", operation, args)
    assert direct == jmespath.search(path, args)


def test_the_hook_is_installed_and_absent_hooks_change_nothing():
    client = _client()
    assert getattr(client._ruleset_resolver._resolve_param_as_operation_context_param, "__name__", "") == "resolve"
    assert direct_context_params(object()) is False


@pytest.mark.parametrize("operation", ["TransactWriteItems", "BatchGetItem"])
def test_endpoint_resolution_sees_the_same_parameters(operation):
    client = _client()
    model = client.meta.service_model.operation_model(operation)
    args: dict[str, Any] = (
        {"TransactItems": [{"Put": {"TableName": "t", "Item": {}}}, {"ConditionCheck": {"TableName": "u"}}]}
        if operation == "TransactWriteItems"
        else {"RequestItems": {"t": {"Keys": []}}}
    )
    params = client._ruleset_resolver._get_provider_params(model, args, {})
    assert params["ResourceArnList"] == (["t", "u"] if operation == "TransactWriteItems" else ["t"])
