"""mount.lookupcache on the gpu_a01 bundle with its instance directories and the live
lookupcache edited: another host's KV file must not be hidden by a cached miss."""

import json

import pytest

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, SKIP
from tests.conftest import FIXTURES

MOUNTINFO_OPTS = "local_lock=none,write=eager,addr=192.168.10.11"
FIX = ("set kvprov_storage_lookupcache: positive (the default) and remount: kvprov deploy INVENTORY --limit "
       "gpu-a01.corp.example.com --tags kvcache_mount --allow-remount")


def lookupcache(live: str | None, dirs: dict[str, str] | None = None, profile: str | None = None,
                engine: str | None = None):
    root = FIXTURES / "bundles" / "gpu_a01"
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    if live is not None:
        files["proc/mountinfo"] = files["proc/mountinfo"].replace(
            MOUNTINFO_OPTS.encode(), f"{MOUNTINFO_OPTS},lookupcache={live}".encode())
    desired = json.loads(files["desired.json"])
    for inst in desired["engine"]["instances"]:
        inst["storage_dir"] = (dirs or {}).get(inst["name"], inst["storage_dir"])
    if profile:
        desired["storage"]["profile"] = profile
    if engine:
        desired["engine"]["name"] = engine
    files["desired.json"] = json.dumps(desired).encode()
    b = Bundle(files=files)
    [r] = [r for r in ev.evaluate(b, bf.load_desired(b)) if r.id == "mount.lookupcache"]
    return r.status, r.found, r.fix


def test_per_host_directories_need_no_lookup_revalidation():
    assert lookupcache(None) == (
        PASS, "lookupcache=all; only this host writes /mnt/kvcache/gpu-a01.corp.example.com/gpu0-3, "
              "/mnt/kvcache/gpu-a01.corp.example.com/gpu4-7 (below /mnt/kvcache/gpu-a01.corp.example.com)", "")


@pytest.mark.parametrize("live", ["pos", "none"])
def test_positive_or_none_passes_even_for_a_shared_directory(live):
    status, found, _ = lookupcache(live, {"gpu0-3": "/mnt/kvcache/shared"})
    assert (status, found.split(":")[0]) == (PASS, f"lookupcache={live}")


def test_a_shared_directory_with_cached_misses_fails_naming_the_instance():
    status, found, fix = lookupcache(None, {"gpu4-7": "/mnt/kvcache/shared/llama"})
    assert status == FAIL
    assert found.startswith("lookupcache=all (the kernel's default when none is shown): instance gpu4-7 "
                            "(/mnt/kvcache/shared/llama) may be written by other hosts")
    assert "gpu0-3" not in found
    assert fix == FIX


def test_a_sibling_host_name_prefix_is_not_this_hosts_directory():
    # /mnt/kvcache/gpu-a01.corp.example.com2 is another host's, not below this host's directory
    status, found, _ = lookupcache(None, {"gpu0-3": "/mnt/kvcache/gpu-a01.corp.example.com2/x"})
    assert status == FAIL and "gpu0-3" in found


def test_no_kv_files_on_the_mount_or_no_nfs_skips():
    assert lookupcache(None, {"gpu0-3": "", "gpu4-7": ""}, engine="vllm_baseline") == (
        SKIP, "engine vllm_baseline keeps no KV files on /mnt/kvcache", "")
    assert lookupcache(None, {"gpu0-3": "/data/kv", "gpu4-7": "/data/kv2"})[0] == SKIP
    assert lookupcache(None, profile="local")[0] == SKIP
