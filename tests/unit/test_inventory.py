"""Inventory loading through ansible-core: groups and targets, Ansible's precedence,
group_vars/host_vars, role defaults, where every value came from, clean YAML errors and
kvprov's YAML lint; INI files, directories, several sources and constructed sources, each
compared with `ansible-inventory --list`."""

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from kvprov import check, inventory, inventory_lint
from kvprov.errors import EXIT_USAGE
from kvprov.inventory import InventoryError
from tests.conftest import ROOT, kvprov


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


# An inventory where every level sets the same variables, so precedence shows.
LAYERED = """
all:
  vars:
    v_all: inv_all
    v_x: inv_all
    v_y: inv_all
  children:
    gpu_nodes:
      vars:
        v_x: inv_gpu
        v_y: inv_gpu
        v_z: inv_gpu
      children:
        a:
          vars: {v_x: inv_a, v_y: inv_a}
          hosts:
            h1: {v_h: inv_host, v_z: inv_host}
        b:
          vars: {v_x: inv_b}
          hosts:
            h1:
            h2:
    other:
      hosts:
        not_a_target: {v_h: other}
"""


@pytest.fixture
def layered(tmp_path):
    inv = write(tmp_path / "inv.yml", LAYERED)
    write(tmp_path / "group_vars/all.yml", "v_y: gv_all\n")
    write(tmp_path / "group_vars/gpu_nodes.yml", "v_h: gv_gpu\nv_w: gv_gpu\n")
    write(tmp_path / "group_vars/a.yaml", "v_z: gv_a\n")
    write(tmp_path / "host_vars/h2/10-first.yml", "v_w: hv_first\nv_q: hv_first\n")
    write(tmp_path / "host_vars/h2/20-second.yml", "v_q: hv_second\n")
    return inv


def values(host, prefix="v_"):
    return {n: v.value for n, v in host.vars.items() if n.startswith(prefix)}


def test_targets_are_the_hosts_of_gpu_nodes_and_its_children_in_file_order(layered):
    inv = inventory.load(layered)
    assert inv.host_names == ["h1", "h2"]  # not_a_target is in another group
    assert inv.host("h1").groups == ["all", "gpu_nodes", "a", "b"]
    assert inv.groups["gpu_nodes"].children == ["a", "b"]


def test_precedence_is_ansibles(layered):
    h1, h2 = inventory.load(layered).hosts
    assert values(h1) == {
        "v_all": "inv_all",
        "v_x": "inv_b",  # b and a have the same depth: by name, b wins
        "v_y": "gv_all",  # group_vars/all.yml beats every group var of the inventory file
        "v_z": "inv_host",  # inventory host vars beat group_vars/<group>
        "v_h": "inv_host",
        "v_w": "gv_gpu",
    }
    assert values(h2)["v_w"] == "hv_first"  # host_vars/ beats group_vars/
    assert values(h2)["v_q"] == "hv_second"  # files of a host_vars/<host>/ directory load sorted
    assert values(h2)["v_z"] == "inv_gpu"


def test_origins_name_the_file_and_line(layered, tmp_path):
    h1, h2 = inventory.load(layered).hosts
    assert str(h1.var("v_x").origin) == f"{layered}:18"
    assert str(h1.var("v_z").origin) == f"{layered}:16"
    assert str(h1.var("v_y").origin) == f"{tmp_path}/group_vars/all.yml:1"
    assert str(h2.var("v_q").origin) == f"{tmp_path}/host_vars/h2/20-second.yml:1"
    assert h1.origin.line == 16  # where the host is first declared


@pytest.mark.skipif(shutil.which("ansible-inventory") is None, reason="ansible-inventory not installed")
def test_effective_values_match_ansible_inventory(layered):
    """Ansible itself is the reference for precedence."""
    inv = inventory.load(layered)
    for host in inv.hosts:
        out = subprocess.run(["ansible-inventory", "-i", str(layered), "--host", host.name],
                             capture_output=True, text=True, check=True, timeout=120)
        assert values(host) == {k: v for k, v in json.loads(out.stdout).items() if k.startswith("v_")}


def test_child_group_beats_parent_whatever_the_names(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            zeta:
              vars: {v: parent}
              children:
                gpu_nodes:
                  vars: {v: child}
                  hosts: {h1: }
    """))
    assert inv.hosts[0].value("v") == "child"
    assert inv.hosts[0].groups == ["all", "zeta", "gpu_nodes"]


def test_group_priority_orders_groups_of_the_same_depth(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts: {h1: }
            aaa:
              vars: {v: aaa, ansible_group_priority: 10}
              hosts: {h1: }
            zzz:
              vars: {v: zzz}
              hosts: {h1: }
    """))
    assert inv.hosts[0].value("v") == "aaa"


def test_dicts_are_replaced_not_merged(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              vars:
                kvprov_nixl_plugins: {gds_mt: {active: true}}
              hosts:
                h1:
                  kvprov_nixl_plugins: {posix: {active: true}}
    """))
    assert inv.hosts[0].value("kvprov_nixl_plugins") == {"posix": {"active": True}}


def test_unset_kvprov_variables_take_the_role_defaults(layered):
    host = inventory.load(layered).hosts[0]
    defaults = yaml.safe_load((inventory.roles_dir() / "kvcache_mount/defaults/main.yml").read_text())
    var = host.var("kvprov_storage_mount_point")
    assert var.value == defaults["kvprov_storage_mount_point"]
    assert var.origin.default and str(var.origin) == "default"
    assert var.origin.file.endswith("roles/kvcache_mount/defaults/main.yml")
    assert host.is_default("kvprov_storage_profile")
    assert host.kvprov_vars()["kvprov_storage_profile"] == defaults["kvprov_storage_profile"]
    assert "v_x" not in host.kvprov_vars()


def test_roles_dir_is_the_repository_roles():
    assert inventory.roles_dir() == ROOT / "roles"
    assert (inventory.roles_dir() / "kvcache_mount/defaults/main.yml").is_file()


def test_roles_can_come_from_elsewhere(layered, tmp_path):
    write(tmp_path / "myroles/x/defaults/main.yml", "kvprov_x_thing: 3\nnot_kvprov: 1\n")
    host = inventory.load(layered, roles=tmp_path / "myroles").hosts[0]
    assert host.value("kvprov_x_thing") == 3
    assert host.var("not_kvprov") is None  # only kvprov_* defaults are exposed
    assert host.var("kvprov_storage_profile") is None


def test_inventory_values_and_connection_vars(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          vars:
            ansible_user: root
          children:
            gpu_nodes:
              hosts:
                gpu1:
                  ansible_host: 10.1.0.1
                  ansible_port: 2222
                  kvprov_storage_server: 10.0.0.5
    """))
    host = inv.hosts[0]
    assert host.value("kvprov_storage_server") == "10.0.0.5"
    assert not host.is_default("kvprov_storage_server")
    assert host.values()["ansible_port"] == 2222
    assert host.values()["inventory_hostname"] == "gpu1"
    assert host.values()["ansible_user"] == "root"


def test_host_ranges_expand(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu[08:10].example.com: {rack: a}
                node-[a:b]:
    """))
    assert inv.host_names == ["gpu08.example.com", "gpu09.example.com", "gpu10.example.com", "node-a", "node-b"]
    assert inv.host("gpu10.example.com").value("rack") == "a"


def test_dotted_host_names_find_their_host_vars(tmp_path):
    inv = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1.example.com:
                gpu2.example.com:
    """)
    write(tmp_path / "host_vars/gpu1.example.com.yml", "v: with_extension\n")
    write(tmp_path / "host_vars/gpu2.example.com", "v: without_extension\n")
    hosts = inventory.load(inv).hosts
    assert [h.value("v") for h in hosts] == ["with_extension", "without_extension"]


def test_yaml_merge_keys_and_anchors(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: &common
                  kvprov_storage_server: 10.0.0.5
                  kvprov_storage_nfs_port: 20049
                gpu2:
                  <<: *common
                  kvprov_storage_server: 10.0.0.6
    """))
    gpu2 = inv.host("gpu2")
    assert gpu2.value("kvprov_storage_server") == "10.0.0.6"
    assert gpu2.value("kvprov_storage_nfs_port") == 20049


def test_line_of_nested_elements(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1:
                  kvprov_sglang_instances:
                    - name: a
                      port: 8000
                    - name: b
                      storage_dir: /mnt/kvcache/b
    """))
    var = inv.hosts[0].var("kvprov_sglang_instances")
    assert var.origin.line == 6
    assert var.line_of(1) == 9
    assert var.line_of(1, "storage_dir") == 10
    assert var.line_of(5, "nothing") == 6  # falls back to the variable's line


def test_yaml_syntax_error_is_one_clean_line(tmp_path):
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: {kvprov_storage_server: 10.0.0.5
    """)
    with pytest.raises(InventoryError) as e:
        inventory.load(path)
    assert str(e.value).startswith(f"{path}:6:1: YAML error: ")
    assert (e.value.file, e.value.line, e.value.column) == (str(path), 6, 1)
    assert e.value.exit_code == EXIT_USAGE
    assert "Traceback" not in str(e.value)


def test_yaml_error_in_group_vars_names_that_file(layered, tmp_path):
    write(tmp_path / "group_vars/b.yml", "v: [unclosed\n")
    with pytest.raises(InventoryError, match=r"group_vars/b\.yml:2:1: YAML error: "):
        inventory.load(layered)


def test_unreadable_and_empty_inventories(tmp_path):
    with pytest.raises(InventoryError, match="nope.yml: cannot read: No such file"):
        inventory.load(tmp_path / "nope.yml")
    with pytest.raises(InventoryError, match="not an inventory Ansible can parse: the directory holds no inventory source"):
        inventory.load(tmp_path)
    with pytest.raises(InventoryError, match="the inventory is empty"):
        inventory.load(write(tmp_path / "empty.yml", "# nothing\n"))
    with pytest.raises(InventoryError, match=r"list.yml:1: an inventory must be a mapping of groups"):
        inventory.load(write(tmp_path / "list.yml", "- gpu1\n"))


def test_an_unparsable_source_is_an_error_naming_it(tmp_path):
    """Not Ansible's warning and an empty inventory: the file and Ansible's reason."""
    path = write(tmp_path / "hosts.ini", "[gpu_nodes]\ngpu1\n[gpu_nodes:vars]\nno equals sign\n")
    with pytest.raises(InventoryError) as e:
        inventory.load(path)
    assert str(e.value).startswith(f"{path}: not an inventory Ansible can parse: ")
    assert "no equals sign" in str(e.value) and "(ini plugin)" in str(e.value)
    assert e.value.exit_code == EXIT_USAGE
    r = kvprov("check", str(path))
    assert r.returncode == EXIT_USAGE and r.stderr == ""
    assert r.stdout.splitlines()[0].startswith(f"{path}: not an inventory Ansible can parse: ")


def test_an_unparsable_source_in_a_directory_names_that_file(tmp_path):
    write(tmp_path / "inv/01-gpus.yml", "all:\n  children:\n    gpu_nodes:\n      hosts: {gpu1: }\n")
    write(tmp_path / "inv/02-bad.yml", "plugin: constructed\ngroups: [not, a, mapping]\n")
    with pytest.raises(InventoryError, match=rf"^{tmp_path}/inv/02-bad.yml: not an inventory Ansible can parse: "
                                             r".*'groups'.* \(auto plugin\)$"):
        inventory.load(tmp_path / "inv")


def test_a_yaml_mistake_ansible_refuses_is_reported_by_the_lint(tmp_path):
    """Ansible 2.19 refuses a group that is a list; kvprov says where, with its other findings."""
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: {v: 1, v: 2}
            extra:
              - not a mapping
    """)
    with pytest.raises(InventoryError) as e:
        inventory.load(path)
    assert [(p.file, p.line) for p in e.value.problems] == [(str(path), 5), (str(path), 7)]
    assert e.value.problems[1].message == "group extra must be a mapping with hosts:, children:, vars:, got a list"


def test_targets_are_required(tmp_path):
    with pytest.raises(InventoryError, match="no group gpu_nodes") as e:
        inventory.load(write(tmp_path / "a.yml", "all:\n  hosts:\n    gpu1:\n"))
    assert e.value.exit_code == EXIT_USAGE
    with pytest.raises(InventoryError, match=r"b.yml:3: group gpu_nodes has no hosts"):
        inventory.load(write(tmp_path / "b.yml", "all:\n  children:\n    gpu_nodes:\n      vars: {x: 1}\n"))


def test_children_loop_is_an_error(tmp_path):
    with pytest.raises(InventoryError, match="Adding group 'rack' as child to 'gpu_nodes' creates a recursive "
                                             r"dependency loop\. \(yaml plugin\)"):
        inventory.load(write(tmp_path / "inv.yml", """
            all:
              children:
                gpu_nodes:
                  hosts: {h1: }
                  children:
                    rack:
                      children:
                        gpu_nodes:
        """))


def test_structural_mistakes_become_issues(tmp_path):
    inv = inventory.load(write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1:
                  v: 1
                  v: 2
            storage:
              hostz:
                nfs1:
    """))
    messages = [(p.line, p.message) for p in inv.issues]
    assert (7, "duplicate key 'v' (first at line 6): YAML silently keeps only the last one; remove one of them") in messages
    assert any(line == 9 and "unexpected key 'hostz'" in m and "did you mean hosts?" in m for line, m in messages)
    assert inv.hosts[0].value("v") == 2


def test_vars_files_for_unknown_groups_are_flagged(layered, tmp_path):
    write(tmp_path / "group_vars/gpu_node.yml", "kvprov_storage_server: 10.0.0.5\n")
    inv = inventory.load(layered)
    [issue] = inv.issues
    assert issue.severity == "warning"
    assert issue.file == f"{tmp_path}/group_vars/gpu_node.yml"
    assert "no group gpu_node in the inventory: Ansible ignores this file; did you mean gpu_nodes?" in issue.message


def test_settings_list_every_place_a_variable_is_set(layered, tmp_path):
    inv = inventory.load(layered)
    places = {(s.group, s.host, str(s.var.origin)) for s in inv.settings if s.var.name == "v_z"}
    assert places == {("gpu_nodes", None, f"{layered}:11"), (None, "h1", f"{layered}:16"),
                      ("a", None, f"{tmp_path}/group_vars/a.yaml:1")}


def test_group_priority_counts_only_in_the_inventory_source(tmp_path):
    """Ansible's rule: ansible_group_priority in group_vars/ does not order the groups."""
    path = write(tmp_path / "inv.yml", """
        all:
          children:
            gpu_nodes:
              hosts: {h1: }
            aaa:
              vars: {v: aaa}
              hosts: {h1: }
            zzz:
              vars: {v: zzz}
              hosts: {h1: }
    """)
    write(tmp_path / "group_vars/aaa.yml", "ansible_group_priority: 10\n")
    assert inventory.load(path).hosts[0].value("v") == "zzz"


def test_lint_is_pure():
    text = "all:\n  children:\n    gpu_nodes:\n      hosts:\n        g1: {x: 1, x: 2}\n      hostz:\n"
    root, problems = inventory_lint.lint_inventory(text, "mem.yml")
    assert [(p.file, p.line) for p in problems] == [("mem.yml", 5), ("mem.yml", 6)]
    assert "duplicate key 'x'" in problems[0].message and "did you mean hosts?" in problems[1].message
    assert inventory_lint.key_nodes(root)[(5, "g1")].start_mark.line == 4


# ---------------------------------------------------------------------------- any source Ansible reads

SOURCES = {  # name -> the source(s) as given, relative to the repository
    "yaml": ["inventory/example.yml"],
    "ini": ["tests/fixtures/inventories/ini/hosts.ini"],
    "directory": ["tests/fixtures/inventories/dir"],
    "constructed": ["tests/fixtures/inventories/constructed"],
    "several": ["tests/fixtures/inventories/ini/hosts.ini", "tests/fixtures/inventories/dir/02-more.ini"],
}


def ansible_inventory_list(sources: list[str]) -> dict:
    args = [a for s in sources for a in ("-i", s)]
    out = subprocess.run(["ansible-inventory", *args, "--list"], capture_output=True, text=True, check=True,
                         timeout=120, cwd=ROOT)
    return json.loads(out.stdout)


def untag(value):
    """ansible-inventory --list marks strings made by a template as {"__ansible_unsafe": "..."}."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: untag(v) for k, v in value.items()}
    return [untag(v) for v in value] if isinstance(value, list) else value


def assert_same_as_ansible_inventory(sources: list[str], ordered: bool = True) -> inventory.Inventory:
    """kvprov's hosts, groups and merged values for the sources are ansible-inventory's
    (the hosts in its order too, unless `ordered` is false)."""
    inv = inventory.load(sources if len(sources) > 1 else sources[0])
    listed = ansible_inventory_list(sources)
    hostvars = listed.pop("_meta")["hostvars"]
    for group, body in listed.items():
        if group != "all":  # --list shows the hosts of all under ungrouped
            assert inv.groups[group].hosts == body.get("hosts", []), group
        assert sorted(inv.groups[group].children) == sorted(body.get("children", [])), group

    def below(group: str) -> set[str]:
        body = listed.get(group, {})
        return {*body.get("hosts", []), *(h for child in body.get("children", []) for h in below(child))}

    want = [h for h in hostvars if h in below("gpu_nodes")]
    assert (inv.host_names if ordered else sorted(inv.host_names)) == (want if ordered else sorted(want)) and inv.hosts
    for host in inv.hosts:
        mine = {n: v.value for n, v in host.vars.items() if not v.origin.default}
        assert mine == untag(hostvars[host.name]), host.name
    return inv


@pytest.mark.skipif(shutil.which("ansible-inventory") is None, reason="ansible-inventory not installed")
@pytest.mark.parametrize("name", SOURCES)
def test_hosts_groups_and_values_are_ansible_inventorys(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert_same_as_ansible_inventory(SOURCES[name])


def test_an_ini_inventory_has_file_and_line(monkeypatch):
    monkeypatch.chdir(ROOT)
    inv = inventory.load("tests/fixtures/inventories/ini/hosts.ini")
    assert inv.host_names == ["gpu-a01.example.com", "gpu-a02.example.com", "gpu-b01.example.com"]
    b01 = inv.host("gpu-b01.example.com")
    assert b01.groups == ["all", "gpu_nodes", "rack_b"]
    assert str(b01.var("kvprov_storage_rsize").origin) == "tests/fixtures/inventories/ini/hosts.ini:10"
    assert b01.value("kvprov_storage_rsize") == 1048576
    assert str(b01.var("kvprov_storage_nconnect").origin) == "tests/fixtures/inventories/ini/hosts.ini:13"
    assert str(b01.var("kvprov_storage_nfs_version").origin) == "tests/fixtures/inventories/ini/group_vars/gpu_nodes.yml:1"
    assert str(b01.origin) == "tests/fixtures/inventories/ini/hosts.ini"  # INI hosts carry no line: the source
    assert b01.is_default("kvprov_storage_profile")


def test_check_on_an_ini_inventory_points_at_the_line(tmp_path):
    path = write(tmp_path / "hosts.ini", """
        [gpu_nodes]
        gpu1 kvprov_storage_server=10.0.0.5 kvprov_storage_nfs_port=port20049
        gpu2 kvprov_storage_server=10.0.0.6

        [gpu_nodes:vars]
        kvprov_storage_nconnect=99
    """)
    r = kvprov("check", str(path))
    lines = r.stdout.splitlines()
    assert any(line.startswith(f'{path}:2: host gpu1: kvprov_storage_nfs_port: expected an integer, got the string '
                               '"port20049"') for line in lines), r.stdout
    assert any(line.startswith(f"{path}:6: ") and "kvprov_storage_nconnect" in line for line in lines), r.stdout
    assert r.returncode == EXIT_USAGE and r.stderr == ""


def test_a_constructed_value_names_its_source(monkeypatch):
    monkeypatch.chdir(ROOT)
    inv = inventory.load("tests/fixtures/inventories/constructed")
    assert inv.host_names == ["node1", "node2"]  # mgmt1 is not constructed into gpu_nodes
    node2 = inv.host("node2")
    assert node2.groups == ["all", "gpu_nodes", "rack_b"]
    assert node2.value("kvprov_storage_server") == "10.0.0.6" and type(node2.value("kvprov_storage_server")) is str
    assert str(node2.var("kvprov_storage_server").origin) == "tests/fixtures/inventories/constructed/02-groups.yml:9"


def test_a_directory_merges_its_files_and_vars(monkeypatch):
    monkeypatch.chdir(ROOT)
    inv = inventory.load("tests/fixtures/inventories/dir")
    assert inv.host_names == ["gpu-a01", "gpu-c01"]
    c01 = inv.host("gpu-c01")
    assert c01.groups == ["all", "gpu_nodes", "rack_c"]
    assert str(c01.var("kvprov_storage_nfs_version").origin) == "tests/fixtures/inventories/dir/01-gpus.yml:7"
    assert str(c01.var("kvprov_storage_server").origin) == "tests/fixtures/inventories/dir/host_vars/gpu-c01.yml:1"
    assert str(c01.origin) == "tests/fixtures/inventories/dir/02-more.ini"
    assert str(inv.host("gpu-a01").origin) == "tests/fixtures/inventories/dir/01-gpus.yml:11"


def test_yaml_files_of_a_directory_are_linted(tmp_path):
    write(tmp_path / "inv/hosts.yml", """
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1: {kvprov_storage_server: 10.0.0.5}
              hostz:
                gpu2:
    """)
    problems = check.run(str(tmp_path / "inv"))[1]
    assert [(p.file, p.line) for p in problems] == [(f"{tmp_path}/inv/hosts.yml", 6)]
    assert "unexpected key 'hostz'" in problems[0].message


def test_values_are_plain_python(monkeypatch):
    """No Ansible tag types leak out: values dump as YAML, names are plain strings."""
    monkeypatch.chdir(ROOT)
    for sources in SOURCES.values():
        for host in inventory.load(sources if len(sources) > 1 else sources[0]).hosts:
            yaml.safe_dump(host.values())
            assert all(type(n) is str and type(v.name) is str for n, v in host.vars.items())


def test_a_yaml_alias_bomb_is_refused_at_once_and_ordinary_aliases_still_work(tmp_path):
    """#38 (Low): nine levels of nine aliases expand to 387 million values; kvprov check spent
    minutes on it. It is refused from the file's own size; anchors and merge keys as inventories
    use them pass."""
    import time

    from kvprov import check

    levels = ['          a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"          {n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefgh", "bcdefghi")]
    head = ("all:\n  children:\n    gpu_nodes:\n      hosts: {s1: null}\n      vars:\n"
            "        kvprov_storage_profile: local\n        kvprov_storage_pnfs_layout: none\n"
            "        kvprov_engine_model_revision: abc\n")
    (tmp_path / "bomb.yml").write_text(head + "        kvprov_engine_environment:\n" + "\n".join(levels) + "\n")
    t0 = time.monotonic()
    hosts, problems = check.run(str(tmp_path / "bomb.yml"))
    assert time.monotonic() - t0 < 20 and hosts == []
    assert [p.message for p in problems] == ["YAML aliases (*name) expand this file to more than 5,000,000 values: an "
                                             "alias bomb, not an inventory; write the values out"]
    (tmp_path / "ok.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n"
                                     "        s1: &h {kvprov_engine_model_revision: abc, kvprov_storage_profile: local}\n"
                                     "        s2:\n          <<: *h\n          kvprov_storage_pnfs_layout: none\n"
                                     "      vars: {kvprov_storage_pnfs_layout: none}\n")
    hosts, problems = check.run(str(tmp_path / "ok.yml"))
    assert hosts == ["s1", "s2"] and not check.has_errors(problems), problems
