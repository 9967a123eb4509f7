"""`kvprov check`: the rules, through the Python API and the real CLI.

Every file in tests/fixtures/inventories/bad/ starts with comment lines
    # expect: LINE: FRAGMENT      (LINE "-": a problem of the whole file)
and must produce exactly those problems: each fragment on a problem reported at that line
of that file, and no problem that no expectation names. A fragment starting with
"warning:" is a warning; a file with only warnings must exit 0.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from kvprov import check, inventory
from kvprov.check import Problem
from kvprov.errors import EXIT_OK, EXIT_USAGE
from tests.conftest import FIXTURES, ROOT, kvprov

INVENTORIES = FIXTURES / "inventories"
BAD = sorted((INVENTORIES / "bad").glob("*.yml"))
GOOD = [ROOT / "inventory/example.yml"]
EXPECT = re.compile(r"# expect: (-|\d+): (.+)")

# What `kvprov check inventory/lab.yml` reports as errors, by fragment. Empty now that the
# lab inventory carries its kvprov_* settings; add a fragment here if the lab knowingly
# ships with a problem (e.g. "kvprov_storage_server: empty" before it had a server).
LAB_KNOWN_ERRORS: list[str] = []


def expectations(path: Path) -> list[tuple[int | None, str]]:
    out = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = EXPECT.fullmatch(line)
        if m:
            out.append((None if m[1] == "-" else int(m[1]), m[2]))
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems_of(path: Path) -> list[Problem]:
    return check.run(str(path))[1]


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


# ---------------------------------------------------------------------------- the corpus

def test_the_corpus_is_there():
    assert len(BAD) >= 15 and GOOD
    for path in BAD:
        assert expectations(path), f"{path.name} has no '# expect: LINE: FRAGMENT' lines"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_inventory_api(path):
    problems = problems_of(path)
    expected = expectations(path)
    for line, fragment in expected:
        assert any(p.line == line and fragment in str(p) for p in problems), (
            f"{path.name}:{line}: expected {fragment!r}; got:\n" + "\n".join(map(str, problems)))
    for p in problems:
        assert any(p.line == line and fragment in str(p) for line, fragment in expected), f"unexpected: {p}"


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_inventory_cli(path):
    r = kvprov("check", rel(path))
    *lines, summary = r.stdout.splitlines()
    expected = expectations(path)

    def at(line: int | None) -> str:
        return f"{rel(path)}: " if line is None else f"{rel(path)}:{line}:"

    for line, fragment in expected:
        assert any(out.startswith(at(line)) and fragment in out for out in lines), (
            f"expected at {at(line)} {fragment!r}; got:\n{r.stdout}{r.stderr}")
    for out in lines:
        assert any(out.startswith(at(line)) and fragment in out for line, fragment in expected), f"unexpected: {out}"
    only_warnings = all(fragment.startswith("warning:") for _, fragment in expected)
    assert r.returncode == (EXIT_OK if only_warnings else EXIT_USAGE), r.stdout + r.stderr
    assert summary.startswith(f"{rel(path)}: ") and "error(s)" in summary
    assert r.stderr == ""


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_inventories_pass(path):
    assert problems_of(path) == []
    r = kvprov("check", rel(path))
    assert r.returncode == EXIT_OK, r.stdout + r.stderr
    hosts = len(inventory.load(str(path)).hosts)
    assert hosts >= 8 and r.stdout.splitlines() == [f"{rel(path)}: {hosts} host(s) checked, 0 error(s), 0 warning(s): OK"]


def test_production_example_is_what_it_claims():
    """Two SGLang racks and a rack with a group per vLLM engine (and the baseline without a
    tier), a data LIF per host, GDS_MT active."""
    inv = inventory.load(ROOT / "inventory/example.yml")
    assert len({tuple(h.groups) for h in inv.hosts}) == 6
    assert {h.value("kvprov_engine") for h in inv.hosts} == {"sglang_hicache", "vllm_offload", "lmcache_mp",
                                                               "lmcache_inproc", "vllm_baseline"}
    servers = [h.value("kvprov_storage_server") for h in inv.hosts]
    assert len(set(servers)) == len(inv.hosts)
    for h in inv.hosts:
        assert h.value("kvprov_storage_profile") == "netapp_pnfs_rdma"
        assert h.value("kvprov_nixl_plugins")["gds_mt"]["active"] is True
    b01 = inv.host("gpu-b01.corp.example.com")
    assert b01.value("kvprov_storage_rsize") == 1048576 and b01.value("kvprov_nixl_cuda") == "cu13"


def test_lab_inventory():
    problems = problems_of(ROOT / "inventory/lab.yml")
    for fragment in LAB_KNOWN_ERRORS:
        assert any(fragment in str(p) for p in errors(problems)), fragment
    unexplained = [p for p in errors(problems) if not any(f in str(p) for f in LAB_KNOWN_ERRORS)]
    assert unexplained == []
    r = kvprov("check", "inventory/lab.yml", "--json")
    report = json.loads(r.stdout)
    assert report["hosts"] == ["kvlab-gpu1"]  # kvlab-storage is not a GPU node
    assert report["ok"] is (not LAB_KNOWN_ERRORS)
    assert r.returncode == (EXIT_OK if report["ok"] else EXIT_USAGE)


def test_lab_inventory_without_a_server_names_the_host(tmp_path):
    text = (ROOT / "inventory/lab.yml").read_text()
    stripped = "".join(l for l in text.splitlines(keepends=True) if "kvprov_storage_server:" not in l)
    path = write(tmp_path / "lab.yml", stripped)
    [problem] = problems_of(path)
    host_line = next(i for i, l in enumerate(stripped.splitlines(), 1) if l.strip() == "kvlab-gpu1:")
    assert (problem.line, problem.host, problem.variable) == (host_line, "kvlab-gpu1", "kvprov_storage_server")
    assert problem.message.startswith("empty (not set in the inventory), but profile netapp_pnfs_rdma mounts NFS")


# ---------------------------------------------------------------------------- the contract

def test_role_defaults_pass_their_own_specs():
    """The type checker agrees with the roles: every default has a spec and fits it."""
    specs = check.read_specs(inventory.roles_dir())
    defaults = inventory.read_role_defaults(inventory.roles_dir())
    assert set(defaults) == set(specs)
    for name, var in defaults.items():
        if not check.is_template(var.value):
            assert check.spec_findings(var, specs[name]) == [], name


def test_types_and_choices_come_from_the_specs(tmp_path):
    roles = tmp_path / "roles"
    shutil.copytree(inventory.roles_dir(), roles, ignore=shutil.ignore_patterns("tasks", "templates", "library"))
    spec_file = roles / "kvcache_mount/meta/argument_specs.yml"
    spec = yaml.safe_load(spec_file.read_text())
    spec["argument_specs"]["main"]["options"]["kvprov_storage_nfs_version"]["choices"] = ["4.2"]
    spec_file.write_text(yaml.safe_dump(spec))
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: {kvprov_storage_server: 10.0.0.5, kvprov_storage_nfs_version: "4.1"}
    """)
    inv = inventory.load(path, roles=roles)
    [problem] = check.check(inv)
    assert problem.variable == "kvprov_storage_nfs_version"
    assert problem.message.startswith('must be one of 4.2; got the string "4.1"')
    assert check.check(inventory.load(path)) == []  # the real spec allows 4.1


# ---------------------------------------------------------------------------- details

def test_problem_format():
    p = Problem("inventory/x.yml", 12, "gpu7", "kvprov_storage_nfs_port",
                'expected an integer, got the string "20049": write 20049 without quotes')
    assert str(p) == ('inventory/x.yml:12: host gpu7: kvprov_storage_nfs_port: expected an integer, '
                      'got the string "20049": write 20049 without quotes')
    assert str(Problem("x.yml", 3, None, "v", "m", "warning")) == "x.yml:3: warning: v: m"
    assert str(Problem("x.yml", 3, None, None, "YAML error: m", column=7)) == "x.yml:3:7: YAML error: m"


def test_templates_are_left_to_ansible(tmp_path):
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              vars:
                kvprov_storage_nfs_port: "{{ kvprov_port | default(20049) }}"
                kvprov_storage_allow_remount: "{{ allow | default(false) }}"
              hosts:
                gpu1:
                  kvprov_storage_server: "{{ hostvars[inventory_hostname].lif }}"
    """)
    assert problems_of(path) == []


def test_a_group_mistake_is_one_line_for_all_its_hosts(tmp_path):
    hosts = "\n".join(f"        gpu{i}:" for i in range(1, 8))
    path = write(tmp_path / "inv.yml", "all:\n  children:\n    gpu_nodes:\n      vars:\n"
                 "        kvprov_storage_extra_options: [proto=tcp]\n"
                 "        kvprov_storage_server: 10.0.0.5\n      hosts:\n" + hosts + "\n")
    problems = problems_of(path)
    assert len(problems) == 7 and {p.line for p in problems} == {5}
    [line] = check.format_lines(problems)
    assert line.startswith(f"{path}:5: hosts gpu1, gpu2, gpu3, gpu4, gpu5 and 2 more: "
                           'kvprov_storage_extra_options: "proto=tcp" contradicts profile netapp_pnfs_rdma')


def test_problems_in_group_vars_point_into_that_file(tmp_path):
    path = write(tmp_path / "inv.yml", "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu1:\n")
    write(tmp_path / "group_vars/gpu_nodes/storage.yml", """
        kvprov_storage_server: 10.0.0.5
        kvprov_storage_nfs_port: "20049x"
    """)
    write(tmp_path / "host_vars/gpu1.yml", "kvprov_storage_nconnect: 8\nkvprov_storage_trunking: max_connect\n")
    problems = problems_of(path)
    assert [(p.file, p.line, p.host, p.variable) for p in problems] == [
        (f"{tmp_path}/group_vars/gpu_nodes/storage.yml", 2, None, "kvprov_storage_nfs_port"),
        (f"{tmp_path}/host_vars/gpu1.yml", 1, "gpu1", "kvprov_storage_nconnect"),
    ]


def test_a_misnamed_group_vars_file_is_a_warning(tmp_path):
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: {kvprov_storage_server: 10.0.0.5}
    """)
    write(tmp_path / "group_vars/gpu-nodes.yml", "kvprov_storage_nfs_version: '4.2'\n")
    r = kvprov("check", str(path))
    assert r.returncode == EXIT_OK
    assert f"{tmp_path}/group_vars/gpu-nodes.yml:1: warning: no group gpu-nodes in the inventory: " \
           "Ansible ignores this file; did you mean gpu_nodes?" in r.stdout


def test_json_output(tmp_path):
    r = kvprov("check", rel(INVENTORIES / "bad/types.yml"), "--json")
    assert r.returncode == EXIT_USAGE
    report = json.loads(r.stdout)
    assert set(report) == {"ok", "hosts", "problems", "namespaces"}
    assert report["ok"] is False and report["hosts"] == ["gpu7"]
    port = next(p for p in report["problems"] if p["variable"] == "kvprov_storage_nfs_port")
    line = next(n for n, fragment in expectations(INVENTORIES / "bad/types.yml") if "nfs_port" in fragment)
    assert port == {"file": rel(INVENTORIES / "bad/types.yml"), "line": line, "host": "gpu7",
                    "variable": "kvprov_storage_nfs_port", "severity": "error", "column": None,
                    "message": 'expected an integer, got the string "20049x"'}
    good = json.loads(kvprov("check", rel(GOOD[0]), "--json").stdout)
    assert good["ok"] is True and good["problems"] == [] and good["hosts"] == inventory.load(str(GOOD[0])).host_names


def test_unusable_inventories_exit_2_with_one_line(tmp_path):
    r = kvprov("check", str(tmp_path / "missing.yml"))
    assert r.returncode == EXIT_USAGE
    assert r.stdout.splitlines()[0] == f"{tmp_path}/missing.yml: cannot read: No such file or directory"
    bad = write(tmp_path / "bad.yml", "all:\n  children: [\n")
    r = kvprov("check", str(bad), "--json")
    assert r.returncode == EXIT_USAGE
    [problem] = json.loads(r.stdout)["problems"]
    assert (problem["line"], problem["column"]) == (3, 1) and problem["message"].startswith("YAML error: ")


def test_check_contacts_no_host(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("kvprov check opened a socket")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    for path in [*GOOD, *BAD]:
        check.run(str(path))


def test_check_is_a_command(tmp_path):
    r = kvprov("--help")
    assert r.returncode == 0 and re.search(r"^\s+check\s+validate an inventory", r.stdout, re.M)
    # outside the checkout (whose ansible.cfg names inventory/lab.yml) and with no ANSIBLE_INVENTORY
    r = subprocess.run([sys.executable, "-m", "kvprov", "check"], cwd=tmp_path, capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}, timeout=300)
    assert r.returncode == EXIT_USAGE and "inventory" in r.stderr
