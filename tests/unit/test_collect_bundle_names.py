"""The bundle's file names are spelled once, in the collector module (which travels to the
host alone): the reader (kvprov/validate/bundle.py, and through it validate's and audit's
checks) takes them from there, they are the names docs/bundle.md publishes, and what the
collector really writes on this machine is named in that list. A renamed capture used to
make audit say SKIP ("not captured") or PASS ("mode not captured"), seen only on the lab."""

import json
import re

import pytest

from kvprov import audit
from kvprov.validate import bundle as bf
from kvprov.validate.checks import engine_sglang, rdma
from tests.conftest import ROOT

collector = bf.collector


def the_list() -> tuple[dict[str, str], dict[str, str]]:
    fixed = {k: v for k, v in vars(collector).items() if k.startswith("FILE_")}
    dirs = {k: v for k, v in vars(collector).items() if k.startswith("DIR_")}
    return fixed, dirs


def test_the_reader_takes_every_name_from_the_collector():
    fixed, dirs = the_list()
    assert len(set(fixed.values())) == len(fixed) and len(set(dirs.values())) == len(dirs)
    assert bf.collector.__file__ == str(ROOT / "plugins/modules/kvprov_collect.py")
    read = {"COLLECT", "MOUNTINFO", "MOUNTSTATS", "MODULES", "RDMA_LINK", "IP_ADDR", "IO_PROBE", "GDSCHECK", "GPU",
            "CUFILE", "UDEV", "NIXL_PROBE", "STORAGE_DIRS", "HEALTH", "PACKAGES", "RESTART_PENDING", "FILE_MODES",
            "DEPLOY_LOCK", "DIR_MODES", "ENGINE_USER", "MANAGED_DIRS", "VENVS", "NAMESPACES"}
    assert {getattr(bf, name) for name in read} == set(fixed.values())
    for name in read:
        assert getattr(bf, name) == fixed["FILE_" + name], name
    assert (bf.FILES_DIR, bf.SYSTEMCTL_DIR, bf.METRICS_DIR) == (dirs["DIR_FILES"], dirs["DIR_SYSTEMCTL"],
                                                                dirs["DIR_METRICS"])
    assert set(bf.NAMES) - {bf.DESIRED} <= set(fixed.values())
    assert (audit.MANAGED_DIRS, audit.VENVS, rdma.IP_ADDR, engine_sglang.METRICS_DIR) == (
        fixed["FILE_MANAGED_DIRS"], fixed["FILE_VENVS"], fixed["FILE_IP_ADDR"], dirs["DIR_METRICS"])


def test_the_names_are_the_ones_docs_bundle_md_publishes():
    rows = [line for line in (ROOT / "docs/bundle.md").read_text().splitlines() if line.startswith("| `")]
    published = {name for row in rows[:rows.index(next(r for r in rows if r.startswith("| `storage.")))]
                 for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}
    fixed, dirs = the_list()
    assert {n for n in published if "<" not in n and not n.startswith("files/")} == {"desired.json",
                                                                                      *fixed.values()}
    assert {n.split("/")[0] for n in published if "/" in n and not n.startswith("proc/")} == set(dirs.values())
    assert {"metrics/<instance>.txt", "metrics/<instance>-server.txt", "systemctl/<unit>.txt",
            "systemctl/<unit>.cmdline.json", "files/<absolute path>", "files/etc/fstab"} <= published


@pytest.fixture
def written(tmp_path):
    """The collector run for real on this machine (no GPU, no systemd needed): what it writes."""
    mp = tmp_path / "kv"
    mp.mkdir()
    desired = {
        "host": "h1", "files": ["/etc/hostname", str(tmp_path / "absent.conf")], "venvs": [str(tmp_path)],
        "dirs": [str(mp)], "units": [{"unit": "kvprov-x-main.service"}],
        "storage": {"mount_point": str(mp), "transport": "rdma", "profile": "local", "server": "s", "export": "/kv"},
        "nixl": {"venv": str(tmp_path / "no-venv"), "plugin": "posix"}, "gds": {"cufile_path": "/etc/cufile.json"},
        "engine": {"user": "root", "connect_host": "127.0.0.1", "instances": [
            {"name": "main", "unit": "kvprov-x-main.service", "units": ["kvprov-x-main.service"], "port": 1,
             "metrics_port": 2, "storage_dir": str(mp / "main")}]},
    }
    return collector.collect(desired, True, 4096, 5, "test", str(tmp_path / "pending"))


def test_what_the_collector_writes_is_named_in_the_list(written):
    fixed, dirs = the_list()
    meta = json.loads(written[bf.COLLECT])
    names = set(written) | set(meta["errors"]) | set(meta["skipped"])
    unnamed = {n for n in names if n not in fixed.values() and n.split("/")[0] not in dirs.values()}
    assert not unnamed, f"captured under names not in the collector's list: {sorted(unnamed)}"
    assert {bf.COLLECT, bf.MOUNTINFO, bf.GPU, bf.IO_PROBE, bf.NIXL_PROBE, bf.STORAGE_DIRS, bf.HEALTH,
            bf.MANAGED_DIRS, bf.FILE_MODES, bf.RESTART_PENDING, bf.DEPLOY_LOCK, bf.VENVS, bf.DIR_MODES,
            bf.ENGINE_USER, bf.NAMESPACES} <= set(written)
    assert "files/etc/hostname" in written and bf.FILES_DIR not in names
    assert {bf.GDSCHECK, bf.CUFILE, bf.UDEV} <= set(meta["skipped"])  # no GPU here
    assert set(written) & {bf.MODULES, bf.RDMA_LINK, bf.IP_ADDR} or set(meta["errors"]) & {bf.MODULES, bf.RDMA_LINK}
    assert any(n.startswith(bf.FILES_DIR + "/") and n.endswith("absent.conf") for n in meta["errors"])
    # what the collector wrote, read back as validate and audit read a bundle
    b = bf.Bundle(files=written)
    assert b.json_object(bf.STORAGE_DIRS)["mount_point"]["exists"] is True
    assert b.json_object(bf.GPU)["present"] is False
