"""The package index client's retries, against a real server on loopback (in a thread)."""

from __future__ import annotations

import pytest

from dockerarch.sets.indexes import retrying_session

pytestmark = pytest.mark.integration


def test_an_index_that_fails_for_a_moment_is_asked_again() -> None:
    """A 503 (or a reset) is tried again with a growing wait, as pip does: the third answer,
    200, is the one used. A real server on loopback, in a thread."""
    import http.server
    import threading

    answers = [503, 503, 200]

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            code = answers.pop(0)
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        got = retrying_session().get(f"http://127.0.0.1:{server.server_address[1]}/x", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert got.status_code == 200 and got.content == b"ok" and answers == []
