"""The capacity figures (storage_dirs.json's usage): what engine.<instance>.storage_dir
says of them, when the volume is nearly full or could not be measured (audit's gauges:
test_audit_gauges.py)."""

import json

import pytest

from kvprov.validate import bundle as bf
from kvprov.validate.bundle import Bundle, FileProblem
from kvprov.validate.checks import engine
from kvprov.validate.context import Context
from tests.conftest import FIXTURES

ROOT = FIXTURES / "bundles/local_c1"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
GIB = 2 ** 30
VOL = {"size_bytes": 1000 * GIB, "used_bytes": 960 * GIB, "inodes": 1000, "inodes_used": 10}
DIR = {"bytes": 5 * 2 ** 20, "files": 3, "complete": True}
EVICT = ("stores fail once it is full while /health stays green. Where kvprov runs an evictor, read "
         "`journalctl -u kvprov-evict-main.service` and `systemctl status kvprov-evict-main.timer`; lower "
         "kvprov_engine_evict_high_percent or set kvprov_engine_evict_max_bytes (docs/capacity.md); otherwise grow "
         "the volume")
SLOW = ("a hung or slow mount? see mount.io_probe, then collect again (a larger --timeout lets a huge directory be "
        "walked)")


def bundle(vol=None, dir_=None) -> tuple[Bundle, bf.Desired]:
    data = json.loads(FILES["storage_dirs.json"])
    if vol is not None:
        data["mount_point"]["usage"] = vol
    if dir_ is not None:
        data["instances"]["main"]["usage"] = dir_
    b = Bundle(files={**FILES, "storage_dirs.json": json.dumps(data).encode()})
    return b, bf.load_desired(b)


def capacity(vol=None, dir_=None) -> tuple[str, str]:
    b, d = bundle(vol, dir_)
    return engine.capacity(Context(b, d), d.instances[0])


def test_human_bytes():
    assert [engine.human_bytes(n) for n in (0, 1023, 1024, 1536, 5 * 2 ** 20, 3 * GIB, 2 ** 40, 2 ** 50, 2 ** 60)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB", "1.0 TiB", "1.0 PiB", "1024.0 PiB"]


def test_no_figures_from_an_older_collector_say_nothing():
    assert capacity() == ("", "")


def test_a_nearly_full_volume_names_space_and_inodes_and_the_evictor():
    assert capacity(VOL, DIR) == (
        "volume 96.0% of 1000.0 GiB used, inodes 1.0% of 1000; directory 5.0 MiB in 3 files",
        f"the KV volume is nearly full (space 96.0%): {EVICT}")
    text, fix = capacity({**VOL, "used_bytes": 950 * GIB, "inodes_used": 950}, DIR)
    assert text == "volume 95.0% of 1000.0 GiB used, inodes 95.0% of 1000; directory 5.0 MiB in 3 files"
    assert fix == f"the KV volume is nearly full (space 95.0%, inodes 95.0%): {EVICT}"
    assert capacity({**VOL, "used_bytes": 949 * GIB, "inodes_used": 949}, DIR)[1] == ""


def test_a_volume_without_inode_counts_and_an_unfinished_walk():
    assert capacity({**VOL, "used_bytes": 0, "inodes": 0, "inodes_used": 0}, {**DIR, "complete": False}) == (
        "volume 0.0% of 1000.0 GiB used, inodes not counted; directory 5.0 MiB in 3 files so far (the walk ran "
        "out of time)", "")
    assert capacity({**VOL, "size_bytes": 0, "used_bytes": 0}, DIR)[0].startswith("volume 0.0% of 0 B used")


def test_what_could_not_be_measured_is_named():
    assert capacity({"error": "statvfs timed out"}, {"bytes": -1, "files": 2}) == (
        "could not measure the volume: statvfs timed out; could not measure the directory: no figures", SLOW)
    assert capacity({**VOL, "inodes": True}, None) == (
        "could not measure the volume: no figures; could not measure the directory: no figures", SLOW)
    b, d = bundle(["not", "an", "object"], None)
    with pytest.raises(FileProblem) as e:
        engine.capacity(Context(b, d), d.instances[0])
    assert e.value.reason == "mount_point.usage is not an object"


def test_a_directory_walk_without_its_complete_flag_counts_as_complete_and_an_error_is_named():
    assert capacity(VOL, {"bytes": 10, "files": 1})[0].endswith("; directory 10 B in 1 files")
    assert capacity(VOL, {"error": "du: permission denied"})[0].endswith(
        "; could not measure the directory: du: permission denied")
