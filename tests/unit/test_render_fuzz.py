"""Render everything with a hostile value in every string variable (#38, item 4): each value is
either refused by `kvprov check` (naming the variable), or rendered by the roles' own templates
into files that still parse in their own format with the shape of the same host's files without
it: no unit gains a directive or an Environment= variable, no command line a word, no TOML, YAML,
JSON or INI file a key or table. One inventory holds a host per (variable, payload, engine), so
one `check` and one `render` cover them all."""

from __future__ import annotations

import configparser
import json
import tomllib
from pathlib import Path

import pytest
import yaml

from kvprov import check, inventory
from kvprov.validate import parsers
from tests.conftest import kvprov
from tests.unit.test_preflight import LAB_VALUES

ENGINES = ("sglang_hicache", "lmcache_mp", "vllm_offload", "lmcache_inproc")
BASE = {**LAB_VALUES, "kvprov_engine_model_revision": "0123abc", "kvprov_engine_uid": 2000,
        "kvprov_vllm_offload_cpu_bytes_to_use": 1 << 30}
# What a hostile editor tries where a value lands: a word that splits (quotes, spaces), systemd's
# specifiers and expansion, a trailing backslash (line continuation), shell and TOML/YAML/JSON
# syntax, and a new line that starts a directive.
PAYLOADS = {
    "quotes": 'x" "EVIL=1 \'y\' %n $HOME\\',
    "syntax": "a = [1]} {b: 'c'}; touch /tmp/kvprov-fuzz #",
    "newline": "x\nExecStartPre=+/bin/sh -c id\n[Service]",
}


def owner(name: str) -> tuple[str, ...]:
    """The engines whose hosts read the variable."""
    for prefix, engines in (("kvprov_sglang_", ("sglang_hicache",)), ("kvprov_lmcache_mp_", ("lmcache_mp",)),
                            ("kvprov_lmcache_inproc_", ("lmcache_inproc",)), ("kvprov_vllm_", ("vllm_offload",)),
                            ("kvprov_lmcache_version", ("lmcache_mp",))):
        if name.startswith(prefix):
            return engines
    return ("sglang_hicache", "lmcache_mp")


# Strings inside lists and dicts, where the sinks matter most: a unit's Environment= and command
# line, the NIXL TOML, the instance settings. Each is also rendered with a plain word in the same
# place (its twin), the shape the hostile value's files must keep.
NESTED = {
    "kvprov_engine_environment": lambda s: {"KVPROV_FUZZ": s},
    "kvprov_engine_extra_args": lambda s: ["--fuzz", s],
    "kvprov_nixl_backend_options": lambda s: {"fuzz": s},
    "kvprov_engine_instances": lambda s: [{"name": "main", "port": 8000, "cuda_visible_devices": s}],
}
PLAIN = "plain0"


def string_variables() -> list[str]:
    specs = check.read_specs(inventory.roles_dir())
    return sorted(n for n, s in specs.items() if s.type == "str" and n != "kvprov_engine")


def fuzz_hosts() -> dict[str, tuple[str, str, str]]:
    """{host: (variable, payload name, engine)}: every string variable, and the strings of NESTED."""
    cases = [(v, p, e) for v in string_variables() for p in PAYLOADS for e in owner(v)]
    cases += [(v, p, e) for v in NESTED for p in PAYLOADS for e in ENGINES]
    return {f"f{i}": case for i, case in enumerate(cases)}


def value(variable: str, text: str):
    return NESTED[variable](text) if variable in NESTED else text


def shape(path: Path) -> object:
    """What a file is made of, by its format, without the values: a unit's (section, key) lines,
    its variables and the number of words of each command line; the keys of a TOML, YAML, JSON or
    INI file. A file that does not parse fails the test here."""
    text = path.read_text()
    if path.suffix in (".service", ".mount", ".timer"):
        unit = parsers.parse_unit(text)
        lines = sorted((s, k) for s, pairs in unit.items() for k, _ in pairs)
        argv = {k: len(parsers.exec_argv(v, from_show=False)) for k, v in unit.get("Service", []) if k.startswith("Exec")}
        return lines, sorted(parsers.unit_environment(unit)), argv
    if path.suffix == ".toml":
        doc = tomllib.loads(text)
        return sorted((k, sorted(v) if isinstance(v, dict) else None) for k, v in doc.items())
    if path.suffix in (".yaml", ".yml"):
        return sorted(yaml.safe_load(text) or {})
    if path.suffix == ".json":
        return sorted(json.loads(parsers.strip_json_comments(text)))
    if path.suffix == ".conf" and "idmapd" in path.name:
        ini = configparser.ConfigParser(interpolation=None)
        ini.read_string(text)
        return sorted((s, sorted(ini[s])) for s in ini.sections())
    return None  # code and other files: the same lines as the baseline's, below


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    cases = fuzz_hosts()
    hosts = {**{f"base-{e}": {"kvprov_engine": e} for e in ENGINES},
             **{f"twin-{v}-{e}": {"kvprov_engine": e, v: value(v, PLAIN)} for v in NESTED for e in ENGINES},
             **{h: {"kvprov_engine": e, v: value(v, PAYLOADS[p])} for h, (v, p, e) in cases.items()}}
    inv = d / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"vars": BASE, "hosts": hosts}}}}))
    r = kvprov("check", str(inv), "--json", "-", timeout=600)
    problems = json.loads(r.stdout)["problems"]
    errors: dict[str, set[str]] = {}
    for p in problems:
        if p["severity"] == "error":
            errors.setdefault(p["host"], set()).add(p["variable"])
    accepted = {h: case for h, case in cases.items() if h not in errors}
    rendered = d / "rendered.yml"
    rendered.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"vars": BASE, "hosts": {
        h: v for h, v in hosts.items() if h.startswith(("base-", "twin-")) or h in accepted}}}}}))
    r = kvprov("render", str(rendered), "--out", str(d / "out"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return cases, errors, accepted, d / "out"


def test_every_refused_value_is_refused_naming_its_variable(fuzzed):
    cases, errors, accepted, _ = fuzzed
    assert not {h for h in errors if h.startswith(("base-", "twin-"))}, "the baselines are clean"
    wrong = {h: (cases[h], sorted(names)) for h, names in errors.items() if h in cases and cases[h][0] not in names}
    assert wrong == {}, "refused for another variable than the hostile one"
    # a new line never passes, whatever the variable
    assert not [c for c in accepted.values() if c[1] == "newline"]
    assert len(accepted) < len(cases)  # the test covers both branches
    assert accepted, "some hostile values are accepted, and rendered below"


def test_every_accepted_value_renders_files_of_the_same_shape(fuzzed):
    cases, _, accepted, out = fuzzed
    broken = []
    for host, (variable, payload, engine) in sorted(accepted.items()):
        base = out / (f"twin-{variable}-{engine}" if variable in NESTED else f"base-{engine}")
        baseline = {p.relative_to(base): p for p in base.rglob("*") if p.is_file()}
        by_name = {p.name: p for p in baseline.values()}
        for path in (p for p in (out / host).rglob("*") if p.is_file()):
            twin = baseline.get(path.relative_to(out / host)) or by_name.get(path.name)
            try:
                got = shape(path)
            except Exception as e:  # noqa: BLE001 - any parse error is the finding
                broken.append(f"{host} ({variable}={payload}): {path.relative_to(out)} does not parse: {e}")
                continue
            if twin is None:
                broken.append(f"{host} ({variable}={payload}): {path.relative_to(out)} has no counterpart")
            elif got is not None and got != shape(twin):
                broken.append(f"{host} ({variable}={payload}): {path.relative_to(out)}: {got} != {shape(twin)}")
            elif got is None and len(path.read_text().splitlines()) != len(twin.read_text().splitlines()):
                broken.append(f"{host} ({variable}={payload}): {path.relative_to(out)} has other lines")
    assert broken == []
