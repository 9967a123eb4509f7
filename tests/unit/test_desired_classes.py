"""Each distinct desired state is templated once a run (issue #28): the class key holds every
input but the host's identity (each changed alone changes it), the probes cover the identity,
and the states kvprov.desired derives equal the host-by-host ones."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kvprov import desired, desired_classes as dc, runner
from kvprov.specs import read_specs
from kvprov.inventory import roles_dir
from kvprov.validate.collect import CAPTURE_TASK
from tests.conftest import ROOT

BASE = {"inventory_hostname": "gpu-a1", "inventory_hostname_short": "gpu-a1", "ansible_host": "10.0.0.1",
        "ansible_user": "root", "group_names": ["gpu_nodes", "rack_a"], "inventory_file": "/inv/hosts.yml",
        "inventory_dir": "/inv", "ansible_facts": {}, "kvprov_engine": "sglang_hicache"}
SPECS = sorted(read_specs(roles_dir()))


def other(value):
    """A value different from `value`."""
    return [value] if value is not None else "x"


def test_the_specs_are_read():
    assert len(SPECS) > 100 and "kvprov_storage_server" in SPECS and "kvprov_lmcache_mp_l2_type" in SPECS


@pytest.mark.parametrize("name", [*SPECS, "group_names", "ansible_facts", "inventory_file", "inventory_dir",
                                  "a_users_own_variable"])
def test_every_input_but_the_identity_changes_the_key(name):
    changed = {**BASE, name: other(BASE.get(name))}
    assert dc.class_key(changed) != dc.class_key(BASE)


def test_a_value_of_another_type_changes_the_key():
    assert dc.class_key({**BASE, "a_users_own_variable": 1}) != dc.class_key({**BASE, "a_users_own_variable": "1"})


@pytest.mark.parametrize("name", ["inventory_hostname", "inventory_hostname_short", "ansible_host", "ansible_port",
                                  "ansible_user", "ansible_ssh_private_key_file", "ansible_become_password",
                                  "ansible_python_interpreter", "ansible_connection"])
def test_the_identity_alone_leaves_the_key(name):
    assert dc.is_identity(name)
    assert dc.class_key({**BASE, name: other(BASE.get(name))}) == dc.class_key(BASE)


def test_a_value_json_cannot_write_keys_by_its_type_and_text():
    class Secret:
        def __str__(self):
            return "s3cret"

    assert dc.class_key({**BASE, "v": Secret()}) == dc.class_key({**BASE, "v": Secret()})
    assert dc.class_key({**BASE, "v": Secret()}) != dc.class_key({**BASE, "v": "s3cret"})


def hosts(*specs: tuple[str, dict]) -> dict[str, dict]:
    return {name: {**BASE, "inventory_hostname": name, "inventory_hostname_short": name, **extra}
            for name, extra in specs}


def test_the_plan_probes_two_hosts_of_a_class_differing_in_every_varying_identity_value():
    variables = hosts(("a1", {"ansible_host": "10.0.0.1"}), ("a2", {"ansible_host": "10.0.0.2"}),
                      ("a3", {"ansible_host": "10.0.0.3", "ansible_port": 2222}),
                      ("b1", {"ansible_host": "10.0.0.4", "kvprov_engine": "lmcache_mp"}))
    assert [(c.members, c.probes, c.rest) for c in dc.plan(variables)] == [
        (["a1", "a2", "a3"], ["a1", "a3"], ["a2"]), (["b1"], ["b1"], [])]


def test_a_class_whose_probes_cannot_differ_in_every_varying_identity_value_is_templated_host_by_host():
    variables = hosts(("a1", {"ansible_host": "h", "ansible_port": 22}), ("a2", {"ansible_host": "h2", "ansible_port": 22}),
                      ("a3", {"ansible_host": "h", "ansible_port": 2222}))
    [c] = dc.plan(variables)
    assert c.probes == ["a1", "a2", "a3"] and c.rest == []
    assert dc.spread(c, {}) == ({}, [])


def state(name: str, address: str = "10.0.0.1") -> dict:
    return {"host": name, "engine": {"instances": [{"storage_dir": f"/mnt/kv/{name}/main", "port": 8000}]},
            "dirs": {f"/mnt/kv/{name}/main": {"mode": "0750"}}, "files": {"/etc/x": {"content": f"API={address}\n"}}}


def test_renamed_replaces_the_name_in_keys_and_values_and_shares_nothing():
    old = state("gpu-a1")
    new = dc.renamed(old, "gpu-a1", "gpu-a7")
    assert new == state("gpu-a7")
    new["engine"]["instances"][0]["port"] = 1
    assert old == state("gpu-a1")


def test_the_other_hosts_get_the_first_probes_state_renamed_when_the_second_probe_is_it_renamed():
    c = dc.HostClass(["gpu-a1", "gpu-a2", "gpu-a10", "GPU_B3"], ["gpu-a1", "gpu-a2"])
    derived, left = dc.spread(c, {"gpu-a1": state("gpu-a1"), "gpu-a2": state("gpu-a2")})
    assert derived == {"gpu-a10": state("gpu-a10")}
    assert left == ["GPU_B3"]  # upper case and "_": no probe tells how a template escapes them


def test_probes_whose_states_differ_otherwise_leave_every_other_host_to_be_templated():
    c = dc.HostClass(["a1", "a2", "a3"], ["a1", "a2"])
    assert dc.spread(c, {"a1": state("a1", "10.0.0.1"), "a2": state("a2", "10.0.0.2")}) == ({}, ["a3"])
    # the first probe's name also stands for something else (its engine instance's name)
    same = {"host": "main", "dirs": {"/mnt/kv/main/main": {}}}
    assert dc.spread(c, {"a1": {**same, "host": "a1"}, "a2": {**same, "host": "a2"}}) == (
        {"a3": {**same, "host": "a3"}}, [])
    c = dc.HostClass(["main", "mainx", "m3"], ["main", "mainx"])
    assert dc.spread(c, {"main": same, "mainx": {"host": "mainx", "dirs": {"/mnt/kv/mainx/main": {}}}}) == (
        {}, ["m3"])


# Every use of a host's identity in what desired.yml templates, reviewed: the name, as text,
# nothing else (a new use, or one that is not text, needs kvprov.desired_classes reviewed).
IDENTITY_USES = {
    ("playbooks/tasks/desired.yml", 'host: "{{ inventory_hostname }}"'),
    ("roles/engine/vars/main.yml", "kvprov_storage_mount_point ~ '/' ~ inventory_hostname ~ '/' ~ i.name),"),
    ("roles/kvcache_bench/defaults/main.yml", 'kvprov_bench_dir: "{{ kvprov_storage_mount_point }}/{{ inventory_hostname }}"'),
    ("roles/lmcache_inproc/vars/main.yml",
     "'extra_config': {'fs_connector_relative_tmp_dir': '.tmp-' ~ inventory_hostname ~ '-' ~ i.name}}"),
    ("roles/lmcache_mp/vars/main.yml", '_kvprov_lmcache_mp_tmp_dir: ".tmp-{{ inventory_hostname }}-"'),
}


def test_every_use_of_the_identity_in_the_roles_is_the_name_as_text():
    word = re.compile(r"\b(?:inventory_hostname\w*|ansible_\w+)\b")
    files = [p for kind in ("vars", "defaults", "templates") for p in (ROOT / "roles").glob(f"*/{kind}/**/*")
             if p.is_file() and not p.is_symlink() and not p.parent.is_symlink()]
    uses = {(str(p.relative_to(ROOT)), line.strip())
            for p in [*files, ROOT / "playbooks/tasks/desired.yml"]
            for line in p.read_text().splitlines()
            if not line.lstrip().startswith("#") and any(dc.is_identity(w) for w in word.findall(line))}
    assert uses == IDENTITY_USES


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


# sglang: four hosts derived from two probes (SG_B4's kinds of character are the probes' own
# but for upper case and "_": templated); one host overriding a value (its own class);
# lmcache_mp (the name in its tmp directory); a class whose template reads ansible_host
INVENTORY = {"all": {
    "vars": {"ansible_connection": "local", "kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
             "kvprov_storage_mount_point": "/srv/kv", "kvprov_engine_install": False,
             "kvprov_engine_model_revision": "0123abc"},
    "children": {"gpu_nodes": {"children": {
        "sglang": {"hosts": {"sg-a1": {"ansible_host": "10.0.0.1"}, "sg-a2": {"ansible_host": "10.0.0.2"},
                             "sg-a3": {"ansible_host": "10.0.0.3"}, "SG_B4": {"ansible_host": "10.0.0.4"},
                             "sg-a5": {"ansible_host": "10.0.0.5", "kvprov_sglang_hicache_size": 50}}},
        "lmcache": {"vars": {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "fs_native"},
                    "hosts": {"lm-1": {"ansible_host": "10.0.1.1"}, "lm-2": {"ansible_host": "10.0.1.2"},
                              "lm-3": {"ansible_host": "10.0.1.3"}}},
        "addressed": {"vars": {"kvprov_engine": "vllm_offload", "kvprov_vllm_offload_cpu_bytes_to_use": 107374182400,
                               "kvprov_engine_served_model_name": "m-{{ ansible_host }}"},
                      "hosts": {"vo-1": {"ansible_host": "10.0.2.1"}, "vo-2": {"ansible_host": "10.0.2.2"},
                                "vo-3": {"ansible_host": "10.0.2.3"}}}}}}}}


def test_the_derived_states_are_the_host_by_host_ones(tmp_path, monkeypatch):
    """Real Ansible runs: desired.load templates only the probes and the hosts it cannot derive
    a state for, and gives what templating every host gives."""
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    inv = str(write(tmp_path / "inv.yml", INVENTORY))
    templated = []
    template = desired._template
    monkeypatch.setattr(desired, "_template", lambda inv, hosts: templated.append(hosts) or template(inv, hosts))
    states = desired.load(inv)
    assert templated == [["sg-a1", "sg-a2", "sg-a5", "lm-1", "lm-2", "vo-1", "vo-2"], ["SG_B4", "vo-3"]]
    every = runner.run("desired.yml", inv, name="desired")
    assert states == dict(sorted(every.desired.items()))
    assert "/srv/kv/sg-a3/main" in states["sg-a3"]["dirs"] and ".tmp-lm-3-" in json.dumps(states["lm-3"])
    assert "m-10.0.2.3" in json.dumps(states["vo-3"])


def test_collect_probes_with_the_desired_state_kvprov_wrote_or_computes_each_itself(tmp_path, monkeypatch):
    """playbooks/collect.yml: given kvprov_desired_dir, the collector gets each host's file there
    (a marker shows it was read) and the playbook computes none; without it, the first play
    computes each host's state, which the run returns and the collector gets as the list of files."""
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    inv = write(tmp_path / "inv.yml", {"gpu_nodes": {"hosts": {name: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "kvprov_storage_profile": "local",
        "kvprov_storage_pnfs_layout": "none", "kvprov_storage_mount_point": str(tmp_path / "kv"),
        "kvprov_engine_install": False} for name in ("one", "two")}}})
    states = desired.load(str(inv))
    (tmp_path / "states").mkdir()
    for h, state in states.items():  # the host name the collector reports marks the file as read
        write(tmp_path / "states" / desired.file_name(h), {**desired.collector_view(state), "host": f"{h} as written"})
    result = runner.run("collect.yml", str(inv), name="collect", capture=CAPTURE_TASK,
                        extravars={runner.DESIRED_DIR: str(tmp_path / "states"), "kvprov_collect_probes": False})
    assert {h: seen(r)[0] for h, r in result.captured.items()} == {h: f"{h} as written" for h in states}
    assert result.desired == {} and set(result.hosts["one"].__dict__.items()) >= {("ok", 1), ("skipped", 0)}
    # without the directory (a fleet with nothing to derive): every host computes its own
    alone = runner._run("collect.yml", str(inv), name="collect", capture=CAPTURE_TASK,
                        extravars={"kvprov_collect_probes": False}, limit=None, tags=None, check=False, diff=False,
                        stream=None, verbose=False)
    assert alone.desired == states, alone.failures
    assert {h: seen(r) for h, r in alone.captured.items()} == {  # cufile.json: only on a GPU host
        h: (h, sorted(set(s["files"]) - {s["gds"]["cufile_path"]})) for h, s in states.items()}


def seen(captured: dict) -> tuple[str, list[str]]:
    """(the host the collector was told it is, the managed files it was told of) by its capture."""
    meta = json.loads(captured["files"]["collect.json"])
    files = [n[len("files"):] for n in [*captured["files"], *meta["errors"]] if n.startswith("files/")]
    return meta["host"], sorted(set(files) - {"/etc/fstab"})


def test_written_is_private_and_gone_after_the_run(tmp_path, monkeypatch):
    same = {"kvprov_engine": "sglang", "group_names": ["gpu_nodes"]}
    names = ("gpu/1", "gpu/2", "gpu/3")
    monkeypatch.setattr(desired, "host_variables", lambda inventory, limit: {
        h: {**same, "inventory_hostname": h} for h in names})
    states = {h: {"host": h, "files": {"/etc/b": {"content": "secret-ish"}, "/etc/a": {"content": "x"}}} for h in names}
    monkeypatch.setattr(desired, "compute", lambda inventory, limit, classes: (states, []))
    with desired.written("inv.yml") as (directory, given):
        assert given == states and directory.stat().st_mode & 0o777 == 0o700
        assert sorted(p.name for p in directory.iterdir()) == sorted(desired.file_name(h) for h in names)
        path = directory / desired.file_name("gpu/1")
        assert path.stat().st_mode & 0o777 == 0o600
        assert json.loads(path.read_text()) == {"host": "gpu/1", "files": ["/etc/a", "/etc/b"]}
    assert not directory.exists()


def test_nothing_is_written_ahead_when_a_hosts_state_could_not_be_computed(monkeypatch):
    """collect.yml then computes every host's itself, and reports the failure on its host."""
    three = {h: {"kvprov_engine": "sglang", "inventory_hostname": h} for h in ("a", "b", "c")}
    monkeypatch.setattr(desired, "host_variables", lambda inventory, limit: three)
    monkeypatch.setattr(desired, "compute", lambda inventory, limit, classes: (
        {h: {"host": h, "files": {}} for h in ("a", "b")}, []))
    with desired.written("inv.yml") as written:
        assert written is None


def test_nothing_is_written_ahead_when_no_state_could_be_derived(monkeypatch):
    """Two hosts of a class are both probes and hosts of other classes are alone: no state to
    derive, so collect.yml templates each as before, without a desired.yml run of its own."""
    monkeypatch.setattr(desired, "host_variables", lambda inventory, limit: {
        "a": {"kvprov_engine": "sglang", "inventory_hostname": "a"},
        "b": {"kvprov_engine": "sglang", "inventory_hostname": "b"},
        "c": {"kvprov_engine": "vllm", "inventory_hostname": "c"}})
    monkeypatch.setattr(desired, "compute", lambda *a: pytest.fail("templated ahead for nothing"))
    with desired.written("inv.yml") as directory:
        assert directory is None


def test_collect_gets_the_states_written_ahead_only_when_one_is_derived(monkeypatch):
    seen = []
    monkeypatch.setattr(runner, "_run", lambda playbook, inventory, extravars, **kw: seen.append(
        (playbook, dict(extravars or {}))) or runner.RunResult(0, None))
    three = {h: {"kvprov_engine": "sglang", "inventory_hostname": h} for h in ("a", "b", "c")}
    monkeypatch.setattr(desired, "compute", lambda inventory, limit, classes: (
        {h: {"host": h, "files": {}} for h in three}, []))
    monkeypatch.setattr(desired, "host_variables", lambda inventory, limit: three)
    run = desired.run_with_states("collect.yml", "inv.yml", name="collect")
    assert run.desired == {h: {"host": h, "files": {}} for h in three}
    monkeypatch.setattr(desired, "host_variables", lambda inventory, limit: {h: three[h] for h in ("a", "b")})
    desired.run_with_states("collect.yml", "inv.yml", name="collect")
    runner.run("site.yml", "inv.yml", name="deploy")  # the runner itself writes no states
    assert [p for p, _ in seen] == ["collect.yml", "collect.yml", "site.yml"]
    assert set(seen[0][1]) == {runner.DESIRED_DIR} and seen[1][1] == {} and seen[2][1] == {}
