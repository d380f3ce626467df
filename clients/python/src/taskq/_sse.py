"""Server-Sent Events, read as the HTML standard's parser reads them, from
bytes as they arrive: a chunk may end anywhere (inside a line, between a
CR and its LF, inside a UTF-8 character). The format is a line protocol,
so a small parser keeps the client free of a dependency for it.

Lines end with CRLF, LF or CR. `:` starts a comment; `field: value` sets a
field (one space after the colon is dropped; a line without a colon is a
field with an empty value). `data` lines add up, joined by LF; `event`
names the message; `id` sets the last event id, which lasts into the
messages after it; `retry` (digits only) is the reconnection time. A
blank line ends a message, which is passed on when it has data. A message
still open when the stream ends is dropped: it was never finished.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import List, Optional

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Message:
    """One message of the stream, as sent."""

    #: The `event:` field, or None for an unnamed message.
    event: Optional[str]
    data: str
    #: The last event id when the message ended (it may come from an earlier message).
    id: Optional[str]


class SseParser:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        #: The previous chunk ended with CR: an LF starting this one belongs to it.
        self._after_cr = False
        self._started = False
        self._event: Optional[str] = None
        self._data: List[str] = []
        self.last_id: Optional[str] = None
        #: The reconnection time the stream asked for, in milliseconds.
        self.retry_ms: Optional[int] = None

    def feed(self, chunk: bytes) -> List[Message]:
        """The messages that `chunk` finishes."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = False
        buffer = self._pending + text
        messages: List[Message] = []
        start = 0
        for end in _LINE_END.finditer(buffer):
            message = self._line(buffer[start : end.start()])
            if message is not None:
                messages.append(message)
            start = end.end()
            if end.group() == "\r" and start == len(buffer):
                self._after_cr = True
        self._pending = buffer[start:]
        return messages

    def _line(self, line: str) -> Optional[Message]:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self.last_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Optional[Message]:
        event, data = self._event, self._data
        self._event, self._data = None, []
        if not data:
            return None
        return Message(event=event or None, data="\n".join(data), id=self.last_id)
