"""kvprov loadtest's talking to a server: the Endpoint (one OpenAI-compatible server and
where its cache counters are), the HTTP clients that send requests to it alone -- Client for
the JSON calls around the load, AsyncClient for the load itself (streamed inference from one
event loop over kept-alive connections), both sending the API key to its API only, over TCP
or, through an ssh tunnel, its Unix socket (Endpoint.sockets) --, an
Answer as it streams in, what it says when a server is down or refuses (EndpointError, answers cut and the key redacted), and
the calls before any load: probe (/v1/models), wait_ready (an engine still starting),
choose_api (chat or completions) and read_counters (its /metrics); and _progress, the
progress line on stderr (here because wait_ready says its waiting with it; kvprov.loadtest's
lines use it too).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kvprov.loadtest_metrics import cache_counters
from kvprov.validate.report import clean as printable

USER_AGENT = "kvprov-loadtest"
READY_POLL_S = 2.0


# ---------------------------------------------------------------------------- the endpoint

@dataclass
class Endpoint:
    """One OpenAI-compatible server to measure, and where its cache counters are."""

    name: str  # host/instance, or host:port for --url
    url: str  # scheme://host:port[/prefix], without /v1
    metrics_urls: list[str] = field(default_factory=list)
    engine: str | None = None
    api_key: str | None = field(default=None, repr=False)  # sent as Bearer to its API only; never printed or stored
    ca_file: str | None = None  # https: the CA certificates to verify it with (None: the trust store)
    via: dict | None = field(default=None, repr=False)  # on the host's loopback: its connection variables
    tunnel: str | None = None  # how it is reached when through an ssh tunnel (said in the JSON)
    # through an ssh tunnel: {a URL's host:port as the host sees it: the controller's Unix socket
    # that reaches it} (kvprov.tunnel); the URLs keep the engine's own address
    sockets: dict[str, str] = field(default_factory=dict, repr=False)
    max_model_len: int | None = None  # from /v1/models, else the inventory
    max_model_len_from: str = ""
    model: str | None = None  # served name, from /v1/models
    model_path: str | None = None  # where its tokenizer files may be (inventory) or --tokenizer
    api: str | None = None  # "chat" or "completions"
    problem: str | None = None  # why it cannot be (or was not fully) measured
    host: str | None = None  # the inventory host (restarts for --replay)
    units: list[str] = field(default_factory=list)  # its engine units, in start order
    storage_dir: str | None = None  # its KV tier's directory (inventory): a namespace other hosts may share

    def public(self) -> dict:
        return {"name": self.name, "url": self.url, "engine": self.engine, "model": self.model,
                "max_model_len": self.max_model_len, "max_model_len_from": self.max_model_len_from or None,
                "api": self.api, "metrics_urls": self.metrics_urls, "problem": self.problem, "tunnel": self.tunnel}


# ---------------------------------------------------------------------------- HTTP client

class Client:
    """Calls to one endpoint only (its scheme, host and port; no redirects followed): /v1/models,
    the chat probe, /metrics."""

    def __init__(self, ep: Endpoint, timeout: float):
        self.ep, self.timeout = ep, timeout
        self._tls: ssl.SSLContext | None = None  # made once: loading a trust store costs milliseconds of CPU

    def _conn(self, url: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(url)
        path = self.ep.sockets.get(parts.netloc)  # through the tunnel's socket, to the same host:port
        if parts.scheme == "https":  # verified: the endpoint's CA file, else the trust store
            if self._tls is None:
                self._tls = ssl.create_default_context(cafile=self.ep.ca_file)
            if path:
                return _UnixHTTPSConnection(path, parts.hostname, parts.port, timeout=self.timeout,
                                            context=self._tls), parts.path or "/"
            return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=self.timeout,
                                               context=self._tls), parts.path or "/"
        if path:
            return _UnixHTTPConnection(path, parts.hostname, parts.port, timeout=self.timeout), parts.path or "/"
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout), parts.path or "/"

    def _headers(self, url: str, body: bool) -> dict:
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if body:
            h["Content-Type"] = "application/json"
        if self.ep.api_key and self.sends_key(url):
            h["Authorization"] = f"Bearer {self.ep.api_key}"
        return h

    def sends_key(self, url: str) -> bool:
        """The key goes to the endpoint's own API only: not to its /metrics (open on every
        engine) nor to another port (LMCache MP's metrics, plain HTTP)."""
        return url.startswith(self.ep.url + "/") and url != self.ep.url + "/metrics"

    def call(self, method: str, url: str, body: dict | None = None, limit: int = 16 << 20) -> tuple[int, bytes]:
        conn, path = self._conn(url)
        try:
            conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                         headers=self._headers(url, body is not None))
            resp = conn.getresponse()
            return resp.status, resp.read(limit)
        finally:
            conn.close()

    def get_json(self, path: str, body: dict | None = None) -> dict:
        """GET path (POST with a body) -> JSON object; raises EndpointError saying what went wrong."""
        method = "GET" if body is None else "POST"
        try:
            status, data = self.call(method, self.ep.url + path, body)
        except (OSError, http.client.HTTPException) as e:
            raise EndpointError(f"not reachable: {method} {path}: {_oserror(e)}") from None
        if status != 200:
            raise EndpointError(f"{method} {path}: HTTP {status}{_auth_hint(status, self.ep)}: "
                                f"{_snippet(data, self.ep.api_key)}")
        try:
            value = json.loads(data)
        except ValueError:
            raise EndpointError(f"not an OpenAI-compatible server: {method} {path} did not answer JSON "
                                f"({_snippet(data, self.ep.api_key)})") from None
        if not isinstance(value, dict):
            raise EndpointError(f"not an OpenAI-compatible server: {method} {path} did not answer a JSON object")
        return value


def _unix_socket(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client's connection through an ssh tunnel's Unix socket (Endpoint.sockets): the
    request is the one to the engine's host and port (its Host header)."""

    def __init__(self, socket_path: str, host: str, port: int | None, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        self.sock = _unix_socket(self.socket_path, self.timeout)


class _UnixHTTPSConnection(http.client.HTTPSConnection):
    """The same for https: TLS over the socket, the certificate verified for the engine's own
    host name or address (as over TCP), with the client's context."""

    def __init__(self, socket_path: str, host: str, port: int | None, timeout: float, context: ssl.SSLContext):
        super().__init__(host, port, timeout=timeout, context=context)
        self.socket_path, self.tls = socket_path, context

    def connect(self) -> None:
        sock = _unix_socket(self.socket_path, self.timeout)
        try:
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def _unix_connector(path: str, tls: ssl.SSLContext | None):
    """aiohttp's connector through an ssh tunnel's Unix socket: its UnixConnector, with TLS (which
    that one does not do) verified for the request's host as TCPConnector verifies it, and its
    errors (a certificate not trusted, TLS, the socket)."""
    import aiohttp
    from aiohttp.client_exceptions import UnixClientConnectorError

    class Connector(aiohttp.UnixConnector):
        async def _create_connection(self, req, traces, timeout):
            hostname = (getattr(req, "server_hostname", None) or req.host).rstrip(".")
            try:
                async with asyncio.timeout(timeout.sock_connect):
                    _, proto = await self._loop.create_unix_connection(
                        self._factory, self.path, ssl=tls if req.is_ssl() else None,
                        server_hostname=hostname if req.is_ssl() else None)
            except ssl.SSLCertVerificationError as exc:
                raise aiohttp.ClientConnectorCertificateError(req.connection_key, exc) from exc
            except ssl.SSLError as exc:
                raise aiohttp.ClientConnectorSSLError(req.connection_key, exc) from exc
            except OSError as exc:
                if exc.errno is None and isinstance(exc, asyncio.TimeoutError):
                    raise
                raise UnixClientConnectorError(self.path, req.connection_key, exc) from exc
            return proto

    return Connector(path, limit=0)


class AsyncClient:
    """Streamed requests to one endpoint from one asyncio event loop: the load of a point (a
    wave of users, a closed or open loop), so that every request leaves when the load shape
    says, however busy the machine is (#40: a thread started per request waited for the CPU
    that an engine on the same machine took, and a wave of 16 left one after another). aiohttp,
    as `vllm bench serve` uses it; the rules are Client's: only the endpoint's own address, no
    redirect followed, TLS verified with the endpoint's CA file, the key to its API only,
    kept-alive connections (as many as requests in flight). stream() also notes when the
    request's headers were written (`sent`, time.monotonic()) and when the answer's status
    line arrived (`answered`). Use it as `async with AsyncClient(ep, timeout) as client:`."""

    def __init__(self, ep: Endpoint, timeout: float):
        self.ep, self.timeout = ep, timeout
        self.headers = Client(ep, timeout)._headers(ep.url + "/v1/", True)
        self.session = None

    async def __aenter__(self) -> "AsyncClient":
        import aiohttp

        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(_note_sent)
        tls = ssl.create_default_context(cafile=self.ep.ca_file) if urlsplit(self.ep.url).scheme == "https" else True
        path = self.ep.sockets.get(urlsplit(self.ep.url).netloc)  # through the tunnel's socket
        connector = _unix_connector(path, tls if tls is not True else None) if path else \
            aiohttp.TCPConnector(limit=0, ssl=tls)
        self.session = aiohttp.ClientSession(
            connector=connector, trace_configs=[trace], trust_env=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout))
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()

    async def stream(self, path: str, body: dict) -> dict:
        """Client.stream's answer, with `start` (the call), `sent` and `answered` (None where never
        reached). A kept
        connection the server closed meanwhile answers nothing: the request goes once more."""
        import aiohttp

        data = json.dumps(body).encode()
        for attempt in (1, 2):
            answer, when = Answer(self.ep, path, time.monotonic()), {}
            try:
                async with self.session.post(self.ep.url + path, data=data, headers=self.headers,
                                             allow_redirects=False, trace_request_ctx=when) as resp:
                    when["answered"] = time.monotonic()
                    kind = resp.headers.get("Content-Type")
                    if not answer.streams(resp.status, kind):
                        answer.refuse(resp.status, kind, await resp.content.read(4096))
                    else:
                        while not answer.over:
                            line = await resp.content.readline()
                            if not line:
                                break
                            answer.feed(line)
                        if answer.finish():
                            await resp.read()  # the body's end: the connection can serve the next request
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # a kept connection the server had closed: no answer, and the request could not be
                # written or was dropped unread; a connection that could not be opened is final
                if attempt == 1 and "answered" not in when and not isinstance(e, aiohttp.ClientConnectorError):
                    continue
                answer.fail(e)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as e:
                answer.fail(e)
            answer.close()
            return {**answer.out, "start": answer.start, "sent": when.get("sent"), "answered": when.get("answered")}
        raise AssertionError("unreachable")


async def _note_sent(session, ctx, params) -> None:  # aiohttp's trace hook: the request's headers are written
    ctx.trace_request_ctx.setdefault("sent", time.monotonic())


class Answer:
    """One streamed answer as it arrives, for either client: its server-sent event lines fed one
    by one (feed), then finish(); `out` is {ok, ttft, e2e (s), output_tokens, prompt_tokens
    (server's), text, error}. TTFT and e2e run from `start` (the request's call)."""

    def __init__(self, ep: Endpoint, path: str, start: float):
        self.ep, self.path, self.start = ep, path, start
        self.out = {"ok": False, "ttft": None, "e2e": None, "output_tokens": 0, "prompt_tokens": None, "text": "",
                    "error": None}
        self.pieces: list[str] = []
        self.chunks, self.usage, self.done, self.over = 0, None, False, False

    def _error(self, text: str) -> None:
        self.out["error"], self.over = text, True

    @staticmethod
    def streams(status: int, content_type: str | None) -> bool:
        """Whether a response's head starts a stream (else refuse() says why)."""
        return status == 200 and "text/event-stream" in (content_type or "")

    def refuse(self, status: int, content_type: str | None, head: bytes) -> None:
        """An error status or another content type; `head` is the start of the body."""
        if status != 200:
            self._error(f"POST {self.path}: HTTP {status}{_auth_hint(status, self.ep)}: "
                        f"{_snippet(head, self.ep.api_key)}")
        else:
            self._error(f"not an OpenAI-compatible stream: POST {self.path} answered "
                        f"{printable(content_type or 'no Content-Type')}: {_snippet(head, self.ep.api_key)}")

    def feed(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            self.done = self.over = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            self._error(f"not an OpenAI-compatible stream: {_snippet(data, self.ep.api_key)}")
            return
        if isinstance(event, dict) and event.get("error"):
            err = event["error"]
            message = err.get("message", err) if isinstance(err, dict) else err
            self._error(f"error event: {_snippet(json.dumps(message).encode(), self.ep.api_key)}")
            return
        self.usage = event.get("usage") or self.usage
        text = "".join(_choice_text(c) for c in event.get("choices") or [])
        if text:
            if self.out["ttft"] is None:
                self.out["ttft"] = time.monotonic() - self.start
            self.pieces.append(text)
            self.chunks += 1

    def fail(self, e: Exception) -> None:
        self.out["ok"] = False
        self._error(f"POST {self.path}: {_oserror(e)}")

    def finish(self) -> bool:
        """At the end of the body: whether the answer is whole (then out is filled in)."""
        if self.out["error"]:
            return False
        if not self.done:
            self._error(f"POST {self.path}: the stream ended without [DONE]")
            return False
        out = self.out
        out["e2e"] = time.monotonic() - self.start
        out["text"] = "".join(self.pieces)
        if isinstance(self.usage, dict):
            out["prompt_tokens"] = self.usage.get("prompt_tokens")
            out["output_tokens"] = self.usage.get("completion_tokens") or self.chunks
        else:
            out["output_tokens"] = self.chunks
        if out["ttft"] is None:
            out["ttft"] = out["e2e"]  # no text at all (an immediate stop): the first token is the last
        out["ok"] = True
        return True

    def close(self) -> None:
        if self.out["e2e"] is None:
            self.out["e2e"] = time.monotonic() - self.start


class EndpointError(Exception):
    pass


def _choice_text(choice: dict) -> str:
    if not isinstance(choice, dict):
        return ""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return (delta.get("content") or "") + (delta.get("reasoning_content") or "")
    return choice.get("text") or ""


def _oserror(e: Exception) -> str:
    if isinstance(e, TimeoutError) or "timed out" in str(e):
        return "timed out"
    if isinstance(e, ssl.SSLCertVerificationError):
        why = getattr(e, "certificate_error", e)  # aiohttp's is one too, with ssl's inside (no verify_message)
        return (f"TLS: the engine's certificate is not trusted ({getattr(why, 'verify_message', None) or why}; "
                "the CA goes in kvprov_engine_tls_ca_file, or --cacert with --url)")
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _snippet(data: bytes, secret: str | None = None, n: int = 200) -> str:
    """The start of a server's answer, for a message and the run's files: one line, control
    characters as '?', the API key (`secret`: a server may echo the request, a 401 the key it
    refused) as <redacted>, also as JSON writes it (escaped, '/' as '\\/')."""
    text = data.decode("utf-8", "replace")
    escaped = json.dumps(secret)[1:-1] if secret else ""
    for form in sorted({secret, escaped, escaped.replace("/", "\\/")} if secret else (), key=len, reverse=True):
        text = text.replace(form, "<redacted>")
    text = text.strip().replace("\n", " ")
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return (text[:n] + "...") if len(text) > n else text or "(empty)"


def _auth_hint(status: int, ep: Endpoint) -> str:
    if status not in (401, 403):
        return ""
    return " (the API key was refused)" if ep.api_key else " (the server wants an API key: kvprov_engine_api_key(_file) " \
                                                           "or --api-key-file)"


# ---------------------------------------------------------------------------- before the load

def probe(ep: Endpoint, timeout: float) -> None:
    """GET /v1/models: the served model and its context (sets ep.model, ep.max_model_len); raises
    EndpointError. No inference request."""
    models = Client(ep, timeout).get_json("/v1/models")
    data = models.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) or not data[0].get("id"):
        raise EndpointError("not an OpenAI-compatible server: GET /v1/models has no model in `data`")
    ep.model = str(data[0]["id"])
    limit = data[0].get("max_model_len") or data[0].get("context_length")
    if isinstance(limit, int) and limit > 0:
        ep.max_model_len, ep.max_model_len_from = limit, "/v1/models"


STARTING = re.compile(r"not reachable: |.*: HTTP 50[23]\b")  # no answer yet, or "starting" (engine loading)


def wait_ready(ep: Endpoint, timeout: float, ready_timeout: float, why: str = "") -> None:
    """probe() until the engine answers: while it refuses connections or says 502/503 (a unit
    just started loads its model for a while), for at most ready_timeout seconds, saying so
    every 30 s; any other answer (a wrong key, not an OpenAI server) fails at once.
    EndpointError with the last reason when it never answers."""
    deadline = time.monotonic() + ready_timeout
    said = 0.0
    while True:
        try:
            probe(ep, timeout)
            return
        except EndpointError as e:
            left = deadline - time.monotonic()
            if left <= 0 or not STARTING.match(str(e)):
                if left <= 0 and ready_timeout > 0:
                    raise EndpointError(f"not answering after {ready_timeout:g} s{why}: {e}") from None
                raise
            if time.monotonic() - said >= 30:
                _progress(f"{ep.name}: waiting for the engine to answer{why} ({e}; up to {left:.0f} s more)")
                said = time.monotonic()
        time.sleep(READY_POLL_S)


def choose_api(ep: Endpoint, timeout: float, want: str) -> str:
    """chat when the server answers a one-token chat request (a model without a chat template
    refuses it), else completions. `want` chat/completions skips the probe."""
    if want != "auto":
        return want
    body = {"model": ep.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1,
            "stream": False}
    try:
        status, _ = Client(ep, timeout).call("POST", ep.url + "/v1/chat/completions", body, 1 << 20)
    except (OSError, http.client.HTTPException) as e:
        raise EndpointError(f"not reachable: POST /v1/chat/completions: {_oserror(e)}") from None
    return "chat" if status == 200 else "completions"


def read_counters(client: Client, urls: list[str]) -> tuple[dict[str, float], list[str]]:
    """The cache counters of every metrics URL together; the errors of those that did not answer."""
    out, errors = {}, []
    for url in urls:
        try:
            status, data = client.call("GET", url)
        except (OSError, http.client.HTTPException) as e:
            errors.append(f"{url}: {_oserror(e)}")
            continue
        if status != 200:
            errors.append(f"{url}: HTTP {status}")
            continue
        for k, v in cache_counters(data.decode("utf-8", "replace")).items():
            out[k] = out.get(k, 0.0) + v
    return out, errors


def _progress(line: str) -> None:
    """A progress line on stderr; what a server said in it (model names, errors) escaped."""
    print(f"loadtest: {printable(line)}", file=sys.stderr, flush=True)
