"""`kvprov validate` on the vLLM engines (vllm_offload, lmcache_mp, lmcache_inproc): synthetic
bundles made from the lab_gpu1 fixture (its mount, RDMA and NIXL files), whose engine part
(desired.json's engine section, the unit files, `systemctl show`, the running processes'
command lines, /health and /metrics) is rewritten as `kvprov collect` captures it for that
engine. Unit files follow what `kvprov render inventory/example.yml` writes for gpu-c01..c03
(and inventory/lab-engine.yml for lmcache_mp's fs L2), on the lab host's mount."""

import json
import shlex
import shutil
from pathlib import Path

import pytest

from kvprov.validate import evaluate as ev
from kvprov.validate.result import FAIL, PASS
from tests.conftest import FIXTURES

LAB = FIXTURES / "bundles" / "lab_gpu1"
HOST = "kvlab-gpu1"
KV = "/mnt/kvcache"
USER = "kvprov-engine"
PY = "/opt/kvprov/vllm/bin/python3"
ENGINES = ("vllm_offload", "lmcache_mp", "lmcache_inproc")
UNIT_DIR = "files/etc/systemd/system"


def storage_dir(name: str) -> str:
    return f"{KV}/{HOST}/{name}"


def vllm_unit(name: str) -> str:
    return f"kvprov-vllm-{name}.service"


def server_unit(name: str) -> str:
    return f"kvprov-lmcache-{name}.service"


def inproc_yaml(name: str) -> str:
    return f"/etc/kvprov/lmcache-{name}.yaml"


def compact(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


def kv_config(engine: str, name: str, i: int) -> dict | None:
    """vLLM's --kv-transfer-config, as roles/engine renders it per engine (None: none)."""
    if engine == "vllm_baseline":
        return None
    if engine == "vllm_offload":
        return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "engine_id": f"kvprov-{name}",
                "kv_connector_extra_config": {
                    "spec_name": "TieringOffloadingSpec", "block_size": 64, "cpu_bytes_to_use": 107374182400,
                    "secondary_tiers": [{"type": "fs", "root_dir": storage_dir(name), "n_read_threads": 32,
                                         "n_write_threads": 16}]}}
    if engine == "lmcache_mp":
        return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"lmcache.mp.host": f"ipc:///run/kvprov-lmcache/{name}/server",
                                              "lmcache.mp.port": 18000 + i}}
    return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def vllm_argv(kv: dict | None, port: int) -> list[str]:
    return [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/Qwen3-8B", "--served-model-name",
            "/models/Qwen3-8B", "--host", "0.0.0.0", "--port", str(port), "--dtype", "auto", "--block-size", "16",
            "--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.9", "--enable-prefix-caching"] + (
        ["--kv-transfer-config", compact(kv)] if kv else [])


def server_argv(l2: dict, port: int, metrics_port: int) -> list[str]:
    return [PY, "-m", "lmcache.v1.multiprocess.server", "--l1-size-gb", "100", "--eviction-policy", "LRU", "--host",
            "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics_port), "--supported-transfer-mode",
            "auto", "--l2-adapter", compact(l2)]


def fs_l2(path: str) -> dict:
    return {"type": "fs", "base_path": path}


def exec_start(argv: list[str]) -> str:
    """ExecStart= as the template writes it: the program and module, then a flag and its
    value per continuation line."""
    lines, i = [" ".join(argv[:3])], 3
    while i < len(argv):
        pair = argv[i:i + 2] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else argv[i:i + 1]
        lines.append(" ".join(shlex.quote(a) for a in pair))
        i += len(pair)
    return " \\\n    ".join(lines)


def unit_file(description: str, argv: list[str], env: dict[str, str], directory: str, requires: str = "") -> str:
    """A unit file as roles/engine/templates/engine.service.j2 writes it (no GPU condition:
    kvprov_engine_require_gpu: false, so the services run on the GPU-less lab host)."""
    deps = f"After=network-online.target {requires}\nRequires={requires}\n" if requires else \
        "After=network-online.target\n"
    environment = "".join(f"Environment={k}={v}\n" for k, v in env.items())
    mounts = f"RequiresMountsFor={directory}\n" if directory else ""
    return (f"#\n# Ansible managed\n#\n[Unit]\nDescription={description}\nWants=network-online.target\n{deps}"
            f"{mounts}\n[Service]\nType=simple\nUser={USER}\nGroup={USER}\n"
            f"WorkingDirectory=/var/lib/kvprov-engine/main\nEnvironment=PYTHONHASHSEED=0\n{environment}"
            f"ExecStart={exec_start(argv)}\n\nRestart=on-failure\nRestartSec=10\nTimeoutStartSec=900\n"
            f"LimitMEMLOCK=infinity\nNoNewPrivileges=yes\nProtectSystem=full\nPrivateTmp=yes\n"
            f"ReadWritePaths={' '.join(filter(None, (directory, '/var/lib/kvprov-engine')))}\n\n[Install]\nWantedBy=multi-user.target\n")


def show_text(unit: str, argv: list[str], env: dict[str, str], active: bool = True, pid: int = 4242) -> str:
    """`systemctl show UNIT` (the keys validate reads, among others). systemd prints ExecStart's
    argv[] joined with spaces and unquoted: a JSON argument keeps its double quotes."""
    state, sub, pid = ("active", "running", pid) if active else ("inactive", "dead", 0)
    return "\n".join([
        "Type=simple", "Restart=on-failure", f"MainPID={pid}", "ControlPID=0", "Result=success", "NRestarts=0",
        f"ExecStart={{ path={argv[0]} ; argv[]={' '.join(argv)} ; ignore_errors=no ; start_time=[n/a] ; "
        f"stop_time=[n/a] ; pid={pid} ; code=(null) ; status=0/0 }}",
        f"User={USER}", f"Group={USER}", "Environment=" + " ".join(f"{k}={v}" for k, v in
                                                                    {"PYTHONHASHSEED": "0", **env}.items()),
        f"Id={unit}", f"Names={unit}", "LoadState=loaded", f"ActiveState={state}", f"SubState={sub}",
        f"FragmentPath=/etc/systemd/system/{unit}", "UnitFileState=enabled", "UnitFilePreset=enabled",
        "NeedDaemonReload=no", "ConditionResult=yes", "AssertResult=yes",
        "ConditionTimestamp=Mon 2026-11-30 09:12:44 UTC", ""])


VLLM_METRICS = {"vllm:prefix_cache_queries_total": 4096, "vllm:prefix_cache_hits_total": 1024,
                "vllm:external_prefix_cache_queries_total": 3072, "vllm:external_prefix_cache_hits_total": 2048}
SERVER_METRICS = {"lmcache_mp_lookup_requested_tokens_total": 3072, "lmcache_mp_lookup_hit_l1_tokens_total": 1024,
                  "lmcache_mp_lookup_hit_l2_tokens_total": 1024}


def prometheus(values: dict[str, float], labels: str) -> str:
    """The lines the collector keeps of a /metrics page (it drops # HELP / # TYPE)."""
    return "".join(f"{k}{{{labels}}} {float(v)}\n" for k, v in values.items())


class EngineBundle:
    """A copy of lab_gpu1 in tmp_path whose engine is `engine`, every unit running."""

    def __init__(self, tmp_path: Path, engine: str, names: tuple[str, ...] = ("main",)):
        self.root = tmp_path / HOST
        shutil.copytree(LAB, self.root)
        self.engine = engine
        for p in (self.root / "systemctl").glob("kvprov-sglang-*"):
            p.unlink()
        (self.root / UNIT_DIR / "kvprov-sglang-main.service").unlink()
        desired = self.json("desired.json")
        files = {k: v for k, v in desired["files"].items() if "sglang" not in k}
        instances, units, health, dirs = [], [], {}, self.json("storage_dirs.json")
        template = dirs["instances"].pop("main")
        for i, name in enumerate(names):
            port, lport, mport = 8000 + i, 18000 + i, 19000 + i
            env = {"CUDA_VISIBLE_DEVICES": str(i), "HF_HOME": "/var/lib/kvprov-engine/huggingface",
                   "VLLM_NO_USAGE_STATS": "1"}
            inst_units = [vllm_unit(name)]
            if engine == "lmcache_mp":
                inst_units.insert(0, server_unit(name))
                senv = {"CUDA_VISIBLE_DEVICES": str(i), "LMCACHE_TRACK_USAGE": "false",
                        "KVPROV_LMCACHE_URL": f"ipc:///run/kvprov-lmcache/{name}/server:{lport}"}
                self.write_unit(server_unit(name), f"LMCache MP server {name} (port {lport}, L2 fs)",
                                server_argv(fs_l2(storage_dir(name)), lport, mport), senv, storage_dir(name))
                files[f"/etc/systemd/system/{server_unit(name)}"] = {
                    "mode": "0644", "role": "engine", "content": self.text(f"{UNIT_DIR}/{server_unit(name)}")}
                health[f"{name}/server"] = {"unit": server_unit(name), "running": True,
                                            "url": f"http://127.0.0.1:{mport}/metrics", "status": 200, "ok": True,
                                            "error": None}
                self.write(f"metrics/{name}-server.txt", prometheus(SERVER_METRICS, 'l1="cpu"'))
            if engine == "lmcache_inproc":
                env["LMCACHE_CONFIG_FILE"] = inproc_yaml(name)
                yaml = ("#\n# Ansible managed\n#\nchunk_size: 1024\nlocal_cpu: true\nmax_local_cpu_size: 100.0\n"
                        f"extra_config:\n  enable_nixl_storage: true\n  nixl_backend: POSIX\n"
                        f"  nixl_path: {storage_dir(name)}/\n  nixl_pool_size: 256\n")
                self.write(f"files{inproc_yaml(name)}", yaml)
                files[inproc_yaml(name)] = {"mode": "0644", "role": "engine", "content": yaml}
            requires = server_unit(name) if engine == "lmcache_mp" else ""
            tier = storage_dir(name) if engine != "vllm_baseline" else ""
            self.write_unit(vllm_unit(name), f"vLLM {engine} {name} (port {port})",
                            vllm_argv(kv_config(engine, name, i), port), env, tier, requires)
            files[f"/etc/systemd/system/{vllm_unit(name)}"] = {
                "mode": "0644", "role": "engine", "content": self.text(f"{UNIT_DIR}/{vllm_unit(name)}")}
            health[name] = {"unit": vllm_unit(name), "running": True, "url": f"http://127.0.0.1:{port}/health",
                            "status": 200, "ok": True, "error": None}
            self.write(f"metrics/{name}.txt", prometheus(VLLM_METRICS, 'engine="0",model_name="/models/Qwen3-8B"'))
            instances.append({"name": name, "unit": vllm_unit(name), "storage_dir": tier, "port": port,
                              "units": inst_units, "lmcache_port": lport if engine == "lmcache_mp" else None,
                              "metrics_port": mport if engine == "lmcache_mp" else None})
            units += [{"unit": u, "enabled": True, "active": True} for u in inst_units]
            if tier:  # the collector stats only the directories of a KV tier
                dirs["instances"][name] = {**template, "path": tier, "owner": USER, "group": USER}
        desired["engine"] = {"name": engine, "user": USER, "install": True, "venv": "/opt/kvprov/vllm",
                             "connect_host": "127.0.0.1", "instances": instances}
        desired["files"] = files
        desired["units"] = [u for u in desired["units"] if "sglang" not in u["unit"]] + units
        self.write_json("desired.json", desired)
        self.write_json("storage_dirs.json", dirs)
        self.write_json("health.json", health)
        collect = self.json("collect.json")
        self.write_json("collect.json", {**collect, "format": 3})

    # --- files

    def write(self, name: str, text: str) -> None:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_text(text)

    def text(self, name: str) -> str:
        return (self.root / name).read_text()

    def json(self, name: str):
        return json.loads(self.text(name))

    def write_json(self, name: str, data) -> None:
        self.write(name, json.dumps(data, indent=2))

    def sub(self, name: str, old: str, new: str) -> None:
        text = self.text(name)
        assert old in text, f"{old!r} not in {name}"
        self.write(name, text.replace(old, new))

    def write_unit(self, unit: str, description: str, argv: list[str], env: dict[str, str], directory: str,
                   requires: str = "") -> None:
        """The unit file, what systemd loaded of it and the running process's command line, all alike."""
        self.write(f"{UNIT_DIR}/{unit}", unit_file(description, argv, env, directory, requires))
        self.write(f"systemctl/{unit}.txt", show_text(unit, argv, env))
        self.write_json(f"systemctl/{unit}.cmdline.json", argv)

    def set_argv(self, unit: str, change) -> None:
        """Change the command line everywhere (unit file, `systemctl show`, the process): a deployed change."""
        old = self.json(f"systemctl/{unit}.cmdline.json")
        new = change(list(old))
        for name, render in ((f"{UNIT_DIR}/{unit}", exec_start), (f"systemctl/{unit}.txt", " ".join)):
            self.sub(name, render(old), render(new))
        self.write_json(f"systemctl/{unit}.cmdline.json", new)

    def stop(self, unit: str) -> None:
        """The unit is not running: no process, so no command line captured."""
        self.sub(f"systemctl/{unit}.txt", "ActiveState=active", "ActiveState=inactive")
        self.sub(f"systemctl/{unit}.txt", "SubState=running", "SubState=dead")
        self.sub(f"systemctl/{unit}.txt", "MainPID=4242", "MainPID=0")
        (self.root / f"systemctl/{unit}.cmdline.json").unlink()

    def results(self) -> dict[str, ev.Result]:
        return {r.id: r for r in ev.evaluate_bundle(self.root)}


def set_flag(argv: list[str], name: str, value: str) -> list[str]:
    i = argv.index(name)
    return argv[:i + 1] + [value] + argv[i + 2:]


def edit_json_flag(name: str, change):
    def edit(argv: list[str]) -> list[str]:
        value = json.loads(argv[argv.index(name) + 1])
        change(value)
        return set_flag(argv, name, compact(value))
    return edit


def engine_results(rs: dict) -> dict[str, tuple[str, str]]:
    return {k: (r.status, r.found) for k, r in rs.items() if k.startswith("engine.")}


# ---------------------------------------------------------------------------- good bundles

CHECKS = ("unit", "state", "storage_env", "storage_dir", "health", "cache")


@pytest.mark.parametrize("engine", ENGINES)
def test_good_engine_bundles_pass_every_engine_check(tmp_path, engine):
    rs = EngineBundle(tmp_path, engine).results()
    assert [k for k in rs if k.startswith("engine.")] == [f"engine.main.{c}" for c in CHECKS]
    assert {k: v for k, v in engine_results(rs).items() if v[0] != PASS} == {}
    assert {k: (r.status, r.found) for k, r in rs.items() if r.status not in (PASS, "skip")} == {}
    assert rs["summary"].status == PASS


def test_lmcache_mp_good(tmp_path):
    rs = EngineBundle(tmp_path, "lmcache_mp").results()
    e = {k: (r.expected, r.found) for k, r in rs.items() if k.startswith("engine.main.")}
    assert e["engine.main.unit"] == (
        "kvprov-lmcache-main.service, kvprov-vllm-main.service loaded and enabled, running with the lmcache_mp "
        "KV-tier configuration",
        "loaded, enabled; configuration read from the running process")
    assert e["engine.main.state"] == (
        "kvprov-lmcache-main.service active (running), no restarts; kvprov-vllm-main.service active (running), "
        "no restarts",
        "kvprov-lmcache-main.service: ActiveState=active SubState=running NRestarts=0; "
        "kvprov-vllm-main.service: ActiveState=active SubState=running NRestarts=0")
    assert e["engine.main.storage_env"] == (
        "the lmcache_mp storage directory /mnt/kvcache/kvlab-gpu1/main (on the KV mount /mnt/kvcache)",
        "/mnt/kvcache/kvlab-gpu1/main (--l2-adapter fs, the running process)")
    assert e["engine.main.storage_dir"] == (
        "/mnt/kvcache/kvlab-gpu1/main exists, on the KV mount /mnt/kvcache, writable by kvprov-engine",
        "/mnt/kvcache/kvlab-gpu1/main (kvprov-engine:kvprov-engine 0750) on nfs4 10.99.1.1:/kv")
    assert e["engine.main.health"] == (
        "HTTP /health on port 8000 answers 200, the LMCache server's /metrics on 19000 too",
        "GET http://127.0.0.1:8000/health: 200; GET http://127.0.0.1:19000/metrics: 200")
    assert e["engine.main.cache"] == (
        "the engine's cache counters exposed on /metrics, the KV connector consulted",
        "vllm:prefix_cache_queries_total 4096, vllm:prefix_cache_hits_total 1024, "
        "vllm:external_prefix_cache_queries_total 3072, vllm:external_prefix_cache_hits_total 2048, "
        "lmcache_mp_lookup_requested_tokens_total 3072, lmcache_mp_lookup_hit_l1_tokens_total 1024, "
        "lmcache_mp_lookup_hit_l2_tokens_total 1024")


def test_vllm_offload_and_lmcache_inproc_good(tmp_path):
    rs = EngineBundle(tmp_path / "offload", "vllm_offload").results()
    assert rs["engine.main.storage_env"].found == ("/mnt/kvcache/kvlab-gpu1/main (--kv-transfer-config secondary_tiers "
                                                   "fs root_dir, the running process)")
    assert rs["engine.main.state"].found == "kvprov-vllm-main.service: ActiveState=active SubState=running NRestarts=0"
    assert rs["engine.main.health"].found == "GET http://127.0.0.1:8000/health: 200"
    rs = EngineBundle(tmp_path / "inproc", "lmcache_inproc").results()
    assert rs["engine.main.storage_env"].found == ("/mnt/kvcache/kvlab-gpu1/main/ (extra_config.nixl_path in "
                                                   "/etc/kvprov/lmcache-main.yaml)")
    assert rs["engine.main.cache"].found == (
        "vllm:prefix_cache_queries_total 4096, vllm:prefix_cache_hits_total 1024, "
        "vllm:external_prefix_cache_queries_total 3072, vllm:external_prefix_cache_hits_total 2048")


# ---------------------------------------------------------------------------- lmcache_mp

def test_lmcache_mp_vllm_port_differs_from_the_server_port(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].update({"lmcache.mp.port": 18001})))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "vLLM's lmcache.mp.port is 18001 but the LMCache server "
                                         "kvprov-lmcache-main.service listens on --port 18000 (the running process): "
                                         "vLLM cannot reach its cache")
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags engine"


def test_lmcache_mp_server_on_another_port_than_the_inventory(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--port", "18005"))
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].update({"lmcache.mp.port": 18005})))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "the LMCache server listens on --port 18005 (the running process), "
                                         "want 18000")


def test_lmcache_mp_server_stopped(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.stop(server_unit("main"))
    b.write_json("health.json", {**b.json("health.json"), "main/server": {
        "unit": server_unit("main"), "running": False, "url": "http://127.0.0.1:19000/metrics", "status": None,
        "ok": False, "error": "not running"}})
    (b.root / "metrics/main-server.txt").unlink()
    rs = b.results()
    r = rs["engine.main.state"]
    assert (r.status, r.found) == (FAIL, "kvprov-lmcache-main.service: ActiveState=inactive SubState=dead "
                                         "NRestarts=0: not running; kvprov-vllm-main.service: ActiveState=active "
                                         "SubState=running NRestarts=0")
    assert r.fix == ("`systemctl start kvprov-lmcache-main.service`; "
                     "`journalctl -u kvprov-lmcache-main.service -b -n 200`")
    # its configuration is then read from what systemd would start
    assert rs["engine.main.unit"].found == "loaded, enabled; configuration read from the running process"
    assert rs["engine.main.storage_env"].found == "/mnt/kvcache/kvlab-gpu1/main (--l2-adapter fs, systemctl show)"
    assert (rs["engine.main.health"].status, rs["engine.main.health"].found) == (
        FAIL, "GET http://127.0.0.1:19000/metrics: not running; GET http://127.0.0.1:8000/health: 200")
    assert (rs["engine.main.cache"].status, rs["engine.main.cache"].found) == (
        FAIL, "the LMCache server's /metrics was not captured (vllm:prefix_cache_queries_total 4096, "
              "vllm:prefix_cache_hits_total 1024, vllm:external_prefix_cache_queries_total 3072, "
              "vllm:external_prefix_cache_hits_total 2048)")


def test_lmcache_mp_storage_is_read_inside_kvprovs_fail_open_adapter(tmp_path):
    """As deployed (roles/lmcache_mp): the fs adapter inside kvprov's plugin adapter; validate reads
    the inner adapter's directory. A plugin adapter that is not kvprov's names no directory."""
    def wrapped(inner) -> dict:
        return {"type": "plugin", "module_path": "kvprov_l2_failopen", "class_name": "FailOpenL2Adapter",
                "adapter_params": {"inner": inner, "lookup_timeout_s": 2.0}}

    b = EngineBundle(tmp_path, "lmcache_mp")
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--l2-adapter", compact(wrapped(fs_l2(
        "/var/lib/kvprov-engine/l2")))))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/var/lib/kvprov-engine/l2 (--l2-adapter fs, the running process): "
                                         "/var/lib/kvprov-engine/l2 is not under the KV mount /mnt/kvcache: local disk")
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--l2-adapter", compact(wrapped(fs_l2(
        "/mnt/kvcache/kvlab-gpu1/main")))))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (PASS, "/mnt/kvcache/kvlab-gpu1/main (--l2-adapter fs, the running process)")
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--l2-adapter", compact(wrapped(
        {"type": "fs_native", "base_path": "/mnt/kvcache/kvlab-gpu1/main", "max_capacity_gb": 100}))))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (PASS, "/mnt/kvcache/kvlab-gpu1/main (--l2-adapter fs_native, the running process)")
    for odd in ({"type": "plugin", "adapter_params": {"inner": "fs"}}, {"type": "plugin", "adapter_params": []},
                {"type": "other", "adapter_params": {"inner": fs_l2("/mnt/kvcache/kvlab-gpu1/main")}}):
        b.set_argv(server_unit("main"), lambda a, odd=odd: set_flag(a, "--l2-adapter", compact(odd)))
        r = b.results()["engine.main.storage_env"]
        want = f"no storage directory is set (--l2-adapter {odd['type']}, the running process)"
        assert (r.status, r.found) == (FAIL, want)


def test_lmcache_mp_l2_outside_the_mount(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--l2-adapter", compact(fs_l2("/var/lib/kvprov-engine/l2"))))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/var/lib/kvprov-engine/l2 (--l2-adapter fs, the running process): "
                                         "/var/lib/kvprov-engine/l2 is not under the KV mount /mnt/kvcache: local disk")
    assert r.expected == "the lmcache_mp storage directory /mnt/kvcache/kvlab-gpu1/main (on the KV mount /mnt/kvcache)"
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags engine"


def test_lmcache_mp_nixl_store_l2_and_no_l2(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    nixl = {"type": "nixl_store", "backend": "POSIX", "pool_size": 64,
            "backend_params": {"file_path": "/tmp/lmcache", "use_direct_io": "false"}}
    b.set_argv(server_unit("main"), lambda a: set_flag(a, "--l2-adapter", compact(nixl)))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/tmp/lmcache (--l2-adapter nixl_store, the running process): /tmp/lmcache "
                                         "is on local /tmp: the third tier lands on local disk (and in the "
                                         "service's private /tmp)")
    b.set_argv(server_unit("main"), lambda a: a[:a.index("--l2-adapter")])
    rs = b.results()
    assert rs["engine.main.unit"].found == ("kvprov-lmcache-main.service has no --l2-adapter: nothing reaches the "
                                            "KV mount")
    assert rs["engine.main.storage_env"].found == ("no storage directory is set (no --l2-adapter, "
                                                   "kvprov-lmcache-main.service (the running process))")


def test_lmcache_mp_server_metrics_missing_a_counter(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.write("metrics/main-server.txt", prometheus({k: v for k, v in SERVER_METRICS.items() if "l2" not in k}, ""))
    r = b.results()["engine.main.cache"]
    assert r.status == FAIL
    assert r.found.startswith("lmcache_mp_lookup_hit_l2_tokens_total is not exposed by the LMCache server after "
                              "requests were served (")


def test_lmcache_mp_server_counters_appear_with_the_first_lookup(tmp_path):
    """Right after a deploy nothing was served: the server has not registered its lookup counters yet."""
    b = EngineBundle(tmp_path, "lmcache_mp")
    b.write("metrics/main-server.txt", "")
    b.write("metrics/main.txt", prometheus({k: 0 for k in VLLM_METRICS}, ""))
    r = b.results()["engine.main.cache"]
    assert r.status == PASS and "vllm:prefix_cache_queries_total 0" in r.found


# ---------------------------------------------------------------------------- vllm_offload

def test_vllm_offload_root_dir_of_another_instance(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload", names=("main", "second"))
    assert {k: v for k, v in engine_results(b.results()).items() if v[0] != PASS} == {}

    def other(kv):
        kv["kv_connector_extra_config"]["secondary_tiers"][0]["root_dir"] = storage_dir("second")
    b.set_argv(vllm_unit("main"), edit_json_flag("--kv-transfer-config", other))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/mnt/kvcache/kvlab-gpu1/second (--kv-transfer-config secondary_tiers fs "
                                         "root_dir, the running process): /mnt/kvcache/kvlab-gpu1/second, not the "
                                         "inventory's /mnt/kvcache/kvlab-gpu1/main: the directory of instance second "
                                         "(a clear() or cleaner would wipe both)")


def test_vllm_offload_without_cpu_bytes_to_use(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].pop("cpu_bytes_to_use")))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "cpu_bytes_to_use null: vLLM requires an integer > 0")
    assert r.fix == "kvprov deploy INVENTORY --limit kvlab-gpu1 --tags engine"


def test_vllm_offload_two_fs_tiers_on_one_directory(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")

    def twice(kv):
        tiers = kv["kv_connector_extra_config"]["secondary_tiers"]
        tiers.append(dict(tiers[0]))
    b.set_argv(vllm_unit("main"), edit_json_flag("--kv-transfer-config", twice))
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/mnt/kvcache/kvlab-gpu1/main,/mnt/kvcache/kvlab-gpu1/main "
                                         "(--kv-transfer-config secondary_tiers fs root_dir, the running process): "
                                         "a directory is listed twice")


def test_vllm_offload_without_the_fs_tier_or_the_connector(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].update(secondary_tiers=[])))
    rs = b.results()
    assert rs["engine.main.unit"].found == "no secondary tier of type fs: nothing reaches the KV mount"
    assert rs["engine.main.storage_env"].found == ("no storage directory is set (--kv-transfer-config secondary_tiers "
                                                   "fs root_dir, the running process): vLLM keeps the offloaded KV in "
                                                   "host memory only")
    b.set_argv(vllm_unit("main"), lambda a: a[:a.index("--kv-transfer-config")])
    assert b.results()["engine.main.unit"].found == ("no --kv-transfer-config (the running process): vLLM runs "
                                                     "without the KV tier")


# ---------------------------------------------------------------------------- lmcache_inproc

def test_lmcache_inproc_local_disk_on_tmp(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_inproc")
    b.write("files/etc/kvprov/lmcache-main.yaml", "chunk_size: 256\nlocal_cpu: true\nlocal_disk: file:///tmp/x/\n"
                                                  "max_local_disk_size: 5.0\n")
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "/tmp/x/ (local_disk in /etc/kvprov/lmcache-main.yaml): /tmp/x/ is on local "
                                         "/tmp: the third tier lands on local disk (and in the service's private "
                                         "/tmp)")
    assert r.expected == ("the lmcache_inproc storage directory /mnt/kvcache/kvlab-gpu1/main "
                          "(on the KV mount /mnt/kvcache)")


def test_lmcache_inproc_config_file_unset_or_missing(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_inproc")
    (b.root / "files/etc/kvprov/lmcache-main.yaml").unlink()
    r = b.results()["engine.main.storage_env"]
    assert (r.status, r.found) == (FAIL, "files/etc/kvprov/lmcache-main.yaml: /etc/kvprov/lmcache-main.yaml is not "
                                         "on the host (not in the bundle)")
    b.sub("systemctl/kvprov-vllm-main.service.txt", " LMCACHE_CONFIG_FILE=/etc/kvprov/lmcache-main.yaml", "")
    rs = b.results()
    assert rs["engine.main.unit"].found == ("LMCACHE_CONFIG_FILE is not set (systemctl show): LMCache runs on its "
                                            "defaults, without the tier")
    assert rs["engine.main.storage_env"].found == ("no storage directory is set (no LMCACHE_CONFIG_FILE (systemctl "
                                                   "show)): LMCache keeps KV in host memory only")


def test_lmcache_inproc_connector_never_consulted(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_inproc")
    b.write("metrics/main.txt", prometheus({**VLLM_METRICS, "vllm:external_prefix_cache_queries_total": 0,
                                            "vllm:external_prefix_cache_hits_total": 0}, 'engine="0"'))
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (FAIL, "requests were served but the KV connector was never consulted "
                                         "(vllm:external_prefix_cache_queries_total 0): the tier is configured but "
                                         "not used (vllm:prefix_cache_queries_total 4096, vllm:prefix_cache_hits_total "
                                         "1024, vllm:external_prefix_cache_queries_total 0, "
                                         "vllm:external_prefix_cache_hits_total 0)")
    assert r.fix == "read `journalctl -u kvprov-vllm-main.service -b -n 200`"
    # no request served yet: nothing to judge, the counters are exposed
    b.write("metrics/main.txt", prometheus({k: 0 for k in VLLM_METRICS}, 'engine="0"'))
    assert b.results()["engine.main.cache"].status == PASS


def test_lmcache_inproc_metrics_not_exposed_or_not_collected(tmp_path):
    b = EngineBundle(tmp_path, "lmcache_inproc")
    b.write("metrics/main.txt", prometheus({k: v for k, v in VLLM_METRICS.items() if "external" not in k}, ""))
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (FAIL, "vllm:external_prefix_cache_queries_total is not exposed; "
                                         "vllm:external_prefix_cache_hits_total is not exposed "
                                         "(vllm:prefix_cache_queries_total 4096, vllm:prefix_cache_hits_total 1024)")
    (b.root / "metrics/main.txt").unlink()  # `kvprov audit` does not probe
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == ("skip", "lmcache_inproc exposes no cache counters kvprov reads (or they were not "
                                           "collected: `kvprov audit` does not probe)")


# ---------------------------------------------------------------------------- which command line is judged

@pytest.mark.parametrize("engine", ENGINES)
def test_the_running_process_wins_over_the_unit_file(tmp_path, engine):
    """The unit file (and what systemd would start) say --port 8000; the process runs 8001
    (started by hand, or before a deploy without a restart)."""
    b = EngineBundle(tmp_path, engine)
    b.write_json("systemctl/kvprov-vllm-main.service.cmdline.json",
                 set_flag(b.json("systemctl/kvprov-vllm-main.service.cmdline.json"), "--port", "8001"))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "--port 8001 (the running process), want 8000")


def test_systemctl_show_then_the_unit_file_when_no_process_was_captured(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    (b.root / "systemctl/kvprov-vllm-main.service.cmdline.json").unlink()
    b.sub("systemctl/kvprov-vllm-main.service.txt", "--port 8000", "--port 8002")
    assert b.results()["engine.main.unit"].found == "--port 8002 (systemctl show), want 8000"
    b.sub("systemctl/kvprov-vllm-main.service.txt", "ExecStart=", "ExecStartPre=")
    b.sub(f"{UNIT_DIR}/kvprov-vllm-main.service", "--port 8000", "--port 8003")
    assert b.results()["engine.main.unit"].found == "--port 8003 (the unit file), want 8000"


# ---------------------------------------------------------------------------- vllm_baseline, LoadState

BASELINE_METRICS = {k: v for k, v in VLLM_METRICS.items() if "external" not in k}


def test_vllm_baseline_has_no_tier_checks_and_needs_no_connector_counters(tmp_path):
    b = EngineBundle(tmp_path, "vllm_baseline")
    b.write("metrics/main.txt", prometheus(BASELINE_METRICS, 'engine="0"'))  # vLLM without a connector
    rs = b.results()
    no_tier = ("skip", "engine vllm_baseline has no KV tier: nothing of it reaches the KV mount")
    assert engine_results(rs) == {
        "engine.main.unit": (PASS, "loaded, enabled; configuration read from the running process"),
        "engine.main.state": (PASS, "kvprov-vllm-main.service: ActiveState=active SubState=running NRestarts=0"),
        "engine.main.storage_env": no_tier, "engine.main.storage_dir": no_tier,
        "engine.main.health": (PASS, "GET http://127.0.0.1:8000/health: 200"),
        "engine.main.cache": (PASS, "vllm:prefix_cache_queries_total 4096, vllm:prefix_cache_hits_total 1024")}
    assert rs["summary"].status == PASS


def test_vllm_baseline_with_a_connector_or_without_prefix_caching_fails(tmp_path):
    b = EngineBundle(tmp_path, "vllm_baseline")
    b.set_argv(vllm_unit("main"), lambda argv: argv + ["--kv-transfer-config", '{"kv_connector":"X"}',
                                                       "--no-enable-prefix-caching"])
    status, found = engine_results(b.results())["engine.main.unit"]
    assert status == FAIL and found == (
        "--kv-transfer-config is set (the running process): the baseline is vLLM without a KV tier; "
        "--no-enable-prefix-caching (the running process): the baseline keeps vLLM's GPU prefix cache")


@pytest.mark.parametrize("state", ["not-found", "bad-setting", "error", "masked"])
def test_a_unit_that_is_not_loaded_fails_the_unit_check(tmp_path, state):
    """A unit file gone (not-found) or one systemd refused (bad-setting) is not "loaded"."""
    b = EngineBundle(tmp_path, "vllm_offload")
    b.sub(f"systemctl/{vllm_unit('main')}.txt", "LoadState=loaded", f"LoadState={state}")
    status, found = engine_results(b.results())["engine.main.unit"]
    assert status == FAIL and found.startswith(
        f"kvprov-vllm-main.service: LoadState={state} (`systemctl daemon-reload`)"), found


def test_storage_env_in_the_shared_namespace_is_its_keyed_subdirectory(tmp_path):
    """In the shared namespace the engine runs with <namespace>/fp-<12 hex> (kvprov-kv-key, at each
    start), the unit file says ${KVPROV_KV_DIR}, and a tier kvprov-kv-key turned off names its empty
    directory under /run: the first two pass, the last fails naming why; a subdirectory that is not a
    key, or the key of another directory, is not the instance's directory."""
    ns = "/mnt/kvcache/kvlab-gpu1/main"
    b = EngineBundle(tmp_path, "lmcache_mp")
    cases = {
        f"{ns}/fp-0123456789ab": PASS,
        "${KVPROV_KV_DIR}": PASS,
        "/run/kvprov-kv/kvprov-lmcache-main/off": FAIL,
        f"{ns}/fp-0123456789": FAIL,  # not 12 hex digits
        f"{ns}/other": FAIL,
        "/mnt/kvcache/kvlab-gpu1/other/fp-0123456789ab": FAIL,
        f"{ns}/fp-0123456789ab/fp-0123456789ab": FAIL,
    }
    found = {}
    for directory, want in cases.items():
        b.set_argv(server_unit("main"), lambda a, d=directory: set_flag(a, "--l2-adapter", compact(fs_l2(d))))
        r = b.results()["engine.main.storage_env"]
        found[directory] = r.status
        if directory.endswith("/off"):
            assert "kvprov-kv-key turned the tier off at the engine's start" in r.found, r.found
    assert found == cases


def test_lmcache_mp_channel_on_tcp_or_another_socket_fails(tmp_path):
    """#38: the LMCache server's request channel (it unpickles what clients send) is a Unix socket only
    the engine user reaches: vLLM connecting over TCP (an older deploy) fails, and so does a client
    whose socket is not the one the server binds (KVPROV_LMCACHE_URL, kvprov's sitecustomize.py)."""
    b = EngineBundle(tmp_path / "tcp", "lmcache_mp")
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].update({"lmcache.mp.host": "tcp://127.0.0.1"})))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "vLLM reaches the LMCache server at tcp://127.0.0.1, not a Unix socket: a TCP "
                                         "port every local account can reach, and the server unpickles what clients send")
    b = EngineBundle(tmp_path / "other", "lmcache_mp")
    b.set_argv(vllm_unit("main"), edit_json_flag(
        "--kv-transfer-config", lambda kv: kv["kv_connector_extra_config"].update({"lmcache.mp.host": "ipc:///run/x"})))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (FAIL, "vLLM connects to ipc:///run/x:18000 but the LMCache server "
                                         "kvprov-lmcache-main.service binds ipc:///run/kvprov-lmcache/main/server:18000 "
                                         "(KVPROV_LMCACHE_URL): vLLM cannot reach its cache")
    assert EngineBundle(tmp_path / "good", "lmcache_mp").results()["engine.main.unit"].status == PASS
