"""The service's log formatter (amsg/log_format.py) writes exactly the line Powertools' own formatter writes, for
any record: the fields operators query (docs/operations.md) cannot drift by its shortcuts."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from amsg.log_format import LeanFormatter
from amsg.observability import SERVICE, logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

_JSONISH = st.sampled_from(
    ["task delivered", '{"a": 1}', "[1, 2]", "42", "-1.5", '"quoted"', "true", "null", "NaN", " 7 ", "{", ""]
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)
# extra keys: plain ones and those that collide with the line's own fields or the record's attributes
_EXTRA_KEYS = st.one_of(
    st.sampled_from(["summary", "message", "exception", "stack_trace", "xray_trace_id", "level", "name", "taskName"]),
    st.text("abcxyz_", min_size=1, max_size=6),
)
_APPENDED = st.dictionaries(
    st.sampled_from(["cold_start", "function_name", "correlation_id", "location", "timestamp", "tenant"]),
    st.one_of(st.none(), st.booleans(), st.text(max_size=6), st.sampled_from(["%(module)s", "%(lineno)d"])),
    max_size=3,
)


@pytest.fixture(autouse=True)
def no_context_keys() -> Iterator[None]:
    LambdaPowertoolsFormatter().thread_safe_clear_keys()
    yield
    LambdaPowertoolsFormatter().thread_safe_clear_keys()


def _record(message: Any, args: tuple[Any, ...], extra: dict[str, Any], exc: bool) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("amsg", logging.INFO, __file__, 12, message, args, exc_info, func="deliver")
    for key, value in extra.items():
        if key not in ("message", "asctime") and key not in record.__dict__:  # what makeRecord refuses
            record.__dict__[key] = value
    return record


def _formatted(formatter: logging.Formatter, record: logging.LogRecord) -> tuple[str, str]:
    """The line, or the error the formatter raises instead (a reserved field's template that is not a string)."""
    try:
        return "line", formatter.format(record)
    except ValueError as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=examples(300), deadline=None)
@given(
    message=st.one_of(
        _JSONISH, st.text(max_size=12), st.integers(), st.dictionaries(st.text(max_size=3), st.integers())
    ),
    with_args=st.booleans(),
    extra=st.dictionaries(_EXTRA_KEYS, _VALUES, max_size=4),
    appended=_APPENDED,
    context=_APPENDED,
    exc=st.booleans(),
    xray=st.one_of(st.none(), st.just("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")),
)
def test_the_same_line_as_powertools(
    message: Any,
    with_args: bool,
    extra: dict[str, Any],
    appended: dict[str, Any],
    context: dict[str, Any],
    exc: bool,
    xray: str | None,
) -> None:
    args = ("x",) if with_args and isinstance(message, str) and "%" not in message else ()
    text = f"{message} %s" if args else message
    lean, stock = LeanFormatter(service=SERVICE, sampling_rate=None), LambdaPowertoolsFormatter(service=SERVICE)
    for formatter in (lean, stock):
        formatter.append_keys(**appended)
    with pytest.MonkeyPatch.context() as patch:
        if xray is None:
            patch.delenv("_X_AMZN_TRACE_ID", raising=False)
        else:
            patch.setenv("_X_AMZN_TRACE_ID", xray)
        stock.thread_safe_append_keys(**context)
        try:
            record = _record(text, args, extra, exc)
            expected = _formatted(stock, record)
            for _ in range(2):  # the second time from what the first remembered
                assert _formatted(lean, record) == expected
        finally:
            stock.thread_safe_clear_keys()


def test_a_json_message_is_decoded_afresh_each_time() -> None:
    """A message that decodes to an object is not shared between lines (a caller may change what it logged)."""
    lean = LeanFormatter(service=SERVICE)
    first = lean._extract_log_message(_record('{"a": 1}', (), {}, False))
    first["a"] = 2
    assert lean.format(_record('{"a": 1}', (), {}, False)).count('"message":{"a":1}') == 1


def test_the_service_logs_through_it() -> None:
    assert isinstance(logger.registered_formatter, LeanFormatter)
    assert logger.registered_formatter.log_format["service"] == SERVICE
