"""Footprint (#39): kvprov's core install is small, and `kvprov[loadtest]` carries what only the load
test needs (matplotlib and numpy for its chart, tokenizers, aiohttp). kvprov's wheel installed without
extras in a fresh venv, as a user would (`python3 -m venv` with its pip, the dependencies from the
package index), with the oldest Python kvprov supports (requires-python's floor) and the newest it
is tested on: the heavy packages are absent, the venv is under a size budget, every kvprov module
imports, `--help`, `render` and `check` work from outside the checkout, and `kvprov loadtest` says
which extra to install (exit 4, the environment's code: kvprov/errors.py), never a traceback.

Needs the package index (CI has it; pip's cache makes a second run quick). In CI
(KVPROV_REQUIRE_ENGINES=1, tests/required.py) a missing interpreter fails instead of skipping, so
the newest Python cannot drop out of CI silently. tests/unit/test_wheel.py tests the same wheel
offline against this Python's own site-packages (render byte for byte, the collection it carries)."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from kvprov import loadtest
from kvprov.errors import EXIT_ENVIRONMENT, KvprovError
from tests.conftest import ROOT
from tests.required import ENV

INVENTORY = ROOT / "inventory/example.yml"
NEWEST = (3, 13)  # the newest Python kvprov is tested on (CI's machine has it under pyenv)
# The loadtest extra's packages and what they pull in (matplotlib: numpy, pillow, fonttools, ...;
# tokenizers: huggingface-hub, hf-xet): none of them in a core install.
HEAVY = ("matplotlib", "numpy", "pillow", "fonttools", "contourpy", "kiwisolver", "tokenizers", "huggingface-hub",
         "hf-xet", "aiohttp", "yarl", "multidict")
# The whole venv, pip included, as `du` counts it. Measured when the extra was made: 104 MB with Python
# 3.11 (pip and setuptools ~28 MB of it), 89 MB with 3.13; with the loadtest extra 348 MB and 323 MB (the
# review's "313 MB venv, 195 MB of it for loadtest alone", when the extra's packages were dependencies).
BUDGET_MB = 125
LOADTEST_HINT = "needs the loadtest extra: pip install 'kvprov[loadtest]'"


def floor() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec)
    assert m, f"requires-python {spec!r}: this test reads a plain >=X.Y"
    return int(m[1]), int(m[2])


def interpreter(version: tuple[int, int]) -> str | None:
    """This Python where it is that version, else pyenv's newest patch release of it, else pythonX.Y on PATH."""
    if sys.version_info[:2] == version:
        return sys.executable
    x_y = "%d.%d" % version
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(f"{root}/versions/{x_y}.*/bin/python3"),
                   key=lambda p: [int(n) for n in re.findall(r"\d+", Path(p).parts[-3])])
    return found[-1] if found else shutil.which(f"python{x_y}")


def run(args, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


def ok(args, **kw) -> subprocess.CompletedProcess:
    r = run(args, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, args))} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def disk_usage(top: Path) -> int:
    """Bytes on disk, as `du` counts them (each hard-linked file once)."""
    seen, total = set(), 0
    for d, dirs, files in os.walk(top):
        for name in dirs + files:
            st = os.lstat(os.path.join(d, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """kvprov's wheel, built as tests/unit/test_wheel.py builds it (no network, ~2 s)."""
    dist = tmp_path_factory.mktemp("footprint-dist")
    ok([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", dist, ROOT],
       cwd=dist, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    [whl] = dist.glob("kvprov-*.whl")
    return whl


@pytest.fixture(scope="module", params=["oldest", "newest"])
def core(request, wheel, tmp_path_factory):
    """(venv, env, tmp, python version): the wheel installed without extras in a fresh venv of the
    oldest or newest supported Python; run its commands with env, from tmp (outside the checkout)."""
    version = floor() if request.param == "oldest" else NEWEST
    python = interpreter(version)
    if python is None:
        reason = f"no Python {'%d.%d' % version} here ({request.param} supported): pyenv install it"
        if os.environ.get(ENV) == "1":
            pytest.fail(f"{reason}; {ENV}=1: CI tests the oldest and newest supported Python", pytrace=False)
        pytest.skip(reason)
    t0 = time.monotonic()
    tmp = tmp_path_factory.mktemp(f"footprint-{request.param}")
    venv = tmp / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "ANSIBLE_CONFIG", "VIRTUAL_ENV")}
    # not activated (PATH as it was), as the README's quick start runs it: kvprov runs its own venv's
    # ansible-playbook (kvprov/runner.py)
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               XDG_STATE_HOME=str(tmp / "state"))
    ok([python, "-m", "venv", venv], cwd=tmp, env=env)
    r = run([venv / "bin/python", "-m", "pip", "install", "-q", wheel], cwd=tmp, env=env)
    assert r.returncode == 0, (f"pip install {wheel.name} (core, dependencies from the package index) -> "
                               f"{r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    print(f"\nfootprint: {request.param} Python {'%d.%d' % version} ({python}): venv made and kvprov installed "
          f"in {time.monotonic() - t0:.1f} s")
    return venv, env, tmp, version


def test_the_core_install_lacks_the_heavy_packages_and_is_under_budget(core):
    venv, env, tmp, version = core
    r = ok([venv / "bin/python", "-c", "import importlib.metadata as m, json; "
            "print(json.dumps(sorted({d.metadata['Name'].lower().replace('_', '-') for d in m.distributions()})))"],
           cwd=tmp, env=env)
    installed = set(json.loads(r.stdout))
    assert {"kvprov", "ansible-core", "pytest-testinfra", "prometheus-client"} <= installed
    assert sorted(installed & set(HEAVY)) == []
    size = disk_usage(venv) / 1e6
    print(f"\nfootprint: core venv, Python {'%d.%d' % version}: {size:.0f} MB ({len(installed)} distributions), "
          f"budget {BUDGET_MB} MB")
    assert size < BUDGET_MB, f"the core venv is {size:.0f} MB, over its {BUDGET_MB} MB budget: a new heavy dependency?"


def test_every_kvprov_module_imports_without_the_extra(core):
    """Every import of the extra's packages is inside the functions that need them: each module of
    the package (validate imports kvprov.loadtest for its counters) imports in the core venv."""
    venv, env, tmp, _ = core
    code = ("import importlib, json, pkgutil, sys, kvprov\n"
            "failed = {}\n"
            "for m in pkgutil.walk_packages(kvprov.__path__, 'kvprov.'):\n"
            "    if m.name == 'kvprov.__main__' or m.name.startswith('kvprov.collection'):\n"
            "        continue\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except Exception as e:\n"
            "        failed[m.name] = repr(e)\n"
            "print(json.dumps([failed, sorted(n for n in sys.modules if n.split('.')[0] in ('kvprov', 'aiohttp', "
            "'matplotlib', 'numpy', 'tokenizers'))]))\n")
    r = ok([venv / "bin/python", "-W", "ignore", "-c", code], cwd=tmp, env=env)
    failed, modules = json.loads(r.stdout)
    assert failed == {}
    assert {"kvprov.loadtest", "kvprov.loadtest_report", "kvprov.validate.cli", "kvprov.audit"} <= set(modules)
    assert [m for m in modules if not m.startswith("kvprov")] == []


def test_help_render_check_and_the_testinfra_plugin_work(core):
    venv, env, tmp, _ = core
    assert "usage: kvprov" in ok([venv / "bin/kvprov", "--help"], cwd=tmp, env=env).stdout
    ok([venv / "bin/kvprov", "render", INVENTORY, "--out", tmp / "out"], cwd=tmp, env=env)
    rendered = [p for p in (tmp / "out").rglob("*") if p.is_file()]
    assert len(rendered) > 20 and any(p.name == "mnt-kvcache.mount" for p in rendered)
    assert "0 error(s)" in ok([venv / "bin/kvprov", "check", INVENTORY], cwd=tmp, env=env).stdout
    # the pytest plugin (entry point pytest11) loads: its options are in pytest's help
    assert "--kvprov-inventory" in ok([venv / "bin/pytest", "--help"], cwd=tmp, env=env).stdout


@pytest.mark.parametrize("args", [["--url", "http://127.0.0.1:9"], ["--compare", "a.json", "b.json"]])
def test_loadtest_names_the_extra_to_install(core, args):
    venv, env, tmp, _ = core
    r = run([venv / "bin/kvprov", "loadtest", *args], cwd=tmp, env=env)
    assert r.returncode == EXIT_ENVIRONMENT, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert r.stderr.splitlines()[-1] == (f"kvprov: error: kvprov loadtest {LOADTEST_HINT} "
                                         "(not installed: aiohttp, matplotlib, tokenizers)")
    assert r.stdout == "" and not list(tmp.glob("loadtest-*"))  # refused before anything was written
    assert "--url" in ok([venv / "bin/kvprov", "loadtest", "--help"], cwd=tmp, env=env).stdout  # help still works


# ---------------------------------------------------------------------------- in this process (no venv)

def test_the_extra_is_what_loadtest_checks_and_what_install_deps_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower() for r in project["optional-dependencies"]["loadtest"]}
    assert extra == set(loadtest.EXTRA)
    core_deps = {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower() for r in project["dependencies"]}
    assert core_deps & extra == set() and core_deps & set(HEAVY) == set()
    # CI and the lab (scripts/install-deps runs kvprov/lab/install-deps) install the checkout with it
    assert re.search(r'pip install -q -e "\$checkout\[[a-z,]*\bloadtest\b[a-z,]*\]"',
                     (ROOT / "kvprov/lab/install-deps").read_text())


@pytest.mark.parametrize("blocked", ["aiohttp", "matplotlib", "tokenizers"])
def test_a_missing_package_of_the_extra_is_one_line_and_exit_4(monkeypatch, capsys, blocked):
    from kvprov import cli

    monkeypatch.setitem(sys.modules, blocked, None)  # as if not installed: its import raises
    assert cli.main(["loadtest", "--url", "http://127.0.0.1:9"]) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err
    assert err == f"kvprov: error: kvprov loadtest {LOADTEST_HINT} (not installed: {blocked})\n"
    # validate --engine-roundtrip runs the load test's client: refused the same way, before any endpoint
    with pytest.raises(KvprovError, match=re.escape(f"kvprov validate --engine-roundtrip {LOADTEST_HINT}")) as e:
        loadtest.roundtrip(["no-such-inventory.yml"], None)
    assert e.value.exit_code == EXIT_ENVIRONMENT


def test_validate_engine_roundtrip_without_the_extra_stops_before_any_host_is_contacted(monkeypatch, capsys, tmp_path):
    """The refusal comes first: no collection or bench runs (they would take minutes, then lose
    the report to the missing extra)."""
    from kvprov import cli
    from kvprov.validate import collect

    monkeypatch.setitem(sys.modules, "aiohttp", None)
    monkeypatch.setattr(collect, "collect", lambda *a, **k: pytest.fail("a host was contacted"))
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    gpu1:\n")
    assert cli.main(["validate", str(inv), "--engine-roundtrip"]) == EXIT_ENVIRONMENT
    assert capsys.readouterr().err == (f"kvprov: error: kvprov validate --engine-roundtrip {LOADTEST_HINT} "
                                       "(not installed: aiohttp)\n")
