"""Security review #24, finding 8: the ONTAP REST client follows no redirect. A real HTTPS
server on 127.0.0.1 (a throwaway self-signed certificate, given as the CA bundle) answers
every request with a 302 to a second, plain-HTTP server on 127.0.0.1 that records what it
gets: the client must fail naming the Location, and the second server must see nothing
(no request, so no Authorization header). Verification stays on by default; the user's
explicit kvprov_storage_validate_certs: false still reaches an untrusted cluster."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from pathlib import Path

import pytest

from kvprov.storage import ontap
from kvprov.storage.systems import System
from tests.unit.test_storage_ontap import certificate  # noqa: F401 (the test CA fixture)

USER, PASSWORD = "kvprov_ro", "S3cret-not-forwarded"


class Recorder(http.server.ThreadingHTTPServer):
    """Plain HTTP: records (path, Authorization) of every request, answers an empty collection."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), RecordHandler)
        self.seen: list[tuple[str, str | None]] = []


class RecordHandler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        data = json.dumps({"records": [{"name": "not ONTAP's"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Redirector(http.server.ThreadingHTTPServer):
    """HTTPS: a 302 to self.location for every request (or, location None, an empty collection)."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext, location: str | None):
        super().__init__(("127.0.0.1", 0), RedirectHandler)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.location = location
        self.requests = 0


class RedirectHandler(http.server.BaseHTTPRequestHandler):
    server: Redirector

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.server.requests += 1
        if self.server.location is None:
            data = b'{"records": []}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            data = b""
            self.send_response(302)
            self.send_header("Location", self.server.location + self.path)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers(certificate):
    made = []

    def make(location: str | None):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*map(str, certificate))
        made.append(serve(Redirector(context, location)))
        return made[-1]
    recorder = serve(Recorder())
    made.append(recorder)
    yield recorder, make
    for s in made:
        s.shutdown()
        s.server_close()


def system(tmp_path: Path, port: int, **kw) -> System:
    creds = tmp_path / "ontap.cred"
    creds.write_text(f"username={USER}\npassword={PASSWORD}\n")
    creds.chmod(0o600)
    return System(name="cluster1", kind="ontap", address="127.0.0.1", svm="svm_kv", credentials_file=str(creds),
                  api_port=port, api_timeout=5, **kw)


def test_a_redirect_to_plain_http_on_another_port_is_not_followed(tmp_path, servers, certificate):
    recorder, make = servers
    elsewhere = f"http://127.0.0.1:{recorder.server_address[1]}"
    cluster = make(elsewhere)
    with pytest.raises(ontap.ApiError) as e:
        ontap.fetch(system(tmp_path, cluster.server_address[1], ca_bundle=str(certificate[0])))
    assert cluster.requests == 1
    assert recorder.seen == []  # no request at all: no Authorization header, no data taken as ONTAP's
    message = str(e.value)
    assert "HTTP 302 redirect to " + elsewhere + "/api/protocols/nfs/services" in message
    assert "not followed" in message and PASSWORD not in message


def test_a_redirect_on_the_same_server_is_not_followed_either(tmp_path, servers, certificate):
    _, make = servers
    cluster = make(None)
    cluster.location = f"https://127.0.0.1:{cluster.server_address[1]}/elsewhere"
    with pytest.raises(ontap.ApiError, match="HTTP 302 redirect to https://127.0.0.1:.*/elsewhere/api/"):
        ontap.fetch(system(tmp_path, cluster.server_address[1], ca_bundle=str(certificate[0])))
    assert cluster.requests == 1


def test_verification_is_on_by_default_and_off_only_when_the_user_says_so(tmp_path, servers):
    _, make = servers
    cluster = make(None)
    with pytest.raises(ontap.ApiError, match="certificate is not trusted"):
        ontap.fetch(system(tmp_path, cluster.server_address[1]))
    assert cluster.requests == 0
    state = ontap.fetch(system(tmp_path, cluster.server_address[1], validate_certs=False))
    assert state == {"nfs": [], "interfaces": [], "volumes": [], "policies": []} and cluster.requests == 4


def test_the_credentials_go_to_the_management_address_only(tmp_path):
    from kvprov.storage import credentials

    api = ontap.Api(system(tmp_path, 1), credentials.Credentials(USER, PASSWORD))
    assert api.base == "https://127.0.0.1:1"
    with pytest.raises(ontap.ApiError, match="refusing to send the credentials to http://127.0.0.1:1/api"):
        api._get("http://127.0.0.1:1/api/storage/volumes", "/api/storage/volumes")
