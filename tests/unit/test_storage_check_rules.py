"""`kvprov check` on the storage systems' variables (group kv_storage): what each kind of
system needs, the credentials file (root-only), types and ranges, and storage variables
set where they do nothing. Through the real CLI, as deploy and storage check run it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from kvprov import check
from tests.conftest import kvprov

GPU = """\
all:
  children:
    gpu_nodes:
      vars:
        kvprov_storage_server: 192.168.50.11
      hosts:
        gpu1: {}
    kv_storage:
      hosts:
        cluster1:
"""


def write(tmp_path: Path, storage_vars: str, extra: str = "") -> Path:
    path = tmp_path / "inventory.yml"
    body = textwrap.indent(textwrap.dedent(storage_vars).strip("\n"), " " * 10) + "\n"
    path.write_text(GPU + body + extra)
    return path


def lines(path: Path) -> list[str]:
    return check.format_lines(check.run(str(path))[1])


@pytest.fixture
def creds(tmp_path) -> Path:
    f = tmp_path / "ontap.cred"
    f.write_text("username=kvprov_ro\npassword=x-y-z\n")
    f.chmod(0o600)
    return f


def test_a_good_ontap_and_a_good_linux_system_pass(tmp_path, creds):
    inv = write(tmp_path, f"""\
        kvprov_storage_system: ontap
        kvprov_storage_svm: svm_kv
        kvprov_storage_credentials_file: {creds}
        kvprov_storage_data_addresses: [192.168.50.11, "[fd00::11]", nfs-a.example.com]
        kvprov_storage_min_free_percent: 5
        kvprov_storage_min_free_inodes_percent: 2.5
        kvprov_storage_api_timeout: 10
    """)
    assert lines(inv) == []
    assert lines(write(tmp_path, "kvprov_storage_system: linux")) == []


def test_each_kind_names_what_it_lacks(tmp_path):
    inv = write(tmp_path, "kvprov_storage_svm: svm_kv")
    assert lines(inv) == [f"{inv}:10: host cluster1: kvprov_storage_system: not set: say what this storage system is, "
                          "ontap (checked over its REST API) or linux (knfsd, over ssh)"]
    inv = write(tmp_path, "kvprov_storage_system: ontap")
    assert lines(inv) == [
        f"{inv}:10: host cluster1: kvprov_storage_credentials_file: not set, but an ONTAP system needs it: a root-only "
        "file on this controller with username= and password= lines",
        f"{inv}:10: host cluster1: kvprov_storage_svm: not set, but an ONTAP system needs it: the SVM that serves the "
        "KV-cache export"]
    inv = write(tmp_path, "kvprov_storage_system: netapp")
    assert lines(inv) == [f"{inv}:11: host cluster1: kvprov_storage_system: must be one of ontap, linux; got the "
                          'string "netapp"']
    inv = write(tmp_path, "kvprov_storage_system: linux\nkvprov_storage_svm: svm_kv")
    assert lines(inv) == [f"{inv}:12: warning: host cluster1: kvprov_storage_svm: has no meaning for a Linux server "
                          "(reached over ssh)"]


def test_credentials_file_must_be_root_only_and_complete(tmp_path, creds):
    ontap = f"kvprov_storage_system: ontap\nkvprov_storage_svm: svm_kv\nkvprov_storage_credentials_file: {creds}"
    creds.chmod(0o640)
    inv = write(tmp_path, ontap)
    assert lines(inv) == [f'{inv}:13: host cluster1: kvprov_storage_credentials_file: "{creds}" is readable or '
                          "writable by group or others (mode 0640): chmod 600 it, it holds the ONTAP password"]
    creds.chmod(0o600)
    creds.write_text("username=kvprov_ro\n")
    assert f'"{creds}" has no password= line' in lines(inv)[0]
    creds.write_text("user=kvprov_ro\npassword=x\n")
    assert f'"{creds}" line 1: only username=... and password=... lines may be given' in lines(inv)[0]
    creds.write_text("username=kvprov_ro\npassword=two words\n")
    assert "the value of password must be one word" in lines(inv)[0] and "two words" not in lines(inv)[0]
    link = tmp_path / "link.cred"
    link.symlink_to(creds)
    assert "a link (give the file itself)" in lines(write(tmp_path, ontap.replace(str(creds), str(link))))[0]
    missing = tmp_path / "none.cred"
    assert "cannot be opened on this controller: no such file or directory" in \
        lines(write(tmp_path, ontap.replace(str(creds), str(missing))))[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_credentials_file_of_another_user_is_refused(tmp_path, creds):
    os.chown(creds, 12345, 12345)
    inv = write(tmp_path, "kvprov_storage_system: ontap\nkvprov_storage_svm: s\n"
                          f"kvprov_storage_credentials_file: {creds}")
    assert f'"{creds}" belongs to uid 12345, not to root: chown root it' in lines(inv)[0]


def test_types_ranges_and_certificate_verification(tmp_path, creds):
    inv = write(tmp_path, f"""\
        kvprov_storage_system: ontap
        kvprov_storage_svm: svm_kv
        kvprov_storage_credentials_file: {creds}
        kvprov_storage_validate_certs: "maybe"
        kvprov_storage_api_port: 70000
        kvprov_storage_min_free_percent: 100
        kvprov_storage_data_addresses: 192.168.50.11
        kvprov_storage_ca_bundle: {tmp_path}/no-such-ca.pem
    """)
    assert lines(inv) == [
        f"{inv}:14: host cluster1: kvprov_storage_validate_certs: expected a boolean (true or false), got the "
        'string "maybe"',
        f"{inv}:15: host cluster1: kvprov_storage_api_port: 70000 is out of range: must be 1..65535",
        f"{inv}:16: host cluster1: kvprov_storage_min_free_percent: must be a percentage from 0 to under 100, got 100",
        f"{inv}:17: host cluster1: kvprov_storage_data_addresses: expected a list, got the string "
        '"192.168.50.11": write [192.168.50.11]',
        f'{inv}:18: host cluster1: kvprov_storage_ca_bundle: "{tmp_path}/no-such-ca.pem" is not a file on this '
        "controller"]
    inv = write(tmp_path, f"kvprov_storage_system: ontap\nkvprov_storage_svm: s\n"
                          f"kvprov_storage_credentials_file: {creds}\nkvprov_storage_validate_certs: false")
    assert lines(inv) == [f"{inv}:14: warning: host cluster1: kvprov_storage_validate_certs: the cluster's certificate "
                          "is not verified (anyone on the path can read the password): give the CA that signed it in "
                          "kvprov_storage_ca_bundle instead"]


def test_storage_variables_where_they_do_nothing_are_warned_about(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text(textwrap.dedent("""\
        all:
          children:
            gpu_nodes:
              vars:
                kvprov_storage_server: 192.168.50.11
                kvprov_storage_min_free_percent: 5
              hosts:
                gpu1:
                  kvprov_storage_client_address: 192.168.50.21
            kv_storage:
              vars:
                kvprov_storage_system: linux
              hosts:
                nfs1:
                  kvprov_storage_client_address: 192.168.50.1
    """))
    assert lines(inv) == [
        f"{inv}:6: warning: kvprov_storage_min_free_percent: a variable of the storage systems (group kv_storage): "
        "it has no effect here",
        f"{inv}:15: warning: host nfs1: kvprov_storage_client_address: a variable of the GPU nodes (group gpu_nodes): "
        "it has no effect here"]


def test_storage_check_stops_on_a_bad_inventory_and_without_storage_systems(tmp_path):
    inv = write(tmp_path, "kvprov_storage_system: netapp")
    r = kvprov("storage", "check", str(inv), timeout=60)
    assert r.returncode == 2 and "kvprov_storage_system: must be one of ontap, linux" in r.stderr
    assert "no host was contacted" in r.stderr
    plain = tmp_path / "plain.yml"
    plain.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu1:\n"
                     "          kvprov_storage_server: 10.0.0.1\n")
    r = kvprov("storage", "check", str(plain), timeout=60)
    assert r.returncode == 2 and "no group kv_storage with hosts" in r.stderr, r.stderr
