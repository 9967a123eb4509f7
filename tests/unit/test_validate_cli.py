"""`kvprov validate --bundle` through the real CLI, in a subprocess, as a support engineer runs it."""

import json
import os
import shutil
import xml.etree.ElementTree as ET

from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_USAGE
from tests.conftest import FIXTURES, kvprov

BUNDLES = FIXTURES / "bundles"


def test_good_bundle_exits_0_with_a_table():
    r = kvprov("validate", "--bundle", str(BUNDLES / "lab_gpu1"), timeout=60)
    assert r.returncode == EXIT_OK, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["HOST", "CHECK", "STATUS", "FOUND"]
    assert any(line.split()[:3] == ["kvlab-gpu1", "mount.transport", "pass"] for line in lines)
    assert any(line.split()[:4] == ["kvlab-gpu1", "gds.gpu", "skip", "no"] for line in lines)
    assert lines[-1] == "kvlab-gpu1: ok (0 failed, 0 warnings, 12 skipped, 23 passed)"
    assert r.stderr.startswith("kvprov: note: each bundle's own desired.json is trusted") and "--inventory" in r.stderr


def test_tcp_fallback_exits_1_and_writes_json_and_junit(tmp_path):
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    r = kvprov("validate", "--bundle", str(BUNDLES / "lab_tcp_fallback"), "--json", str(out), "--junit", str(junit),
               timeout=60)
    assert r.returncode == EXIT_CHECKS_FAILED
    row = next(line for line in r.stdout.splitlines() if " mount.transport " in line)
    assert row.split()[2] == "FAIL" and "fell back to TCP" in row
    assert "fix: usual causes: rpcrdma was not loaded" in r.stdout
    assert r.stdout.splitlines()[-1].startswith("kvlab-gpu1: FAILED (4 failed")

    data = json.loads(out.read_text())
    host = data["hosts"]["kvlab-gpu1"]
    assert data["ok"] is False and host["counts"]["fail"] == 4
    failed = sorted(x["id"] for x in host["results"] if x["status"] == "fail")
    assert failed == ["mount.options", "mount.transport", "mount.unit", "rdma.module", "summary"]

    root = ET.parse(junit).getroot()
    assert root.get("failures") == "4"
    names = [c.get("name") for c in root.iter("testcase") if c.find("failure") is not None]
    assert sorted(names) == ["mount.options", "mount.transport", "mount.unit", "rdma.module"]
    assert len(list(root.iter("testcase"))) == len(host["results"]) - 1  # every check, not the summary


def test_json_to_stdout_replaces_the_table():
    r = kvprov("validate", "--bundle", str(BUNDLES / "gpu_a01"), "--json", "-", timeout=60)
    assert r.returncode == EXIT_OK
    data = json.loads(r.stdout)
    assert data["hosts"]["gpu-a01.corp.example.com"]["counts"] == {"pass": 37, "fail": 0, "warn": 0, "skip": 4}


def test_several_bundles_one_report():
    r = kvprov("validate", "--bundle", str(BUNDLES / "local_c1"), "--bundle", str(BUNDLES / "lab_no_layout"),
               timeout=60)
    assert r.returncode == EXIT_CHECKS_FAILED
    assert r.stdout.splitlines()[-2:] == ["kvlab-c1: ok (0 failed, 0 warnings, 23 skipped, 12 passed)",
                                          "kvlab-gpu1: FAILED (2 failed, 0 warnings, 12 skipped, 21 passed)"]


def test_usage_errors_exit_2(tmp_path):
    r = kvprov("validate", "--bundle", str(tmp_path / "nope"), timeout=60)
    assert r.returncode == EXIT_USAGE and "no such bundle directory" in r.stderr
    r = kvprov("validate", "--bundle", str(tmp_path), timeout=60)
    assert r.returncode == EXIT_USAGE
    assert "desired.json: missing from the bundle; the bundle cannot be validated without the desired state" in r.stderr
    (tmp_path / "desired.json").write_text('{"format": 1, "host": "x"}')
    r = kvprov("validate", "--bundle", str(tmp_path), timeout=60)
    assert r.returncode == EXIT_USAGE and "storage.profile: missing" in r.stderr
    r = kvprov("validate", timeout=60)
    assert r.returncode == EXIT_USAGE and "give an INVENTORY or --bundle DIR/HOST" in r.stderr
    r = kvprov("validate", "inventory/lab.yml", "--bundle", str(tmp_path), timeout=120)  # the inventory judges it
    assert r.returncode == EXIT_USAGE and "is not a GPU node of inventory/lab.yml" in r.stderr
    r = kvprov("validate", "--bundle", str(BUNDLES / "lab_gpu1"), "--json", str(tmp_path / "no/such/dir/x.json"),
               timeout=60)
    assert r.returncode == EXIT_USAGE and "cannot write" in r.stderr


def test_hostile_bundle_is_reported_not_crashed_on(tmp_path):
    b = tmp_path / "customer"
    shutil.copytree(BUNDLES / "lab_garbage", b)
    os.symlink("/etc/shadow", b / "cufile.json")
    os.mkfifo(b / "systemctl/kvprov-sglang-main.service.txt.fifo")
    (b / "systemctl/kvprov-sglang-main.service.txt").unlink()
    os.mkfifo(b / "systemctl/kvprov-sglang-main.service.txt")
    os.truncate(b / "proc/mountinfo", 5 << 30)
    junit = tmp_path / "r.xml"
    r = kvprov("validate", "--bundle", str(b), "--junit", str(junit), timeout=60)
    assert r.returncode == EXIT_CHECKS_FAILED, r.stderr
    assert "Traceback" not in r.stderr and "\x1b" not in r.stdout
    assert "more than the 16 MiB limit" in r.stdout and "not a regular file" in r.stdout
    ET.parse(junit)  # still valid XML



def test_a_bad_bundle_is_one_failed_host_and_the_others_are_still_checked(tmp_path):
    bad = tmp_path / "bad\x1b[31mhost"  # a directory name with a terminal escape in it
    bad.mkdir()
    out = tmp_path / "r.json"
    r = kvprov("validate", "--bundle", str(bad), "--bundle", str(BUNDLES / "local_c1"), "--json", str(out), timeout=60)
    assert r.returncode == EXIT_CHECKS_FAILED
    assert "\x1b" not in r.stdout + r.stderr and "bad\\x1b[31mhost: desired.json: missing" in r.stderr
    hosts = json.loads(out.read_text())["hosts"]
    assert hosts["kvlab-c1"]["ok"] is True
    [failed] = hosts["bad\\x1b[31mhost"]["results"][:1]
    assert (failed["id"], failed["status"]) == ("bundle.desired", "fail") and "desired.json: missing" in failed["found"]


def test_with_inventory_a_relabelled_capture_fails_and_is_judged_against_the_inventory(tmp_path):
    """A TCP capture whose desired.json was relabelled nfs_tcp passes on its own word; against
    the inventory it fails bundle.desired and mount.transport. A bundle of a host the inventory
    does not have is one failed host; the others are still checked."""
    from kvprov import desired

    relabelled = tmp_path / "kvlab-gpu1"
    shutil.copytree(BUNDLES / "lab_tcp_fallback", relabelled)
    d = desired.load("inventory/lab.yml")["kvlab-gpu1"]
    d["storage"].update(profile="nfs_tcp", transport="tcp",
                        options=[o.replace("proto=rdma", "proto=tcp") for o in d["storage"]["options"]])
    (relabelled / "desired.json").write_text(json.dumps(d))
    own = kvprov("validate", "--bundle", str(relabelled), "--json", "-", timeout=120)
    [transport] = [x for x in json.loads(own.stdout)["hosts"]["kvlab-gpu1"]["results"] if x["id"] == "mount.transport"]
    assert transport["status"] == "pass"  # the bundle's own word

    out = tmp_path / "r.json"
    r = kvprov("validate", "--bundle", str(relabelled), "--bundle", str(BUNDLES / "local_c1"),
               "--inventory", "inventory/lab.yml", "--json", str(out), timeout=300)
    assert r.returncode == EXIT_CHECKS_FAILED, r.stderr
    assert "note:" not in r.stderr
    hosts = json.loads(out.read_text())["hosts"]
    results = {x["id"]: x for x in hosts["kvlab-gpu1"]["results"]}
    assert results["bundle.desired"]["status"] == "fail"
    assert results["bundle.desired"]["found"].startswith("desired.json disagrees with inventory/lab.yml: ")
    assert "storage.profile netapp_pnfs_rdma (inventory) vs nfs_tcp (bundle)" in results["bundle.desired"]["found"]
    assert "storage.options proto=rdma (inventory) vs proto=tcp (bundle)" in results["bundle.desired"]["found"]
    assert results["mount.transport"]["status"] == "fail"
    [other] = hosts["local_c1"]["results"][:1]
    assert other["status"] == "fail" and "host kvlab-c1 is not a GPU node of inventory/lab.yml" in other["found"]
    r = kvprov("validate", "--engine-roundtrip", "--bundle", str(relabelled), "--inventory", "inventory/lab.yml",
               timeout=60)  # with --bundle the inventory judges the bundles: no live engine to restart
    assert r.returncode == EXIT_USAGE and "--engine-roundtrip restarts live engines" in r.stderr
