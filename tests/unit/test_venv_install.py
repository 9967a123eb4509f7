"""roles/nixl/tasks/venv.yml, which installs NIXL's venv and the engine's: run for real on this
machine (a local Ansible run into venvs under tmp_path, from a wheelhouse of real wheels built
here). With uv's wheel in the wheelhouse the venv is made without ensurepip, uv is unpacked from
its wheel and installs pip (the OS's wheel) and the pins; without it pip does; a second run
changes nothing; check mode creates nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WHEELHOUSE = Path("/var/lib/kvprov/wheelhouse")  # scripts/install-deps puts uv's wheel there
UV_WHEELS = sorted(WHEELHOUSE.glob("uv-*.whl"))
NEEDS_ANSIBLE = pytest.mark.skipif(shutil.which("ansible-playbook") is None or not Path("/usr/bin/python3").exists(),
                                   reason="a local Ansible run with /usr/bin/python3 -m venv, as the roles use")
NEEDS_UV = pytest.mark.skipif(not UV_WHEELS, reason=f"no uv wheel in {WHEELHOUSE} (scripts/install-deps)")

PLAY = """\
- name: The venv install of roles/nixl and roles/engine
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Install
      ansible.builtin.import_tasks: {tasks}
"""


def wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A real (pure Python) wheel: METADATA, WHEEL, a module and a RECORD with its hashes."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\n" f"Name: {name}\nVersion: {version}\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kvprov-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    out = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return out


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    wheel(d, "kvtiny", "1.0", ("kvdep",))
    wheel(d, "kvtiny", "2.0", ("kvdep",))
    wheel(d, "kvdep", "1.0")
    return d


def play(tmp_path: Path, venv: Path, find_links: Path | str, requirements: list[str], no_deps: bool = False,
         *extra: str) -> tuple[subprocess.CompletedProcess, int]:
    """The task file on this machine; the run and its changed count (PLAY RECAP)."""
    book = tmp_path / "play.yml"
    book.write_text(PLAY.format(tasks=ROOT / "roles/nixl/tasks/venv.yml"))
    args = {"_kvprov_venv_path": str(venv), "_kvprov_venv_requirements": requirements,
            "_kvprov_venv_find_links": str(find_links), "_kvprov_venv_no_deps": no_deps}
    r = subprocess.run(["ansible-playbook", "-i", "localhost,", str(book), *extra,
                        "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(args)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "default"})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    m = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", r.stdout)
    assert m, r.stdout[-3000:]
    return r, int(m.group(1))


def installed(venv: Path) -> dict[str, tuple[str, str]]:
    """{distribution: (version, the installer that wrote it)} from the venv's dist-info."""
    out = {}
    for info in (venv / "lib").glob("python3*/site-packages/*.dist-info"):
        meta = dict(line.split(": ", 1) for line in (info / "METADATA").read_text().splitlines()
                    if ": " in line and line.split(": ", 1)[0] in ("Name", "Version"))
        installer = (info / "INSTALLER").read_text().strip() if (info / "INSTALLER").exists() else "?"
        out[meta["Name"].lower()] = (meta["Version"], installer)
    return out


@NEEDS_ANSIBLE
@NEEDS_UV
def test_uv_installs_the_pins_when_the_wheelhouse_has_it_and_a_second_run_changes_nothing(tmp_path, wheelhouse):
    shutil.copy(UV_WHEELS[-1], wheelhouse)
    venv = tmp_path / "venv"
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"], False, "--check")
    assert changed > 0 and not venv.exists()  # check mode: would install, created nothing
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"])
    assert changed > 0 and "TASK [Install the pinned distributions with uv]" in r.stdout
    have = installed(venv)
    assert have["kvtiny"] == ("1.0", "uv") and have["kvdep"] == ("1.0", "uv")
    # uv is the wheel's binary, not a distribution; pip (the pip module's lookups need it) came
    # from the OS's wheel through uv, not from ensurepip
    assert "uv" not in have and (venv / "bin/uv").is_file() and os.access(venv / "bin/uv", os.X_OK)
    assert have["pip"][1] == "uv"
    # pip's bytecode as pip would leave it: the engine's user cannot write into a root-owned venv
    assert list((venv / "lib").glob("python3*/site-packages/kvtiny/__pycache__/*.pyc"))
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"])
    assert changed == 0, r.stdout[-3000:]
    # a pin that differs: uv again, to the new version
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==2.0"])
    assert changed > 0 and installed(venv)["kvtiny"] == ("2.0", "uv")
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==2.0"], False, "--check")
    assert changed == 0


@NEEDS_ANSIBLE
@NEEDS_UV
def test_no_deps_installs_only_the_distributions_named(tmp_path, wheelhouse):
    shutil.copy(UV_WHEELS[-1], wheelhouse)
    venv = tmp_path / "venv"
    play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"], True)
    have = installed(venv)
    assert have["kvtiny"] == ("1.0", "uv") and "kvdep" not in have


@NEEDS_ANSIBLE
def test_pip_installs_the_pins_when_the_wheelhouse_has_no_uv(tmp_path, wheelhouse):
    venv = tmp_path / "venv"
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"])
    assert changed > 0 and "TASK [Install the pinned distributions with pip]" in r.stdout
    have = installed(venv)
    assert have["kvtiny"] == ("1.0", "pip") and have["kvdep"] == ("1.0", "pip") and "uv" not in have
    r, changed = play(tmp_path, venv, wheelhouse, ["kvtiny==1.0"])
    assert changed == 0, r.stdout[-3000:]


def test_both_roles_install_through_the_task_file():
    """NIXL's venv and the engine's go through venv.yml, statically imported (the roles' tags apply)."""
    r = subprocess.run(["ansible-playbook", "--list-tasks", "playbooks/site.yml"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [tags] = [line.split("TAGS:")[1] for line in r.stdout.splitlines()
              if "nixl : Install the pinned distributions with uv" in line]
    assert "nixl" in tags and "install" in tags
    # the engine's service.yml is included at run time (not listed): its import, resolved as Ansible
    # resolves it (relative to the role's tasks directory)
    service = yaml.safe_load((ROOT / "roles/engine/tasks/service.yml").read_text())
    [install] = [t for t in service if t["name"] == "Install the engine"]
    [imp] = [t["ansible.builtin.import_tasks"] for t in install["block"] if "ansible.builtin.import_tasks" in t]
    assert (ROOT / "roles/engine/tasks" / imp).resolve() == ROOT / "roles/nixl/tasks/venv.yml"
