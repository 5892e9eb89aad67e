"""The names a task keeps for its outbox rows (docs/decisions.md, 45): which rows an append names, and the
packed form the task stores them in."""

from __future__ import annotations

from amsg.adapters.dynamo.compact import pack_names, unpack_names
from amsg.ports import MAX_NAMED_CHARS, OutboxAppend, names_on_task
from hypothesis import given
from hypothesis import strategies as st

NOT_PRINTABLE = ["Cc", "Cs", "Zl", "Zp", "Cf", "Co", "Cn"]
printable_ids = st.lists(
    st.text(st.characters(blacklist_categories=NOT_PRINTABLE), max_size=40), min_size=1, max_size=8, unique=True
)


def row(message_id: str, *, named: bool = True, task: str | None = "t") -> OutboxAppend:
    return OutboxAppend(message_id=message_id, encrypted_push="e", created_at=0, task_uuid=task, named_by_task=named)


@given(printable_ids)
def test_packed_names_read_back_exactly_in_order(ids):
    assert unpack_names(pack_names(ids)) == tuple(ids)


def test_a_batch_shares_its_prefix_once():
    ids = [f"msg_task_12@1893369660000_{i}" for i in range(3)]
    assert pack_names(ids) == "msg_task_12@1893369660000_\x1f0\x1f1\x1f2"
    assert unpack_names(None) == () and unpack_names("") == ()


def test_an_append_names_the_rows_it_pushes_after_those_named_already():
    assert names_on_task(("a",), [row("b"), row("r", named=False), row("a")]) == ("a", "b")
    assert names_on_task(("a",), [row("r", named=False)]) is None  # nothing to name: the task is left as it is
    assert names_on_task((), [row("b", task=None)]) is None  # a row of no task is never named


def test_names_past_the_budget_or_not_printable_are_not_taken():
    half = "x" * (MAX_NAMED_CHARS // 2)
    assert names_on_task((), [row(half + "1"), row(half[:-2] + "2")]) is not None
    assert names_on_task((half + "1",), [row(half + "2")]) is None
    assert names_on_task((), [row("a\x1fb")]) is None


def test_a_task_stops_naming_its_rows_only_when_this_batch_holds_them_all_and_each_was_delivered():
    from amsg.engine.delivery import _rows_settled
    from amsg.engine.env import Outcome
    from amsg.ports import TaskRow

    task = TaskRow(
        user_id="u", uuid="t", id=1, encrypted_payload="", message_type="fixed", next_send_at_ms=0,
        outbox_message_ids=("m0", "m1"),
    )  # fmt: skip
    assert _rows_settled(task, Outcome(batch_ids=("m0", "m1")))
    assert not _rows_settled(task, Outcome(batch_ids=("m1",)))  # m0 is an earlier occurrence's, maybe still open
    assert not _rows_settled(task, Outcome(batch_ids=("m0", "m1"), unconfirmed=1))
    assert not _rows_settled(task, Outcome(batch_ids=("m0", "m1"), taken_elsewhere=1))  # another run's outcome
