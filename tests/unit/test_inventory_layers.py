"""A variable set in two of the six places an inventory directory can set it: the value is
Ansible's own (VariableManager), and the origin kvprov names is the file and line of the
place that won, for every pair (a review planted host_vars/ below the inventory's own host
vars: the value stayed right, the origin named the wrong file)."""

from itertools import combinations

import pytest

from kvprov import inventory as I

# lowest first, as Ansible ranks them
LAYERS = ["inv_all", "inv_group", "gv_all", "gv_group", "inv_host", "hv_host"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    d = tmp_path_factory.mktemp("layers")
    pairs = list(combinations(LAYERS, 2))
    lines: dict[str, list[str]] = {layer: [] for layer in LAYERS}
    for low, high in pairs:
        for layer in (low, high):
            lines[layer] += [f"v_{low}_{high}: {layer}", f"s_{low}_{high}: same"]  # s_: equal values
    lines["inv_all"].append("only_inv_all: x")
    lines["hv_host"].append("only_hv_host: x")

    def block(layer: str, indent: int) -> str:
        return "".join(" " * indent + f"{line}\n" for line in lines[layer])

    (d / "inv.yml").write_text("all:\n  vars:\n" + block("inv_all", 4) + "  children:\n    gpu_nodes:\n      vars:\n"
                               + block("inv_group", 8) + "      hosts:\n        gpu1:\n" + block("inv_host", 10))
    (d / "group_vars").mkdir()
    (d / "group_vars/all.yml").write_text(block("gv_all", 0))
    (d / "group_vars/gpu_nodes.yml").write_text(block("gv_group", 0))
    (d / "host_vars").mkdir()
    (d / "host_vars/gpu1.yml").write_text(block("hv_host", 0))
    [host] = I.load(str(d / "inv.yml")).hosts
    return d, host


def where(d, layer: str, name: str) -> tuple[str, int]:
    path = {"gv_all": "group_vars/all.yml", "gv_group": "group_vars/gpu_nodes.yml",
            "hv_host": "host_vars/gpu1.yml"}.get(layer, "inv.yml")
    text = (d / path).read_text().splitlines()
    if path == "inv.yml":  # the name's line inside that layer's block
        start = {"inv_all": "  vars:", "inv_group": "      vars:", "inv_host": "        gpu1:"}[layer]
        first = text.index(start)
        return str(d / path), next(i for i, line in enumerate(text[first:], first + 1)
                                   if line.strip().startswith(f"{name}:"))
    return str(d / path), next(i for i, line in enumerate(text, 1) if line.startswith(f"{name}:"))


@pytest.mark.parametrize("low, high", list(combinations(LAYERS, 2)))
def test_the_higher_place_wins_and_is_named(loaded, low, high):
    d, host = loaded
    for name, value in ((f"v_{low}_{high}", high), (f"s_{low}_{high}", "same")):
        var = host.vars[name]
        assert var.value == value
        assert (var.origin.file, var.origin.line) == where(d, high, name), name


def test_a_variable_set_once_is_named_where_it_is_set(loaded):
    d, host = loaded
    for name, layer in (("only_inv_all", "inv_all"), ("only_hv_host", "hv_host")):
        assert (host.vars[name].origin.file, host.vars[name].origin.line) == where(d, layer, name)
