"""loadtest waits for an engine that is still starting (right after a deploy a CPU vLLM answers
about a minute after its unit starts): while the port refuses connections or the server says
503, up to --ready-timeout; any other answer fails at once. A real HTTP server on loopback."""

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvprov import loadtest_client as ltc

MODELS = json.dumps({"data": [{"id": "tiny", "max_model_len": 4096}]}).encode()


def serve(statuses: list[int]):
    """A server answering GET /v1/models with statuses[i] for its i-th request, then 200."""
    seen = []

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            status = statuses[len(seen) - 1] if len(seen) <= len(statuses) else 200
            body = MODELS if status == 200 else b'{"error": "loading"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(ltc, "READY_POLL_S", 0.05)
    lines = []
    monkeypatch.setattr(ltc, "_progress", lines.append)
    return lines


def test_a_starting_engine_is_waited_for_and_said(fast):
    server, seen = serve([503, 503])
    ep = ltc.Endpoint("h/main", f"http://127.0.0.1:{server.server_port}")
    ltc.wait_ready(ep, 5, 30)
    server.shutdown()
    assert ep.model == "tiny" and ep.max_model_len == 4096 and len(seen) == 3
    assert fast and fast[0].startswith("h/main: waiting for the engine to answer (GET /v1/models: HTTP 503")


def test_a_port_nothing_listens_on_yet_is_waited_for_until_it_answers():
    with socket.socket() as s:  # a free port, closed: connections are refused until the server binds it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ep = ltc.Endpoint("h/main", f"http://127.0.0.1:{port}")
    started = []

    def later():
        server = ThreadingHTTPServer(("127.0.0.1", port), type("H", (BaseHTTPRequestHandler,), {
            "do_GET": lambda self: (self.send_response(200), self.send_header("Content-Length", str(len(MODELS))),
                                    self.end_headers(), self.wfile.write(MODELS)),
            "log_message": lambda self, *a: None}))
        started.append(server)
        server.serve_forever()

    timer = threading.Timer(0.3, later)
    timer.start()
    ltc.wait_ready(ep, 5, 30)
    started[0].shutdown()
    assert ep.model == "tiny"


def test_other_answers_fail_at_once_and_the_wait_has_an_end():
    server, seen = serve([401])
    ep = ltc.Endpoint("h/main", f"http://127.0.0.1:{server.server_port}")
    with pytest.raises(ltc.EndpointError, match="HTTP 401"):
        ltc.wait_ready(ep, 5, 30)
    assert len(seen) == 1  # not retried
    server.shutdown()
    server, seen = serve([503] * 1000)
    ep = ltc.Endpoint("h/main", f"http://127.0.0.1:{server.server_port}")
    with pytest.raises(ltc.EndpointError, match=r"^not answering after 0.3 s: GET /v1/models: HTTP 503"):
        ltc.wait_ready(ep, 5, 0.3)
    assert len(seen) > 1
    with pytest.raises(ltc.EndpointError, match=r"^GET /v1/models: HTTP 503"):  # 0: no wait at all
        ltc.wait_ready(ep, 5, 0)
    server.shutdown()


def streaming_server(close_silently: bool = False):
    """An HTTP/1.1 server streaming chat completions with chunked encoding and keep-alive; it
    records the client port of every request. close_silently: it closes each connection after
    the answer without saying so (as a server's keep-alive timeout does)."""
    ports = []

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            ports.append(self.client_address[1])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in ({"choices": [{"delta": {"content": "hi"}}]},
                          {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}):
                data = b"data: " + json.dumps(event).encode() + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
            self.close_connection = close_silently

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, ports


@pytest.mark.parametrize("close_silently", [False, True])
def test_streamed_requests_keep_their_connection_and_survive_a_server_closing_it(close_silently):
    server, ports = streaming_server(close_silently)
    async def four() -> list[dict]:
        async with ltc.AsyncClient(ltc.Endpoint("h/main", f"http://127.0.0.1:{server.server_port}"), 5) as client:
            return [await client.stream("/v1/chat/completions", {"messages": []}) for _ in range(4)]
    results = asyncio.run(four())
    server.shutdown()
    assert all(r["ok"] and r["text"] == "hi" and r["output_tokens"] == 1 for r in results), results
    # kept alive: one connection for the four; closed by the server: each one on a new connection, none failed
    assert len(set(ports)) == (4 if close_silently else 1) and len(ports) == 4
