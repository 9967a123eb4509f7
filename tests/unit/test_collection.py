"""The collection kvprov.kvprov (galaxy.yml, docs/collection.md) as a user gets it: built with
ansible-galaxy, installed into a clean directory, its playbooks run by FQCN from outside the
repository with only that directory on the collections path."""

import json
import os
import re
import subprocess
import tomllib

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import kvprov
from kvprov import desired, runner
from tests.conftest import ROOT

PLAYBOOKS = sorted(p.stem for p in (ROOT / "playbooks").glob("*.yml"))
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def clean_env(collections) -> dict:
    """No ANSIBLE_* setting of this checkout's; only `collections` holds kvprov.kvprov."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}


def ansible(args: list[str], collections, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd, env=clean_env(collections))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the clean collections directory, the installed collection's root, a cwd outside the repo)."""
    tmp = tmp_path_factory.mktemp("collection")
    build = ansible(["ansible-galaxy", "collection", "build", "--output-path", str(tmp / "dist"), str(ROOT)],
                    tmp / "none", tmp)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball = tmp / "dist" / f"kvprov-kvprov-{GALAXY['version']}.tar.gz"
    install = ansible(["ansible-galaxy", "collection", "install", "-p", str(tmp / "collections"), str(tarball)],
                      tmp / "none", tmp)
    assert install.returncode == 0, install.stdout + install.stderr
    return tmp / "collections", tmp / "collections/ansible_collections/kvprov/kvprov", tmp


def test_version_and_ansible_range_are_kvprovs():
    assert GALAXY["namespace"] == GALAXY["name"] == "kvprov"
    assert GALAXY["version"] == PYPROJECT["version"] == kvprov.__version__
    pin = next(d for d in PYPROJECT["dependencies"] if d.startswith("ansible-core"))
    runtime = yaml.safe_load((ROOT / "meta/runtime.yml").read_text())
    assert SpecifierSet(runtime["requires_ansible"]) == SpecifierSet(pin.removeprefix("ansible-core"))
    # every role says the same minimum (ansible-doc and Galaxy show it)
    lowest = min(spec.version for spec in SpecifierSet(runtime["requires_ansible"]) if spec.operator == ">=")
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        found = yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"]
        assert Version(found) == Version(lowest), f"{meta}: min_ansible_version {found}, requires_ansible {lowest}"


def test_the_installed_tree_is_roles_playbooks_and_plugins_only(installed):
    _, coll, _ = installed
    top = sorted(p.name for p in coll.iterdir())
    assert top == ["CHANGELOG.md", "FILES.json", "LICENSE", "MANIFEST.json", "README.md", "docs", "meta", "playbooks",
                   "plugins", "roles", "tests"]
    assert [str(p.relative_to(coll)) for p in (coll / "tests").rglob("*")] == ["tests/sanity",
                                                                            "tests/sanity/ignore-2.19.txt"]
    assert sorted(p.name for p in (coll / "roles").iterdir()) == ROLES
    assert sorted(p.stem for p in (coll / "playbooks").glob("*.yml")) == PLAYBOOKS
    assert sorted(p.name for p in (coll / "plugins/modules").iterdir()) == sorted(
        p.name for p in (ROOT / "plugins/modules").glob("*.py"))
    assert sorted(p.name for p in (coll / "plugins/action").iterdir()) == ["kvprov_preflight.py"]
    # Python outside plugins/ only where a role copies it to the host
    assert sorted(str(p.relative_to(coll)) for p in coll.rglob("*.py") if p.parts[len(coll.parts)] != "plugins") == [
        "roles/engine/files/kvprov-evict.py", "roles/engine/files/kvprov-kv-key.py",
        "roles/kvcache_bench/files/bench_worker.py"]
    manifest = json.loads((coll / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("kvprov", "kvprov", kvprov.__version__)


def test_every_playbook_passes_syntax_check_by_fqcn(installed):
    collections, coll, cwd = installed
    names = [f"kvprov.kvprov.{p}" for p in PLAYBOOKS]
    r = ansible(["ansible-playbook", "-i", "localhost,", "--syntax-check", *names], collections, cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.findall(r"^playbook: (\S+)$", r.stdout, re.M) == [str(coll / "playbooks" / f"{p}.yml") for p in PLAYBOOKS]
    # the roles and modules really come from the collection: without it the same check fails
    r = ansible(["ansible-playbook", "-i", "localhost,", "--syntax-check", str(coll / "playbooks/site.yml")],
                cwd / "none", cwd)
    assert r.returncode != 0 and "kvprov.kvprov.preflight" in r.stdout + r.stderr


WRAPPER = """\
- name: The desired state, from the installed collection
  ansible.builtin.import_playbook: kvprov.kvprov.desired
- name: Write it out
  hosts: gpu_nodes
  gather_facts: false
  roles: [kvprov.kvprov.preflight]
  tasks:
    - name: One file per host
      ansible.builtin.copy:
        content: "{{{{ kvprov_desired | to_json }}}}"
        dest: "{out}/{{{{ inventory_hostname }}}}.json"
        mode: "0600"
      delegate_to: localhost
"""


def test_the_installed_collection_computes_what_kvprov_computes(installed, tmp_path, monkeypatch):
    """desired.yml (every role's vars and templates) and the preflight action plugin, run from
    the installed collection, give the desired state kvprov's own runs give from this checkout."""
    collections, _, _ = installed
    inventory = ROOT / "inventory/lab-engine.yml"
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path / "runs"))
    ours = desired.load(str(inventory))
    (tmp_path / "out").mkdir()
    (tmp_path / "play.yml").write_text(WRAPPER.format(out=tmp_path / "out"))
    # The host's memory given, so that the preflight reads no /proc/meminfo (no lab host is up here)
    r = ansible(["ansible-playbook", "-i", str(inventory), "play.yml", "-e", "ansible_python_interpreter=python3",
                 "-e", '{"kvprov_host_memory_mb": 65536}'],
                collections, tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "kvprov.kvprov.preflight : Check this host's kvprov variables" in r.stdout
    theirs = {p.stem: json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("*.json"))}
    assert ours and theirs == ours


def test_kvprovs_runs_take_the_checkouts_collection_before_an_installed_one(installed, monkeypatch):
    """kvprov/runner.py: the user's ANSIBLE_COLLECTIONS_PATH holds another copy; kvprov's runs
    still resolve kvprov.kvprov to this checkout."""
    collections, _, cwd = installed
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(collections))
    path = runner.collections_path()
    assert path.split(os.pathsep) == [str(ROOT / ".collections"), str(collections)]
    r = ansible(["ansible-doc", "-t", "module", "--json", "kvprov.kvprov.kvprov_host_lock"], path, cwd)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)["kvprov.kvprov.kvprov_host_lock"]["doc"]["filename"]
    assert found == str(ROOT / ".collections/ansible_collections/kvprov/kvprov/plugins/modules/kvprov_host_lock.py")


def test_every_filter_of_the_installed_collection_is_documented(installed):
    """#39: ansible-doc shows each of the collection's filters (plugins/filter/<name>.yml beside the
    code): what it takes, what it gives, and an example."""
    import importlib.util

    names = []
    for path in sorted((ROOT / "plugins/filter").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"kvprov_filter_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names += module.FilterModule().filters()
    assert len(names) == 12 and sorted(p.stem for p in (ROOT / "plugins/filter").glob("*.yml")) == sorted(names)
    collections, _, cwd = installed
    r = ansible(["ansible-doc", "-t", "filter", "--json", *[f"kvprov.kvprov.{n}" for n in names]], collections, cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    docs = json.loads(r.stdout)
    for n in names:
        doc = docs[f"kvprov.kvprov.{n}"]
        assert doc["doc"]["short_description"] and doc["doc"]["options"]["_input"]["description"], n
        assert f"kvprov.kvprov.{n}" in doc["examples"] and doc["return"]["_value"]["type"], n
