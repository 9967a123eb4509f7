"""What kvprov renders for each engine is accepted by the engine's own parsing code, and a
mutated config is rejected by both the engine and `kvprov check` (tests/engine_parse.py runs
the engines' parsers inside their venvs; see tests/unit/test_engine_parsers.py).

The configs come from a real `kvprov render` of inventory/example.yml (a group per engine)
and inventory/lab-engine.yml (the CPU engine of the lab): SGLang's `sglang serve` argv and
NIXL TOML, vLLM's argv with each connector's --kv-transfer-config, the LMCache MP server's
argv, LMCache's in-process YAML. GPU engines cannot run here: this is how they are checked."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.required import engine_missing

from kvprov import check, inventory
from kvprov.validate import parsers
from kvprov.validate.checks.engine import server_command
from tests.conftest import ROOT, kvprov
from tests.unit.test_engine_parsers import ENGINE_PY, SCRIPT, _sglang_python

# validate's own reading of an engine command line (kvprov/validate/checks/engine.py
# server_command): `sglang serve` hands prepare_server_args the arguments without its
# --model-type selector, `vllm serve MODEL` sets --model from MODEL, as those commands do.
KINDS = {"sglang": "sglang_argv", "vllm": "vllm_argv", "lmcache": "lmcache_server_argv"}


def _argv(unit: Path) -> list[str]:
    start = parsers.unit_value(parsers.parse_unit(unit.read_text()), "Service", "ExecStart")
    return parsers.exec_argv(start, from_show=False)


def payloads(root: Path) -> dict[str, dict]:
    """{host/file: payload} for every engine config under a render directory."""
    out = {}
    for unit in sorted(root.glob("*/etc/systemd/system/kvprov-*.service")):
        server, args = server_command(_argv(unit))
        if server is None:
            continue
        kind = KINDS[server]
        host = unit.parts[len(root.parts)]
        payload = {"kind": kind, "argv": args}
        if kind == "lmcache_server_argv":  # where the unit's PYTHONPATH is in the render (kvprov's plugin adapter)
            env = dict(line.removeprefix("Environment=").strip('"').split("=", 1)
                       for line in unit.read_text().splitlines() if line.startswith("Environment="))
            payload["pythonpath"] = [str(root / host / d.lstrip("/")) for d in env.get("PYTHONPATH", "").split(":") if d]
        if kind == "sglang_argv":
            toml = root / host / "etc/kvprov/nixl_backend_config.toml"
            # and its credential (written by the role's task, never rendered: a secret): a stand-in key
            payload["files"] = {"/etc/kvprov/nixl_backend_config.toml": toml.read_text(),
                                "%d/sglang-api-key.yaml": 'admin-api-key: "stand-in-admin-key"\n'}
        out[f"{host}/{unit.name}"] = payload
    for yaml_file in sorted(root.glob("*/etc/kvprov/lmcache-*.yaml")):
        out[f"{yaml_file.parts[len(root.parts)]}/{yaml_file.name}"] = {"kind": "lmcache_yaml",
                                                                       "text": yaml_file.read_text()}
    return out


def parse(python: str, items: dict[str, dict]) -> dict[str, dict]:
    r = subprocess.run([python, str(SCRIPT), "batch"], input=json.dumps(list(items.values())),
                       capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert len(lines) == len(items), r.stderr[-3000:]
    return dict(zip(items, lines))


def pythons(items: dict[str, dict]) -> dict[str, tuple[str, dict]]:
    """Which venv parses what: the SGLang parsing venv for SGLang, the engine venv for the rest."""
    import os
    if not os.access(ENGINE_PY, os.X_OK):
        engine_missing(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
    sglang_py = _sglang_python()
    if sglang_py is None:
        engine_missing("no SGLang parsing venv (scripts/install-deps builds /var/lib/kvprov/sglang-parse-venv)")
    return {"engine": (ENGINE_PY, {k: v for k, v in items.items() if v["kind"] != "sglang_argv"}),
            "sglang": (sglang_py, {k: v for k, v in items.items() if v["kind"] == "sglang_argv"})}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("render")
    for inv in ("inventory/example.yml", "inventory/lab-engine.yml"):
        kvprov("render", str(ROOT / inv), "--out", str(out), check=True)
    return payloads(out)


def test_every_engine_is_rendered(rendered):
    kinds = {(key.split("/")[0], p["kind"]) for key, p in rendered.items()}
    assert ("gpu-a01.corp.example.com", "sglang_argv") in kinds                 # sglang_hicache
    assert ("gpu-c01.corp.example.com", "vllm_argv") in kinds                   # vllm_offload
    assert {("gpu-c02.corp.example.com", "vllm_argv"), ("gpu-c02.corp.example.com", "lmcache_server_argv"),
            ("kvlab-c1", "lmcache_server_argv")} <= kinds                       # lmcache_mp
    assert ("gpu-c03.corp.example.com", "lmcache_yaml") in kinds               # lmcache_inproc
    assert ("gpu-c04.corp.example.com", "vllm_argv") in kinds                   # vllm_baseline


def test_rendered_configs_are_accepted_by_the_engines_own_parsers(rendered):
    verdicts = {}
    for python, items in pythons(rendered).values():
        verdicts.update(parse(python, items))
    refused = {k: v["error"] for k, v in verdicts.items() if not v["ok"]}
    assert not refused, refused
    assert len(verdicts) == len(rendered) >= 20
    # #37 (fail open): a KV load the connector reports failed is recomputed, as vLLM itself reads
    # the unit's --kv-transfer-config (its default, "fail", would fail the request)
    tiers = {k: v["parsed"] for k, v in verdicts.items() if (v["parsed"] or {}).get("kv_connector")}
    assert len(tiers) >= 3 and {p["kv_load_failure_policy"] for p in tiers.values()} == {"recompute"}, tiers
    # SGLang admits a request without its stored prefix once the prefetch deadline passes (1 s + 0.1 s per
    # 1024 tokens, from the NIXL TOML), even while the storage hangs; wait_complete would wait forever
    sglang = {k: v["parsed"] for k, v in verdicts.items() if rendered[k]["kind"] == "sglang_argv"}
    assert sglang and {(p["hicache_storage_prefetch_policy"], tuple(p["prefetch_timeout"])) for p in sglang.values()} == {
        ("timeout", (1.0, 0.1))}, sglang


# One mutation per engine: the inventory value kvprov check refuses, and the same mistake
# made by hand in the rendered config, which the engine's parser refuses.
MUTATIONS = {
    "sglang_hicache": ("rack_a_h100", {"kvprov_sglang_hicache_mem_layout": "page_frist"},
                       "gpu-a01.corp.example.com/kvprov-sglang-gpu0-3.service",
                       ("--hicache-mem-layout", "page_first", "page_frist"), "invalid choice: 'page_frist'"),
    "vllm_offload": ("vllm_offload_nodes", {"kvprov_vllm_offload_block_size": 24},
                     "gpu-c01.corp.example.com/kvprov-vllm-gpu0-3.service",
                     ("--kv-transfer-config", '"block_size":256', '"block_size":24'), "must be a multiple"),
    "lmcache_mp": ("lmcache_mp_nodes", {"kvprov_lmcache_mp_transfer_mode": "automatic"},
                   "gpu-c02.corp.example.com/kvprov-lmcache-gpu0-3.service",
                   ("--supported-transfer-mode", "auto", "automatic"), "invalid choice: 'automatic'"),
    "lmcache_inproc": ("lmcache_inproc_nodes", {"kvprov_lmcache_inproc_config": {"remote_url": "fs:///kv"}},
                       "gpu-c03.corp.example.com/lmcache-gpu0-3.yaml",
                       ("text", "remote_url: fs://localhost:0/mnt/kvcache/kv/lmcache_inproc/models-Qwen3-8B",
                        "remote_url: fs:///kv"), "missing host"),
}


@pytest.mark.parametrize("engine", MUTATIONS)
def test_a_mutated_config_is_rejected_by_kvprov_check_and_by_the_engine(rendered, tmp_path, engine):
    import yaml

    group, values, key, (where, old, new), engine_error = MUTATIONS[engine]
    data = yaml.safe_load((ROOT / "inventory/example.yml").read_text())

    def find(node):
        if isinstance(node, dict):
            if group in node.get("children", {}):
                return node["children"][group]
            return next((g for v in node.values() if (g := find(v)) is not None), None)
    find(data).setdefault("vars", {}).update(values)
    bad = tmp_path / "example.yml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    problems = [p for p in check.check(inventory.load(bad)) if p.severity == "error"]
    assert [p.variable for p in problems] and {p.variable for p in problems} == set(values), problems

    payload = json.loads(json.dumps(rendered[key]))
    if where == "text":
        assert old in payload["text"]
        payload["text"] = payload["text"].replace(old, new)
    else:
        i = payload["argv"].index(where) + 1
        assert old in payload["argv"][i]
        payload["argv"][i] = payload["argv"][i].replace(old, new)
    (python, _), = [v for v in pythons({key: payload}).values() if v[1]]
    verdict = parse(python, {key: payload})[key]
    assert verdict["ok"] is False and engine_error in verdict["error"], verdict


def test_kvprov_knows_exactly_lmcaches_configuration_keys():
    """kvprov check's list of LMCache keys (LMCache drops unknown ones with a log line) is the
    installed LMCache's own."""
    import os
    if not os.access(ENGINE_PY, os.X_OK):
        engine_missing(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
    r = subprocess.run([ENGINE_PY, "-c", "import json, lmcache.v1.config as c; "
                        "print(json.dumps([sorted(c._CONFIG_DEFINITIONS), c._CONFIG_ALIASES]))"],
                       capture_output=True, text=True, timeout=120)
    keys, aliases = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(check.LMCACHE_KEYS) == keys
    assert {k for k in aliases if k != "nixl_buffer_size"} <= set(check.LMCACHE_RENAMED)
