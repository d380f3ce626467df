"""The event stream's parser and the wait loop's rules, without a server."""

from __future__ import annotations

from typing import Any, List

import pytest

from taskq._sse import Message, SseParser
from taskq._watch import UNNAMED, next_wait_seconds, to_event, waiting_is_over

STREAM = (
    b": keep-alive\r\n"
    b"\r\n"
    b"retry: 2500\r\n"
    b"id: 1\r\n"
    b"event: task.created\r\n"
    b'data: {"type":"task.created",\r\n'
    b'data: "n":"\xc3\xa9"}\r\n'
    b"\r\n"
    b"event: ignored, it has no data\n"
    b"\n"
    b"id: 2\n"
    b"data:no space\n"
    b"data\n"
    b"unknown: field\n"
    b"\n"
    b"data: keeps id 2\r"
    b"\r"
    b"id: 3\n"
    b"data: never finished"
)
EXPECTED = [
    Message(event="task.created", data='{"type":"task.created",\n"n":"\u00e9"}', id="1"),
    Message(event=None, data="no space\n", id="2"),
    Message(event=None, data="keeps id 2", id="2"),
]


def feed_all(parser: SseParser, chunks: List[bytes]) -> List[Message]:
    out: List[Message] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def test_a_stream_read_whole_gives_its_finished_messages() -> None:
    parser = SseParser()
    assert feed_all(parser, [STREAM]) == EXPECTED
    assert parser.retry_ms == 2500
    # The unfinished message set the last id, but was not handed out.
    assert parser.last_id == "3"


@pytest.mark.parametrize("at", range(1, len(STREAM)))
def test_a_chunk_may_end_anywhere(at: int) -> None:
    # Inside a line, between CR and LF, inside the two bytes of "é".
    assert feed_all(SseParser(), [STREAM[:at], STREAM[at:]]) == EXPECTED


def test_a_stream_read_byte_by_byte_gives_the_same() -> None:
    assert feed_all(SseParser(), [STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_a_crlf_split_between_chunks_ends_one_line() -> None:
    # Read as two line ends, the LF would make a blank line and split the message.
    assert feed_all(SseParser(), [b"data: a\r", b"\ndata: b\r\n\r\n"]) == [Message(None, "a\nb", None)]
    assert feed_all(SseParser(), [b"data: a\r", b"", b"\n", b"\r\n"]) == [Message(None, "a", None)]


def test_lone_crs_end_lines() -> None:
    assert feed_all(SseParser(), [b"event: x\rdata: 1\rdata: 2\r\r"]) == [Message("x", "1\n2", None)]


def test_odd_fields() -> None:
    parser = SseParser()
    chunks = [b"\xef\xbb\xbfid: 7\n", b"data: a\n\n", b"id: 8\x009\nretry: 1.5\ndata:  two spaces\n\n"]
    assert feed_all(parser, chunks) == [Message(None, "a", "7"), Message(None, " two spaces", "7")]
    assert parser.retry_ms is None


def test_events_are_typed_from_their_messages() -> None:
    named = to_event(Message("task.completed", '{"type": "task.completed"}', "41"))
    assert (named.id, named.type, named.data["type"]) == (41, "task.completed", "task.completed")
    assert to_event(Message(None, '{"type": "task.status_changed"}', "42")).type == UNNAMED
    with pytest.raises(ValueError):
        to_event(Message(None, "{}", None))


def test_a_loop_of_waits_asks_for_what_is_left_rounded_up() -> None:
    assert next_wait_seconds(None, 100.0) == 30
    assert next_wait_seconds(200.0, 100.0) == 30
    assert next_wait_seconds(110.2, 100.0) == 11
    assert next_wait_seconds(100.0, 100.0) == 0
    assert next_wait_seconds(90.0, 100.0) == 0


def test_a_loop_of_waits_stops_when_done_out_of_time_or_with_nothing_to_wait_for() -> None:
    task: Any = {"task_id": "t", "status": "pending", "updated_at": "2026-01-01T00:00:00Z"}
    running: Any = {"done": False, "tasks": [task], "not_found": []}
    assert not waiting_is_over(running, None, 0.0)
    assert not waiting_is_over(running, 10.0, 9.0)
    assert waiting_is_over(running, 10.0, 10.0)
    assert waiting_is_over({"done": True, "tasks": [task], "not_found": []}, None, 0.0)
    assert waiting_is_over({"done": False, "tasks": [], "not_found": ["x"]}, None, 0.0)
