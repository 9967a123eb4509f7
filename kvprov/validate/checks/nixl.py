"""nixl.*: NIXL in the deployed venv (import, the configured backend) and the backend TOML
(absolute path, exactly one active plugin, real booleans)."""

from __future__ import annotations

import json

from kvprov.validate.context import Context, check
from kvprov.validate.result import FAIL, PASS, SKIP, Result, res, show


@check("nixl.import")
def nixl_import(c: Context) -> Result:
    expected = f"`import nixl` works in {c.d.nixl_venv}"
    p = c.nixl_probe()
    if p.import_ok:
        return res(PASS, expected, f"nixl {show(p.version or '?', 40)}")
    return res(FAIL, expected, f"import failed: {show(p.error or 'no error given', 300)}",
              f"{c.deploy('nixl')} (installs nixl-cuXX into {c.d.nixl_venv}); try "
              f"`{c.d.nixl_venv}/bin/python3 -c 'import nixl'` on the host")


@check("nixl.backend")
def nixl_backend(c: Context) -> Result:
    want = c.d.nixl_backend
    expected = f"NIXL creates the {want} backend (plugin {c.d.nixl_plugin})"
    p = c.nixl_probe()
    if not p.import_ok:
        return res(SKIP, expected, "nixl does not import (see nixl.import)")
    problems = []
    if p.plugins is not None and want not in p.plugins:
        problems.append(f"NIXL found no {want} plugin (it has: {show(', '.join(p.plugins), 120) or 'none'})")
    if p.backend != want:
        problems.append(f"the probe created {show(p.backend or 'no backend')}, not {want}")
    elif not p.backend_ok:
        problems.append(f"creating {want} failed: {show(p.error or 'no error given', 200)}")
    if not problems:
        return res(PASS, expected, f"{want} backend created")
    fix = f"check NIXL_PLUGIN_DIR and the wheel flavour (nixl-cu12/cu13) in {c.d.nixl_venv}"
    if want.startswith("GDS"):
        fix += "; GDS backends need an NVIDIA GPU and libcufile: use the posix plugin on hosts without a GPU"
    return res(FAIL, expected, "; ".join(problems), fix)


@check("nixl.config")
def nixl_config(c: Context) -> Result:
    path = c.d.nixl_config_path
    expected = "an absolute path to a TOML file that parses"
    if not path.startswith("/"):
        return res(FAIL, expected, f"{show(path)} is relative: SGLang opens @path against the service's working "
                                  "directory", "set kvprov_nixl_config_path to an absolute path")
    toml = c.toml()
    tables = toml.get("plugin")
    n = len(tables) if isinstance(tables, dict) else 0
    return res(PASS, expected, f"{path}: {n} [plugin.*] table(s)")


@check("nixl.active_plugin")
def nixl_active_plugin(c: Context) -> Result:
    want = c.d.nixl_plugin
    expected = f"exactly one [plugin.*] table with active = true (a boolean): [plugin.{want}]"
    fix = f"{c.deploy('nixl')} (writes active = true, a TOML boolean, in [plugin.{want}] only)"
    if not c.d.nixl_config_path.startswith("/"):
        return res(SKIP, expected, "see nixl.config")
    tables = c.toml().get("plugin")
    if not isinstance(tables, dict) or not tables:
        return res(FAIL, expected, "no [plugin.<name>] table: SGLang finds no active plugin and crashes at start "
                                  "(UnboundLocalError)", fix)
    strings = [(name, t["active"]) for name, t in tables.items() if isinstance(t, dict)
               and isinstance(t.get("active"), str)]
    if strings:
        name, value = strings[0]
        return res(FAIL, expected, f"[plugin.{show(name, 40)}] active = {show(json.dumps(value), 40)} is a string, "
                                  "not a boolean: kvprov writes typed booleans (a string like \"ture\" or "
                                  "\"yes\" silently deactivates the plugin in SGLang)", fix)
    active = [name for name, t in tables.items() if isinstance(t, dict) and t.get("active") is True]
    if not active:
        return res(FAIL, expected, "no [plugin.*] table has active = true: SGLang crashes at its first start "
                                  "(UnboundLocalError)", fix)
    if len(active) > 1:
        return res(FAIL, expected, f"{len(active)} active tables ({show(', '.join(active), 80)}): SGLang takes the "
                                  "first, an accident of file order", fix)
    if active[0] != want:
        return res(FAIL, expected, f"[plugin.{show(active[0], 40)}] is active, the inventory says {want}", fix)
    return res(PASS, expected, f"[plugin.{want}] active = true")


@check("nixl.options")
def nixl_options(c: Context) -> Result:
    expected = "use_direct_io / l3_cleaner_enabled, where set, are booleans"
    if not c.d.nixl_config_path.startswith("/"):
        return res(SKIP, expected, "see nixl.config")
    toml = c.toml()
    problems, shown = [], []
    for key in ("use_direct_io", "l3_cleaner_enabled"):
        if key not in toml:
            continue
        value = toml[key]
        if isinstance(value, bool):
            shown.append(f"{key} = {json.dumps(value)}")
        else:
            problems.append(f"{key} = {show(json.dumps(value, default=str), 40)} is not a boolean: SGLang reads it "
                            "with bool(), so the string \"false\" means true")
    if problems:
        return res(FAIL, expected, "; ".join(problems),
                  f"write real booleans (kvprov_nixl_backend_options: {{use_direct_io: true}}), then "
                  f"{c.deploy('nixl')}")
    return res(PASS, expected, ", ".join(shown) or "not set (SGLang's defaults)")
