"""Inventory strings of typed variables are taken as Ansible's argument specs take them (#25):
"262144" for an int, "yes" for a bool, "0.5" for a float -- what dynamic inventories, quoted
YAML and -e key=value give. kvprov check judges the converted value; the roles' preflight sets
it as a fact so every template reads the typed value; the desired state (render, audit) does
the same. Ansible's own validator is the oracle."""

import os
import subprocess
import textwrap

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from kvprov import check
from kvprov.check.values import VarSpec
from tests.conftest import ROOT, kvprov

# (spec type, value): Ansible converts every one of these
CONVERTED = [("int", "262144"), ("int", " 8 "), ("int", "-3"), ("int", 2.0), ("int", "1e3"), ("int", "2.0"),
             ("bool", "yes"), ("bool", "No"), ("bool", "off"), ("bool", "1"), ("bool", "0"), ("bool", "t"),
             ("float", "0.5"), ("float", "2"), ("float", " 1e-3 ")]
# where kvprov is stricter than Ansible (values.convert says why), and what neither converts
KEPT = [("int", True), ("int", "eight"), ("int", 2.5), ("int", "2.5"), ("float", True), ("float", "inf"),
        ("float", "nan"), ("float", "x"), ("bool", "maybe"), ("bool", 1), ("str", 7), ("str", 1.1),
        ("list", "a,b"), ("int", "{{ 8 }}"), ("int", None)]


def ansible_converts(type_, value):
    result = ArgumentSpecValidator({"x": {"type": type_}}).validate({"x": value})
    return None if result.error_messages else result.validated_parameters["x"]


@pytest.mark.parametrize("type_,value", CONVERTED)
def test_what_ansible_converts_is_converted_to_the_same_value(type_, value):
    converted = check.typed(value, VarSpec("kvprov_x", "r", type_))
    expected = ansible_converts(type_, value)
    assert expected is not None
    assert converted == expected and type(converted) is type(expected)
    assert check.type_error(converted, type_) is None


@pytest.mark.parametrize("type_,value", KEPT)
def test_other_values_are_kept_for_the_type_rules_to_judge(type_, value):
    assert check.typed(value, VarSpec("kvprov_x", "r", type_)) is value


def test_list_elements_convert_and_an_unchanged_list_is_the_same_object():
    spec = VarSpec("kvprov_x", "r", "list", "int")
    assert check.typed(["1", 2, "x"], spec) == [1, 2, "x"]
    same = [1, 2]
    assert check.typed(same, spec) is same


STRINGS = """\
    kvprov_storage_nconnect: "8"
    kvprov_gds_allow_compat_mode: "no"
    kvprov_gds_use_poll_mode: "yes"
    kvprov_vllm_offload_block_size: "128"
    kvprov_vllm_gpu_memory_utilization: "0.85"
    kvprov_engine_evict_high_percent: "90"
    kvprov_vllm_offload_cpu_bytes_to_use: "1073741824"
"""
TYPED = """\
    kvprov_storage_nconnect: 8
    kvprov_gds_allow_compat_mode: false
    kvprov_gds_use_poll_mode: true
    kvprov_vllm_offload_block_size: 128
    kvprov_vllm_gpu_memory_utilization: 0.85
    kvprov_engine_evict_high_percent: 90
    kvprov_vllm_offload_cpu_bytes_to_use: 1073741824
"""


def inventory(path, values: str):
    path.write_text(textwrap.dedent("""\
        all:
          children:
            gpu_nodes:
              vars:
                kvprov_storage_server: 10.0.0.5
                kvprov_gds_mode: required
                kvprov_engine: vllm_offload
                kvprov_engine_model_path: /models/m
                kvprov_engine_uid: 2001
                kvprov_engine_install: false
        """) + textwrap.indent(textwrap.dedent(values), " " * 8) + "      hosts:\n        gpu1: {}\n")
    return path


def rendered(out):
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}


def test_strings_check_clean_and_render_the_same_files_as_typed_values(tmp_path):
    strings, typed = inventory(tmp_path / "strings.yml", STRINGS), inventory(tmp_path / "typed.yml", TYPED)
    r = kvprov("check", str(strings))
    assert r.returncode == 0, r.stdout + r.stderr
    outs = {}
    for name, argv in {"typed": [str(typed)], "strings": [str(strings)],
                       # -e key=value gives strings too; kvprov converts them before Ansible sees them
                       "extra": [str(typed), "-e", "kvprov_storage_nconnect=8 kvprov_gds_use_poll_mode=yes"]}.items():
        r = kvprov("render", *argv, "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stdout + r.stderr
        outs[name] = rendered(tmp_path / name)
    cufile = next(text for path, text in outs["typed"].items() if path.endswith("cufile.json"))
    assert '"allow_compat_mode": false' in cufile and '"use_poll_mode": true' in cufile  # the values took
    assert outs["strings"] == outs["typed"]
    assert outs["extra"] == outs["typed"]


def test_the_roles_preflight_sets_converted_values_and_refuses_an_extra_var_string(tmp_path):
    """ansible-playbook with the collection alone, as a user runs it: the preflight role leaves
    the play an int, and a -e key=value string (which outranks facts) is named with its fix."""
    inv = tmp_path / "inv.yml"
    inv.write_text(textwrap.dedent(f"""\
        all:
          children:
            gpu_nodes:
              hosts:
                gpu1:
                  ansible_connection: local
                  ansible_python_interpreter: {os.path.realpath('/usr/bin/python3')}
                  kvprov_storage_server: 10.0.0.5
                  kvprov_engine_install: false
                  kvprov_storage_nconnect: "8"
                  kvprov_gds_allow_compat_mode: "no"
        """))
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - hosts: gpu_nodes
          gather_facts: false
          tasks:
            - ansible.builtin.import_role:
                name: kvprov.kvprov.preflight
            - ansible.builtin.assert:
                that:
                  - kvprov_storage_nconnect is integer and kvprov_storage_nconnect == 8
                  - kvprov_gds_allow_compat_mode is boolean and not kvprov_gds_allow_compat_mode
        """))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"), "ANSIBLE_NOCOLOR": "1"}
    run = ["ansible-playbook", "-i", str(inv), str(play)]
    r = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(run + ["-e", "kvprov_storage_nconnect=8"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert r.returncode != 0
    assert ("kvprov_storage_nconnect is the string \"8\" from -e key=value, which outranks the conversion: give it "
            "typed, -e '{\"kvprov_storage_nconnect\": 8}'") in r.stdout
