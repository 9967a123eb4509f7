"""What every check reads through the Context, on the fixture bundles with one capture edited:
the required fields of io_probe.json, gpu.json and nixl_probe.json, the defaults of the optional
ones, storage_dirs.json's entries, a mount point written with a trailing slash, unit names, the
check registry (categories, checks still callable), and evaluate_bundle against an inventory."""

import dataclasses
import json

import pytest

from kvprov.errors import KvprovError
from kvprov.validate import bundle as bf
from kvprov.validate import context
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle, FileProblem
from kvprov.validate.checks import bundle as bundle_checks
from kvprov.validate.checks.engine import engine_health
from kvprov.validate.checks.mount import mount_present
from kvprov.validate.collect import _safe_name
from kvprov.validate.context import CHECKS, INSTANCE_CHECKS, Context, run_check, under
from kvprov.validate.result import FAIL, PASS, Result
from tests.conftest import FIXTURES


def files_of(name: str) -> dict:
    root = FIXTURES / "bundles" / name
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


GPU_HOST = files_of("gpu_a01")
LOCAL = files_of("local_c1")


def results(files: dict) -> dict:
    b = Bundle(files=files)
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b))}


def one_check(files: dict, check_id: str) -> Result:
    """The result of one check of a bundle, run as evaluate runs it (the others are not run)."""
    b = Bundle(files=files)
    c = Context(b, bf.load_desired(b))
    for cid, category, fn in CHECKS:
        if cid == check_id:
            return run_check(cid, category, lambda: fn(c))
    _, name, suffix = check_id.split(".")
    inst = next(i for i in c.d.instances if i.name == name)
    fn = dict(INSTANCE_CHECKS)[suffix]
    return run_check(check_id, "engine", lambda: fn(c, inst))


def with_json(files: dict, name: str, drop=(), **values) -> dict:
    data = json.loads(files[name])
    data.update(values)
    for key in drop:
        del data[key]
    return {**files, name: json.dumps(data).encode()}


# ---------------------------------------------------------------------------- required and optional fields

def test_required_fields_missing_fail_the_check_that_reads_them():
    r = results(with_json(GPU_HOST, bf.IO_PROBE, drop=("ok",)))["mount.io_probe"]
    assert (r.status, r.found) == (FAIL, "io_probe.json: has no 'ok'")
    r = results(with_json(GPU_HOST, bf.GPU, drop=("present",)))["gds.gpu"]
    assert (r.status, r.found) == (FAIL, "gpu.json: has no 'present'")
    r = results(with_json(GPU_HOST, bf.NIXL_PROBE, drop=("import_ok",)))["nixl.import"]
    assert (r.status, r.found) == (FAIL, "nixl_probe.json: has no 'import_ok'")


def test_io_probe_that_did_not_time_out_is_a_failed_write_not_a_hang():
    io = {"ok": False, "error": "Permission denied", "seconds": 0.01, "bytes": None}
    r = results({**GPU_HOST, bf.IO_PROBE: json.dumps(io).encode()})["mount.io_probe"]
    assert (r.status, r.found) == (FAIL, "the write/read failed: Permission denied")
    r = results({**GPU_HOST, bf.IO_PROBE: json.dumps({**io, "timed_out": True}).encode()})["mount.io_probe"]
    assert (r.status, r.found) == (FAIL, "the storage does not answer (no answer within 0.01 s); the KV tier is "
                                         "degraded: the engines serve without it until the server answers again")


def test_nixl_backend_not_reported_created_is_a_failure():
    r = results(with_json(GPU_HOST, bf.NIXL_PROBE, drop=("backend_ok",)))["nixl.backend"]
    assert (r.status, r.found) == (FAIL, "creating GDS_MT failed: no error given")


def test_unparseable_nixl_toml_names_the_nixl_role():
    r = results({**GPU_HOST, "files/etc/kvprov/nixl_backend_config.toml": b"[plugin.gds_mt\n"})["nixl.config"]
    assert r.status == FAIL
    assert r.found.startswith("files/etc/kvprov/nixl_backend_config.toml: unusable: not valid TOML")
    assert r.fix == "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags nixl"


def test_storage_dirs_without_the_mount_point_entry():
    r = results(with_json(LOCAL, bf.STORAGE_DIRS, drop=("mount_point",)))["mount.local_dir"]
    assert (r.status, r.found) == (FAIL, "storage_dirs.json: has no mount_point entry (an object)")


def test_local_profile_judges_the_directory_lexically_when_the_collector_did_not_say():
    data = json.loads(LOCAL[bf.STORAGE_DIRS])
    entry = data["instances"]["main"]
    del entry["is_on_kv_mount"]
    r = results({**LOCAL, bf.STORAGE_DIRS: json.dumps(data).encode()})["engine.main.storage_dir"]
    assert r.status == PASS
    entry["path"] = "/var/lib/kvcache/main"
    r = results({**LOCAL, bf.STORAGE_DIRS: json.dumps(data).encode()})["engine.main.storage_dir"]
    assert r.status == FAIL and r.found.startswith("/var/lib/kvcache/main is on ")


def test_a_mount_point_with_a_trailing_slash_finds_the_mount_and_its_stats():
    desired = json.loads(GPU_HOST[bf.DESIRED])
    desired["storage"]["mount_point"] = "/mnt/kvcache/"
    rs = results({**GPU_HOST, bf.DESIRED: json.dumps(desired).encode()})
    assert rs["mount.present"].status == PASS
    assert (rs["mount.transport"].status, rs["mount.pnfs_layout"].status) == (PASS, PASS)


# ---------------------------------------------------------------------------- names and paths

def test_under_is_lexical_and_exact_on_each_component():
    assert under("/srv/kvX/a", "/srv/kvX") and under("/srv/kvX", "/srv/kvX/")
    assert not under("/srv/kvXY", "/srv/kvX")
    assert under("/anything", "/")


def test_unit_names_are_checked_before_the_unit_file_is_looked_up():
    b = Bundle(files=GPU_HOST)
    c = Context(b, bf.load_desired(b))
    with pytest.raises(FileProblem, match="'../kvprov-sglang-gpu0-3.service' is not a systemd unit name"):
        c.unit_text("../kvprov-sglang-gpu0-3.service", "engine")


# ---------------------------------------------------------------------------- the registry, evaluate_bundle

def test_one_check_alone_gives_what_the_whole_evaluation_gives():
    for files in (GPU_HOST, LOCAL):
        for r in list(results(files).values())[:-1]:  # all but the summary
            alone = one_check(files, r.id)
            assert (alone.id, alone.category, alone.status, alone.found) == (r.id, r.category, r.status, r.found)


def test_each_result_is_in_the_category_its_id_starts_with():
    rs = results(GPU_HOST)
    assert {r.id: r.category for r in rs.values()} == {k: k.split(".")[0] for k in rs}
    assert {cid.split(".")[0] for cid, _, _ in CHECKS} <= {"bundle", "mount", "rdma", "gds", "nixl", "packages"}


def test_a_registered_check_can_still_be_called_on_its_own():
    b = Bundle(files=GPU_HOST)
    c = Context(b, bf.load_desired(b))
    r = mount_present(c)
    assert (r.status, r.found) == (PASS, "192.168.10.11:/kvcache_vol1 (nfs4)")
    r = engine_health(c, c.d.instances[0])
    assert (r.status, r.found) == (PASS, "GET http://127.0.0.1:8000/health: 200")


def test_evaluate_bundle_against_an_inventory_keeps_every_check():
    root = FIXTURES / "bundles/gpu_a01"
    desired = json.loads((root / bf.DESIRED).read_text())
    plain = ev.evaluate_bundle(root)
    judged = ev.evaluate_bundle(root, {desired["host"]: desired}, "inventory/site.yml")
    assert [r.id for r in judged] == ["bundle.desired"] + [r.id for r in plain]
    assert judged[0].found == "desired.json agrees with inventory/site.yml"


def test_evaluate_bundle_of_a_host_the_inventory_does_not_have():
    root = FIXTURES / "bundles/gpu_a01"
    with pytest.raises(KvprovError) as e:
        ev.evaluate_bundle(root, {})
    assert str(e.value).endswith("host gpu-a01.corp.example.com is not a GPU node of  (its gpu_nodes: none)")


def test_a_managed_files_mode_difference_is_shown_its_content_never():
    desired = bf.load_desired(Bundle(FIXTURES / "bundles/gpu_a01"))
    first = desired.files[0]
    other = dataclasses.replace(desired, files=(dataclasses.replace(first, mode="0600", content="secret"),
                                                *desired.files[1:]))
    assert bundle_checks.desired_differences(other, desired) == [
        f"files.{first.path}: content differs", f"files.{first.path}.mode {first.mode} (inventory) vs 0600 (bundle)"]


def test_collector_names_are_kept_whatever_letter_they_end_in():
    assert _safe_name("files/etc/X11/Xwrapper.configX") == "files/etc/X11/Xwrapper.configX"
    assert _safe_name("files/etc/X11/") == "files/etc/X11"


def test_collect_json_formats_this_kvprov_reads():
    assert results(with_json(GPU_HOST, bf.COLLECT, format=4))["bundle.collect"].status == PASS
    r = results(with_json(GPU_HOST, bf.COLLECT, format=5))["bundle.collect"]
    assert (r.status, r.found) == ("warn", "format 5 (this kvprov reads 2, 3, 4)")


def test_the_typed_captures_hold_what_the_files_say():
    b = Bundle(files=GPU_HOST)
    c = Context(b, bf.load_desired(b))
    assert c.gpu() == context.Gpu(True, "550.90.07", 8)
    assert c.nixl_probe() == context.NixlProbe(True, "1.5.1", ["GDS", "GDS_MT", "OBJ", "POSIX", "UCX"], "GDS_MT", True,
                                               None)
    io = {"ok": True, "timed_out": False, "seconds": 0.25, "error": "slow", "bytes": 4096}
    c = Context(Bundle(files={**GPU_HOST, bf.IO_PROBE: json.dumps(io).encode()}), c.d)
    assert c.io() == context.IoProbe(True, False, 0.25, "slow", 4096)
    bare = {bf.GPU: b'{"present": false}', bf.NIXL_PROBE: b'{"import_ok": false, "error": "no module"}',
            bf.IO_PROBE: b'{"ok": false}'}
    c = Context(Bundle(files={**GPU_HOST, **bare}), c.d)
    assert c.gpu() == context.Gpu(False, None, None)
    assert c.nixl_probe() == context.NixlProbe(False, None, None, None, False, "no module")
    assert c.io() == context.IoProbe(False, False, None, None, None)


def test_checks_that_do_not_apply_to_a_local_directory_expect_nothing():
    rs = results(LOCAL)
    for check_id in ("mount.present", "rdma.module"):
        assert (rs[check_id].status, rs[check_id].expected) == ("skip", "")
