"""nixl.* on gpu_a01 (GDS_MT, [plugin.gds_mt]) with the probe or the backend TOML edited: the
version or the plugins not captured, no plugin found, no backend created, the TOML's plugin
tables and options in their odd shapes."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS
from tests.conftest import FIXTURES

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
TOML = "files/etc/kvprov/nixl_backend_config.toml"
FIX = "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags nixl"
GOOD_TOML = FILES[TOML].decode()
PLUGIN = "[plugin.gds_mt]\nactive = true\n"


def run(probe: dict | None = None, toml: str | None = None) -> dict:
    files = dict(FILES)
    if probe is not None:
        files["nixl_probe.json"] = json.dumps({**json.loads(FILES["nixl_probe.json"]), **probe}).encode()
    if toml is not None:
        files[TOML] = toml.encode()
    b = Bundle(files=files)
    return {r.id: r for r in ev.evaluate(b, bf.load_desired(b)) if r.id.startswith("nixl.")}


def test_import_shows_the_version_or_a_question_mark_and_names_the_nixl_role():
    assert run()["nixl.import"].found == "nixl 1.5.1"
    assert run({"version": None})["nixl.import"].found == "nixl ?"
    r = run({"import_ok": False, "error": "No module named 'nixl'"})["nixl.import"]
    assert (r.status, r.found) == (FAIL, "import failed: No module named 'nixl'")
    assert r.fix.startswith(f"{FIX} (installs nixl-cuXX into /opt/kvprov/nixl)")


def test_backend_plugin_missing_or_not_created():
    r = run({"plugins": ["POSIX"], "backend": None, "backend_ok": False})["nixl.backend"]
    assert (r.status, r.found) == (
        FAIL, "NIXL found no GDS_MT plugin (it has: POSIX); the probe created no backend, not GDS_MT")
    assert run({"plugins": [], "backend": "POSIX"})["nixl.backend"].found == (
        "NIXL found no GDS_MT plugin (it has: none); the probe created POSIX, not GDS_MT")
    r = run({"plugins": None})["nixl.backend"]
    assert (r.status, r.found) == (PASS, "GDS_MT backend created")


def test_config_counts_the_plugin_tables():
    assert run()["nixl.config"].found == "/etc/kvprov/nixl_backend_config.toml: 1 [plugin.*] table(s)"
    assert run(toml="use_direct_io = true\n")["nixl.config"].found == \
        "/etc/kvprov/nixl_backend_config.toml: 0 [plugin.*] table(s)"
    assert run(toml='plugin = "gds_mt"\n')["nixl.config"].found == \
        "/etc/kvprov/nixl_backend_config.toml: 0 [plugin.*] table(s)"


def test_active_plugin_missing_tables_or_flags():
    no_table = ("no [plugin.<name>] table: SGLang finds no active plugin and crashes at start (UnboundLocalError)")
    for toml in ("use_direct_io = true\n", "[plugin]\n", 'plugin = "gds_mt"\n'):
        r = run(toml=toml)["nixl.active_plugin"]
        assert (r.status, r.found, r.fix) == (FAIL, no_table, f"{FIX} (writes active = true, a TOML boolean, in "
                                                               "[plugin.gds_mt] only)")
    r = run(toml="[plugin.gds_mt]\nthread_count = 32\n[plugin.posix]\nactive = false\n")["nixl.active_plugin"]
    assert (r.status, r.found) == (FAIL, "no [plugin.*] table has active = true: SGLang crashes at its first start "
                                         "(UnboundLocalError)")
    r = run(toml="[plugin.gds_mt]\nactive = true\n[plugin.posix]\nactive = true\n")["nixl.active_plugin"]
    assert r.found == "2 active tables (gds_mt, posix): SGLang takes the first, an accident of file order"


def test_options_each_shown_or_judged_and_defaults_named():
    assert run()["nixl.options"].found == "use_direct_io = true"
    r = run(toml=GOOD_TOML.replace("use_direct_io = true\n", ""))["nixl.options"]
    assert (r.status, r.found) == (PASS, "not set (SGLang's defaults)")
    r = run(toml='l3_cleaner_enabled = false\nuse_direct_io = "false"\n' + PLUGIN)
    assert r["nixl.options"].status == FAIL
    assert r["nixl.options"].found == ('use_direct_io = "false" is not a boolean: SGLang reads it with bool(), '
                                       'so the string "false" means true')
    assert r["nixl.options"].fix == ("write real booleans (kvprov_nixl_backend_options: {use_direct_io: true}), then "
                                     f"{FIX}")
    r = run(toml="use_direct_io = false\nl3_cleaner_enabled = true\n" + PLUGIN)
    assert r["nixl.options"].found == "use_direct_io = false, l3_cleaner_enabled = true"
    assert run(toml="l3_cleaner_enabled = true\n" + PLUGIN)["nixl.options"].found == "l3_cleaner_enabled = true"


def test_active_as_a_string_is_named_with_its_table():
    r = run(toml='[plugin.posix]\nactive = false\n[plugin.gds_mt]\nactive = "true"\n')["nixl.active_plugin"]
    assert (r.status, r.found) == (
        FAIL, '[plugin.gds_mt] active = "true" is a string, not a boolean: kvprov writes typed booleans (a string '
              'like "ture" or "yes" silently deactivates the plugin in SGLang)')
