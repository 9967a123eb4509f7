"""The ONTAP check's pure parts at their edges: a data LIF's state, service policy and RDMA
protocols, and what each HTTP answer or connection failure is reported as (the recorded
cluster answers are test_storage_ontap.py's)."""

import email.message
import io
import urllib.error

import pytest

from kvprov.storage import ontap
from kvprov.storage.credentials import Credentials
from kvprov.storage.systems import Client, System

SYSTEM = System(name="ontap1", kind="ontap", address="10.0.0.5", svm="svm1", credentials_file="/root/ontap.cred")
RDMA = Client("gpu1", "10.0.1.11", "/kv", True, 20049, "files", "localdomain", "10.0.2.1")
TCP = Client("gpu2", "10.0.1.11", "/kv", False, 2049, "none", "localdomain", "10.0.2.2")


def lif(**changes):
    base = {"name": "lif1", "ip": {"address": "10.0.1.11"}, "state": "up", "enabled": True,
            "services": ["data_core", "data_nfs"], "rdma_protocols": ["roce"]}
    return {**base, **changes}


def judged(interfaces, clients=(RDMA,)):
    r = ontap._lif(SYSTEM, interfaces, "10.0.1.11", list(clients))
    return r.status, r.found, r.fix


def test_a_good_lif_with_and_without_rdma():
    assert judged([lif(ip={"address": "10.0.1.12"}), lif()]) == (
        "pass", "LIF lif1 (10.0.1.11): up, rdma_protocols ['roce']", "")
    assert judged([lif(rdma_protocols=None, services=None, state=None)], [TCP]) == (
        "pass", "LIF lif1 (10.0.1.11): up", "")
    assert ontap._lif(SYSTEM, [lif()], "10.0.1.11", [RDMA]).expected == (
        "a data LIF of SVM svm1 at 10.0.1.11, up, with RDMA (roce)")


def test_each_lif_problem_is_named_with_its_fix():
    status, found, fix = judged([lif(rdma_protocols=[])])
    assert (status, found) == ("fail", "LIF lif1 (10.0.1.11): rdma_protocols [] (mounted by gpu1)")
    assert fix == "network interface modify -vserver svm1 -lif lif1 -rdma-protocols roce"
    status, found, fix = judged([lif(enabled=False)])
    assert found == "LIF lif1 (10.0.1.11): state up, enabled False (mounted by gpu1)"
    assert fix == ("network interface modify -vserver svm1 -lif lif1 -status-admin up (and a service policy with "
                   "data-nfs)")
    assert judged([lif(state="down")])[1] == "LIF lif1 (10.0.1.11): state down, enabled True (mounted by gpu1)"
    assert judged([lif(services=[])])[1] == "LIF lif1 (10.0.1.11): service policy without data_nfs (none) (mounted by gpu1)"
    assert judged([lif(rdma_protocols=["iwarp"])], [TCP])[0] == "pass"
    assert judged([lif(rdma_protocols=["iwarp"])])[1] == "LIF lif1 (10.0.1.11): rdma_protocols ['iwarp'] (mounted by gpu1)"
    assert judged([lif(ip={"address": "10.0.1.12"})]) == (
        "fail", "no LIF of SVM svm1 has address 10.0.1.11 (mounted by gpu1)",
        "set kvprov_storage_server to a data LIF of the SVM")


@pytest.fixture
def api():
    return ontap.Api(SYSTEM, Credentials("kvprov-ro", "pw"))


def http_error(code, body=b"", location=None):
    headers = email.message.Message()
    if location:
        headers["Location"] = location
    return urllib.error.HTTPError("https://x", code, "Reason", headers, io.BytesIO(body))


@pytest.mark.parametrize("code, said", [
    (401, "https://10.0.0.5:443: authentication failed for user kvprov-ro (bad): check /root/ontap.cred"),
    (403, "https://10.0.0.5:443/api/x: user kvprov-ro may not read it (bad): give the user a read-only role that "
          "includes this path (docs/storage-check.md)"),
    (404, "https://10.0.0.5:443/api/x: not found (bad) (ONTAP 9.10.1 or later is needed)"),
    (405, "https://10.0.0.5:443/api/x: HTTP 405 Reason (bad)"),
    (299, "https://10.0.0.5:443/api/x: HTTP 299 Reason (bad)"),
    (400, "https://10.0.0.5:443/api/x: HTTP 400 Reason (bad)"),
])
def test_each_http_error_says_what_it_means(api, code, said):
    assert api._http_error(http_error(code, b'{"error": {"message": "bad"}}'), "/api/x") == said


@pytest.mark.parametrize("code", [300, 301, 399])
def test_a_redirect_is_never_followed(api, code):
    said = api._http_error(http_error(code, location="http://evil:80/"), "/api/x")
    assert said.startswith(f"https://10.0.0.5:443/api/x: HTTP {code} redirect to http://evil:80/: not followed")
    assert "no Location" in api._http_error(http_error(code), "/api/x")


def test_an_unreadable_error_body_and_a_refused_connection(api):
    assert api._http_error(http_error(500, b"not json"), "/p") == "https://10.0.0.5:443/p: HTTP 500 Reason"
    assert api._http_error(http_error(500, b'{"error": "flat"}'), "/p") == "https://10.0.0.5:443/p: HTTP 500 Reason"
    e = api._url_error(ConnectionRefusedError(111, "Connection refused"))
    assert (str(e), e.unreachable) == ("https://10.0.0.5:443: cannot connect: Connection refused", True)
    e = api._url_error("Name or service not known")
    assert str(e) == "https://10.0.0.5:443: cannot connect: Name or service not known" and e.unreachable
    e = api._url_error(TimeoutError())
    assert str(e) == "https://10.0.0.5:443: no answer within 30s (kvprov_storage_api_timeout)" and e.unreachable


def rule(index, *matches, protocols=("nfs4",), ro=("sys",), rw=("sys",), su=("sys",)):
    r = {"index": index, "clients": [{"match": m} for m in matches], "ro_rule": list(ro), "rw_rule": list(rw),
         "superuser": list(su)}
    if protocols is not None:
        r["protocols"] = list(protocols)
    return r


def volume(**changes):
    v = {"name": "kv", "state": "online", "nas": {"path": "/kv", "export_policy": {"name": "gpu"}},
         "space": {"size": 1000, "available": 500}, "files": {"maximum": 100, "used": 40}}
    return {**v, **changes}


def exported(rules, vol=None, clients=(RDMA,)):
    state = {"volumes": [vol or volume()], "policies": [{"name": "gpu", "rules": rules}]}
    return {r.id: r for r in ontap._export(SYSTEM, state, "/kv", list(clients))}


def test_rules_apply_in_index_order_whatever_their_place():
    good, squash = rule(2, "10.0.2.0/24"), rule(1, "10.0.2.1", su=("none",))
    for rules in ([good, squash], [squash, good]):
        r = exported(rules)["export./kv.access"]
        assert (r.status, r.found) == ("fail", "gpu1 (10.0.2.1): rule 1 (10.0.2.1) has no sys/any in superuser")
    unindexed = {k: v for k, v in rule(None, "10.0.2.1", su=("none",)).items() if k != "index"}
    assert exported([rule(1, "10.0.2.0/24"), unindexed])["export./kv.access"].status == "fail"  # no index: first


def test_which_rules_match_and_what_they_grant():
    assert exported([rule(1, "10.0.2.1", protocols=("cifs",)), rule(2, "0.0.0.0/0")])[
        "export./kv.access"].found == "gpu1 (10.0.2.1): rule 2 (0.0.0.0/0)"
    for protocols in (None, ("any",), ("nfs",), ("nfs3", "nfs")):
        assert exported([rule(1, "10.0.2.1", protocols=protocols)])["export./kv.access"].status == "pass", protocols
    assert exported([rule(1, "10.9.0.0/16"), rule(2, "10.0.2.1", ro=(), rw=("krb5",), su=("any",))])[
        "export./kv.access"].found == "gpu1 (10.0.2.1): rule 2 (10.0.2.1) has no sys/any in ro_rule, rw_rule"
    r = exported([rule(1, "gpu1.example.com", "10.9.9.9")])["export./kv.access"]
    assert (r.status, r.found) == ("warn", "gpu1 (10.0.2.1): rule 1 (gpu1.example.com, 10.9.9.9) may apply")
    assert exported([rule(1, "10.9.9.9")])["export./kv.access"].found == (
        "gpu1 (10.0.2.1): no rule of the policy matches it")
    assert exported([{"index": 1, "clients": [{"match": ""}, {}]}])["export./kv.access"].status == "fail"


def test_the_volume_its_state_figures_and_policy():
    res = exported([rule(1, "10.0.2.1")])
    assert (res["volume./kv.online"].status, res["volume./kv.online"].found, res["volume./kv.online"].fix) == (
        "pass", "volume kv: online", "")
    assert res["volume./kv.inodes"].found == "volume kv: 60 inodes of 100 inodes free (60.0%)"
    off = exported([rule(1, "10.0.2.1")], volume(state="offline"))["volume./kv.online"]
    assert (off.status, off.found, off.fix) == ("fail", "volume kv: offline", "volume online -vserver svm1 -volume kv")
    unknown = exported([rule(1, "10.0.2.1")], volume(files={"maximum": 100}))["volume./kv.inodes"]
    assert unknown.status == "warn"
    unknown = exported([rule(1, "10.0.2.1")], volume(files={"used": 5}))["volume./kv.inodes"]
    assert unknown.status == "warn"
    lost = exported([rule(1, "10.0.2.1")], volume(nas={"path": "/kv", "export_policy": {"name": "other"}}))
    assert lost["export./kv.access"].found == "volume kv's export policy other was not found"
    none = ontap._export(SYSTEM, {"volumes": [volume(nas={"path": "/other"})]}, "/kv", [RDMA])
    assert [(r.id, r.status) for r in none] == [("volume./kv.online", "fail")]
    assert str(ontap.ApiError("boom")) == "boom" and ontap.ApiError("x", unreachable=True).unreachable


def test_the_management_address_and_what_is_asked_of_the_cluster(monkeypatch):
    import base64
    import dataclasses

    assert [ontap._host(a) for a in ("10.0.0.5", "fd00::5", "[fd00::5]", "ontap1.example.com")] == [
        "10.0.0.5", "[fd00::5]", "[fd00::5]", "ontap1.example.com"]
    v6 = ontap.Api(dataclasses.replace(SYSTEM, address="fd00::5", api_port=8443), Credentials("u", "p:w"))
    assert v6.base == "https://[fd00::5]:8443"
    assert v6.headers == {"Authorization": "Basic " + base64.b64encode(b"u:p:w").decode(), "Accept": "application/json"}
    asked = []
    monkeypatch.setattr(ontap.credentials, "read", lambda path: Credentials("u", "p"))
    monkeypatch.setattr(ontap.Api, "records", lambda self, path, query: asked.append((path, query)) or [])
    assert ontap.fetch(SYSTEM) == {"nfs": [], "interfaces": [], "volumes": [], "policies": []}
    fields = {path: set(q["fields"].split(",")) for path, q in asked}
    assert all(q["svm.name"] == "svm1" for _, q in asked)
    assert fields["/api/network/ip/interfaces"] == {"name", "ip.address", "state", "enabled", "services",
                                                    "rdma_protocols"}
    assert fields["/api/storage/volumes"] == {"name", "state", "nas.path", "nas.export_policy.name", "space.size",
                                              "space.available", "files.maximum", "files.used"}
    assert fields["/api/protocols/nfs/export-policies"] == {"name", "id", "rules"}
    assert {"enabled", "state", "protocol.v41_enabled", "protocol.v4_id_domain", "transport.rdma_enabled",
            "protocol.v41_features.pnfs_enabled"} <= fields["/api/protocols/nfs/services"]


# ---------------------------------------------------------------------------- more edges

def test_the_nfs_service_is_enabled_and_online():
    def service(**nfs):
        r = ontap._service(SYSTEM, nfs)
        return r.id, r.status, r.found, r.fix

    assert service(enabled=True, state="online") == ("nfs.service", "pass", "enabled: True, state: online", "")
    assert service(enabled=True)[1] == "pass"  # an ONTAP that reports no state
    assert service(enabled=True, state="offline") == ("nfs.service", "fail", "enabled: True, state: offline",
                                                      "vserver nfs on -vserver svm1")
    assert service(enabled=False, state="online")[1] == "fail"


def test_what_the_cluster_did_not_report_warns():
    tcp = Client("gpu2", "10.0.1.11", "/kv", False, 2049, "none", "localdomain", "10.0.2.2")
    results = {r.id: r for r in ontap._protocol(SYSTEM, {}, [tcp])}
    assert "nfs.pnfs" not in results and "nfs.rdma" not in results  # no layout, no RDMA: not asked
    assert (results["nfs.v4.1"].status, results["nfs.v4.1"].found, results["nfs.v4.1"].fix) == (
        "warn", "protocol.v41_enabled was not reported (an ONTAP older than the property, or a role that may not "
                "read it)", "check it by hand: vserver nfs show")
    d = results["nfs.id_domain"]
    assert (d.status, d.found, d.fix) == ("warn", "protocol.v4_id_domain was not reported",
                                          "check it by hand: vserver nfs show -fields v4-id-domain")


def test_error_messages_without_a_message_and_tls(api):
    import ssl

    assert api._http_error(http_error(500), "/p") == "https://10.0.0.5:443/p: HTTP 500 Reason"
    assert api._http_error(http_error(500, b'{"error": {}}'), "/p") == "https://10.0.0.5:443/p: HTTP 500 Reason"
    e = api._url_error(ssl.SSLError(1, "wrong version number"))
    assert str(e).startswith("https://10.0.0.5:443: TLS failed: ") and "wrong version number" in str(e)
    assert not e.unreachable
    assert ontap.ApiError("m").args == ("m",) and str(ontap.ApiError("m", True)) == "m"


def test_the_volume_that_holds_an_export():
    def found(*paths, export="/vol1/kv"):
        vols = [{"name": f"v{i}", "nas": {"path": p}} for i, p in enumerate(paths)]
        v = ontap._volume_of(vols, export)
        return v and v["name"]

    assert found(None, "relative", "/vol1") == "v2"  # paths that are no junction paths passed over
    assert found("/vol1/", "/") == "v0" and found("/", "/vol1") == "v1"  # the longest that holds it
    assert found("/volX", export="/volX/kv") == "v0" and found("/vol", export="/volX/kv") is None
    assert found("/vol1") == "v0" and found("/vol1", export="/vol1") == "v0" and found("/vol2") is None


def test_an_online_volumes_result_has_no_fix():
    r = exported([rule(1, "10.0.2.1")])["volume./kv.online"]
    assert (r.status, r.found, r.fix) == ("pass", "volume kv: online", "")


def test_a_lif_without_an_address_is_no_lif_of_the_server():
    assert judged([lif(ip={})])[0] == "fail" and judged([lif(ip=None)])[0] == "fail"
    assert ontap._lif(SYSTEM, [lif(ip={"address": "fd00::5"})], "[fd00::5]", [RDMA]).status == "pass"
    assert ontap._lif(SYSTEM, [lif()], "10.0.1.11X", [RDMA]).status == "fail"  # a name, not that address
    assert ontap._lif(SYSTEM, [lif()], "10.0.1.11", [TCP]).expected == "a data LIF of SVM svm1 at 10.0.1.11, up"
