"""kvprov check's rules over several hosts (storage dirs, hash seeds, rollout settings,
the storage systems) and its output, on inventories built from values: each host is its
role defaults overlaid with its own values, every value it sets is a setting of that host
(as `kvprov check` gets them from a file, without the file's lines)."""

import argparse
import re
import json

import pytest

from kvprov import check, inventory
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.inventory import Group, Host, Inventory, Origin, Problem, Setting, Var

ROLES = inventory.roles_dir()
SPECS = check.read_specs(ROLES)
DEFAULTS = inventory.read_role_defaults(ROLES)
NFS = {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_uid": 2001, "kvprov_engine_model_revision": "0123abc"}  # a shared namespace's pinned owner and revision


def fleet(gpu: dict[str, dict], storage: dict[str, dict] | None = None, all_vars: dict | None = None) -> Inventory:
    """GPU hosts (group gpu_nodes), storage systems (group kv_storage) and variables of group all."""
    def host(name: str, values: dict) -> Host:
        return check.host_from_values(name, {**(all_vars or {}), **values}, DEFAULTS)

    settings = [Setting(Var(n, v, Origin("inv.yml", 1)), group="all") for n, v in (all_vars or {}).items()]
    settings += [Setting(Var(n, v, Origin("inv.yml", 2)), host=name)
                 for name, values in {**gpu, **(storage or {})}.items() for n, v in values.items()]
    storage_hosts = [Host(name, Origin("inv.yml", 3), ["all", "kv_storage"],
                          {n: Var(n, v, Origin("inv.yml", 3)) for n, v in {**(all_vars or {}), **values}.items()})
                     for name, values in (storage or {}).items()]
    groups = {"all": Group("all", None, children=["gpu_nodes", "kv_storage"]),
              "gpu_nodes": Group("gpu_nodes", Origin("inv.yml", 1), hosts=list(gpu)),
              "kv_storage": Group("kv_storage", Origin("inv.yml", 1), hosts=list(storage or {}))}
    return Inventory(ROLES / "inv.yml", [host(n, v) for n, v in gpu.items()], groups, settings, DEFAULTS, ROLES,
                     storage_hosts=storage_hosts)


def found(inv: Inventory) -> list[str]:
    return [f"{p.severity} {p.host} {p.variable}: {p.message}" for p in check.check(inv, SPECS)]


# ---------------------------------------------------------------------------- prefix hash seeds

def test_hash_seeds_key_the_namespace_so_hosts_with_other_seeds_share_nothing_and_are_told():
    inproc = {**NFS, "kvprov_engine": "lmcache_inproc"}
    [p] = found(fleet({"a": inproc, "b": {**inproc, "kvprov_engine_hash_seed": 7}}))
    assert p.startswith("warning b kvprov_engine_namespace: /mnt/kvcache/kv/lmcache_inproc/Qwen-Qwen3-8B-")
    assert "kvprov_engine_hash_seed '7' (host a: '0')" in p and "share no KV" in p
    # SGLang keeps a directory per instance; a local disk is no shared volume
    assert found(fleet({"a": NFS, "b": {**NFS, "kvprov_engine_hash_seed": 7}})) == []
    local = {**inproc, "kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none"}
    assert found(fleet({"a": local, "b": {**local, "kvprov_engine_hash_seed": 7}})) == []
    # a server, an export or a seed only Ansible knows (a template) is not compared
    for unknown in ({"kvprov_storage_server": "{{ lif }}"}, {"kvprov_storage_export": "{{ junction }}"}):
        assert found(fleet({"a": {**inproc, **unknown}, "b": {**inproc, "kvprov_engine_hash_seed": 7, **unknown}})) == []
    assert found(fleet({"a": inproc, "b": {**inproc, "kvprov_engine_hash_seed": "{{ seed }}"}})) == []
    # a host left out does not end the comparison of the others
    assert len(found(fleet({"s": NFS, "a": inproc, "b": {**inproc, "kvprov_engine_hash_seed": 7}}))) == 1


# ---------------------------------------------------------------------------- rollout settings

def test_rollout_settings_are_one_value_for_the_run():
    assert found(fleet({"a": {**NFS, "kvprov_deploy_max_fail_percentage": 10}, "b": NFS})) == [
        "error b kvprov_deploy_max_fail_percentage: 100 differs from host a's 10: a rollout setting is one value for "
        "the whole run; set it for all GPU nodes (e.g. in group_vars/gpu_nodes)"]


# ---------------------------------------------------------------------------- storage dirs

def test_storage_dirs_are_checked_per_instance_past_one_the_setting_rules_report():
    instances = [{"name": "Bad Name", "port": 8000}, {"name": "rel", "port": 8001, "storage_dir": "kv"},
                 {"name": "off", "port": 8002, "storage_dir": "/var/tmp/kv"}]
    assert [line.split(": ")[1] for line in found(fleet({"a": {**NFS, "kvprov_engine_instances": instances}}))] == [
        'instance off', "instance 1", "instance rel"]  # sorted by message: the file gives no lines here


def test_an_engine_without_a_kv_tier_has_no_storage_dir_to_check():
    instances = [{"name": "main", "port": 8000, "storage_dir": "/var/tmp/kv"}]
    assert found(fleet({"a": {**NFS, "kvprov_engine": "vllm_baseline", "kvprov_engine_instances": instances}})) == [
        "warning a kvprov_engine_instances: instance main: engine vllm_baseline has no KV tier and never reads "
        "storage_dir: it has no effect; remove it"]


def test_no_storage_dirs_are_judged_under_a_mount_point_that_is_wrong():
    instances = [{"name": "main", "port": 8000, "storage_dir": "/"}]
    assert found(fleet({"a": {**NFS, "kvprov_storage_mount_point": "/", "kvprov_engine_instances": instances}})) == [
        'error a kvprov_storage_mount_point: "/" must be a plain absolute path other than / (letters, digits, _ . / - '
        "only), e.g. /mnt/kvcache"]
    assert found(fleet({"a": {**NFS, "kvprov_storage_mount_point": 5, "kvprov_engine_instances": instances}})) == [
        "error a kvprov_storage_mount_point: expected a string, got the number 5"]


def test_a_server_or_export_only_ansible_knows_is_one_unknown_volume():
    view = check.HostView(check.host_from_values("a", {"kvprov_storage_server": "{{ lif }}",
                                                       "kvprov_storage_export": "{{ junction }}"}, DEFAULTS), SPECS)
    [d] = check.storage_dirs(view)
    assert (d.volume, d.export, d.volume_path, d.path) == (("nfs", ""), "/", "/a/main", "/mnt/kvcache/a/main")


def test_an_export_of_the_whole_server_names_the_same_server_paths():
    """Export / and export /kv of one server: /mnt/kvcache/kv/a under the one is /mnt/kvcache/a under the other."""
    a = {**NFS, "kvprov_storage_export": "/", "kvprov_engine_instances": [
        {"name": "m", "port": 8000, "storage_dir": "/mnt/kvcache/kv/a"}]}
    b = {**NFS, "kvprov_storage_export": "/kv", "kvprov_engine_instances": [
        {"name": "m", "port": 8000, "storage_dir": "/mnt/kvcache/a"}]}
    [line] = found(fleet({"a": a, "b": b}))
    assert line.startswith("error b kvprov_engine_instances: instance m: storage dir /mnt/kvcache/a is also host a "
                           "instance m's storage dir on 10.0.0.5:/: NIXL's clear() would wipe the other's files")


def test_nested_storage_dirs_on_one_volume_clash_and_siblings_do_not():
    def dirs(*paths: str) -> list[str]:
        gpu = {f"h{i}": {**NFS, "kvprov_engine_instances": [{"name": "m", "port": 8000, "storage_dir": p}]}
               for i, p in enumerate(paths)}
        return [line.split(": storage dir ")[1].split(" on ")[0] for line in found(fleet(gpu))]

    assert dirs("/mnt/kvcache/a", "/mnt/kvcache/a/b", "/mnt/kvcache/ab") == [
        "/mnt/kvcache/a/b lies inside host h0 instance m's storage dir /mnt/kvcache/a"]
    # compared by path components: x-y sorts between x and x/y as a string, not as a path
    assert dirs("/mnt/kvcache/x", "/mnt/kvcache/x-y", "/mnt/kvcache/x/y") == [
        "/mnt/kvcache/x/y lies inside host h0 instance m's storage dir /mnt/kvcache/x"]


# ---------------------------------------------------------------------------- storage systems

def test_what_each_kind_of_storage_system_needs():
    assert found(fleet({"g": NFS}, {"s": {"kvprov_storage_system": "ontap", "kvprov_storage_svm": "svm1"}})) == [
        "error s kvprov_storage_credentials_file: not set, but an ONTAP system needs it: a root-only file on this "
        "controller with username= and password= lines"]
    assert found(fleet({"g": NFS}, {"s": {"kvprov_storage_system": "linux",
                                          "kvprov_storage_credentials_file": "/etc/none"}})) == [
        'error s kvprov_storage_credentials_file: "/etc/none" cannot be opened on this controller: no such file or '
        "directory",
        "warning s kvprov_storage_credentials_file: has no meaning for a Linux server (reached over ssh)"]


def test_storage_variables_of_group_all_reach_both_sides_unwarned():
    assert found(fleet({"g": NFS}, {"s": {"kvprov_storage_system": "linux"}},
                       all_vars={"kvprov_storage_min_free_percent": 5})) == []


def test_storage_system_variables_have_types_and_ranges():
    values = {"kvprov_storage_system": "linux", "kvprov_storage_svm": 5, "kvprov_storage_credentials_file": 5,
              "kvprov_storage_ca_bundle": 5, "kvprov_storage_api_port": "x", "kvprov_storage_api_timeout": "x",
              "kvprov_storage_data_addresses": ["10.0.0.1", 5], "kvprov_storage_min_free_percent": "x",
              "kvprov_storage_min_free_inodes_percent": "x"}
    assert sorted(found(fleet({"g": NFS}, {"s": values}))) == [
        'error s kvprov_storage_api_port: expected an integer, got the string "x"',
        'error s kvprov_storage_api_timeout: expected an integer, got the string "x"',
        "error s kvprov_storage_ca_bundle: expected a string, got the number 5",
        "error s kvprov_storage_credentials_file: expected a string, got the number 5",
        "error s kvprov_storage_data_addresses: item 2: expected a string, got the number 5",
        'error s kvprov_storage_min_free_inodes_percent: expected a number, got the string "x"',
        'error s kvprov_storage_min_free_percent: expected a number, got the string "x"',
        "error s kvprov_storage_svm: expected a string, got the number 5"]
    values = {"kvprov_storage_system": "linux", "kvprov_storage_api_timeout": 0, "kvprov_storage_data_addresses":
              ["10.0.0.1", "a b"], "kvprov_storage_min_free_inodes_percent": 100, "kvprov_storage_min_free_percent": 0}
    assert sorted(found(fleet({"g": {**NFS, "kvprov_storage_client_address": "x y"}}, {"s": values}))) == [
        'error g kvprov_storage_client_address: "x y" is not an IP address or a DNS name',
        "error s kvprov_storage_api_timeout: 0 is out of range: must be >= 1 (seconds per request)",
        'error s kvprov_storage_data_addresses: item 2: "a b" is not an IP address or a DNS name',
        "error s kvprov_storage_min_free_inodes_percent: must be a percentage from 0 to under 100, got 100"]
    assert found(fleet({"g": NFS}, {"s": {"kvprov_storage_system": "linux", "kvprov_storage_api_timeout": 1}})) == []


# ---------------------------------------------------------------------------- output

def problem(file: str | None, line: int | None, host: str | None, message: str = "m", severity: str = "error"):
    return Problem(file, line, host, "kvprov_x", message, severity)


def test_problems_come_sorted_by_file_line_host_and_message():
    inv = fleet({"g": NFS})
    inv.issues = [problem("b.yml", 2, "B"), problem("b.yml", 2, None), problem("b.yml", 1, "h"),
                  problem("b.yml", None, "h"), problem("/a.yml", 9, "h", "z"), problem(None, None, "h"),
                  problem("/a.yml", 9, "h", "a")]
    assert [(p.file, p.line, p.host, p.message) for p in check.check(inv, SPECS)] == [
        (None, None, "h", "m"), ("/a.yml", 9, "h", "a"), ("/a.yml", 9, "h", "z"), ("b.yml", None, "h", "m"),
        ("b.yml", 1, "h", "m"), ("b.yml", 2, None, "m"), ("b.yml", 2, "B", "m")]


def test_one_line_per_problem_naming_up_to_five_hosts():
    def label(n: int) -> str:
        return check.format_lines([problem("inv.yml", 3, f"h{i}") for i in range(n)])[0].split(": kvprov_x")[0]

    assert label(1) == "inv.yml:3: host h0"
    assert label(5) == "inv.yml:3: hosts h0, h1, h2, h3, h4"
    assert label(7) == "inv.yml:3: hosts h0, h1, h2, h3, h4 and 2 more"


def test_the_summary_counts_errors_and_warnings():
    problems = [problem("f", 1, "h"), problem("f", 2, "h", severity="warning"), problem("f", 3, "h", severity="warning")]
    assert check.summary("inv.yml", ["h", "i"], problems) == (
        "inv.yml: 2 host(s) checked, 1 error(s), 2 warning(s): fix the errors before deploying")
    assert check.summary("inv.yml", ["h"], problems[1:]) == "inv.yml: 1 host(s) checked, 0 error(s), 2 warning(s): OK"


def test_require_valid_returns_the_hosts_or_stops_before_any_host_and_check_prints_indented_json(tmp_path, capsys):
    good = tmp_path / "good.yml"
    good.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu1:\n"
                    "          kvprov_storage_server: 10.0.0.5\n")
    assert check.require_valid(str(good)) == ["gpu1"]
    parser = argparse.ArgumentParser()
    check.add_parser(parser.add_subparsers())
    args = parser.parse_args(["check", str(good), "--json"])  # no FILE (or -): stdout
    assert args.func(args) == 0
    assert capsys.readouterr().out == '{\n  "ok": true,\n  "hosts": [\n    "gpu1"\n  ],\n  "problems": [],\n  "namespaces": []\n}\n'
    args = parser.parse_args(["check", "--json", str(tmp_path / "check.json"), str(good)])  # --json FILE
    assert args.func(args) == 0
    assert json.loads((tmp_path / "check.json").read_text())["hosts"] == ["gpu1"]
    assert "0 error(s)" in capsys.readouterr().out  # and the readable summary
    bad = tmp_path / "bad.yml"
    bad.write_text(good.read_text().replace("10.0.0.5", "10.0.0.5:/kv"))
    with pytest.raises(KvprovError) as e:
        check.require_valid(str(bad))
    assert e.value.exit_code == EXIT_USAGE
    assert str(e.value) == (f"{bad}: 1 host(s) checked, 1 error(s), 0 warning(s): fix the errors before deploying; "
                            "no host was contacted")
    assert capsys.readouterr().err.startswith(f"{bad}:6: host gpu1: kvprov_storage_server: ")


def test_cmd_check_with_a_limit_reports_only_those_hosts_and_writes_no_json_through_a_link(tmp_path, capsys):
    import yaml

    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu1": {**NFS}, "gpu2": {**NFS, "kvprov_engine_prot": 1}}}}}}))

    def args(**kw):
        return argparse.Namespace(**{"inventory": str(inv), "more_inventory": [], "inventory_required": True,
                                     "ansible_configured": True, "limit": None, "json": None, **kw})

    assert check.cmd_check(args(json="-")) == EXIT_USAGE
    every = json.loads(capsys.readouterr().out)
    assert every["hosts"] == ["gpu1", "gpu2"] and {p["host"] for p in every["problems"]} == {"gpu2"}
    assert check.cmd_check(args(limit="gpu1", json="-")) == 0
    only = json.loads(capsys.readouterr().out)
    assert only == {"ok": True, "hosts": ["gpu1"], "problems": [], "namespaces": []}
    out = tmp_path / "out.json"
    assert check.cmd_check(args(limit="gpu2", json=str(out))) == EXIT_USAGE
    written = json.loads(out.read_text())
    assert written["hosts"] == ["gpu2"] and written["problems"] and all(p["host"] == "gpu2" for p in written["problems"])
    assert "gpu2" in capsys.readouterr().out  # the lines and the summary too
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(KvprovError, match=r"^--json \S+ is a symbolic link"):
        check.cmd_check(args(json=str(link)))
    assert not (tmp_path / "elsewhere.json").exists()


def test_storage_dirs_only_of_valid_first_names_and_a_local_clash_says_so():
    def one(*instances, **values):
        return found(fleet({"a": {**NFS, **values, "kvprov_engine_instances": list(instances)}}))

    d = "/mnt/kvcache/d"
    assert one({"name": "x", "port": 8000}, {"name": "x", "port": 8001}) == [
        'error a kvprov_engine_instances: instance 2: name "x" is already used by instance 1']
    for bad, shown in (("Bad Name", 'the string "Bad Name"'), (5, "the number 5")):
        assert one({"name": bad, "port": 8000, "storage_dir": d}, {"name": "y", "port": 8001, "storage_dir": d}) == [
            "error a kvprov_engine_instances: instance 1: name must be lower-case letters, digits, _ or - (it names "
            f"the unit and the storage directory), got {shown}"]
    [clash] = one({"name": "x", "port": 8000, "storage_dir": d}, {"name": "y", "port": 8001, "storage_dir": d},
                  kvprov_storage_profile="local", kvprov_storage_pnfs_layout="none")
    assert clash.startswith("error a kvprov_engine_instances: instance y: storage dir /mnt/kvcache/d is also host a "
                            "instance x's storage dir on the local disk: NIXL's clear() would wipe the other's files")


def test_hosts_of_one_model_in_other_namespaces_are_named_per_value_and_across_data_lifs():
    from tests.unit.test_namespace import VLLM

    a = {**VLLM, "kvprov_engine_extra_args": ["--kv-cache-dtype", "fp8"]}
    [p] = found(fleet({"a": a, "b": {**VLLM}}))  # a flag only one host gives
    assert p.startswith("warning b kvprov_engine_namespace") and "arg --kv-cache-dtype '(not given)' (host a: 'fp8')" in p
    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_vllm_offload_block_size": "{{ bs }}"}})) == []  # a template
    two = [{"name": "m1", "port": 8000}, {"name": "m2", "port": 8001}]  # a's own two instances: one namespace
    [block] = found(fleet({"a": {**VLLM, "kvprov_engine_instances": two}, "b": {**VLLM, "kvprov_vllm_offload_block_size": 32}}))
    assert "kvprov_vllm_offload_block_size '32' (host a: '256')" in block
    # another LIF of the SVM: the same volume, the same finding
    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_storage_server": "10.0.0.6",
                                         "kvprov_vllm_offload_block_size": 32}})) == [block]


# ---------------------------------------------------------------------------- namespaces (#37)

def test_check_namespaces_lists_each_namespace_its_instances_and_keys_and_a_limit_keeps_its_own(tmp_path, capsys):
    import yaml

    from tests.unit.test_namespace import VLLM

    inv = tmp_path / "inv.yml"
    two = [{"name": "m1", "port": 8000}, {"name": "m2", "port": 8001}]
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "a": {**VLLM, "kvprov_engine_instances": two}, "b": {**VLLM},
        "c": {**VLLM, "kvprov_vllm_dtype": "float16"},
        "s": {**NFS}}}}}}))  # SGLang: a directory per instance, no namespace

    def args(**kw):
        return argparse.Namespace(**{"inventory": str(inv), "more_inventory": [], "inventory_required": True,
                                     "ansible_configured": True, "limit": None, "json": None, "namespaces": False,
                                     **kw})

    assert check.cmd_check(args(json="-")) == 0
    found = json.loads(capsys.readouterr().out)["namespaces"]
    assert [(n["engine"], n["instances"]) for n in found] == [("vllm_offload", ["a/m1", "a/m2", "b/main"]),
                                                              ("vllm_offload", ["c/main"])]
    first, other = found
    assert re.fullmatch("/mnt/kvcache/kv/vllm_offload/Qwen-Qwen3-8B-[0-9a-f]{12}", first["path"])
    assert first["path"] != other["path"] and (first["keys"]["kvprov_vllm_dtype"], other["keys"]["kvprov_vllm_dtype"]) \
        == ("auto", "float16")
    assert first["keys"]["kvprov_engine_model_revision"] == "0123abc" and first["keys"]["engine"] == "vllm_offload"
    assert check.cmd_check(args(limit="c", json="-")) == 0
    assert [n["instances"] for n in json.loads(capsys.readouterr().out)["namespaces"]] == [["c/main"]]
    assert check.cmd_check(args(namespaces=True)) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"namespace {first['path']} (vllm_offload): a/m1, a/m2, b/main" in out
    assert "    kvprov_vllm_dtype = 'float16'" in out and "    engine = 'vllm_offload'" not in out
    assert check.cmd_check(args()) == 0 and "\nnamespace /" not in capsys.readouterr().out  # only when asked
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"s": {**NFS}}}}}}))
    assert check.cmd_check(args(namespaces=True)) == 0
    assert "no shared namespace" in capsys.readouterr().out


def test_the_owner_must_agree_within_a_namespace_and_where_each_is_set_is_named():
    from tests.unit.test_namespace import VLLM

    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_engine_uid": 2002}})) == [
        "error b kvprov_engine_uid: 2002 differs from host a's 2001, which shares the namespace "
        + dirs_of_one(VLLM) + " on 10.0.0.5:/kvcache: the engine user's uid owns the namespace's files, so one host "
        "could not read or evict the other's; make them equal"]
    a = {k: v for k, v in VLLM.items() if k != "kvprov_engine_uid"}  # a's uid a role default (0): refused on NFS
    problems = found(fleet({"a": a, "b": {**a, "kvprov_engine_uid": 2002}}))
    assert "error b kvprov_engine_uid: 2002 differs from host a's 0 (a role default), which shares" in "".join(problems)
    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_engine_uid": "{{ uid }}"}})) == []  # only Ansible knows it


def dirs_of_one(values: dict) -> str:
    from tests.unit.test_namespace import dirs_of

    [d] = dirs_of(values)
    return d


def test_templated_keying_arguments_or_environment_are_not_compared_and_own_storage_dirs_skip_the_rules():
    from tests.unit.test_namespace import VLLM

    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_engine_extra_args": "{{ args }}"}})) == []
    assert found(fleet({"a": VLLM, "b": {**VLLM, "kvprov_engine_environment": "{{ env }}"}})) == []
    # a storage_dir of its own: the user's directory, not kvprov's namespace; its rules do not apply
    own = [{"name": "main", "port": 8000, "storage_dir": "/mnt/kvcache/mine"}]
    assert found(fleet({"a": {**VLLM, "kvprov_engine_uid": 0, "kvprov_engine_model_revision": "",
                              "kvprov_engine_instances": own}})) == []


def test_the_old_names_of_the_model_and_the_arguments_key_the_namespace_too():
    from tests.unit.test_namespace import VLLM, dirs_of

    base = {k: v for k, v in VLLM.items() if k != "kvprov_engine_model_path"}
    assert dirs_of({**base, "kvprov_sglang_model_path": "/models/x"}) == dirs_of({**base, "kvprov_engine_model_path":
                                                                                   "/models/x"})
    assert dirs_of({**VLLM, "kvprov_sglang_extra_args": ["--kv-cache-dtype", "fp8"]}) == dirs_of(
        {**VLLM, "kvprov_engine_extra_args": ["--kv-cache-dtype", "fp8"]}) != dirs_of(VLLM)
    p, renamed = found(fleet({"a": {**VLLM, "kvprov_sglang_extra_args": ["--config", "x.yaml"]}}))
    assert p.startswith("error a kvprov_sglang_extra_args: --config on the shared namespace")
    assert renamed.startswith("warning a kvprov_sglang_extra_args: renamed kvprov_engine_extra_args")
