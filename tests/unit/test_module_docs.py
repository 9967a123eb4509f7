"""#39: the collection's modules document themselves as ansible-doc and validate-modules read
them: DOCUMENTATION is YAML whose every option has a description (a flow mapping with a comma
in its text once turned descriptions into null keys), attributes say check and diff mode, and
RETURN names what the module returns."""

from __future__ import annotations

import ast

import pytest
import yaml

from tests.conftest import ROOT

# kvprov_collect and kvprov_mount_state still lack attributes and RETURN (#39): both are mutation
# targets, and rewriting their text needs their mutation record rerun (benchmarks/mutation.py).
NOT_YET = {"kvprov_collect", "kvprov_mount_state"}
MODULES = sorted(p for p in (ROOT / "plugins/modules").glob("*.py") if p.stem not in NOT_YET)
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
    returned = yaml.safe_load(found.get("RETURN") or "null")
    assert isinstance(returned, dict) and returned, f"{path.stem}: no RETURN"
    assert all({"description", "returned", "type"} <= set(v) for v in returned.values()), returned
    assert isinstance(yaml.safe_load(found["EXAMPLES"]), list)
