"""The service's log formatter: Powertools' JSON lines, byte for byte, for less CPU per line.

run_task writes one INFO line per delivered task (``task delivered`` with its summary; docs/operations.md lists
the fields operators query), and Powertools' formatter spent more on it than on the push's JSON and the outbox
row's encryption together (docs/performance.md). :class:`LeanFormatter` is Powertools'
``LambdaPowertoolsFormatter`` with its per-line overheads taken out, nothing else: the reserved attribute names
looked up in a set instead of a tuple, a message string that is not JSON remembered as such instead of raising
in ``json.loads`` on every line, the fields an exception would add skipped when there is none. The keys, their
order and every value are the formatter's own (tests/unit/test_log_format.py compares the two on arbitrary
records), and a record with an exception goes through Powertools' own code.
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.logging.formatter import RESERVED_LOG_ATTRS, LambdaPowertoolsFormatter, _get_context

_RESERVED = frozenset(RESERVED_LOG_ATTRS)
# messages remembered as decoding to themselves (not JSON) or to an immutable value; a bound for a caller that
# formats values into its messages
_MAX_MESSAGES = 512
_NOT_KNOWN = object()


class LeanFormatter(LambdaPowertoolsFormatter):
    """``LambdaPowertoolsFormatter`` with the same output for less CPU per line (see the module's docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._messages: dict[str, Any] = {}

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info is not None:  # the exception's fields: Powertools' own code
            return super().format(record)
        formatted_log = self._extract_log_keys(log_record=record)
        formatted_log["message"] = self._extract_log_message(log_record=record)
        # what the exception fields and the stack trace are without an exception: keys set, left out when None
        formatted_log["exception"] = formatted_log.get("exception")
        formatted_log["exception_name"] = formatted_log.get("exception_name")
        formatted_log["exception_notes"] = formatted_log.get("exception_notes")
        if self.serialize_stacktrace:
            formatted_log["stack_trace"] = None
        formatted_log["xray_trace_id"] = self._get_latest_trace_id()
        return self.serialize(log={k: v for k, v in formatted_log.items() if v is not None})

    def _extract_log_message(self, log_record: logging.LogRecord) -> Any:
        message = log_record.msg
        if type(message) is not str or log_record.args:
            return super()._extract_log_message(log_record)
        known = self._messages.get(message, _NOT_KNOWN)
        if known is not _NOT_KNOWN:
            return known
        decoded = super()._extract_log_message(log_record)
        if decoded is None or isinstance(decoded, str | int | float):  # never a dict or list a caller may change
            if len(self._messages) >= _MAX_MESSAGES:
                self._messages.clear()
            self._messages[message] = decoded
        return decoded

    def _extract_log_keys(self, log_record: logging.LogRecord) -> dict[str, Any]:
        record_dict = log_record.__dict__.copy()
        record_dict["asctime"] = self.formatTime(record=log_record)
        formatted_log: dict[str, Any] = {}
        for keys in (self.log_format, _get_context().get()):
            for key, value in keys.items():
                if value and key in _RESERVED:
                    if not isinstance(value, str):
                        return super()._extract_log_keys(log_record)  # its error for a non-string template
                    formatted_log[key] = value % record_dict
                else:
                    formatted_log[key] = value
        formatted_log.update({k: v for k, v in record_dict.items() if k not in _RESERVED})
        return formatted_log
