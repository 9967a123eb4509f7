"""Reading a bundle safely (missing, huge, binary, hostile files) and its desired.json."""

import json
import os
import shutil
import time

import pytest

from kvprov.errors import EXIT_USAGE
from kvprov.validate import bundle as bf
from kvprov.validate.bundle import Bundle, Desired, DesiredError, FileProblem
from tests.conftest import FIXTURES

LAB = FIXTURES / "bundles" / "lab_gpu1"


@pytest.fixture
def lab(tmp_path):
    """A writable copy of the good lab bundle."""
    dest = tmp_path / "kvlab-gpu1"
    shutil.copytree(LAB, dest, symlinks=True)
    return dest


def problem(b: Bundle, name: str, how=lambda b, n: b.text(n)) -> FileProblem:
    with pytest.raises(FileProblem) as e:
        how(b, name)
    return e.value


def test_reads_text_and_json():
    b = Bundle(LAB)
    assert "10.99.1.1:/kv" in b.text(bf.MOUNTINFO)
    assert b.json_object(bf.IO_PROBE)["ok"] is True
    assert b.exists(bf.MOUNTSTATS) and not b.exists(bf.GDSCHECK)


def test_missing_file_says_what_the_collector_said():
    e = problem(Bundle(LAB), bf.GDSCHECK)
    assert e.missing
    assert str(e) == "gdscheck.txt: missing from the bundle (the collector said: skipped: no NVIDIA GPU)"
    assert "kvprov collect" in e.fix


def test_symlinked_file_is_never_followed(lab):
    (lab / bf.MODULES).unlink()
    os.symlink("/proc/modules", lab / bf.MODULES)
    e = problem(Bundle(lab), bf.MODULES)
    assert "is a symlink (to '/proc/modules')" in e.reason and "never follows" in e.reason
    assert not e.missing and Bundle(lab).exists(bf.MODULES)


def test_symlinked_directory_in_the_path_is_never_followed(lab):
    shutil.rmtree(lab / "files/etc/kvprov")
    os.symlink("/etc", lab / "files/etc/kvprov")
    e = problem(Bundle(lab), "files/etc/kvprov/nixl_backend_config.toml")
    assert "files/etc/kvprov is a symlink (to '/etc')" in e.reason


def test_a_symlink_to_a_file_inside_the_bundle_is_refused_too(lab):
    (lab / bf.PACKAGES).unlink()
    os.symlink("proc/modules", lab / bf.PACKAGES)
    assert "symlink" in problem(Bundle(lab), bf.PACKAGES).reason


def test_fifo_is_not_opened(lab):
    (lab / bf.RDMA_LINK).unlink()
    os.mkfifo(lab / bf.RDMA_LINK)
    start = time.monotonic()
    e = problem(Bundle(lab), bf.RDMA_LINK)
    assert "not a regular file" in e.reason
    assert time.monotonic() - start < 2  # no writer would ever come: opening it would block


def test_huge_file_is_not_read(lab):
    os.truncate(lab / bf.MOUNTSTATS, 1 << 30)  # 1 GiB, sparse
    start = time.monotonic()
    e = problem(Bundle(lab), bf.MOUNTSTATS)
    assert "1073741824 bytes, more than the 64 MiB limit" in e.reason
    assert time.monotonic() - start < 1


def test_limits_per_file(lab):
    (lab / bf.HEALTH).write_text(" " * (bf.MiB + 1))
    assert "1 MiB limit" in problem(Bundle(lab), bf.HEALTH).reason
    (lab / bf.MOUNTINFO).write_text("x" * (2 * bf.MiB))  # within the 16 MiB of mountinfo
    assert len(Bundle(lab).text(bf.MOUNTINFO)) == 2 * bf.MiB


def test_a_directory_where_a_file_belongs(lab):
    (lab / bf.GPU).unlink()
    (lab / bf.GPU).mkdir()
    assert problem(Bundle(lab), bf.GPU).reason == "is a directory, not a file"
    assert problem(Bundle(lab), "proc/modules/x").reason == "proc/modules is not a directory"


def test_binary_and_bad_json(lab):
    (lab / bf.MOUNTSTATS).write_bytes(b"device \x00\xff\xfe")
    assert "binary data" in problem(Bundle(lab), bf.MOUNTSTATS).reason
    (lab / bf.IO_PROBE).write_text('{"ok": tr')
    assert "not valid JSON (Expecting value at line 1 column 8)" in problem(Bundle(lab), bf.IO_PROBE,
                                                                          lambda b, n: b.json(n)).reason
    (lab / bf.NIXL_PROBE).write_text("[" * 200000 + "]" * 200000)
    assert "nested too deeply" in problem(Bundle(lab), bf.NIXL_PROBE, lambda b, n: b.json(n)).reason
    (lab / bf.GPU).write_text('{"present": ' + "9" * 5000 + "}")
    assert "not valid JSON" in problem(Bundle(lab), bf.GPU, lambda b, n: b.json(n)).reason
    (lab / bf.HEALTH).write_text("[1, 2]")
    assert "must hold a JSON object, holds list" in problem(Bundle(lab), bf.HEALTH,
                                                            lambda b, n: b.json_object(n)).reason


def test_invalid_utf8_text_is_read_with_replacement(lab):
    (lab / bf.PACKAGES).write_bytes(b"caf\xe9\t1.0\n")
    assert Bundle(lab).text(bf.PACKAGES) == "caf\ufffd\t1.0\n"


@pytest.mark.parametrize("name", ["../desired.json", "/etc/passwd", "files//etc", "proc/./modules", ""])
def test_names_that_leave_the_bundle_are_refused(name):
    assert "not a plain relative name" in problem(Bundle(LAB), name).reason


def test_paths_and_unit_names_from_desired_json_are_checked():
    assert bf.live_file("/etc/kvprov/x.toml") == "files/etc/kvprov/x.toml"
    assert bf.live_file("/etc/../etc/cufile.json") == "files/etc/cufile.json"
    for bad in ("etc/passwd", "", "//server/share"):
        with pytest.raises(FileProblem, match="not an absolute path"):
            bf.live_file(bad)
    assert bf.systemctl_file("mnt-kvcache.mount") == "systemctl/mnt-kvcache.mount.txt"
    for bad in ("../../etc/passwd", "", ".hidden"):
        with pytest.raises(FileProblem, match="not a systemd unit name"):
            bf.systemctl_file(bad)
    assert bf.unit_file("kvprov-sglang-main.service") == "files/etc/systemd/system/kvprov-sglang-main.service"


def test_in_memory_bundle_gives_the_same_answers():
    b = Bundle(files={bf.IO_PROBE: '{"ok": true}', bf.MOUNTSTATS: b"x" * 10})
    assert b.json(bf.IO_PROBE) == {"ok": True}
    assert problem(b, bf.GPU).missing
    big = Bundle(files={bf.GPU: "x" * (bf.MiB + 1)})
    assert "1 MiB limit" in problem(big, bf.GPU).reason


def test_problems_are_cached_once():
    b = Bundle(LAB)
    first = problem(b, bf.GDSCHECK)
    assert problem(b, bf.GDSCHECK) is first


# ---------------------------------------------------------------------------- desired.json

def lab_desired() -> dict:
    return json.loads((LAB / bf.DESIRED).read_text())


def test_desired_round_trip():
    d = Desired.from_dict(lab_desired())
    assert d.host == "kvlab-gpu1" and d.transport == "rdma" and d.pnfs_layout == "block"
    assert d.source == "10.99.1.1:/kv" and d.mount_unit == "mnt-kvcache.mount" and d.nixl_backend == "POSIX"
    assert d.mount_options[-1] == "_netdev" and d.instances[0].unit == "kvprov-sglang-main.service"
    assert d.to_dict() == lab_desired()
    assert Desired.from_dict(d.to_dict()) == d


def test_write_desired(tmp_path):
    d = Desired.from_dict(lab_desired())
    path = bf.write_desired(tmp_path / "out" / "kvlab-gpu1", d)
    assert path.name == "desired.json"
    assert bf.load_desired(Bundle(path.parent)) == d


def test_desired_lists_every_problem():
    data = lab_desired()
    del data["storage"]["server"]
    data["storage"]["pnfs_layout"] = "flexfiles"
    data["gds"]["allow_compat_mode"] = "false"
    data["engine"]["instances"][0]["port"] = "8000"
    data["engine"]["name"] = "sglang"
    with pytest.raises(DesiredError) as e:
        Desired.from_dict(data)
    assert e.value.problems == [
        "storage.server: missing",
        "storage.pnfs_layout: 'flexfiles' is not one of files, block, none",
        'gds.allow_compat_mode: must be a boolean, got "false"',
        "engine.name: 'sglang' is not one of sglang_hicache, vllm_offload, lmcache_mp, lmcache_inproc, vllm_baseline",
        "engine.instances: [0].port: must be an integer"]
    assert e.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("data, fragment", [
    ([], "must be a JSON object"),
    ({**lab_desired(), "format": 4}, "format: 4; this kvprov reads bundle format 3 (a newer kvprov wrote it: upgrade"),
    ({**lab_desired(), "format": 2}, "format: 2; this kvprov reads bundle format 3"),  # format 2 without "sglang"
    ({**lab_desired(), "storage": "nfs"}, "storage.profile: missing"),
    ({**lab_desired(), "engine": {**lab_desired()["engine"], "instances": [{"name": "x"}]}}, "exactly the keys"),
    ({**{k: v for k, v in lab_desired().items() if k != "engine"}, "format": 2,
      "sglang": {"user": "s", "install": True, "instances": [{"name": "x"}]}}, "exactly the keys"),
    ({**lab_desired(), "engine": {**lab_desired()["engine"], "name": None}}, "engine.name"),
    ({**lab_desired(), "engine": {**lab_desired()["engine"], "instances": [
        {**lab_desired()["engine"]["instances"][0], "lmcache_port": "8100"}]}},
     "[0].lmcache_port: must be an integer or null"),
    ({**lab_desired(), "engine": {**lab_desired()["engine"], "instances": [
        {**lab_desired()["engine"]["instances"][0], "units": [1]}]}}, "[0].units: must be a list of strings"),
])
def test_desired_shapes(data, fragment):
    with pytest.raises(DesiredError, match=None) as e:
        Desired.from_dict(data)
    assert fragment in str(e.value)


def test_load_desired_when_missing_or_garbage(tmp_path):
    with pytest.raises(DesiredError, match="missing from the bundle; the bundle cannot be validated"):
        bf.load_desired(Bundle(tmp_path))
    (tmp_path / bf.DESIRED).write_bytes(b"\x00\x01")
    with pytest.raises(DesiredError, match="binary data"):
        bf.load_desired(Bundle(tmp_path))


# Each pair checked against `systemd-escape --path` (systemd 252).
@pytest.mark.parametrize("path, unit", [("/mnt/kvcache", "mnt-kvcache"), ("/mnt/kv-cache/", "mnt-kv\\x2dcache"),
                                        ("/", "-"), ("/srv/kv cache", "srv-kv\\x20cache"), ("/.kv", "\\x2ekv"),
                                        ("/data/.kv", "data-.kv"), ("//a//b", "a-b"), ("/mnt/kv_c:1", "mnt-kv_c:1"),
                                        ("/mnt/\u00fc", "mnt-\\xc3\\xbc")])
def test_systemd_escape_path(path, unit):
    assert bf.systemd_escape_path(path) == unit


def test_format_2_desired_of_an_older_kvprov_still_reads():
    """Bundles captured before there was more than one engine had an SGLang-only section."""
    old = lab_desired()
    engine = old.pop("engine")
    old["format"] = 2
    old["sglang"] = {"user": engine["user"], "install": engine["install"],
                     "instances": [{k: i[k] for k in ("name", "unit", "storage_dir", "port")}
                                   for i in engine["instances"]]}
    d = Desired.from_dict(old)
    assert d == Desired.from_dict(lab_desired())
    assert d.engine == "sglang_hicache" and d.instances[0].units == ("kvprov-sglang-main.service",)


# ---------------------------------------------------------------------------- --inventory

def _inventory_of(bundle_dir, edit=lambda d: None) -> dict:
    """{host: desired} as kvprov.desired.load gives it, from a bundle's desired.json (edited)."""
    d = json.loads((bundle_dir / bf.DESIRED).read_text())
    edit(d)
    return {d["host"]: d}


def _results(path, inventory):
    from kvprov.validate.evaluate import evaluate_bundle
    return {r.id: r for r in evaluate_bundle(path, inventory, "inv.yml")}


def test_a_bundle_that_agrees_with_the_inventory_passes_bundle_desired(lab):
    r = _results(lab, _inventory_of(lab))
    assert (r["bundle.desired"].status, r["bundle.desired"].found) == ("pass", "desired.json agrees with inv.yml")
    assert r["summary"].status == "pass" and r["bundle.desired"].host == "kvlab-gpu1"


def test_the_checks_follow_the_inventory_not_the_bundle(lab):
    def secret_and_layout(d):
        d["storage"]["pnfs_layout"] = "files"
        toml = "/etc/kvprov/nixl_backend_config.toml"
        d["files"][toml]["content"] += "access_key = \"never-shown\"\n"
    r = _results(lab, _inventory_of(lab, secret_and_layout))
    assert r["bundle.desired"].status == "fail"
    assert r["bundle.desired"].found == ("desired.json disagrees with inv.yml: storage.pnfs_layout files (inventory) vs "
                                         "block (bundle); files./etc/kvprov/nixl_backend_config.toml: content differs")
    assert r["mount.pnfs_layout"].status == "fail"  # judged against the inventory's layout


def test_an_unusable_desired_json_is_judged_against_the_inventory(lab):
    inventory = _inventory_of(lab)
    (lab / bf.DESIRED).write_text("{broken")
    r = _results(lab, inventory)
    assert r["bundle.desired"].status == "fail" and "desired.json is unusable (desired.json: " in r["bundle.desired"].found
    assert r["mount.transport"].status == "pass" and r["summary"].host == "kvlab-gpu1"


def test_a_host_not_in_the_inventory_is_refused(lab):
    from kvprov.validate.evaluate import evaluate_bundle
    with pytest.raises(Exception) as e:
        evaluate_bundle(lab, {"gpu-b07": {}}, "inv.yml")
    assert e.value.exit_code == EXIT_USAGE
    assert "host kvlab-gpu1 is not a GPU node of inv.yml (its gpu_nodes: gpu-b07)" in str(e.value)
