"""The local SQS endpoint: :class:`LocalSqs` over HTTP in SQS's JSON protocol, on loopback.

Handlers (the tick's ``SendMessageBatch``) and test clients reach the queue through boto3 with
``AWS_ENDPOINT_URL_SQS`` pointing here, exactly as they would reach SQS; boto3 speaks the JSON protocol
(``X-Amz-Target: AmazonSQS.<Action>``, ``application/x-amz-json-1.0``). Errors come back as SQS sends them
(``__type`` plus the legacy code in ``x-amzn-query-error``), so botocore raises the same exceptions. Keep-alive,
``TCP_NODELAY`` and daemon threads, like every server of the stack.
"""

from __future__ import annotations

import base64
import binascii
import json
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from amsg_local.sqs_model import LocalSqs, SqsError

__all__ = ["SqsServer"]

_Action = Callable[[LocalSqs, dict[str, Any]], dict[str, Any]]
MAX_REQUEST_BYTES = 2 * 1024 * 1024  # a batch is at most 1 MiB of messages plus JSON overhead


def _attributes_in(raw: Any) -> dict[str, dict[str, Any]]:
    """Message attributes from the wire (``BinaryValue`` is base64 there, bytes in the model)."""
    if not isinstance(raw, Mapping):
        return {}
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in raw.items():
        entry = dict(attr) if isinstance(attr, Mapping) else {}
        if "BinaryValue" in entry:
            try:
                entry["BinaryValue"] = base64.b64decode(str(entry["BinaryValue"]), validate=True)
            except (binascii.Error, ValueError):
                raise SqsError("InvalidParameterValue", f"Invalid binary value for message attribute {name}.") from None
        attributes[str(name)] = entry
    return attributes


def _attributes_out(message: dict[str, Any]) -> dict[str, Any]:
    for attr in (message.get("MessageAttributes") or {}).values():
        if isinstance(attr.get("BinaryValue"), bytes):
            attr["BinaryValue"] = base64.b64encode(attr["BinaryValue"]).decode("ascii")
    return message


def _entries(params: dict[str, Any]) -> list[dict[str, Any]]:
    entries = params.get("Entries")
    if not isinstance(entries, list):
        raise SqsError("MissingParameter", "The request must contain the parameter Entries.")
    return [dict(entry) if isinstance(entry, Mapping) else {} for entry in entries]


def _send_message(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
    result = sqs.send(
        p.get("QueueUrl", ""), p.get("MessageBody"), _attributes_in(p.get("MessageAttributes")), p.get("DelaySeconds")
    )
    result.pop("Id", None)
    return result


def _send_message_batch(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
    entries = _entries(p)
    for entry in entries:
        entry["MessageAttributes"] = _attributes_in(entry.get("MessageAttributes"))
    return sqs.send_batch(p.get("QueueUrl", ""), entries)


def _receive_message(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
    messages = sqs.receive(
        p.get("QueueUrl", ""),
        max_messages=int(p.get("MaxNumberOfMessages", 1)),
        visibility_timeout=None if p.get("VisibilityTimeout") is None else int(p["VisibilityTimeout"]),
        wait_seconds=None if p.get("WaitTimeSeconds") is None else int(p["WaitTimeSeconds"]),
    )
    return {"Messages": [_attributes_out(m) for m in messages]} if messages else {}


def _delete_message_batch(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
    url = p.get("QueueUrl", "")
    return sqs.batch(url, _entries(p), lambda e: sqs.delete(url, str(e.get("ReceiptHandle", ""))))


def _change_visibility_batch(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
    url = p.get("QueueUrl", "")
    return sqs.batch(
        url,
        _entries(p),
        lambda e: sqs.change_visibility(url, str(e.get("ReceiptHandle", "")), int(e.get("VisibilityTimeout", 0))),
    )


def _empty(call: Callable[[LocalSqs, dict[str, Any]], Any]) -> _Action:
    def action(sqs: LocalSqs, p: dict[str, Any]) -> dict[str, Any]:
        call(sqs, p)
        return {}

    return action


ACTIONS: dict[str, _Action] = {
    "CreateQueue": lambda sqs, p: {"QueueUrl": sqs.create_queue(str(p.get("QueueName", "")), p.get("Attributes"))},
    "GetQueueUrl": lambda sqs, p: {"QueueUrl": sqs.queue_url(str(p.get("QueueName", "")))},
    "ListQueues": lambda sqs, p: {"QueueUrls": sqs.list_queues(str(p.get("QueueNamePrefix", "")))},
    "GetQueueAttributes": lambda sqs, p: {
        "Attributes": sqs.get_queue_attributes(p.get("QueueUrl", ""), p.get("AttributeNames") or ["All"])
    },
    "SetQueueAttributes": _empty(
        lambda sqs, p: sqs.set_queue_attributes(p.get("QueueUrl", ""), p.get("Attributes") or {})
    ),
    "DeleteQueue": _empty(lambda sqs, p: sqs.delete_queue(p.get("QueueUrl", ""))),
    "PurgeQueue": _empty(lambda sqs, p: sqs.purge_queue(p.get("QueueUrl", ""))),
    "SendMessage": _send_message,
    "SendMessageBatch": _send_message_batch,
    "ReceiveMessage": _receive_message,
    "DeleteMessage": _empty(lambda sqs, p: sqs.delete(p.get("QueueUrl", ""), str(p.get("ReceiptHandle", "")))),
    "DeleteMessageBatch": _delete_message_batch,
    "ChangeMessageVisibility": _empty(
        lambda sqs, p: sqs.change_visibility(
            p.get("QueueUrl", ""), str(p.get("ReceiptHandle", "")), int(p.get("VisibilityTimeout", 0))
        )
    ),
    "ChangeMessageVisibilityBatch": _change_visibility_batch,
}


def answer(sqs: LocalSqs, target: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One JSON-protocol call: ``(status, extra headers, body)``."""
    action = target.removeprefix("AmazonSQS.")
    try:
        handler = ACTIONS.get(action) if target.startswith("AmazonSQS.") else None
        if handler is None:
            raise SqsError(
                "InvalidAction",
                f"The action {action or target!r} is not valid for this endpoint.",
                query_code="InvalidAction",
            )
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            raise SqsError("SerializationException", "Start of structure or map found where not expected.") from None
        if not isinstance(params, dict):
            raise SqsError("SerializationException", "Start of structure or map found where not expected.")
        try:
            result = handler(sqs, params)
        except (TypeError, ValueError) as exc:  # a wrongly typed parameter
            raise SqsError("InvalidParameterValue", f"Invalid parameter: {exc}") from None
    except SqsError as exc:
        fault = "Sender" if exc.sender else "Receiver"
        payload = {"__type": f"com.amazonaws.sqs#{exc.code}", "message": exc.message}
        return 400, {"x-amzn-query-error": f"{exc.query_code};{fault}"}, json.dumps(payload).encode()
    return 200, {}, json.dumps(result).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_REQUEST_BYTES:
            self._reply(413, {}, b'{"message":"Request Entity Too Large"}')
            self.close_connection = True
            return
        body = self.rfile.read(length)
        status, headers, payload = answer(self.server.sqs, self.headers.get("X-Amz-Target", ""), body)
        self._reply(status, headers, payload)

    def _reply(self, status: int, headers: Mapping[str, str], payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per emulator call would drown the stack's log


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    sqs: LocalSqs


class SqsServer:
    """:class:`LocalSqs` on ``127.0.0.1``, a free port by default; ``sqs`` is the model it serves."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, region: str = "us-east-1") -> None:
        self._server = _Server((host, port), _Handler)
        self.host, self.port = host, int(self._server.server_address[1])
        self.sqs = LocalSqs(self.endpoint_url, region=region)
        self._server.sqs = self.sqs
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> SqsServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, name="amsg-local-sqs", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            self._server.server_close()
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._thread = None

    def __enter__(self) -> SqsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
