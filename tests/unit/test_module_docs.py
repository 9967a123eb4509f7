"""#39: the collection's modules document themselves as ansible-doc and validate-modules read
them: DOCUMENTATION is YAML whose every option has a description (a flow mapping with a comma
in its text once turned descriptions into null keys), attributes say check and diff mode, and
RETURN names what the module returns."""

from __future__ import annotations

import ast
import importlib.util

import pytest
import yaml

from tests.conftest import ROOT

MODULES = sorted((ROOT / "plugins/modules").glob("*.py"))
OPTION_KEYS = {"description", "type", "required", "default", "choices", "elements", "aliases", "suboptions",
               "no_log", "version_added"}


def strings(path) -> dict[str, str]:
    """The module's top-level string constants (DOCUMENTATION, EXAMPLES, RETURN), without importing it."""
    tree = ast.parse(path.read_text())
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_every_module_documents_its_options_attributes_and_return(path):
    found = strings(path)
    doc = yaml.safe_load(found["DOCUMENTATION"])
    assert doc["module"] == path.stem
    for name, option in doc.get("options", {}).items():
        assert isinstance(name, str) and isinstance(option, dict), (name, option)
        description = option.get("description")
        assert isinstance(description, (str, list)) and description, (path.stem, name, option)
        assert set(option) <= OPTION_KEYS and None not in option.values(), (path.stem, name, option)
    assert {"check_mode", "diff_mode", "platform"} <= set(doc.get("attributes", {})), path.stem
    assert all(a.get("support") in ("full", "partial", "none") for k, a in doc["attributes"].items() if k != "platform")
    assert all(a.get("details") for a in doc["attributes"].values() if a.get("support") == "partial"), path.stem
    platform = doc["attributes"]["platform"]  # validate-modules wants both
    assert platform.get("support") in ("full", "partial", "none", "N/A") and platform.get("platforms"), path.stem
    returned = yaml.safe_load(found.get("RETURN") or "null")
    assert isinstance(returned, dict) and returned, f"{path.stem}: no RETURN"
    assert all({"description", "returned", "type"} <= set(v) for v in returned.values()), returned
    assert isinstance(yaml.safe_load(found["EXAMPLES"]), list)


def test_kvprov_collect_documents_its_own_argument_spec():
    """kvprov_collect parses its JSON arguments itself (SPEC), without AnsibleModule, so
    validate-modules cannot compare its options with an argument spec (its waived import-error,
    tests/sanity/ignore-2.19.txt): this does, type, default and required."""
    spec = importlib.util.spec_from_file_location("kvprov_collect_docs", ROOT / "plugins/modules/kvprov_collect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    options = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert set(options) == set(module.SPEC)
    for name, (kind, default) in module.SPEC.items():
        option = options[name]
        assert option["type"] == kind.__name__, name
        assert option.get("default") == default, name
        assert option.get("required", False) == (name == "desired"), name
