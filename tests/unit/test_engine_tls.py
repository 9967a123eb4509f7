"""TLS for the engine's API (#24): kvprov_engine_tls_cert_file/_key_file become root-only files
systemd hands the API process as credentials, the unit passes --ssl-certfile/--ssl-keyfile %d/...
(never the material), check refuses a half or mismatched pair, an expired certificate and an
encrypted key, and the host's collector trusts exactly the deployed certificate.

The certificates come from tests/tls.py (`cryptography`, an ansible-core dependency)."""

from __future__ import annotations

import importlib.util
import json
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvprov.validate.parsers import exec_argv, parse_unit
from tests.conftest import ROOT, render_one_host
from tests.tls import make_cert, pem
from tests.unit.test_check_host_values import private_file, problems
from tests.unit.test_engine_parsers import ENGINE_PY


@pytest.fixture(scope="module")
def pki():
    ca = make_cert("kvprov test CA")
    server = make_cert("engine", issuer=ca)
    return {"ca": ca, "server": server, "other": make_cert("other", issuer=ca),
            "expired": make_cert("old", issuer=ca, days=-2)}


def files(tmp_path: Path, pki: dict, cert="server", key="server") -> dict:
    return {"kvprov_engine_tls_cert_file": private_file(tmp_path, "tls.crt", pem(cert=pki[cert][0])),
            "kvprov_engine_tls_key_file": private_file(tmp_path, "tls.key", pem(key=pki[key][1]))}


# ---------------------------------------------------------------------------- check

def test_check_accepts_a_matching_pair_and_refuses_half_a_pair(tmp_path, pki):
    both = files(tmp_path, pki)
    assert problems(**both) == []
    assert problems(kvprov_engine_tls_cert_file=both["kvprov_engine_tls_cert_file"]) == [
        "error kvprov_engine_tls_cert_file: TLS needs both the certificate and its private key: set "
        "kvprov_engine_tls_key_file too"]
    assert problems(kvprov_engine_tls_key_file=both["kvprov_engine_tls_key_file"]) == [
        "error kvprov_engine_tls_key_file: TLS needs both the certificate and its private key: set "
        "kvprov_engine_tls_cert_file too"]


def test_check_refuses_a_key_of_another_certificate_an_expired_one_and_an_encrypted_key(tmp_path, pki):
    mismatch = files(tmp_path, pki, key="other")
    [p] = problems(**mismatch)
    assert p.startswith("error kvprov_engine_tls_key_file: ") and "does not belong to the certificate" in p
    [p] = problems(**files(tmp_path, pki, cert="expired", key="expired"))
    assert p.startswith("error kvprov_engine_tls_cert_file: ") and "the certificate expired on" in p
    locked = private_file(tmp_path, "locked.key", pem(key=pki["server"][1], password=b"pw"))
    [p] = problems(**{**files(tmp_path, pki), "kvprov_engine_tls_key_file": locked})
    assert p == f'error kvprov_engine_tls_key_file: "{locked}" is not a private key in PEM form: it is encrypted: ' \
                "give the key without a passphrase (it stays root-only on the host)"
    garbage = private_file(tmp_path, "g.crt", "not a certificate\n")
    assert f'"{garbage}" is not a certificate in PEM form: it does not parse' in " ".join(
        problems(**{**files(tmp_path, pki), "kvprov_engine_tls_cert_file": garbage}))
    ca = tmp_path / "ca.pem"
    ca.write_text("nothing\n")
    assert problems(kvprov_engine_tls_ca_file=str(ca)) == [
        f'error kvprov_engine_tls_ca_file: "{ca}" holds no PEM certificate']


def test_check_warns_about_a_key_others_can_read(tmp_path, pki):
    both = files(tmp_path, pki)
    os.chmod(both["kvprov_engine_tls_key_file"], 0o644)
    assert problems(**both) == [f'warning kvprov_engine_tls_key_file: "{both["kvprov_engine_tls_key_file"]}" can '
                                "be read by others on this controller: chmod 600 it"]


# ---------------------------------------------------------------------------- the rendered units

@pytest.mark.parametrize("engine", ["vllm_baseline", "lmcache_mp", "sglang_hicache"])
def test_the_api_unit_gets_the_pair_as_credentials_and_never_the_material(tmp_path, pki, engine):
    both = files(tmp_path, pki)
    out = render_one_host(tmp_path, "k-0123456789", kvprov_engine=engine, **both)
    prefix = "kvprov-sglang-" if engine == "sglang_hicache" else "kvprov-vllm-"
    unit = parse_unit((out / f"etc/systemd/system/{prefix}main.service").read_text())["Service"]
    creds = [v for k, v in unit if k == "LoadCredential"]
    assert "engine-tls.crt:/etc/kvprov/secrets/engine-tls.crt" in creds
    assert "engine-tls.key:/etc/kvprov/secrets/engine-tls.key" in creds
    [start] = [v for k, v in unit if k == "ExecStart"]
    argv = exec_argv(start, from_show=False)
    assert argv[argv.index("--ssl-certfile") + 1] == "%d/engine-tls.crt"
    assert argv[argv.index("--ssl-keyfile") + 1] == "%d/engine-tls.key"
    rendered = "\n".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    assert "PRIVATE KEY" not in rendered and "BEGIN CERTIFICATE" not in rendered
    if engine == "lmcache_mp":  # the MP server speaks ZMQ, not HTTP: no TLS arguments there
        server = (out / "etc/systemd/system/kvprov-lmcache-main.service").read_text()
        assert "--ssl-" not in server and "engine-tls" not in server


def test_vllms_own_parser_takes_the_units_tls_arguments(tmp_path, pki):
    if not os.access(ENGINE_PY, os.X_OK):
        pytest.fail(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
    out = render_one_host(tmp_path, None, kvprov_engine="vllm_baseline", **files(tmp_path, pki))
    [start] = [v for k, v in parse_unit((out / "etc/systemd/system/kvprov-vllm-main.service").read_text())["Service"]
               if k == "ExecStart"]
    argv = exec_argv(start, from_show=False)
    argv = argv[argv.index("serve") + 2:] if "serve" in argv else argv[3:]
    code = ("import json,sys\nfrom vllm.entrypoints.launchers.cli_args import make_arg_parser\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
            "a = make_arg_parser(FlexibleArgumentParser(prog='vllm-serve')).parse_args(json.loads(sys.argv[1]))\n"
            "print(json.dumps([a.ssl_certfile, a.ssl_keyfile]))")
    r = subprocess.run([ENGINE_PY, "-c", code, json.dumps(argv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.splitlines()[-1]) == ["%d/engine-tls.crt", "%d/engine-tls.key"]


# ---------------------------------------------------------------------------- the host's collector

class _Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"vllm:prefix_cache_hits_total 3.0\n" if self.path == "/metrics" else b"")

    def log_message(self, *args):
        pass


def _serve(tmp_path: Path, cert, key) -> ThreadingHTTPServer:
    (tmp_path / "srv.crt").write_text(pem(cert=cert))
    (tmp_path / "srv.key").write_text(pem(key=key))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_the_collector_trusts_exactly_the_deployed_certificate(tmp_path, pki):
    """plugins/modules/kvprov_collect.py's probe over https: the engine presenting the deployed
    certificate is healthy; one presenting another certificate (even from the same CA) is not."""
    spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "plugins/modules/kvprov_collect.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    deployed = tmp_path / "engine-tls.crt"
    deployed.write_text(pem(cert=pki["server"][0]))
    good = _serve(tmp_path, *pki["server"])
    try:
        status, body, error = collect.http_get(f"https://127.0.0.1:{good.server_port}/metrics",
                                               tls=collect.pinned_tls(str(deployed)))
        assert (status, error) == (200, None) and "prefix_cache_hits" in body
        assert collect.http_get(f"http://127.0.0.1:{good.server_port}/health")[0] is None  # plain HTTP: no answer
    finally:
        good.shutdown()
    other = _serve(tmp_path, *pki["other"])
    try:
        status, _, error = collect.http_get(f"https://127.0.0.1:{other.server_port}/health",
                                            tls=collect.pinned_tls(str(deployed)))
        assert status is None and "CERTIFICATE_VERIFY_FAILED" in error
    finally:
        other.shutdown()


def test_the_collector_pins_the_leaf_of_a_deployed_chain_not_its_issuer(tmp_path, pki):
    """#38: a deployed certificate file may hold the chain (leaf, then its CA): the collector trusts the
    leaf alone, so another certificate of the same CA presented on the engine's port is refused."""
    spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "plugins/modules/kvprov_collect.py")
    collect = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collect)
    deployed = tmp_path / "engine-tls.crt"
    deployed.write_text(pem(cert=pki["server"][0]) + pem(cert=pki["ca"][0]))
    for name, ok in (("server", True), ("other", False)):
        srv = _serve(tmp_path, *pki[name])
        try:
            status, _, error = collect.http_get(f"https://127.0.0.1:{srv.server_port}/health",
                                                tls=collect.pinned_tls(str(deployed)))
        finally:
            srv.shutdown()
        assert (status == 200) == ok and (ok or "CERTIFICATE_VERIFY_FAILED" in error), (name, status, error)
    (tmp_path / "empty.crt").write_text("not a certificate\n")
    with pytest.raises(ValueError, match="no PEM certificate"):
        collect.pinned_tls(str(tmp_path / "empty.crt"))


# ---------------------------------------------------------------------------- loadtest's client

class _Api(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):  # noqa: N802
        self.seen.append((self.server.server_port, self.path, self.headers.get("Authorization")))
        body = b'{"data": [{"id": "tiny", "max_model_len": 4096}]}' if self.path == "/v1/models" else \
            b"vllm:prefix_cache_hits_total 3.0\n"
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_loadtest_verifies_the_engine_with_its_ca_and_sends_the_key_to_its_api_only(tmp_path, pki):
    from kvprov import loadtest, loadtest_client

    (tmp_path / "srv.crt").write_text(pem(cert=pki["server"][0]))
    (tmp_path / "srv.key").write_text(pem(key=pki["server"][1]))
    (tmp_path / "ca.pem").write_text(pem(cert=pki["ca"][0]))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    api.socket = ctx.wrap_socket(api.socket, server_side=True)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), _Api)  # LMCache MP's metrics port: plain HTTP
    for s in (api, plain):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        [ep] = loadtest.url_endpoints([f"https://127.0.0.1:{api.server_port}"], "k-0123456789", None,
                                      str(tmp_path / "ca.pem"))
        ep.metrics_urls.append(f"http://127.0.0.1:{plain.server_port}/metrics")
        client = loadtest_client.Client(ep, 10)
        assert client.get_json("/v1/models")["data"][0]["id"] == "tiny"
        counters, errors = loadtest_client.read_counters(client, ep.metrics_urls)
        assert errors == [] and counters
        assert _Api.seen == [(api.server_port, "/v1/models", "Bearer k-0123456789"),
                             (api.server_port, "/metrics", None), (plain.server_port, "/metrics", None)]
        [untrusted] = loadtest.url_endpoints([f"https://127.0.0.1:{api.server_port}"], None, None, None)
        with pytest.raises(loadtest_client.EndpointError, match="TLS: the engine's certificate is not trusted"):
            loadtest_client.Client(untrusted, 10).get_json("/v1/models")
    finally:
        api.shutdown()
        plain.shutdown()


def test_loadtest_reaches_an_inventory_engine_with_tls_over_https_with_the_inventorys_ca():
    from kvprov import loadtest

    state = {"engine": {"name": "vllm_baseline", "scheme": "https", "instances": [{"name": "main", "port": 8000}]}}
    [ep] = loadtest.inventory_endpoints({"h1": {"kvprov_engine_tls_ca_file": "/etc/pki/ca.pem"}}, {"h1": state})
    assert (ep.url, ep.ca_file, ep.metrics_urls) == ("https://127.0.0.1:8000", "/etc/pki/ca.pem",
                                                     ["https://127.0.0.1:8000/metrics"])
