"""A fault-injecting HTTP hop in front of a local server (the GCS emulator): the first
``failures`` requests that match a method and path pattern get the status GCS's front end
answers on a bad day (503 Backend Error, as JSON); every other request is forwarded as is.

    with flaky_gcs("landing") as hop:                  # the GCS emulator behind the hop
        os.environ["STORAGE_EMULATOR_HOST"] = hop.url   # clients now pass through the hop
        ...
        hop.failed, hop.forwarded                        # what it did
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class FlakyHttpHop:
    def __init__(self, upstream_port: int, method: str, path_pattern: str, failures: int = 1,
                 status: int = 503) -> None:
        self.upstream_port = upstream_port
        self.method, self.pattern = method, re.compile(path_pattern)
        self.remaining, self.status = failures, status
        self.failed: list[str] = []
        self.forwarded: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _fails(self, method: str, path: str) -> bool:
        with self._lock:
            if self.remaining and method == self.method and self.pattern.search(path):
                self.remaining -= 1
                self.failed.append(f"{method} {path}")
                return True
            self.forwarded.append(f"{method} {path}")
            return False

    def __enter__(self) -> FlakyHttpHop:
        hop = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if hop._fails(self.command, self.path):
                    payload = json.dumps({"error": {
                        "code": hop.status, "message": "Backend Error",
                        "errors": [{"reason": "backendError", "message": "Backend Error"}],
                    }}).encode()
                    self.send_response(hop.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", hop.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream.request(self.command, self.path, body=body or None, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, *args) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def flaky_gcs(bucket: str, failures: int = 1) -> Iterator[FlakyHttpHop]:
    """A local GCS server (gcp-storage-emulator) holding ``bucket``, behind a hop that fails
    the first ``failures`` listings of the bucket's objects; point STORAGE_EMULATOR_HOST at
    ``hop.url``."""
    from gcp_storage_emulator.server import create_server

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    server.start()
    try:
        with FlakyHttpHop(port, "GET", rf"^/storage/v1/b/{bucket}/o(\?|$)", failures) as hop:
            yield hop
    finally:
        server.stop()
