import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.labshare import LabShare

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
LAB_GROUPS = pytest.StashKey[tuple]()
LAB_SHARE = pytest.StashKey[LabShare]()
LAB_CONTAINERS = 5  # kvlab-c1 is deployed to; kvlab-c2 stays fresh for the check-mode test; kvlab-c3 is a host
# made unreachable (test_6); kvlab-c5 runs a real engine, kvlab-c4 the same engine on the same namespace (cross-host)


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

    group_vars = {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
                  "kvprov_engine_model_revision": "0123abc", **group_vars}  # a pinned model: shareable
    if key is not None:
        (d / "key").write_text(key + "\n")
        (d / "key").chmod(0o600)
        group_vars["kvprov_engine_api_key_file"] = str(d / "key")
    (d / "inv.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
        "hosts": {"s1": None}, "vars": group_vars}}}}))
    kvprov("render", str(d / "inv.yml"), "--out", str(d / "out"), check=True)
    return d / "out/s1"


def lab_group(item) -> str | None:
    """The lab group of a lab test (tests/labshare.py): `lab`, or a module's or test's
    `lab_group` mark; None for the other tests."""
    if not (item.get_closest_marker("lab") or item.get_closest_marker("lab_teardown")):
        return None
    mark = item.get_closest_marker("lab_group")
    return mark.args[0] if mark else "lab"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    # Lab test files are numbered in the order they need (a fresh lab, then deploy). With two lab
    # groups, the unit tests run before the `engine` group, on its worker (pyproject's addopts:
    # -n 2 --dist loadgroup; one xdist group a worker): meanwhile the other worker brings the lab up
    # and deploys kvlab-gpu1, which the engines' cross-host test needs. `lab down` tests take the
    # lab away: they run last (after every group's lab tests: tests/labshare.py).
    groups = {id(item): lab_group(item) for item in items}
    labs = set(groups.values()) - {None}
    unit = "engine" if "engine" in labs and len(labs) > 1 else "unit"
    order = {"lab": 0, None: 1, "engine": 2}
    items.sort(key=lambda item: (item.get_closest_marker("lab_teardown") is not None, order.get(groups[id(item)], 2)))
    for item in items:
        if labs:  # alone, the unit tests spread over both workers
            item.add_marker(pytest.mark.xdist_group(groups[id(item)] or unit))


def pytest_collection_finish(session):
    """What the lab groups share (after -k/-m deselection): which group uses which fixture and
    test module, and the milestones each lab test's end reaches (the last of its module's,
    of its group's: pytest_runtest_teardown)."""
    used, reaches = {}, {}
    for item in session.items:
        group = lab_group(item)
        if group is None or item.get_closest_marker("lab_teardown"):
            continue
        module = f"module:{item.module.__name__.rpartition('.')[2]}"
        for key in (*(f"fixture:{name}" for name in item.fixturenames), module):
            used.setdefault(key, set()).add(group)
        reaches[module] = reaches[f"group:{group}"] = item.nodeid
    milestones = {}
    for name, nodeid in reaches.items():
        milestones.setdefault(nodeid, []).append(name)
    session.config.stash[LAB_GROUPS] = (used, milestones)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    share = item.config.stash.get(LAB_SHARE, None)
    if share is not None:
        for name in item.config.stash[LAB_GROUPS][1].get(item.nodeid, []):
            share.reach(name)


def pytest_configure(config):
    config.addinivalue_line("markers", "lab_teardown: takes the lab down; runs last")
    config.addinivalue_line("markers", "lab_group(name): the lab group (and xdist worker) of a lab test; "
                                       "`lab` unless marked")


@pytest.fixture(scope="session")
def lab_share(request, tmp_path_factory) -> LabShare:
    """The lab groups' shared directory: the run's (an xdist worker's base temp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    used, _ = request.config.stash.get(LAB_GROUPS, ({}, {}))
    share = LabShare(base.parent if hasattr(request.config, "workerinput") else base, used)
    request.config.stash[LAB_SHARE] = share
    return share


@pytest.fixture(scope="session")
def lab(lab_share):
    """A freshly booted lab (a running one is restarted: the tests need unconfigured hosts),
    one for the run, whichever lab group comes first: the state dict from `kvprov lab status
    --json`. KVPROV_TEST_REUSE_LAB=1 keeps a running, already deployed lab (to rerun later test
    files while developing)."""
    import json

    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    if os.environ.get("KVPROV_TEST_REUSE_LAB") != "1":
        with lab_share.lock("lab-up"):
            if not (lab_share.dir / "lab-up.milestone").exists():
                kvprov("lab", "down", check=True)
                up = kvprov("lab", "up", "--containers", str(LAB_CONTAINERS))
                lab_share.reach("lab-up", None if up.returncode == 0 else
                                f"lab up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        lab_share.wait("lab-up", "the lab", timeout=0)

    st = kvprov("lab", "status", "--json", check=True)
    return json.loads(st.stdout)


@pytest.fixture
def storage_alone(lab_share):
    """The storage VM and kvlab-gpu1's NFS client to this test alone, among the lab groups' tests:
    for a test that stops or breaks the storage, that mounts it over TCP (NFSv4.1 trunking: with
    a mount over RDMA up, the kernel serves a new TCP mount through that RDMA client), or that
    reads through it throughout."""
    with lab_share.lock("storage"):
        yield


@pytest.fixture
def lab_alone(request, lab_share):
    """The other lab groups' tests have all run: the lab is this test's alone."""
    groups = {name for names in request.config.stash[LAB_GROUPS][1].values() for name in names
              if name.startswith("group:")}
    for name in sorted(groups - {f"group:{lab_group(request.node)}"}):
        lab_share.wait(name, f"{request.node.name} waits for the lab tests of {name}")
