#!/usr/bin/env python3
"""Run an engine's OWN config parsers on a config kvprov rendered; print the verdict.

Usage:  ENGINE_VENV/bin/python tests/engine_parse.py KIND  < payload.json

KIND is one of vllm_argv, lmcache_server_argv, lmcache_yaml, sglang_argv, or
``batch``.  stdin holds one JSON payload (an object: one result line) or a JSON
list of payloads (one result line each, in order).  With ``batch`` every payload
names its own ``"kind"``, so one process (one engine import) checks many configs.
Each result is one JSON line on stdout:

    {"ok": bool, "error": str, "parsed": {...}, "warnings": [str, ...]}

``error`` is the engine's own exception text (argparse's "error:" line for CLI
rejections).  ``warnings`` holds what the engine only logged (LMCache logs an
unknown key and carries on).  Nothing here starts a server, opens a socket,
allocates the KV cache or touches a GPU; the engine code is imported from the
venv that runs this script, never copied into kvprov.

Payloads:
  vllm_argv           {"argv": [...vllm serve args...], "gpu_block_size": 16}
                      gpu_block_size: block size the OffloadingConnector's
                      block_size must be a multiple of (default: --block-size
                      from argv, else 16, vLLM's CUDA default; CPU builds use 128)
  lmcache_server_argv {"argv": [...args after -m lmcache.v1.multiprocess.server...],
                       "pythonpath": [dirs]}  (where a plugin adapter's module is, as PYTHONPATH)
  lmcache_yaml        {"text": "<LMCACHE_CONFIG_FILE contents>", "env": {}}
  sglang_argv         {"argv": [...sglang serve args...],
                       "files": {"/etc/kvprov/x.toml": "<text>"}, "env": {}}
                      "@PATH" arguments, and arguments equal to a key of "files"
                      (--config FILE), are pointed at a temporary copy of that text.

What is called, per KIND (all engine functions; see the kvprov engine reference):
  vllm_argv: FlexibleArgumentParser + make_arg_parser (the API server's parser,
    KVTransferConfig is validated by pydantic inside parse_args),
    validate_parsed_serve_args, AsyncEngineArgs.from_cli_args,
    KVConnectorFactory.get_connector_class; OffloadingConnector:
    OffloadingSpecFactory.get_spec_cls, <spec>.build_metric_definitions
    (secondary_tiers list + SecondaryTierFactory.get_tier_class per tier),
    build_offloading_config (block_size multiple of the GPU block size, against
    a real KVCacheConfig of one full-attention group), <spec>(OffloadingConfig)
    (cpu_bytes_to_use required; int()), and each tier's __init__ signature bound
    to what SecondaryTierFactory.create_secondary_tier would pass it.
    LMCacheMPConnector: the lmcache connector's server-url logic
    (_ensure_transport_scheme) and its save_decode_cache type check.
  lmcache_server_argv: lmcache.v1.multiprocess.server.parse_args (its own argparse
    builder) then parse_args_to_mp_server_config, parse_args_to_config (L1, eviction
    and every --l2-adapter through the registered adapter config's from_dict),
    parse_args_to_observability_config, parse_args_to_coordinator_config.
  lmcache_yaml: LMCacheEngineConfig.from_file + update_config_from_env (which runs
    validate()) -- what lmcache_get_or_create_config does for LMCACHE_CONFIG_FILE;
    a fs:// remote_url also goes through parse_remote_url, which the FS connector
    calls at engine start (there a failure is only logged).
  sglang_argv: sglang.srt.server_args.prepare_server_args (its argparse +
    ServerArgs.from_cli_args), the model-independent HiCache resolution hooks
    handle_hicache_ratio_default and handle_hicache, then
    HybridCacheController.parse_storage_backend_extra_config (loaded from the
    installed hybrid_cache_controller.py when the module itself cannot be
    imported without GPU kernels), and for the nixl backend NixlBackendConfig's
    get_specified_plugin / get_backend_initparams / get_use_direct_io /
    get_l3_cleaner_config, and hicache_nixl._parse_storage_dirs for
    SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR when given in "env".
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import traceback

# Library noise (vLLM/LMCache log to stdout) must not mix with the result lines:
# keep the real stdout for results and point fd 1 at stderr.
_RESULT_OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr

# No usage reports, no downloads, no GPU probing beyond import.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
# With HF_HUB_OFFLINE set, AsyncEngineArgs.__post_init__ resolves --model to a
# local snapshot (and fails for a path absent here); the model path is a host
# matter, not a config one, so it is left unresolved.
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ.pop("TRANSFORMERS_OFFLINE", None)


class ParseError(Exception):
    """A rejection by the engine's parser, with the engine's own text."""


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(record.getMessage())
        except Exception:  # pragma: no cover - a broken log call
            self.records.append(str(record.msg))


@contextlib.contextmanager
def _captured_warnings(prefixes: tuple[str, ...]):
    """Collect WARNING+ records of the engine's loggers (LMCache's do not propagate)."""
    handler = _Capture()
    attached = []

    def attach() -> None:
        # The package's top logger, plus loggers that do not propagate to it
        # (LMCache's init_logger sets propagate=False on every module logger).
        names = list(prefixes) + [
            n
            for n, lg in list(logging.Logger.manager.loggerDict.items())
            if isinstance(lg, logging.Logger)
            and n.startswith(prefixes)
            and not lg.propagate
        ]
        for name in names:
            lg = logging.getLogger(name)
            if handler not in lg.handlers:
                lg.addHandler(handler)
                attached.append(lg)

    attach()
    try:
        yield handler, attach
    finally:
        for lg in attached:
            with contextlib.suppress(ValueError):
                lg.removeHandler(handler)


def _argparse_call(fn):
    """Run an argparse-based call; turn its SystemExit into the parser's error line."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return fn()
    except SystemExit as exc:
        text = buf.getvalue()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        start = next((i for i, ln in enumerate(lines) if ": error: " in ln), None)
        if start is not None:
            msg = "\n".join(lines[start:])
            msg = msg.split(": error: ", 1)[1]
        else:
            msg = text.strip() or f"exit {exc.code}"
        raise ParseError(msg) from None


# --------------------------------------------------------------------- vLLM


def _vllm_argv(payload: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import (
        make_arg_parser,
        validate_parsed_serve_args,
    )
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = [str(a) for a in payload["argv"]]
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm-serve"))
    args = _argparse_call(lambda: parser.parse_args(argv))
    validate_parsed_serve_args(args)
    engine_args = AsyncEngineArgs.from_cli_args(args)
    parsed: dict = {
        "model": engine_args.model,
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
        "block_size": engine_args.block_size,
        "kv_offloading_size": engine_args.kv_offloading_size,
    }
    ktc = engine_args.kv_transfer_config
    if ktc is None:
        parsed["kv_connector"] = None
        return parsed
    parsed.update(
        kv_connector=ktc.kv_connector,
        kv_role=ktc.kv_role,
        kv_load_failure_policy=ktc.kv_load_failure_policy,
        engine_id_given=_engine_id_given(argv),
        extra_config_keys=sorted(ktc.kv_connector_extra_config),
    )
    if ktc.kv_connector is None:
        return parsed

    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    connector_cls = KVConnectorFactory.get_connector_class(ktc)
    parsed["connector_class"] = f"{connector_cls.__module__}.{connector_cls.__name__}"

    if ktc.kv_connector == "OffloadingConnector":
        gpu_block = payload.get("gpu_block_size") or engine_args.block_size or 16
        parsed.update(_vllm_offloading(ktc, int(gpu_block)))
    elif ktc.kv_connector == "LMCacheMPConnector":
        parsed.update(_vllm_lmcache_mp(ktc))
    return parsed


def _engine_id_given(argv: list[str]) -> bool:
    for i, a in enumerate(argv):
        raw = None
        if a == "--kv-transfer-config" and i + 1 < len(argv):
            raw = argv[i + 1]
        elif a.startswith("--kv-transfer-config="):
            raw = a.split("=", 1)[1]
        if raw is not None:
            with contextlib.suppress(ValueError, AttributeError):
                return "engine_id" in json.loads(raw)
    return False


def _vllm_offloading(ktc, gpu_block_size: int) -> dict:
    """The OffloadingConnector's own parsing of kv_connector_extra_config, on CPU."""
    import inspect
    from types import SimpleNamespace

    import torch

    from vllm.config import CacheConfig, ParallelConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        build_offloading_config,
    )
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        KVCacheTensor,
    )
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    extra = ktc.kv_connector_extra_config
    spec_cls = OffloadingSpecFactory.get_spec_cls(extra)
    # Scheduler start-up builds the metric definitions from the raw extra config:
    # for TieringOffloadingSpec that checks secondary_tiers and each tier's type.
    spec_cls.build_metric_definitions(dict(extra))

    # A real one-group KV cache layout (8 KV heads x 128, bf16, 2 layers) with the
    # GPU block size given; only the model config is a stand-in (no checkpoint).
    layers = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    attn = FullAttentionSpec(
        block_size=gpu_block_size, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
    )
    num_blocks = 64
    per_block = attn.page_size_bytes * len(layers)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[
            KVCacheTensor(
                size=per_block * num_blocks,
                layers=layers,
                layer_stride=attn.page_size_bytes,
                block_stride=per_block,
            )
        ],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=layers, kv_cache_spec=attn)],
    )
    cache_config = CacheConfig(block_size=gpu_block_size, enable_prefix_caching=True)
    vllm_config = SimpleNamespace(
        kv_transfer_config=ktc,
        parallel_config=ParallelConfig(),
        cache_config=cache_config,
        model_config=SimpleNamespace(
            model="kvprov-parse-check",
            dtype=torch.bfloat16,
            use_mla=False,
            get_total_num_kv_heads=lambda: 8,
        ),
        kv_events_config=None,
        use_v2_model_runner=False,
    )
    off_cfg = build_offloading_config(vllm_config, kv_cache_config)
    spec = spec_cls(off_cfg)  # CPUOffloadingSpec.__init__: cpu_bytes_to_use
    out = {
        "spec": spec_cls.__name__,
        "gpu_block_size": gpu_block_size,
        "blocks_per_chunk": off_cfg.cache.blocks_per_chunk,
        "num_cpu_chunks": getattr(spec, "num_chunks", None),
        "tiers": [],
    }
    for tier_cfg in getattr(spec, "secondary_tier_configs", []) or []:
        tier_cls = SecondaryTierFactory.get_tier_class(tier_cfg)
        kwargs = {
            k: v for k, v in tier_cfg.items() if k not in ("type", "module_path", "backpressure")
        }
        try:
            inspect.signature(tier_cls.__init__).bind(
                None,
                offloading_spec=spec,
                primary_kv_view=None,
                tier_type=tier_cfg["type"],
                backpressure_detector=None,
                **kwargs,
            )
        except TypeError as exc:
            raise TypeError(f"{tier_cls.__name__}.__init__: {exc}") from None
        out["tiers"].append({"type": tier_cfg["type"], "class": tier_cls.__name__, **kwargs})
    return out


def _vllm_lmcache_mp(ktc) -> dict:
    from lmcache.integration.vllm.lmcache_mp_connector import _ensure_transport_scheme

    get = ktc.get_from_extra_config
    save_decode = get("lmcache.mp.save_decode_cache", False)
    if not isinstance(save_decode, bool):
        raise ValueError("lmcache.mp.save_decode_cache must be a boolean")
    urls_cfg = get("lmcache.mp.server_urls", None)
    if urls_cfg:
        urls = urls_cfg if isinstance(urls_cfg, list) else urls_cfg.split(",")
        urls = [u.strip() for u in urls if u.strip()]
    else:
        urls = [f"{get('lmcache.mp.host', 'tcp://localhost')}:{get('lmcache.mp.port', 5555)}"]
    return {"server_urls": [_ensure_transport_scheme(u) for u in urls]}


# ------------------------------------------------------------------ LMCache


def _lmcache_plugin_config(config, pythonpath: list[str]) -> dict:
    """The plugin's module imported (from `pythonpath`, the unit's PYTHONPATH) and its config
    class resolved and built as LMCache's plugin factory does, without building the adapter."""
    import importlib

    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface
    from lmcache.v1.distributed.l2_adapters.plugin_l2_adapter import _resolve_config_class

    sys.path[:0] = pythonpath
    module = importlib.import_module(config.module_path)
    adapter_cls = getattr(module, config.class_name)
    assert issubclass(adapter_cls, L2AdapterInterface), adapter_cls
    cfg = _resolve_config_class(module, config, adapter_cls).from_dict(config.adapter_params)
    plain = {k: v for k, v in vars(cfg).items() if isinstance(v, (str, int, float, bool))}
    if hasattr(cfg, "inner"):
        plain["inner_config_class"] = type(cfg.inner).__name__
        plain["inner"] = {k: v for k, v in vars(cfg.inner).items() if isinstance(v, (str, int, float, bool))}
    return {"config_class": type(cfg).__name__, **plain}


def _lmcache_server_argv(payload: dict) -> dict:
    import lmcache.v1.multiprocess.server as server
    from lmcache.v1.mp_observability.config import parse_args_to_observability_config
    from lmcache.v1.multiprocess.config import (
        parse_args_to_coordinator_config,
        parse_args_to_mp_server_config,
    )
    from lmcache.v1.distributed.config import parse_args_to_config

    argv = [str(a) for a in payload["argv"]]
    saved = sys.argv
    sys.argv = ["lmcache.v1.multiprocess.server", *argv]
    try:
        args = _argparse_call(server.parse_args)
    finally:
        sys.argv = saved
    mp = parse_args_to_mp_server_config(args)
    sm = parse_args_to_config(args)
    obs = parse_args_to_observability_config(args)
    parse_args_to_coordinator_config(args)
    adapters = []
    for a in sm.l2_adapter_config.adapters:
        d = {k: v for k, v in vars(a).items() if isinstance(v, (str, int, float, bool, dict))}
        d["config_class"] = type(a).__name__
        # the adapter's L2 eviction block as LMCache parsed it (None: LMCache never evicts from it)
        d["eviction"] = vars(a.eviction_config) if getattr(a, "eviction_config", None) is not None else None
        if d["config_class"] == "PluginL2AdapterConfig":  # what LMCache's plugin factory makes of it
            d["plugin"] = _lmcache_plugin_config(a, payload.get("pythonpath", []))
        adapters.append(d)
    return {
        "host": mp.host,
        "port": mp.port,
        "transport": mp.transport,
        "supported_transfer_mode": mp.supported_transfer_mode,
        "chunk_size": mp.chunk_size,
        "l1_size_bytes": sm.l1_manager_config.memory_config.size_in_bytes,
        "eviction_policy": sm.eviction_config.eviction_policy,
        "l2_adapters": adapters,
        "prometheus_port": obs.prometheus_port,
        # prometheus_client.start_http_server(port): no address argument is passed,
        # so the listener binds prometheus_client's default, 0.0.0.0.
        "prometheus_bind": None if obs.otlp_endpoint else "0.0.0.0",
        "otlp_endpoint": obs.otlp_endpoint,
    }


def _lmcache_yaml(payload: dict, capture) -> dict:
    from lmcache.v1.config import LMCacheEngineConfig

    for key in [k for k in os.environ if k.startswith("LMCACHE_") and k not in (
        "LMCACHE_TRACK_USAGE",
    )]:
        del os.environ[key]
    os.environ.update({str(k): str(v) for k, v in (payload.get("env") or {}).items()})
    with tempfile.TemporaryDirectory(prefix="kvprov-parse-") as tmp:
        path = os.path.join(tmp, "lmcache.yaml")
        with open(path, "w") as f:
            f.write(payload["text"])
        capture()
        cfg = LMCacheEngineConfig.from_file(path)
        cfg.update_config_from_env()  # runs cfg.validate()
    parsed = {
        k: getattr(cfg, k)
        for k in (
            "chunk_size", "local_cpu", "max_local_cpu_size", "local_disk",
            "max_local_disk_size", "remote_url", "remote_serde", "gds_path",
            "gds_buffer_size", "nixl_buffer_device", "nixl_buffer_size",
            "extra_config", "save_unfull_chunk",
        )
    }
    parsed["user_set_keys"] = sorted(getattr(cfg, "_user_set_keys", ()))
    url = cfg.remote_url
    if url and url.startswith("fs://"):
        from lmcache.v1.storage_backend.connector import parse_remote_url

        try:
            p = parse_remote_url(url)
        except AssertionError as exc:
            # At engine start RemoteBackend catches this and only logs
            # "Failed to initialize/re-establish remote connection".
            raise ParseError(f"{exc} (engine start: logged only, tier missing)") from None
        parsed["remote_url_parsed"] = {"host": p.host, "port": p.port, "path": p.path}
    return parsed


# ------------------------------------------------------------------- SGLang


def _sglang_function(module: str, qualname: str):
    """An SGLang function, imported; or, when its module cannot be imported on a
    host without GPU kernels (CUDA-only deps at module top), compiled from the
    function's own source in the installed package file (not a copy of ours)."""
    import importlib

    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj, "import"
    except Exception:
        pass
    import ast
    import importlib.util
    from typing import List, Optional

    parent, _, leaf = module.rpartition(".")
    spec = importlib.util.find_spec(parent)
    path = os.path.join(list(spec.submodule_search_locations)[0], leaf + ".py")
    body = ast.parse(open(path).read(), filename=path).body
    *owners, name = qualname.split(".")
    for owner in owners:
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == owner)
    node = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []  # a @staticmethod, called as a plain function
    ns = {"os": os, "json": json, "Optional": Optional, "List": List}
    exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
    return ns[name], f"source:{path}:{node.lineno}"


def _sglang_argv(payload: dict) -> dict:
    from sglang.srt.arg_groups.hicache_hook import (
        handle_hicache,
        handle_hicache_ratio_default,
    )
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.server_args import prepare_server_args

    files = payload.get("files") or {}
    env = {str(k): str(v) for k, v in (payload.get("env") or {}).items()}
    with tempfile.TemporaryDirectory(prefix="kvprov-parse-") as tmp:
        mapped = {}
        for i, (name, text) in enumerate(files.items()):
            local = os.path.join(tmp, f"{i}_{os.path.basename(name)}")
            with open(local, "w") as f:
                f.write(text)
            mapped[name] = local
        argv = []
        for a in payload["argv"]:
            a = str(a)
            if a.startswith("@") and a[1:] in mapped:
                a = "@" + mapped[a[1:]]
            elif a in mapped:  # --config FILE (the unit's %d/<credential>)
                a = mapped[a]
            argv.append(a)
        sa = _argparse_call(lambda: prepare_server_args(argv))
        handle_hicache_ratio_default(sa)
        handle_hicache(sa)
        cfg = resolving_view(sa)
        parsed = {
            k: getattr(cfg, k)
            for k in (
                "model_path", "host", "port", "tp_size", "page_size",
                "enable_hierarchical_cache", "hicache_size", "hicache_ratio",
                "hicache_write_policy", "hicache_io_backend", "hicache_mem_layout",
                "hicache_storage_prefetch_policy", "hicache_storage_backend", "api_key", "admin_api_key",
            )
        }
        raw = sa.hicache_storage_backend_extra_config
        if raw:
            fn, origin = _sglang_function(
                "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",
                "HybridCacheController.parse_storage_backend_extra_config",
            )
            extra, thr, tbase, tki, prefix_keys = fn(raw)
            parsed["extra_config_parser"] = origin
            parsed["extra_config"] = extra
            parsed["prefetch_threshold"] = thr
            parsed["prefetch_timeout"] = [tbase, tki]
            if cfg.hicache_storage_backend == "nixl":
                from sglang.srt.mem_cache.storage.nixl.nixl_utils import NixlBackendConfig

                nc = NixlBackendConfig(extra)
                plugin = nc.get_specified_plugin()
                parsed["nixl_plugin"] = plugin
                parsed["nixl_initparams"] = nc.get_backend_initparams(plugin)
                parsed["nixl_use_direct_io"] = nc.get_use_direct_io()
                parsed["nixl_l3_cleaner"] = nc.get_l3_cleaner_config()
        if "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR" in env:
            parse_dirs, _ = _sglang_function(
                "sglang.srt.mem_cache.storage.nixl.hicache_nixl", "_parse_storage_dirs"
            )
            parsed["nixl_storage_dirs"] = parse_dirs(
                env["SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"]
            )
    return parsed


# --------------------------------------------------------------------- main

KINDS = {
    "vllm_argv": (_vllm_argv, ("vllm",)),
    "lmcache_server_argv": (_lmcache_server_argv, ("lmcache",)),
    "lmcache_yaml": (_lmcache_yaml, ("lmcache",)),
    "sglang_argv": (_sglang_argv, ("sglang",)),
}


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=str))


def run_one(kind: str, payload: dict) -> dict:
    if kind not in KINDS:
        return {"ok": False, "error": f"unknown kind {kind!r}", "parsed": {}, "warnings": []}
    fn, prefixes = KINDS[kind]
    with _captured_warnings(prefixes) as (handler, attach):
        try:
            if kind == "lmcache_yaml":
                parsed = fn(payload, attach)
            else:
                parsed = fn(payload)
            result = {"ok": True, "error": "", "parsed": parsed}
        except ParseError as exc:
            result = {"ok": False, "error": str(exc), "parsed": {}}
        except Exception as exc:  # the engine's own rejection
            text = str(exc)
            if not text:  # a bare `assert`: name the engine's failing line
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                text = f"{tb.line} ({os.path.basename(tb.filename)}:{tb.lineno})"
            result = {"ok": False, "error": f"{type(exc).__name__}: {text}", "parsed": {}}
            if os.environ.get("KVPROV_PARSE_TRACE"):
                traceback.print_exc()
    result["warnings"] = handler.records
    return _jsonable(result)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    kind = argv[1]
    data = json.load(sys.stdin)
    payloads = data if isinstance(data, list) else [data]
    for payload in payloads:
        k = payload.get("kind", kind) if kind == "batch" else kind
        _RESULT_OUT.write(json.dumps(run_one(k, payload)) + "\n")
        _RESULT_OUT.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
