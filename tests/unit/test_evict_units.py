"""The evictor's wiring as the roles render it (roles/engine/vars/main.yml): one evictor unit and
timer per distinct storage directory, not per instance (instances sharing a namespace share its
evictor, named after the first of them), the guard time in ExecStart, and SGLang's NIXL L3 cleaner
written explicitly in the NIXL TOML: off where kvprov's evictor runs, on at kvprov's marks where
it does not. Real renders through kvprov.render (the roles' own templates and variables)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from unittest import mock

import pytest
import yaml

from kvprov import check, render
from tests.conftest import ROOT

UNITS = "etc/systemd/system"
TOML = "etc/kvprov/nixl_backend_config.toml"


def lab_engine(tmp_path: Path, **group) -> Path:
    inv = yaml.safe_load((ROOT / "inventory/lab-engine.yml").read_text())
    inv["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]["vars"].update(group)
    path = tmp_path / "inv.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def rendered(inv: Path, out: Path, checked: bool = True) -> Path:
    """Render; checked=False skips `kvprov check` (its storage-directory rules are not this
    file's subject: a shared namespace is refused there until the namespace rules land)."""
    if checked:
        render.render([str(inv)], out)
    else:
        with mock.patch.object(check, "require_valid", lambda *a, **k: None):
            render.render([str(inv)], out)
    return out / "kvlab-c1"


def evictors(host: Path) -> list[str]:
    return sorted(p.name for p in (host / UNITS).glob("kvprov-evict-*"))


def test_instances_sharing_a_directory_share_one_evictor(tmp_path):
    inv = lab_engine(tmp_path, kvprov_engine="vllm_offload", kvprov_engine_evict_keep_minutes=15,
                     kvprov_engine_storage_sharing="instance",  # c: a directory of its own
                     kvprov_engine_instances=[
                         {"name": "a", "port": 8000, "storage_dir": "/srv/kvcache/kv/vllm/m"},
                         {"name": "b", "port": 8001, "storage_dir": "/srv/kvcache/kv/vllm/m/"},  # the same, spelt apart
                         {"name": "c", "port": 8002}])  # its own: <mount>/<host>/c
    host = rendered(inv, tmp_path / "out", checked=False)
    assert evictors(host) == ["kvprov-evict-a.service", "kvprov-evict-a.timer",
                              "kvprov-evict-c.service", "kvprov-evict-c.timer"]
    unit = (host / UNITS / "kvprov-evict-a.service").read_text()
    assert "Description=kvprov evictor of KV directory /srv/kvcache/kv/vllm/m (engine instances a, b)\n" in unit
    assert ("ExecStart=/usr/local/sbin/kvprov-evict --high-percent 85 --low-percent 70 --max-bytes 0 "
            "--keep-minutes 15 /srv/kvcache/kv/vllm/m\n") in unit
    assert "ReadWritePaths=/srv/kvcache/kv/vllm/m\n" in unit and "RequiresMountsFor=/srv/kvcache/kv/vllm/m\n" in unit
    own = (host / UNITS / "kvprov-evict-c.service").read_text()
    assert "(engine instance c)\n" in own and own.rstrip().endswith("UMask=0077")
    assert "--keep-minutes 15 /srv/kvcache/kvlab-c1/c\n" in own
    assert "Unit=kvprov-evict-a.service\n" in (host / UNITS / "kvprov-evict-a.timer").read_text()
    assert not (host / TOML).read_text().count("l3_cleaner")  # not SGLang: no cleaner keys


def test_a_shared_namespaces_evictor_retires_the_models_old_namespaces_beside_it(tmp_path):
    """#37: the evictor of the fingerprinted namespace may write to its parent (the engine's
    namespaces, kvprov's) to empty the model's old ones; 0 turns it off, back to its own directory."""
    from kvprov import check as check_module

    for days, flag, writable in ((7, " --retire-days 7", "/srv/kvcache/kv/lmcache_mp"), (0, "", None)):
        inv = lab_engine(tmp_path, kvprov_engine_evict_retire_days=days)
        [d] = {n["path"] for n in check_module.fleet_namespaces([str(inv)])}
        unit = (rendered(inv, tmp_path / f"out{days}") / UNITS / "kvprov-evict-main.service").read_text()
        assert f"--keep-minutes 60{flag} {d}\n" in unit, unit
        assert f"ReadWritePaths={writable or d}\n" in unit and f"RequiresMountsFor={d}\n" in unit


# SGLang's prefetch deadline in the same TOML (the timeout policy's defaults: roles/sglang_hicache)
DEADLINE = {"prefetch_timeout_base": 1.0, "prefetch_timeout_per_ki_token": 0.1}


@pytest.mark.parametrize("evict, expected", [
    ("auto", {"l3_cleaner_enabled": True, "l3_cleaner_high_watermark": 85, "l3_cleaner_low_watermark": 70}),
    ("always", {"l3_cleaner_enabled": False}),  # kvprov's evictor runs on the directory: SGLang's is off
])
def test_sglangs_l3_cleaner_is_set_explicitly(tmp_path, evict, expected):
    inv = lab_engine(tmp_path, kvprov_engine="sglang_hicache", kvprov_engine_evict=evict,
                     kvprov_nixl_plugins={"posix": {"active": True, "use_aio": False}})
    host = rendered(inv, tmp_path / "out")
    toml = tomllib.loads((host / TOML).read_text())
    assert toml == {**expected, **DEADLINE, "plugin": {"posix": {"active": True, "use_aio": False}}}
    assert bool(evictors(host)) == (evict == "always")


def test_the_cleaner_follows_kvprovs_marks_and_an_explicit_option_wins(tmp_path):
    inv = lab_engine(tmp_path, kvprov_engine="sglang_hicache", kvprov_engine_evict_high_percent=90,
                     kvprov_engine_evict_low_percent=60, kvprov_nixl_backend_options={"l3_cleaner_enabled": False})
    toml = tomllib.loads((rendered(inv, tmp_path / "out") / TOML).read_text())
    assert {k: v for k, v in toml.items() if k != "plugin"} == {
        "l3_cleaner_enabled": False, "l3_cleaner_high_watermark": 90, "l3_cleaner_low_watermark": 60, **DEADLINE}


def test_the_example_fleets_sglang_hosts_get_the_cleaner_and_the_others_none(tmp_path):
    out = tmp_path / "out"
    render.render([str(ROOT / "inventory/example.yml")], out)
    a01 = tomllib.loads((out / "gpu-a01.corp.example.com" / TOML).read_text())  # sglang_hicache
    assert (a01["l3_cleaner_enabled"], a01["l3_cleaner_high_watermark"], a01["l3_cleaner_low_watermark"]) == (True, 85, 70)
    c01 = tomllib.loads((out / "gpu-c01.corp.example.com" / TOML).read_text())  # vllm_offload
    assert not [k for k in c01 if k.startswith("l3_cleaner")]
