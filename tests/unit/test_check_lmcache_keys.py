"""kvprov check knows every configuration key of the installed LMCache (which only logs an
unknown key and drops it) and names the new key of each renamed one. The keys are read
from LMCache's own source (lmcache/v1/config.py), without importing it."""

import ast
import os
from pathlib import Path

import pytest

from tests.required import engine_missing

from kvprov import check
from kvprov.check import Finding
from tests.unit.test_engine_parsers import ENGINE_PY


def lmcache_config_source() -> Path:
    venv = Path(ENGINE_PY).parent.parent
    found = sorted(venv.glob("lib/python3*/site-packages/lmcache/v1/config.py"))
    if not os.access(ENGINE_PY, os.X_OK) or not found:
        engine_missing(f"no LMCache in the engine venv {venv} (scripts/install-deps builds it)")
    return found[0]


def lmcache_dicts() -> dict[str, dict]:
    """The literal dicts _CONFIG_DEFINITIONS (key -> definition) and _CONFIG_ALIASES (old -> new)."""
    out = {}
    for node in ast.parse(lmcache_config_source().read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("_CONFIG_DEFINITIONS", "_CONFIG_ALIASES"):
            out[target.id] = {ast.literal_eval(k): v for k, v in zip(node.value.keys, node.value.values)}
    return out


def test_every_key_of_the_installed_lmcache_is_accepted():
    keys = sorted(lmcache_dicts()["_CONFIG_DEFINITIONS"])
    assert len(keys) > 100
    assert check.lmcache_config({key: 1 for key in keys}) == []


def test_every_renamed_key_names_its_new_name():
    dicts = lmcache_dicts()
    renamed = {old: ast.literal_eval(new) for old, new in dicts["_CONFIG_ALIASES"].items()
               if old not in dicts["_CONFIG_DEFINITIONS"]}  # an alias that is still a key of its own is a key
    assert len(renamed) >= 10
    for old, new in renamed.items():
        [finding] = check.lmcache_config({old: 1})
        assert finding.path == (old,) and finding.message.startswith(f"{old}: LMCache no longer reads it; use {new}")


def test_a_key_lmcache_does_not_know_is_named_with_the_closest_one():
    assert check.lmcache_config({"chunk_sise": 256}) == [
        Finding("chunk_sise: not an LMCache setting (LMCache ignores unknown keys silently); did you mean chunk_size?",
                ("chunk_sise",))]
