"""#39, item 2: the reading layer is one floor below the rules. kvprov's modules read an
inventory (kvprov.inventory, with ansible-playbook's options from kvprov.ansible_cli, the
argument specs from kvprov.specs and Vault from kvprov.vault), judge it (kvprov.check) and run
playbooks (kvprov.runner, with the desired states of kvprov.desired): each layer imports only
the layers below it, function-level imports included, so no import circle spans two of them
(it spanned inventory, ansible_cli, check/ and runner: 13 files)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

LAYERS = [  # bottom up; a module imports its own layer's and the layers' below
    ["kvprov.errors", "kvprov.paths", "kvprov.sinks", "kvprov.vault", "kvprov.specs"],
    ["kvprov.inventory_lint", "kvprov.ansible_cli", "kvprov.inventory"],
    ["kvprov.check"],  # the package: its rule modules refer to each other
    ["kvprov.runner"],
    ["kvprov.desired"],
]


def imports(module: str) -> set[str]:
    """The kvprov modules a module (or every module of a package) imports, anywhere in its code."""
    base = ROOT / module.replace(".", "/")
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    out = set()
    for path in files:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                name = node.module or ""
                if node.level:
                    name = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + [name]).rstrip(".")
                out |= {f"{name}.{a.name}" for a in node.names} | {name}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("kvprov.")}


def layer_of(module: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) for m in layer if module == m or module.startswith(m + ".")),
                None)


def test_each_layer_imports_only_the_layers_below_it():
    upward = []
    for i, layer in enumerate(LAYERS):
        for module in layer:
            upward += [f"{module} imports {m} (layer {layer_of(m)} > {i})" for m in sorted(imports(module))
                       if (layer_of(m) or 0) > i]
    assert not upward, "\n".join(upward)


def test_the_layer_test_sees_an_upward_import(tmp_path, monkeypatch):
    """The check itself: a function-level import of kvprov.check in kvprov.inventory is found."""
    monkeypatch.setattr("tests.unit.test_layers.ROOT", tmp_path)
    (tmp_path / "kvprov").mkdir()
    (tmp_path / "kvprov/inventory.py").write_text("def f():\n    from kvprov.check import values\n")
    assert "kvprov.check" in imports("kvprov.inventory") and layer_of("kvprov.check.values") == 2
