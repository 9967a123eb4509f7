"""#39 item 5: `ansible-test sanity` on the collection as a user gets it (built with
ansible-galaxy, installed into an empty ansible_collections/kvprov/kvprov), with the waivers of
tests/sanity/ignore-2.19.txt that docs/collection.md explains. ansible-test runs each sanity test
in a virtual environment of its own, which scripts/install-deps builds beforehand under
SANITY_HOME (this machine cannot reach the host ansible-test downloads its pip bootstrap from):
without them the test is skipped, and fails in CI (tests/required.py). The run must pass, every
test below must have checked files of the collection, and a planted defect must be found."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.required import engine_missing

SANITY_HOME = Path("/var/lib/kvprov/ansible-test")  # scripts/install-deps
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
# The sanity tests of ansible-test 2.19 that check this collection's files ...
CHECKED = {"action-plugin-docs", "ansible-doc", "compile", "ignores", "import", "line-endings", "no-assert",
           "no-get-exception", "no-illegal-filenames", "no-smart-quotes", "pep8", "pylint", "replace-urlopen",
           "runtime-metadata", "shebang", "symlinks", "use-argspec-type-path", "use-compat-six", "validate-modules",
           "yamllint"}
# ... and those that find nothing to check in it: no changelogs/, __init__.py, PowerShell or shell script.
NOTHING_TO_CHECK = {"changelog", "empty-init", "pslint", "shellcheck"}


def clean_env(**more) -> dict:
    """No ANSIBLE_* setting of this checkout's (its ansible.cfg and .collections stay out too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "ANSIBLE_NOCOLOR": "1", **more}


def ansible_test(args: list[str], coll: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """ansible-test of this Python's ansible-core, in the environments of SANITY_HOME."""
    return subprocess.run([sys.executable, "-m", "ansible_test._util.target.cli.ansible_test_cli_stub", *args],
                          cwd=coll, env=clean_env(HOME=str(SANITY_HOME)), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def junit_results(coll: Path) -> dict[str, tuple[str, str]]:
    """{test: (passed | failed | skipped, message)} from ansible-test's --junit files."""
    out = {}
    for path in sorted((coll / "tests/output/junit").glob("ansible-test-sanity-*.xml")):
        for case in ET.parse(path).iter("testcase"):
            name = case.get("name").removesuffix(f"-python-{PYTHON}")
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is not None:
                out[name] = ("failed", bad.get("message") or bad.text or "")
            elif case.find("skipped") is not None:
                out[name] = ("skipped", case.find("skipped").text or "")
            else:
                out[name] = ("passed", "")
    return out


@pytest.fixture
def environments():
    if not list((SANITY_HOME / ".ansible/test/cache").glob("get_pip_*.py")):
        engine_missing(f"ansible-test's sanity environments are not built in {SANITY_HOME} (scripts/install-deps)")


@pytest.fixture(scope="module")
def collections(tmp_path_factory):
    """(the clean collections directory, the installed collection's root)."""
    tmp = tmp_path_factory.mktemp("sanity")
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(tmp / "none"))
    build = subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(tmp / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=120, cwd=tmp, env=env)
    assert build.returncode == 0, build.stdout + build.stderr
    install = subprocess.run(["ansible-galaxy", "collection", "install", "-p", str(tmp / "collections"),
                              str(tmp / "dist" / f"kvprov-kvprov-{VERSION}.tar.gz")],
                             capture_output=True, text=True, timeout=120, cwd=tmp, env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    return tmp / "collections", tmp / "collections/ansible_collections/kvprov/kvprov"


def test_ansible_test_sanity_passes_and_checks_the_collection(environments, collections):
    _, coll = collections
    r = ansible_test(["sanity", "--python", PYTHON, "--junit", "--color", "no"], coll)
    output = r.stdout + r.stderr
    assert "Installing requirements" not in output, (
        f"ansible-test built an environment that scripts/install-deps had not (ansible-core changed since? "
        f"rerun scripts/install-deps):\n{output[-3000:]}")
    assert r.returncode == 0, output[-6000:]
    results = junit_results(coll)
    assert CHECKED | NOTHING_TO_CHECK <= set(results), sorted(set(results) ^ (CHECKED | NOTHING_TO_CHECK))
    assert {t: r for t, r in results.items() if t in CHECKED and r[0] != "passed"} == {}
    assert {t: r for t, r in results.items() if t not in CHECKED} == {
        t: ("skipped", "No tests applicable.") for t in results if t not in CHECKED}


def test_a_planted_defect_is_found(environments, collections, tmp_path):
    """The tools really read the collection's files: a module return value of no such type
    (validate-modules), a duplicate key in a filter's documentation (yamllint) and an
    over-long line in a role's Python (pep8) fail the run, each named."""
    _, coll = collections
    planted = tmp_path / "ansible_collections/kvprov/kvprov"
    shutil.copytree(coll, planted, ignore=shutil.ignore_patterns("output"))
    module = planted / "plugins/modules/kvprov_mount_state.py"
    text = module.read_text()
    assert text.count("  type: bool\n") == 1
    module.write_text(text.replace("  type: bool\n", "  type: boolean\n"))
    doc = planted / "plugins/filter/netdev.yml"
    doc.write_text(doc.read_text().replace("DOCUMENTATION:\n", "DOCUMENTATION:\n  name: netdev\n", 1))
    worker = planted / "roles/kvcache_bench/files/bench_worker.py"
    worker.write_text(worker.read_text() + "\nPLANTED = '" + "x" * 170 + "'\n")
    r = ansible_test(["sanity", "--python", PYTHON, "--color", "no", "--test", "validate-modules",
                      "--test", "yamllint", "--test", "pep8"], planted, timeout=120)
    output = r.stdout + r.stderr
    assert r.returncode != 0, output[-3000:]
    assert "plugins/modules/kvprov_mount_state.py" in output and "return-syntax-error" in output, output[-3000:]
    assert "plugins/filter/netdev.yml" in output and "key-duplicates" in output, output[-3000:]
    assert "roles/kvcache_bench/files/bench_worker.py" in output and "E501" in output, output[-3000:]


def test_kvprov_collect_renders_in_ansible_doc(collections):
    """kvprov_collect is out of ansible-test's ansible-doc run (its top-level tuple assignment
    makes ansible-doc warn, and the test counts any warning as a failure): its documentation
    renders with attributes and RETURN, and that warning is the only one."""
    path, _ = collections
    r = subprocess.run(["ansible-doc", "-t", "module", "--json", "kvprov.kvprov.kvprov_collect"], capture_output=True,
                       text=True, timeout=120, cwd=path, env=clean_env(ANSIBLE_COLLECTIONS_PATH=str(path)))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["kvprov.kvprov.kvprov_collect"]
    assert set(doc["doc"]["attributes"]) == {"check_mode", "diff_mode", "platform"}
    assert set(doc["return"]) == {"files"} and doc["examples"]
    warnings = [line for line in r.stderr.splitlines() if line.strip()]
    assert all("failed to assign id for <ast.Tuple" in w for w in warnings), warnings
