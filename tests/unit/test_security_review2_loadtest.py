"""Security review #24, finding 14 (1) and (2): what an engine's server says reaches the
terminal escaped (a model id with terminal escape sequences prints as \\x1b...), and a 401 or
403 body that echoes the API key is kept (loadtest.json, loadtest.html, messages) with the
key replaced by <redacted>. A small in-process HTTP server on 127.0.0.1 plays the hostile
server; the real CLI runs in-process."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvprov import cli
from kvprov import loadtest_client as ltc
from kvprov.validate.report import clean as printable

KEY = "sk-kvprov/secret+key"  # a '/' that JSON may escape as '\/'
MODEL = "tiny\x1b]0;owned\x07\x1b[2J\x1b[31m"
SMALL = ["--prompt-tokens", "40", "--turns", "1", "--users", "1", "--output-tokens", "2", "--seed", "7",
         "--duration", "30", "--api", "completions"]


class Hostile(ThreadingHTTPServer):
    """/v1/models answers MODEL; `refuse` (a method) answers `status` with a body that echoes
    the Authorization header it got, as is and JSON-escaped."""

    daemon_threads = True

    def __init__(self, refuse: str, status: int):
        super().__init__(("127.0.0.1", 0), Handler)
        self.refuse, self.status = refuse, status


class Handler(BaseHTTPRequestHandler):
    server: Hostile

    def log_message(self, *args):  # quiet
        pass

    def reply(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def echo(self) -> None:
        got = self.headers.get("Authorization") or ""
        body = '{"error": "invalid credentials ' + got + '", "escaped": ' + json.dumps(got).replace("/", "\\/") + "}"
        self.reply(self.server.status, body.encode())

    def do_GET(self):
        if self.server.refuse == "GET":
            return self.echo()
        self.reply(200, json.dumps({"object": "list", "data": [{"id": MODEL, "max_model_len": 4096}]}).encode())

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.echo()


@pytest.fixture
def hostile():
    made = []

    def make(refuse: str, status: int) -> Hostile:
        made.append(Hostile(refuse, status))
        threading.Thread(target=made[-1].serve_forever, daemon=True).start()
        return made[-1]
    yield make
    for s in made:
        s.shutdown()
        s.server_close()


def loadtest(tmp_path, server: Hostile, capsys) -> tuple[int, str, str]:
    key_file = tmp_path / "api.key"
    key_file.write_text(KEY + "\n")
    out = tmp_path / "run"
    code = cli.main(["loadtest", "--url", f"http://127.0.0.1:{server.server_address[1]}", "--api-key-file",
                     str(key_file), *SMALL, "--out", str(out)])
    err = capsys.readouterr().err
    files = "".join((out / name).read_text() for name in ("loadtest.json", "loadtest.html") if (out / name).exists())
    return code, err, files


def test_printable_escapes_control_and_format_characters():
    assert printable(MODEL) == "tiny\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m"
    assert printable("a\nb\u202ec é") == "a\\nb\\u202ec é" and printable(None) == "None"


def test_a_snippet_never_holds_the_key():
    body = json.dumps({"error": f"bad key Bearer {KEY}"}).replace("/", "\\/").encode() + f" {KEY}".encode()
    text = ltc._snippet(body, KEY)
    assert KEY not in text and KEY.replace("/", "\\/") not in text and text.count("<redacted>") == 2


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_request_is_stored_with_its_status_and_the_key_redacted(status, tmp_path, hostile, capsys):
    code, err, files = loadtest(tmp_path, hostile("POST", status), capsys)
    assert code == 1, err
    doc = json.loads((tmp_path / "run" / "loadtest.json").read_text())
    first = doc["points"][0]["first_error"]
    assert f"HTTP {status} (the API key was refused)" in first and "<redacted>" in first
    for text in (err, files):
        assert KEY not in text and KEY.replace("/", "\\/") not in text and "secret+key" not in text


def test_a_refused_models_request_is_stored_with_the_key_redacted(tmp_path, hostile, capsys):
    code, err, files = loadtest(tmp_path, hostile("GET", 401), capsys)
    assert code == 1, err
    problem = json.loads((tmp_path / "run" / "loadtest.json").read_text())["endpoints"][0]["problem"]
    assert problem.startswith("GET /v1/models: HTTP 401 (the API key was refused): ") and "<redacted>" in problem
    assert "secret+key" not in err + files


def test_a_model_id_with_escape_sequences_prints_escaped(tmp_path, hostile, capsys):
    code, err, _ = loadtest(tmp_path, hostile("POST", 401), capsys)
    assert "\x1b" not in err and "\x07" not in err, err
    assert "model tiny\\x1b]0;owned\\x07\\x1b[2J\\x1b[31m, completions API" in err
    doc = json.loads((tmp_path / "run" / "loadtest.json").read_text())
    assert doc["endpoints"][0]["model"] == MODEL  # stored as served (JSON escapes it), sent back as served
