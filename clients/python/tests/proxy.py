"""A TCP proxy for HTTP/1.1 that can swallow the answer to one request:
it forwards the request to the server, reads the whole answer, and closes
the client's connection instead of passing it on, as a network that broke
after the server applied the call."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Optional, Tuple
from urllib.parse import urlparse


def read_message(sock: socket.socket, buffer: bytes) -> Tuple[Optional[bytes], bytes]:
    """One HTTP message (head and Content-Length body) from `sock`; answers
    it (None when the peer closed) and what was read past it."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


class Listener:
    """A port on 127.0.0.1 whose connections are each served by `_serve`
    on a thread of their own."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.listener.close()


class DroppingProxy(Listener):
    def __init__(self, target_url: str, drop: bytes) -> None:
        target = urlparse(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        #: The request line's start (b"POST /tasks ") whose first answer is swallowed.
        self.drop = drop
        self.dropped = 0
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        pending, answers = b"", b""
        with client, upstream:
            while True:
                request, pending = read_message(client, pending)
                if request is None:
                    return
                upstream.sendall(request)
                answer, answers = read_message(upstream, answers)
                if answer is None:
                    return
                passed = self._pass(request, answer)
                if passed is None:
                    return
                client.sendall(passed)

    def _pass(self, request: bytes, answer: bytes) -> Optional[bytes]:
        """The answer the client gets, or None to swallow it and close."""
        if self.drop and request.startswith(self.drop) and self.dropped == 0:
            self.dropped += 1
            return None
        return answer


class StreamCuttingProxy(Listener):
    """A TCP proxy that ends every event stream it passes after `keep`
    events: `clean` ends the chunked answer as a server that stopped would,
    otherwise the connection breaks a few bytes into the next event, as a
    network that failed mid-event. Other answers pass untouched."""

    #: What the next event's first bytes look like on the wire: its chunk size line and `id: …`.
    PARTIAL = 12

    def __init__(self, target_url: str, keep: int, clean: bool) -> None:
        target = urlparse(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.keep = keep
        self.clean = clean
        self.cuts = 0
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
        seen = b""
        sent = 0
        with client, upstream:
            while True:
                try:
                    chunk = upstream.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                seen += chunk
                limit = self._limit(seen)
                end = len(seen) if limit is None else min(len(seen), limit)
                try:
                    client.sendall(seen[sent:end])
                except OSError:
                    return
                sent = end
                if limit is not None and sent == limit:
                    self.cuts += 1
                    with contextlib.suppress(OSError):
                        if self.clean:
                            client.sendall(b"0\r\n\r\n")
                        client.shutdown(socket.SHUT_RDWR)
                    return

    def _limit(self, seen: bytes) -> Optional[int]:
        """Where the answer is cut, once the `keep`-th event has come."""
        head_end = seen.find(b"\r\n\r\n")
        if head_end < 0 or b"text/event-stream" not in seen[:head_end].lower():
            return None
        at = head_end
        for _ in range(self.keep):
            at = seen.find(b"\n\n", at + 1)
            if at < 0:
                return None
        # Past the event's blank line and its chunk's CRLF.
        end = at + 2 + 2
        return end if self.clean else end + self.PARTIAL

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    return
                sink.sendall(chunk)
        except OSError:
            return


class HintingProxy(DroppingProxy):
    """A balancer in front of one server that names `owner` in every answer
    (`X-Taskq-Owner`), as a node that forwarded the call to the org's owner
    does; counts the requests it passes and drops none."""

    def __init__(self, target_url: str, owner: str) -> None:
        self.owner = owner.encode()
        self.requests = 0
        super().__init__(target_url, drop=b"")

    def _pass(self, request: bytes, answer: bytes) -> Optional[bytes]:
        self.requests += 1
        status_line, rest = answer.split(b"\r\n", 1)
        return status_line + b"\r\nx-taskq-owner: " + self.owner + b"\r\n" + rest


class ClosingListener(Listener):
    """A port that accepts connections and closes them at once, unanswered,
    as a node out of a client's reach through a broken route; counts them."""

    def __init__(self) -> None:
        self.accepted = 0
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        self.accepted += 1
        client.close()
