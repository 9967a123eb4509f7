"""The roles' own hygiene: specs match defaults, templates carry ansible_managed, lint."""

import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

SPECS = {p.parent.parent.name: yaml.safe_load(p.read_text())["argument_specs"]
         for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")}
ROLES = sorted(ROOT / "roles" / name for name, spec in SPECS.items() if "main" in spec)  # the roles with tasks


def test_every_role_has_a_spec_and_ansible_doc_shows_every_role():
    assert [r.name for r in ROLES] == ["engine", "gds", "kvcache_bench", "kvcache_mount", "lmcache_inproc", "lmcache_mp",
                                       "nixl", "preflight", "rdma", "sglang_hicache", "vllm", "vllm_baseline",
                                       "vllm_offload"]
    # desired_state only loads variables: documented under an entry point that its import does not validate
    assert sorted(SPECS) == sorted([r.name for r in ROLES] + ["desired_state"])
    assert list(SPECS["desired_state"]) == ["variables"] and SPECS["desired_state"]["variables"]["description"]
    assert all(entry.get("short_description") for spec in SPECS.values() for entry in spec.values())


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.name)
def test_spec_and_defaults_list_the_same_variables(role):
    """Ansible does not apply spec defaults, so defaults/main.yml holds them; the spec shows the same
    values (ansible-doc, AWX): the variables and their defaults kept in step."""
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    spec = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(spec)
    assert {name: opt.get("default", "<none>") for name, opt in spec.items()} == defaults


@pytest.mark.parametrize("template", sorted((ROOT / "roles").glob("*/templates/*.j2")), ids=lambda p: p.name)
def test_templates_say_they_are_managed(template):
    text = template.read_text()
    assert "ansible_managed" in text or template.name == "cufile.json.j2"  # JSON has no comments


@pytest.mark.skipif(shutil.which("ansible-lint") is None, reason="ansible-lint not installed (pip install -e '.[dev]')")
def test_ansible_lint_production_profile_is_clean():
    r = subprocess.run(["ansible-lint", "--nocolor"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.parametrize("role", [r for r in ROLES if r.name != "preflight"], ids=lambda r: r.name)
def test_every_role_runs_the_preflight_first(role):
    """kvprov check's rules on the host (roles/preflight) before the role's own tasks, also for
    a role used alone; Ansible runs the dependency once per host and play."""
    meta = yaml.safe_load((role / "meta/main.yml").read_text())
    assert meta["dependencies"][0] == "kvprov.kvprov.preflight"


def _asserts(node):
    if isinstance(node, dict):
        if "ansible.builtin.assert" in node:
            yield node["ansible.builtin.assert"]
        for v in node.values():
            yield from _asserts(v)
    elif isinstance(node, list):
        for v in node:
            yield from _asserts(v)


@pytest.mark.parametrize("tasks", sorted((ROOT / "roles").glob("*/tasks/*.yml")), ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_no_second_rule_set_in_jinja(tasks):
    """The inventory's values are judged by kvprov check's rules only (the preflight runs them);
    a role asserts only on what it finds on the host."""
    for spec in _asserts(yaml.safe_load(tasks.read_text())):
        that = spec["that"] if isinstance(spec["that"], list) else [spec["that"]]
        assert not [t for t in that if re.search(r"(?<!\w)kvprov_", str(t))], that
