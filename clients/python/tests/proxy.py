"""A TCP proxy for HTTP/1.1 that can swallow the answer to one request:
it forwards the request to the server, reads the whole answer, and closes
the client's connection instead of passing it on, as a network that broke
after the server applied the call."""

from __future__ import annotations

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


class DroppingProxy:
    def __init__(self, target_url: str, drop: bytes) -> None:
        target = urlparse(target_url)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        #: The request line's start (b"POST /tasks ") whose first answer is swallowed.
        self.drop = drop
        self.dropped = 0
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
                if request.startswith(self.drop) and self.dropped == 0:
                    self.dropped += 1
                    return
                client.sendall(answer)

    def close(self) -> None:
        self.listener.close()
