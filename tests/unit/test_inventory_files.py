"""Which files of an inventory kvprov reads, lints and indexes as Ansible's host_group_vars
reads them (suffixes, hidden files, <name>/ directories, host_vars/), and the sources it
leaves to Ansible alone (host lists)."""

from pathlib import Path

import pytest

from kvprov import inventory
from kvprov.inventory import InventoryError
from tests.unit.test_inventory import write

HOSTS = """
all:
  children:
    gpu_nodes:
      hosts:
        gpu1:
        gpu2:
"""
DUPLICATE = "v_dup: 1\nv_dup: 2\n"  # a lint warning wherever kvprov reads the file


def issues(inv) -> list[tuple[str, int]]:
    return [(p.file, p.line) for p in inv.issues]


def test_vars_files_are_those_ansible_reads_and_each_is_linted(tmp_path):
    write(tmp_path / "group_vars/.hidden.yml", DUPLICATE)  # skipped, as by Ansible
    write(tmp_path / "group_vars/all.json", '{"v_json": 1}\n')  # the vars of group all, not of a group all.json
    write(tmp_path / "group_vars/gpu_nodes/main", "v_plain: 3\n" + DUPLICATE)  # no suffix: read
    write(tmp_path / "group_vars/gpu_nodes/.hidden.yml", DUPLICATE)
    write(tmp_path / "group_vars/gpu_nodes/notes.txt", DUPLICATE)  # not a vars file
    write(tmp_path / "host_vars/gpu1.yaml", "v_list:\n  - a\n  - b\n" + DUPLICATE)
    inv = inventory.load(write(tmp_path / "inv.yml", HOSTS))
    assert issues(inv) == [(f"{tmp_path}/group_vars/gpu_nodes/main", 3), (f"{tmp_path}/host_vars/gpu1.yaml", 5)]
    gpu1 = inv.host("gpu1")
    assert {n: v.value for n, v in gpu1.vars.items() if n.startswith("v_")} == {
        "v_json": 1, "v_plain": 3, "v_dup": 2, "v_list": ["a", "b"]}
    # the vars files' YAML nodes are indexed: a value starting on the next line has its key's line
    assert str(gpu1.var("v_list").origin) == f"{tmp_path}/host_vars/gpu1.yaml:1"
    assert gpu1.var("v_list").line_of(1) == 3


def test_an_inventory_file_named_yaml_is_linted(tmp_path):
    inv = inventory.load(write(tmp_path / "hosts.yaml", HOSTS.replace("gpu2:", "gpu2: {v: 1, v: 2}")))
    assert issues(inv) == [(f"{tmp_path}/hosts.yaml", 6)]


def test_a_host_list_source_is_ansibles_alone_and_the_sources_after_it_are_linted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "inv.yml", HOSTS.replace("gpu2:", "gpu2: {v: 1, v: 2}"))
    inv = inventory.load(["gpu2,spare1", "inv.yml"])
    assert inv.host_names == ["gpu2", "gpu1"]  # in the order Ansible met them
    assert str(inv.host("gpu2").origin) == "gpu2,spare1"  # the source that added it
    assert str(inv.host("gpu1").origin) == "inv.yml:5"  # a file in the working directory, shown as given
    assert issues(inv) == [("inv.yml", 6)]


def test_a_source_that_is_neither_file_nor_directory_is_left_to_ansible():
    """/dev/null, or a pipe such as bash's <(...)."""
    with pytest.raises(InventoryError) as e:
        inventory.load("/dev/null")
    assert (e.value.file, e.value.detail) == ("/dev/null", "no group gpu_nodes: kvprov configures the hosts of group "
                                              "gpu_nodes (add them under all: children: gpu_nodes: hosts:; groups "
                                              "here: none)")


def test_an_unreadable_vars_file_says_why(tmp_path):
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    with pytest.raises(InventoryError) as e:
        inventory.read_text(Path(tmp_path / "loop1"))
    assert (e.value.file, e.value.detail) == (str(tmp_path / "loop1"), "cannot read: Too many levels of symbolic links")


def test_an_empty_target_group_points_at_where_it_is_declared(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "d/01.yml", "all:\n  children:\n    gpu_nodes:\n      hosts: {}\n")
    write(tmp_path / "empty.ini", "[gpu_nodes]\n\n[other]\nh1\n")
    for source, where in (("d", ("d/01.yml", 3)), ("empty.ini", ("empty.ini", None))):
        with pytest.raises(InventoryError) as e:
            inventory.load(source)
        assert (e.value.detail, e.value.file, e.value.line) == ("group gpu_nodes has no hosts", *where)
