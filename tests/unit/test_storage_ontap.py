"""`kvprov storage check` on ONTAP, against RECORDED RESPONSES: tests/fixtures/ontap/ holds
a good cluster's answers in the documented format of ONTAP's REST API (there is no ONTAP
here; see its README). A real HTTPS server on 127.0.0.1, with a throwaway self-signed
certificate made for the test, serves them; kvprov's real client reads them over TLS with
the certificate verified, through the real CLI. Each misconfiguration the issue lists is
one field changed in a copy of the good answers; then HTTP errors, a timeout, a refused
connection and a certificate that is not trusted."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from kvprov import cli
from tests.conftest import FIXTURES

RECORDED = FIXTURES / "ontap"
ROUTES = {
    "/api/protocols/nfs/services": "nfs_services.json",
    "/api/network/ip/interfaces": "ip_interfaces.json",
    "/api/storage/volumes": "volumes.json",
    "/api/protocols/nfs/export-policies": "export_policies.json",
}
USER, PASSWORD = "kvprov_ro", "S3cret-not-printed"


def recorded() -> dict[str, dict]:
    return {name: json.loads((RECORDED / name).read_text())
            for name in [*ROUTES.values(), "ip_interfaces_2.json", "error_401.json"]}


class Cluster(http.server.ThreadingHTTPServer):
    """Serves the recorded answers (self.answers, changed by each test), as ONTAP would:
    401 without the right basic credentials, the second LIF page for its start.uuid."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext):
        super().__init__(("127.0.0.1", 0), Handler)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.answers = recorded()
        self.status: dict[str, int] = {}  # path -> HTTP status to answer instead
        self.delay = 0.0
        self.requests: list[str] = []


class Handler(http.server.BaseHTTPRequestHandler):
    server: Cluster

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        time.sleep(self.server.delay)
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != f"Basic {token}":
            return self.send(401, self.server.answers["error_401.json"])
        if url.path in self.server.status:
            code = self.server.status[url.path]
            return self.send(code, {"error": {"message": f"recorded error {code}", "code": "3"}})
        if url.path not in ROUTES or query.get("svm.name") != ["svm_kv"] and "start.uuid" not in query:
            return self.send(404, {"error": {"message": "not found", "code": "4"}})
        name = "ip_interfaces_2.json" if "start.uuid" in query else ROUTES[url.path]
        self.send(200, self.server.answers[name])

    def send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/hal+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "keyUsage=digitalSignature,keyCertSign",
                    "-addext", "basicConstraints=critical,CA:TRUE"],
                   check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


@pytest.fixture
def cluster(certificate):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, certificate))
    server = Cluster(context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def inventory(tmp_path: Path, cluster: Cluster, ca: Path | None, **storage_vars) -> Path:
    creds = tmp_path / "ontap.cred"
    creds.write_text(f"# the read-only kvprov user\nusername={USER}\npassword={PASSWORD}\n")
    creds.chmod(0o600)
    gpu_vars = {"kvprov_storage_profile": "netapp_pnfs_rdma", "kvprov_storage_export": "/kvcache",
                "kvprov_storage_pnfs_layout": "files", "kvprov_storage_idmap_domain": "kv.example.com"}
    storage = {"ansible_host": "127.0.0.1", "kvprov_storage_api_port": cluster.server_address[1],
               "kvprov_storage_svm": "svm_kv", "kvprov_storage_credentials_file": str(creds),
               "kvprov_storage_api_timeout": 2, **({"kvprov_storage_ca_bundle": str(ca)} if ca else {}),
               **storage_vars}
    inv = {"all": {"children": {
        "gpu_nodes": {"vars": gpu_vars, "hosts": {
            "gpu1": {"ansible_host": "192.168.50.21", "kvprov_storage_server": "192.168.50.11"},
            "gpu2": {"ansible_host": "192.168.50.22", "kvprov_storage_server": "192.168.50.12"}}},
        "kv_storage": {"vars": {"kvprov_storage_system": "ontap"}, "hosts": {"cluster1": storage}}}}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def storage_check(tmp_path: Path, inv: Path, capsys) -> tuple[int, dict[str, dict], str]:
    """Run `kvprov storage check INV --json F --junit F` in-process: (exit code, {host/check: result}, table)."""
    out = tmp_path / "storage.json"
    code = cli.main(["storage", "check", str(inv), "--json", str(out), "--junit", str(tmp_path / "junit.xml")])
    table = capsys.readouterr()
    data = json.loads(out.read_text()) if out.exists() else {"hosts": {}}
    results = {f"{h}/{r['id']}": r for h, hd in data["hosts"].items() for r in hd["results"]}
    return code, results, table.out + table.err


@pytest.fixture
def good(tmp_path, cluster, certificate):
    return inventory(tmp_path, cluster, certificate[0])


def test_recorded_good_cluster_passes_every_check(tmp_path, cluster, good, capsys):
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 0, table
    assert {k: r["status"] for k, r in results.items() if r["status"] != "pass"} == {}
    for check in ("nfs.service", "nfs.v4.1", "nfs.v4.0", "nfs.pnfs", "nfs.v4.0.referrals", "nfs.v4.1.referrals",
                  "nfs.id_domain", "nfs.rdma", "lif.192.168.50.11", "lif.192.168.50.12", "volume./kvcache.online",
                  "volume./kvcache.space", "volume./kvcache.inodes", "export./kvcache.access", "storage.clients"):
        assert f"cluster1/{check}" in results, check
    assert results["cluster1/storage.clients"]["found"] == \
        "gpu1 (192.168.50.11:/kvcache), gpu2 (192.168.50.12:/kvcache)"
    assert "6144.0 GiB of 10240.0 GiB free (60.0%)" in results["cluster1/volume./kvcache.space"]["found"]
    # the second page of LIFs (_links.next) was read: lif_kv_b is there
    assert "lif_kv_b" in results["cluster1/lif.192.168.50.12"]["found"]
    # every collection asked for the SVM and named its fields, advanced ones too
    assert any("protocol.v40_features.referrals_enabled" in urllib.parse.unquote(p) for p in cluster.requests)
    assert all("svm.name=svm_kv" in p for p in cluster.requests)
    junit = (tmp_path / "junit.xml").read_text()
    assert PASSWORD not in table and junit.count("<testcase") == len(results) - 1  # the summary is no testcase


# (the recorded file, a change to the good cluster, the failing check, words its found/fix must hold)
MISCONFIGURED = {
    "nfs41_off": ("nfs_services.json", lambda a: a["records"][0]["protocol"].update(v41_enabled=False),
                  "nfs.v4.1", ["protocol.v41_enabled: false", "-v4.1 enabled"]),
    "pnfs_off": ("nfs_services.json", lambda a: a["records"][0]["protocol"]["v41_features"].update(pnfs_enabled=False),
                 "nfs.pnfs", ["pnfs_enabled: false", "-v4.1-pnfs enabled"]),
    "nfs40_on": ("nfs_services.json", lambda a: a["records"][0]["protocol"].update(v40_enabled=True),
                 "nfs.v4.0", ["protocol.v40_enabled: true", "-v4.0 disabled"]),
    "referrals_on": ("nfs_services.json",
                     lambda a: a["records"][0]["protocol"]["v41_features"].update(referrals_enabled=True),
                     "nfs.v4.1.referrals", ["referrals_enabled: true", "-v4.1-referrals disabled"]),
    "id_domain": ("nfs_services.json", lambda a: a["records"][0]["protocol"].update(v4_id_domain="corp.example.com"),
                  "nfs.id_domain", ["corp.example.com", "gpu1, gpu2", "owned by nobody"]),
    "svm_rdma_off": ("nfs_services.json", lambda a: a["records"][0].update(transport={"rdma_enabled": False}),
                     "nfs.rdma", ["transport.rdma_enabled: false", "-rdma enabled"]),
    "lif_without_rdma": ("ip_interfaces_2.json", lambda a: a["records"][0].update(rdma_protocols=[]),
                         "lif.192.168.50.12", ["lif_kv_b", "rdma_protocols", "gpu2", "-rdma-protocols roce"]),
    "lif_down": ("ip_interfaces.json", lambda a: a["records"][0].update(state="down"),
                 "lif.192.168.50.11", ["lif_kv_a", "state down", "gpu1"]),
    "volume_offline": ("volumes.json", lambda a: a["records"][1].update(state="offline"),
                       "volume./kvcache.online", ["volume kvcache: offline", "volume online"]),
    "volume_full": ("volumes.json", lambda a: a["records"][1]["space"].update(available=5 * 2**40 // 100),
                    "volume./kvcache.space", ["(0.5%)", "kvprov_storage_min_free_percent"]),
    "inodes_out": ("volumes.json", lambda a: a["records"][1]["files"].update(used=19_900_000),
                   "volume./kvcache.inodes", ["100000 inodes of 20000000 inodes free (0.5%)"]),
    "root_squashed": ("export_policies.json", lambda a: a["records"][1]["rules"][0].update(superuser=["none"]),
                      "export./kvcache.access",
                      ["gpu1", "gpu2", "rule 1 (192.168.50.0/24) has no sys/any in superuser"]),
    "host_left_out": ("export_policies.json",
                      lambda a: a["records"][1]["rules"][0].update(clients=[{"match": "192.168.50.21"}]),
                      "export./kvcache.access", ["gpu2 (192.168.50.22): rule 2 (0.0.0.0/0) has no sys/any in "
                                                 "rw_rule, superuser"]),
    "no_nfs_service": ("nfs_services.json", lambda a: a.update(records=[], num_records=0),
                       "nfs.service", ["no such SVM, or NFS was never set up"]),
}


@pytest.mark.parametrize("case", sorted(MISCONFIGURED))
def test_recorded_misconfiguration_fails_its_check_naming_it(case, tmp_path, cluster, good, capsys):
    name, change, check, words = MISCONFIGURED[case]
    change(cluster.answers[name])
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 1, table
    failed = {k for k, r in results.items() if r["status"] == "fail" and not k.endswith("/summary")}
    assert failed == {f"cluster1/{check}"}, table
    r = results[f"cluster1/{check}"]
    for word in words:
        assert word in " ".join((r["found"], r["fix"])), (word, r)
    assert f"cluster1  {check}" in table and "FAIL" in table


def test_recorded_lif_gone_a_gpu_node_mounts_through(tmp_path, cluster, certificate, capsys):
    """Without kvprov_storage_data_addresses the SVM's LIFs say which GPU nodes are its own:
    a node whose LIF is gone belongs to no storage system; with them, the LIF check names it."""
    cluster.answers["ip_interfaces.json"]["records"].pop(0)  # lif_kv_a, 192.168.50.11
    code, results, table = storage_check(tmp_path, inventory(tmp_path, cluster, certificate[0]), capsys)
    assert code == 1 and results["gpu1/storage.server"]["status"] == "fail", table
    assert "no kv_storage host has 192.168.50.11 among its addresses" in results["gpu1/storage.server"]["found"]
    inv = inventory(tmp_path, cluster, certificate[0],
                    kvprov_storage_data_addresses=["192.168.50.11", "192.168.50.12"])
    code, results, table = storage_check(tmp_path, inv, capsys)
    assert code == 1 and results["cluster1/lif.192.168.50.11"]["status"] == "fail", table
    assert "no LIF of SVM svm_kv has address 192.168.50.11 (mounted by gpu1)" in table


def test_recorded_unauthorized_answer_names_the_user_and_the_credentials_file(tmp_path, cluster, good, capsys):
    creds = tmp_path / "ontap.cred"
    creds.write_text(f"username={USER}\npassword=wrong\n")
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 1
    r = results["cluster1/storage.api"]
    assert r["status"] == "fail" and f"authentication failed for user {USER}" in r["found"]
    assert "User is not authorized." in r["found"] and str(creds) in r["found"] and "wrong" not in table


@pytest.mark.parametrize("code, words", [(403, "may not read it (recorded error 403): give the user a read-only role"),
                                         (500, "HTTP 500")])
def test_recorded_http_errors_fail_naming_the_request(code, words, tmp_path, cluster, good, capsys):
    cluster.status["/api/storage/volumes"] = code
    rc, results, table = storage_check(tmp_path, good, capsys)
    assert rc == 1, table
    assert words in results["cluster1/storage.api"]["found"] and "/api/storage/volumes" in table


def test_a_cluster_that_does_not_answer_in_time_is_unreachable(tmp_path, cluster, good, capsys):
    cluster.delay = 3  # the inventory's kvprov_storage_api_timeout is 2 s
    t0 = time.monotonic()
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 3 and time.monotonic() - t0 < 10, table
    assert "no answer within 2s (kvprov_storage_api_timeout)" in results["cluster1/storage.api"]["found"]


def test_a_refused_connection_is_unreachable(tmp_path, cluster, good, capsys):
    cluster.shutdown()
    cluster.server_close()
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 3 and "cannot connect" in results["cluster1/storage.api"]["found"], table


def test_a_certificate_nobody_vouches_for_fails_verification(tmp_path, cluster, capsys):
    """Without the CA bundle the throwaway certificate is not trusted: no request is sent."""
    inv = inventory(tmp_path, cluster, None)
    code, results, table = storage_check(tmp_path, inv, capsys)
    assert code == 1, table
    found = results["cluster1/storage.api"]["found"]
    assert "certificate is not trusted" in found and "kvprov_storage_ca_bundle" in found
    assert cluster.requests == []


def test_a_world_readable_credentials_file_stops_before_any_request(tmp_path, cluster, good, capsys):
    (tmp_path / "ontap.cred").chmod(0o644)
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 2 and results == {}
    assert "kvprov_storage_credentials_file" in table and "chmod 600" in table and cluster.requests == []


def test_the_credentials_are_a_frozen_value_that_never_shows_the_password(tmp_path):
    import dataclasses
    import os

    from kvprov.storage import credentials

    c = credentials.parse("username=admin\npassword=s3cret\n", "f")
    assert repr(c) == "Credentials(username='admin', password='***')" and "s3cret" not in f"{c!r} {[c]}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.password = "other"
    if os.geteuid() == 0:  # a file of another user is refused, even to root
        f = tmp_path / "cred"
        f.write_text("username=admin\npassword=s3cret\n")
        f.chmod(0o600)
        os.chown(f, 1, 1)
        with pytest.raises(credentials.CredentialsError, match="belongs to uid 1, not to root"):
            credentials.read(str(f))
        os.chown(f, 0, 0)
        assert credentials.read(str(f)) == c


def test_limit_checks_only_the_storage_systems_it_names(tmp_path, cluster, good, capsys):
    """#39: `storage check -l PATTERN`, as ansible-playbook's --limit: a second cluster that does
    not answer makes the full run exit 3; limited to cluster1, only cluster1 is read and judged
    (its clients still found), and a pattern with no storage system is a usage error."""
    inv = yaml.safe_load(good.read_text())
    storage = inv["all"]["children"]["kv_storage"]["hosts"]
    storage["cluster2"] = {**storage["cluster1"], "kvprov_storage_api_port": 1, "kvprov_storage_data_addresses": ["192.168.50.99"]}
    good.write_text(yaml.safe_dump(inv))
    code, results, table = storage_check(tmp_path, good, capsys)
    assert code == 3 and "cannot connect" in results["cluster2/storage.api"]["found"], table
    out = tmp_path / "limited.json"
    code = cli.main(["storage", "check", str(good), "-l", "cluster1", "--json", str(out)])
    table = capsys.readouterr()
    hosts = json.loads(out.read_text())["hosts"]
    assert code == 0 and sorted(hosts) == ["cluster1"], table
    clients = next(r for r in hosts["cluster1"]["results"] if r["id"] == "storage.clients")
    assert clients["found"] == "gpu1 (192.168.50.11:/kvcache), gpu2 (192.168.50.12:/kvcache)"
    for pattern, words in (("gpu1", "matches no storage system of group kv_storage (cluster1, cluster2)"),
                           ("nope", "no host matches --limit nope")):
        assert cli.main(["storage", "check", str(good), "-l", pattern]) == 2
        assert words in capsys.readouterr().err
