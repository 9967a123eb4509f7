"""Reading a bundle at its edges: each file's size limit to the byte (on disk and in memory),
names and unit names that have no place in a bundle, a path that cannot be looked up, what the
collector said about a missing file, the desired state's records, writing desired.json again,
systemd's path escaping, and the parsed captures being immutable (one Desired and one parse of
each file are shared by every check)."""

import dataclasses
import json

import pytest

from kvprov.validate import bundle as bf
from kvprov.validate import context, parsers
from kvprov.validate.bundle import Bundle, FileProblem
from kvprov.validate.checks import engine
from tests.conftest import FIXTURES

LIMITS = {bf.GPU: 1048576, bf.MOUNTINFO: 16777216, bf.PACKAGES: 8388608, bf.MODULES: 4194304}


@pytest.mark.parametrize("name", LIMITS)
def test_each_file_is_read_up_to_its_limit_and_refused_one_byte_over(name):
    limit = LIMITS[name]
    assert len(Bundle(files={name: b"x" * limit}).raw(name)) == limit
    with pytest.raises(FileProblem, match=f"^{name}: is {limit + 1} bytes, more than the {limit >> 20} MiB limit"):
        Bundle(files={name: b"x" * (limit + 1)}).raw(name)


def test_a_file_on_disk_exactly_at_its_limit_is_read_whole(tmp_path):
    (tmp_path / bf.HEALTH).write_bytes(b"x" * 1048576)
    assert len(Bundle(tmp_path).raw(bf.HEALTH)) == 1048576
    (tmp_path / bf.HEALTH).write_bytes(b"x" * 1048577)
    with pytest.raises(FileProblem, match="is 1048577 bytes, more than the 1 MiB limit"):
        Bundle(tmp_path).raw(bf.HEALTH)


def test_a_name_too_long_for_the_filesystem_is_a_read_problem(tmp_path):
    with pytest.raises(FileProblem) as e:
        Bundle(tmp_path).raw("x" * 300)
    assert e.value.reason == "cannot read: File name too long"


def test_a_file_where_a_directory_belongs_is_named(tmp_path):
    (tmp_path / "files").write_text("not a directory")
    with pytest.raises(FileProblem) as e:
        Bundle(tmp_path).raw("files/etc/fstab")
    assert e.value.reason == "files is not a directory"


@pytest.mark.parametrize("name", ["a/../b", "a//b", "./a", "/etc/passwd"])
def test_names_that_are_not_plain_are_refused_in_memory_too(name):
    with pytest.raises(FileProblem, match="not a plain relative name inside the bundle"):
        Bundle(files={name: b"x"}).raw(name)


def test_live_file_and_unit_names():
    assert bf.live_file("/etc/fstab") == "files/etc/fstab"
    assert bf.live_file("/etc/../etc/fstab") == "files/etc/fstab"
    for path in ("", "etc/fstab", "//etc/fstab"):
        with pytest.raises(FileProblem, match="is not an absolute path"):
            bf.live_file(path)
    for unit in ("a/b.service", "", ".hidden.service"):
        with pytest.raises(FileProblem, match=r"is not a systemd unit name"):
            bf.systemctl_file(unit)
        with pytest.raises(FileProblem, match=r"is not a systemd unit name"):
            bf.unit_file(unit)
    assert bf.unit_file("mnt-kvcache.mount") == "files/etc/systemd/system/mnt-kvcache.mount"


def test_a_missing_file_quotes_the_collectors_error_or_skip():
    collect = {"format": 4, "errors": {bf.GPU: "nvidia-smi: not found"}, "skipped": {bf.GDSCHECK: "no GPU"}}
    b = Bundle(files={bf.COLLECT: json.dumps(collect)})
    with pytest.raises(FileProblem) as e:
        b.raw(bf.GPU)
    assert e.value.reason == "missing from the bundle (the collector said: nvidia-smi: not found)"
    with pytest.raises(FileProblem) as e:
        b.raw(bf.GDSCHECK)
    assert e.value.reason == "missing from the bundle (the collector said: skipped: no GPU)"


def test_the_lmcache_mp_server_unit_is_the_instances_other_unit():
    inst = bf.Instance("main", "kvprov-vllm-main.service", "/mnt/kv/main", 8000,
                       ("kvprov-lmcache-main.service", "kvprov-vllm-main.service"), 18000, 19000)
    assert inst.server_unit == "kvprov-lmcache-main.service"
    assert bf.Instance("main", "u.service", "/d", 8000, ("u.service",)).server_unit is None


def test_desired_instances_that_are_no_list_say_what_they_must_be():
    data = json.loads((FIXTURES / "bundles/gpu_a01/desired.json").read_text())
    for bad in ("main", {"name": "main"}):
        data["engine"]["instances"] = bad
        with pytest.raises(bf.DesiredError) as e:
            bf.Desired.from_dict(data)
        assert e.value.problems == ["engine.instances: must be a list of {name, unit, storage_dir, port, units, "
                                    "lmcache_port, metrics_port}"]


def test_write_desired_into_an_existing_directory_round_trips(tmp_path):
    desired = bf.load_desired(Bundle(FIXTURES / "bundles/gpu_a01"))
    (tmp_path / "host").mkdir()
    path = bf.write_desired(tmp_path / "host", desired)
    assert bf.write_desired(tmp_path / "host", desired) == path
    assert bf.load_desired(Bundle(tmp_path / "host")) == desired


@pytest.mark.parametrize("path, unit", [("/mnt/kv_cache:1", "mnt-kv_cache:1"), ("/a.b", "a.b"),
                                        ("/.hidden/x", "\\x2ehidden-x"), ("/mnt/kv cache", "mnt-kv\\x20cache")])
def test_systemd_escape_path_keeps_colon_underscore_and_inner_dots(path, unit):
    assert bf.systemd_escape_path(path) == unit


def frozen_values():
    """Each kind of shared value, made by the code that makes it for the checks."""
    b = Bundle(FIXTURES / "bundles/gpu_a01")
    desired = bf.load_desired(b)
    c = context.Context(b, desired)
    return [desired, desired.instances[0], desired.files[0], desired.units[0], c.io(), c.gpu(), c.nixl_probe(),
            parsers.parse_rdma_link(b.text(bf.RDMA_LINK))[0], parsers.parse_gdscheck(b.text(bf.GDSCHECK)),
            engine.rules(c)]


def test_what_the_checks_share_cannot_be_changed_by_one_of_them():
    for value in frozen_values():
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, getattr(value, field))

