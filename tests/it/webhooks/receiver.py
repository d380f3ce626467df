"""A webhook receiver for tests/webhooks.rs, verifying every delivery with
the `standardwebhooks` package (the Standard Webhooks reference library,
from PyPI), which nobody here wrote.

It listens on 127.0.0.1 (an ephemeral port, printed first as
`listening <port>`) and prints one JSON line per request it gets.

- `POST /_secrets/<name>` with a JSON list of `whsec_` secrets: the
  secrets deliveries to `<name>` are verified with (each separately, so a
  rotation's two signatures can both be seen to verify).
- `POST /<mode>/<name>`: a delivery. `mode` says how to answer: `ok` 200;
  `flaky` 500 the first time a `webhook-id` comes, 200 after; `gone` 410.
  The line says which secrets verified it (`verified`, their indexes), the
  headers, and the body.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

from standardwebhooks import Webhook

SECRETS = {}
SEEN = set()
LOCK = Lock()


def emit(record):
    with LOCK:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path.strip("/").split("/")
        if parts[0] == "_secrets" and len(parts) == 2:
            with LOCK:
                SECRETS[parts[1]] = json.loads(body)
            return self.answer(200)
        if len(parts) != 2:
            return self.answer(404)
        mode, name = parts
        headers = {k.lower(): v for k, v in self.headers.items()}
        verified = []
        with LOCK:
            secrets = list(SECRETS.get(name, []))
        for i, secret in enumerate(secrets):
            try:
                Webhook(secret).verify(body, headers)
                verified.append(i)
            except Exception:
                pass
        msg_id = headers.get("webhook-id")
        status = 200
        if mode == "gone":
            status = 410
        elif mode == "flaky":
            with LOCK:
                first = msg_id not in SEEN
                SEEN.add(msg_id)
            status = 500 if first else 200
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        emit(
            {
                "name": name,
                "mode": mode,
                "id": msg_id,
                "timestamp": headers.get("webhook-timestamp"),
                "signature": headers.get("webhook-signature"),
                "verified": verified,
                "status": status,
                "body": parsed,
            }
        )
        self.answer(status)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    emit({"listening": server.server_address[1]})
    server.serve_forever()


if __name__ == "__main__":
    main()
