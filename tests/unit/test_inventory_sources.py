"""Several inventory sources on every command: INVENTORY and/or -i/--inventory SOURCE
(repeatable), merged in order by ansible-core exactly as `ansible-inventory -i a -i b` merges
them (compared with it), passed on as -i to every ansible-playbook run, one deploy lock for
the same sources in any order. Real ansible-core; no host is contacted (deploy's hosts are
closed ports on 127.0.0.1)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from kvprov import cli, inventory, lock
from kvprov.errors import EXIT_BUSY, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError
from tests.conftest import FIXTURES, ROOT, kvprov
from tests.unit.test_inventory import ansible_inventory_list, assert_same_as_ansible_inventory, untag, write

needs_ansible_inventory = pytest.mark.skipif(shutil.which("ansible-inventory") is None,
                                             reason="ansible-inventory not installed")

HOSTS_INI = """
[gpu_nodes]
gpu1 kvprov_storage_server=10.0.0.5
gpu2 kvprov_storage_server=10.0.0.6

[gpu_nodes:vars]
kvprov_storage_export=/kva
kvprov_storage_nconnect=4
"""

MORE_YML = """
all:
  children:
    gpu_nodes:
      vars:
        kvprov_storage_export: /kvb
      children:
        rack_x:
          vars:
            kvprov_storage_rsize: 1048576
          hosts:
            gpu2:
              kvprov_storage_server: 10.0.0.9
"""


@pytest.fixture
def two(tmp_path):
    """An INI hosts file and a YAML file that adds a group, a host variable and a group variable
    the INI file also sets."""
    return str(write(tmp_path / "hosts.ini", HOSTS_INI)), str(write(tmp_path / "more.yml", MORE_YML))


def sources(*argv: str) -> list[str]:
    """The sources `kvprov check ARGV` reads, through the real argument parser."""
    return inventory.from_args(cli.build_parser().parse_args(["check", *argv]))


def ansible_host_value(given: list[str], host: str, name: str):
    args = [a for s in given for a in ("-i", s)]
    out = subprocess.run(["ansible-inventory", *args, "--host", host], capture_output=True, text=True, check=True,
                         timeout=120, cwd=ROOT)
    return untag(json.loads(out.stdout))[name]


# ---------------------------------------------------------------------------- the arguments

def test_the_positional_comes_first_then_each_source_in_order():
    assert sources("a.ini") == ["a.ini"]
    assert sources("-i", "a.ini") == ["a.ini"]
    assert sources("a.ini", "-i", "b.yml", "--inventory", "c.yml") == ["a.ini", "b.yml", "c.yml"]
    assert sources("-i", "b.yml", "a.ini", "-i", "c.yml") == ["a.ini", "b.yml", "c.yml"]


def test_every_inventory_command_takes_them_and_needs_one_unless_optional(monkeypatch):
    monkeypatch.setattr(inventory, "configured_inventory", lambda: [])  # no `inventory =` configured (see below)
    parser = cli.build_parser()
    for argv in (["check"], ["render", "--out", "d"], ["deploy"], ["collect", "--out", "d"], ["bench"], ["audit"],
                 ["storage", "check"]):
        assert inventory.from_args(parser.parse_args([*argv, "-i", "a", "-i", "b"])) == ["a", "b"], argv
        with pytest.raises(KvprovError) as e:
            inventory.from_args(parser.parse_args(argv))
        assert e.value.exit_code == EXIT_USAGE and "INVENTORY or -i SOURCE" in str(e.value)
    for argv in (["validate"], ["loadtest"]):  # they run without one (--bundle, --url)
        assert inventory.from_args(parser.parse_args(argv)) == []
        assert inventory.from_args(parser.parse_args([*argv, "a", "-i", "b"])) == ["a", "b"]


# ---------------------------------------------------------------------------- merged as Ansible merges

@needs_ansible_inventory
def test_an_ini_file_and_a_yaml_file_merge_as_ansible_inventory(two):
    hosts_ini, more_yml = two
    inv = assert_same_as_ansible_inventory(sources(hosts_ini, "-i", more_yml), ordered=False)
    gpu1, gpu2 = inv.hosts
    assert gpu2.groups == ["all", "gpu_nodes", "rack_x"] and gpu1.groups == ["all", "gpu_nodes"]
    assert gpu1.value("kvprov_storage_export") == "/kvb" and gpu1.value("kvprov_storage_nconnect") == 4
    assert gpu2.value("kvprov_storage_server") == "10.0.0.9" and gpu2.value("kvprov_storage_rsize") == 1048576
    assert gpu1.is_default("kvprov_storage_rsize")
    assert str(gpu1.var("kvprov_storage_export").origin) == f"{more_yml}:5"  # each value names its own source
    assert str(gpu1.var("kvprov_storage_nconnect").origin) == f"{hosts_ini}:7"
    assert str(gpu2.var("kvprov_storage_server").origin) == f"{more_yml}:12"
    assert inv.sources == [hosts_ini, more_yml]


@needs_ansible_inventory
def test_a_directory_and_a_constructed_source_merge_as_ansible_inventory(tmp_path):
    write(tmp_path / "inv/hosts.yml", """
        all:
          hosts:
            node1: {role: gpu, rack: a, lif: 5}
            node2: {role: gpu, rack: b, lif: 6}
            mgmt1: {role: mgmt, rack: m, lif: 9}
    """)
    write(tmp_path / "inv/group_vars/gpu_nodes.yml", "kvprov_storage_export: /kvd\n")
    constructed = write(tmp_path / "groups.yml", (FIXTURES / "inventories/constructed/02-groups.yml").read_text())
    inv = assert_same_as_ansible_inventory(sources(str(tmp_path / "inv"), "-i", str(constructed)), ordered=False)
    assert inv.host_names == ["node1", "node2"]
    node2 = inv.host("node2")
    assert node2.groups == ["all", "gpu_nodes", "rack_b"]
    assert node2.value("kvprov_storage_server") == "10.0.0.6" and node2.value("kvprov_storage_export") == "/kvd"
    assert str(node2.var("kvprov_storage_export").origin) == f"{tmp_path}/inv/group_vars/gpu_nodes.yml:1"


@needs_ansible_inventory
def test_the_later_source_wins_for_the_same_variable(tmp_path, two):
    hosts_ini, more_yml = two
    for given, winner, line in (([hosts_ini, more_yml], more_yml, 5), ([more_yml, hosts_ini], hosts_ini, 6)):
        gpu1 = assert_same_as_ansible_inventory(given, ordered=False).host("gpu1")
        want = "/kvb" if winner == more_yml else "/kva"
        assert gpu1.value("kvprov_storage_export") == want == ansible_host_value(given, "gpu1", "kvprov_storage_export")
        assert str(gpu1.var("kvprov_storage_export").origin) == f"{winner}:{line}"


# ---------------------------------------------------------------------------- the commands

def test_check_names_the_file_and_line_in_each_source(tmp_path):
    hosts_ini = write(tmp_path / "hosts.ini", """
        [gpu_nodes]
        gpu1 kvprov_storage_server=10.0.0.5 kvprov_storage_nfs_port=port20049
        gpu2 kvprov_storage_server=10.0.0.6
    """)
    more_yml = write(tmp_path / "more.yml", """
        all:
          children:
            gpu_nodes:
              vars:
                kvprov_storage_nconnect: 99
                kvprov_storage_export: /kv
                kvprov_storage_export: /kv2
    """)
    r = kvprov("check", str(hosts_ini), "-i", str(more_yml))
    lines = r.stdout.splitlines()
    assert any(line.startswith(f'{hosts_ini}:2: host gpu1: kvprov_storage_nfs_port: expected an integer') for line in lines), r.stdout
    assert any(line.startswith(f"{more_yml}:5: ") and "kvprov_storage_nconnect" in line for line in lines), r.stdout
    assert any(line.startswith(f"{more_yml}:7:") and "duplicate key 'kvprov_storage_export'" in line
               for line in lines), r.stdout  # kvprov's YAML lint, on the YAML source
    assert lines[-1].startswith(f"{hosts_ini}, {more_yml}: 2 host(s) checked, ")
    assert r.returncode == EXIT_USAGE and r.stderr == ""
    ok = kvprov("check", "-i", str(write(tmp_path / "ok.ini", HOSTS_INI)), "-i", str(write(tmp_path / "ok.yml", MORE_YML)))
    assert ok.returncode == 0 and ok.stdout.endswith(": 2 host(s) checked, 0 error(s), 0 warning(s): OK\n")


def test_a_missing_source_is_an_error_naming_it(tmp_path, two):
    hosts_ini, _ = two
    missing = tmp_path / "nope.yml"
    r = kvprov("check", hosts_ini, "-i", str(missing))
    assert r.returncode == EXIT_USAGE and f"{missing}: cannot read: No such file or directory" in r.stdout
    r = kvprov("render", "-i", hosts_ini, "-i", str(missing), "--out", str(tmp_path / "out"))
    assert r.returncode == EXIT_USAGE and f"{missing}: cannot read: No such file or directory" in r.stderr
    assert not (tmp_path / "out").exists()



def test_without_a_source_the_inventory_ansible_is_configured_with(tmp_path, two):
    """#39: as ansible-playbook, the ansible.cfg's `inventory =` or ANSIBLE_INVENTORY when the
    command line names none; else a usage error naming every way."""
    hosts_ini, more_yml = two
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}

    def check(*args, **more):
        return subprocess.run([sys.executable, "-m", "kvprov", "check", *args], cwd=tmp_path, env={**env, **more},
                              capture_output=True, text=True, timeout=300)

    r = check()
    assert r.returncode == EXIT_USAGE and "give the inventory: INVENTORY or -i SOURCE" in r.stderr
    assert "ANSIBLE_INVENTORY" in r.stderr
    r = check(ANSIBLE_INVENTORY=f"{hosts_ini},{more_yml}")
    assert r.returncode == 0 and r.stdout.endswith(": 2 host(s) checked, 0 error(s), 0 warning(s): OK\n"), r.stdout
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = hosts.ini\n")  # relative to the file
    r = check()
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith(f"{tmp_path}/hosts.ini: "), r.stdout + r.stderr
    r = check(more_yml)  # the command line wins over the configuration
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith(f"{more_yml}: 1 host(s) checked"), r.stdout


def playbook_commands(runs) -> list[list[str]]:
    """The ansible-playbook command lines ansible-runner recorded under KVPROV_RUNS_DIR."""
    return [json.loads(p.read_text())["command"] for p in sorted(runs.glob("*/artifacts/*/command"))]


def inventory_args(command: list[str]) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == "-i"]


def test_render_reads_every_source_and_passes_each_to_ansible_playbook(tmp_path, two, monkeypatch):
    hosts_ini, more_yml = two
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    for argv, gpu2, export in (([hosts_ini, "-i", more_yml], "10.0.0.9", "/kvb"),
                               (["-i", more_yml, "-i", hosts_ini], "10.0.0.6", "/kva")):  # the later source wins
        out = tmp_path / f"out-{gpu2}"
        r = kvprov("render", *argv, "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert f"What=10.0.0.5:{export}\n" in (out / "gpu1/etc/systemd/system/mnt-kvcache.mount").read_text()
        assert f"What={gpu2}:{export}\n" in (out / "gpu2/etc/systemd/system/mnt-kvcache.mount").read_text()
    assert [inventory_args(c) for c in playbook_commands(tmp_path / "runs")] == [[hosts_ini, more_yml],
                                                                                 [more_yml, hosts_ini]]


def test_deploy_passes_every_source_to_ansible_playbook(tmp_path, two, monkeypatch):
    """The hosts are closed ports on 127.0.0.1: ansible-playbook runs and finds them unreachable."""
    hosts_ini, more_yml = two
    closed = write(tmp_path / "closed.yml", """
        all:
          vars: {ansible_host: 127.0.0.1, ansible_port: 9}
    """)
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    r = kvprov("deploy", "--check", hosts_ini, "-i", more_yml, "-i", str(closed), timeout=300)
    assert r.returncode == EXIT_UNREACHABLE, r.stdout + r.stderr
    # the audit first, then the deploy of the hosts it could not reach
    audit, command = sorted(playbook_commands(tmp_path / "runs"), key=lambda c: c[-1])
    assert audit[-1].endswith("collect.yml") and command[-1].endswith("site.yml")
    assert inventory_args(audit) == inventory_args(command) == [hosts_ini, more_yml, str(closed)]
    extravars = (tmp_path / "runs").glob("*deploy*/env/extravars")
    owner = json.loads(next(extravars).read_text())["kvprov_lock_owner"]
    assert owner.endswith(":" + ",".join(sorted([hosts_ini, more_yml, str(closed)])))


def test_one_lock_for_the_same_sources_in_any_order(tmp_path, two, monkeypatch):
    hosts_ini, more_yml = two
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    assert lock.lock_path([hosts_ini, more_yml]) == lock.lock_path([more_yml, hosts_ini])
    assert lock.lock_path(hosts_ini) == lock.lock_path([hosts_ini]) != lock.lock_path([hosts_ini, more_yml])
    with lock.inventory_lock([more_yml, hosts_ini], "deploy"):
        r = kvprov("deploy", "-i", more_yml, hosts_ini)  # refused before any host is contacted
        assert r.returncode == EXIT_BUSY and "is changing these hosts" in r.stderr
        assert f"kvprov: error: {hosts_ini}, {more_yml}: `kvprov deploy` (pid " in r.stderr
        with lock.inventory_lock(hosts_ini, "deploy"):  # one of them alone is another inventory
            pass
        held = json.loads(lock.lock_path([hosts_ini, more_yml]).read_text())
        assert held["inventory"] == sorted([hosts_ini, more_yml])


def test_validate_and_loadtest_take_an_inventory_or_not(tmp_path, two):
    hosts_ini, more_yml = two
    r = kvprov("validate", "--bundle", str(FIXTURES / "bundles/lab_gpu1"), "-i", hosts_ini, "-i", more_yml,
               timeout=120)  # with --bundle the sources are what the bundle is judged against
    assert r.returncode == EXIT_USAGE, r.stdout + r.stderr
    assert f"host kvlab-gpu1 is not a GPU node of {hosts_ini}, {more_yml}" in r.stderr
    r = kvprov("validate", timeout=60)
    assert r.returncode == EXIT_USAGE and "give an INVENTORY or --bundle" in r.stderr
    r = kvprov("loadtest", timeout=60)
    assert r.returncode == EXIT_USAGE and "give an INVENTORY or --url URL (not both)" in r.stderr
    r = kvprov("loadtest", "-i", hosts_ini, "--url", "http://127.0.0.1:9", timeout=60)
    assert r.returncode == EXIT_USAGE and "(not both)" in r.stderr


def test_a_vaulted_value_without_its_password_names_where_it_is(tmp_path, monkeypatch):
    import os

    from tests.unit.test_vault import encrypt, write_inventory

    from kvprov import vault

    for name in [n for n in os.environ if n.startswith("ANSIBLE_VAULT")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(vault, "_cli_ids", [])  # no password from an earlier command line in this process
    inv = write_inventory(tmp_path, vaulted=True)
    (tmp_path / "group_vars/gpu_nodes.yml").write_text("kvprov_storage_profile: local\n")
    with pytest.raises(inventory.InventoryError) as e:  # an inline !vault value: its file and line
        inventory.load(str(inv))
    assert (e.value.file, e.value.line, e.value.exit_code) == (str(tmp_path / "group_vars/all.yml"), 1, EXIT_USAGE)
    assert e.value.detail.startswith("cannot decrypt a vault-encrypted value: ")
    assert "--vault-password-file FILE, --vault-id [LABEL@]SOURCE, -J/--ask-vault-pass" in e.value.detail
    (tmp_path / "group_vars/all.yml").write_text("kvprov_engine_model_path: /m\n")
    (tmp_path / "group_vars/gpu_nodes.yml").write_text(encrypt("a: 1\n"))
    with pytest.raises(inventory.InventoryError) as e:  # a whole file encrypted: the file, no line
        inventory.load(str(inv))
    assert (e.value.file, e.value.line) == (str(tmp_path / "group_vars/gpu_nodes.yml"), None)
    (tmp_path / "group_vars/gpu_nodes.yml").write_text("a: [\n")  # not a vault error: Ansible's own
    with pytest.raises(Exception) as e:
        inventory.load(str(inv))
    assert "cannot decrypt" not in str(e.value)
