"""LMCache tiers that persist (issue #23, item 2), and no pool file orphaned by a restart.

LMCache 0.5.6's fs_native, fs and nixl_store_dynamic L2 adapters (MP mode) and its FS
connector (in-process) find a key by its file, so what they stored survives a restart. The
static pools (MP nixl_store, in-process nixl) keep their index in memory and create new pool
files obj_<i>_<4 hex>.bin at every start without removing the old ones: the unit's
ExecStartPre removes them first. Here: what `kvprov render` writes for each tier, the engine's
own parser on it (tests/engine_parse.py in the engine venv), the rendered ExecStartPre run on a
real directory, and a real LMCache MP server (CPU, nixl_store with NIXL POSIX) started three
times with the unit's ExecStartPre before each start."""

from __future__ import annotations

import getpass
import json
import os
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.required import engine_missing
from tests.stall_dir import stall_dir
import yaml

from kvprov.validate import parsers
from tests.conftest import ROOT, kvprov
from tests.unit.test_check_host_values import problems
from tests.unit.test_engine_parsers import ENGINE_PY, SCRIPT

UNITS = "etc/systemd/system"
POOL_FILE = re.compile(r"obj_[0-9]+_[0-9a-f]+\.bin")
# One host per tier, from the lab engine inventory (on the local profile: fs_native is refused on NFS).
HOSTS = {
    "mp-fsn": {"kvprov_lmcache_mp_l2_type": "fs_native"},  # the shared namespace (the default)
    "mp-fsn-own": {"kvprov_lmcache_mp_l2_type": "fs_native", "kvprov_engine_storage_sharing": "instance"},  # its own
    "mp-fs": {},  # fs, the default
    "mp-nixl": {"kvprov_lmcache_mp_l2_type": "nixl_store", "kvprov_lmcache_mp_l1_size_gb": 0.25,
                "kvprov_lmcache_mp_nixl_pool_size": 4, "kvprov_lmcache_mp_nixl_file_size": 1 << 20,
                "kvprov_lmcache_mp_l2_size_gb": 0},
    "mp-dyn": {"kvprov_lmcache_mp_l2_type": "nixl_store_dynamic", "kvprov_lmcache_mp_nixl_use_direct_io": True},
    "in-fs": {"kvprov_engine": "lmcache_inproc"},
    "in-fsd": {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_use_direct_io": True},
    "in-disk": {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "local_disk"},
    "in-nixl": {"kvprov_engine": "lmcache_inproc", "kvprov_lmcache_inproc_tier": "nixl",
                "kvprov_lmcache_inproc_use_direct_io": True},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    inv = yaml.safe_load((ROOT / "inventory/lab-engine.yml").read_text())
    group = inv["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]
    group["vars"].pop("kvprov_lmcache_mp_l2_type")
    group["hosts"] = HOSTS
    path = tmp_path_factory.mktemp("inv") / "tiers.yml"
    path.write_text(yaml.safe_dump(inv))
    out = tmp_path_factory.mktemp("render")
    kvprov("render", str(path), "--out", str(out), check=True)
    return out


def argv_of(path: Path, key: str = "ExecStart") -> list[str]:
    return parsers.exec_argv(parsers.unit_value(parsers.parse_unit(path.read_text()), "Service", key), from_show=False)


def l2_adapter(rendered: Path, host: str) -> dict:
    argv = argv_of(rendered / host / UNITS / "kvprov-lmcache-main.service")
    return json.loads(argv[argv.index("--l2-adapter") + 1])


def inproc_yaml(rendered: Path, host: str) -> dict:
    return yaml.safe_load((rendered / host / "etc/kvprov/lmcache-main.yaml").read_text())


# ---------------------------------------------------------------- what is rendered

def test_the_default_mp_l2_is_fs_native_with_its_capacity_and_eviction_block_in_its_own_directory(rendered):
    """fs_native and fs come inside kvprov's fail-open adapter (LMCache's `plugin` type). In an
    instance's own directory the eviction block is on the outer adapter, where LMCache's parser
    reads it, and on the inner one, whose parser otherwise warns that nothing bounds the directory.
    In a shared namespace neither the capacity nor the eviction block is written (#37): LMCache
    0.5.6 counts only what its own process stored, so it would delete the files other hosts hit
    first; kvprov's evictor bounds the namespace."""
    eviction = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}
    failopen = {"lookup_timeout_s": 2.0, "probe_timeout_s": 2.0, "probe_interval_s": 5.0}
    l2 = l2_adapter(rendered, "mp-fsn-own")
    inner = l2["adapter_params"].pop("inner")
    assert inner.pop("base_path") == "/srv/kvcache/mp-fsn-own/main"  # the instance's own directory
    assert l2 == {"type": "plugin", "module_path": "kvprov_l2_failopen", "class_name": "FailOpenL2Adapter",
                  "adapter_params": failopen, "eviction": eviction}
    assert inner == {"type": "fs_native", "use_odirect": False, "max_capacity_gb": 100.0, "eviction": eviction,
                     "relative_tmp_dir": ".tmp-mp-fsn-own-main"}
    l2 = l2_adapter(rendered, "mp-fsn")
    inner = l2["adapter_params"].pop("inner")
    # the shared namespace's subdirectory for this host's key, which systemd expands from kvprov-kv-key's
    # kv.env at each start (tests/unit/test_kv_key.py)
    assert inner.pop("base_path") == "${KVPROV_KV_DIR}"
    assert "/srv/kvcache/kv/lmcache_mp/" in (rendered / "mp-fsn" / UNITS / "kvprov-lmcache-main.service").read_text()
    assert l2 == {"type": "plugin", "module_path": "kvprov_l2_failopen", "class_name": "FailOpenL2Adapter",
                  "adapter_params": failopen}
    assert inner == {"type": "fs_native", "use_odirect": False, "relative_tmp_dir": ".tmp-mp-fsn-main"}
    fs = l2_adapter(rendered, "mp-fs")
    fs_inner = fs["adapter_params"].pop("inner")
    assert fs_inner == {"type": "fs", "base_path": fs_inner["base_path"], "relative_tmp_dir": ".tmp-mp-fs-main"}
    assert fs == {"type": "plugin", "module_path": "kvprov_l2_failopen", "class_name": "FailOpenL2Adapter",
                  "adapter_params": failopen}
    # the server loads it from kvprov's root-owned directory
    unit = (rendered / "mp-fsn" / UNITS / "kvprov-lmcache-main.service").read_text()
    assert 'Environment="PYTHONPATH=/usr/local/lib/kvprov-lmcache"' in unit or \
        "Environment=PYTHONPATH=/usr/local/lib/kvprov-lmcache" in unit, unit
    assert (rendered / "mp-fsn" / "usr/local/lib/kvprov-lmcache/kvprov_l2_failopen.py").is_file()
    assert l2_adapter(rendered, "mp-dyn") == {
        "type": "nixl_store_dynamic", "backend": "POSIX",
        "backend_params": {"use_direct_io": "true", "file_path": l2_adapter(rendered, "mp-dyn")["backend_params"]["file_path"]}}
    # the static pool without l2_size_gb: nothing but the pool itself
    assert l2_adapter(rendered, "mp-nixl")["pool_size"] == 4


def test_the_default_inproc_tier_is_lmcaches_fs_connector_and_o_direct_can_be_set(rendered):
    fs, fsd, nixl = (inproc_yaml(rendered, h) for h in ("in-fs", "in-fsd", "in-nixl"))
    assert re.fullmatch(r"fs://localhost:0/srv/kvcache/\S+", fs["remote_url"])
    assert "local_disk" not in fs and "nixl_buffer_device" not in fs
    # temporary files in a directory of the instance's own (the default .tmp name is the same on every host)
    assert fs["extra_config"] == {"fs_connector_relative_tmp_dir": ".tmp-in-fs-main"}
    assert fsd["extra_config"] == {"fs_connector_relative_tmp_dir": ".tmp-in-fsd-main",
                                   "fs_connector_use_odirect": True, "save_chunk_meta": False}
    assert nixl["extra_config"]["use_direct_io"] is True
    assert inproc_yaml(rendered, "in-disk")["local_disk"].startswith("file:///srv/kvcache/")


def test_only_the_static_pools_get_the_pool_cleanup_before_start(rendered):
    def pre(host: str, unit: str) -> str | None:
        text = (rendered / host / UNITS / unit).read_text()
        found = [line for line in text.splitlines() if line.startswith("ExecStartPre=") and "kvprov-kv-key" not in line]
        return found[0] if found else None

    for host in ("mp-fsn", "mp-fs", "mp-dyn"):
        assert pre(host, "kvprov-lmcache-main.service") is None, host
    for host in ("in-fs", "in-fsd", "in-disk"):
        assert pre(host, "kvprov-vllm-main.service") is None, host
    mp = l2_adapter(rendered, "mp-nixl")["backend_params"]["file_path"]
    inproc = inproc_yaml(rendered, "in-nixl")["extra_config"]["nixl_path"].rstrip("/")
    for host, unit, directory in (("mp-nixl", "kvprov-lmcache-main.service", mp),
                                  ("in-nixl", "kvprov-vllm-main.service", inproc)):
        assert pre(host, unit) == (
            f"ExecStartPre=/usr/bin/find -P {directory} -maxdepth 1 -user kvprov-engine -type f "
            '-regextype posix-extended -regex ".*/obj_[0-9]+_[0-9a-f]+[.]bin" -delete'), host  # quoted: a unit word


def test_kvprovs_evictor_goes_where_lmcache_does_not_bound_the_directory(rendered):
    """fs_native's eviction counts only what one run stored (LMCache's usage starts at 0 at every
    start): kvprov's evictor stays for it, for fs and nixl_store_dynamic, and for the in-process fs
    and local_disk tiers; not for the static pools (fixed size, emptied before each start)."""
    def evicts(host: str) -> bool:
        return (rendered / host / UNITS / "kvprov-evict-main.timer").exists()

    assert {h for h in HOSTS if evicts(h)} == {"mp-fsn", "mp-fsn-own", "mp-fs", "mp-dyn", "in-fs", "in-fsd", "in-disk"}


# ---------------------------------------------------------------- LMCache's own parser

def engine_python() -> str:
    if not os.access(ENGINE_PY, os.X_OK):
        engine_missing(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
    return ENGINE_PY


def lmcache_parse(payloads: list[dict]) -> list[dict]:
    r = subprocess.run([engine_python(), str(SCRIPT), "batch"], input=json.dumps(payloads), capture_output=True,
                       text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == len(payloads), r.stderr[-3000:]
    return lines


def test_lmcache_parses_every_rendered_tier_and_its_eviction_block(rendered):
    mp = [h for h in HOSTS if h.startswith("mp-")]
    inproc = [h for h in HOSTS if h.startswith("in-")]
    payloads = [{"kind": "lmcache_server_argv",
                 "argv": (a := argv_of(rendered / h / UNITS / "kvprov-lmcache-main.service"))[a.index("-m") + 2:],
                 "pythonpath": [str(rendered / h / "usr/local/lib/kvprov-lmcache")]}
                for h in mp]
    payloads += [{"kind": "lmcache_yaml", "text": (rendered / h / "etc/kvprov/lmcache-main.yaml").read_text()}
                 for h in inproc]
    verdicts = dict(zip(mp + inproc, lmcache_parse(payloads)))
    assert {h: v["error"] for h, v in verdicts.items() if not v["ok"]} == {}
    adapters = {h: verdicts[h]["parsed"]["l2_adapters"] for h in mp}
    assert {h: [a.get("plugin", a)["config_class"] for a in v] for h, v in adapters.items()} == {
        "mp-fsn": ["FailOpenL2AdapterConfig"], "mp-fsn-own": ["FailOpenL2AdapterConfig"], "mp-fs": ["FailOpenL2AdapterConfig"],
        "mp-nixl": ["NixlStoreL2AdapterConfig"], "mp-dyn": ["DynamicNixlStoreL2AdapterConfig"]}
    assert {h: adapters[h][0]["plugin"]["inner_config_class"] for h in ("mp-fsn", "mp-fs")} == {
        "mp-fsn": "FSNativeL2AdapterConfig", "mp-fs": "FSL2AdapterConfig"}
    assert adapters["mp-fsn"][0]["eviction"] is None  # shared: no eviction controller of LMCache's own
    [fsn] = adapters["mp-fsn-own"]
    assert fsn["plugin"]["inner"]["max_capacity_gb"] == 100.0
    assert (fsn["plugin"]["lookup_timeout_s"], fsn["plugin"]["probe_interval_s"]) == (2.0, 5.0)
    assert {k: fsn["eviction"][k] for k in ("eviction_policy", "trigger_watermark", "eviction_ratio")} == {
        "eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}
    assert verdicts["in-fsd"]["parsed"]["extra_config"]["fs_connector_use_odirect"] is True


def test_without_the_eviction_block_lmcache_parses_no_l2_eviction(rendered):
    """The mutation: the same fs_native adapter without its eviction block, through LMCache's parser:
    accepted, with no eviction config (LMCache then creates no L2EvictionController for it)."""
    argv = argv_of(rendered / "mp-fsn-own" / UNITS / "kvprov-lmcache-main.service")
    argv = argv[argv.index("-m") + 2:]
    i = argv.index("--l2-adapter") + 1
    l2 = json.loads(argv[i])
    del l2["eviction"]
    argv[i] = json.dumps(l2)
    [v] = lmcache_parse([{"kind": "lmcache_server_argv", "argv": argv,
                          "pythonpath": [str(rendered / "mp-fsn-own" / "usr/local/lib/kvprov-lmcache")]}])
    assert v["ok"] and v["parsed"]["l2_adapters"][0]["eviction"] is None, v


# ---------------------------------------------------------------- the pool cleanup on real files

def cleanup_argv(rendered: Path, host: str, unit: str, directory: Path) -> list[str]:
    """The unit's ExecStartPre, with the two host values a test cannot have (the directory on the KV
    mount and the engine user) replaced by a temporary directory and the user running the test."""
    argv = argv_of(rendered / host / UNITS / unit, "ExecStartPre")
    assert argv[:2] == ["/usr/bin/find", "-P"] and argv[argv.index("-user") + 1] == "kvprov-engine"
    argv[2] = str(directory)
    argv[argv.index("-user") + 1] = getpass.getuser()
    return argv


def plant(directory: Path, n: int) -> set[str]:
    """What one start of the pool does: n new files obj_<i>_<4 hex>.bin (LMCache's names)."""
    names = set()
    for i in range(n):
        name = f"obj_{i}_{secrets.token_hex(2)}.bin"
        (directory / name).write_bytes(b"\0" * 16)
        names.add(name)
    return names


def pool_files(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if POOL_FILE.fullmatch(p.name) and p.is_file() and not p.is_symlink()}


def others(directory: Path, outside: Path) -> dict[str, str]:
    """Everything that must survive, as {path: what it is}."""
    out = {}
    for root in (directory, outside):
        for p in sorted(root.rglob("*")):
            if POOL_FILE.fullmatch(p.name) and p.parent == directory and p.is_file() and not p.is_symlink() \
                    and p.stat().st_uid == os.getuid():
                continue  # the pool's own
            out[str(p)] = "link -> " + os.readlink(p) if p.is_symlink() else ("dir" if p.is_dir() else p.read_text())
    return out


@pytest.mark.parametrize("host,unit", [("mp-nixl", "kvprov-lmcache-main.service"),
                                       ("in-nixl", "kvprov-vllm-main.service")])
def test_the_cleanup_removes_only_the_instances_pool_files_over_three_starts(rendered, tmp_path, host, unit):
    kv, outside = tmp_path / "kv", tmp_path / "outside"
    kv.mkdir()
    outside.mkdir()
    (outside / "obj_0_abcd.bin").write_text("someone else's")
    (kv / "obj_1_abcd.bin.tmp").write_text("not a pool name")
    (kv / "obj_x_abcd.bin").write_text("not a pool name")
    (kv / "obj_2_ABCD.bin").write_text("not LMCache's (upper-case hex)")
    (kv / "prefix_obj_3_abcd.bin").write_text("not a pool name")
    (kv / "sub").mkdir()
    (kv / "sub/obj_4_abcd.bin").write_text("one level down")
    (kv / "obj_5_beef.bin").symlink_to(outside / "obj_0_abcd.bin")   # a link named like a pool file
    (kv / "obj_6_dir").symlink_to(outside)                            # a link to a directory
    (kv / "obj_7_abcd.bin").mkdir()                                   # a directory named like one
    if os.getuid() == 0:
        (kv / "obj_8_abcd.bin").write_text("another user's")
        os.chown(kv / "obj_8_abcd.bin", 65534, 65534)
    keep = others(kv, outside)
    argv = cleanup_argv(rendered, host, unit, kv)

    for start in range(3):
        earlier = plant(kv, 4)
        assert pool_files(kv) >= earlier
        subprocess.run(argv, check=True, timeout=30)  # ExecStartPre, then the engine starts
        assert pool_files(kv) - ({"obj_8_abcd.bin"} if os.getuid() == 0 else set()) == set(), start
        assert others(kv, outside) == keep, start


def test_without_the_cleanup_each_start_orphans_the_whole_pool(tmp_path):
    """What the cleanup is for (and that the count above can fail): three starts, no ExecStartPre."""
    for _ in range(3):
        plant(tmp_path, 4)
    assert len(pool_files(tmp_path)) == 12


# ---------------------------------------------------------------- a real LMCache MP server, three restarts

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(argv: list[str], log: Path, pythonpath: Path | None = None) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "DO_NOT_TRACK": "1", "LMCACHE_TRACK_USAGE": "false", "PYTHONHASHSEED": "0",
           "HOME": str(log.parent)} | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})
    return subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_running(proc: subprocess.Popen, log: Path, kv: Path, pool: int, timeout: float = 180) -> set[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the LMCache server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if "cache server is running" in log.read_text() and len(pool_files(kv)) >= pool:
            return pool_files(kv)
        time.sleep(0.5)
    pytest.fail(f"the LMCache server did not start in {timeout} s:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_three_restarts_of_a_real_lmcache_server_orphan_no_pool_file(rendered, tmp_path):
    python = engine_python()
    if subprocess.run([python, "-c", "import nixl"], capture_output=True, timeout=120).returncode:
        pytest.skip(f"no nixl in the engine venv ({python}): LMCache registers nixl_store only with it")
    kv, outside = tmp_path / "kv", tmp_path / "outside"
    kv.mkdir()
    outside.mkdir()
    (outside / "target").write_text("outside")
    (kv / "obj_9_beef.bin").symlink_to(outside / "target")
    (kv / "notes.txt").write_text("not the pool's")
    keep = others(kv, outside)

    unit = rendered / "mp-nixl" / UNITS / "kvprov-lmcache-main.service"
    argv = argv_of(unit)
    argv = [python] + argv[1:]
    i = argv.index("--l2-adapter") + 1
    l2 = json.loads(argv[i])
    l2["backend_params"]["file_path"] = str(kv)
    argv[i] = json.dumps(l2)
    for flag in ("--port", "--prometheus-port"):
        argv[argv.index(flag) + 1] = str(free_port())
    pool = l2["pool_size"]
    cleanup = cleanup_argv(rendered, "mp-nixl", "kvprov-lmcache-main.service", kv)

    seen = []
    for start in range(3):
        subprocess.run(cleanup, check=True, timeout=30)          # ExecStartPre
        proc = start_server(argv, tmp_path / f"server-{start}.log")
        try:
            files = wait_running(proc, tmp_path / f"server-{start}.log", kv, pool)
        finally:
            stop_server(proc)
        assert len(files) == pool, (start, sorted(files))  # this start's pool and nothing of the earlier ones
        assert not any(files & s for s in seen), start         # new names at every start: they are LMCache's
        seen.append(files)
        assert others(kv, outside) == keep, start
    assert pool_files(kv) == seen[-1]  # after three restarts: one pool, the last run's

    # the same start without the ExecStartPre: the last run's pool stays beside the new one
    proc = start_server(argv, tmp_path / "server-no-cleanup.log")
    try:
        files = wait_running(proc, tmp_path / "server-no-cleanup.log", kv, 2 * pool)
    finally:
        stop_server(proc)
    assert len(files) == 2 * pool and seen[-1] < files


def test_a_real_fs_native_server_starts_while_its_storage_hangs_and_takes_the_tier_when_it_answers(
        rendered, tmp_path):
    """The rendered fs_native adapter (inside kvprov's fail-open adapter, loaded from the rendered
    PYTHONPATH) on a real LMCache MP server (CPU), its directory on a mount whose storage stops
    answering before the server starts (tests/stall_dir.py). LMCache alone builds its adapter in
    StorageManager.__init__ and would wait there; this server starts with the tier bypassed, and once
    the storage answers, makes its directory (a keyed subdirectory kvprov-kv-key named without the
    storage: --when-down keyed), builds the adapter with its L2 eviction controller and makes the
    instance's temporary directory inside it."""
    python = engine_python()
    with stall_dir(tmp_path / "backing", tmp_path / "kv") as stall:
        argv = [python] + argv_of(rendered / "mp-fsn" / UNITS / "kvprov-lmcache-main.service")[1:]
        i = argv.index("--l2-adapter") + 1
        l2 = json.loads(argv[i])
        l2["adapter_params"]["inner"]["base_path"] = str(stall.mount / "fp-0123456789ab")
        argv[i] = json.dumps(l2)
        argv[argv.index("--l1-size-gb") + 1] = "0.25"
        for flag in ("--port", "--prometheus-port"):
            argv[argv.index(flag) + 1] = str(free_port())
        log = tmp_path / "server.log"
        stall.stop()
        proc = start_server(argv, log, pythonpath=rendered / "mp-fsn" / "usr/local/lib/kvprov-lmcache")
        try:
            wait_logged(proc, log, "cache server is running")
            assert "the MP server starts with the KV tier bypassed" in log.read_text()
            assert "Created FS native L2 adapter" not in log.read_text()
            stall.cont()
            wait_logged(proc, log, "KV tier in use")
        finally:
            stop_server(proc)
    text = log.read_text()
    assert "Created FS native L2 adapter" in text and "Starting L2EvictionController" in text, text[-3000:]
    keyed = tmp_path / "backing" / "fp-0123456789ab"
    assert [p.name for p in keyed.iterdir()] == [".tmp-mp-fsn-main"] and (keyed / ".tmp-mp-fsn-main").is_dir()


def wait_logged(proc: subprocess.Popen, log: Path, text: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None:
            pytest.fail(f"the LMCache server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"the LMCache server did not log {text!r} in {timeout} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


@pytest.mark.parametrize("inner", ["fs_native", "fs"])
def test_the_rendered_fail_open_adapter_bounds_each_wait_on_storage_that_stops_answering(rendered, tmp_path, inner):
    """kvprov's fail-open adapter as rendered, around LMCache's own adapter, driven as LMCache's
    controllers drive it (tests/lmcache_failopen_drive.py), on storage that stops answering
    (tests/stall_dir.py; SIGSTOP: calls wait, as on a black-holed server behind a hard mount)."""
    python = engine_python()
    with stall_dir(tmp_path / "backing", tmp_path / "kv") as stall:
        r = subprocess.run([python, str(ROOT / "tests/lmcache_failopen_drive.py")], capture_output=True, text=True,
                           timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                           input=json.dumps({"module_dir": str(rendered / "mp-fsn" / "usr/local/lib/kvprov-lmcache"),
                                             "mount": str(stall.mount), "sftp_pid": stall.server.pid,
                                             "inner_type": inner}))
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.splitlines()[-1])
    print(out)
    # healthy: what is stored is found and loaded byte for byte
    assert out["stored"] and out["healthy_lookup"][0] == [0, 1, 2] and out["status_healthy"] == ["in use", 0]
    assert out["healthy_load"] == [[0, 1, 2], [True, True, True]]
    # stopped: the lookup is answered "nothing there" by its deadline (1 s here), the tier bypassed:
    # later lookups and stores are answered at once, also after probes that wait on the storage
    found, took = out["stalled_lookup"]
    assert found == [] and 1.0 <= took < 10, out
    assert out["status_stalled"] == ["bypassed", 1]  # and on /metrics, for validate
    assert out["bypassed_lookup"][0] == [] and out["still_stalled_lookup"][0] == [] and out["bypassed_store"] is False
    assert out["bypassed_lookup"][1] < 1.0 and out["bypassed_store_s"] < 1.0, out
    # answering again: the tier is in use again, with no restart, and its files load byte for byte
    assert out["recovered_lookup"][0] == [0, 1, 2] and out["recovered_load"] == [[0, 1, 2], [True, True, True]]
    assert out["status_recovered"] == ["in use", 0]
    # built while the storage hangs, its directory (the keyed subdirectory) not made yet: bypassed
    # after the deadline; once the storage answers, the directory is made and the tier is in use
    assert out["stalled_build_s"] < 10 and out["stalled_build_status"] == "bypassed"
    assert out["stalled_build_lookup"][0] == [] and out["stalled_build_recovered_after_s"] < 10, out
    assert out["stalled_build_dir"] and out["stalled_build_stored"]
    assert out["stalled_build_load"] == [[0, 1, 2], [True, True, True]]
    # the control: LMCache's adapter alone did not answer the same lookup in 5 s
    assert out["bare_stalled_lookup_answered"] is False


def test_the_fail_open_adapter_refuses_a_link_in_its_directorys_place(rendered, tmp_path):
    """A writer of the shared volume plants a link where a host's keyed subdirectory goes: the
    rendered adapter never follows it (it stays bypassed, stores nothing, reads nothing), also
    after its probes try to build it again."""
    elsewhere, volume = tmp_path / "elsewhere", tmp_path / "volume"
    elsewhere.mkdir()
    volume.mkdir()
    (volume / "fp-0123456789ab").symlink_to(elsewhere)
    r = subprocess.run([engine_python(), str(ROOT / "tests/lmcache_failopen_drive.py"), "--planted-link"],
                       capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                       input=json.dumps({"module_dir": str(rendered / "mp-fsn" / "usr/local/lib/kvprov-lmcache"),
                                         "mount": str(volume / "fp-0123456789ab"), "inner_type": "fs"}))
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out == {"status": "bypassed", "lookup": [], "stored": False}, out
    assert list(elsewhere.iterdir()) == [] and "is not a directory" in r.stderr, r.stderr[-3000:]


# ---------------------------------------------------------------- kvprov check

def test_check_warns_when_fs_native_is_left_unbounded():
    native = {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "fs_native", "kvprov_storage_profile": "local",
              "kvprov_storage_pnfs_layout": "none"}
    own = {**native, "kvprov_engine_storage_sharing": "instance"}
    assert problems(**own, kvprov_lmcache_mp_l2_size_gb=0) == [
        "warning kvprov_lmcache_mp_l2_size_gb: 0 leaves fs_native without max_capacity_gb and its eviction block: "
        "LMCache never evicts from L2 and only kvprov's evictor (kvprov_engine_evict) bounds the directory; set "
        "the L2 capacity in GB"]
    assert problems(**own, kvprov_lmcache_mp_l2_size_gb=50) == []
    assert problems(**{**own, "kvprov_lmcache_mp_l2_type": "fs"}, kvprov_lmcache_mp_l2_size_gb=0) == []
    # a shared namespace: LMCache's own capacity is not written; kvprov's evictor is what bounds it
    assert problems(**native, kvprov_lmcache_mp_l2_size_gb=0) == []
    assert problems(**native, kvprov_engine_evict="never") == [
        "warning kvprov_engine_evict: never leaves the shared namespace unbounded: fs_native's own eviction is off "
        "there (it counts only what its own process stored and would delete the files other hosts hit first), so "
        "only kvprov's evictor bounds it"]


def test_check_refuses_fs_native_on_nfs_where_a_failed_close_would_publish_a_short_file():
    """LMCache's fs_native renames a file into place whatever close() said; NFS reports a failed write
    (ENOSPC, EIO) at close(). fs (the default) removes the file when close() fails (below)."""
    for profile in ("netapp_pnfs_rdma", "nfs_tcp"):
        for sharing in ("auto", "instance"):
            found = problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type="fs_native",
                             kvprov_storage_profile=profile, kvprov_engine_storage_sharing=sharing,
                             kvprov_lmcache_mp_fs_native_use_odirect=True)
            assert [p for p in found if p.startswith("error kvprov_lmcache_mp_l2_type: fs_native on an NFS")], found
    assert problems(kvprov_engine="lmcache_mp") == []  # fs, the default
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type="fs_native", kvprov_storage_profile="local",
                    kvprov_storage_pnfs_layout="none") == []


def test_check_refuses_an_l1_that_nixl_cannot_register_page_by_page():
    """LMCache 0.5.6 registers the L1 with NIXL in 4 KiB pages: 0.1 GiB (107374182 bytes) ends in a
    partial page and the server dies at start with NIXL_ERR_NOT_FOUND (seen on this machine)."""
    for l2 in ("nixl_store", "nixl_store_dynamic"):
        found = problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type=l2, kvprov_lmcache_mp_l1_size_gb=0.1,
                         kvprov_lmcache_mp_l2_size_gb=0)
        assert found == [
            "error kvprov_lmcache_mp_l1_size_gb: 0.1 GiB is 107374182 bytes, not a multiple of LMCache's 4096-byte "
            f"L1 page: {l2} registers the L1 with NIXL page by page and the server fails at start "
            "(NIXL_ERR_NOT_FOUND in prepXferDlist); use e.g. 0.25"], l2
        assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type=l2, kvprov_lmcache_mp_l1_size_gb=0.25,
                        kvprov_lmcache_mp_l2_size_gb=0) == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l1_size_gb=0.1) == []  # fs_native: no NIXL


def test_check_refuses_an_eviction_fraction_outside_0_1():
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_eviction_watermark=1.5) == [
        "error kvprov_lmcache_mp_l2_eviction_watermark: must be in (0, 1], got 1.5"]
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_eviction_ratio=0) == [
        "error kvprov_lmcache_mp_l2_eviction_ratio: must be in (0, 1], got 0"]


def test_check_refuses_a_remote_url_beside_the_fs_tier_that_writes_it():
    url = {"remote_url": "fs://localhost:0/elsewhere"}
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_config=url) == [
        "error kvprov_lmcache_inproc_config: remote_url kvprov writes it for the fs tier (kvprov_lmcache_inproc_tier: "
        "fs): remove it here or choose another tier"]
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="local_disk",
                    kvprov_lmcache_inproc_config=url) == []



@pytest.mark.parametrize("inner", ["fs", "fs_native"])
def test_a_full_volume_fails_stores_and_publishes_no_partial_file(rendered, tmp_path, inner):
    """The volume full (#37): LMCache's adapter as deployed (inside kvprov's fail-open adapter, as
    rendered) stores 8 chunks of 64 KiB into a 160 KiB file system (tmpfs) reached through FUSE
    (tests/stall_dir.py: sshfs writes asynchronously, so a failed write is reported at close(), as
    on NFS). `fs`, the default, fails the store and publishes only whole chunks, each byte for
    byte; `fs_native` is the control that shows why kvprov check refuses it on NFS."""
    if os.geteuid():
        engine_missing("mounting a small tmpfs needs root")
    python = engine_python()
    backing = tmp_path / "backing"
    backing.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "kvprov-test-full", str(backing)], check=True)
    try:
        with stall_dir(backing, tmp_path / "kv") as stall:
            r = subprocess.run([python, str(ROOT / "tests/lmcache_failopen_drive.py"), "--full"], capture_output=True,
                               text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                               input=json.dumps({"module_dir": str(rendered / "mp-fsn" / "usr/local/lib/kvprov-lmcache"),
                                                 "mount": str(stall.mount), "sftp_pid": stall.server.pid,
                                                 "inner_type": inner}))
        assert r.returncode == 0, r.stderr[-4000:]
        out = json.loads(r.stdout.splitlines()[-1])
        published = {p.name: p.read_bytes() for p in backing.glob("*.data")}
    finally:
        subprocess.run(["umount", str(backing)], check=True)
    print(inner, out, {name: len(data) for name, data in published.items()})
    partial = [name for name, data in published.items() if data not in CHUNKS]
    if inner == "fs":
        assert out["stored"] is False and 0 < len(published) < 8, (out, list(published))  # some fit, not all
        assert partial == [], f"partial chunks published: {partial}"
        assert out["found"] == out["loaded"] and len(out["found"]) == len(published), out  # loads byte for byte
    else:  # the control, why kvprov check refuses fs_native on NFS: it reports the store a success,
        # publishes short files and its lookups find them (LMCache 0.5.6; measured: 8 of 8 found, 2 whole)
        assert out["stored"] is True and partial, (out, partial)
        assert len(out["loaded"]) < len(out["found"]), ("fs_native published no partial file: the refusal in "
                                                        "kvprov/check/engines.py may go", out)


CHUNKS = {bytes([i + 1]) * (64 * 1024) for i in range(8)}  # tests/lmcache_failopen_drive.py's Buffer(i + 1)


# ---------------------------------------------------------------- its request channel: a Unix socket (#38)

PING = """
import sys, zmq
from lmcache.v1.multiprocess.transport.factory import RequestClientFactory
client = RequestClientFactory.create(sys.argv[1], context=zmq.Context.instance())
print("pong" if client.ping(None).result(timeout=30) else "no")
client.close()
"""


def test_a_real_server_binds_its_request_channel_to_the_unix_socket_vllm_is_given_and_no_tcp_port(rendered, tmp_path):
    """The rendered server unit on a real LMCache MP server (CPU): its environment (kvprov's
    sitecustomize.py on PYTHONPATH, KVPROV_LMCACHE_URL) makes LMCache bind its ZMQ request channel
    (which unpickles what clients send) to the ipc:// URL vLLM's connector joins from lmcache.mp.host
    and lmcache.mp.port; the --port a local account could reach over TCP is not listened on. The URL
    points into a directory of the test's (the unit's RuntimeDirectory on a host)."""
    python = engine_python()
    unit = parsers.parse_unit((rendered / "mp-fs" / UNITS / "kvprov-lmcache-main.service").read_text())
    env = parsers.unit_environment(unit)
    client = (rendered / "mp-fs" / UNITS / "kvprov-vllm-main.service").read_text()
    vllm = argv_of(rendered / "mp-fs" / UNITS / "kvprov-vllm-main.service")
    extra = json.loads(vllm[vllm.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    rundir = f"/run/{parsers.unit_value(unit, 'Service', 'RuntimeDirectory')}"
    assert env["KVPROV_LMCACHE_URL"] == f"{extra['lmcache.mp.host']}:{extra['lmcache.mp.port']}" and \
        env["KVPROV_LMCACHE_URL"].startswith(f"ipc://{rundir}/"), (env, extra)
    assert parsers.unit_value(unit, "Service", "RuntimeDirectoryMode") == "0700" and "tcp://" not in client

    argv = [python] + argv_of(rendered / "mp-fs" / UNITS / "kvprov-lmcache-main.service")[1:]
    i = argv.index("--l2-adapter") + 1
    l2 = json.loads(argv[i])
    l2["adapter_params"]["inner"]["base_path"] = str(tmp_path / "kv")
    argv[i] = json.dumps(l2)
    argv[argv.index("--l1-size-gb") + 1] = "0.25"
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--prometheus-port") + 1] = str(free_port())
    (tmp_path / "run").mkdir(mode=0o700)
    url = env["KVPROV_LMCACHE_URL"].replace(f"ipc://{rundir}/", f"ipc://{tmp_path}/run/").rsplit(":", 1)[0] + f":{port}"
    log = tmp_path / "server.log"
    env = {"PATH": "/usr/bin:/bin", "DO_NOT_TRACK": "1", "LMCACHE_TRACK_USAGE": "false", "HOME": str(tmp_path),
           "PYTHONPATH": str(rendered / "mp-fs" / env["PYTHONPATH"].lstrip("/")), "KVPROV_LMCACHE_URL": url}
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_logged(proc, log, "cache server is running")
        assert stat.S_ISSOCK(os.stat(url.removeprefix("ipc://")).st_mode)
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing on the TCP port
        r = subprocess.run([python, "-c", PING, url], capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert r.stdout.split()[-1:] == ["pong"], r.stdout[-2000:] + r.stderr[-3000:]
    finally:
        stop_server(proc)


def test_the_server_refuses_to_start_rather_than_open_its_tcp_port_when_lmcache_is_not_as_expected(rendered, tmp_path):
    """kvprov's sitecustomize.py, imported as the server imports it, on a stand-in of LMCache's module
    (not LMCache: what a changed LMCache would look like): no MessageQueueServer, or one called without a
    tcp:// bind_url, stops the process with kvprov's message; a good call binds the ipc:// URL."""
    site = rendered / "mp-fs" / "usr/local/lib/kvprov-lmcache"
    fake = tmp_path / "fake"
    pkg = fake / "lmcache/v1/multiprocess/transport/zmq_impl"
    pkg.mkdir(parents=True)
    for d in [fake / "lmcache", *[p for p in pkg.parents if fake / "lmcache" in p.parents], pkg]:
        (d / "__init__.py").write_text("")
    cases = [("def MessageQueueServer(bind_url):\n    return bind_url\n", "bind_url='tcp://127.0.0.1:5555'",
              0, "ipc:///run/x/server:5555"),
             ("class Other:\n    pass\n", "bind_url='tcp://127.0.0.1:5555'", 1, "has no MessageQueueServer"),
             ("def MessageQueueServer(url):\n    return url\n", "'tcp://127.0.0.1:5555'", 1, "without a tcp:// bind_url")]
    for source, call, rc, said in cases:
        (pkg / "server.py").write_text(source)
        run = f"import lmcache.v1.multiprocess.transport.zmq_impl.server as s\nprint(s.MessageQueueServer({call}))\n"
        r = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{fake}",
                                "KVPROV_LMCACHE_URL": "ipc:///run/x/server:5555"})
        assert r.returncode == rc and said in (r.stdout + r.stderr), (source, r.stdout, r.stderr)
        assert "refusing to open a TCP port" in r.stderr or rc == 0
    r = subprocess.run([sys.executable, "-c", "import sitecustomize"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "KVPROV_LMCACHE_URL": "tcp://0.0.0.0:1"})
    assert r.returncode == 1 and "not an absolute ipc:// URL" in r.stderr, r.stderr
