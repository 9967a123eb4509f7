"""hash_behaviour = merge (#39): check reads an inventory as Ansible does under the user's own
ansible.cfg. A dict set in several places (group and host, inventory and role default, -e) is
merged before any rule judges it, so check, render and the deploy's preflight give one reading.
Without merge (Ansible's default) the highest setting replaces the others, as before."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

GROUP_VARS = "kvprov_storage_profile: local\nkvprov_storage_pnfs_layout: none\nkvprov_engine_host: 127.0.0.1\n"


def inventory(d: Path, host_plugins: str, group_plugins: str = "", merge: bool = True) -> None:
    (d / "group_vars").mkdir(exist_ok=True)
    (d / "group_vars/all.yml").write_text(GROUP_VARS + (f"kvprov_nixl_plugins:\n  {group_plugins}\n" if group_plugins else ""))
    (d / "inv.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        h1:\n          ansible_host: 10.0.0.5\n"
                               f"          kvprov_nixl_plugins:\n            {host_plugins}\n")
    (d / "ansible.cfg").write_text("[defaults]\nhash_behaviour = merge\n" if merge else "[defaults]\n")


def run(d: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return subprocess.run(args, cwd=d, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("merge", [True, False])
def test_group_and_host_dicts_read_as_ansible_merges_them(tmp_path, merge):
    inventory(tmp_path, "posix: {active: false}", "gds_mt: {active: true}", merge)
    seen = json.loads(run(tmp_path, "ansible-inventory", "-i", "inv.yml", "--host", "h1").stdout)["kvprov_nixl_plugins"]
    assert seen == ({"gds_mt": {"active": True}, "posix": {"active": False}} if merge else {"posix": {"active": False}})
    r = run(tmp_path, sys.executable, "-m", "kvprov", "check", "inv.yml")
    if not merge:  # replaced: the host's table alone, with no active plugin
        assert r.returncode == 2 and "no plugin has active: true" in r.stdout, r.stdout + r.stderr
        return
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(tmp_path, sys.executable, "-m", "kvprov", "render", "inv.yml", "--out", "out")
    assert r.returncode == 0, r.stdout + r.stderr
    [toml] = (tmp_path / "out/h1").rglob("*.toml")
    plugins = tomllib.loads(toml.read_text())["plugin"]
    assert {n: t["active"] for n, t in plugins.items()} == {"gds_mt": True, "posix": False}


def test_a_dict_merged_over_the_role_default_is_judged_whole(tmp_path):
    """The role's default kvprov_nixl_plugins activates gds_mt: merged with a host's active posix,
    two plugins are active, which the deploy's preflight refuses. check says so, before any host."""
    inventory(tmp_path, "posix: {active: true}")
    r = run(tmp_path, sys.executable, "-m", "kvprov", "check", "inv.yml")
    assert r.returncode == 2 and "plugins gds_mt and posix all have active: true" in r.stdout, r.stdout + r.stderr
    assert r.stdout.startswith("inv.yml:8: host h1: kvprov_nixl_plugins:"), r.stdout
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")  # replaced: posix alone, which is fine
    r = run(tmp_path, sys.executable, "-m", "kvprov", "check", "inv.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(tmp_path, sys.executable, "-m", "kvprov", "check", "inv.yml", "-e",
            '{"kvprov_nixl_plugins": {"posix": {"active": false}}}')  # -e replaces too
    assert r.returncode == 2 and "no plugin has active: true" in r.stdout, r.stdout + r.stderr
