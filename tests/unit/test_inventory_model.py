"""What load() makes of an inventory beyond precedence: the storage systems' group, values
YAML gives as other types, where a value set at two levels comes from."""

from datetime import date

from kvprov import inventory
from tests.unit.test_inventory import write

INVENTORY = """
all:
  vars:
    v_same: 1
  children:
    gpu_nodes:
      vars:
        v_same: 1
        v_date: 2024-01-02
      hosts:
        gpu1:
    kv_storage:
      hosts:
        nas1:
"""


def test_the_storage_group_is_loaded_beside_the_targets(tmp_path):
    path = write(tmp_path / "inv.yml", INVENTORY)
    inv = inventory.load(path)
    assert (inv.host_names, [h.name for h in inv.storage_hosts]) == (["gpu1"], ["nas1"])
    storage = inventory.load(path, target="kv_storage")  # kvprov storage check: the storage systems are the targets
    assert (storage.host_names, storage.storage_hosts) == (["nas1"], [])


def test_values_yaml_types_and_the_group_that_wins(tmp_path):
    path = write(tmp_path / "inv.yml", INVENTORY)
    gpu1 = inventory.load(path).host("gpu1")
    assert gpu1.value("v_date") == date(2024, 1, 2)  # YAML's date type comes through
    # the same value in all and gpu_nodes: gpu_nodes' is the one Ansible takes (a child group wins)
    assert str(gpu1.var("v_same").origin) == f"{path}:7"


SCRIPT = """\
#!/usr/bin/env python3
import json, sys
groups = {"gpu_nodes": {"hosts": ["gpu1"], "vars": {"kvprov_storage_server": "10.0.0.5"}}}
print(json.dumps({**groups, "_meta": {"hostvars": {"gpu1": {"kvprov_storage_nconnect": 4}}}} if "--list" in sys.argv
                 else {}))
"""


def test_a_script_inventorys_values_name_the_script(tmp_path, monkeypatch):
    """A script's JSON has no lines: Ansible describes where the values came from."""
    monkeypatch.chdir(tmp_path)
    script = write(tmp_path / "inv.py", SCRIPT)
    script.chmod(0o755)
    inv = inventory.load("inv.py")
    gpu1 = inv.host("gpu1")
    said = f"<inventory script output from '{script}'>"
    assert (gpu1.value("kvprov_storage_server"), str(gpu1.var("kvprov_storage_server").origin)) == ("10.0.0.5", said)
    assert (gpu1.value("kvprov_storage_nconnect"), str(gpu1.var("kvprov_storage_nconnect").origin)) == (4, said)
    assert str(gpu1.origin) == "inv.py" and inv.groups["gpu_nodes"].origin is None  # no file and line to name


def test_an_older_ansible_core_gives_the_position_it_put_on_the_value(monkeypatch):
    """Fake (ansible-core before 2.19 cannot be imported beside 2.19): its tag module missing, a
    loaded value carries ansible_pos (file, line, column)."""
    import sys
    from types import SimpleNamespace

    monkeypatch.setitem(sys.modules, "ansible._internal._datatag._tags", None)  # the import fails
    value = type("AnsibleUnicode", (str,), {})("10.0.0.5")
    value.ansible_pos = ("inv.yml", 7, 9)
    assert inventory._ansible_origin(value) == SimpleNamespace(path="inv.yml", line_num=7, col_num=9, description=None)
    assert inventory._ansible_origin("no position") is None


def test_each_file_is_shown_as_its_source_was_given(tmp_path, monkeypatch):
    """One source given absolute, another relative inside the first one's directory, a
    directory whose name ends in X: Ansible reports real paths, kvprov the user's."""
    monkeypatch.chdir(tmp_path)
    first = write(tmp_path / "invX/inv.yml", INVENTORY)
    write(tmp_path / "invX/sub/more.yml", "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu1: {v_more: 1}\n")
    gpu1 = inventory.load([str(first), "invX/sub/more.yml"]).host("gpu1")
    assert (str(gpu1.var("v_date").origin), str(gpu1.var("v_more").origin)) == (f"{first}:8", "invX/sub/more.yml:5")
    assert str(inventory.load("invX/inv.yml").host("gpu1").var("v_date").origin) == "invX/inv.yml:8"


def test_a_variable_is_its_name_value_and_origin_whatever_yaml_node_it_came_from(tmp_path):
    path = write(tmp_path / "inv.yml", INVENTORY)
    var = inventory.load(path).host("gpu1").var("v_date")
    assert var.node is not None and var == inventory.Var("v_date", date(2024, 1, 2), inventory.Origin(str(path), 8))


def test_group_vars_run_at_inventory_load_are_listed_once(tmp_path, monkeypatch):
    """Ansible's run_vars_plugins=start: group_vars/ is read when the inventory loads, and a
    play's task stage reads it no more (kvprov takes the variables as a play sees them)."""
    import ansible.constants

    monkeypatch.setattr(ansible.constants, "RUN_VARS_PLUGINS", "start")
    write(tmp_path / "group_vars/all.yml", "v_only: gv\n")
    inv = inventory.load(write(tmp_path / "inv.yml", INVENTORY))
    assert inv.host("gpu1").value("v_only") == "gv"
    assert [(s.group, str(s.var.origin)) for s in inv.settings if s.var.name == "v_only"] == [
        ("all", f"{tmp_path}/group_vars/all.yml:1")]


def test_the_inventory_arguments_of_every_command():
    import argparse

    parser = argparse.ArgumentParser(prog="kvprov check")
    inventory.add_inventory_args(parser)
    usage = " ".join(parser.format_usage().split())
    assert usage.startswith("usage: kvprov check [-h] [-i SOURCE] [-e VARS] [-u USER] [--private-key FILE] "
                            "[-k | --connection-password-file FILE] [-f N] [-b] [--become-method METHOD] "
                            "[--become-user USER] [-K | --become-password-file FILE]")
    assert usage.endswith("[--vault-id [LABEL@]SOURCE] [--vault-password-file FILE] [-J] [INVENTORY]")
    assert "the inventory: whatever ansible-inventory -i takes" in parser.format_help()
    args = parser.parse_args(["a.ini", "-i", "b.yml", "-i", "c"])
    assert inventory.from_args(args) == ["a.ini", "b.yml", "c"]
    other = argparse.ArgumentParser()
    inventory.add_inventory_args(other, required=False, help="what the bundles are judged against")
    assert "what the bundles are judged against" in other.format_help()
    assert inventory.from_args(other.parse_args([])) == []


def test_the_models_records_are_frozen_values():
    import dataclasses

    import pytest

    origin = inventory.Origin("inv.yml", 3)
    var = inventory.Var("kvprov_x", 1, origin)
    setting = inventory.Setting(var, host="gpu1")
    for record, field in ((origin, "line"), (var, "value"), (setting, "host")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, None)
    assert len({origin, inventory.Origin("inv.yml", 3)}) == 1 and origin.default is False
    import yaml

    node = yaml.compose("1")
    assert inventory.Var("kvprov_x", 1, origin, node) == var  # the YAML node is no part of the value


def test_from_args_configures_the_vault_and_ansible_once_a_command(monkeypatch):
    import argparse

    from kvprov import ansible_cli, vault

    calls = []
    monkeypatch.setattr(vault, "configure", lambda args: calls.append("vault"))
    monkeypatch.setattr(ansible_cli, "configure", lambda args: calls.append("ansible"))
    args = argparse.Namespace(inventory="a.yml", more_inventory=["b.yml"], inventory_required=True)
    assert inventory.from_args(args) == ["a.yml", "b.yml"] and calls == ["vault", "ansible"]
    assert args.ansible_configured is True
    assert inventory.from_args(args) == ["a.yml", "b.yml"] and calls == ["vault", "ansible"]  # not again


def test_a_limit_and_a_host_list_source():
    assert inventory.limit_patterns(None) is None and inventory.limit_patterns("") == ""
    assert inventory.hosts_matching(["gpu1,gpu2,"], "gpu1") == {"gpu1"}  # a host list, no file: as Ansible takes it
