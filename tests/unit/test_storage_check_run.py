"""`kvprov storage check` on Linux NFS servers with Ansible faked (FAKE: kvprov.runner.run
answers with each server's captured state, as playbooks/storage.yml's capture task returns
it): which paths each server is asked to stat, the results per server, a server that did
not answer, a GPU node no server serves. The inventory and its check are real."""

import base64

import pytest
import yaml

from kvprov import runner
from kvprov.storage import cli, linux
from tests.unit.test_storage_knfsd import EXPORTFS, PORTLIST, STATFS, VERSIONS_LAB


def b64(text: str) -> dict:
    return {"content": base64.b64encode(text.encode()).decode()}


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {
            "gpu1": {"ansible_host": "10.99.1.2", "kvprov_storage_server": "10.99.1.1", "kvprov_storage_export": "/kv"},
            "gpu2": {"ansible_host": "10.99.1.3", "kvprov_storage_server": "10.99.9.9", "kvprov_storage_export": "/kv"}}},
        "kv_storage": {"hosts": {
            "nfs1": {"kvprov_storage_system": "linux", "kvprov_storage_data_addresses": ["10.99.1.1"]},
            "nfs2": {"kvprov_storage_system": "linux", "kvprov_storage_data_addresses": ["10.99.2.1"]}}}}}}))
    return str(path)


def test_each_server_read_and_judged_and_one_down(inv, monkeypatch):
    seen = {}

    def fake_run(playbook, sources, *, name, extravars=None, limit=None, stream=None, capture=None, **kw):
        seen.update(playbook=playbook, name=name, extravars=extravars, limit=limit, capture=capture, stream=stream)
        state = {"versions": b64(VERSIONS_LAB), "portlist": b64(PORTLIST), "exports": {"rc": 0, "stdout": EXPORTFS},
                 "statfs": [{"item": "/kv", "rc": 0, "stdout": STATFS}]}
        return runner.RunResult(0, None, captured={"nfs1": {"ansible_facts": {"kvprov_storage_state": state}}},
                                failures=[runner.Failure("nfs2", "Gathering Facts", "ssh: no route", True),
                                          runner.Failure("nfs1", "later", "ignored: it was read")])

    monkeypatch.setattr(runner, "run", fake_run)
    results, unreachable = cli.run(inv)
    assert (seen["playbook"], seen["name"], seen["limit"], seen["capture"]) == (
        "storage.yml", "storage-check", "nfs1,nfs2", linux.CAPTURE_TASK)
    assert seen["extravars"] == {"kvprov_storage_check_paths": {"nfs1": ["/kv"], "nfs2": []}}
    assert seen["stream"] is not None
    assert unreachable == ["nfs2"]
    by = {(r.host, r.id): r for r in results}
    assert by["nfs2", "storage.ssh"].found == "unreachable: ssh: no route" and by["nfs2", "storage.ssh"].status == "fail"
    assert ("nfs1", "storage.ssh") not in by
    assert by["nfs1", "storage.clients"].found == "gpu1 (10.99.1.1:/kv)"
    assert by["nfs1", "export./kv.access"].status in ("pass", "warn")
    assert by["gpu2", "storage.server"].status == "fail" and "10.99.9.9" in by["gpu2", "storage.server"].found
    assert not [k for k in by if k[0] == "nfs2" and k[1] != "storage.ssh"]


def test_a_server_no_gpu_node_mounts_from_warns():
    from kvprov.storage.systems import System

    r = cli._clients_result(System("nfs9", "linux", "a"), [])
    assert (r.id, r.status, r.found, r.fix) == ("storage.clients", "warn", "no GPU node mounts from it", "list the addresses the GPU nodes "
                                          "mount it through in kvprov_storage_data_addresses")


def test_every_server_that_could_not_be_read_is_named_in_any_order(inv, monkeypatch):
    failures = [runner.Failure("nfs1", "Read /proc/fs/nfsd/versions", "permission denied"),
                runner.Failure("nfs2", "Gathering Facts", "ssh: no route", True)]
    captured = {}

    def fake_run(playbook, sources, **kw):
        return runner.RunResult(2, None, captured=captured, failures=failures)

    monkeypatch.setattr(runner, "run", fake_run)
    results, unreachable = cli.run(inv)
    by = {(r.host, r.id): r for r in results}
    assert by["nfs1", "storage.ssh"].found == "Read /proc/fs/nfsd/versions failed: permission denied"
    assert by["nfs2", "storage.ssh"].found == "unreachable: ssh: no route"
    assert unreachable == ["nfs2"]  # a task that failed is no unreachable server
    # nfs1 read after all (a later task failed): its failure is passed over, nfs2's still named
    state = {"versions": b64(VERSIONS_LAB), "portlist": b64(PORTLIST), "exports": {"rc": 0, "stdout": EXPORTFS},
             "statfs": [{"item": "/kv", "rc": 0, "stdout": STATFS}]}
    captured["nfs1"] = {"ansible_facts": {"kvprov_storage_state": state}}
    results, unreachable = cli.run(inv)
    assert [(r.host, r.found) for r in results if r.id == "storage.ssh"] == [("nfs2", "unreachable: ssh: no route")]
    assert unreachable == ["nfs2"]


def test_an_ontap_system_whose_credentials_cannot_be_used_is_not_unreachable(tmp_path, monkeypatch):
    from kvprov.storage import credentials, ontap

    creds = tmp_path / "ontap.cred"
    creds.write_text("username=admin\npassword=pw\n")
    creds.chmod(0o600)
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {"gpu1": {"ansible_host": "10.99.1.2", "kvprov_storage_server": "10.99.1.1",
                                         "kvprov_storage_export": "/kv"}}},
        "kv_storage": {"hosts": {"ontap1": {"kvprov_storage_system": "ontap", "kvprov_storage_svm": "svm1",
                                            "kvprov_storage_credentials_file": str(creds),
                                            "kvprov_storage_data_addresses": ["10.99.1.1"]}}}}}}))

    def fetch(system):
        raise credentials.CredentialsError(f'"{creds}" has no password= line')  # (changed since the check)

    monkeypatch.setattr(ontap, "fetch", fetch)
    results, unreachable = cli.run(str(path))
    assert [(r.host, r.id, r.status, r.found) for r in results] == [
        ("ontap1", "storage.api", "fail", f'"{creds}" has no password= line')]
    assert unreachable == []
