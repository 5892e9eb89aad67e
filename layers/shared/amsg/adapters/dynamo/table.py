"""Low-level access to the table: one lazily built botocore client, transactions, and large values.

The hot calls of delivery (``TransactWriteItems`` and ``BatchGetItem``: the tick's claims, run_task's reads,
appends and settlements) convert their attribute values here, field by field, and the adapters' item calls go
through a resource-compatible table over the same client (plain_table.py): boto3's resource layer walks the
whole request and response model for every call, was most of a transaction's client-side CPU
(docs/performance.md) and took a cold start's time to build (docs/cold-start.md). Values convert exactly as
the resource layer converts them (boto3's ``TypeSerializer`` / ``TypeDeserializer``).

Large values (task payloads up to ~2 MB of hex, client-state values) are cut into parts written *before*
the item that references them (``<prefix><token>#<index>``), so a reader never sees a half-written value
and a crashed writer leaves only unreferenced parts.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, overload

from botocore.config import Config
from botocore.exceptions import ClientError

from amsg.adapters.dynamo.plain_table import PlainResource, PlainTable, from_wire, to_wire
from amsg.adapters.dynamo.session import direct_context_params, dynamodb_session
from amsg.adapters.dynamo.single_writes import (
    SingleWrite,
    WriteOutcome,
    by_statements,
    distinct_batches,
    one_by_one,
)
from amsg.adapters.dynamo.transport import install as install_transport

# The one large-value limit: a value up to INLINE_CHARS is stored in its item, a longer one as parts of
# PART_CHARS (write_blob); both keep items well below DynamoDB's 400 KB (attribute names and others count too).
PART_CHARS = 350_000
INLINE_CHARS = 350_000
TRANSACTION_RETRIES = 8
RETRYABLE_CANCELLATION = {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
# where a transaction's action carries attribute values (its expressions are strings, never condition objects)
_VALUE_FIELDS = ("Item", "Key", "ExpressionAttributeValues")


def _wire_action(action: dict[str, Any]) -> dict[str, Any]:
    """One ``TransactItems`` entry with its attribute values typed for the wire."""
    ((operation, body),) = action.items()
    if "TableName" not in body:  # the one mistake botocore's validation (off for the wire client) caught here
        raise ValueError(f"a {operation} action without TableName")
    wire = dict(body)
    for field in _VALUE_FIELDS:
        if field in wire:
            wire[field] = to_wire(wire[field])
    return {operation: wire}


class BoundSession(Protocol):
    """Where a thread's transactions and batch reads go while it is bound (coalescing.py's session). Declared
    here so that the table does not depend on the module that depends on it."""

    def call(self, kind: str, payload: list[Any]) -> Any: ...


class TransactionCancelled(Exception):
    """A transaction failed its conditions; ``reasons[i]`` is the code of action i ('None' when it held)."""

    def __init__(self, reasons: list[str], items: list[dict[str, Any] | None]) -> None:
        super().__init__(",".join(reasons))
        self.reasons = reasons
        self.items = items

    @classmethod
    def from_reasons(cls, raw: Sequence[Mapping[str, Any]]) -> TransactionCancelled:
        """From a ``TransactionCanceledException``'s ``CancellationReasons`` (wire-typed items)."""
        reasons = [str(r.get("Code", "None")) for r in raw]
        return cls(reasons, [from_wire(r["Item"]) if r.get("Item") else None for r in raw])

    def failed(self, index: int) -> bool:
        return index < len(self.reasons) and self.reasons[index] == "ConditionalCheckFailed"


@dataclass
class BlobRef:
    token: str
    parts: int


class DynamoTable:
    """One table behind one botocore client per sandbox (built on first use, never at import): the hot paths
    send wire-typed values through it, the adapters' resource-style calls go through :attr:`table` and
    :attr:`resource` (plain_table.py), which convert values the way boto3's resource layer does."""

    def __init__(
        self,
        table_name: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client_options: Mapping[str, str] | None = None,
        statements: bool = True,
    ) -> None:
        self.name = table_name
        # conditional single writes as PartiQL statements, several per request (single_writes.py); off: one
        # UpdateItem / DeleteItem each (moto runs no conditional PartiQL)
        self.statements = statements
        # boto3 client arguments (region, endpoint, keys) the caller states; the explicit parameters win
        self._client_options = {**(client_options or {})}
        if endpoint_url:
            self._client_options["endpoint_url"] = endpoint_url
        if region:
            self._client_options["region_name"] = region
        self._local = threading.local()  # a thread's coalescing session (the lease heartbeat runs in a thread)
        self._wire: Any = None
        self._resource: PlainResource | None = None
        self._table: PlainTable | None = None
        self._lock = threading.Lock()

    def _config(self) -> Config:
        return Config(
            retries={"mode": "standard", "max_attempts": 6},
            connect_timeout=3,
            read_timeout=10,
            parameter_validation=False,
        )

    @property
    def wire(self) -> Any:
        """The table's botocore client (wire-typed values), shared by every thread: botocore clients are
        thread-safe.

        It skips botocore's client-side parameter validation, which walks every typed value again and was the
        largest part of run_task's remaining client CPU. Its requests come only from this class and
        plain_table.py, from values ``TypeSerializer`` typed; DynamoDB validates each request on its side and
        answers ``ValidationException``, as DynamoDB Local does in the tests that drive these paths. Its
        session (session.py) skips botocore's scan of every service's data directory, and its endpoint rules
        get the tables a request names without a JMESPath walk of the request. Its requests travel over the
        lean transport (transport.py) unless ``AMSG_DYNAMO_TRANSPORT=botocore``."""
        if self._wire is None:
            with self._lock:
                if self._wire is None:
                    wire = dynamodb_session().client("dynamodb", config=self._config(), **self._client_options)
                    direct_context_params(wire)
                    install_transport(wire)
                    self._wire = wire
        return self._wire

    @property
    def resource(self) -> PlainResource:
        """The resource-style entry points (``batch_get_item``, ``meta.client``) over :attr:`wire`."""
        if self._resource is None:
            self._resource = PlainResource(self.wire)
        return self._resource

    @property
    def table(self) -> PlainTable:
        """The resource-style ``Table`` (plain values, condition objects) over :attr:`wire`."""
        if self._table is None:
            self._table = self.resource.Table(self.name)
        return self._table

    @property
    def client(self) -> Any:
        """The low-level client, for calls that carry no attribute values (``describe_table``)."""
        return self.wire

    # ---- reads ------------------------------------------------------------------------------------------

    def get(
        self,
        key: dict[str, str],
        *,
        consistent: bool = True,
        projection: str | None = None,
        names: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        kwargs: dict[str, Any] = {"Key": key, "ConsistentRead": consistent}
        if projection:
            kwargs["ProjectionExpression"] = projection
        if names:
            kwargs["ExpressionAttributeNames"] = names
        return self.table.get_item(**kwargs).get("Item")

    def query_all(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every page of a query (Limit applies per page, filters after it)."""
        while True:
            page = self.table.query(**kwargs)
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def query_prefix(self, pk: str, sk_prefix: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item of ``pk`` whose sort key starts with ``sk_prefix`` (consistent); ``kwargs`` may add a
        projection and its attribute names."""
        return self.query_all(
            KeyConditionExpression="PK = :qpk AND begins_with(SK, :qprefix)",
            ExpressionAttributeValues={":qpk": pk, ":qprefix": sk_prefix},
            ConsistentRead=True,
            **kwargs,
        )

    # ---- writes -----------------------------------------------------------------------------------------

    def bind_session(self, session: BoundSession | None) -> None:
        """Route this thread's transactions and batch reads through ``session`` (None: send them directly)."""
        self._local.coalescing = session

    def transact(self, actions: list[dict[str, Any]]) -> None:
        """TransactWriteItems with a client request token (SDK retries stay idempotent).

        Conflicts with concurrent transactions are retried here; failed conditions raise
        :class:`TransactionCancelled` for the caller to interpret. In a thread bound to a coalescing session
        the transaction may travel merged with its siblings' (same outcome; see coalescing.py).
        """
        for action in actions:
            for body in action.values():
                body.setdefault("TableName", self.name)
        session: BoundSession | None = getattr(self._local, "coalescing", None)
        if session is not None:
            session.call("transact", actions)
            return
        self.transact_now(actions)

    def transact_now(self, actions: list[dict[str, Any]]) -> None:
        """:meth:`transact` without a session: this transaction alone (actions carry their table name)."""
        token = secrets.token_hex(16)
        wire_actions = [_wire_action(action) for action in actions]  # once, whatever the retries
        for attempt in range(TRANSACTION_RETRIES):
            try:
                self._send_transaction(wire_actions, token)
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                raw = exc.response.get("CancellationReasons") or []
                reasons = [str(r.get("Code", "None")) for r in raw]
                if any(r in RETRYABLE_CANCELLATION for r in reasons) and attempt < TRANSACTION_RETRIES - 1:
                    backoff(attempt + 1, base_s=0.01, cap_s=0.5)
                    token = secrets.token_hex(16)
                    continue
                raise TransactionCancelled.from_reasons(raw) from exc

    def transact_once(self, actions: list[dict[str, Any]]) -> None:
        """One ``TransactWriteItems`` attempt (actions carry their table name); a cancellation raises the
        client's ``ClientError`` for the caller to interpret."""
        self._send_transaction([_wire_action(action) for action in actions], secrets.token_hex(16))

    def _send_transaction(self, wire_actions: list[dict[str, Any]], token: str) -> None:
        self.wire.transact_write_items(TransactItems=wire_actions, ClientRequestToken=token)

    def write_singles(self, writes: Sequence[SingleWrite]) -> list[WriteOutcome]:
        """Conditional single-item writes, each with its own outcome (single_writes.py): as ``BatchExecuteStatement``
        requests of up to 25 distinct items, or one request each with statements off. In a thread bound to a
        coalescing session they travel merged with the siblings' (the same outcomes; see coalescing.py).
        Outcomes carry errors rather than raise them: ``outcome.checked()`` raises as the single call would."""
        session: BoundSession | None = getattr(self._local, "coalescing", None)
        if session is not None and self.statements:
            outcomes: list[WriteOutcome] = session.call("write", list(writes))
            return outcomes
        return self.write_singles_now(writes)

    def write_singles_now(self, writes: Sequence[SingleWrite]) -> list[WriteOutcome]:
        """:meth:`write_singles` without a session: these writes alone (any number, sent 25 distinct items at a
        time; a later write of an item already in a batch goes in a later one)."""
        if not self.statements:
            return one_by_one(self.table, writes)
        outcomes: list[WriteOutcome | None] = [None] * len(writes)
        for batch in distinct_batches(writes):
            sent = by_statements(self._send_statements, self.table, [writes[i] for i in batch], _statement_pause)
            for index, outcome in zip(batch, sent, strict=True):
                outcomes[index] = outcome
        return [o if o is not None else WriteOutcome(False, error=RuntimeError("write not sent")) for o in outcomes]

    def _send_statements(self, statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
        responses: list[dict[str, Any]] = self.wire.batch_execute_statement(Statements=statements)["Responses"]
        return responses

    def batch_delete(self, keys: Iterable[dict[str, str]]) -> None:
        with self.table.batch_writer() as writer:  # groups of 25, unprocessed items resent
            for key in keys:
                writer.delete_item(Key=key)

    def batch_get(self, item_keys: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """Consistent BatchGetItem keyed by (PK, SK): at most 100 keys per request, unprocessed keys retried
        (merged with the siblings' reads in a thread bound to a coalescing session)."""
        session: BoundSession | None = getattr(self._local, "coalescing", None)
        if session is not None:
            found: dict[tuple[str, str], dict[str, Any]] = session.call("batch_get", item_keys)
            return found
        return self.batch_get_now(item_keys)

    def batch_get_now(
        self, item_keys: list[dict[str, str]], *, consistent: bool = True
    ) -> dict[tuple[str, str], dict[str, Any]]:
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for start in range(0, len(item_keys), 100):
            keys = [to_wire(key) for key in item_keys[start : start + 100]]
            request: dict[str, Any] = {self.name: {"Keys": keys, "ConsistentRead": consistent}}
            while request:
                response = self.wire.batch_get_item(RequestItems=request)
                for wire_item in response.get("Responses", {}).get(self.name, []):
                    item = from_wire(wire_item)
                    found[(item["PK"], item["SK"])] = item
                request = response.get("UnprocessedKeys") or {}
        return found

    def batch_put(self, items: Iterable[dict[str, Any]]) -> None:
        with self.table.batch_writer() as writer:
            for item in items:
                writer.put_item(Item=item)

    # ---- large values -----------------------------------------------------------------------------------

    def write_blob(self, pk: str, prefix: str, text: str, *, ttl: int | None = None) -> BlobRef:
        """A value too long for its item, as part items ``<prefix><token>#<n>`` written before the item that
        points at them (``ttl``, epoch s: parts a crash left unreferenced expire)."""
        token = secrets.token_hex(8)
        chunks = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)] or [""]
        expiry = {} if ttl is None else {"ttl": ttl}
        self.batch_put(
            {"PK": pk, "SK": f"{prefix}{token}#{index:05d}", "v": chunk, **expiry} for index, chunk in enumerate(chunks)
        )
        return BlobRef(token, len(chunks))

    def read_blob(self, pk: str, prefix: str, ref: BlobRef) -> str | None:
        """The whole value, or None when a part is missing (treated as unreadable by callers)."""
        parts = list(self.query_prefix(pk, f"{prefix}{ref.token}#"))
        if len(parts) != ref.parts:
            return None
        parts.sort(key=lambda item: item["SK"])
        return "".join(item["v"] for item in parts)

    def delete_blob(self, pk: str, prefix: str, token: str) -> None:
        keys = [
            {"PK": item["PK"], "SK": item["SK"]}
            for item in self.query_prefix(pk, f"{prefix}{token}#", ProjectionExpression="PK, SK")
        ]
        if keys:
            self.batch_delete(keys)


@overload
def item_int(value: Any) -> int: ...
@overload
def item_int(value: Any, default: int) -> int: ...
@overload
def item_int(value: Any, default: None) -> int | None: ...


def item_int(value: Any, default: int | None = 0) -> int | None:
    """A number attribute as read back from DynamoDB (boto3 returns ``Decimal``), else ``default``."""
    return int(value) if isinstance(value, int | Decimal) and not isinstance(value, bool) else default


def backoff(attempt: int, *, base_s: float = 0.004, cap_s: float = 0.25) -> None:
    """Full-jitter exponential back-off between optimistic-concurrency retries."""
    time.sleep(secrets.randbelow(1000) / 1000 * min(cap_s, base_s * 2**attempt))


def _statement_pause(attempt: int) -> None:
    backoff(attempt, base_s=0.01, cap_s=0.5)


def is_conditional_failure(exc: ClientError) -> bool:
    return bool(exc.response["Error"]["Code"] == "ConditionalCheckFailedException")
