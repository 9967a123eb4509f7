"""LMCache, in MP mode (a server unit per instance: its --l2-adapter's directory is the
storage directory; vLLM's LMCacheMPConnector must point at the server's live --port) and
in-process (the LMCache YAML named by LMCACHE_CONFIG_FILE holds the tier's directory)."""

from __future__ import annotations

from urllib.parse import urlsplit

from kvprov.validate import bundle as bf
from kvprov.validate.bundle import FileProblem, Instance
from kvprov.validate.checks.engine import (ENGINES, EngineRules, connector_problems, flag, json_flag, live_argv,
                                           live_env, metrics, vllm_cache)
from kvprov.validate.context import Context
from kvprov.validate.result import show

SERVER_COUNTERS = ("lmcache_mp_lookup_requested_tokens_total", "lmcache_mp_lookup_hit_l1_tokens_total",
                   "lmcache_mp_lookup_hit_l2_tokens_total")


# ---- MP mode

# The server's request channel: kvprov's sitecustomize.py binds it to this URL (ipc://, in the server
# unit's RuntimeDirectory) in place of LMCache's tcp://--host:--port (roles/lmcache_mp/templates/).
BIND_VARIABLE = "KVPROV_LMCACHE_URL"

def _server(c: Context, inst: Instance) -> tuple[list[str], str]:
    if not inst.server_unit:
        raise FileProblem(bf.DESIRED, f"instance {inst.name} of engine lmcache_mp has no server unit")
    return live_argv(c, inst.server_unit)


def mp_storage_setting(c: Context, inst: Instance) -> tuple[str | None, str]:
    argv, where = _server(c, inst)
    l2, why = json_flag(argv, "--l2-adapter")
    if l2 is None:
        return None, f"{why}, {inst.server_unit} ({where})"
    plugin = l2.get("adapter_params") if l2.get("type") == "plugin" else None
    if isinstance(plugin, dict) and isinstance(plugin.get("inner"), dict):  # kvprov's fail-open adapter
        l2 = plugin["inner"]
    params = l2.get("backend_params") if isinstance(l2.get("backend_params"), dict) else {}
    path = l2.get("base_path") if l2.get("type") in ("fs", "fs_native") else params.get("file_path")
    return (path if isinstance(path, str) else None), f"--l2-adapter {show(l2.get('type'))}, {where}"


def mp_config_problems(c: Context, inst: Instance) -> list[str]:
    kv, problems = connector_problems(c, inst, "LMCacheMPConnector")
    server, where = _server(c, inst)
    port = flag(server, "--port")
    extra = kv.get("kv_connector_extra_config") if isinstance(kv.get("kv_connector_extra_config"), dict) else {}
    host, bind = extra.get("lmcache.mp.host"), live_env(c, inst.server_unit)[0].get(BIND_VARIABLE)
    ipc = isinstance(host, str) and host.startswith("ipc:///")
    if kv and not ipc:
        problems.append(f"vLLM reaches the LMCache server at {show(host)}, not a Unix socket: a TCP port every local "
                        "account can reach, and the server unpickles what clients send")
    if kv and str(extra.get("lmcache.mp.port")) != str(port):
        problems.append(f"vLLM's lmcache.mp.port is {show(extra.get('lmcache.mp.port'))} but the LMCache server "
                        f"{inst.server_unit} listens on --port {show(port)} ({where}): vLLM cannot reach its cache")
    elif port != str(inst.lmcache_port):
        problems.append(f"the LMCache server listens on --port {show(port)} ({where}), want {inst.lmcache_port}")
    elif kv and ipc and bind != f"{host}:{port}":  # vLLM joins host and port into one URL
        problems.append(f"vLLM connects to {show(f'{host}:{port}')} but the LMCache server {inst.server_unit} binds "
                        f"{show(bind)} ({BIND_VARIABLE}): vLLM cannot reach its cache")
    if flag(server, "--l2-adapter") is None:
        problems.append(f"{inst.server_unit} has no --l2-adapter: nothing reaches the KV mount")
    return problems


def mp_cache(c: Context, inst: Instance) -> tuple[dict[str, float], list[str]] | None:
    vllm = vllm_cache(c, inst)
    server = metrics(c, f"{bf.METRICS_DIR}/{inst.name}-server.txt")
    if vllm is None and server is None:
        return None
    values, problems = vllm or ({}, [])
    if server is None:
        return values, problems + ["the LMCache server's /metrics was not captured"]
    if server.get("kvprov_l2_bypassed", 0) > 0:
        problems = problems + ["the KV tier is bypassed (kvprov_l2_bypassed 1 on the LMCache server's /metrics): "
                               "its storage did not answer in time, and serving goes on without it until a probe of "
                               f"the directory answers (the server's journal: `journalctl -u {inst.server_unit}`)"]
    # the server registers its lookup counters at its first lookup
    if values.get("vllm:prefix_cache_queries_total", 0) > 0:
        problems = problems + [f"{k} is not exposed by the LMCache server after requests were served"
                               for k in SERVER_COUNTERS if k not in server]
    return {**values, **{k: server[k] for k in SERVER_COUNTERS if k in server}}, problems


# ---- in-process

def _config_path(c: Context, inst: Instance) -> tuple[str | None, str]:
    env, where = live_env(c, inst.unit)
    return env.get("LMCACHE_CONFIG_FILE"), where


def inproc_storage_setting(c: Context, inst: Instance) -> tuple[str | None, str]:
    import yaml

    path, where = _config_path(c, inst)
    if not path:
        return None, f"no LMCACHE_CONFIG_FILE ({where})"
    try:
        config = yaml.safe_load(c.host_file(path, "engine"))
    except yaml.YAMLError as e:
        raise FileProblem(bf.live_file(path), f"not YAML: {e}", c.deploy("engine")) from None
    config = config if isinstance(config, dict) else {}
    extra = config.get("extra_config") if isinstance(config.get("extra_config"), dict) else {}
    remote = config.get("remote_url")
    fs = urlsplit(remote).path if isinstance(remote, str) and remote.startswith("fs://") else None  # the fs tier
    for key, value in (("local_disk", config.get("local_disk")), ("extra_config.nixl_path", extra.get("nixl_path")),
                       ("gds_path", config.get("gds_path")), ("remote_url", fs)):
        if isinstance(value, str) and value:
            return value.removeprefix("file://"), f"{key} in {path}"
    return None, f"{path} has no local_disk, nixl_path, gds_path or fs:// remote_url"


def inproc_config_problems(c: Context, inst: Instance) -> list[str]:
    _, problems = connector_problems(c, inst, "LMCacheConnectorV1")
    path, where = _config_path(c, inst)
    if not path:
        problems.append(f"LMCACHE_CONFIG_FILE is not set ({where}): LMCache runs on its defaults, without the tier")
    return problems


ENGINES["lmcache_mp"] = EngineRules(mp_storage_setting, mp_config_problems, cache=mp_cache)
ENGINES["lmcache_inproc"] = EngineRules(inproc_storage_setting, inproc_config_problems, cache=vllm_cache,
                                        fallback=": LMCache keeps KV in host memory only")
