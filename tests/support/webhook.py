"""The far end of the approval webhook for the proxy tests: a real HTTP server on a free loopback port,
in a thread of the test process, that answers each POST with a scripted status and keeps what came."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class WebhookReceiver:
    """Answers each POST with the next of ``statuses`` (the last one repeats) and keeps each request's
    headers (names lower-cased) and body in ``received``. :meth:`start` serves it and gives its URL;
    :meth:`stop` shuts it down."""

    statuses: list[int] = field(default_factory=lambda: [204])
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def answer(self, headers: dict[str, str], body: bytes) -> int:
        """Keeps one request and returns the status to answer it with."""
        with self.lock:
            self.received.append((headers, body))
            return self.statuses[min(len(self.received), len(self.statuses)) - 1]

    def start(self) -> str:
        """Serves on a free loopback port; returns (and sets ``url`` to) the hook's URL."""
        if self._server is not None:
            raise RuntimeError("the webhook receiver is already started")
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                status = receiver.answer({k.lower(): v for k, v in self.headers.items()}, body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/approvals"
        return self.url

    def stop(self) -> None:
        """Shuts the server down and waits for its thread; nothing when it was not started."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def notices_of(self, approval_id: str) -> list[dict[str, Any]]:
        """The notices (JSON bodies) received about one approval request, every attempt counted."""
        with self.lock:
            notices = [json.loads(body) for _, body in self.received]
        return [n for n in notices if n["approval"]["id"] == approval_id]
