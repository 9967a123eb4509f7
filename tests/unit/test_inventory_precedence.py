"""Where a merged value comes from when it is set twice, and relative sources: both as
Ansible itself resolves them (ansible-inventory is the reference)."""

import json
import subprocess

from kvprov import inventory as I

INVENTORY = """all:
  children:
    gpu_nodes:
      vars:
        v_diff: inventory_group
        v_same: same
      hosts:
        gpu1:
"""


def write(d, group_all: str):
    (d / "group_vars").mkdir(parents=True)
    (d / "inv.yml").write_text(INVENTORY)
    (d / "group_vars" / "all.yml").write_text(f"v_only: gv\nv_diff: {group_all}\nv_same: same\n")


def test_group_vars_all_wins_over_a_group_of_the_inventory_source_and_is_named(tmp_path):
    write(tmp_path, "group_vars_all")
    shown = subprocess.run(["ansible-inventory", "-i", str(tmp_path / "inv.yml"), "--host", "gpu1"],
                           capture_output=True, text=True, check=True).stdout
    assert json.loads(shown)["v_diff"] == "group_vars_all"  # Ansible's order: groups' inventory vars < group_vars/all
    [host] = I.load(str(tmp_path / "inv.yml")).hosts
    for name, value, line in (("v_diff", "group_vars_all", 2), ("v_same", "same", 3)):  # equal values too
        var = host.vars[name]
        assert (var.value, var.origin.file, var.origin.line) == (value, str(tmp_path / "group_vars/all.yml"), line)


def test_a_relative_source_is_read_from_where_kvprov_runs_each_time(tmp_path, monkeypatch):
    for name in ("a", "b"):
        write(tmp_path / name, f"from_{name}")
    for name in ("a", "b"):  # one process, the same relative path from two directories
        monkeypatch.chdir(tmp_path / name)
        [host] = I.load("inv.yml").hosts
        assert (host.vars["v_diff"].value, host.vars["v_only"].value) == (f"from_{name}", "gv")


def test_a_relative_source_keeps_its_group_vars_when_vars_plugins_run_at_start(tmp_path, monkeypatch):
    write(tmp_path, "gv")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANSIBLE_RUN_VARS_PLUGINS", "start")
    [host] = I.load("inv.yml").hosts
    assert host.vars["v_only"].value == "gv"
