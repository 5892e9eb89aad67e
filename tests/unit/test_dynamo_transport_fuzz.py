"""The transport's answer parser under arbitrary bytes (hypothesis): whatever a peer sends, reading it either
yields an answer whose body is exactly what the framing said, or fails as a malformed answer (which the
transport raises as botocore's ``ConnectionClosedError``); it never raises anything else, never reads past
what it was sent, and never waits for more than it was sent once the peer has closed."""

from __future__ import annotations

from typing import Any

from amsg.adapters.dynamo import transport
from hypothesis import given, settings
from hypothesis import strategies as st

VALID = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: 2\r\n\r\n{}",
    b'HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\n{"a":\r\n1\r\n}\r\n0\r\nT: v\r\n\r\n',
    b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
)


class _Peer:
    """A socket that hands out ``data`` in pieces of ``step`` bytes, then reports the connection closed."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step, self.served = data, step, 0

    def recv(self, size: int) -> bytes:
        piece = self.data[self.served : self.served + min(size, self.step)]
        self.served += len(piece)
        return piece


def _read(data: bytes, step: int, method: str = "POST") -> Any:
    conn = transport._Connection(_Peer(data, step))  # type: ignore[arg-type]
    try:
        return transport._read_answer(conn, method)
    except (transport._Malformed, ValueError):  # what the transport maps to ConnectionClosedError
        return None


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_arbitrary_bytes_parse_or_fail_as_malformed(data: bytes, step: int) -> None:
    _read(data, step)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(VALID),
    st.lists(st.tuples(st.integers(min_value=0, max_value=200), st.binary(max_size=4)), max_size=4),
    st.integers(min_value=1, max_value=64),
)
def test_mutated_answers_parse_or_fail_as_malformed(answer: bytes, edits: list[tuple[int, bytes]], step: int) -> None:
    data = bytearray(answer)
    for at, replacement in edits:
        at %= len(data) + 1
        data[at : at + len(replacement)] = replacement
    result = _read(bytes(data), step)
    if result is not None:
        assert 100 <= result.status <= 999
        assert len(result.body) <= len(data)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(VALID), st.integers(min_value=1, max_value=64))
def test_a_valid_answer_reads_the_same_in_any_pieces(answer: bytes, step: int) -> None:
    whole = _read(answer, len(answer))
    assert whole is not None and _read(answer, step) == whole
