"""A wheel is the product (#25): kvprov built as a wheel and installed in a fresh venv, run
outside the checkout, finds its roles, playbooks and plugins inside itself (the collection the
wheel carries, setup.py) and renders the same files as the checkout.

One wheel build, one venv, for the whole module. No network: the build uses the installed
setuptools (--no-build-isolation), and the venv takes kvprov's dependencies from this
Python's site-packages (--system-site-packages)."""

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

INVENTORY = ROOT / "inventory/example.yml"
COLLECTION = ("galaxy.yml", "LICENSE", "ansible.cfg", "meta", "playbooks", "plugins", "roles", "docs/collection.md")  # setup.py's


def run(args, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, args))} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, env, tmp, wheel): kvprov's wheel installed in a fresh venv; run its commands with env,
    from tmp (outside the checkout)."""
    t0 = time.monotonic()
    tmp = tmp_path_factory.mktemp("wheel")
    quiet = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", tmp / "dist", ROOT], cwd=tmp, env=quiet)
    [wheel] = (tmp / "dist").glob("kvprov-*.whl")
    venv = tmp / "venv"
    # No pip of its own: the venv's python runs this Python's pip (it sees the system
    # site-packages), which installs into the venv all the same.
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    py = venv / "bin" / "python"
    # This Python's kvprov (an editable install of a checkout) is not replaced: pip leaves a
    # distribution outside the venv alone ("Not uninstalling ... outside environment").
    run([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--no-index", wheel], cwd=tmp, env=quiet)
    # kvprov runs `ansible-playbook` from PATH, and the roles' plugins (the sink filters, the
    # preflight action) import kvprov in that process. This Python's ansible-playbook would
    # import this Python's kvprov, the checkout's (its editable hook); a venv holding
    # ansible-core has its own, run by the venv's python: make that one, as pip would.
    playbook = venv / "bin" / "ansible-playbook"
    playbook.write_text(f"#!{py}\nimport sys\nfrom ansible.cli.playbook import main\nsys.exit(main())\n")
    playbook.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "ANSIBLE_CONFIG")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",  # as `activate` does
               # A venv with the system site-packages also reads the user's site-packages, ahead
               # of its own: a kvprov there would shadow the wheel.
               PYTHONNOUSERSITE="1",
               XDG_STATE_HOME=str(tmp / "state"))  # the runs' artifacts, apart from the user's
    print(f"\nwheel: built, venv made and installed in {time.monotonic() - t0:.1f} s")
    return venv, env, tmp, wheel


def test_installed_kvprov_is_the_wheels_and_carries_the_collection(installed):
    """The editable hook of this Python's kvprov (a finder that Python asks only after searching
    sys.path, the venv's site-packages first) does not shadow the wheel, and paths.ROOT is the
    collection inside the venv."""
    venv, env, tmp, wheel = installed
    r = run([venv / "bin/python", "-c", "import json, kvprov, kvprov.paths as p; print(json.dumps("
             "[kvprov.__file__, str(p.ROOT), str(p.collections_dir())]))"], cwd=tmp, env=env)
    module, root, collections = map(Path, json.loads(r.stdout))
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert module == site / "kvprov/__init__.py"
    assert root == site / "kvprov/collection/ansible_collections/kvprov/kvprov"
    assert collections == site / "kvprov/collection"
    assert not root.is_relative_to(ROOT)
    for name in ("galaxy.yml", "ansible.cfg", "meta/runtime.yml", "playbooks/desired.yml",
                 "plugins/modules/kvprov_mount_state.py", "plugins/filter/sinks.py", "roles/engine/tasks/main.yml"):
        assert (root / name).is_file(), name
    # the wheel itself holds no byte code, and the collection exactly the checkout's files
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if "__pycache__" in n or n.endswith(".pyc")] == []
    prefix = "kvprov/collection/ansible_collections/kvprov/kvprov/"
    files = run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *COLLECTION], cwd=ROOT).stdout.split()
    assert sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix)) == sorted(
        f for f in set(files) if (ROOT / f).is_file())


def test_help_and_the_lab_setup_it_carries(installed):
    """`kvprov lab deps` is the README's scripts/install-deps for a wheel install: the same
    script (CI runs it through scripts/install-deps), shipped as package data."""
    venv, env, tmp, _ = installed
    assert "usage: kvprov" in run([venv / "bin/kvprov", "--help"], cwd=tmp, env=env).stdout
    assert "install what the lab needs" in run([venv / "bin/kvprov", "lab", "--help"], cwd=tmp, env=env).stdout
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "kvprov/lab/install-deps").read_bytes() == (ROOT / "kvprov/lab/install-deps").read_bytes()
    assert "kvprov/lab/install-deps" in (ROOT / "scripts/install-deps").read_text()


def tree(top: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(top)): (p.stat().st_mode, p.read_bytes()) for p in sorted(top.rglob("*")) if p.is_file()}


def test_render_is_the_checkouts(installed):
    """Every file, byte for byte and mode, as the checkout renders it. The ansible_managed header
    is Ansible's plain default ("Ansible managed", no template path), so nothing is normalised."""
    venv, env, tmp, _ = installed
    t0 = time.monotonic()
    run([venv / "bin/kvprov", "render", INVENTORY, "--out", tmp / "wheel-out"], cwd=tmp, env=env)
    t1 = time.monotonic()
    checkout_env = {**os.environ, "XDG_STATE_HOME": str(tmp / "checkout-state")}
    run([sys.executable, "-m", "kvprov", "render", INVENTORY, "--out", tmp / "checkout-out"],
        cwd=ROOT, env=checkout_env)
    print(f"\nrender: wheel {t1 - t0:.1f} s, checkout {time.monotonic() - t1:.1f} s")
    wheel, checkout = tree(tmp / "wheel-out"), tree(tmp / "checkout-out")
    assert len(checkout) > 20
    assert sorted(wheel) == sorted(checkout)
    assert [name for name in checkout if wheel[name] != checkout[name]] == []
    # ...and the wheel's run used the wheel's collection: kvprov/runner.py's environment
    [envvars] = (tmp / "state/kvprov/runs").glob("*-desired-*/env/envvars")
    ansible_env = json.loads(envvars.read_text())
    # no ansible.cfg where it ran: Ansible's defaults with kvprov's layered on top (runner.LAYERED)
    assert "ANSIBLE_CONFIG" not in ansible_env or Path(ansible_env["ANSIBLE_CONFIG"]).parent != ROOT
    assert ansible_env["ANSIBLE_FORKS"] == "50" and ansible_env["ANSIBLE_PIPELINING"] == "True"
    assert Path(ansible_env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)[0]).is_relative_to(venv)


def test_check(installed):
    venv, env, tmp, _ = installed
    r = run([venv / "bin/kvprov", "check", INVENTORY], cwd=tmp, env=env)
    assert "0 error(s)" in r.stdout
