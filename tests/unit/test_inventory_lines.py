"""Var.line_of: the line of a nested element of a variable, for messages that point at the
offending list item or key (YAML parsed by PyYAML's composer, as the inventory loader does)."""

import yaml

from kvprov.inventory import Origin, Var

TEXT = """\
kvprov_engine_instances:
  - name: a
    port: 8000
  - name: b
    port: 8001
    storage_dir: /x
other: 1
"""


def var() -> Var:
    root = yaml.compose(TEXT)
    key, node = root.value[0]
    return Var(key.value, yaml.safe_load(TEXT)[key.value], Origin("inv.yml", 1), node)


def test_nested_elements_have_their_own_line():
    v = var()
    assert v.line_of() == 1
    assert v.line_of(0) == 2 and v.line_of(1) == 4
    assert v.line_of(1, "port") == 5 and v.line_of(1, "storage_dir") == 6 and v.line_of(0, "port") == 3


def test_a_missing_step_stops_at_the_last_element_found():
    v = var()
    assert v.line_of(1, "nope", "port") == 4  # not the port of item 1 (line 5)
    assert v.line_of(5) == 1 and v.line_of("name") == 1
    assert v.line_of(0, "name", "deeper") == 2
    assert Var("x", 1, Origin("f", 9)).line_of(0, "k") == 9  # no YAML node: the variable's line


def test_a_step_past_the_end_or_of_the_wrong_kind_stops_there():
    v = var()
    assert v.line_of(2) == 1  # the list has items 0 and 1
    assert v.line_of("name", 1) == 1  # a key on a list: the later index is not looked up
