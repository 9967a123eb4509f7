import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
LAB_CONTAINERS = 4  # kvlab-c1 is deployed to; kvlab-c2 stays fresh for the check-mode test; kvlab-c4 runs a real
# engine, kvlab-c3 the same engine on the same namespace (cross-host)


def kvprov(*args: str, timeout: float = 900, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    res = subprocess.run([sys.executable, "-m", "kvprov", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    if check and res.returncode != 0:
        raise AssertionError(f"kvprov {' '.join(args)} -> {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


def render_one_host(d: Path, key: str | None = None, **group_vars) -> Path:
    """`kvprov render` of a one-host (s1) inventory on the local profile with these variables
    (and an API key file holding `key`) into d/out; returns d/out/s1."""
    import yaml

    group_vars = {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none", **group_vars}
    if key is not None:
        (d / "key").write_text(key + "\n")
        (d / "key").chmod(0o600)
        group_vars["kvprov_engine_api_key_file"] = str(d / "key")
    (d / "inv.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
        "hosts": {"s1": None}, "vars": group_vars}}}}))
    kvprov("render", str(d / "inv.yml"), "--out", str(d / "out"), check=True)
    return d / "out/s1"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    # Lab test files are numbered in the order they need (a fresh lab, then deploy);
    # `lab down` tests take the lab away: run them after everything else.
    items.sort(key=lambda item: item.get_closest_marker("lab_teardown") is not None)
    # With pytest-xdist (pyproject's addopts: -n 2 --dist loadgroup) the lab tests are one group,
    # run in that order by one worker, while the other worker runs the rest (one group too, so
    # that none waits behind the lab; alone, the unit tests spread over both workers).
    lab = {id(item) for item in items if item.get_closest_marker("lab") or item.get_closest_marker("lab_teardown")}
    for item in items:
        if lab:
            item.add_marker(pytest.mark.xdist_group("lab" if id(item) in lab else "unit"))


def pytest_configure(config):
    config.addinivalue_line("markers", "lab_teardown: takes the lab down; runs last")


@pytest.fixture(scope="session")
def lab():
    """A freshly booted lab (a running one is restarted: the tests need unconfigured hosts):
    the state dict from `kvprov lab status --json`. KVPROV_TEST_REUSE_LAB=1 keeps a running,
    already deployed lab (to rerun later test files while developing)."""
    import json

    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    if os.environ.get("KVPROV_TEST_REUSE_LAB") != "1":
        kvprov("lab", "down", check=True)
        up = kvprov("lab", "up", "--containers", str(LAB_CONTAINERS))
        assert up.returncode == 0, f"lab up failed:\n{up.stdout}\n{up.stderr}"

    st = kvprov("lab", "status", "--json", check=True)
    return json.loads(st.stdout)
