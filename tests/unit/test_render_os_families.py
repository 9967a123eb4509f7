"""Ubuntu 22.04/24.04 and RHEL 9 rendered from their facts (#39, item 8). `kvprov render` gathers
no facts: a host's OS is its `kvprov_host_facts` (the facts it reports, under Ansible's names:
tests/fixtures/facts/), Debian 12 where none is given (roles/preflight/vars/main.yml).

One inventory holds inventory/example.yml once per OS (host names prefixed, plus one host per OS
with kvprov_storage_trunking: auto, which the example pins) and once without facts (today's
render), rendered in one run: per family the packages and files that differ, nothing Debian's in
RHEL's, and Debian 12's facts rendering today's files and desired state byte for byte. A second
test runs the roles' variables and the deploy preflight's comparison of kvprov_host_facts with
facts gathered on this machine."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kvprov import desired, render
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_preflight import LAB_VALUES

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed")

EXAMPLE = yaml.safe_load((ROOT / "inventory/example.yml").read_text())
# {OS: host-name prefix (a group-name prefix too)}; today: the example as it is, no facts
OSES = {"debian-12": "deb12", "ubuntu-22.04": "u2204", "ubuntu-24.04": "u2404", "rhel-9": "rhel9"}
TODAY = "today"
FACTS = {name: yaml.safe_load((FIXTURES / "facts" / f"{name}.yml").read_text()) for name in OSES}
SGLANG, VLLM = "gpu-a01.corp.example.com", "gpu-c00.corp.example.com"  # rack A (SGLang), rack C (vllm_offload)
AUTO = "auto.corp.example.com"  # rack A's values but kvprov_storage_trunking: auto

# What each family installs: the RDMA, NFS, venv (NIXL's, then the engine's) and SGLang's build packages.
PYTHON = {"debian-12": ["python3-venv"], "ubuntu-22.04": ["python3.11-venv"], "ubuntu-24.04": ["python3-venv"],
          "rhel-9": ["python3.11", "python3.11-pip-wheel"]}
BASE = {"debian-12": ["rdma-core", "ibverbs-providers", "nfs-common"],
        "rhel-9": ["rdma-core", "libibverbs-utils", "nfs-utils"]}
BUILD = {"debian-12": ["build-essential", "libssl-dev"], "rhel-9": ["gcc", "gcc-c++", "openssl-devel"]}
FAMILY = {"debian-12": "debian-12", "ubuntu-22.04": "debian-12", "ubuntu-24.04": "debian-12", "rhel-9": "rhel-9"}
# Debian's own names and paths: none may reach a RHEL host's files or desired state.
DEBIAN_ONLY = re.compile(r"\bapt\b|apt-get|dpkg|/etc/default/|\bnogroup\b|nfs-common|ibverbs-providers|python3-venv"
                         r"|python3\.11-venv|build-essential|libssl-dev|/usr/share/python-wheels|dist-packages")


def os_copy(prefix: str, facts: dict | None) -> dict:
    """The example's gpu_nodes tree with every group and host renamed by prefix (and, given facts,
    kvprov_host_facts), plus AUTO in rack A."""
    def rename(group: dict) -> dict:
        out = {k: v for k, v in group.items() if k not in ("hosts", "children")}
        if group.get("hosts"):
            out["hosts"] = {f"{prefix}-{h}": v for h, v in group["hosts"].items()}
        if group.get("children"):
            out["children"] = {f"{prefix}_{g}": rename(c) for g, c in group["children"].items()}
        return out

    tree = rename(copy.deepcopy(EXAMPLE["all"]["children"]["gpu_nodes"]))
    tree["children"][f"{prefix}_rack_a_h100"]["hosts"][f"{prefix}-{AUTO}"] = {
        "kvprov_storage_server": "192.168.10.13", "kvprov_gds_rdma_dev_addr_list": ["192.168.10.103"],
        "kvprov_storage_trunking": "auto"}
    if facts is not None:
        tree.setdefault("vars", {})["kvprov_host_facts"] = facts
    return tree


def plain(value, prefix: str):
    """A state (or text) with the prefixed host names back to the example's own."""
    return json.loads(json.dumps(value).replace(f"{prefix}-", "")) if not isinstance(value, str) else \
        value.replace(f"{prefix}-", "")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """({OS or TODAY: {host: desired state}}, {OS or TODAY: {host: {path: bytes written}}}) from one
    `kvprov render` (kvprov.render.render, whose desired states are kept as it computes them)."""
    d = tmp_path_factory.mktemp("os-families")
    copies = {TODAY: os_copy(TODAY, None), **{name: os_copy(p, FACTS[name]) for name, p in OSES.items()}}
    inv = d / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": EXAMPLE["all"]["vars"], "children": {"gpu_nodes": {
        "children": {f"os_{OSES.get(name, TODAY)}": tree for name, tree in copies.items()}}}}}))
    states = {}
    load = desired.load

    def keep(*args, **kwargs):
        states.update(load(*args, **kwargs))
        return states

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(desired, "load", keep)
        written = render.render([str(inv)], d / "out")
    prefixes = {TODAY: TODAY, **OSES}
    by_os = {name: {plain(h, p): plain(s, p) for h, s in states.items() if h.startswith(f"{p}-")}
             for name, p in prefixes.items()}
    files: dict[str, dict[str, dict[str, bytes]]] = {name: {} for name in prefixes}
    for path in written:
        host, rest = path.relative_to(d / "out").parts[0], path.relative_to(d / "out").parts[1:]
        name = next(n for n, p in prefixes.items() if host.startswith(f"{p}-"))
        files[name].setdefault(plain(host, prefixes[name]), {})["/" + "/".join(rest)] = \
            plain(path.read_text(), prefixes[name]).encode()
    return by_os, files


def test_every_os_renders_every_host(rendered):
    states, files = rendered
    hosts = sorted(states[TODAY])
    assert len(hosts) == 10 and SGLANG in hosts and AUTO in hosts
    for name in OSES:
        assert sorted(states[name]) == sorted(files[name]) == hosts, name
        for host in hosts:  # no family adds or drops a file
            assert sorted(files[name][host]) == sorted(files[TODAY][host]), (name, host)


@pytest.mark.parametrize("name", OSES)
def test_each_family_installs_its_own_packages(rendered, name):
    states, _ = rendered
    family = FAMILY[name]
    venv = PYTHON[name] + ["python3-packaging"]  # NIXL's venv (packaging: the pip module's, on the system python3)
    assert states[name][SGLANG]["packages"] == BASE[family] + venv + PYTHON[name] + BUILD[family]
    assert states[name][VLLM]["packages"] == BASE[family] + venv + PYTHON[name]


@pytest.mark.parametrize("name", OSES)
def test_only_idmapd_and_the_trunking_default_differ_between_families(rendered, name):
    """Of every file, /etc/idmapd.conf's nobody group and, where the inventory leaves session
    trunking to the OS, the mount options: the rest is the same file on every OS."""
    _, files = rendered
    redhat = FACTS[name]["os_family"] == "RedHat"
    for host, by_path in files[name].items():
        for path, content in by_path.items():
            today = files[TODAY][host][path]
            if path == "/etc/idmapd.conf":
                assert content.decode().splitlines()[-1] == f"Nobody-Group = {'nobody' if redhat else 'nogroup'}"
                assert content.splitlines()[:-1] == today.splitlines()[:-1]
            elif path == "/etc/systemd/system/mnt-kvcache.mount" and host == AUTO and redhat:
                assert content == today.replace(b",max_connect=16,", b",trunkdiscovery,")
            else:
                assert content == today, (name, host, path)
    auto = files[name][AUTO]["/etc/systemd/system/mnt-kvcache.mount"].decode()
    assert ("trunkdiscovery" in auto) == redhat and ("max_connect=16" in auto) != redhat
    # the example pins max_connect: every OS gets what the inventory says
    assert ",max_connect=16," in files[name][SGLANG]["/etc/systemd/system/mnt-kvcache.mount"].decode()


def test_nothing_debian_reaches_a_rhel_host(rendered):
    states, files = rendered
    for host, state in states["rhel-9"].items():
        text = json.dumps(state)  # every file's content and path, packages, units, directories, venvs
        assert not DEBIAN_ONLY.search(text), (host, DEBIAN_ONLY.search(text)[0])
        for path, content in files["rhel-9"][host].items():
            assert not DEBIAN_ONLY.search(path + content.decode()), (host, path)
    assert DEBIAN_ONLY.search(json.dumps(states["debian-12"][SGLANG]))  # the pattern does find Debian's


def test_debian_12_renders_todays_files_and_state_byte_for_byte(rendered):
    states, files = rendered
    assert files["debian-12"] == files[TODAY]
    assert states["debian-12"] == states[TODAY]
    assert "Nobody-Group = nogroup" in files[TODAY][SGLANG]["/etc/idmapd.conf"].decode()


def test_ubuntu_differs_from_debian_only_in_2204s_python(rendered):
    states, files = rendered
    assert files["ubuntu-22.04"] == files["ubuntu-24.04"] == files[TODAY]
    assert states["ubuntu-24.04"] == states[TODAY]
    swap = json.loads(json.dumps(states[TODAY]).replace('"python3-venv"', '"python3.11-venv"'))
    assert states["ubuntu-22.04"] == swap


PLAY = """\
- name: The roles' OS variables per fact set (no facts gathered)
  hosts: os
  gather_facts: false
  vars_files: [{preflight}/vars/main.yml]  # its defaults would outrank the inventory's kvprov_host_facts
  tasks:
    - name: Show them
      ansible.builtin.debug:
        msg: "OS {{{{ {{'family': _kvprov_os_family, 'python': _kvprov_os_python, 'wheels': _kvprov_os_python_wheels,
                     'packages': _kvprov_os_python_packages, 'nobody': _kvprov_os_nobody_group}} | to_json }}}}"

- name: Deploy's preflight, with this machine's own facts
  hosts: preflight
  gather_facts: true
  gather_subset: ["!all"]
  roles: [preflight]
"""


def test_the_venv_python_and_the_preflight_comparison_with_gathered_facts(tmp_path):
    """The venvs' interpreter and its pip wheel per fact set (roles/nixl/tasks/venv.yml; not in any
    rendered file), a misspelt fact refused, and deploy's preflight: kvprov_host_facts that differ
    from the facts it gathers fail the host, naming them; this machine's own pass."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_NOCOLOR": "1"}
    gathered = subprocess.run(["ansible", "localhost", "-m", "ansible.builtin.setup", "-a", "gather_subset=!all"],
                              capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    own = json.loads(gathered.stdout.split("=>", 1)[1])["ansible_facts"]
    own = {k: own[f"ansible_{k}"] for k in ("os_family", "distribution", "distribution_major_version")}
    other = FACTS["rhel-9"] if own["os_family"] != "RedHat" else FACTS["debian-12"]
    local = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": local, "children": {
        "os": {"hosts": {**{name: {"kvprov_host_facts": FACTS[name]} for name in OSES},
                         "none": {"kvprov_host_facts": {}}, "typo": {"kvprov_host_facts": {"os_famly": "RedHat"}}}},
        "gpu_nodes": {"vars": LAB_VALUES, "children": {"preflight": {"hosts": {
            "same": {"kvprov_host_facts": own}, "other": {"kvprov_host_facts": other}, "unset": {}}}}}}}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(preflight=ROOT / "roles/preflight"))
    r = subprocess.run(["ansible-playbook", "-i", str(inv), str(play), "--check"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=300)
    shown = {m[1]: json.loads(m[2]) for m in re.finditer(r'^ok: \[(\S+)\] => \{\s*"msg": "OS (.*)"\s*\}$',
                                                         r.stdout.replace('\\"', '"'), re.M)}
    assert shown == {
        "debian-12": {"family": "Debian", "python": "/usr/bin/python3", "wheels": "/usr/share/python-wheels",
                      "packages": ["python3-venv"], "nobody": "nogroup"},
        "none": {"family": "Debian", "python": "/usr/bin/python3", "wheels": "/usr/share/python-wheels",
                 "packages": ["python3-venv"], "nobody": "nogroup"},
        "ubuntu-22.04": {"family": "Debian", "python": "/usr/bin/python3.11", "wheels": "/usr/share/python-wheels",
                         "packages": ["python3.11-venv"], "nobody": "nogroup"},
        "ubuntu-24.04": {"family": "Debian", "python": "/usr/bin/python3", "wheels": "/usr/share/python-wheels",
                         "packages": ["python3-venv"], "nobody": "nogroup"},
        "rhel-9": {"family": "RedHat", "python": "/usr/bin/python3.11", "wheels": "/usr/share/python3.11-wheels",
                   "packages": ["python3.11", "python3.11-pip-wheel"], "nobody": "nobody"},
    }, r.stdout[-3000:] + r.stderr[-2000:]
    # a key the roles do not read (a misspelt one) fails the host, rather than give Debian 12's
    assert "kvprov_host_facts: os_famly not among the facts the roles read (os_family, distribution, " \
           "distribution_major_version)" in r.stdout
    recap = {m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
             for m in re.finditer(r"^(\S+)\s+: (ok=.*)$", r.stdout, re.M)}
    assert recap["same"]["failed"] == recap["unset"]["failed"] == 0 and recap["other"]["failed"] == 1, r.stdout[-3000:]
    assert recap["typo"]["failed"] == 1
    failure = re.search(r"^fatal: \[other\]: FAILED! => (\{.*\})$", r.stdout, re.M)
    msg = json.loads(failure[1])["msg"]
    assert msg.startswith("kvprov_host_facts is not this host's: ")
    assert f'os_family "{other["os_family"]}", the host reports "{own["os_family"]}"' in msg
    assert "correct it in the inventory" in msg
