"""Shared round trips for the records of one SQS batch (see docs/delivery.md, "A batch shares its round trips").

run_task delivers the records of a batch at the same time, one thread each, and every record makes the same
few storage calls at about the same points: one batch read, the append transaction, the settlement's writes.
While a session is open, the calls that its participants make at about the same time go out as one request:

* ``BatchGetItem`` calls are merged (keys de-duplicated, at most 100 per request);
* ``TransactWriteItems`` calls whose items are all different are merged into one transaction of at most 100
  actions. It commits only when every part would have committed, and no two parts touch the same item, so it
  is the same as running the parts one after the other. When it is cancelled, its cancellation reasons (one per
  action, in order) say what each part would have met alone at that instant: a part whose conditions failed
  gets that failure (the error it would have had alone, with its own reasons and items) without another
  request; the parts whose actions all held are merged once more; any other part (a conflict, a throttle)
  runs on its own (a folded or shared action below answers for every part that carries it). When there are no
  reasons (refused as too large), or the second merge is cancelled too, every part left runs on its own. Either
  way each caller gets exactly the outcome and the cancellation reasons it would have had alone (the parts left
  run from their callers' own threads, side by side). Two exceptions to "all different": a tenant's
  pending-count decrements (pending.py), unconditional and additive, are summed into one action per counter;
  and identical ``ConditionCheck`` actions (the tenant-active check every push claim of a tenant carries) are
  sent once, since a read-only check that holds for one part holds for all;
* conditional single-item writes (``write_singles``: the delivered marks, a settlement's task update, a uuid
  registry entry's delete) are merged into ``BatchExecuteStatement`` requests of up to 25 distinct items. Each
  statement succeeds or fails on its own, so every caller gets its own writes' outcomes, exactly those it would
  have had alone (a failed condition in one part does not touch the others); two parts naming the same item go
  in successive requests, in the order they came.

A call waits until every participant still running is waiting too, or for at most ``max_wait_s``; calls from
threads outside the session (the lease heartbeat) never wait. One of the waiting threads sends the merged
request; no thread is added.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import pending
from amsg.adapters.dynamo.table import TransactionCancelled

if TYPE_CHECKING:
    from collections.abc import Mapping

    from amsg.adapters.dynamo.table import DynamoTable

MAX_TRANSACTION_ACTIONS = 100  # DynamoDB's limit per TransactWriteItems
# A merged transaction is refused (and its parts then run alone) above 4 MB; stay well below by estimate.
MAX_MERGED_BYTES = 2_000_000
DEFAULT_MAX_WAIT_S = 0.02  # about one DynamoDB round trip: longer than the gap between siblings' calls
_RUN_ALONE = {"TransactionCanceledException", "ValidationException"}


@dataclass(eq=False)
class _Call:
    kind: str  # "transact", "batch_get" or "write"
    payload: list[Any]
    submitted: float = field(default_factory=time.monotonic)
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    alone: bool = False  # its caller sends it on its own (a merged transaction that could not commit)


class CoalescingSession:
    """One batch's participants; ``transact``/``batch_get`` of a bound thread come here (see the module)."""

    def __init__(self, table: DynamoTable, participants: int, *, max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        self._table = table
        self._cond = threading.Condition()
        self._active = max(0, participants)  # counted from the start: nobody flushes before its siblings arrive
        self._prepaid = self._active
        self._pending: list[_Call] = []
        self._flushing = False
        self._max_wait_s = max_wait_s

    @contextmanager
    def participant(self) -> Iterator[None]:
        """Bind the calling thread to this session for the duration of one record."""
        with self._cond:
            if self._prepaid:
                self._prepaid -= 1
            else:  # a record that starts after one of the first finished
                self._active += 1
        self._table.bind_session(self)
        try:
            yield
        finally:
            self._table.bind_session(None)
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def call(self, kind: str, payload: list[Any]) -> Any:
        call = _Call(kind, payload)
        with self._cond:
            # no wake-up here: a waiting sibling has nothing new to do (this thread sends the batch itself when
            # it is complete; the others wake when it was sent, or at their deadline), and waking every sibling
            # on every call cost run_task more CPU than the merged requests' encoding
            self._pending.append(call)
            while not call.done:
                if not self._flushing and self._pending and self._ready():
                    batch, self._pending = self._pending, []
                    self._flushing = True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._flushing = False
                        self._cond.notify_all()
                    continue
                timeout = None
                if not self._flushing and self._pending:
                    timeout = max(0.0005, self._pending[0].submitted + self._max_wait_s - time.monotonic())
                self._cond.wait(timeout)
        if call.alone:  # in the caller's own thread, so the parts of a failed merge run side by side
            return self._table.transact_now(call.payload)
        if call.error is not None:
            raise call.error
        return call.result

    def _ready(self) -> bool:
        waited = time.monotonic() - self._pending[0].submitted
        return len(self._pending) >= self._active or waited >= self._max_wait_s

    # ---- sending a merged batch (outside the lock) ------------------------------------------------------

    def _run(self, batch: list[_Call]) -> None:
        try:
            reads = [c for c in batch if c.kind == "batch_get"]
            if reads:
                self._run_reads(reads)
            transactions = [c for c in batch if c.kind == "transact"]
            for group in _disjoint_groups(transactions):
                self._run_transactions(group)
            singles = [c for c in batch if c.kind == "write"]
            if singles:
                self._run_singles(singles)
        finally:
            for call in batch:  # never leave a caller waiting, whatever went wrong above
                if not call.done:
                    call.error = call.error or RuntimeError("coalesced call was not sent")
                    call.done = True

    def _run_reads(self, calls: list[_Call]) -> None:
        wanted: dict[tuple[str, str], dict[str, Any]] = {}
        for call in calls:
            for key in call.payload:
                wanted.setdefault((key["PK"], key["SK"]), key)
        try:
            found = self._table.batch_get_now(list(wanted.values()))
        except Exception as exc:
            for call in calls:
                call.error, call.done = exc, True
            return
        for call in calls:
            call.result = {
                (key["PK"], key["SK"]): found[(key["PK"], key["SK"])]
                for key in call.payload
                if (key["PK"], key["SK"]) in found
            }
            call.done = True

    def _run_singles(self, calls: list[_Call]) -> None:
        """Every call's single writes in as few statement batches as their items allow; each call gets the
        outcomes of its own writes (single_writes.py gives every write its own)."""
        try:
            outcomes = self._table.write_singles_now([write for call in calls for write in call.payload])
        except Exception as exc:
            for call in calls:
                call.error, call.done = exc, True
            return
        start = 0
        for call in calls:
            call.result = outcomes[start : start + len(call.payload)]
            start += len(call.payload)
            call.done = True

    def _run_transactions(self, calls: list[_Call]) -> None:
        if len(calls) > 1:
            reasons = self._send_merged(calls)
            if reasons is None:
                return  # committed, or every caller has its error
            calls = self._settle_by_reasons(calls, reasons)
        for call in calls:  # the parts touch different items: sent at the same time, each is as if alone
            call.alone = call.done = True

    def _send_merged(self, calls: list[_Call]) -> list[Mapping[str, Any]] | None:
        """One transaction of every call's actions. None when that settled every call (committed, or an error
        that is every part's); else the cancellation reasons, one per action of the calls in order, or [] when
        there are none to match (refused as too large)."""
        actions = [action for call in calls for action in call.payload]
        # a tenant's pending-count decrements (one per settled task) fold into one action per counter
        merged = _shared_checks(pending.fold(actions))
        try:
            self._table.transact_once(merged)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in _RUN_ALONE:
                for call in calls:
                    call.error, call.done = exc, True
                return None
            raw = exc.response.get("CancellationReasons") or []
            where = _positions(actions)
            if len(raw) != len(merged) or len(set(where)) != len(merged):
                return []
            return [raw[position] for position in where]  # a folded or shared action's reason is each sharer's
        except Exception as exc:
            for call in calls:
                call.error, call.done = exc, True
            return None
        for call in calls:
            call.done = True
        return None

    def _settle_by_reasons(self, calls: list[_Call], reasons: list[Mapping[str, Any]]) -> list[_Call]:
        """Settle what a cancelled merge's ``reasons`` decide (see the module); the calls left to run alone."""
        if not reasons:
            return calls
        held: list[_Call] = []
        left: list[_Call] = []
        start = 0
        for call in calls:
            own = reasons[start : start + len(call.payload)]
            start += len(call.payload)
            codes = {str(reason.get("Code", "None")) for reason in own}
            if codes == {"None"}:
                held.append(call)
            elif codes <= {"None", "ConditionalCheckFailed"}:  # what it would have raised alone, at that instant
                call.error, call.done = TransactionCancelled.from_reasons(own), True
            else:
                left.append(call)
        if len(held) > 1 and self._send_merged(held) is None:
            return left
        return held + left


def _item_of(action: dict[str, Any]) -> tuple[str, str, str]:
    body = next(iter(action.values()))
    key = body.get("Key") or body["Item"]
    return (str(body.get("TableName")), str(key["PK"]), str(key["SK"]))


def _size(value: Any) -> int:
    """A cheap upper-bound-ish estimate of a request's size (strings dominate: payloads, ciphertexts)."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k) + _size(v) for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return sum(_size(v) for v in value)
    return 8


def _check_of(action: dict[str, Any]) -> tuple[tuple[str, str, str], str] | None:
    """A ``ConditionCheck`` as (item, its exact condition), or None for any other action."""
    body = action.get("ConditionCheck")
    if not isinstance(body, dict):
        return None
    return _item_of(action), repr(sorted(body.items()))


def _positions(actions: list[dict[str, Any]]) -> list[int]:
    """Where each of ``actions`` lands in ``_shared_checks(pending.fold(actions))``: a decrement at its counter's
    first, a check at the first identical one (both fold "at the place of the first"), any other at its own."""
    where: list[int] = []
    first: dict[tuple[str, Any], int] = {}
    placed = 0
    for action in actions:
        key: tuple[str, Any] | None = None
        if pending.is_decrement(action):
            key = ("decrement", _item_of(action))
        elif (check := _check_of(action)) is not None:
            key = ("check", check)
        if key is not None and key in first:
            where.append(first[key])
            continue
        if key is not None:
            first[key] = placed
        where.append(placed)
        placed += 1
    return where


def _shared_checks(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``actions`` with each identical condition check kept once (at the place of the first)."""
    seen: set[tuple[tuple[str, str, str], str]] = set()
    out = []
    for action in actions:
        check = _check_of(action)
        if check is not None:
            if check in seen:
                continue
            seen.add(check)
        out.append(action)
    return out


@dataclass
class _Group:
    members: list[_Call] = field(default_factory=list)
    items: set[tuple[str, str, str]] = field(default_factory=set)  # written or checked items
    folded: set[tuple[str, str, str]] = field(default_factory=set)  # pending counters decremented
    checks: dict[tuple[str, str, str], str] = field(default_factory=dict)  # shared identical checks
    actions: int = 0
    size: int = 0

    def admits(self, call: _Call, size: int) -> bool:
        items, folds, checks = _parts_of(call)
        shared = all(self.checks[item] == condition for item, condition in checks.items() if item in self.checks)
        own_items = items - {item for item in checks if item in self.checks}
        return (
            shared
            and not (own_items & (self.items | self.folded))
            and not (folds & self.items)
            and self.actions + len(call.payload) <= MAX_TRANSACTION_ACTIONS
            and self.size + size <= MAX_MERGED_BYTES
        )

    def add(self, call: _Call, size: int) -> None:
        items, folds, checks = _parts_of(call)
        self.members.append(call)
        self.items |= items
        self.folded |= folds
        self.checks.update(checks)
        self.actions += len(call.payload)
        self.size += size


def _parts_of(
    call: _Call,
) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]], dict[tuple[str, str, str], str]]:
    items = {_item_of(action) for action in call.payload if not pending.is_decrement(action)}
    folds = {_item_of(action) for action in call.payload if pending.is_decrement(action)}
    checks = dict(check for action in call.payload if (check := _check_of(action)) is not None)
    return items, folds, checks


def _disjoint_groups(calls: list[_Call]) -> list[list[_Call]]:
    """Calls packed in arrival order into groups whose items are all different (but for identical checks),
    within DynamoDB's limits; a call that touches an item of every open group starts a new one (sent after the
    earlier groups)."""
    groups: list[_Group] = []
    for call in calls:
        size = _size(call.payload)
        for group in groups:
            if group.admits(call, size):
                group.add(call, size)
                break
        else:
            group = _Group()
            group.add(call, size)
            groups.append(group)
    return [group.members for group in groups]


class DynamoCoalescer:
    """The ``CallCoalescer`` port over one table."""

    def __init__(self, table: DynamoTable, *, max_wait_s: float = DEFAULT_MAX_WAIT_S) -> None:
        self._table = table
        self._max_wait_s = max_wait_s

    def session(self, participants: int) -> CoalescingSession:
        return CoalescingSession(self._table, participants, max_wait_s=self._max_wait_s)
